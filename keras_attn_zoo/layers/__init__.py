"""Keras layers of the zoo: one public layer per file."""

from keras_attn_zoo.layers.bahdanau_attention import BahdanauAttention
from keras_attn_zoo.layers.branched_weighted_attention import BranchedWeightedAttention
from keras_attn_zoo.layers.embedding import SharedEmbedding
from keras_attn_zoo.layers.gaussian_mixture_cross_attention import (
    GaussianMixtureCrossAttention,
)
from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
from keras_attn_zoo.layers.transformer_blocks import FeedForward
from keras_attn_zoo.layers.transformer_blocks import TransformerDecoderBlock
from keras_attn_zoo.layers.transformer_blocks import TransformerEncoderBlock
from keras_attn_zoo.models.eager_translator import EagerEmbedding
from keras_attn_zoo.models.eager_translator import EagerLSTMTranslator

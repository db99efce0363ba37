"""Scoring and the attention analyses."""

from keras_attn_zoo.evaluation.scores import corpus_scores
from keras_attn_zoo.evaluation.attention import attention_maps
from keras_attn_zoo.evaluation.plots import plot_alignment

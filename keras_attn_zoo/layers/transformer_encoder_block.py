"""`TransformerEncoderBlock`: self-attention and feed-forward, any attention layer."""

import keras

from keras_attn_zoo.layers.transformer_blocks import TransformerBlock
from keras_attn_zoo.layers.transformer_blocks import attend_with_maps
from keras_attn_zoo.layers.transformer_blocks import named_maps


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class TransformerEncoderBlock(TransformerBlock):
    """Self-attention + feed-forward, each in a residual with layer norm.

    Args:
        self_attention: an attention layer (the zoo's attention protocol).
        intermediate_dim: inner width of the feed-forward network.

    Keyword Args:
        dropout: residual dropout.
        activation: feed-forward activation.
        norm_first: pre-norm (`True`) or the original post-norm (`False`).
        use_feed_forward: `False` when the attention layer has its own FFNs.
        activation_dropout: dropout after the feed-forward activation
            (fairseq's name; default 0: none).
        **kwargs: the rest go to `keras.layers.Layer` (`name`, `dtype`).

    Call arguments:
        x: `[B, S, d]`.
        padding_mask: boolean `[B, S]`, `True` for real tokens.
        attention_inputs: dict of extra inputs for the attention layer.
        training: Python bool.
        return_attention: also return `{"self": [B, h, S, S], ...}` (see
            `layers.transformer_blocks`).

    Examples:
        >>> from keras_attn_zoo.layers import MultiHeadAttention
        >>> block = TransformerEncoderBlock(MultiHeadAttention(2, 8), intermediate_dim=32)
        >>> x = keras.random.normal((2, 5, 16))
        >>> mask = keras.ops.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "bool")
        >>> output, maps = block(x, padding_mask=mask, return_attention=True)
        >>> tuple(output.shape), tuple(maps["self"].shape)
        ((2, 5, 16), (2, 2, 5, 5))

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017, section 3.1.
    """

    def __init__(self, self_attention, intermediate_dim, **kwargs):
        super().__init__(intermediate_dim, **kwargs)
        if isinstance(self_attention, dict):
            self_attention = keras.saving.deserialize_keras_object(self_attention)
        self.self_attention = self_attention
        self.self_attention_norm = self._norm("self_attention_norm")

    def build(self, x_shape):
        self._build_attention(self.self_attention, x_shape)
        self.self_attention_norm.build(x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, attention_inputs=None, training=None,
             return_attention=False):
        extra = attention_inputs or {}
        x, maps = self._residual(
            x,
            self.self_attention_norm,
            lambda h: attend_with_maps(self.self_attention, return_attention, h,
                              context_mask=padding_mask, training=training, **extra),
            training,
        )
        x = self._feed_forward_part(x, training)
        return (x, named_maps(maps, "self")) if return_attention else x

    def get_config(self):
        config = super().get_config()
        config["self_attention"] = keras.saving.serialize_keras_object(
            self.self_attention
        )
        return config

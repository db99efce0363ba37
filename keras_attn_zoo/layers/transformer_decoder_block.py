"""`TransformerDecoderBlock`: causal self-, cross-attention and feed-forward."""

import keras

from keras_attn_zoo.layers.transformer_blocks import TransformerBlock
from keras_attn_zoo.layers.transformer_blocks import attend_with_maps
from keras_attn_zoo.layers.transformer_blocks import named_maps


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class TransformerDecoderBlock(TransformerBlock):
    """Causal self-attention, cross-attention and feed-forward.

    Args:
        self_attention: causal self-attention layer (attention protocol).
        cross_attention: cross-attention layer over the encoder output.
        intermediate_dim: inner width of the feed-forward network.

    Keyword Args:
        **kwargs: those of `TransformerEncoderBlock` (`dropout`, `activation`,
            `norm_first`, `use_feed_forward`, `activation_dropout`) and of
            `keras.layers.Layer` (`name`, `dtype`).

    Call arguments:
        x: `[B, T, d]` decoder input.
        memory: `[B, S, d]` encoder output.
        memory_mask: boolean `[B, S]`, `True` for real source tokens.
        self_attention_inputs: dict of extra inputs for the self-attention.
        cross_attention_inputs: dict of extra inputs for the cross-attention.
        training: Python bool.
        return_attention: also return `{"self": [B, h, T, T], "cross": [B, h,
            T, S], ...}` (see `layers.transformer_blocks`).

    `initial_cache(batch_size, max_length, memory)` and `step(x, step, cache,
    memory_mask)` run one target position at a time with the attention
    layers' caches (incremental decoding).

    Examples:
        >>> from keras_attn_zoo.layers import MultiHeadAttention
        >>> block = TransformerDecoderBlock(
        ...     MultiHeadAttention(2, 8), MultiHeadAttention(2, 8), intermediate_dim=32)
        >>> target, memory = keras.random.normal((2, 4, 16)), keras.random.normal((2, 6, 16))
        >>> output, maps = block(target, memory, return_attention=True)
        >>> tuple(output.shape), tuple(maps["cross"].shape)
        ((2, 4, 16), (2, 2, 4, 6))

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017, section 3.1.
    """

    def __init__(self, self_attention, cross_attention, intermediate_dim, **kwargs):
        super().__init__(intermediate_dim, **kwargs)
        if isinstance(self_attention, dict):
            self_attention = keras.saving.deserialize_keras_object(self_attention)
        if isinstance(cross_attention, dict):
            cross_attention = keras.saving.deserialize_keras_object(cross_attention)
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.self_attention_norm = self._norm("self_attention_norm")
        self.cross_attention_norm = self._norm("cross_attention_norm")

    def build(self, x_shape, memory_shape=None):
        memory_shape = memory_shape or x_shape
        self._build_attention(self.self_attention, x_shape)
        self.self_attention_norm.build(x_shape)
        self._build_attention(self.cross_attention, x_shape, memory_shape)
        self.cross_attention_norm.build(x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def call(
        self,
        x,
        memory,
        memory_mask=None,
        self_attention_inputs=None,
        cross_attention_inputs=None,
        training=None,
        return_attention=False,
    ):
        self_extra = self_attention_inputs or {}
        cross_extra = cross_attention_inputs or {}
        x, self_maps = self._residual(
            x,
            self.self_attention_norm,
            lambda h: attend_with_maps(self.self_attention, return_attention, h, causal=True,
                              training=training, **self_extra),
            training,
        )
        x, cross_maps = self._residual(
            x,
            self.cross_attention_norm,
            lambda h: attend_with_maps(self.cross_attention, return_attention, h, memory,
                              context_mask=memory_mask, training=training,
                              **cross_extra),
            training,
        )
        x = self._feed_forward_part(x, training)
        if not return_attention:
            return x
        return x, {**named_maps(self_maps, "self"), **named_maps(cross_maps, "cross")}

    def initial_cache(self, batch_size, max_length, memory):
        """The self- and cross-attention caches for `max_length` steps over `memory`."""
        return {
            "self": self.self_attention.initial_cache(batch_size, max_length),
            "cross": self.cross_attention.initial_cache(
                batch_size, max_length, context=memory
            ),
        }

    def step(
        self,
        x,
        step,
        cache,
        memory_mask,
        self_attention_inputs=None,
        cross_attention_inputs=None,
    ):
        """One target position `[B, 1, d]`; returns `(x, cache, cross_weights)`."""
        new_cache = {}

        def self_part(h):
            out, new_cache["self"], _ = self.self_attention.step(
                h, step, cache["self"], **(self_attention_inputs or {})
            )
            return out, None

        def cross_part(h):
            out, new_cache["cross"], weights = self.cross_attention.step(
                h, step, cache["cross"], context_mask=memory_mask,
                **(cross_attention_inputs or {}),
            )
            return out, weights

        x, _ = self._residual(x, self.self_attention_norm, self_part, False)
        x, weights = self._residual(x, self.cross_attention_norm, cross_part, False)
        x = self._feed_forward_part(x, False)
        return x, new_cache, weights

    def get_config(self):
        config = super().get_config()
        config["self_attention"] = keras.saving.serialize_keras_object(
            self.self_attention
        )
        config["cross_attention"] = keras.saving.serialize_keras_object(
            self.cross_attention
        )
        return config

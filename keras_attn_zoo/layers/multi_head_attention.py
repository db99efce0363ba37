"""Scaled dot-product multi-head attention with an incremental-decoding cache."""

import math

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import attend_values
from keras_attn_zoo.layers.attention_utils import combine_key_mask
from keras_attn_zoo.layers.attention_utils import axis_size
from keras_attn_zoo.layers.attention_utils import empty_self_attention_cache
from keras_attn_zoo.layers.attention_utils import masked_softmax
from keras_attn_zoo.layers.attention_utils import sequence_mask
from keras_attn_zoo.layers.attention_utils import write_self_attention_step
from keras_attn_zoo.layers.headed_attention import HeadedAttention
from keras_attn_zoo.layers.heads_projection import HeadsProjection


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class MultiHeadAttention(HeadedAttention):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017).

    Unlike `keras.layers.MultiHeadAttention` it exposes the zoo's attention
    protocol used by the encoder/decoder blocks and by incremental decoding:
    `call` for teacher forcing, `initial_cache` + `step` for one target
    position at a time, with keys/values of earlier steps (self-attention) or of
    the source (cross-attention) projected once and kept in the cache.

    Args:
        num_heads: number of attention heads `h`.
        key_dim: size of each head `d_k`; the output has the query's width.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.

    Call arguments:
        query: `[B, T, d]`.
        context: `[B, S, d]` keys/values; `None` means self-attention.
        context_mask: boolean `[B, S]`, `True` for real (unpadded) keys.
        causal: mask keys after each query (decoder self-attention).
        training: Python bool, enables dropout.
        return_attention: also return the weights `[B, h, T, S]` (float32).

    Examples:
        >>> layer = MultiHeadAttention(num_heads=2, key_dim=8)
        >>> x = keras.random.normal((2, 5, 16))
        >>> tuple(layer(x, causal=True).shape)
        (2, 5, 16)

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    """

    def __init__(self, num_heads, key_dim, dropout=0.0, use_bias=True, **kwargs):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias,
                         **kwargs)

        def projection(name):
            return HeadsProjection(num_heads, key_dim, use_bias, name=name,
                                   dtype=self.dtype_policy)

        self.query_projection = projection("query")
        self.key_projection = projection("key")
        self.value_projection = projection("value")

    def build(self, query_shape, context_shape=None):
        model_dim = query_shape[-1]
        context_dim = model_dim if context_shape is None else context_shape[-1]
        self._build_input_projections(query_shape, context_dim)
        self._build_output_projection(model_dim)
        self.built = True

    def _build_input_projections(self, query_shape, context_dim):
        """Builds the query/key/value projections `d -> [h, d_k]`."""
        self.query_projection.build(query_shape)
        self.key_projection.build((None, None, context_dim))
        self.value_projection.build((None, None, context_dim))

    def _attention_weights(self, query_heads, key_heads, mask):
        """Scaled dot-product weights `[B, h, T, S]` (float32)."""
        scale = 1.0 / math.sqrt(self.key_dim)
        scores = ops.einsum("bthk,bshk->bhts", query_heads * scale, key_heads)
        return masked_softmax(scores, mask)

    def _combine_heads(self, heads, training):
        """Attended heads `[B, T, h, d_k]` -> output `[B, T, d]`.

        The output projection here; subclasses may combine heads otherwise.
        """
        del training
        return self.output_projection(heads)

    def _attend(self, query_heads, key_heads, value_heads, mask, training):
        weights = self._attention_weights(query_heads, key_heads, mask)
        heads = attend_values(weights, value_heads, self._dropout_layer, training)
        return self._combine_heads(heads, training), weights

    def call(
        self,
        query,
        context=None,
        context_mask=None,
        causal=False,
        training=None,
        return_attention=False,
    ):
        if context is None:
            context = query
        mask = sequence_mask(
            axis_size(query, 1), axis_size(context, 1), context_mask, causal
        )
        output, weights = self._attend(
            self.query_projection(query),
            self.key_projection(context),
            self.value_projection(context),
            mask,
            training,
        )
        return (output, weights) if return_attention else output

    # ---- incremental decoding -------------------------------------------------

    def initial_cache(self, batch_size, max_length, context=None):
        """Cache for `step`.

        Self-attention (`context=None`): empty key/value buffers that `step`
        grows by one entry per call (`max_length` is not needed to allocate
        them). Cross-attention: the source keys/values, projected once.
        """
        if context is not None:
            return {
                "key": self.key_projection(context),
                "value": self.value_projection(context),
            }
        del max_length
        empty = empty_self_attention_cache(
            batch_size, self.num_heads, self.key_dim, self.compute_dtype)
        return {"key": empty, "value": empty}

    def step(self, query, step, cache, context_mask=None):
        """Attends from one query position `[B, 1, d]` at time `step`.

        With `context_mask=None` the layer acts as causal self-attention: it
        writes this step's key/value into the cache and attends to steps
        `0..step`. Otherwise it is cross-attention over the cached source.

        Returns:
            `(output [B, 1, d], cache, weights [B, h, 1, S])`.
        """
        query_heads = self.query_projection(query)
        if context_mask is None:
            cache, mask = write_self_attention_step(cache, step, {
                "key": self.key_projection(query),
                "value": self.value_projection(query),
            })
        else:
            mask = combine_key_mask(context_mask)
        output, weights = self._attend(
            query_heads, cache["key"], cache["value"], mask, training=False
        )
        return output, cache, weights

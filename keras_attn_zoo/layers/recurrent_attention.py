"""Recurrent Attention (RAN): learned attention matrices refined layer by layer.

Two layers work together: `RecurrentAttentionMatrices` (its own file), one
per stack (encoder or decoder self-attention), holds the Initial Attention
Matrices `A0` `(h, n, n)` and the one Recurrent Transition shared by all heads
and layers, and computes `A_1 .. A_L` once per forward pass; this file's
`RecurrentAttention`, one per block, attends with its layer's matrix:
`softmax(A_l[:, :T, :S]) . V_l`, with only value and output projections.
"""

import keras
from keras import ops

from keras_attn_zoo.layers.fixed_pattern_attention import FixedPatternAttention


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class RecurrentAttention(FixedPatternAttention):
    """RAN self-attention: `softmax(A_l[:, :T, :S]) . V_l` for one layer.

    There are no query or key projections: the unnormalised scores are this
    layer's recurrently refined attention matrix `A_l`, the same for every
    sentence, computed once by the stack's `RecurrentAttentionMatrices` and
    passed in as `attention_matrix`. Padded keys are masked, the decoder is
    causally masked, the softmax is float32, then attention dropout (paper:
    0.2), a per-layer value projection and an output projection.

    While decoding, `attention_matrix` is the stack's output for the whole
    decoding length (computed once per call, kept in `state["shared"]`) and
    step `t` uses its row `t` over keys `0..t` with a value cache.

    Args:
        num_heads: heads `h` (must match the stack's).
        key_dim: per-head value size `d_v`.
        dropout: attention dropout (the paper uses 0.2 for RAN).
        use_bias: biases of the value and output projections.

    Call arguments:
        query: `[B, T, d]`.
        context: must be `None` (RAN is self-attention).
        context_mask: boolean `[B, T]`, `True` for real tokens.
        causal: decoder self-attention.
        training: Python bool, enables dropout.
        return_attention: also return the weights `[B, h, T, T]` (float32).
        attention_matrix: `A_l` `[h, >= T, >= T]` (rows and keys beyond `T`
            are ignored).

    Examples:
        >>> from keras_attn_zoo.layers import RecurrentAttentionMatrices
        >>> stack = RecurrentAttentionMatrices(num_heads=2, max_length=16, num_layers=1)
        >>> layer = RecurrentAttention(num_heads=2, key_dim=8)
        >>> x = keras.random.normal((4, 10, 16))
        >>> matrix = stack(keras.ops.zeros((4, 10), "int32"))[0]["attention_matrix"]
        >>> tuple(layer(x, causal=True, attention_matrix=matrix).shape)
        (4, 10, 16)

    References:
        Zeng et al., "Recurrent Attention for Neural Machine Translation",
        EMNLP 2021.
    """

    def __init__(self, num_heads, key_dim, dropout=0.2, use_bias=True, **kwargs):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias,
                         **kwargs)

    def call(
        self,
        query,
        context=None,
        context_mask=None,
        causal=False,
        training=None,
        return_attention=False,
        attention_matrix=None,
    ):
        if context is not None:
            raise ValueError("RecurrentAttention is self-attention: pass no context.")
        return self._attend_sequence(
            query, None, context_mask, causal, training, return_attention,
            attention_matrix=attention_matrix,
        )

    def _pattern(self, query_start, query_length, key_length, attention_matrix=None):
        if attention_matrix is None:
            raise ValueError(
                "RecurrentAttention needs its layer's `attention_matrix` (from "
                "RecurrentAttentionMatrices)."
            )
        return ops.slice(
            attention_matrix, (0, query_start, 0),
            (self.num_heads, query_length, key_length),
        )

    def step(self, query, step, cache, context_mask=None, attention_matrix=None):
        if context_mask is not None:
            raise ValueError("RecurrentAttention is self-attention: no context_mask "
                             "in step.")
        return super().step(query, step, cache, attention_matrix=attention_matrix)

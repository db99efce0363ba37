"""Helpers shared by every attention layer of the zoo.

All scores are normalised in float32 so that mixed precision (float16 / bfloat16)
never overflows, and masked positions get a large *finite* negative so a fully
masked row gives a uniform distribution instead of NaN.
"""

import keras
from keras import ops

# Finite, representable in float32; scores are cast to float32 before masking.
MASK_VALUE = -1e9


def masked_softmax(scores, mask=None):
    """Softmax over the last axis in float32.

    Args:
        scores: logits `[..., keys]` of any float dtype.
        mask: boolean tensor broadcastable to `scores`; `False` marks keys that
            must get weight 0.

    Returns:
        float32 weights summing to one over the unmasked keys.
    """
    scores = ops.cast(scores, "float32")
    if mask is not None:
        scores = ops.where(mask, scores, ops.full_like(scores, MASK_VALUE))
    return ops.softmax(scores, axis=-1)


def causal_mask(query_length, key_length, query_offset=0):
    """Boolean `[query_length, key_length]` mask: query i sees keys j <= i + offset."""
    query_positions = ops.arange(query_length)[:, None] + query_offset
    key_positions = ops.arange(key_length)[None, :]
    return key_positions <= query_positions


def padding_mask_from_ids(ids, padding_id=0):
    """`True` where `ids` holds a real token."""
    return ops.not_equal(ids, padding_id)


def combine_key_mask(key_mask=None, causal=None):
    """Builds a `[batch or 1, 1, queries or 1, keys]` mask for `[B, h, T, S]` scores.

    Args:
        key_mask: boolean `[B, S]`, `True` for real keys.
        causal: boolean `[T, S]` causal mask or None.
    """
    mask = None
    if key_mask is not None:
        mask = ops.cast(key_mask, "bool")[:, None, None, :]
    if causal is not None:
        causal = causal[None, None, :, :]
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask


def sequence_mask(query_length, key_length, key_mask=None, causal=False):
    """The mask of a teacher-forced `call`, `[batch or 1, 1, queries or 1, keys]`.

    Args:
        query_length: number of queries `T`.
        key_length: number of keys `S`.
        key_mask: boolean `[B, S]`, `True` for real keys, or None.
        causal: also hide keys after each query (decoder self-attention).
    """
    causal_part = causal_mask(query_length, key_length) if causal else None
    return combine_key_mask(key_mask, causal_part)


def write_self_attention_step(cache, step, updates):
    """Causal self-attention at decoding time `step`: append this step's entries.

    Self-attention caches grow by one time step per decoding step (they start
    empty, `[B, 0, ...]`): a step then costs O(current length) in attention,
    cache writes and the beam search's reordering gathers, instead of
    O(maximum length) with fixed-size buffers, and every cached key is visible
    (the causal mask is implicit). The searches declare the time axis of the
    state as variable (`decoding.common.loop_shape_invariants`).

    Args:
        cache: dict of batch-first buffers `[B, step, ...]`.
        step: the time index being decoded (the buffers' current length).
        updates: dict naming this step's `[B, 1, ...]` entry for each buffer.

    Returns:
        `(cache, mask)`: the buffers of `updates` with the entry appended, and
        `None` (no key is hidden).
    """
    del step  # implied by the buffers' length
    cache = {
        name: ops.concatenate([cache[name], ops.cast(update, cache[name].dtype)], axis=1)
        for name, update in updates.items()
    }
    return cache, None


def empty_self_attention_cache(batch_size, num_heads, key_dim, dtype):
    """A `[B, 0, h, k]` buffer for `write_self_attention_step` to grow."""
    return ops.zeros((batch_size, 0, num_heads, key_dim), dtype=dtype)


def attend_values(weights, values, dropout_layer, training=None):
    """Attention-weighted sum of values, `[B, T, h, d_v]` in the values' dtype.

    Args:
        weights: float32 `[B, h, T, S]` attention weights.
        values: `[B, S, h, d_v]` projected values.
        dropout_layer: attention dropout, applied to the weights first.
        training: Python bool, enables dropout.
    """
    dropped = dropout_layer(weights, training=training)
    return ops.einsum("bhts,bshk->bthk", ops.cast(dropped, values.dtype), values)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class HeadsProjection(keras.layers.Layer):
    """`[B, T, d] -> [B, T, h, k]`: one `d x (h k)` matrix, split into heads.

    Why not `EinsumDense("btd,dhk->bthk")`: Keras counts a 3-D kernel's first
    axis into both Glorot fans, which makes the initial weights about 6x too
    small at `d=256, h=4` (attention starts uniform and stays so for hundreds of
    steps), and with static shapes the TensorFlow backend lowers that einsum to
    a broadcasting batched matmul whose kernel gradient is slow. A flat 2-D
    matmul has the textbook `Glorot(d, h k)` initialisation and is one GEMM.

    Args:
        num_heads: `h`.
        key_dim: `k`, the size of each head.
        use_bias: add a bias.
    """

    def __init__(self, num_heads, key_dim, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.use_bias = use_bias

    def build(self, input_shape):
        width = self.num_heads * self.key_dim
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], width),
            initializer="glorot_uniform")
        self.bias = (self.add_weight(name="bias", shape=(width,), initializer="zeros")
                     if self.use_bias else None)
        self.built = True

    def call(self, inputs):
        outputs = flat_dense(inputs, self.kernel, self.bias)
        return ops.reshape(
            outputs, tuple(ops.shape(inputs)[:-1]) + (self.num_heads, self.key_dim))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_heads, self.key_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "key_dim": self.key_dim,
                       "use_bias": self.use_bias})
        return config


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class HeadsOutput(keras.layers.Layer):
    """`[B, T, h, k] -> [B, T, d]`: concatenated heads times one `(h k) x d` matrix.

    The counterpart of `HeadsProjection` (same reasons for a 2-D kernel).

    Args:
        output_dim: `d`.
        use_bias: add a bias.
    """

    def __init__(self, output_dim, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.output_dim = output_dim
        self.use_bias = use_bias

    def build(self, input_shape):
        width = input_shape[-2] * input_shape[-1]
        self.kernel = self.add_weight(
            name="kernel", shape=(width, self.output_dim),
            initializer="glorot_uniform")
        self.bias = (self.add_weight(name="bias", shape=(self.output_dim,),
                                     initializer="zeros")
                     if self.use_bias else None)
        self.built = True

    def call(self, inputs):
        merged = ops.reshape(
            inputs, tuple(ops.shape(inputs)[:-2]) + (self.kernel.shape[0],))
        return flat_dense(merged, self.kernel, self.bias)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-2]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update({"output_dim": self.output_dim, "use_bias": self.use_bias})
        return config


def flat_dense(inputs, kernel, bias=None):
    """`inputs[..., i] @ kernel[i, o] (+ bias)` as one 2-D matmul in the inputs' dtype."""
    shape = ops.shape(inputs)
    rows = ops.reshape(inputs, (-1, kernel.shape[0]))
    outputs = ops.matmul(rows, ops.cast(kernel, inputs.dtype))
    if bias is not None:
        outputs = outputs + ops.cast(bias, inputs.dtype)
    return ops.reshape(outputs, tuple(shape[:-1]) + (kernel.shape[1],))


class HeadedAttention(keras.layers.Layer):
    """Base of the zoo's multi-head attention layers: the arguments they share.

    Stores `num_heads`, `key_dim`, `dropout` and `use_bias` (and returns them
    from `get_config`) and creates the attention-dropout layer
    `_dropout_layer`; `_build_output_projection(model_dim)` creates the
    usual output projection from the concatenated heads. Subclasses add the
    other projections and the protocol's `call` / `initial_cache` / `step`.

    Args:
        num_heads: number of attention heads `h`.
        key_dim: size of each head.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
    """

    def __init__(self, num_heads, key_dim, dropout=0.0, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self._dropout_layer = keras.layers.Dropout(dropout)

    def _build_output_projection(self, model_dim):
        """Creates and builds `output_projection`, heads `[h, key_dim]` -> `d`."""
        self.output_projection = HeadsOutput(
            model_dim, use_bias=self.use_bias, name="output", dtype=self.dtype_policy)
        self.output_projection.build((None, None, self.num_heads, self.key_dim))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
            }
        )
        return config

"""Functions shared by every attention layer of the zoo (the layers have their own files).

All scores are normalised in float32 so that mixed precision (float16 / bfloat16)
never overflows, and masked positions get a large *finite* negative so a fully
masked row gives a uniform distribution instead of NaN.
"""

from keras import ops

# Finite, representable in float32; scores are cast to float32 before masking.
MASK_VALUE = -1e9


def axis_size(x, axis):
    """`x`'s size along `axis`: a Python int when static, else a scalar tensor.

    `ops.shape(x)[axis]` alone slices every unknown dim of `x` on TensorFlow
    (graph ops that each cost tracing time, and run time inside a loop).
    """
    static = x.shape[axis]
    return static if static is not None else ops.shape(x)[axis]


def leading_dims(x, count):
    """The first `count` dims of `x` as a reshape target: the static ones as ints
    and, when a single one is unknown, -1 for it (no shape ops at all; not
    beside a static 0, where a reshape cannot infer -1)."""
    static = tuple(x.shape[:count])
    if sum(size is None for size in static) <= 1 and 0 not in static:
        return tuple(-1 if size is None else size for size in static)
    return tuple(ops.shape(x)[:count])


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


def flat_dense(inputs, kernel, bias=None, output_tail=None):
    """`inputs[..., i] @ kernel[i, o] (+ bias)` as one 2-D matmul in the inputs' dtype.

    `output_tail`: the trailing dims the `o` outputs are reshaped to (default
    `(o,)`), so that a projection into heads reshapes once. Keras' `Dense`
    on a 3-D input (a `tensordot`) computes the same matmul with about twice
    the graph ops: each op costs tracing time and, in a decoding loop, time
    at every step.
    """
    rows = ops.reshape(inputs, (-1, kernel.shape[0]))
    outputs = ops.matmul(rows, ops.cast(kernel, inputs.dtype))
    if bias is not None:
        outputs = outputs + ops.cast(bias, inputs.dtype)
    tail = tuple(output_tail) if output_tail is not None else (kernel.shape[1],)
    return ops.reshape(outputs, leading_dims(inputs, len(inputs.shape) - 1) + tail)

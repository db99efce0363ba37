"""Helpers shared by every attention layer of the zoo.

All scores are normalised in float32 so that mixed precision (float16 / bfloat16)
never overflows, and masked positions get a large *finite* negative so a fully
masked row gives a uniform distribution instead of NaN.
"""

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


def one_hot_write(buffer, step, update):
    """Writes `update` `[B, 1, ...]` at time index `step` of `buffer` `[B, T, ...]`.

    A one-hot blend instead of `slice_update` keeps the exported decoding graph
    free of XLA-only ops (a server without XLA kernels can still run it).
    """
    length = ops.shape(buffer)[1]
    selector = ops.cast(ops.equal(ops.arange(length), step), buffer.dtype)
    selector = ops.reshape(selector, (1, -1) + (1,) * (len(buffer.shape) - 2))
    return buffer * (1 - selector) + ops.cast(update, buffer.dtype) * selector

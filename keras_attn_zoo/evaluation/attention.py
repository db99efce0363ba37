"""Getting the attention weights out of every kind of zoo model.

`attention_maps(model, source_ids, target_ids)` runs one teacher-forced pass
and returns the model's attention as a dict of named float32 NumPy arrays
`[layers, batch, heads, queries, keys]`, or `None` for a model that has no
attention weights (the eager translator). The names:

* ``"cross"``: decoder-to-source attention, `[L, B, h, T, S]`, for every
  Transformer-family model and for RNNsearch (`L = h = 1`: Bahdanau's
  alignment). For the GMM model it is the fused weights gamma.
* ``"encoder_self"`` `[L, B, h, S, S]` and ``"decoder_self"`` `[L, B, h, T,
  T]`: self-attention of the Transformer family (RAN's recurrent matrices
  after slicing, masking and softmax; the baselines' fixed patterns; the
  Weighted Transformer's branches as "heads").
* GMM only: ``"cross_dot_product"`` (alpha) and ``"cross_mixture"`` (beta),
  `[L, B, h, T, S]`, and ``"gmm_gate"`` `[L, B, h, T]` (one value per query,
  not per key). Decoder layers without a mixture (``gmm_layers`` not "all")
  are NaN in these three arrays.

`target_ids` is the decoder input (BOS then the reference pieces, 0-padded),
so query row `t` is the attention used to predict target piece `t`, the row
the searches report for output piece `t`. Padded rows and columns hold
whatever the layer computed for them (padded keys get weight 0); use the
sentence lengths to slice.

`ran_matrices(model, size)` gives RAN's input-independent attention patterns.
"""

import numpy as np

SLOTS = ("encoder_self", "decoder_self", "cross")
GMM_KEYS = ("cross_dot_product", "cross_mixture", "gmm_gate")


def _numpy(value):
    from keras import ops

    return np.asarray(ops.convert_to_numpy(value), dtype=np.float32)


def _is_seq2seq_transformer(model):
    from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer

    return isinstance(model, Seq2SeqTransformer)


def has_attention(model):
    """Whether `attention_maps` can read attention weights from `model`."""
    return (
        _is_seq2seq_transformer(model)
        or hasattr(model, "cross_attention_weights")
        or hasattr(model, "attention_weights")
    )


def _transformer_maps(model, source_ids, target_ids):
    """Every block of a `Seq2SeqTransformer`, run eagerly, collecting weights.

    Reuses the blocks' own residual plumbing (`_residual`, `_feed_forward_part`)
    so pre-/post-norm and dropout-free inference are exactly the model's.
    """
    from keras import ops

    from keras_attn_zoo.layers.attention_utils import padding_mask_from_ids
    from keras_attn_zoo.layers.gaussian_mixture_cross_attention import (
        GaussianMixtureCrossAttention,
    )
    from keras_attn_zoo.models.seq2seq_transformer import CROSS
    from keras_attn_zoo.models.seq2seq_transformer import DECODER_SELF
    from keras_attn_zoo.models.seq2seq_transformer import ENCODER_SELF

    source_ids = ops.convert_to_tensor(source_ids, "int32")
    target_ids = ops.convert_to_tensor(target_ids, "int32")
    source_mask = padding_mask_from_ids(source_ids)
    encoder_depth = len(model.encoder_blocks)
    decoder_depth = len(model.decoder_blocks)

    encoder_extra = model._stack_inputs(ENCODER_SELF, source_ids, encoder_depth)
    x = model.embedding(source_ids, training=False)
    encoder_weights = []
    for block, extra in zip(model.encoder_blocks, encoder_extra):
        extra = extra or {}
        x, weights = block._residual(
            x, block.self_attention_norm,
            lambda h, block=block, extra=extra: block.self_attention(
                h, context_mask=source_mask, training=False, return_attention=True,
                **extra),
            False,
        )
        x = block._feed_forward_part(x, False)
        encoder_weights.append(_numpy(weights))
    memory = model.encoder_final_norm(x) if model.encoder_final_norm is not None else x

    self_extra = model._stack_inputs(DECODER_SELF, target_ids, decoder_depth)
    cross_extra = model._stack_inputs(CROSS, target_ids, decoder_depth)
    y = model.embedding(target_ids, training=False)
    decoder_weights, cross_weights = [], []
    gmm = {key: [] for key in GMM_KEYS}
    any_gmm = False
    for block, s_extra, c_extra in zip(model.decoder_blocks, self_extra, cross_extra):
        s_extra, c_extra = s_extra or {}, c_extra or {}
        y, weights = block._residual(
            y, block.self_attention_norm,
            lambda h, block=block, extra=s_extra: block.self_attention(
                h, causal=True, training=False, return_attention=True, **extra),
            False,
        )
        decoder_weights.append(_numpy(weights))
        if isinstance(block.cross_attention, GaussianMixtureCrossAttention):
            any_gmm = True
            y, parts = block._residual(
                y, block.cross_attention_norm,
                lambda h, block=block, extra=c_extra: block.cross_attention(
                    h, memory, context_mask=source_mask, training=False,
                    return_components=True, **extra),
                False,
            )
            cross_weights.append(_numpy(parts["fused"]))
            gmm["cross_dot_product"].append(_numpy(parts["dot_product"]))
            gmm["cross_mixture"].append(_numpy(parts["mixture"]))
            gmm["gmm_gate"].append(_numpy(parts["gate"]))
        else:
            y, weights = block._residual(
                y, block.cross_attention_norm,
                lambda h, block=block, extra=c_extra: block.cross_attention(
                    h, memory, context_mask=source_mask, training=False,
                    return_attention=True, **extra),
                False,
            )
            weights = _numpy(weights)
            cross_weights.append(weights)
            gmm["cross_dot_product"].append(np.full_like(weights, np.nan))
            gmm["cross_mixture"].append(np.full_like(weights, np.nan))
            gmm["gmm_gate"].append(np.full_like(weights[..., 0], np.nan))
        y = block._feed_forward_part(y, False)

    maps = {
        "encoder_self": np.stack(encoder_weights),
        "decoder_self": np.stack(decoder_weights),
        "cross": np.stack(cross_weights),
    }
    if any_gmm:
        maps.update({key: np.stack(values) for key, values in gmm.items()})
    return maps


def attention_maps(model, source_ids, target_ids):
    """Teacher-forced attention of `model`, or `None` if it has none.

    Args:
        model: a zoo model (`Seq2SeqTransformer` family, `BahdanauRNN`,
            `EagerLSTMTranslator`, or anything with `cross_attention_weights`
            or `attention_weights(source_ids, target_ids)`).
        source_ids: int `[B, S]`: pieces then EOS, 0-padded.
        target_ids: int `[B, T]`: BOS then pieces, 0-padded (decoder input).

    Returns:
        `{name: float32 array [L, B, h, queries, keys]}` (see the module
        docstring for the names; `"gmm_gate"` is `[L, B, h, T]`), or `None`
        when the model has no attention weights (the eager translator).

    Example:
    >>> maps = attention_maps(model, source_ids, target_ids)
    >>> maps["cross"].shape          # (layers, batch, heads, T, S)
    """
    if _is_seq2seq_transformer(model):
        return _transformer_maps(model, source_ids, target_ids)
    if hasattr(model, "cross_attention_weights"):
        return {"cross": _numpy(model.cross_attention_weights(source_ids, target_ids))}
    if hasattr(model, "attention_weights"):  # RNNsearch: [B, T, S]
        weights = _numpy(model.attention_weights(source_ids, target_ids))
        return {"cross": weights[None, :, None]}
    return None


def _softmax(logits, mask):
    logits = np.where(mask, logits, -np.inf)
    logits = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=-1, keepdims=True)


def ran_matrices(model, size=None):
    """RAN's attention patterns per layer, as a sentence of `size` tokens sees them.

    RAN's weights do not depend on the tokens: layer `l` attends with
    `softmax(A_l[:, :size, :size])` (the decoder's causally masked). This
    returns those weights for every RAN stack of the model.

    Args:
        model: a `Seq2SeqTransformer` (typically from `ran_transformer`).
        size: sentence length to slice to (default and maximum: the model's
            `max_length`).

    Returns:
        `{slot: float32 [L, h, size, size]}` for the slots ("encoder_self",
        "decoder_self") that use recurrent attention; `{}` for other models.
    """
    from keras_attn_zoo.layers.recurrent_attention import RecurrentAttentionMatrices

    result = {}
    for slot, stack in getattr(model, "stack_layers", {}).items():
        if not isinstance(stack, RecurrentAttentionMatrices):
            continue
        n = stack.max_length if size is None else min(int(size), stack.max_length)
        mask = np.ones((n, n), bool)
        if slot == "decoder_self":
            mask = np.tril(mask)
        layers = [_softmax(_numpy(matrices)[:, :n, :n], mask)
                  for matrices in stack.full_matrices()]
        result[slot] = np.stack(layers).astype(np.float32)
    return result

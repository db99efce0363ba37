"""Getting the attention weights out of every kind of zoo model.

`attention_maps(model, source_ids, target_ids)` runs one teacher-forced pass
(the model's `attention_maps` hook, see `ZooModel`) and returns the model's attention as a dict of named float32 NumPy arrays
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


def has_attention(model):
    """Whether `attention_maps` can read attention weights from `model`."""
    from keras_attn_zoo.models.zoo_model import ZooModel

    return type(model).attention_maps is not ZooModel.attention_maps


def attention_maps(model, source_ids, target_ids):
    """Teacher-forced attention of `model`, or `None` if it has none.

    Args:
        model: a zoo model (its `attention_maps` hook).
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
    maps = model.attention_maps(source_ids, target_ids)
    if not maps:
        return None
    return {name: _numpy(value) for name, value in maps.items()}


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
    from keras_attn_zoo.layers.recurrent_attention_matrices import RecurrentAttentionMatrices

    from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer

    result = {}
    if not isinstance(model, Seq2SeqTransformer):
        return result
    for slot, stack in model.stack_layers.items():
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

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

RAN's input-independent attention patterns: `models.ran_transformer.ran_matrices`.
"""

import numpy as np

SLOTS = ("encoder_self", "decoder_self", "cross")


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

    Examples:
        >>> maps = attention_maps(model, source_ids, target_ids)
        >>> maps["cross"].shape          # (layers, batch, heads, T, S)
    """
    maps = model.attention_maps(source_ids, target_ids)
    if not maps:
        return None
    return {name: _numpy(value) for name, value in maps.items()}

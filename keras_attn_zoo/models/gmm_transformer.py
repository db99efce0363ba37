"""`gmm_transformer(...)`: Transformer with Gaussian-mixture cross-attention.

Importing this module registers the attention kind `"gaussian_mixture"`. It
fills the decoder's cross-attention slot: blocks listed in the model's
`attention_options["gaussian_mixture"]["gmm_layers"]` (default `"all"`) get a
`GaussianMixtureCrossAttention`, the others a plain `MultiHeadAttention`, so
`gmm_layers=[4, 5]` reproduces the paper's "top 2 layers" row of Table 5.
"""

import numpy as np

from keras_attn_zoo.layers.gaussian_mixture_cross_attention import NORMALIZATIONS
from keras_attn_zoo.layers.gaussian_mixture_cross_attention import (
    GaussianMixtureCrossAttention,
)
from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
from keras_attn_zoo.models.attention_kinds import CROSS
from keras_attn_zoo.models.attention_kinds import kind_options
from keras_attn_zoo.models.attention_kinds import register_attention_kind
from keras_attn_zoo.models.attention_kinds import reject_slot_overrides
from keras_attn_zoo.models.attention_kinds import with_kind_options
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.presets import resolve_preset
from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer
from keras_attn_zoo.models.transformer import MODEL_ARGUMENTS as TRANSFORMER_ARGUMENTS

ATTENTION_KIND = "gaussian_mixture"

# Options of the kind, under `attention_options["gaussian_mixture"]`.
OPTION_DEFAULTS = dict(
    num_components=4,
    normalization="approximate",
    gmm_layers="all",
    min_sigma=0.1,
    position_offset=0.5,
)

MODEL_ARGUMENTS = TRANSFORMER_ARGUMENTS - {"cross_attention"}


def resolve_gmm_layers(gmm_layers, num_decoder_layers):
    """`"all"` or a list of decoder indices (negative counts from the top) -> sorted list."""
    if isinstance(gmm_layers, str):
        if gmm_layers != "all":
            raise ValueError(f"gmm_layers must be 'all' or a list of indices, got {gmm_layers!r}.")
        return list(range(num_decoder_layers))
    if isinstance(gmm_layers, int):
        gmm_layers = [gmm_layers]
    resolved = set()
    for index in gmm_layers:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ValueError(f"gmm_layers entries must be ints, got {index!r}.")
        if not -num_decoder_layers <= index < num_decoder_layers:
            raise ValueError(
                f"gmm_layers index {index} is out of range for {num_decoder_layers} "
                "decoder layers."
            )
        resolved.add(index % num_decoder_layers)
    return sorted(resolved)


def _layer_kind(config, slot, layer_index):
    """The kind of cross-attention block `layer_index`: the mixture where
    `gmm_layers` chose it, dot-product elsewhere."""
    del slot
    chosen = resolve_gmm_layers(kind_options(config, ATTENTION_KIND)["gmm_layers"],
                                config["num_decoder_layers"])
    return ATTENTION_KIND if layer_index in chosen else "multi_head"


def make_gaussian_mixture(slot, layer_index, config):
    """`make_layer` of the `"gaussian_mixture"` kind (cross-attention slot only)."""
    options = kind_options(config, ATTENTION_KIND)
    common = dict(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        dropout=config["attention_dropout"],
        name=f"{slot}_attention_{layer_index}",
    )
    if _layer_kind(config, slot, layer_index) != ATTENTION_KIND:
        return MultiHeadAttention(**common)
    return GaussianMixtureCrossAttention(
        num_components=options["num_components"],
        normalization=options["normalization"],
        min_sigma=options["min_sigma"],
        position_offset=options["position_offset"],
        **common,
    )


def _mixture_flops(config, slot):
    """Per query token and head, four small FFNs `d_k -> d_k -> {K, K, K, 1}`."""
    del slot
    d_k = config["model_dim"] // config["num_heads"]
    components = int(kind_options(config, ATTENTION_KIND)["num_components"])
    hidden = 4 * 2 * d_k * d_k
    outputs = 3 * 2 * components * d_k + 2 * d_k
    return config["num_heads"] * (hidden + outputs)


def _validate(options):
    if options["normalization"] not in NORMALIZATIONS:
        raise ValueError(
            f"normalization must be one of {NORMALIZATIONS}, got "
            f"{options['normalization']!r}."
        )


def _monitored_attention(model, maps, rows):
    """The kind's `monitored_attention` hook: the gate g (the Gaussian mixture's
    share) of each decoder layer with a mixture, over every head and real row,
    as a histogram and its mean."""
    del model
    gate = maps.get("gmm_gate")  # [L, B, h, T]
    if gate is None:
        return {}
    summaries = {}
    for layer in range(gate.shape[0]):
        values = np.transpose(gate[layer], (0, 2, 1))[rows]  # [rows, h]
        if np.isnan(values).all():
            continue  # a decoder layer without a mixture
        summaries[f"gmm/gate/layer_{layer}"] = ("histogram", values.reshape(-1))
        summaries[f"gmm/gate_mean/layer_{layer}"] = ("scalar", float(values.mean()))
    return summaries


register_attention_kind(
    ATTENTION_KIND, make_gaussian_mixture, slots=(CROSS,),
    option_defaults=OPTION_DEFAULTS, extra_query_flops=_mixture_flops,
    layer_kind=_layer_kind, validate=_validate, monitored_attention=_monitored_attention)


def gmm_transformer(
    vocabulary_size,
    preset="small",
    num_components=4,
    normalization="approximate",
    gmm_layers="all",
    **overrides,
):
    """Builds a Transformer with Gaussian-mixture cross-attention (Zhang & Feng, 2021).

    Args:
        vocabulary_size: joint vocabulary size.
        preset: "tiny", "small", "base" (Transformer-base) or "big".
        num_components: Gaussians per head `K` (paper: 4).
        normalization: "approximate" (the paper's method), "strict"
            ("+Norm.") or "none" (Graves' synthesis network).
        gmm_layers: "all" (paper default) or decoder layer indices whose
            cross-attention gets the mixture (negative indices count from the
            top, e.g. `[-2, -1]` for the top two); the others keep
            dot-product attention.
        **overrides: any `Seq2SeqTransformer` argument except
            `cross_attention`; `attention_options={"gaussian_mixture": {...}}`
            may add `min_sigma` and `position_offset` (see
            `GaussianMixtureCrossAttention`); its entries win over the
            keyword arguments above.

    Returns:
        A `Seq2SeqTransformer` whose cross-attention kind is
        `"gaussian_mixture"`. The parameter cost is 17,485 per mixture layer at
        base size (6 layers: +104,910, the paper's 63.1M -> 63.2M).

    Examples:
        >>> model = gmm_transformer(8000, preset="tiny", gmm_layers=[-1])
    """
    reject_slot_overrides("gmm_transformer", overrides, (CROSS,),
                          "the mixture fills the cross-attention")
    config = resolve_preset(TRANSFORMER_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    _validate({"normalization": normalization})
    config = with_kind_options(config, ATTENTION_KIND, {
        "num_components": int(num_components),
        "normalization": normalization,
        # Stored as a list (or "all") so the config survives a JSON round trip.
        "gmm_layers": gmm_layers if gmm_layers == "all" else resolve_gmm_layers(
            gmm_layers, config["num_decoder_layers"]),
    })
    config["cross_attention"] = ATTENTION_KIND
    config.setdefault("name", "gmm_transformer")
    return Seq2SeqTransformer(vocabulary_size, **config)

"""`weighted_transformer(...)`: the Weighted Transformer (Ahmed et al., 2017).

Registers the attention kind `"branched_weighted"` (a
`BranchedWeightedAttention` layer, `uses_feed_forward=False` since the layer
holds the branch FFNs). `Seq2SeqTransformer` gives an encoder block
`use_feed_forward = uses_feed_forward(encoder kind)` and a decoder block
`uses_feed_forward(self kind) and uses_feed_forward(cross kind)`, so

* an encoder block whose self-attention is branched has no separate FFN;
* an encoder block left as `"multi_head"` keeps its FFN;
* a decoder block with `"multi_head"` masked self-attention and branched
  cross-attention (the default) has no separate FFN: the branches' FFNs sit
  where the Transformer's FFN was, after the cross-attention;
* a decoder block with branched self-attention loses the FFN after its
  cross-attention even if the cross-attention is `"multi_head"` (the AND
  above). `branched_slots=("decoder_self",)` alone therefore gives
  self-attention branches + plain cross-attention with no FFN after it.

Kind options, under the model's `attention_options["branched_weighted"]`:
`branch_intermediate_dim` (see `branch_width`: `"split"`, the default, gives
each branch `intermediate_dim // num_heads`; `"full"` gives each branch the
whole `intermediate_dim`; or an int), `weight_parameterization`
(`"projection"` or `"softmax"`), `min_branch_weight`,
`branch_feed_forward_dropout`, `branch_weight_warmup_steps` (the port's κ/α
learning-rate warm-up, applied through the kind's `wrap_optimizer` hook).

Branch FFN width, and why `"split"` is the default: the paper compares the
Weighted Transformer with the Transformer at about the same size. Its text in
the seed (the authors' blog post) gives no branch width and says that κ and α
"don't add significant number of parameters to the network"; its size table
is not in the seed text. `"split"`, d_ff / M per branch, is the public port's
width and the one at which the sizes match: the M branch FFNs together hold
the Transformer FFN's weights, and a branched layer differs from an attention
+ FFN pair only by a few biases, κ and α (under 0.2% of the model at every
preset, see tests/test_weighted.py). `"full"` gives every branch the
Transformer's whole FFN, M times its FFN weights: 2.10x the Transformer's
parameters at "small" (8k vocabulary), 3.80x at "base" and 8.05x at "big"
(37k vocabulary): bigger models than the ones the paper compares.

Compatibility: `None` used to be the default and meant the full width; it
now means the default, `"split"`. The builder stores a keyword, never None
(`"split"` unless told otherwise), in `attention_options`, so a config names
its width. A `.keras` file saved under the old default
(`branch_intermediate_dim: None`) holds full-width weights that no longer fit
the layers its config builds: build the model with
`branch_intermediate_dim="full"` and load the weights into it.
"""

import numbers

from keras_attn_zoo.layers.branched_weighted_attention import BranchedWeightedAttention
from keras_attn_zoo.models.attention_kinds import CROSS
from keras_attn_zoo.models.attention_kinds import DECODER_SELF
from keras_attn_zoo.models.attention_kinds import ENCODER_SELF
from keras_attn_zoo.models.attention_kinds import SLOT_ARGUMENTS as _SLOT_ARGUMENTS
from keras_attn_zoo.models.attention_kinds import SLOTS
from keras_attn_zoo.models.attention_kinds import block_uses_feed_forward
from keras_attn_zoo.models.attention_kinds import kind_options
from keras_attn_zoo.models.attention_kinds import register_attention_kind
from keras_attn_zoo.models.attention_kinds import reject_slot_overrides
from keras_attn_zoo.models.attention_kinds import with_kind_options
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.presets import resolve_preset
from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer
from keras_attn_zoo.models.transformer import MODEL_ARGUMENTS as TRANSFORMER_ARGUMENTS
from keras_attn_zoo.models.weighted_optimizer import BRANCH_WEIGHT_WARMUP
from keras_attn_zoo.models.weighted_optimizer import check_branch_weight_warmup
from keras_attn_zoo.models.weighted_optimizer import with_branch_weight_warmup

KIND = "branched_weighted"
# The public port's choice. The seed text only says the multi-head attention
# is replaced by branches (each with its FFN); this is the one layout in which
# every branched layer takes the place of a Transformer attention + FFN pair
# (in the decoder the FFN follows the encoder-decoder attention).
DEFAULT_BRANCHED_SLOTS = (ENCODER_SELF, CROSS)

MODEL_ARGUMENTS = TRANSFORMER_ARGUMENTS - set(_SLOT_ARGUMENTS.values())

# The variants of issue 32, as `weighted_transformer` keyword arguments: the
# paper's equations, the gain-corrected form (uniform and the port's random
# start), the RMS-preserving gain with the random start, and the port's form
# (per-branch residual + norm, softmax of random logits). tests/test_weighted.py and benchmarks/weighted_variants.py
# run each.
WEIGHTED_VARIANTS = {
    "paper": dict(),
    "gain": dict(weight_gain="branches"),
    "gain_random": dict(weight_gain="branches", weight_initialization="random"),
    "gain_rms_random": dict(weight_gain="branches_rms", weight_initialization="random"),
    "port": dict(branch_residual_norm=True, weight_parameterization="softmax",
                 weight_initialization="random"),
}


# Keywords of `branch_intermediate_dim`; an int > 0 is taken as the width itself.
SPLIT, FULL = "split", "full"
DEFAULT_BRANCH_INTERMEDIATE_DIM = SPLIT  # parity with the Transformer's size


def branch_width(config):
    """The branch FFN width of a model config; the one place this rule lives
    (the layers and, through the kind's record, `keras_attn_zoo.evaluation.flops`).

    `attention_options["branched_weighted"]["branch_intermediate_dim"]`:
    `"split"` (default; also `None`) -> `intermediate_dim // num_heads` (at
    least 1); `"full"` -> `intermediate_dim`; an int > 0 -> that int.
    """
    width = kind_options(config, KIND)["branch_intermediate_dim"]
    if width is None or width == SPLIT:
        return max(1, config["intermediate_dim"] // config["num_heads"])
    if width == FULL:
        return config["intermediate_dim"]
    if isinstance(width, numbers.Integral) and not isinstance(width, bool) and width > 0:
        return int(width)
    raise ValueError(
        "branch_intermediate_dim must be 'split' (the default, also None: "
        "intermediate_dim // num_heads per branch, the Transformer's size), "
        f"'full' (intermediate_dim per branch) or an int > 0; got {width!r}."
    )


def make_branched_weighted(slot, layer_index, config):
    """`make_layer` of the `"branched_weighted"` attention kind."""
    options = kind_options(config, KIND)
    return BranchedWeightedAttention(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        intermediate_dim=branch_width(config),
        dropout=config["attention_dropout"],
        feed_forward_dropout=options["branch_feed_forward_dropout"],
        weight_parameterization=options["weight_parameterization"],
        min_branch_weight=options["min_branch_weight"],
        weight_gain=options["weight_gain"],
        branch_residual_norm=options["branch_residual_norm"],
        weight_initialization=options["weight_initialization"],
        name=f"{slot}_attention_{layer_index}",
    )


def _branch_flops(config, slot):
    """Per query token: the `M = h` branch FFNs (`4 d f_b` each) and their
    α-weighted sum (`2 M d`)."""
    del slot
    d, h = config["model_dim"], config["num_heads"]
    return h * 2 * branch_width(config) * d * 2 + 2 * d * h


def _validate(options):
    if options[BRANCH_WEIGHT_WARMUP] is not None:
        check_branch_weight_warmup(options[BRANCH_WEIGHT_WARMUP])


def _wrap_optimizer(optimizer, options):
    warmup = options[BRANCH_WEIGHT_WARMUP]
    return optimizer if warmup is None else with_branch_weight_warmup(optimizer, warmup)


def _monitored_weights(model):
    """κ and α of every branched layer, as the training monitors write them:
    `weighted/<layer>/kappa` and `.../alpha`."""
    return {f"weighted/{layer}/{name}": values[name]
            for layer, values in weighted_branch_weights(model).items()
            for name in ("kappa", "alpha")}


register_attention_kind(
    KIND, make_branched_weighted, uses_feed_forward=False,
    option_defaults={
        "branch_intermediate_dim": DEFAULT_BRANCH_INTERMEDIATE_DIM,
        "weight_parameterization": "projection",
        "min_branch_weight": 0.0,
        "weight_gain": "simplex",
        "branch_residual_norm": False,
        "weight_initialization": "uniform",
        "branch_feed_forward_dropout": 0.0,
        BRANCH_WEIGHT_WARMUP: None,
    },
    extra_query_flops=_branch_flops, validate=_validate, wrap_optimizer=_wrap_optimizer,
    monitored_weights=_monitored_weights)


def weighted_transformer(
    vocabulary_size,
    preset="small",
    branched_slots=DEFAULT_BRANCHED_SLOTS,
    branch_intermediate_dim=DEFAULT_BRANCH_INTERMEDIATE_DIM,
    weight_parameterization="projection",
    min_branch_weight=0.0,
    branch_weight_warmup_steps=None,
    weight_gain="simplex",
    branch_residual_norm=False,
    weight_initialization="uniform",
    **overrides,
):
    """Builds the Weighted Transformer (Ahmed, Keskar and Socher, 2017).

    Every branched slot's multi-head attention and the FFN after it become M
    = `num_heads` weighted branches, `Σ_i α_i FFN_i(κ_i head_i W_i^O)`, with κ
    and α on the simplex in each layer (see `BranchedWeightedAttention`).

    Paper vs public port: where the paper's text decides, its choice is the
    default; where it is silent, the default is a public port's choice, named
    as such, and the alternatives are options.

    * Branch FFN width (the text does not state it; each branch has its own
      FFN of the Transformer's form): default `"split"`, `intermediate_dim //
      M` per branch (the port's choice). The M branch FFNs then hold the
      Transformer FFN's parameters, so the model has the Transformer's size,
      as in the paper's comparison (κ and α "don't add significant number of
      parameters"): at "small" with an 8k vocabulary 5.74M against 5.74M.
      `"full"` gives every branch the whole `intermediate_dim`, M times the
      FFN parameters (12.04M at "small", 2.10x; 8.05x at "big"): a bigger
      model, not the paper's comparison.
    * κ/α on the simplex: the paper requires it but does not say how.
      Default `"projection"` (projected after each update: the zoo's choice,
      which REFERENCE.md attributes to a public port); `"softmax"` (the
      jayparks/transformer port's) is offered.
    * The gain and the κ/α tie (issue 32; details in
      `BranchedWeightedAttention`): the paper's equation scales each branch
      by κ_i α_i = 1/M² at the uniform start, and with zero biases κ and α
      get equal gradients. Options, none the paper's: `weight_gain=
      "branches"` (κ/α on the simplex, applied as M·κ_i, M·α_i; or
      `"branches_rms"`, M·κ_i and sqrt(M)·α_i),
      `branch_residual_norm=True` (the port's LN_i(y + FFN_i(y)) per
      branch), `weight_initialization="random"` (the port's random start,
      which breaks the tie). `WEIGHTED_VARIANTS` names the combinations
      the benchmark and tests run.
    * κ/α learning-rate warm-up of 400 steps (port):
      `branch_weight_warmup_steps=400`, applied by `wrap_optimizer`; see
      `keras_attn_zoo.models.weighted_optimizer.BranchWeightAdam` and
      `port_branch_weight_schedule`.
    * Branched slots: the seed text does not name them ("we replace the
      multi-head attention by multiple self-attention branches"). Default:
      encoder self-attention and decoder cross-attention, the masked decoder
      self-attention stays multi-head (the port's choice, and the layout in
      which each branched layer replaces an attention + FFN pair). Any
      non-empty subset of `("encoder_self", "decoder_self", "cross")` may be
      given.

    Args:
        vocabulary_size: joint vocabulary size.
        preset: "tiny", "small", "base" or "big" (Transformer sizes).
        branched_slots: slots filled with branched attention; the others keep
            `"multi_head"`.
        branch_intermediate_dim: `"split"` (default: `intermediate_dim //
            num_heads` per branch, the Transformer's size; `None` means the
            same), `"full"` (`intermediate_dim` per branch, M times the FFN
            parameters) or an int > 0.
        weight_parameterization: `"projection"` (paper) or `"softmax"`.
        min_branch_weight: floor of κ_i, α_i under the projection (paper: 0).
        branch_weight_warmup_steps: the port's κ/α learning-rate warm-up
            (400 there; None: κ/α follow the model's schedule, the paper's
            text); the training workflow applies it through
            `model.wrap_optimizer`.
        weight_gain: `"simplex"` (paper: κ_i, α_i as they are),
            `"branches"` (applied as M·κ_i, M·α_i) or `"branches_rms"`
            (M·κ_i, sqrt(M)·α_i).
        branch_residual_norm: the port's per-branch LN_i(y + FFN_i(y)).
        weight_initialization: `"uniform"` (1/M) or `"random"` (the port's
            softmax of U[0, 1) logits).
        **overrides: any other `Seq2SeqTransformer` argument; the slot kinds
            are set through `branched_slots`. Entries of `attention_options`
            given here win over the keyword arguments above.
            `activation_dropout` (the low-resource recipe's) acts on every
            FFN: the branch FFNs' activations (the kind's
            `branch_feed_forward_dropout`, unless given) and the blocks' FFNs
            where a block keeps one.

    Returns:
        A `Seq2SeqTransformer`; `weighted_branch_weights(model)` reads κ/α.

    Examples:
        >>> model = weighted_transformer(8000, preset="tiny")
        >>> sorted(weighted_branch_weights(model)["encoder_self_attention_0"])
        ['alpha', 'kappa']
    """
    reject_slot_overrides(
        "weighted_transformer", overrides, SLOTS,
        "choose them with branched_slots, or use transformer(...) with explicit "
        "kinds for other layouts")
    branched_slots = tuple(branched_slots)
    unknown = sorted(set(branched_slots) - set(SLOTS))
    if unknown:
        raise ValueError(f"Unknown slot(s) {unknown}; choose from {list(SLOTS)}.")
    if not branched_slots:
        raise ValueError("branched_slots is empty: that is the plain transformer(...).")
    config = resolve_preset(TRANSFORMER_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    for slot, argument in _SLOT_ARGUMENTS.items():
        config[argument] = KIND if slot in branched_slots else "multi_head"
    # `activation_dropout` (the recipes' dropout on FFN activations) acts on
    # every FFN: the branch FFNs, unless `branch_feed_forward_dropout` is given,
    # and the blocks' own where a block keeps one.
    activation_dropout = config.get("activation_dropout") or 0.0
    blocks = ([ENCODER_SELF], [DECODER_SELF, CROSS])  # the slots of each stack's blocks
    if not any(block_uses_feed_forward(config, [config[_SLOT_ARGUMENTS[slot]] for slot in slots])
               for slots in blocks):
        config["activation_dropout"] = 0.0  # no block keeps an FFN
    config = with_kind_options(config, KIND, {
        "branch_feed_forward_dropout": activation_dropout,
        # Stored as a keyword, not None, so the saved config names its width.
        "branch_intermediate_dim": (DEFAULT_BRANCH_INTERMEDIATE_DIM
                                    if branch_intermediate_dim is None
                                    else branch_intermediate_dim),
        "weight_parameterization": weight_parameterization,
        "min_branch_weight": min_branch_weight,
        BRANCH_WEIGHT_WARMUP: branch_weight_warmup_steps,
        "weight_gain": weight_gain,
        "branch_residual_norm": branch_residual_norm,
        "weight_initialization": weight_initialization,
    })
    config.setdefault("name", "weighted_transformer")
    # Validate the width now rather than deep inside layer construction.
    branch_width(config)
    return Seq2SeqTransformer(vocabulary_size, **config)


def branched_layers(model):
    """`{layer name: BranchedWeightedAttention}` of a model, encoder first: the
    attention slots of its blocks in the order they run (none for a model that
    is not a `Seq2SeqTransformer`)."""
    if not isinstance(model, Seq2SeqTransformer):
        return {}
    slots = [block.self_attention for block in model.encoder_blocks]
    for block in model.decoder_blocks:
        slots += [block.self_attention, block.cross_attention]
    return {layer.name: layer for layer in slots
            if isinstance(layer, BranchedWeightedAttention)}


def weighted_branch_weights(model):
    """κ and α of every branched layer, for plots.

    Returns:
        `{layer name: {"kappa": [M floats], "alpha": [M floats]}}`, e.g.
        `{"encoder_self_attention_0": {...}, "cross_attention_0": {...}}`.
    """
    return {name: layer.branch_weights() for name, layer in branched_layers(model).items()}

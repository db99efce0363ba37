"""The attention-kind registry: what fills a Transformer slot, and what it needs.

A *kind* is one attention mechanism of the Transformer family. Its record
(`AttentionKind`) is the one place that knows, for that mechanism:

* `make_layer(slot, index, config) -> layer`: the attention layer of block
  `index` in `slot` ("encoder_self", "decoder_self" or "cross"); `config` is
  the model's constructor arguments, options already resolved (see
  `kind_options`);
* `make_stack(slot, config) -> layer` (optional): a layer run once per
  forward pass whose outputs, one dict per block, are extra inputs of every
  attention layer of the slot (RAN's recurrently refined matrices);
* `slots`: the slots it may fill;
* `option_defaults`: its options; a model's `attention_options` nests them
  per kind name, `{"gaussian_mixture": {"num_components": 4}}`;
* `uses_feed_forward`: False when the layer holds its own FFNs (a block with
  such a layer in any slot has no FFN of its own);
* what the FLOP counter needs: `fixed_pattern` (weights that do not depend on
  the input: no query/key projections, no scores), `extra_query_flops(config,
  slot)` (work per query token beyond a plain attention), `stack_flops(config,
  slot, depth)` (the stack layer, per batch), `layer_kind(config, slot,
  index)` (the kind that really fills a block, e.g. GMM's unchosen layers are
  "multi_head");
* `validate(options)` and `wrap_optimizer(optimizer, options)` (optional):
  checks at build time, and the optimiser a model with this kind trains with
  (the Weighted Transformer's κ/α warm-up);
* `monitored_weights(model)` (optional): `{tag: [floats]}`, weights of the
  model to watch while it trains (the Weighted Transformer's κ and α);
* `attention_images(model, size)` (optional): `{name: (weights [L, h, n, n],
  what)}`, attention that does not depend on the input, drawn while the model
  trains as a sentence of `size` tokens sees it (RAN's matrices);
* `monitored_attention(model, maps, rows)` (optional): `{tag: ("histogram"
  or "scalar", value)}` from the teacher-forced attention maps of a few dev
  sentences (`maps`, as `evaluation.attention` names them; `rows`: bool
  `[B, T]`, the real query rows), e.g. GMM's gate per decoder layer. The
  training monitors write all three (`monitored_weights`, `attention_images`,
  `monitored_attention` below) without knowing the kind.
"""

import dataclasses
from typing import Callable
from typing import Optional

from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention

# Slots an attention kind can fill.
ENCODER_SELF = "encoder_self"
DECODER_SELF = "decoder_self"
CROSS = "cross"
SLOTS = (ENCODER_SELF, DECODER_SELF, CROSS)
SELF_SLOTS = (ENCODER_SELF, DECODER_SELF)
# The model argument naming each slot's kind.
SLOT_ARGUMENTS = {
    ENCODER_SELF: "encoder_self_attention",
    DECODER_SELF: "decoder_self_attention",
    CROSS: "cross_attention",
}


@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """One attention kind's record (see the module docstring)."""

    name: str
    make_layer: Callable
    slots: tuple = SLOTS
    option_defaults: dict = dataclasses.field(default_factory=dict)
    uses_feed_forward: bool = True
    make_stack: Optional[Callable] = None
    fixed_pattern: bool = False
    extra_query_flops: Optional[Callable] = None
    stack_flops: Optional[Callable] = None
    layer_kind: Optional[Callable] = None
    validate: Optional[Callable] = None
    wrap_optimizer: Optional[Callable] = None
    monitored_weights: Optional[Callable] = None
    attention_images: Optional[Callable] = None
    monitored_attention: Optional[Callable] = None


ATTENTION_KINDS = {}


def register_attention_kind(name, make_layer, uses_feed_forward=True, make_stack=None,
                            **record):
    """Registers the attention kind `name`; `record`: the other `AttentionKind` fields.

    `make_layer(slot, layer_index, config) -> keras Layer`; `config` is the
    model's constructor arguments, so a kind reads the width, heads, dropout
    and its own options (`kind_options(config, name)`).
    `uses_feed_forward=False` for layers that contain their own FFNs.
    `make_stack(slot, config) -> keras Layer` (optional) builds the slot's
    stack layer: `stack_layer(ids)` returns a list with one dict of extra
    inputs per block, passed to the attention layer's `call` and `step`.
    """
    ATTENTION_KINDS[name] = AttentionKind(
        name, make_layer, uses_feed_forward=uses_feed_forward, make_stack=make_stack,
        **record)
    return ATTENTION_KINDS[name]


def attention_kind(name):
    """The record of kind `name`; an unknown name is an error listing the kinds."""
    if name not in ATTENTION_KINDS:
        raise ValueError(
            f"Unknown attention kind {name!r}; registered kinds are "
            f"{sorted(ATTENTION_KINDS)}."
        )
    return ATTENTION_KINDS[name]


def slot_kinds(config):
    """`{slot: kind name}` of a model config."""
    return {slot: config.get(argument, "multi_head")
            for slot, argument in SLOT_ARGUMENTS.items()}


def has_kind_hook(model, hook):
    """Whether any attention kind of a zoo model has the optional `hook`."""
    return any(getattr(attention_kind(kind), hook) is not None
               for kind in set(slot_kinds(model.zoo_config).values()))


def _from_kinds(model, hook, *args):
    """The dicts the `hook` of each of a zoo model's attention kinds returns for
    `(model, *args)`, merged kind by kind; `{}` when none has the hook (also for a
    model outside the Transformer family, whose config names no kinds)."""
    merged = {}
    for kind in sorted(set(slot_kinds(model.zoo_config).values())):
        function = getattr(attention_kind(kind), hook)
        if function is not None:
            merged.update(function(model, *args))
    return merged


def monitored_weights(model):
    """`{tag: [floats]}` that a zoo model's attention kinds want watched while it trains."""
    return _from_kinds(model, "monitored_weights")


def attention_images(model, size):
    """`{name: (weights [L, h, n, n], what)}`: the input-independent attention a zoo
    model's kinds draw, at `size` positions."""
    return _from_kinds(model, "attention_images", size)


def monitored_attention(model, maps, rows):
    """`{tag: ("histogram" or "scalar", value)}` that a zoo model's kinds read off its
    teacher-forced attention `maps` (real query rows `rows`, bool `[B, T]`)."""
    return _from_kinds(model, "monitored_attention", maps, rows)


def nest_options(attention_options, kinds):
    """`attention_options` with every option under its kind's name.

    A key that is not a kind name is taken as an option of the one kind among
    `kinds` that has it (the flat layout GMM and the Weighted Transformer
    used to take, so old configs still load); otherwise it is an error naming
    the key.
    """
    nested = {}
    for key, value in (attention_options or {}).items():
        if key in ATTENTION_KINDS:
            nested[key] = {**nested.get(key, {}), **(value or {})}
            continue
        owners = [kind for kind in dict.fromkeys(kinds)
                  if key in attention_kind(kind).option_defaults]
        if len(owners) != 1:
            raise ValueError(
                f"attention_options[{key!r}] is not an option of this model's "
                f"attention kinds {sorted(set(kinds))}; give options as "
                "{kind name: {option: value}}."
            )
        nested.setdefault(owners[0], {})[key] = value
    return nested


def kind_options(config, kind):
    """Kind `kind`'s options in `config`: its defaults updated with the given ones.

    Unknown option names are a `TypeError` that lists the valid ones.
    """
    record = attention_kind(kind)
    nested = nest_options(config.get("attention_options"), slot_kinds(config).values())
    given = dict(nested.get(kind) or {})
    unknown = sorted(set(given) - set(record.option_defaults))
    if unknown:
        raise TypeError(
            f"Unknown {kind!r} attention option(s) {unknown}; valid ones are "
            f"{sorted(record.option_defaults)}."
        )
    return {**record.option_defaults, **given}


def check_slot(kind, slot):
    """Refuses to put `kind` in a slot its record does not list."""
    record = attention_kind(kind)
    if slot in record.slots:
        return
    if tuple(record.slots) == SELF_SLOTS:
        raise ValueError(
            f"The {kind!r} attention kind replaces self-attention only; use a "
            "dot-product kind (e.g. 'multi_head') for cross-attention."
        )
    if tuple(record.slots) == (CROSS,):
        raise ValueError(
            f"The {kind!r} attention kind is cross-attention only; it cannot "
            f"fill the {slot!r} slot."
        )
    raise ValueError(f"The {kind!r} attention kind cannot fill the {slot!r} slot.")


def layer_kind(config, slot, index):
    """The kind that fills block `index` of `slot` (a kind may leave some to another)."""
    kind = slot_kinds(config)[slot]
    record = attention_kind(kind)
    return record.layer_kind(config, slot, index) if record.layer_kind else kind


def block_uses_feed_forward(config, slot_kind_names):
    """Whether a block whose slots hold these kinds keeps its own FFN."""
    del config
    return all(attention_kind(kind).uses_feed_forward for kind in slot_kind_names)


def with_kind_options(overrides, kind, options):
    """Copies builder `overrides` with `options` as the defaults of kind `kind`.

    The user's `attention_options[kind]` (or, in the old flat layout, the
    user's keys that are options of `kind`) win over `options`.
    """
    overrides = dict(overrides)
    given = dict(overrides.pop("attention_options", None) or {})
    defaults = attention_kind(kind).option_defaults
    flat = {key: given.pop(key) for key in list(given)
            if key not in ATTENTION_KINDS and key in defaults}
    given[kind] = {**options, **flat, **(given.get(kind) or {})}
    overrides["attention_options"] = given
    return overrides


def reject_slot_overrides(builder, overrides, slots, hint):
    """A builder that sets `slots` itself refuses them in `overrides`."""
    fixed = sorted({SLOT_ARGUMENTS[slot] for slot in slots} & set(overrides))
    if fixed:
        raise TypeError(f"{builder}() sets {fixed} itself; {hint}.")


def _make_multi_head(slot, layer_index, config):
    return MultiHeadAttention(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        dropout=config["attention_dropout"],
        name=f"{slot}_attention_{layer_index}",
    )


register_attention_kind("multi_head", _make_multi_head)

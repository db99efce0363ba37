"""`ran_transformer(...)`: the Transformer with Recurrent Attention (RAN).

Registers the attention kind "recurrent" (self-attention slots only: the
paper keeps dot-product cross-attention) with its stack layer, so any
`Seq2SeqTransformer` can use it, e.g.
`Seq2SeqTransformer(..., decoder_self_attention="recurrent", max_length=256)`.

Kind options go under `attention_options["recurrent"]` (see
`RAN_OPTION_DEFAULTS`).
"""

import numpy as np
from keras import ops

from keras_attn_zoo.layers.recurrent_attention import RecurrentAttention
from keras_attn_zoo.layers.recurrent_attention_matrices import RecurrentAttentionMatrices
from keras_attn_zoo.models.attention_kinds import ENCODER_SELF
from keras_attn_zoo.models.attention_kinds import SELF_SLOTS
from keras_attn_zoo.models.attention_kinds import kind_options
from keras_attn_zoo.models.attention_kinds import register_attention_kind
from keras_attn_zoo.models.attention_kinds import reject_slot_overrides
from keras_attn_zoo.models.attention_kinds import with_kind_options
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.presets import resolve_preset
from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer
from keras_attn_zoo.models.transformer import MODEL_ARGUMENTS

RAN_KIND = "recurrent"
RAN_OPTION_DEFAULTS = {
    "dropout": 0.2,  # the paper's attention dropout for RAN (not En-Fr)
    "transition": "paper",  # or "ffn", the public code's default
    "trainable_initial": True,  # False: the paper's fixed-A0 ablation
    "initial_initializer": "glorot_uniform",
    "transition_initializer": "glorot_uniform",
}
APPLY_TO = {
    "encoder": ("recurrent", "multi_head"),  # RAN-E
    "decoder": ("multi_head", "recurrent"),  # RAN-D, the paper's best single change
    "all": ("recurrent", "recurrent"),  # RAN-ALL
}


def _make_recurrent(slot, layer_index, config):
    options = kind_options(config, RAN_KIND)
    return RecurrentAttention(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        dropout=options["dropout"],
        name=f"{slot}_recurrent_attention_{layer_index}",
    )


def _make_recurrent_stack(slot, config):
    options = kind_options(config, RAN_KIND)
    depth = config["num_encoder_layers" if slot == ENCODER_SELF else "num_decoder_layers"]
    return RecurrentAttentionMatrices(
        num_heads=config["num_heads"],
        max_length=config["max_length"],
        num_layers=depth,
        transition=options["transition"],
        trainable_initial=options["trainable_initial"],
        initial_initializer=options["initial_initializer"],
        transition_initializer=options["transition_initializer"],
        name=f"{slot}_recurrent_matrices",
    )


def _stack_flops(config, slot, depth):
    """The matrices' refinement, per forward pass: `L` transitions of `2 h n^3`
    (paper) or `16 h n^3` (the FFN transition)."""
    del slot
    n, h = config["max_length"], config["num_heads"]
    if kind_options(config, RAN_KIND)["transition"] == "paper":
        return depth * h * 2 * n * n * n
    return depth * h * (2 * n * 4 * n * n + 2 * n * n * 4 * n)


def _softmax(logits, mask):
    """Row softmax of `logits` over the entries `mask` keeps (the others get 0)."""
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
        layers = [_softmax(np.asarray(ops.convert_to_numpy(matrices), np.float32)[:, :n, :n],
                           mask)
                  for matrices in stack.full_matrices()]
        result[slot] = np.stack(layers).astype(np.float32)
    return result


def _attention_images(model, size):
    """The kind's `attention_images` hook: each RAN stack's matrices, an image per slot."""
    return {f"ran/{slot}": (weights, f"RAN {slot} softmax(A_l)")
            for slot, weights in ran_matrices(model, size).items()}


register_attention_kind(
    RAN_KIND, _make_recurrent, make_stack=_make_recurrent_stack, slots=SELF_SLOTS,
    option_defaults=RAN_OPTION_DEFAULTS, fixed_pattern=True, stack_flops=_stack_flops,
    attention_images=_attention_images)


def ran_transformer(
    vocabulary_size,
    preset="small",
    apply_to="decoder",
    max_length=256,
    transition="paper",
    trainable_initial=True,
    ran_dropout=0.2,
    **overrides,
):
    """Builds a Transformer whose self-attention is Recurrent Attention.

    RAN replaces dot-product self-attention by learned Initial Attention
    Matrices `A0` `(h, n, n)` refined layer by layer by one Recurrent
    Transition shared by all heads and layers of a stack; each layer keeps only
    value and output projections. Cross-attention stays dot-product.

    Args:
        vocabulary_size: joint vocabulary size.
        preset: "tiny", "small", "base" or "big" (see `models.presets`).
        apply_to: "encoder" (RAN-E), "decoder" (RAN-D, default: the paper's
            best single change) or "all" (RAN-ALL).
        max_length: `n`, the size of the attention matrices and the longest
            source/target the model accepts (paper: 256). Longer inputs are a
            clear error, and decoding caps each sentence at `max_length`
            decoder positions (the last one forced to EOS).
        transition: "paper" (`A_l = A_{l-1} + LN(tanh(A_{l-1} W + b))`) or
            "ffn" (the public code's `n -> 4n -> n` ReLU FFN, no LayerNorm).
        trainable_initial: learn `A0` (default) or keep it fixed (ablation).
        ran_dropout: attention dropout of the RAN layers (paper: 0.2); the
            model's `attention_dropout` still applies to dot-product layers.
        **overrides: any `Seq2SeqTransformer` argument (not the self-attention
            kinds, which `apply_to` sets); `attention_options={"recurrent":
            {...}}` overrides any of `RAN_OPTION_DEFAULTS`.

    Returns:
        A `Seq2SeqTransformer`.

    Examples:
        >>> model = ran_transformer(8000, preset="tiny", apply_to="all", max_length=64)

    References:
        Zeng et al., "Recurrent Attention for Neural Machine Translation",
        EMNLP 2021.
    """
    if apply_to not in APPLY_TO:
        raise ValueError(
            f"Unknown apply_to={apply_to!r}; choose one of {sorted(APPLY_TO)}."
        )
    reject_slot_overrides("ran_transformer", overrides, SELF_SLOTS,
                          "choose them with apply_to")
    encoder_kind, decoder_kind = APPLY_TO[apply_to]
    overrides = with_kind_options(
        overrides,
        RAN_KIND,
        {
            **RAN_OPTION_DEFAULTS,
            "dropout": ran_dropout,
            "transition": transition,
            "trainable_initial": trainable_initial,
        },
    )
    overrides.update(
        encoder_self_attention=encoder_kind,
        decoder_self_attention=decoder_kind,
        max_length=max_length,
    )
    config = resolve_preset(TRANSFORMER_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    config.setdefault("name", f"ran_transformer_{apply_to}")
    return Seq2SeqTransformer(vocabulary_size, **config)

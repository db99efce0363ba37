"""The RAN paper's fixed-pattern baselines: HC-SA and the Random Synthesizer.

Both replace *both* self-attentions (encoder and decoder), as in the RAN
paper's comparison; cross-attention stays dot-product. Registers the
attention kinds "hard_coded_gaussian" and "random_synthesizer" (self-attention
slots only), with options under `attention_options[kind]`.
"""

from keras_attn_zoo.layers.hard_coded_gaussian_attention import DECODER_OFFSETS
from keras_attn_zoo.layers.hard_coded_gaussian_attention import ENCODER_OFFSETS
from keras_attn_zoo.layers.hard_coded_gaussian_attention import (
    HardCodedGaussianAttention,
)
from keras_attn_zoo.layers.random_synthesizer_attention import (
    RandomSynthesizerAttention,
)
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

HARD_CODED_KIND = "hard_coded_gaussian"
HARD_CODED_OPTION_DEFAULTS = {
    "encoder_offsets": list(ENCODER_OFFSETS),
    "decoder_offsets": list(DECODER_OFFSETS),
    "sigma": 1.0,
    "renormalize": False,  # the reference does not renormalise
}
SYNTHESIZER_KIND = "random_synthesizer"
SYNTHESIZER_OPTION_DEFAULTS = {
    "trainable_logits": True,
    "logits_initializer": "glorot_uniform",
}


def _make_hard_coded(slot, layer_index, config):
    options = kind_options(config, HARD_CODED_KIND)
    side = "encoder" if slot == ENCODER_SELF else "decoder"
    return HardCodedGaussianAttention(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        offsets=options[f"{side}_offsets"],
        sigma=options["sigma"],
        renormalize=options["renormalize"],
        dropout=config["attention_dropout"],
        name=f"{slot}_hard_coded_attention_{layer_index}",
    )


def _make_synthesizer(slot, layer_index, config):
    options = kind_options(config, SYNTHESIZER_KIND)
    if config["max_length"] is None:
        raise ValueError(
            "The random synthesizer needs max_length (the size of its logit "
            "matrices)."
        )
    return RandomSynthesizerAttention(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        max_length=config["max_length"],
        dropout=config["attention_dropout"],
        trainable_logits=options["trainable_logits"],
        logits_initializer=options["logits_initializer"],
        name=f"{slot}_synthesizer_attention_{layer_index}",
    )


# Fixed patterns: value and output projections only, no scores (FLOP counter).
register_attention_kind(HARD_CODED_KIND, _make_hard_coded, slots=SELF_SLOTS,
                        option_defaults=HARD_CODED_OPTION_DEFAULTS, fixed_pattern=True)
register_attention_kind(SYNTHESIZER_KIND, _make_synthesizer, slots=SELF_SLOTS,
                        option_defaults=SYNTHESIZER_OPTION_DEFAULTS, fixed_pattern=True)


def _build(vocabulary_size, preset, kind, kind_options, max_length, name, overrides):
    reject_slot_overrides(name, overrides, SELF_SLOTS,
                          "both self-attentions use the baseline")
    overrides = with_kind_options(overrides, kind, kind_options)
    overrides.update(
        encoder_self_attention=kind, decoder_self_attention=kind,
        max_length=max_length,
    )
    config = resolve_preset(TRANSFORMER_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    config.setdefault("name", name)
    return Seq2SeqTransformer(vocabulary_size, **config)


def hard_coded_transformer(
    vocabulary_size,
    preset="small",
    max_length=256,
    sigma=1.0,
    renormalize=False,
    **overrides,
):
    """Transformer with hard-coded Gaussian self-attention (HC-SA).

    Every self-attention head attends with fixed weights
    `N(j; i + offset, sigma)`: encoder heads alternate offsets -1 / +1,
    decoder heads -1 / 0, `sigma = 1` (You et al. 2020, as in the RAN paper's
    baseline). Not renormalised by default: masked keys get weight 0.

    Args:
        vocabulary_size: joint vocabulary size.
        preset: "tiny", "small", "base" or "big".
        max_length: longest sequence accepted (default 256, the RAN paper's
            data limit, so the baselines share RAN's limit; the Gaussian
            pattern itself has no table, `None` lifts the limit).
        sigma: standard deviation in positions.
        renormalize: divide each row by its mass over visible keys.
        **overrides: any `Seq2SeqTransformer` argument (not the
            self-attention kinds); `attention_options={"hard_coded_gaussian":
            {"encoder_offsets": [...], "decoder_offsets": [...]}}`.

    Examples:
        >>> model = hard_coded_transformer(8000, preset="tiny")

    References:
        You, Sun and Iyyer, "Hard-Coded Gaussian Attention for Neural Machine
        Translation", ACL 2020.
    """
    options = {**HARD_CODED_OPTION_DEFAULTS, "sigma": sigma, "renormalize": renormalize}
    return _build(vocabulary_size, preset, HARD_CODED_KIND, options, max_length,
                  "hard_coded_transformer", overrides)


def synthesizer_transformer(
    vocabulary_size,
    preset="small",
    max_length=256,
    trainable_logits=True,
    **overrides,
):
    """Transformer with Random Synthesizer self-attention (Syn-R).

    Every self-attention layer owns a trainable `(h, n, n)` logit matrix
    (n = `max_length`), sliced to the sequence, masked, softmax over keys;
    no transition between layers, only value and output projections.

    Args:
        vocabulary_size: joint vocabulary size.
        preset: "tiny", "small", "base" or "big".
        max_length: `n` (default 256, as RAN); longer inputs are an error and
            decoding caps each sentence at `max_length` positions.
        trainable_logits: `False` keeps the random logits fixed.
        **overrides: any `Seq2SeqTransformer` argument (not the
            self-attention kinds).

    Examples:
        >>> model = synthesizer_transformer(8000, preset="tiny", max_length=64)

    References:
        Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer
        Models", ICML 2021.
    """
    options = {**SYNTHESIZER_OPTION_DEFAULTS, "trainable_logits": trainable_logits}
    return _build(vocabulary_size, preset, SYNTHESIZER_KIND, options, max_length,
                  "synthesizer_transformer", overrides)

"""`transformer(...)`: the dot-product baseline every zoo model is compared to."""

from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.presets import constructor_arguments
from keras_attn_zoo.models.presets import resolve_preset
from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer

MODEL_ARGUMENTS = constructor_arguments(Seq2SeqTransformer)


def transformer(vocabulary_size, preset="small", **overrides):
    """Builds the Transformer baseline (Vaswani et al., 2017).

    Args:
        vocabulary_size: joint vocabulary size.
        preset: "tiny", "small", "base" (d 512, FFN 2048, 8 heads, 6+6) or "big".
        **overrides: any `Seq2SeqTransformer` argument, e.g. `norm_first=True`.

    Returns:
        A `Seq2SeqTransformer`: inputs `{"source_ids", "target_ids"}`, output
        float32 logits `[batch, target_length, vocabulary_size]`.

    Examples:
        >>> model = transformer(8000, preset="tiny")
    """
    config = resolve_preset(TRANSFORMER_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    config.setdefault("name", "transformer")
    return Seq2SeqTransformer(vocabulary_size, **config)

"""Model builders of the zoo."""

import json

from keras_attn_zoo.models.bahdanau_rnn import BahdanauRNN
from keras_attn_zoo.models.bahdanau_rnn import bahdanau_rnn
from keras_attn_zoo.models.baselines import hard_coded_transformer
from keras_attn_zoo.models.baselines import synthesizer_transformer
from keras_attn_zoo.models.eager import EagerLSTMTranslator
from keras_attn_zoo.models.eager import eager_translator
from keras_attn_zoo.models.gmm_transformer import gmm_transformer
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.ran_transformer import ran_transformer
from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer
from keras_attn_zoo.models.attention_kinds import register_attention_kind
from keras_attn_zoo.models.transformer import transformer
from keras_attn_zoo.models.weighted_transformer import weighted_transformer

MODEL_BUILDERS = {
    "transformer": transformer,
    "bahdanau_rnn": bahdanau_rnn,
    "eager_translator": eager_translator,
    "gmm_transformer": gmm_transformer,
    "hard_coded_transformer": hard_coded_transformer,
    "ran_transformer": ran_transformer,
    "synthesizer_transformer": synthesizer_transformer,
    "weighted_transformer": weighted_transformer,
}

# The published models the zoo compares, by the names the papers use: builder
# name and builder options. Every builder appears at least once.
MODEL_VARIANTS = {
    "transformer": ("transformer", {}),
    "RAN-E": ("ran_transformer", {"apply_to": "encoder"}),
    "RAN-D": ("ran_transformer", {"apply_to": "decoder"}),
    "RAN-ALL": ("ran_transformer", {"apply_to": "all"}),
    "GMM": ("gmm_transformer", {}),
    "weighted": ("weighted_transformer", {}),
    "HC-SA": ("hard_coded_transformer", {}),
    "Syn-R": ("synthesizer_transformer", {}),
    "RNNsearch": ("bahdanau_rnn", {}),
    "eager": ("eager_translator", {}),
}


def parse_model_options(text):
    """`"norm_first=true;num_heads=8"` -> `{"norm_first": True, "num_heads": 8}`.

    The `--model-options` syntax of the recipes and benchmarks: `key=value`
    pairs joined by `;`, values read as JSON when they parse (numbers, `true`,
    lists), else kept as strings (`apply_to=all`).
    """
    options = {}
    for item in filter(None, (text or "").split(";")):
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"Model option {item!r} is not key=value.")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value.strip()
    return options


def build_model(name, vocabulary_size, preset="small", **overrides):
    """Builds a zoo model by its builder name (as `train_wmt.py --model` does)."""
    if name not in MODEL_BUILDERS:
        raise ValueError(f"Unknown model {name!r}; choose one of {sorted(MODEL_BUILDERS)}.")
    return MODEL_BUILDERS[name](vocabulary_size, preset=preset, **overrides)

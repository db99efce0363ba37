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
from keras_attn_zoo.models.weighted_transformer import WEIGHTED_VARIANTS
from keras_attn_zoo.models.weighted_transformer import weighted_transformer
from keras_attn_zoo.models.zoo_model import ZooModel

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

# The leaderboard's models: the published ones, then the Weighted Transformer's
# corrected forms of issue 32 (`"weighted"` is the paper's form), trained under
# the same protocol so that their cells choose the builder's default.
LEADERBOARD_MODELS = {
    **MODEL_VARIANTS,
    **{f"weighted-{form.replace('_', '-')}": ("weighted_transformer", options)
       for form, options in WEIGHTED_VARIANTS.items() if options},
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


def format_model_options(options):
    """`{"norm_first": True, "apply_to": "all"}` -> `"norm_first=true;apply_to=all"`:
    the `--model-options` text that `parse_model_options` reads back to `options`
    (strings as they are, other values as JSON)."""
    return ";".join(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                    for key, value in options.items())


def _builder(name):
    if name not in MODEL_BUILDERS:
        raise ValueError(f"Unknown model {name!r}; choose one of {sorted(MODEL_BUILDERS)}.")
    return MODEL_BUILDERS[name]


def build_model(name, vocabulary_size, preset="small", **overrides):
    """Builds a zoo model by its builder name (as `train_wmt.py --model` does)."""
    return _builder(name)(vocabulary_size, preset=preset, **overrides)


def extra_token_count(name):
    """The vocabulary ids the models of builder `name` add after the tokenizer's
    pieces (their `extra_token_count`; the eager translator's 3), known before
    one is built: a tokenizer of `pieces` ids needs
    `build_model(name, pieces + extra_token_count(name))`.

    A builder whose models add ids says so in its `extra_token_count`
    attribute; the others add none (`ZooModel.extra_token_count`).
    """
    return int(getattr(_builder(name), "extra_token_count", ZooModel.extra_token_count))

"""Export a `Translator` (a zoo model, its vocabulary and search) as a TF Serving SavedModel.

Layout (TF Serving's: a base directory with one integer directory per version)::

    saved_models/NAME/
        1/
        2/
            saved_model.pb, variables/  the Translator: tokenizer + model + search
            assets/vocab.model          the SentencePiece model (for translate_ids clients)
            model_card.json             what the model is, how it was made, how to call it

Versions: ``version=None`` takes the next integer after the existing versions (1 for
a new model). An existing version is never overwritten.

Atomicity: everything is written to a hidden temporary directory beside the version
(``.tmp-<version>-*`` in the same base directory, so on the same file system) and
renamed into place with ``os.rename``; TF Serving and `latest_version` never see a
half-written version, and a failure removes the temporary directory.

Loading needs only TensorFlow and tensorflow-text::

    import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the ops)
    translator = tf.saved_model.load("saved_models/NAME/2")
    translator.signatures["translate"](text=tf.constant(["Guten Morgen ."]))
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import shutil
import tempfile

import tensorflow as tf

from keras_attn_zoo.inference.translator import REPLACEMENT_CHARACTER
from keras_attn_zoo.inference.translator import UNICODE_ERRORS
from keras_attn_zoo.inference.translator import Translator

# Every signature an export can have; "score" only for models whose outputs
# are plain SentencePiece pieces (see `Translator.can_score`).
SIGNATURE_NAMES = ("serving_default", "translate", "translate_with_options",
                   "translate_n_best", "sample", "translate_ids", "score")
VOCABULARY_FILE = "assets/vocab.model"
MODEL_CARD_FILE = "model_card.json"
_TEMPORARY_PREFIX = ".tmp-"


def existing_versions(base_path):
    """Sorted integer versions under ``base_path`` (directories named by an integer)."""
    base_path = pathlib.Path(base_path)
    if not base_path.is_dir():
        return []
    return sorted(int(child.name) for child in base_path.iterdir()
                  if child.is_dir() and child.name.isdigit())


def latest_version(base_path):
    """The newest complete version directory of ``base_path``.

    ``base_path`` may also be a version directory itself (it holds
    ``saved_model.pb``). Raises ``FileNotFoundError`` when there is none.
    """
    base_path = pathlib.Path(base_path)
    if (base_path / "saved_model.pb").is_file():
        return base_path
    for version in reversed(existing_versions(base_path)):
        candidate = base_path / str(version)
        if (candidate / "saved_model.pb").is_file():
            return candidate
    raise FileNotFoundError(
        f"No SavedModel in {base_path}: expected saved_model.pb there or in an "
        "integer version directory below it (e.g. 1/saved_model.pb)."
    )


def load_model_card(version_dir):
    """The ``model_card.json`` of an export's version directory; ``{}`` without one."""
    card_path = pathlib.Path(version_dir) / MODEL_CARD_FILE
    if card_path.is_file():
        return json.loads(card_path.read_text(encoding="utf-8"))
    return {}


def _signature_card():
    return {
        "serving_default": "same as translate",
        "translate": {
            "inputs": {"text": "string[B]"},
            "outputs": {
                "translation": "string[B]",
                "score": "float32[B] length-penalised log-probability (0 for empty input)",
                "alignment": "float32[B,T,S] cross-attention, target piece x source token",
                "length": "int32[B] pieces of the translation",
                "source_pieces": "string[B,S] source pieces + '</s>' ('' padded)",
                "target_pieces": "string[B,T] translation pieces ('' padded)",
            },
        },
        "translate_with_options": {
            "inputs": {"text": "string[B]", "beam_size": "int32[]",
                       "length_penalty": "float32[]", "max_length_a": "float32[]",
                       "max_length_b": "float32[]"},
            "outputs": "as translate",
        },
        "translate_n_best": {
            "inputs": {"text": "string[B]", "beam_size": "int32[]",
                       "length_penalty": "float32[]", "max_length_a": "float32[]",
                       "max_length_b": "float32[]",
                       "num_hypotheses": "int32[] N, 1 <= N <= beam_size",
                       "no_repeat_ngram_size": "int32[] n > 0 bans repeated n-grams, 0 off"},
            "outputs": "as translate (best hypothesis) + hypotheses string[B,N], "
                       "hypothesis_scores float32[B,N], hypothesis_lengths int32[B,N]",
        },
        "sample": {
            "inputs": {"text": "string[B]", "temperature": "float32[] > 0",
                       "top_k": "int32[] (0: all)", "top_p": "float32[] in (0, 1]",
                       "seed": "int32[]", "max_length_a": "float32[]",
                       "max_length_b": "float32[]"},
            "outputs": "as translate; score = sum of untempered log-probs",
        },
        "score": {
            "inputs": {"text": "string[B] source", "target": "string[B] translation"},
            "outputs": {"log_prob": "float32[B] sum over pieces and EOS",
                        "token_log_probs": "float32[B,T+1]", "length": "int32[B]",
                        "target_pieces": "string[B,T]"},
            "only": "models whose outputs are plain pieces (not the eager translator)",
        },
        "translate_ids": {
            "inputs": {"source_ids": "int32[B,S] pieces then EOS, 0-padded",
                       "beam_size": "int32[]", "length_penalty": "float32[]",
                       "max_length_a": "float32[]", "max_length_b": "float32[]"},
            "outputs": {"ids": "int32[B,T] no BOS/EOS, 0-padded",
                        "lengths": "int32[B]", "scores": "float32[B]",
                        "alignment": "float32[B,T,S]"},
            "ops": "core TensorFlow only (no tensorflow-text needed)",
        },
    }


def build_model_card(translator, *, name, version, model_card=None):
    """The ``model_card.json`` content; ``model_card`` entries override the defaults."""
    from keras_attn_zoo import __version__
    from keras_attn_zoo.decoding import common

    model = translator.model
    config = model.zoo_config
    card = {
        "name": name,
        "version": version,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "model": model.name,
        "model_class": type(model).__name__,
        "model_config": config,
        "preset": None,
        "data": None,
        "direction": None,
        "bleu": None,
        "signatures": _signature_card(),
        "signature_names": sorted(translator.signatures()),
        "defaults": {
            "beam_size": translator.beam_size,
            "length_penalty": translator.length_penalty,
            "max_length_a": translator.max_length_a,
            "max_length_b": translator.max_length_b,
        },
        "max_input_length": translator.max_input_length,
        "max_input_length_counts": "SentencePiece pieces + EOS; longer input is an "
                                   "error, never truncated",
        "invalid_utf8": f"{UNICODE_ERRORS}: replaced by U+{REPLACEMENT_CHARACTER:04X}",
        "empty_input": "translates to '' with score 0",
        "special_ids": {"pad": common.PAD_ID, "unk": 1, "bos": common.BOS_ID,
                        "eos": common.EOS_ID},
        "vocabulary_file": VOCABULARY_FILE,
        "vocabulary_size": translator.vocabulary_size,
        "load": "import tensorflow as tf, tensorflow_text; "
                "tf.saved_model.load(path)",
        "versions": {"keras_attn_zoo": __version__, "tensorflow": tf.__version__,
                     "keras": _module_version("keras"),
                     "tensorflow_text": _module_version("tensorflow_text")},
    }
    card.update(model_card or {})
    return card


def _module_version(module_name):
    try:
        module = __import__(module_name)
    except ImportError:  # pragma: no cover
        return None
    return getattr(module, "__version__", None)


def export_saved_model(translator, path, *, name=None, version=None, model_card=None):
    """Exports a ready ``Translator`` (model, vocabulary, search) as ``<path>/<version>/``.

    The translator is the run's own (``workflow.run_translator``): its
    defaults (beam size, length penalty, output limit, ``max_input_length``)
    become the ``translate`` signature's, and its functions already traced by
    the run's evaluations are reused, so the export searches exactly as the
    run evaluated. Build one with ``Translator(model, tokenizer, beam_size=...)``.

    Args:
        translator: a `keras_attn_zoo.inference.Translator`.
        path: the model's base directory, e.g. ``saved_models/transformer-de-en``.
        name: the model's name in the card (default: the base directory's name).
        version: int; default the next integer after the existing versions.
        model_card: dict merged into ``model_card.json`` (e.g. ``preset``, ``data``,
            ``direction``, ``bleu``); every value must be JSON-serialisable.

    Returns:
        ``pathlib.Path`` of the new version directory.

    Raises:
        TypeError: if ``translator`` is not a ``Translator``, or ``model_card`` is
            not JSON-serialisable (nothing is left on disk).
        FileExistsError: if the version already exists.
    """
    if not isinstance(translator, Translator):
        raise TypeError(
            "export_saved_model takes a Translator (keras_attn_zoo.inference.Translator"
            "(model, tokenizer, beam_size=..., length_penalty=...)), got "
            f"{type(translator).__name__}.")
    base = pathlib.Path(path)
    base.mkdir(parents=True, exist_ok=True)
    if version is None:
        version = (existing_versions(base) or [0])[-1] + 1
    version = int(version)
    if version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version}.")
    final = base / str(version)
    if final.exists():
        raise FileExistsError(f"{final} already exists; versions are never overwritten.")

    card = build_model_card(translator, name=name or base.resolve().name,
                            version=version, model_card=model_card)

    temporary = pathlib.Path(tempfile.mkdtemp(
        prefix=f"{_TEMPORARY_PREFIX}{version}-", dir=base))
    try:
        tf.saved_model.save(translator, str(temporary),
                            signatures=translator.signatures())
        vocabulary = temporary / VOCABULARY_FILE
        vocabulary.parent.mkdir(parents=True, exist_ok=True)
        vocabulary.write_bytes(translator.proto)
        with open(temporary / MODEL_CARD_FILE, "w", encoding="utf-8") as card_file:
            json.dump(card, card_file, indent=2, ensure_ascii=False)
            card_file.write("\n")
        os.chmod(temporary, 0o755)  # mkdtemp makes it 0700
        os.rename(temporary, final)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return final

"""Shared pytest fixtures."""

import gc
import json
import os
import pathlib
import random
import shutil

import pytest

from keras_attn_zoo.runtime import freeze_import_time_objects
from keras_attn_zoo.runtime import use_pooled_cpu_allocator

# Before any test module imports TensorFlow: the allocator the recipe uses
# (and subprocesses inherit it), which also spares the suite the page faults.
use_pooled_cpu_allocator()
# Under pytest-xdist each worker gets one TensorFlow thread per pool: with as many
# workers as cores, more threads only contend (measured 9% faster on 2 cores).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# XLA's compiles (the compiled and mirrored training steps, the JAX backend's
# fit) are most of those tests' CPU. LLVM at -O0 about halves them (JAX check:
# 152 -> 91 CPU s), XLA's older loop emitters in place of its fusion emitters
# take a third off again (JAX check 97 -> 59-63 CPU s, compiled and
# multi-worker steps 80-86 -> 68-69), and LLVM without its expensive passes
# another 15% (those three files 137-144 -> 122-124 CPU s). They compute the
# same maths: the tests check what XLA computes, not how fast. Subprocesses
# inherit them. The pinned TensorFlow and jax know these flags (an unknown flag
# aborts XLA).
_XLA_TEST_FLAGS = {"--xla_backend_optimization_level": "0",
                   "--xla_cpu_use_fusion_emitters": "false",
                   "--xla_llvm_disable_expensive_passes": "true"}
for _flag, _value in _XLA_TEST_FLAGS.items():
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_flag}={_value}".strip()


def pytest_configure(config):
    # pytest-xdist's controller only hands out files (its workers collect and run
    # them): it skips the imports below, ~10 CPU s beside the workers' own.
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    # Every test module imports them: once they are in, the collector stops walking
    # their objects, and it runs a tenth as often (tracing makes millions of short-
    # lived objects). Collection in tests/test_early_stopping.py: 8.2 s with
    # Python's defaults, 6.3 s frozen, 3.4 s frozen and at these thresholds.
    import keras  # noqa: F401
    import keras_hub  # noqa: F401
    import tensorflow  # noqa: F401

    from tests.graph_settings import turn_off_grappler

    turn_off_grappler()  # in these workers; see tests/graph_settings.py

    freeze_import_time_objects()
    gc.set_threshold(7000, 10, 10)


# pytest-xdist (`--dist loadfile --no-loadscope-reorder`, the Makefile's) hands
# out files in collection order; by default it reorders them by test count, which
# left the two longest files (one or two tests each) for last, one worker
# running them while the other idled. Slowest first instead, by the seconds
# measured per file (scripts/test_file_seconds.py); a file not measured yet
# counts as slowest. The order within a file is kept.
_FILE_SECONDS = json.loads(
    (pathlib.Path(__file__).with_name("file_seconds.json")).read_text(encoding="utf-8"))


def pytest_collection_modifyitems(config, items):
    def seconds(item):
        return _FILE_SECONDS.get(item.nodeid.split("::", 1)[0], float("inf"))

    items.sort(key=seconds, reverse=True)


def _seed_zero():
    from keras_attn_zoo.training.seeding import seed_everything

    seed_everything(0)


# pytest-xdist hands files to workers in whatever order they free up, so the
# random state a test (or a module's fixtures) starts from used to depend on
# what ran before it in its worker: a threshold met on one schedule could fail
# on another (a κ/α move of 0.0099 against a bound of 0.01 did, once). Every
# module and every test now starts from seed 0. Not tf.random: see
# `seed_everything`.
@pytest.fixture(autouse=True, scope="module")
def same_random_state_for_each_module():
    _seed_zero()


@pytest.fixture(autouse=True)
def same_random_state_for_each_test():
    _seed_zero()


# A tiny synthetic German-English corpus: enough text for a SentencePiece model of ~150 pieces
# in milliseconds, with umlauts and ß so that German round trips are tested.
_SUBJECTS = [
    ("der Hund", "the dog"),
    ("die Katze", "the cat"),
    ("der Bäcker", "the baker"),
    ("die Lehrerin", "the teacher"),
    ("das Mädchen", "the girl"),
    ("der Junge", "the boy"),
    ("die Ärztin", "the doctor"),
    ("der Fuchs", "the fox"),
]
_VERBS = [
    ("sieht", "sees"),
    ("mag", "likes"),
    ("findet", "finds"),
    ("grüßt", "greets"),
    ("hört", "hears"),
    ("malt", "paints"),
]
_OBJECTS = [
    ("den Ball", "the ball"),
    ("die Straße", "the street"),
    ("den Fluss", "the river"),
    ("das Haus", "the house"),
    ("den Käse", "the cheese"),
    ("die Blume", "the flower"),
    ("das Brot", "the bread"),
]
_ENDINGS = [
    ("heute", "today"),
    ("im Garten", "in the garden"),
    ("sehr gern", "very gladly"),
    ("jeden Morgen", "every morning"),
    ("", ""),
]


def _capitalize(text):
    return text[:1].upper() + text[1:]


def make_synthetic_parallel_sentences(count, seed=0):
    """``count`` distinct-ish (German, English) sentence pairs, deterministic for ``seed``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        (subject_de, subject_en), (verb_de, verb_en), (object_de, object_en), (end_de, end_en) = (
            rng.choice(_SUBJECTS),
            rng.choice(_VERBS),
            rng.choice(_OBJECTS),
            rng.choice(_ENDINGS),
        )
        punctuation = rng.choice(".!?")
        german = " ".join(part for part in (subject_de, verb_de, object_de, end_de) if part)
        english = " ".join(part for part in (subject_en, verb_en, object_en, end_en) if part)
        pairs.append((_capitalize(german) + punctuation, _capitalize(english) + punctuation))
    return pairs


@pytest.fixture(scope="session")
def tiny_parallel_corpus():
    """300 synthetic (German, English) pairs."""
    return make_synthetic_parallel_sentences(300)


@pytest.fixture(scope="session")
def tiny_sentencepiece_model(tmp_path_factory, tiny_parallel_corpus):
    """Path of a joint SentencePiece model (about 150 pieces, ids PAD/UNK/BOS/EOS = 0/1/2/3)."""
    from keras_attn_zoo.data.vocabulary import train_sentencepiece

    output_path = tmp_path_factory.mktemp("vocabulary") / "tiny.model"
    return train_sentencepiece(tiny_parallel_corpus, output_path, vocab_size=150)


@pytest.fixture
def tiny_tokenizer(tiny_sentencepiece_model):
    """A keras_hub SentencePieceTokenizer of ``tiny_sentencepiece_model``.

    One per test (milliseconds): a test that reseeds TensorFlow clears its
    kernel cache, which destroys the SentencePiece resource of every tokenizer
    created eagerly before it, so a shared one failed later tests by order.
    """
    from keras_attn_zoo.data.vocabulary import load_tokenizer

    return load_tokenizer(tiny_sentencepiece_model)


@pytest.fixture(scope="session")
def tiny_trained_export(tmp_path_factory, worker_id):
    """`(translator, base, version_dir)` of a tiny trained, exported Transformer.

    Shared by the export, serving, CLI, analysis and README tests: treat it as
    read-only (copy the version directory to change anything). Under
    pytest-xdist the first worker to ask builds it (40 s on 2 busy cores) in
    the run's shared temporary directory and the others load its files.
    """
    from filelock import FileLock

    from tests.tiny_export import TRAIN_EPOCHS
    from tests.tiny_export import build_tiny_export
    from tests.tiny_export import load_tiny_export

    if worker_id == "master":  # not under xdist
        return build_tiny_export(tmp_path_factory.mktemp("tiny_export"), train_epochs=TRAIN_EPOCHS)
    directory = tmp_path_factory.getbasetemp().parent / "tiny_export"
    with FileLock(f"{directory}.lock"):
        complete = directory / "complete"
        if complete.exists():
            return load_tiny_export(directory)
        shutil.rmtree(directory, ignore_errors=True)  # a worker died building it
        built = build_tiny_export(directory, train_epochs=TRAIN_EPOCHS)
        complete.touch()
        return built


@pytest.fixture(scope="session")
def tiny_export(tiny_trained_export):
    """Base directory (`saved_models/NAME`) of `tiny_trained_export`."""
    return tiny_trained_export[1]


def write_parallel_files(directory, splits):
    """Writes ``{split: pairs}`` as ``<split>.src`` / ``<split>.tgt`` line files.

    Returns ``{"<split>_src": path, "<split>_tgt": path, ...}``.
    """
    files = {}
    for split, pairs in splits.items():
        for side, index in (("src", 0), ("tgt", 1)):
            path = directory / f"{split}.{side}"
            path.write_text("".join(f"{pair[index]}\n" for pair in pairs), encoding="utf-8")
            files[f"{split}_{side}"] = path
    return files


def load_recipe(name):
    """``recipes/<name>.py`` as a module (the recipes are scripts, not a package)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "recipes" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

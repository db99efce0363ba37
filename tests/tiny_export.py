"""A tiny exported Transformer shared by the export, CLI, server and analysis tests."""

import pathlib
import random
import textwrap

import numpy as np

from keras_attn_zoo.data.vocabulary import BOS_ID
from keras_attn_zoo.data.vocabulary import EOS_ID
from keras_attn_zoo.data.vocabulary import load_tokenizer
from keras_attn_zoo.data.vocabulary import train_sentencepiece
from keras_attn_zoo.export import Translator
from keras_attn_zoo.export import export_saved_model
from keras_attn_zoo.optimizers import Adam

# A toy "language pair": a word-for-word dictionary, so a few training steps already
# give translations that depend on the input.
LEXICON = {
    "the": "der", "a": "ein", "cat": "katze", "dog": "hund", "house": "haus",
    "tree": "baum", "sees": "sieht", "likes": "mag", "big": "gross", "small": "klein",
    "red": "rot", "green": "gruen", "runs": "rennt", "sleeps": "schlaeft",
    "and": "und", "bird": "vogel",
}

SENTENCES = [
    "the cat sees the dog",
    "a small bird sleeps",
    "the big red house and the green tree and a dog runs and the cat sleeps",
    "dog",
    "the tree likes a small cat",
]


def synthetic_pairs(count=200, seed=0):
    rng = random.Random(seed)
    words = sorted(LEXICON)
    pairs = []
    for _ in range(count):
        source = [rng.choice(words) for _ in range(rng.randint(1, 8))]
        pairs.append((" ".join(source), " ".join(LEXICON[w] for w in source)))
    return pairs


def _batch(tokenizer, pairs):
    def ids(texts, prefix, suffix):
        rows = [prefix + list(np.asarray(tokenizer(t))) + suffix for t in texts]
        width = max(len(r) for r in rows)
        return np.array([r + [0] * (width - len(r)) for r in rows], "int32")

    source = ids([s for s, _ in pairs], [], [EOS_ID])
    target = ids([t for _, t in pairs], [BOS_ID], [EOS_ID])
    return {"source_ids": source, "target_ids": target[:, :-1]}, target[:, 1:]


# Epochs of the shared trained export (conftest's `tiny_trained_export`) at
# LEARNING_RATE: enough that every test sentence gets a non-empty,
# input-dependent translation that ends before the length limit. At 1e-2 (no
# warm-up) 20 epochs ended at loss 1.4-1.8 on an AMD EPYC, where greedy outputs
# repeated one word to the limit in half the sentences; 3e-3 for 30 epochs ends
# at 0.16-0.26 on seeds 0-2, with 29-30 of the 30 CTranslate2 test outputs
# ending by themselves.
TRAIN_EPOCHS = 30
LEARNING_RATE = 3e-3


def build_tiny_export(directory, train_epochs=0, seed=0):
    """Tokenizer + tiny Transformer (+ a few epochs) + Translator, exported once.

    Returns ``(translator, base_dir, version_dir)``.
    """
    import keras

    from keras_attn_zoo.models import transformer

    directory = pathlib.Path(directory)
    pairs = synthetic_pairs()
    vocab_path = train_sentencepiece(pairs, directory / "vocab.model", vocab_size=60)
    # Python and NumPy seeds fix Keras 3's initial weights. Not
    # keras.utils.set_random_seed: tf.random.set_seed clears TensorFlow's kernel
    # cache, destroying the SentencePiece resources of eagerly created tokenizers
    # (e.g. the session-scoped `tiny_tokenizer` of conftest.py).
    random.seed(seed)
    np.random.seed(seed)
    tokenizer = load_tokenizer(vocab_path)
    model = transformer(int(tokenizer.vocabulary_size()), preset="tiny")
    if train_epochs:
        inputs, labels = _batch(tokenizer, pairs)
        model.compile(optimizer=Adam(LEARNING_RATE),
                      loss=keras.losses.SparseCategoricalCrossentropy(
                          from_logits=True, ignore_class=0))
        model.fit(inputs, labels, batch_size=25, epochs=train_epochs, verbose=0,
                  shuffle=False)
    model.save(directory / "model.keras")  # for `load_tiny_export`
    translator = Translator(model, tokenizer)
    base = directory / "saved_models" / "tiny-en-de"
    version_dir = export_saved_model(
        translator, base,
        model_card={"preset": "tiny", "data": "synthetic", "direction": "en-de"})
    return translator, base, version_dir


def load_tiny_export(directory):
    """`build_tiny_export`'s result from the files it wrote in `directory`."""
    import keras

    import keras_attn_zoo.models  # noqa: F401  (registers the zoo's classes)

    directory = pathlib.Path(directory)
    model = keras.saving.load_model(directory / "model.keras", compile=False)
    translator = Translator(model, load_tokenizer(directory / "vocab.model"))
    base = directory / "saved_models" / "tiny-en-de"
    return translator, base, base / "1"


# Start of a script run in a fresh interpreter: any import of keras_attn_zoo
# fails, so the script proves a SavedModel loads with tensorflow and
# tensorflow_text alone. `op_types(concrete)`: the op types of a signature's
# graph and its functions, to check that a server needs no custom op.
FRESH_PROCESS_PRELUDE = textwrap.dedent(r"""
    import json, sys

    class BlockZoo:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "keras_attn_zoo":
                raise ImportError("keras_attn_zoo must not be needed to load the model")
            return None

    sys.meta_path.insert(0, BlockZoo())
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    def op_types(concrete):
        graph_def = concrete.graph.as_graph_def()
        ops = {node.op for node in graph_def.node}
        for function in graph_def.library.function:
            ops |= {node.op for node in function.node_def}
        return sorted(ops)
""")

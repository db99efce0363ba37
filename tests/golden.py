"""Fixed checkpoints of every published model, made with the code from before
the issue-15 refactor, and what that code computed from them.

`python -m tests.golden` (from the repository root) rewrites `tests/data/golden/`:
the vocabulary, one `<model>.npz` of weights per model (a few epochs on the toy lexicon of
`tests/tiny_export.py`, so translations depend on the input; NumPy arrays by
variable path, far smaller than `.weights.h5` files) and
`expected.json`/`expected_logits.npz`: the teacher-forced logits and the
beam-4 translations of `SENTENCES`. `tests/test_golden_translations.py` checks
today's code against them; rewrite them only on purpose, when a change of
numerics is intended and said in the commit.
"""

import json
import pathlib
import random

import numpy as np

from tests.tiny_export import SENTENCES
from tests.tiny_export import _batch
from tests.tiny_export import synthetic_pairs

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
VOCABULARY = GOLDEN / "vocab.model"
MAX_LENGTH = 32  # for the fixed-size mechanisms (RAN, Syn-R)
TRAIN_EPOCHS = 8


def build(name, vocabulary_size):
    """The tiny model of MODEL_VARIANTS[name] (the eager one with its 3 extra ids)."""
    from keras_attn_zoo.models import MODEL_VARIANTS
    from keras_attn_zoo.models import build_model

    builder, options = MODEL_VARIANTS[name]
    options = dict(options)
    if builder in ("ran_transformer", "synthesizer_transformer"):
        options["max_length"] = MAX_LENGTH
    if builder == "eager_translator":
        vocabulary_size += 3
        # The decoding the golden translations were made with (the defaults
        # before issue 32 made the reference code's the model's).
        options.update(length_normalization="gnmt", injection_end="choose")
    return build_model(builder, vocabulary_size, preset="tiny", **options)


def save_weights(model, path):
    np.savez_compressed(path, **{variable.path: variable.numpy()
                                 for variable in model.weights})


def load_weights(model, path):
    """Assigns every variable by its path; a missing or extra path is an error."""
    stored = np.load(path)
    paths = [variable.path for variable in model.weights]
    if sorted(paths) != sorted(stored.files):
        raise ValueError(
            f"{path.name}: variables differ; only in the model "
            f"{sorted(set(paths) - set(stored.files))}, only in the file "
            f"{sorted(set(stored.files) - set(paths))}.")
    for variable in model.weights:
        variable.assign(stored[variable.path])


def teacher_forced_inputs(tokenizer):
    """The batch of `SENTENCES` paired with their lexicon translations."""
    from tests.tiny_export import LEXICON

    pairs = [(s, " ".join(LEXICON[w] for w in s.split())) for s in SENTENCES]
    inputs, _ = _batch(tokenizer, pairs)
    if inputs["source_ids"].shape[1] != inputs["target_ids"].shape[1]:
        # The eager model reads and writes in lockstep: equal lengths.
        width = max(inputs["source_ids"].shape[1], inputs["target_ids"].shape[1])
        inputs = {key: np.pad(value, [(0, 0), (0, width - value.shape[1])])
                  for key, value in inputs.items()}
    return inputs


def main():
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.data.vocabulary import train_sentencepiece
    from keras_attn_zoo.export import Translator
    from keras_attn_zoo.models import MODEL_VARIANTS

    GOLDEN.mkdir(parents=True, exist_ok=True)
    pairs = synthetic_pairs()
    train_sentencepiece(pairs, VOCABULARY, vocab_size=60)
    tokenizer = load_tokenizer(VOCABULARY)
    size = int(tokenizer.vocabulary_size())
    inputs = teacher_forced_inputs(tokenizer)
    train_inputs, train_labels = _batch(tokenizer, pairs)
    expected, logits = {}, {}
    for index, name in enumerate(MODEL_VARIANTS):
        random.seed(index)
        np.random.seed(index)
        model = build(name, size)
        if name != "eager":  # the eager model trains on aligned pairs; random weights do
            model.compile(optimizer=keras.optimizers.Adam(1e-2),
                          loss=keras.losses.SparseCategoricalCrossentropy(
                              from_logits=True, ignore_class=0))
            model.fit(train_inputs, train_labels, batch_size=25, epochs=TRAIN_EPOCHS,
                      verbose=0, shuffle=False)
        save_weights(model, GOLDEN / f"{name}.npz")
        logits[name] = np.asarray(model(inputs, training=False), np.float32)
        expected[name] = Translator(model, tokenizer).translate_texts(list(SENTENCES))
        print(name, expected[name])
    np.savez_compressed(GOLDEN / "expected_logits.npz", **logits)
    (GOLDEN / "expected.json").write_text(
        json.dumps({"sentences": SENTENCES, "translations": expected},
                   indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

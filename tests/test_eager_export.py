"""The eager translator through the shared Translator, the SavedModel export and the recipe.

One tiny eager model (tiny preset, 40 Trainer steps on the conftest corpus and
SentencePiece model, with monotone links) is trained once per module; its
Translator must give exactly ``eager_translate`` + ``strip_eager_tokens`` +
detokenization, the SavedModel reloaded in a fresh process (tensorflow +
tensorflow_text only) the same translations, and ``translate_ids`` must stay
core-ops only. A last test runs
``recipes/train_wmt.py --model eager_translator`` end to end on small files.
"""

import json
import os
import pathlib
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import load_recipe
from tests.tiny_export import FRESH_PROCESS_PRELUDE
import tensorflow as tf

from keras_attn_zoo.models.eager import eager_vocabulary_size
from keras_attn_zoo.models.eager.preprocessing import make_eager_dataset
from keras_attn_zoo.models.eager.preprocessing import make_eager_id_pairs
from keras_attn_zoo.data.vocabulary import EOS_ID
from keras_attn_zoo.data.vocabulary import vocabulary_size
from keras_attn_zoo.decoding.eager_processor import eager_translate
from keras_attn_zoo.evaluation.scores import corpus_scores
from keras_attn_zoo.evaluation.source_padding import choose_source_padding_injection
from keras_attn_zoo.export import Translator
from keras_attn_zoo.export import export_saved_model
from keras_attn_zoo.models.eager import eager_translator
from keras_attn_zoo.models.eager.processor import strip_eager_tokens
from keras_attn_zoo.optimizers import Adam

REPO = pathlib.Path(__file__).resolve().parents[1]
START_PADS = 2
BEAM = dict(beam_size=5, length_penalty=0.6, max_length_a=2.0, max_length_b=10)


@pytest.fixture(scope="module")
def tokenizer(tiny_sentencepiece_model):
    """This module's own tokenizer of the conftest SentencePiece model.

    Not the session ``tiny_tokenizer``: tests/test_eager.py calls
    ``keras.utils.set_random_seed``, whose ``tf.random.set_seed`` clears the kernel
    cache and with it the SentencePiece resource of a tokenizer created before, so
    instantiating the shared one here first would break that module's later use.
    """
    from keras_attn_zoo.data.vocabulary import load_tokenizer

    return load_tokenizer(tiny_sentencepiece_model)


@pytest.fixture(scope="module")
def sentencepiece(tiny_sentencepiece_model):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor

    return sentencepiece_processor(tiny_sentencepiece_model)


@pytest.fixture(scope="module")
def trained(tiny_parallel_corpus, tokenizer):
    from keras_attn_zoo.training import Trainer

    id_pairs, _ = make_eager_id_pairs(tiny_parallel_corpus, tokenizer,
                                      aligner="monotone", start_pads=START_PADS)
    # Not keras.utils.set_random_seed: it clears TensorFlow's kernel cache, which
    # kills the session tokenizer's SentencePiece resource (see tests/tiny_export.py).
    random.seed(0)
    np.random.seed(0)
    model = eager_translator(eager_vocabulary_size(vocabulary_size(tokenizer)),
                             preset="tiny", start_pads=START_PADS)
    trainer = Trainer(model, Adam(0.02), label_smoothing=0.0,
                      checkpoint_every=0)
    for inputs, labels in make_eager_dataset(id_pairs, batch_size=32).repeat().take(40):
        trainer.train_on_batch(inputs, labels)
    return model, Translator(model, tokenizer, beam_size=BEAM["beam_size"])


@pytest.fixture(scope="module")
def sentences(tiny_parallel_corpus):
    return [source for source, _ in tiny_parallel_corpus[:6]] + ["Hund", "", " "]


@pytest.fixture(scope="module")
def references(trained, sentencepiece, sentences):
    """``{beam_size: reference_translations(...)}`` of the module's model and
    sentences, each computed once: a sentence-at-a-time search of the nine
    sentences costs ~10 s, and two tests compare against beam 5."""
    model, _ = trained
    computed = {}

    def of_beam(beam_size):
        if beam_size not in computed:
            computed[beam_size] = reference_translations(model, sentencepiece, sentences,
                                                         beam_size)
        return computed[beam_size]

    return of_beam


def reference_translations(model, sentencepiece, texts, beam_size):
    """``eager_translate`` one sentence at a time, stripped and detokenized."""
    output = []
    for text in texts:
        pieces = sentencepiece.encode(text)
        if not pieces:  # the Translator's empty-input rule
            output.append("")
            continue
        options = dict(BEAM, beam_size=beam_size)
        row = eager_translate(model, np.array([pieces + [EOS_ID]], "int32"), **options)[0]
        output.append(sentencepiece.decode(row))
    return output


def test_hooks(trained, tokenizer):
    model, translator = trained
    assert model.extra_token_count == 3
    assert translator.vocabulary_size + 3 == model.zoo_config["vocabulary_size"]
    assert model.logits_processor is model.logits_processor  # built once
    wrong = eager_translator(translator.vocabulary_size, preset="tiny")
    with pytest.raises(ValueError, match=r"pieces \+ 3 model-specific ids"):
        Translator(wrong, tokenizer)


def test_clean_output_filters_ids_and_alignment(trained):
    model, _ = trained
    start, epsilon, pad = model.special_ids
    ids = np.array([[start, start, 9, epsilon, 10, pad, 0],
                    [start, 11, 12, 13, 0, 0, 0],
                    [start, epsilon, 0, 0, 0, 0, 0]], "int32")
    lengths = np.array([6, 2, 2], "int32")  # row 1: tokens 12, 13 lie beyond its length
    alignment = np.zeros([3, 7, 4], "float32")
    alignment[:, np.arange(7), np.arange(7) % 4] = 1.0
    new_ids, new_lengths, new_alignment = (
        t.numpy() for t in model.clean_output(ids, lengths, alignment))
    np.testing.assert_array_equal(new_ids, [[9, 10], [11, 0], [0, 0]])
    np.testing.assert_array_equal(new_lengths, [2, 1, 0])
    expected = [row[:length] for row, length in zip(ids.tolist(), lengths)]
    assert [row[:n].tolist() for row, n in zip(new_ids, new_lengths)] == [
        strip_eager_tokens(row, model.special_ids) for row in expected]
    # Each kept token keeps its own alignment row; the rest is zero.
    np.testing.assert_array_equal(new_alignment[0], alignment[0, [2, 4]])
    np.testing.assert_array_equal(new_alignment[1, 0], alignment[1, 1])
    assert not new_alignment[1, 1:].any() and not new_alignment[2].any()
    assert model.clean_output(ids, lengths)[2] is None


@pytest.mark.parametrize("beam_size", [5, 1])
def test_translator_equals_eager_translate(trained, references, sentences, beam_size):
    _, translator = trained
    expected = references(beam_size)
    assert translator.translate_texts(sentences, beam_size=beam_size) == expected
    assert any(expected)


def test_translate_ids_output_has_no_eager_tokens(trained, sentencepiece, sentences):
    model, translator = trained
    rows = [sentencepiece.encode(text) + [EOS_ID] for text in sentences[:7]]
    width = max(map(len, rows)) + 3  # extra padding columns are dropped
    source = np.array([row + [0] * (width - len(row)) for row in rows], "int32")
    out = translator.translate_ids(tf.constant(source), tf.constant(5), tf.constant(0.6),
                                   tf.constant(2.0), tf.constant(10.0))
    ids, lengths = out["ids"].numpy(), out["lengths"].numpy()
    alignment = out["alignment"].numpy()
    assert ids.max() < translator.vocabulary_size and lengths.max() > 0
    assert alignment.shape == ids.shape + (width - 3,)
    for row, length in zip(range(len(rows)), lengths):
        assert (ids[row, length:] == 0).all()
        assert not np.isin(ids[row, :length], [0, 2, EOS_ID]).any()
        # The hard "alignment": one source position per kept piece, never padding.
        np.testing.assert_array_equal(alignment[row, :length].sum(-1), 1.0)
        assert alignment[row, :length].argmax(-1).max() < len(rows[row])
        assert not alignment[row, length:].any()


def test_retrace_takes_the_models_new_decoding_rules(trained, tokenizer, sentences):
    """A trace holds the decoding rules it was made with: after ``set_decoding``
    the run's one translator searches by the old rules until ``retrace()``."""
    model, translator = trained
    texts = sentences[:6]
    before = model.zoo_config["source_padding_injection"]
    old = translator.translate_texts(texts)
    try:
        # With N = 0 < START_PADS no source pad is injected: shorter outputs.
        model.set_decoding(source_padding_injection=0)
        assert translator.translate_texts(texts) == old
        translator.retrace()
        new = translator.translate_texts(texts)
        assert new != old
        assert new == Translator(model, tokenizer,
                                 beam_size=BEAM["beam_size"]).translate_texts(texts)
    finally:
        model.set_decoding(source_padding_injection=before)
        translator.retrace()
    assert translator.translate_texts(texts) == old

    # The dev choice sweeps N through one trace (N in a tf.Variable): each
    # candidate must score what its own retraced search gave above. Ranked by
    # chrF, the eager family's valid metric: the tiny model's outputs are too
    # short for 4-gram BLEU to tell.
    choice = choose_source_padding_injection(translator, list(zip(texts, old)),
                                             candidates=(0, before),
                                             beam_size=BEAM["beam_size"], metric="chrf")
    assert choice["metric"] == "chrf"
    assert choice["by_value"][before]["chrf"] == 100.0
    assert choice["by_value"][0]["chrf"] == corpus_scores(new, old)["chrf"] < 100.0
    assert choice["chosen"] == before == model.zoo_config["source_padding_injection"]
    assert translator.translate_texts(texts) == old
    with pytest.raises(ValueError, match=r"metric must be one of \('bleu', 'chrf'\), got 'ter'"):
        choose_source_padding_injection(translator, list(zip(texts, old)), metric="ter")


FRESH_LOAD_SCRIPT = FRESH_PROCESS_PRELUDE + textwrap.dedent(r"""

    path, sentences, source_ids = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["translate"](text=tf.constant(sentences))
    report = {"translate": [t.decode() for t in out["translation"].numpy()],
              "scores": out["score"].numpy().tolist()}
    ids = loaded.signatures["translate_ids"](
        source_ids=tf.constant(source_ids, tf.int32), beam_size=tf.constant(5),
        length_penalty=tf.constant(0.6), max_length_a=tf.constant(2.0),
        max_length_b=tf.constant(10.0))
    report["ids"] = ids["ids"].numpy().tolist()
    report["lengths"] = ids["lengths"].numpy().tolist()

    ids_ops = op_types(loaded.signatures["translate_ids"])
    report["translate_ids_op_count"] = len(ids_ops)
    report["translate_ids_non_core_ops"] = [op for op in ids_ops if not hasattr(tf.raw_ops, op)]
    report["zoo_imported"] = any(m.startswith("keras_attn_zoo") for m in sys.modules)
    print("REPORT " + json.dumps(report))
""")


def test_the_search_grid_gives_one_row_per_beam_to_the_average_ranking(trained, sentences):
    """The eager model ranks by average log-prob (its default): a GNMT length
    penalty does not act on its search, so the valid grid scores each beam once
    (a recipe cell's grid would otherwise decode the valid split once per
    penalty for the same output)."""
    from keras_attn_zoo.evaluation.scores import search_grid

    model, translator = trained
    assert model.length_normalization == "average"
    pairs = [(text, text) for text in sentences[:4]]
    rows = search_grid(translator, pairs, [1, 2], [0.6, 1.0])
    assert [(row["beam_size"], row["length_penalty"]) for row in rows] == [(1, 0.0), (2, 0.0)]
    assert rows[1]["bleu"] == corpus_scores(
        translator.translate_texts(sentences[:4], beam_size=2), sentences[:4])["bleu"]


def test_export_reloads_in_a_fresh_process(trained, sentencepiece, sentences, references,
                                           tmp_path):
    model, translator = trained
    version_dir = export_saved_model(translator, tmp_path / "eager",
                                     model_card={"preset": "tiny"})
    card = json.loads((version_dir / "model_card.json").read_text())
    assert card["model_class"] == "EagerLSTMTranslator"
    rows = [sentencepiece.encode(text) + [EOS_ID] for text in sentences[:4]]
    width = max(map(len, rows))
    source = [row + [0] * (width - len(row)) for row in rows]
    script = tmp_path / "load.py"
    script.write_text(FRESH_LOAD_SCRIPT)
    completed = subprocess.run(
        [sys.executable, str(script), str(version_dir), json.dumps(sentences),
         json.dumps(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [l for l in completed.stdout.splitlines() if l.startswith("REPORT ")][-1]
    report = json.loads(line[len("REPORT "):])
    assert not report["zoo_imported"]

    python_out = translator.translate(tf.constant(sentences))
    assert report["translate"] == [t.decode() for t in python_out["translation"].numpy()]
    assert report["translate"] == references(5)
    np.testing.assert_allclose(report["scores"], python_out["score"].numpy(), atol=1e-5)
    python_ids = translator.translate_ids(tf.constant(source, tf.int32), tf.constant(5),
                                          tf.constant(0.6), tf.constant(2.0),
                                          tf.constant(10.0))
    assert report["ids"] == python_ids["ids"].numpy().tolist()
    assert report["lengths"] == python_ids["lengths"].numpy().tolist()
    # tf.raw_ops lists exactly the core TensorFlow ops (see tests/test_export.py).
    assert report["translate_ids_op_count"] > 20
    assert report["translate_ids_non_core_ops"] == []


def test_recipe_trains_evaluates_and_exports(tiny_parallel_corpus, tmp_path, monkeypatch,
                                            capsys):
    files = {}
    for split, pairs in (("train", tiny_parallel_corpus[:120]),
                         ("valid", tiny_parallel_corpus[126:132]),
                         ("test", tiny_parallel_corpus[120:126])):
        for side, index in (("src", 0), ("tgt", 1)):
            path = tmp_path / f"{split}.{side}"
            path.write_text("\n".join(pair[index] for pair in pairs) + "\n")
            files[f"--{split}-{side}"] = str(path)
    argv = ["--model", "eager_translator", "--preset", "tiny", "--data", "files",
            "--max-steps", "3", "--eval-limit", "5", "--vocab-size", "100",
            "--batch-tokens", "600", "--output-dir", str(tmp_path / "run"),
            "--export-dir", str(tmp_path / "export"), "--quiet",
            "--model-options", "hidden_dim=24",
            # chosen on 4 valid pairs, then tested and exported with it
            "--source-padding-injection", "valid", "--valid-sentences", "4",
            "--valid-every", "2"]  # early stopping and the source-use probe at step 2
    argv += [item for pair in files.items() for item in pair]
    # The recipe's `main` in this process (a subprocess only added TensorFlow's
    # import; the fresh-process load of an export is the test above).
    monkeypatch.chdir(tmp_path)
    assert load_recipe("train_wmt").main(argv) == 0
    assert "epsilon proportion" in capsys.readouterr().out
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["model"] == "eager_translator" and results["steps"] == 3
    assert 0.0 <= results["epsilon_proportion"] < 1.0
    assert results["epsilon_statistics"]["pairs"] == 120
    assert results["test_pairs"] == 5 and "bleu" in results
    # The model's source-use probe ran at the valid split's pace, on the valid pairs.
    [probe] = results["training_probes"]["source_use"]
    assert probe["step"] == 2 and probe["word_labels"] > 0
    assert probe["gap"] == pytest.approx(
        probe["shuffled_source_loss"] - probe["true_source_loss"], abs=2e-4)
    assert list((tmp_path / "run" / "probe_alignments").glob("eflomal-*.links"))
    assert list((tmp_path / "run" / "alignments").glob("eflomal-*.links"))
    export = pathlib.Path(results["export_path"])
    assert (export / "saved_model.pb").is_file()
    card = json.loads((export / "model_card.json").read_text())
    assert card["model_class"] == "EagerLSTMTranslator"
    assert card["model_config"]["vocabulary_size"] == card["vocabulary_size"] + 3
    # --model-options reaches the builder and is recorded with the run.
    assert results["model_options"] == {"hidden_dim": 24}
    assert card["model_config"]["hidden_dim"] == 24
    choice = results["source_padding_injection"]
    assert choice["valid_pairs"] == 4 and choice["by"] == "valid"
    assert sorted(int(n) for n in choice["by_value"]) == list(range(11))
    best = max(choice["by_value"].values(), key=lambda scores: scores["bleu"])["bleu"]
    assert choice["by_value"][str(choice["chosen"])]["bleu"] == best
    assert card["model_config"]["source_padding_injection"] == choice["chosen"]

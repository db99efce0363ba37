"""Export: Translator, SavedModel layout, reload without this package, input rules.

One tiny model (tiny preset, a SentencePiece model trained on ~200 synthetic sentence
pairs, a few training steps so translations are not degenerate) is built and exported
once per module; the reload checks run in ONE fresh subprocess that imports only
tensorflow and tensorflow_text (an import hook makes importing keras_attn_zoo fail).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.data.vocabulary import EOS_ID
from keras_attn_zoo.decoding import greedy_search
from keras_attn_zoo.export import Translator
from keras_attn_zoo.export import export_saved_model
from keras_attn_zoo.export import existing_versions
from tests.tiny_export import FRESH_PROCESS_PRELUDE
from tests.tiny_export import SENTENCES

REPO = pathlib.Path(__file__).resolve().parents[1]

@pytest.fixture(scope="module")
def exported(tiny_trained_export):
    return tiny_trained_export


# Runs in a fresh interpreter: only tensorflow + tensorflow_text may be imported.
FRESH_LOAD_SCRIPT = FRESH_PROCESS_PRELUDE + textwrap.dedent(r"""

    path, sentences = sys.argv[1], json.loads(sys.argv[2])
    loaded = tf.saved_model.load(path)
    report = {"signatures": sorted(loaded.signatures)}
    text = tf.constant(sentences)
    out = loaded.signatures["translate"](text=text)
    report["translate"] = [t.decode() for t in out["translation"].numpy()]
    report["scores"] = out["score"].numpy().tolist()
    report["alignment_shape"] = out["alignment"].shape.as_list()
    default = loaded.signatures["serving_default"](text=text)
    report["serving_default"] = [t.decode() for t in default["translation"].numpy()]
    beam1 = loaded.signatures["translate_with_options"](
        text=text, beam_size=tf.constant(1), length_penalty=tf.constant(0.6),
        max_length_a=tf.constant(2.0), max_length_b=tf.constant(10.0))
    report["beam1"] = [t.decode() for t in beam1["translation"].numpy()]

    ids_ops = op_types(loaded.signatures["translate_ids"])
    report["translate_ids_non_core_ops"] = [
        op for op in ids_ops if not hasattr(tf.raw_ops, op)]
    report["translate_ids_op_count"] = len(ids_ops)
    report["translate_non_core_ops"] = [
        op for op in op_types(loaded.signatures["translate"])
        if not hasattr(tf.raw_ops, op)]
    try:
        loaded.signatures["translate"](text=tf.constant(["cat " * 1100]))
        report["long_error"] = None
    except tf.errors.InvalidArgumentError as error:
        report["long_error"] = error.message
    report["zoo_imported"] = any(m.startswith("keras_attn_zoo") for m in sys.modules)
    print("REPORT " + json.dumps(report))
""")


@pytest.fixture(scope="module")
def fresh_report(exported, tmp_path_factory):
    _, _, version_dir = exported
    script = tmp_path_factory.mktemp("fresh") / "load.py"
    script.write_text(FRESH_LOAD_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, str(script), str(version_dir), json.dumps(SENTENCES + ["", " "])],
        capture_output=True, text=True, timeout=300, cwd=script.parent, env=env)
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [l for l in completed.stdout.splitlines() if l.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):])


def test_layout_and_model_card(exported):
    translator, base, version_dir = exported
    assert version_dir == base / "1"
    assert (version_dir / "saved_model.pb").is_file()
    assert (version_dir / "assets" / "vocab.model").read_bytes() == translator.proto
    card = json.loads((version_dir / "model_card.json").read_text())
    assert card["name"] == "tiny-en-de" and card["version"] == 1
    assert card["preset"] == "tiny" and card["direction"] == "en-de"
    assert card["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert card["max_input_length"] == 1024
    assert set(card["signature_names"]) == {
        "serving_default", "translate", "translate_with_options", "translate_n_best",
        "sample", "score", "translate_ids"}
    assert not [p for p in base.iterdir() if p.name.startswith(".")]


def test_fresh_process_reload_matches_python(exported, fresh_report):
    translator, _, _ = exported
    report = fresh_report
    assert not report["zoo_imported"]
    assert report["signatures"] == sorted(
        ["serving_default", "translate", "translate_with_options", "translate_n_best",
         "sample", "score", "translate_ids"])
    texts = SENTENCES + ["", " "]
    python_out = translator.translate(tf.constant(texts))
    python_text = [t.decode() for t in python_out["translation"].numpy()]
    assert report["translate"] == python_text
    assert report["serving_default"] == python_text
    np.testing.assert_allclose(report["scores"], python_out["score"].numpy(), atol=1e-5)
    translations, scores = translator.translate_texts(texts, batch_size=2,
                                                      return_scores=True)
    assert translations == python_text
    np.testing.assert_allclose(scores, report["scores"], atol=1e-5)
    # The trained toy model translates word for word at least partly.
    assert any(word in report["translate"][0] for word in ("katze", "hund", "der"))
    assert report["alignment_shape"][0] == len(texts)


def test_translate_ids_uses_core_ops_only(fresh_report):
    # tf.raw_ops lists exactly the ops registered by core TensorFlow; the
    # tensorflow-text kernels (Sentencepiece*) are not in it.
    assert fresh_report["translate_ids_op_count"] > 20
    assert fresh_report["translate_ids_non_core_ops"] == []
    # The check would catch text ops: the text signature has them.
    assert any("Sentencepiece" in op for op in fresh_report["translate_non_core_ops"])


def test_over_long_input_is_a_clear_error(exported, fresh_report):
    translator, _, _ = exported
    message = fresh_report["long_error"]
    assert message is not None
    assert "max_input_length=1024" in message and "has 1101 tokens" in message
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_input_length=1024"):
        translator.translate(tf.constant(["dog", "cat " * 1100]))
    ids = tf.constant(np.full([1, 1030], 5, "int32"))
    options = (tf.constant(1), tf.constant(0.6), tf.constant(2.0), tf.constant(10.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="has 1030 tokens"):
        translator.translate_ids(ids, *options)
    # Padding columns beyond the limit are dropped, not an error.
    padded = np.zeros([1, 1500], "int32")
    padded[0, :3] = [7, 8, EOS_ID]
    out = translator.translate_ids(tf.constant(padded), *options)
    assert out["alignment"].shape[2] == 3


def test_beam_one_equals_greedy(exported, fresh_report):
    translator, _, _ = exported
    texts = tf.constant(SENTENCES)
    source_ids = translator._source_ids(texts)
    # Length penalty 0: the search's documented equivalence (decoding/beam.py).
    # Under a penalty a finished hypothesis can lose to a longer one whose
    # penalised score is higher, so beam 1 may go on where greedy stops: it did,
    # by one token, on one sentence of the tiny model trained on an AVX2 CPU.
    beam = translator.translate_ids(source_ids, tf.constant(1), tf.constant(0.0),
                                    tf.constant(2.0), tf.constant(10.0))
    greedy = greedy_search(translator.model, source_ids, max_length_a=2.0,
                           max_length_b=10)
    np.testing.assert_array_equal(beam["lengths"].numpy(), greedy["lengths"][:, 0])
    np.testing.assert_array_equal(beam["ids"].numpy(), greedy["ids"][:, 0].numpy())
    python_beam1 = translator.translate_texts(SENTENCES, beam_size=1)
    assert fresh_report["beam1"][:len(SENTENCES)] == python_beam1


def test_empty_and_whitespace_lines_translate_to_empty(exported, fresh_report):
    translator, _, _ = exported
    texts = ["", "   ", "\t\n", "\u3000", "dog"]
    out = translator.translate(tf.constant(texts))
    translations = [t.decode() for t in out["translation"].numpy()]
    assert translations[:4] == ["", "", "", ""]
    assert translations[4] != ""
    np.testing.assert_array_equal(out["score"].numpy()[:4], 0.0)
    np.testing.assert_array_equal(out["length"].numpy()[:4], 0)
    assert fresh_report["translate"][-2:] == ["", ""]
    only_empty = translator.translate(tf.constant(["", " "]))
    assert [t.decode() for t in only_empty["translation"].numpy()] == ["", ""]
    assert translator.translate_texts([]) == []


def test_undecodable_bytes_become_replacement_character(exported):
    translator, _, _ = exported
    out = translator.translate(tf.constant([b"the \xff\xfe dog", "the \ufffd dog"]))
    first, second = out["translation"].numpy()
    assert first == second
    # Two batch rows: equal up to float32 rounding of the batched matmuls.
    np.testing.assert_allclose(out["score"].numpy()[0], out["score"].numpy()[1],
                               rtol=0, atol=1e-5)
    first.decode("utf-8")  # the output is valid UTF-8


def test_mixed_batch_gives_each_sentence_its_solo_translation(exported):
    translator, _, _ = exported
    together, together_scores = translator.translate_texts(
        SENTENCES, batch_size=len(SENTENCES), return_scores=True)
    alone, alone_scores = translator.translate_texts(SENTENCES, batch_size=1,
                                                     return_scores=True)
    assert together == alone
    np.testing.assert_allclose(together_scores, alone_scores, atol=1e-4)


def test_fixed_length_model_limits_input_and_output(exported):
    from keras_attn_zoo.models import transformer

    translator, _, _ = exported
    model = transformer(translator.vocabulary_size, preset="tiny", max_length=8)
    with pytest.raises(ValueError, match="exceeds the model's max_length"):
        Translator(model, translator.proto, max_input_length=20)
    fixed = Translator(model, translator.proto)
    assert fixed.max_input_length == 8
    options = (tf.constant(2), tf.constant(0.6), tf.constant(2.0), tf.constant(10.0))
    ids = np.full([2, 8], 9, "int32")
    ids[:, -1] = EOS_ID
    ids[1, 3:] = [EOS_ID, 0, 0, 0, 0]
    out = fixed.translate_ids(tf.constant(ids), *options)
    # Positions 0..7: at most 7 tokens, then EOS at position 7.
    assert out["lengths"].numpy().max() <= 7
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_input_length=8"):
        fixed.translate_ids(tf.constant(np.full([1, 9], 9, "int32")), *options)
    with pytest.raises(tf.errors.InvalidArgumentError, match="source_ids must be in"):
        fixed.translate_ids(tf.constant([[10_000, EOS_ID]]), *options)


RESEED_SCRIPT = textwrap.dedent(r"""
    import sys
    import tensorflow as tf
    sys.path.insert(0, sys.argv[1])
    from keras_attn_zoo.data.vocabulary import load_tokenizer, train_sentencepiece
    from keras_attn_zoo.export import Translator
    from keras_attn_zoo.models import transformer
    from tests.tiny_export import synthetic_pairs

    path = train_sentencepiece(synthetic_pairs(), sys.argv[2], vocab_size=60)
    tokenizer = load_tokenizer(path)
    translator = Translator(transformer(int(tokenizer.vocabulary_size()), "tiny"),
                            tokenizer)
    before = translator.translate(tf.constant(["the cat"]))["translation"].numpy()
    tf.random.set_seed(1234)  # clears the kernel cache
    after = translator.translate(tf.constant(["the cat"]))["translation"].numpy()
    assert (before == after).all(), (before, after)
    print("SURVIVED")
""")


def test_translator_survives_reseeding(tmp_path):
    # tf.random.set_seed clears the kernel cache, which kills eagerly created
    # SentencePiece resources; the translator creates its resource inside its
    # graphs, so it keeps working. In a subprocess: the reseeding would break the
    # eager tokenizers other tests share.
    script = tmp_path / "reseed.py"
    script.write_text(RESEED_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, str(script), str(REPO), str(tmp_path / "vocab.model")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "SURVIVED" in completed.stdout


def test_alignment_labels(exported):
    translator, _, _ = exported
    out = translator.translate(tf.constant(["the cat sees the dog", "dog"]))
    alignment = out["alignment"].numpy()
    source_pieces = out["source_pieces"].numpy()
    target_pieces = out["target_pieces"].numpy()
    assert alignment.shape == (2, target_pieces.shape[1], source_pieces.shape[1])
    assert source_pieces[1, :2].tolist() == [b"\xe2\x96\x81dog", b"</s>"]
    for row in range(2):
        length = out["length"].numpy()[row]
        np.testing.assert_allclose(alignment[row, :length].sum(-1), 1.0, atol=1e-4)
        assert np.all(alignment[row, length:] == 0)


def test_versions_increment_and_failed_export_leaves_nothing(exported, tmp_path):
    translator, shared_base, _ = exported
    base = tmp_path / "tiny-en-de"  # the shared export stays as it is
    shutil.copytree(shared_base / "1", base / "1")
    with pytest.raises(TypeError):
        export_saved_model(translator, base, model_card={"bleu": object()})
    assert existing_versions(base) == [1]
    assert sorted(p.name for p in base.iterdir()) == ["1"]
    second = export_saved_model(translator, base)
    assert second == base / "2" and existing_versions(base) == [1, 2]
    with pytest.raises(FileExistsError):
        export_saved_model(translator, base, version=2)
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]



def test_a_length_penalty_set_after_tracing_is_the_default_search_and_the_exports(
        exported, tmp_path):
    """`set_length_penalty` (a run's choice on the valid split) reaches `translate`,
    already traced with the old default, and the export: its signature and card."""
    from keras_attn_zoo.data.vocabulary import load_tokenizer

    translator, _, version_dir = exported
    own = Translator(translator.model, load_tokenizer(version_dir / "assets" / "vocab.model"),
                     length_penalty=0.0)  # the shared translator stays as it is
    text = tf.constant(SENTENCES)
    before = own.translate(text)["score"].numpy()
    with pytest.raises(ValueError, match="length_penalty must be >= 0"):
        own.set_length_penalty(-0.5)
    own.set_length_penalty(2.0)
    after = own.translate(text)
    explicit = own.translate_with_options(text, **_options(beam=own.beam_size, alpha=2.0))
    np.testing.assert_array_equal(after["translation"].numpy(),
                                  explicit["translation"].numpy())
    np.testing.assert_allclose(after["score"].numpy(), explicit["score"].numpy(), atol=1e-5)
    # GNMT divides the log-probability by ((5 + length) / 6) ** alpha: alpha 2 vs 0
    # changes every score of a non-empty hypothesis.
    assert np.all(np.abs(after["score"].numpy() - before) > 1e-3)
    path = export_saved_model(own, tmp_path / "penalty")
    card = json.loads((path / "model_card.json").read_text())
    assert card["defaults"]["length_penalty"] == 2.0
    loaded = tf.saved_model.load(str(path)).signatures["translate"](text=text)
    np.testing.assert_allclose(loaded["score"].numpy(), explicit["score"].numpy(), atol=1e-5)


# ---- n-best, n-gram blocking, sampling and scoring signatures ------------------------


@pytest.fixture(scope="module")
def signatures(exported):
    _, _, version_dir = exported
    return tf.saved_model.load(str(version_dir)).signatures


def _options(beam=4, alpha=0.6):
    return dict(beam_size=tf.constant(beam), length_penalty=tf.constant(alpha),
                max_length_a=tf.constant(2.0), max_length_b=tf.constant(10.0))


def _n_best(signatures, texts, n, ngram=0, **options):
    return signatures["translate_n_best"](
        text=tf.constant(texts), num_hypotheses=tf.constant(n),
        no_repeat_ngram_size=tf.constant(ngram), **_options(**options))


def test_one_best_is_byte_identical_to_translate_with_options(signatures):
    plain = signatures["translate_with_options"](text=tf.constant(SENTENCES), **_options())
    one = _n_best(signatures, SENTENCES, 1)
    for key in ("translation", "target_pieces", "length"):
        np.testing.assert_array_equal(one[key].numpy(), plain[key].numpy())
    np.testing.assert_allclose(one["score"].numpy(), plain["score"].numpy(), atol=1e-5)
    np.testing.assert_array_equal(one["hypotheses"].numpy()[:, 0], plain["translation"].numpy())


def test_n_best_lists_distinct_hypotheses_best_first(signatures):
    out = _n_best(signatures, SENTENCES + [""], 3)
    hypotheses, scores = out["hypotheses"].numpy(), out["hypothesis_scores"].numpy()
    assert hypotheses.shape == scores.shape == (len(SENTENCES) + 1, 3)
    for row in range(len(SENTENCES)):
        assert list(scores[row]) == sorted(scores[row], reverse=True)
        assert len(set(hypotheses[row])) == 3
    assert list(hypotheses[-1]) == [b"", b"", b""]  # an empty input stays empty
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_return"):
        _n_best(signatures, SENTENCES, 5)  # more hypotheses than beams


def test_ngram_blocking_in_the_export(signatures):
    out = _n_best(signatures, SENTENCES, 1, ngram=1)
    for pieces, length in zip(out["target_pieces"].numpy(), out["length"].numpy()):
        assert len(set(pieces[:length])) == length  # no piece twice


def test_sampling_is_reproducible_and_top_1_is_greedy(signatures):
    def sample(seed, top_k=0, temperature=1.0):
        return signatures["sample"](
            text=tf.constant(SENTENCES), temperature=tf.constant(temperature),
            top_k=tf.constant(top_k), top_p=tf.constant(1.0), seed=tf.constant(seed),
            max_length_a=tf.constant(2.0), max_length_b=tf.constant(10.0))

    first, again = sample(11), sample(11)
    np.testing.assert_array_equal(first["translation"].numpy(), again["translation"].numpy())
    greedy = signatures["translate_with_options"](text=tf.constant(SENTENCES),
                                                  **_options(beam=1, alpha=0.0))
    np.testing.assert_array_equal(sample(3, top_k=1)["translation"].numpy(),
                                  greedy["translation"].numpy())


def test_score_of_a_translation_is_the_score_the_search_reported(signatures):
    out = signatures["translate_with_options"](text=tf.constant(SENTENCES),
                                               **_options(alpha=0.0))
    scored = signatures["score"](text=tf.constant(SENTENCES), target=out["translation"])
    checked = 0
    for row in range(len(SENTENCES)):
        # Detokenizing then tokenizing can give other pieces; compare the rows
        # where the scored pieces are the searched ones.
        if list(scored["target_pieces"].numpy()[row]) == list(out["target_pieces"].numpy()[row]):
            assert scored["log_prob"].numpy()[row] == pytest.approx(
                out["score"].numpy()[row], abs=1e-4)
            checked += 1
    assert checked >= len(SENTENCES) // 2

"""The analyses (pure functions), attention extraction, and recipes/analyze.py end to end.

The end-to-end runs reuse the shared `tiny_trained_export` fixture (one tiny Transformer,
trained a few epochs on a word-for-word toy language pair, exported once per module):
a SavedModel-only run, then a run on its `.keras` file with gold alignments, and a run
on a tiny eager translator (no attention).
"""

import json
import math
import shutil

import numpy as np
import pytest

from keras_attn_zoo.data.alignments import parse_pharaoh_line
from keras_attn_zoo.evaluation import analysis
from keras_attn_zoo.evaluation.attention import attention_maps
from tests.conftest import load_recipe
from tests.tiny_export import synthetic_pairs



# ---- entropy and JS divergence -------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_entropy_of_uniform_is_log_n_and_of_one_hot_is_zero(n):
    assert analysis.entropy(np.full(n, 1.0 / n)) == pytest.approx(math.log(n))
    one_hot = np.zeros(n)
    one_hot[n // 2] = 1.0
    assert analysis.entropy(one_hot) == 0.0
    # Along an axis, and unnormalised rows are renormalised.
    rows = np.array([np.full(n, 3.0), one_hot * 7.0])
    np.testing.assert_allclose(analysis.entropy(rows, axis=-1), [math.log(n), 0.0],
                               atol=1e-12)


def test_mean_row_entropy_uses_real_rows_and_keys():
    weights = np.zeros((1, 1, 3, 4))
    weights[0, 0, 0] = [0.5, 0.5, 0.0, 0.0]
    weights[0, 0, 1] = [1.0, 0.0, 0.0, 0.0]
    weights[0, 0, 2] = [0.25, 0.25, 0.25, 0.25]  # a padded row: ignored
    value = analysis.mean_row_entropy(weights, num_rows=2, num_keys=2)
    np.testing.assert_allclose(value, [[math.log(2) / 2]])


def test_js_divergence_identical_is_zero_symmetric_and_bounded():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(6), size=5)
    q = rng.dirichlet(np.ones(6), size=5)
    np.testing.assert_allclose(analysis.js_divergence(p, p), 0.0, atol=1e-12)
    np.testing.assert_allclose(analysis.js_divergence(p, q), analysis.js_divergence(q, p))
    assert np.all(analysis.js_divergence(p, q) > 0)
    assert analysis.js_divergence([1, 0], [0, 1]) == pytest.approx(math.log(2))
    matrix = analysis.layer_js_matrix(np.stack([p[None], p[None], q[None]]), num_rows=5)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(matrix, matrix.T)
    np.testing.assert_allclose(np.diag(matrix), 0.0)
    assert matrix[0, 1] == pytest.approx(0.0, abs=1e-12) and matrix[0, 2] > 0


# ---- alignments ------------------------------------------------------------------------------


def test_aer_perfect_disjoint_and_mixed():
    gold = parse_pharaoh_line("0-0 1-1 2?1")
    assert gold.sure == {(0, 0), (1, 1)}
    assert gold.possible == {(0, 0), (1, 1), (2, 1)}
    perfect = analysis.alignment_scores({(0, 0), (1, 1)}, gold)
    assert (perfect["aer"], perfect["precision"], perfect["recall"]) == (0.0, 1.0, 1.0)
    disjoint = analysis.alignment_scores({(0, 1), (1, 0)}, gold)
    assert (disjoint["aer"], disjoint["precision"], disjoint["recall"]) == (1.0, 0.0, 0.0)
    # |A| = 3, |S| = 2, |A&S| = 1, |A&P| = 2: AER = 1 - 3/5, P = 2/3, R = 1/2.
    mixed = analysis.alignment_scores({(0, 0), (2, 1), (2, 2)}, gold)
    assert mixed["aer"] == pytest.approx(0.4)
    assert mixed["precision"] == pytest.approx(2 / 3)
    assert mixed["recall"] == pytest.approx(0.5)
    # Corpus level: counts are summed before dividing.
    corpus = analysis.alignment_scores([{(0, 0), (1, 1)}, {(0, 0), (2, 1), (2, 2)}],
                                       [gold, gold])
    assert corpus["aer"] == pytest.approx(1 - (3 + 4) / (5 + 4))


def test_gold_file_errors_name_the_line(tmp_path):
    pairs = [("a b c", "x y"), ("d e", "z w v")]
    good = tmp_path / "good.txt"
    good.write_text("0-0 2?1\n1-2\n")
    parsed = analysis.read_gold_alignments(good, pairs)
    assert parsed[1].sure == {(1, 2)} and parsed[0].possible == {(0, 0), (2, 1)}
    short = tmp_path / "short.txt"
    short.write_text("0-0\n")
    with pytest.raises(ValueError, match=r"1 lines but the data has 2 .*line 2"):
        analysis.read_gold_alignments(short, pairs)
    outside = tmp_path / "outside.txt"
    outside.write_text("0-0\n2-0\n")
    with pytest.raises(ValueError, match=r"outside.txt line 2: link 2-0 is outside.*source word 2 does not exist"):
        analysis.read_gold_alignments(outside, pairs)
    target_outside = tmp_path / "target.txt"
    target_outside.write_text("0-2\n0-0\n")
    with pytest.raises(ValueError, match=r"line 1: link 0-2 is outside.*target word 2"):
        analysis.read_gold_alignments(target_outside, pairs)
    with pytest.raises(ValueError, match=r"line 1: 'x-1' is not a Pharaoh link"):
        analysis.read_gold_alignments(["x-1", ""], pairs)


def test_pieces_to_words_sum_source_and_average_target():
    source = ["\u2581Gu", "ten", "\u2581Morgen"]
    target = ["\u2581Good", "\u2581mor", "ning"]
    assert analysis.word_ids(source) == [0, 0, 1]
    weights = np.array([[0.7, 0.2, 0.1, 0.0],  # the last column (EOS) is dropped
                        [0.1, 0.1, 0.7, 0.1],
                        [0.3, 0.3, 0.4, 0.0]])
    words = analysis.aggregate_to_words(weights, source, target)
    np.testing.assert_allclose(words, [[0.9, 0.1], [0.4, 0.55]])
    assert analysis.argmax_links(words) == {(0, 0), (1, 1)}


# ---- buckets and scores ----------------------------------------------------------------------


def test_length_buckets_partition_the_test_set():
    rng = np.random.default_rng(1)
    lengths = list(rng.integers(0, 80, size=200)) + [10, 11, 50, 51, 0]
    buckets = analysis.length_buckets(lengths, (10, 20, 30, 40, 50))
    assert [b["label"] for b in buckets] == ["<=10", "11-20", "21-30", "31-40", "41-50",
                                             ">50"]
    indices = sorted(i for b in buckets for i in b["indices"])
    assert indices == list(range(len(lengths)))  # each sentence exactly once
    for bucket in buckets:
        for i in bucket["indices"]:
            assert bucket["low"] is None or lengths[i] > bucket["low"]
            assert bucket["high"] is None or lengths[i] <= bucket["high"]
    with pytest.raises(ValueError, match="must increase"):
        analysis.length_buckets([1], (20, 10))


def test_scores_by_bucket_and_ngram_precisions():
    hypotheses = ["the cat sat on the mat", "a dog", "the cat"]
    references = ["the cat sat on the mat", "a dog runs", "the cat"]
    buckets = analysis.length_buckets([6, 2, 2], (3,))
    rows = analysis.scores_by_bucket(hypotheses, references, buckets)
    assert [r["sentences"] for r in rows] == [2, 1]
    assert rows[1]["bleu"] == pytest.approx(100.0)
    precisions = analysis.ngram_precisions(hypotheses, references)
    assert len(precisions) == 4 and precisions[0] == pytest.approx(100.0)


# ---- the report's statistics, Markdown and figures (evaluation.report, evaluation.plots) ----


def test_exported_alignment_entropy_weights_sentences_by_their_rows():
    from keras_attn_zoo.evaluation import report

    uniform = {"weights": np.full((2, 4), 0.25)}  # 2 rows, entropy log 4 each
    one_hot = {"weights": np.eye(1, 3)}  # 1 row, entropy 0
    buckets = analysis.length_buckets([3, 30, 5], (10,))
    overall, by_length = report.exported_alignment_entropy([uniform, one_hot, None],
                                                           buckets)
    # Every row counts once: (2 log 4 + 0) / 3; the sentence without alignment none.
    assert overall == pytest.approx(2 * math.log(4) / 3, abs=1e-4)
    assert [b["bucket"] for b in by_length] == ["<=10", ">10"]
    assert [b["sentences"] for b in by_length] == [2, 1]
    assert by_length[0]["entropy"] == pytest.approx(math.log(4), abs=1e-4)
    assert by_length[1]["entropy"] == pytest.approx(0.0, abs=1e-4)


def test_summarise_attention_weights_by_rows_and_keeps_empty_buckets():
    from keras_attn_zoo.evaluation import report

    # Two sentences, one layer, two heads: the second has 3 query rows, the first 1.
    stats = {"entropy": {"cross": np.array([[[1.0, 2.0]], [[3.0, np.nan]]])},
             "rows": {"cross": np.array([1.0, 3.0])},
             "js": {"cross": np.zeros((2, 1, 1))}}
    buckets = analysis.length_buckets([4, 5], (10, 20))
    summary = report.summarise_attention(stats, buckets)
    assert summary["per_layer_head"]["cross"] == [[pytest.approx(2.5), 2.0]]
    assert summary["per_layer"]["cross"] == [pytest.approx(2.25)]
    assert summary["all"]["cross"] == pytest.approx((1.5 * 1 + 3.0 * 3) / 4)
    assert [b["sentences"] for b in summary["by_length"]["cross"]] == [2, 0, 0]
    assert summary["by_length"]["cross"][1]["entropy"] is None
    assert summary["js_divergence"]["cross"] == [[0.0]]
    assert "encoder_self" not in summary["per_layer_head"]


def test_fitting_pairs_and_sentence_files(tmp_path, tiny_trained_export):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.evaluation import report

    _, _, version = tiny_trained_export
    processor = sentencepiece_processor(str(version / "assets" / "vocab.model"))
    pairs = [("the cat", "a dog"), ("the cat sees the dog", "a dog"),
             ("the cat", "a small red bird sees the dog")]
    size = [(len(processor.encode_as_ids(s)), len(processor.encode_as_ids(t)))
            for s, t in pairs]
    longest_source = max(n for n, _ in size)
    assert report.fitting_pairs(processor, pairs, None, 1) == [0, 1, 2]  # no limit
    # Source pieces + EOS and target pieces + BOS must fit.
    assert report.fitting_pairs(processor, pairs, longest_source) == [
        i for i, (n, _) in enumerate(size) if n + 1 <= longest_source]
    target_limit = size[0][1] + 1
    assert report.fitting_pairs(processor, pairs, longest_source + 1, target_limit) == [
        i for i, (_, m) in enumerate(size) if m + 1 <= target_limit]
    path = tmp_path / "sentences.txt"
    path.write_text("one two\tuno dos\n\n  three \n")
    assert report.read_sentence_pairs(path) == [("one two", "uno dos"), ("three", None)]
    path.write_text("\n \n")
    with pytest.raises(ValueError, match="has no sentences"):
        report.read_sentence_pairs(path)


def _minimal_report(**changes):
    report = {
        "model": {"path": "m", "input": ".keras", "class": "Seq2SeqTransformer"},
        "data": {"description": "files", "sentences": 2, "skipped_too_long": 0},
        "search": {"beam_size": 4, "length_penalty": 0.6},
        "scores": {"bleu": 12.5, "chrf": 40.0, "sacrebleu_signature": "sig"},
        "unavailable": {"heat maps": "no reason"},
        "bleu_by_length": [{"bucket": "<=10", "sentences": 2, "bleu": 12.5, "chrf": 40.0},
                           {"bucket": ">10", "sentences": 0, "bleu": None, "chrf": None}],
        "compare": None, "ngram_precision": {"model": [50.0, 25.0, 10.0, 5.0]},
        "attention": None, "entropy_by_length": {}, "entropy_all": {}, "alignment": None,
        "heatmaps": [], "notes": ["a note"],
    }
    report.update(changes)
    return report


def test_write_markdown_says_what_is_missing_and_prints_none_as_na(tmp_path):
    from keras_attn_zoo.evaluation import report

    path = tmp_path / "report.md"
    report.write_markdown(_minimal_report(), path)
    markdown = path.read_text()
    assert markdown.startswith("# Analysis of `m`")
    assert "- **heat maps**: no reason" in markdown
    assert "| >10 | 0 | n/a | n/a |" in markdown
    assert "| 4 | 5.0 |" in markdown  # the 4-gram precision row
    assert "![](bleu_by_length.png)" in markdown and "![](ngram_precision.png)" in markdown
    assert "entropy_per_layer_head.png" not in markdown  # no attention: no such section
    assert markdown.rstrip().endswith("- a note")


def test_report_figures_are_written_and_listed(tmp_path):
    pytest.importorskip("matplotlib")
    from keras_attn_zoo.evaluation import plots

    files = []
    report = _minimal_report()
    plots.plot_bleu_by_length(report, tmp_path, files)
    plots.plot_ngram(report, tmp_path, files)
    summary = {"per_layer_head": {"cross": [[0.5, 1.0], [0.2, 0.1]]},
               "js_divergence": {"cross": [[0.0, 0.3], [0.3, 0.0]]}}
    plots.plot_entropy(summary, tmp_path, files)
    plots.plot_js(summary, tmp_path, files)
    plots.plot_entropy_by_length({"cross": [{"bucket": "<=10", "entropy": 0.4},
                                            {"bucket": ">10", "entropy": None}]},
                                 tmp_path, files)
    alignment = {"weights": np.eye(2, 3), "source_pieces": ["a", "b", "</s>"],
                 "target_pieces": ["x", "y"]}
    drawn = plots.draw_heatmaps([("a b", None), ("c", None)], ["x y", "z"],
                                [alignment, None], tmp_path, files)
    assert files == ["bleu_by_length.png", "ngram_precision.png",
                     "entropy_per_layer_head.png", "js_divergence.png",
                     "entropy_by_length.png", "heatmaps/sentence_0.png"]
    assert all((tmp_path / name).stat().st_size > 0 for name in files)
    # The second sentence has no alignment: nothing drawn for it.
    assert drawn == [{"file": "heatmaps/sentence_0.png", "source": "a b",
                      "target": "x y", "layer": "exported"}]


# ---- attention extraction ----------------------------------------------------------------------


def test_learning_curves_of_many_seeds_share_a_colour_and_a_legend_entry_per_model():
    import matplotlib.colors

    from keras_attn_zoo.evaluation import plots

    curve = [{"step": 100, "minutes": 1.0, "bleu": 1.0}, {"step": 200, "minutes": 2.0,
                                                           "bleu": 2.0}]
    names = {"transformer s0": "transformer", "transformer s1": "transformer",
             "RAN-E s0": "RAN-E", "RAN-E s1": "RAN-E"}
    figure = plots.learning_curves_figure({name: curve for name in names}, groups=names)
    steps = figure.axes[1]
    assert [t.get_text() for t in steps.get_legend().get_texts()] == ["transformer", "RAN-E"]
    colours = [line.get_color() for line in steps.get_lines()]
    assert colours[0] == colours[1] != colours[2] == colours[3]
    # Without groups: a line and a legend entry per run.
    figure = plots.learning_curves_figure({name: curve for name in names})
    assert len(figure.axes[1].get_legend().get_texts()) == 4
    # Twelve models: twelve colours, none repeated (ten default colours would be).
    many = {f"model {index}": curve for index in range(12)}
    lines = plots.learning_curves_figure(many).axes[1].get_lines()
    assert len({matplotlib.colors.to_rgba(line.get_color()) for line in lines}) == 12


def test_attention_maps_of_every_slot_match_the_model():
    from keras_attn_zoo.models import gmm_transformer
    from keras_attn_zoo.models import ran_transformer
    from keras_attn_zoo.models.ran_transformer import ran_matrices

    source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    target = np.array([[2, 10, 11], [2, 12, 0]], "int32")
    model = gmm_transformer(40, preset="tiny", num_decoder_layers=2, gmm_layers=[1])
    maps = attention_maps(model, source, target)
    assert maps["encoder_self"].shape == (2, 2, 2, 4, 4)
    assert maps["decoder_self"].shape == (2, 2, 2, 3, 3)
    np.testing.assert_allclose(maps["cross"], model.cross_attention_weights(source, target),
                               atol=1e-6)
    # Layer 0 has no mixture (NaN); layer 1 fuses gamma = (1 - g) alpha + g beta.
    assert np.isnan(maps["cross_mixture"][0]).all() and np.isnan(maps["gmm_gate"][0]).all()
    gate = maps["gmm_gate"][1][..., None]
    np.testing.assert_allclose(
        maps["cross"][1], (1 - gate) * maps["cross_dot_product"][1]
        + gate * maps["cross_mixture"][1], atol=1e-6)
    np.testing.assert_allclose(np.triu(maps["decoder_self"][0, 0, 0], 1), 0.0)

    ran = ran_matrices(ran_transformer(40, preset="tiny", apply_to="all", max_length=12), 6)
    assert set(ran) == {"encoder_self", "decoder_self"}
    assert ran["decoder_self"].shape == (2, 2, 6, 6)
    # Layer l shows its own matrix A_l: the two layers differ.
    assert np.abs(ran["decoder_self"][0] - ran["decoder_self"][1]).max() > 1e-4
    np.testing.assert_allclose(ran["decoder_self"].sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.triu(ran["decoder_self"][0, 0], 1), 0.0)


def test_attention_maps_of_a_model_without_attention_is_none():
    from keras_attn_zoo.models import eager_translator

    model = eager_translator(63, preset="tiny")
    ids = np.array([[5, 6, 3]], "int32")
    assert attention_maps(model, ids, np.array([[2, 7, 8]], "int32")) is None


# ---- recipes/analyze.py end to end -----------------------------------------------------------


@pytest.fixture(scope="module")
def analysis_setup(tmp_path_factory, tiny_trained_export):
    directory = tmp_path_factory.mktemp("analysis")
    translator, shared_base, shared_version = tiny_trained_export
    # A copy: the analyses write model.keras into the version directory.
    base = directory / "saved_models" / shared_base.name
    version = base / shared_version.name
    shutil.copytree(shared_version, version)
    pairs = synthetic_pairs(16, seed=7)
    (directory / "src.txt").write_text("".join(s + "\n" for s, _ in pairs))
    (directory / "ref.txt").write_text("".join(t + "\n" for _, t in pairs))
    # Hand-made gold: the toy language translates word for word, so i-i is sure;
    # one possible link per sentence longer than one word.
    gold_lines = []
    for source, _ in pairs:
        n = len(source.split())
        links = [f"{i}-{i}" for i in range(n)] + ([f"0?{n - 1}"] if n > 1 else [])
        gold_lines.append(" ".join(links))
    (directory / "gold.txt").write_text("\n".join(gold_lines) + "\n")
    (directory / "sentences.txt").write_text("the cat sees the dog\ta small dog\n"
                                             "a red bird\n")
    return {"dir": directory, "translator": translator, "base": base, "version": version,
            "pairs": pairs, "analyze": load_recipe("analyze")}


def _files_args(setup):
    d = setup["dir"]
    return ["--data", "files", "--src", str(d / "src.txt"), "--ref", str(d / "ref.txt"),
            "--no-progress"]


def _check_files(out, report, expected):
    assert (out / "report.md").is_file() and (out / "report.json").is_file()
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["files"] == report["files"]
    for name in report["files"]:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert set(expected) <= set(report["files"])
    markdown = (out / "report.md").read_text()
    for name in report["files"]:
        if name.endswith(".png"):
            assert f"]({name})" in markdown, name
    return markdown


def test_analyze_saved_model_only(analysis_setup):
    setup = analysis_setup
    out = setup["dir"] / "out_saved"
    report = setup["analyze"].run(setup["analyze"].parse_args(
        ["--model", str(setup["base"]), "--out", str(out), "--compare", str(setup["base"]),
         "--gold-alignments", str(setup["dir"] / "gold.txt")] + _files_args(setup)))
    markdown = _check_files(out, report, [
        "bleu_by_length.png", "ngram_precision.png", "entropy_by_length.png",
        "heatmaps/sentence_0.png"])
    assert report["model"]["input"] == "SavedModel"
    assert report["data"]["sentences"] == len(setup["pairs"])
    assert sum(r["sentences"] for r in report["bleu_by_length"]) == len(setup["pairs"])
    assert report["ngram_precision"]["difference"] == [0.0] * 4  # compared with itself
    # What a SavedModel cannot give is said plainly.
    for name in ("attention entropy per layer and head", "JS divergence between layers",
                 "alignment error rate"):
        assert name in report["unavailable"]
        assert f"**{name}**" in markdown
    assert "model.keras" in report["unavailable"]["alignment error rate"]
    assert report["attention"] is None and report["alignment"] is None


def test_analyze_keras_model_writes_every_promised_file(analysis_setup):
    setup = analysis_setup
    keras_path = setup["version"] / "model.keras"
    setup["translator"].model.save(keras_path)
    out = setup["dir"] / "out_keras"
    report = setup["analyze"].run(setup["analyze"].parse_args(
        ["--model", str(keras_path), "--out", str(out),
         "--gold-alignments", str(setup["dir"] / "gold.txt"),
         "--sentences", str(setup["dir"] / "sentences.txt")] + _files_args(setup)))
    _check_files(out, report, [
        "bleu_by_length.png", "ngram_precision.png", "entropy_per_layer_head.png",
        "entropy_by_length.png", "js_divergence.png", "heatmaps/sentence_0_layer_0.png",
        "heatmaps/sentence_1_layer_0.png", "report.md", "report.json"])
    assert report["model"]["input"] == ".keras"
    attention = report["attention"]
    assert set(attention["per_layer_head"]) == {"cross", "encoder_self", "decoder_self"}
    heads = setup["translator"].model.zoo_config["num_heads"]
    assert len(attention["per_layer_head"]["cross"][0]) == heads
    for slot, values in attention["per_layer_head"].items():
        for value in np.ravel(values):
            assert 0.0 <= value <= math.log(64)
    # Two decoder layers: a symmetric matrix with a zero diagonal.
    js = np.asarray(attention["js_divergence"]["cross"])
    assert js.shape == (2, 2) and np.allclose(np.diag(js), 0.0) and np.allclose(js, js.T)
    alignment = report["alignment"]
    assert alignment["sentences"] + len(alignment["skipped_lines"]) == len(setup["pairs"])
    for key in ("aer", "precision", "recall"):
        assert 0.0 <= alignment[key] <= 1.0
    # The --sentences targets were forced: "a small dog" for the first line.
    assert report["heatmaps"][0]["target"] == "a small dog"
    assert "unavailable" in report and "alignment error rate" not in report["unavailable"]

    # A SavedModel with model.keras in its version directory gets both.
    model = setup["analyze"].AnalysisModel(setup["base"])
    assert model.kind == "SavedModel + .keras" and model.has_attention


def test_analyze_rejects_bad_gold_files(analysis_setup, tmp_path):
    setup = analysis_setup
    analyze = setup["analyze"]
    short = tmp_path / "short.txt"
    short.write_text("0-0\n")
    n = len(setup["pairs"])
    with pytest.raises(SystemExit, match=rf"has 1 lines but the data has {n} .*line 2"):
        analyze.run(analyze.parse_args(
            ["--model", str(setup["base"]), "--out", str(tmp_path / "o"),
             "--gold-alignments", str(short)] + _files_args(setup)))
    lines = (setup["dir"] / "gold.txt").read_text().splitlines()
    lines[2] = lines[2] + " 0-99"
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit, match=r"bad.txt line 3: link 0-99 is outside the sentence pair: target word 99"):
        analyze.run(analyze.parse_args(
            ["--model", str(setup["base"]), "--out", str(tmp_path / "o"),
             "--gold-alignments", str(bad)] + _files_args(setup)))


def test_analyze_model_without_attention_still_gets_bleu_by_length(analysis_setup):
    from keras_attn_zoo.models.eager import eager_vocabulary_size
    from keras_attn_zoo.models import eager_translator

    setup = analysis_setup
    directory = setup["dir"] / "eager"
    directory.mkdir()
    shutil.copy(setup["version"] / "assets" / "vocab.model", directory / "vocab.model")
    size = eager_vocabulary_size(setup["translator"].vocabulary_size)
    model = eager_translator(size, preset="tiny", start_pads=1)
    model.save(directory / "model.keras")
    out = setup["dir"] / "out_eager"
    report = setup["analyze"].run(setup["analyze"].parse_args(
        ["--model", str(directory / "model.keras"), "--out", str(out), "--beam-size", "1",
         "--limit", "6"]
        + _files_args(setup)))
    markdown = _check_files(out, report, ["bleu_by_length.png", "ngram_precision.png"])
    assert report["model"]["class"] == "EagerLSTMTranslator"
    assert sum(r["sentences"] for r in report["bleu_by_length"]) == 6
    for name in ("attention entropy", "JS divergence between layers",
                 "alignment error rate", "heat maps"):
        assert "has no attention weights" in report["unavailable"][name]
    assert "EagerLSTMTranslator has no attention weights" in markdown
    assert report["attention"] is None and not report["heatmaps"]

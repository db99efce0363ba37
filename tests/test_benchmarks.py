"""The benchmarks run (smoke mode): they are measurements, not tests, but must not rot.

The smoke runs (marked `benchmark_smoke`) take about five minutes of the two
cores, a third of the suite's budget, so `make test` leaves them to
`make benchmark-smoke`; what stays in `make test` imports every benchmark and
parses its flags, so a renamed function or a broken import still fails it.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smokes(request, tmp_path_factory):
    """Runs the smoke mode of every benchmark this module's selected tests need,
    in one subprocess (``benchmarks/smoke.py``: TensorFlow starts once).

    A subprocess: the benchmarks seed TensorFlow, which clears the kernel cache of
    the process (and with it eagerly created SentencePiece resources of other tests).
    """
    names = [item.name[len("test_"):-len("_smoke")] for item in request.session.items
             if item.module is request.module and item.name.endswith("_smoke")]
    directory = tmp_path_factory.mktemp("smokes")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "smoke.py"),
         "--output-dir", str(directory), *names],
        capture_output=True, text=True, timeout=900, env=env, cwd=directory)
    return directory, completed


def run_smoke(smokes, name):
    """The smoke run of ``benchmarks/<name>.py``: (its printed output, its JSON)."""
    directory, completed = smokes
    error = directory / name / "error.txt"
    assert not error.exists(), error.read_text()[-3000:]
    assert (directory / name).is_dir(), completed.stderr[-3000:]
    [path] = (directory / name).glob(f"{name}-*-smoke.json")
    results = json.loads(path.read_text())
    assert results["smoke"] is True
    assert results["machine"]["load_average_1_5_15"] is not None
    return (directory / name / "stdout.txt").read_text(), results


@pytest.mark.benchmark_smoke
def test_decode_speed_smoke(smokes):
    stdout, results = run_smoke(smokes, "decode_speed")
    assert "ratio ours/keras-hub" in stdout
    assert {(row["batch"], row["beam"]) for row in results["translate"]} == {
        (1, 1), (4, 1), (1, 2), (4, 2)}
    assert all(row["sentences_per_s"] > 0 for row in results["translate"])
    comparison = results["comparison"]
    assert comparison["ratio_ours_over_keras_hub"] > 0
    assert comparison["ours_long_ratio"] > 0 and comparison["keras_hub_long_ratio"] > 0
    # Table 4: every smoke model at every batch and beam, output forced to L tokens.
    zoo = results["zoo"]
    models = {row["model"] for row in zoo}
    assert models == {"transformer", "ran_transformer:apply_to=all", "eager_translator"}
    assert {(row["batch"], row["beam"]) for row in zoo} == {(1, 1), (4, 1), (1, 2), (4, 2)}
    length = results["zoo_settings"]["output_length"]
    assert all(row["mean_target_length"] == length for row in zoo)
    assert all(row["sentences_per_s"] > 0 and row["decode_mfu"] > 0 for row in zoo)
    assert [row["speed_vs_transformer"] for row in zoo
            if row["model"] == "transformer"] == [1.0] * 4


@pytest.mark.benchmark_smoke
def test_train_throughput_smoke(smokes):
    stdout, results = run_smoke(smokes, "train_throughput")
    rows = results["ours_vs_keras_hub"]
    assert {row["model"] for row in rows} == {"ours", "keras-hub"}
    assert all(row["tokens_per_s"] > 0 and row["mfu"] > 0 for row in rows)
    assert rows[0]["ours_over_keras_hub"] > 0
    assert [row["model"] for row in results["zoo"]] == [
        "transformer", "ran_transformer", "eager_translator"]
    assert results["zoo"][0]["relative_to_transformer"] == 1.0
    assert "ours/hub" in stdout


@pytest.mark.benchmark_smoke
def test_step_profile_smoke(smokes):
    stdout, results = run_smoke(smokes, "step_profile")
    [row] = results["profiles"]
    categories = row["categories"]
    # The trace was read: the step's matmuls, loss and optimizer ops found by scope.
    assert {"output projection", "loss", "optimizer", "attention"} <= set(categories)
    assert sum(c["share"] for c in categories.values()) == pytest.approx(1.0, abs=1e-6)
    assert row["op_seconds_per_step"] > 0 and row["step_seconds"] > 0
    assert "output projection" in stdout


@pytest.mark.benchmark_smoke
def test_step_settings_smoke(smokes):
    stdout, results = run_smoke(smokes, "step_settings")
    rows = {row["setting"]: row for row in results["rows"]}
    assert set(rows) == {"default", "Keras Adam", "2 processes x 1 thread"}
    assert rows["default"]["over_default"] == 1.0
    assert rows["Keras Adam"]["optimizer"] == "keras" and rows["default"]["optimizer"] == "zoo"
    assert all(row["tokens_per_s"] > 0 and row["first_call_seconds"] > 0
               for row in rows.values())
    assert rows["default"]["mfu"] > 0 and rows["2 processes x 1 thread"]["mfu"] is None
    # The two processes stepped side by side: each timed its steps only after both
    # had warmed up and reached the barrier. (Whether the timed windows overlap
    # is the scheduler's business: a smoke run's few steps may end before the
    # other process has seen the barrier on a loaded machine.)
    pair = rows["2 processes x 1 thread"]["runs"][0]["processes"]
    assert len(pair) == 2 and len({run["timed_start"] for run in pair}) == 2
    assert max(run["arrived"] for run in pair) <= min(run["timed_start"] for run in pair)
    assert "x default" in stdout


def test_side_by_side_counts_every_process_tokens_over_the_common_span():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import step_settings

    runs = [{"tokens_per_step": 100.0, "timed_start": 10.0, "timed_end": 14.0,
             "first_call_seconds": 3.0, "matmul_gflops": 50.0},
            {"tokens_per_step": 60.0, "timed_start": 11.0, "timed_end": 15.0,
             "first_call_seconds": 5.0, "matmul_gflops": 70.0}]
    combined = step_settings.side_by_side(runs, steps=2)
    assert combined["tokens_per_s"] == pytest.approx((100 + 60) * 2 / 5.0)
    assert combined["first_call_seconds"] == 5.0 and combined["matmul_gflops"] == 60.0
    assert combined["mfu"] is None and combined["processes"] == runs


@pytest.mark.benchmark_smoke
def test_training_loop_smoke(smokes):
    stdout, results = run_smoke(smokes, "training_loop")
    rows = {row["contender"]: row for row in results["rows"]}
    assert set(rows) == {"session start", "graph", "xla", "keras-hub graph", "keras-hub xla"}
    assert rows["session start"]["x_session_start"] == 1.0
    assert all(row["tokens_per_s"] > 0 and 0 < row["mfu"] for row in rows.values())
    # The same sentences: each pass counts the same real tokens on either shape layout.
    assert rows["graph"]["target_tokens"] == rows["session start"]["target_tokens"]
    assert rows["xla"]["label_padding_share"] >= 0
    assert "training loop" in stdout


@pytest.mark.benchmark_smoke
def test_mfu_smoke(smokes):
    _, results = run_smoke(smokes, "mfu")
    assert results["peak_gflops"]["float32"] > 0
    assert {row["preset"] for row in results["flops_per_token"]} >= {"small", "base"}
    assert 0 < results["training"][0]["mfu"] < 1
    assert abs(sum(kind["share"] for kind in results["profile"]["by_kind"].values())
               - 1) < 1e-6
    assert results["shapes_ab"]["relaxed_speedup"] > 0
    assert results["decoding"]["mfu"] > 0


@pytest.mark.benchmark_smoke
def test_length_scaling_smoke(smokes):
    _, results = run_smoke(smokes, "length_scaling")
    assert {(row["model"], row["length"]) for row in results["decoding"]} == {
        (model, length) for model in ("transformer", "eager_translator")
        for length in (8, 16)}
    assert all(row["mean_target_length"] == row["length"] for row in results["decoding"])
    for part in ("training_exponents", "decoding_exponents"):
        assert set(results[part]) == {"transformer", "eager_translator"}


@pytest.mark.benchmark_smoke
def test_decode_memory_smoke(smokes):
    _, results = run_smoke(smokes, "decode_memory")
    rows = results["rows"]
    assert len(rows) == 4 and not any("error" in row for row in rows)
    assert all(row["peak_rss_mb"] >= row["baseline_rss_mb"] > 0 for row in rows)
    assert results["growth"] == {}  # 8 -> 32 tokens: too short a span to report


@pytest.mark.benchmark_smoke
def test_keras_io_peer_smoke(smokes):
    _, results = run_smoke(smokes, "keras_io_peer")
    assert len(results["rows"]) == 2
    assert all(row["bleu"] is not None and row["steps"] == 2 for row in results["rows"])
    assert results["winner"] in ("ours", "peer")
    # Both learning curves (the peer's last point at its last step) and their picture.
    curves = results["learning_curves"]
    assert curves["ours"] and curves["keras.io peer"][-1]["step"] == 2
    [png] = (smokes[0] / "keras_io_peer").glob("keras_io_peer-*-smoke.png")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_common_helpers():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import common

    assert abs(common.log_log_slope([16, 32, 64], [1.0, 2.0, 4.0]) - 1.0) < 1e-9
    assert abs(common.log_log_slope([16, 32, 64], [1.0, 4.0, 16.0]) - 2.0) < 1e-9
    calls = []
    timings, results = common.alternate(
        {"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2},
        repeats=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-ups, then A B, B A, A B
    assert len(timings["a"].times) == 3 and results == {"a": 1, "b": 2}
    table = common.format_table([{"x": 1.5, "y": None}], [("x", "X", ".2f"),
                                                          ("y", "Y", "")])
    assert table.splitlines() == ["   X  Y", "----  -", "1.50  -"]


def test_results_files_keep_translations_but_not_the_corpus_sentences(tmp_path):
    """Examples lose their source and reference (Ding is not committed) for their index
    in the split; model outputs, an example's own index and a "source" outside an
    example list (a path) stay; `write_results` writes it so."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import common

    record = {
        "examples": [{"source": "Guten Tag.", "reference": "Hello.", "translation": "Hi."},
                     {"source": "Danke.", "reference": "Thanks.", "translation": "Thank."}],
        "ours": {"peer_examples": [{"index": 7, "source": "Ja.", "savedmodel": "Yes.",
                                    "ct2-int8": "Yes"}]},
        "report": {"source": "runs/cell/report.json", "bleu": 5.1},
        "rows": [{"examples": [{"reference": "No.", "translation": "Nope."}]}],
    }
    expected = {
        "examples": [{"index": 0, "translation": "Hi."}, {"index": 1, "translation": "Thank."}],
        "ours": {"peer_examples": [{"index": 7, "savedmodel": "Yes.", "ct2-int8": "Yes"}]},
        "report": {"source": "runs/cell/report.json", "bleu": 5.1},
        "rows": [{"examples": [{"index": 0, "translation": "Nope."}]}],
    }
    assert common.without_corpus_text(record) == expected
    assert record["examples"][0]["source"] == "Guten Tag."  # the caller's dict is not changed
    path = common.write_results("redaction", record, output_dir=tmp_path)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert {key: written[key] for key in expected} == expected


def test_data_bound_counts_seen_ngrams_and_retrieves_the_closest_training_pair():
    """Coverage counts n-gram tokens (repeats too) against the training side; the
    retrieval baseline returns the target of the training source sharing the rarest
    words, and a training source itself gets its own target back."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import data_bound

    train = ["the cat sat .", "a dog ran ."]
    result = data_bound.coverage(train, ["the cat ran .", "the the bird"], max_order=2)
    # unigrams: the cat ran . the the bird -> 6 of 7 seen; bigrams: "the cat",
    # "cat ran", "ran .", "the the", "the bird" -> 2 of 5 seen ("the cat", "ran .")
    assert result["ngram_seen_share"][1] == pytest.approx(6 / 7)
    assert result["ngram_seen_share"][2] == pytest.approx(2 / 5)
    assert result["unseen_word_type_share"] == pytest.approx(1 / 5)  # bird of 5 types
    assert result["unseen_word_token_share"] == pytest.approx(1 / 7)
    assert result["sentences_all_words_seen_share"] == pytest.approx(1 / 2)
    assert data_bound.all_words_seen(train, ["a cat", "a bird"]) == [True, False]

    pairs = [("der Hund bellt laut", "the dog barks loudly"),
             ("die Katze schläft", "the cat sleeps"),
             ("der Hund schläft", "the dog sleeps")]
    nearest = data_bound.NearestNeighbour(pairs)
    assert nearest([source for source, _ in pairs]) == [target for _, target in pairs]
    # "bellt" (in one source) outweighs "Hund" (in two); no word shared: a tie, the first
    assert nearest(["ein Hund bellt", "unbekannt"]) == ["the dog barks loudly",
                                                        "the dog barks loudly"]


def test_rnn_profile_splits_the_wall_time_of_overlapping_kernels():
    """Two ops running at once share that stretch of wall time (their summed
    durations count it twice: the 5x "backward output projection" of the
    2026-11-25 profile was two concurrent matmuls)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import rnn_throughput

    shares = rnn_throughput.wall_attribution([(0.0, 2.0, "a"), (1.0, 3.0, "b"), (4.0, 5.0, "a")])
    assert shares == {"a": 2.5, "b": 1.5}
    name = "gradient_tape/model/decoder/logits/MatMul/MatMul_1"
    part = rnn_throughput.op_part(name, "MatMul")
    assert part == "output projection" and rnn_throughput.op_phase(name, part) == "backward"
    assert rnn_throughput.op_phase("model/lstm_0/while/MatMul", "recurrent cell") == "forward"
    # --this-env / --baseline-env: a process setting alternated like code.
    assert rnn_throughput.parse_environment("TF_ENABLE_ONEDNN_OPTS=1,A=b=c") == {
        "TF_ENABLE_ONEDNN_OPTS": "1", "A": "b=c"}
    assert rnn_throughput.parse_environment("") == {}
    args = rnn_throughput.parse_args(["--baseline-env", "TF_ENABLE_ONEDNN_OPTS=0"])
    assert args.baseline_tree == str(REPO)


def test_matmul_rate_counts_every_product_and_stays_below_the_hardware_peak():
    """The measuring stick of every MFU figure counts only work that is done.

    An earlier matmul_rate timed 8 products of 2 operand pairs; the graph
    optimizer computed only 2, so the rate came out about 4x too high, and it
    did not grow the time with the chain. Here 8 products must take about 4x
    the time of 2 (the rates stay within 3x of each other: the defect gave 4x),
    and no rate may beat 1.6x the CPU's peak (boost clocks stay below that;
    load only lowers a rate).
    """
    sys.path.insert(0, str(REPO / "benchmarks"))
    import common

    # Best calls of alternating rounds: another process can only slow a call
    # down, and alternating puts both chains under the same load. One round of
    # 7 calls each, short then long, once saw 23 against 48 GFLOP/s with three
    # test workers on two cores (the short chain's 3 ms calls all preempted).
    short = long = 0.0
    for _ in range(4):
        short = max(short, common.matmul_rate("float32", size=512, repeats=3,
                                              chain=2)["best_gflops"])
        long = max(long, common.matmul_rate("float32", size=512, repeats=3,
                                            chain=8)["best_gflops"])
    assert 1 / 3 < long / short < 3.0, (short, long)
    peak = common.hardware_peak_gflops("float32")["gflops"]
    if peak is not None:
        assert max(short, long) < 1.6 * peak, (short, long, peak)


@pytest.mark.benchmark_smoke
def test_ct2_speed_smoke(smokes):
    _, results = run_smoke(smokes, "ct2_speed")
    engines = {row["engine"]: row for row in results["engines"]}
    assert set(engines) == {"savedmodel", "ct2-float32", "ct2-int8"}
    assert all(row["sentences_per_second"] > 0 and row["bleu"] >= 0
               for row in engines.values())
    assert engines["savedmodel"]["same_as_savedmodel"] == 1.0
    assert results["matmul_rate"]["gflops"] > 0
    assert set(results["goal"]) == {"fastest_at_equal_bleu", "speedup", "bleu_delta", "met"}


def test_every_benchmark_imports_and_parses_its_smoke_flags():
    """Each script imports (every module it needs) and accepts `--smoke --output-dir`."""
    script = """
import importlib, pathlib, sys
sys.path.insert(0, sys.argv[1])
failures = []
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.py")):
    module = importlib.import_module(path.stem)
    parse = getattr(module, "parse_args", None)
    if parse is not None:
        try:
            parse(["--smoke", "--output-dir", "out"])
        except SystemExit as error:
            failures.append(f"{path.name}: {error}")
print("checked", len(list(pathlib.Path(sys.argv[1]).glob("*.py"))))
if failures:
    sys.exit("; ".join(failures))
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run([sys.executable, "-c", script, str(REPO / "benchmarks")],
                               capture_output=True, text=True, timeout=300, env=env)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "checked" in completed.stdout


def test_keras_io_peer_takes_only_a_finished_run_of_the_same_budget(tmp_path):
    """`--ours-results`: the run's results and vocabulary, trained for the peer's budget
    or converged inside it."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import keras_io_peer

    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(SystemExit, match="no results.json and vocab.model"):
        keras_io_peer.finished_run(run, 24)
    (run / "vocab.model").write_bytes(b"")
    (run / "results.json").write_text(json.dumps({"train_seconds": 1440.4, "bleu": None}))
    with pytest.raises(SystemExit, match="has no test BLEU"):
        keras_io_peer.finished_run(run, 24)
    (run / "results.json").write_text(json.dumps({"train_seconds": 1440.4, "bleu": 7.5}))
    with pytest.raises(SystemExit, match="ours trained 1440.4 s, not the --budget-minutes 20"):
        keras_io_peer.finished_run(run, 20)
    results, directory = keras_io_peer.finished_run(run, 24)
    assert directory == run and results["bleu"] == 7.5 and results["finished"]
    # Early stopping ended it inside the budget: equal budgets, the peer trains it all.
    (run / "results.json").write_text(json.dumps(
        {"train_seconds": 1256.8, "bleu": 5.58, "stop_reason": "converged"}))
    assert keras_io_peer.finished_run(run, 24)[0]["bleu"] == 5.58
    (run / "results.json").write_text(json.dumps(
        {"train_seconds": 1256.8, "bleu": 5.58, "stop_reason": "time_budget"}))
    with pytest.raises(SystemExit, match="ours trained 1256.8 s, not the --budget-minutes 24"):
        keras_io_peer.finished_run(run, 24)


def test_epoch_stalls_finds_the_stalled_window_of_a_run(tmp_path):
    """A run's TensorBoard tokens/s: the stalled window and its lost seconds, the
    window holding a dev evaluation left out, the windows summing to the run's time."""
    import tensorflow as tf

    sys.path.insert(0, str(REPO / "benchmarks"))
    import epoch_stalls

    run = tmp_path / "run"
    seconds = {50: 25, 100: 25, 150: 25, 200: 25, 250: 50, 300: 25, 350: 100, 400: 25}
    writer = tf.summary.create_file_writer(str(run / "logs"))
    with writer.as_default():
        for step, window in seconds.items():  # 1,000 target tokens per step
            tf.summary.scalar("target_tokens_per_second", 50 * 1000 / window, step=step)
    writer.flush()
    total = sum(seconds.values())
    (run / "results.json").write_text(json.dumps({
        "steps": 400, "train_seconds": total, "train_target_tokens_per_second": 400_000 / total,
        "learning_curve": [{"step": 200, "bleu": 1.0}]}))
    row = epoch_stalls.analyse(run)
    assert row["stalled_windows"] == [350]  # 250 holds the evaluation at step 200
    assert row["lost_seconds"] == pytest.approx(75.0)
    assert row["lost_share"] == pytest.approx(0.25)
    assert row["windows_seconds_sum"] == pytest.approx(total)


@pytest.mark.benchmark_smoke
def test_decode_loop_smoke(smokes):
    """This checkout against itself in two workers: the same outputs of every
    search, alternated timings."""
    stdout, results = run_smoke(smokes, "decode_loop")
    assert [row["search"] for row in results["rows"]] == ["greedy", "sample", "beam4",
                                                         "score"]
    assert set(results["trees"].values()) == {str(REPO / "keras_attn_zoo")}
    for row in results["rows"]:
        assert row["same_outputs"] is True
        assert len(row["round_ratios"]) == results["repeats"]
        assert row["this_seconds"] > 0 and row["baseline_seconds"] > 0
    assert "this/base speed" in stdout


@pytest.mark.benchmark_smoke
def test_rnn_throughput_smoke(smokes):
    """This checkout against itself in two workers: the same losses, alternated timings,
    a profile of each model's step."""
    stdout, results = run_smoke(smokes, "rnn_throughput")
    assert {(row["tree"], row["model"]) for row in results["rows"]} == {
        (tree, model) for tree in ("this", "baseline")
        for model in ("bahdanau_rnn", "eager_translator")}
    assert all(row["tokens_per_s"] > 0 and row["cpu_mfu"] > 0 for row in results["rows"])
    assert {tree["keras_attn_zoo"] for tree in results["trees"].values()} == {
        str(REPO / "keras_attn_zoo")}
    for comparison in results["comparison"]:
        # Same code, same seed: the same weights and losses in both processes.
        assert comparison["eval_loss_difference"] == 0.0
        assert comparison["first_step_loss_difference"] == 0.0
        assert len(comparison["round_ratios"]) == results["repeats"]
    [profile_path] = (smokes[0] / "rnn_throughput").glob("rnn_profile-*-smoke.json")
    profiles = json.loads(profile_path.read_text())["profiles"]
    assert set(profiles) == {"this/bahdanau_rnn", "this/eager_translator",
                             "baseline/bahdanau_rnn", "baseline/eager_translator"}
    for profile in profiles.values():
        parts = {(row["phase"], row["part"]) for row in profile["by_part"]}
        assert ("backward", "recurrent cell") in parts and profile["kernel_seconds"] > 0
    assert "this/base" in stdout


def test_server_load_refuses_a_url_without_a_model_and_flags_that_need_one(capsys):
    """`--url` targets a running server: it must name the model, and the flags
    that start servers of its own (`--baseline-code`, `--server-args`) need
    `--model`; both are refused before any load is sent."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import server_load

    for argv, message in (
            (["--url", "http://127.0.0.1:9/"], "must name a model"),
            (["--url", "http://127.0.0.1:9/v1/models/m", "--baseline-code", "/tmp"],
             "need --model"),
            (["--url", "http://127.0.0.1:9/v1/models/m", "--model", "m"], "not allowed")):
        with pytest.raises(SystemExit) as raised:
            server_load.main(argv)
        assert raised.value.code == 2
        assert message in capsys.readouterr().err


def test_fit_gap_is_the_token_weighted_fit_of_any_batching(tiny_parallel_corpus,
                                                          tiny_tokenizer):
    """`fit_gap.teacher_forced_fit` counts each real target token once: the same
    pairs batched together or one by one give the same loss and accuracy (padding
    adds nothing), and the loss is the unsmoothed cross-entropy."""
    import numpy as np

    sys.path.insert(0, str(REPO / "benchmarks"))
    import fit_gap
    from keras_attn_zoo.models import bahdanau_rnn

    model = bahdanau_rnn(int(tiny_tokenizer.vocabulary_size()), preset="tiny")
    pairs = tiny_parallel_corpus[:24]
    together = fit_gap.teacher_forced_fit(model, tiny_tokenizer, pairs, batch_tokens=400)
    singles = [fit_gap.teacher_forced_fit(model, tiny_tokenizer, [pair], batch_tokens=400)
               for pair in pairs]
    tokens = np.array([row["tokens"] for row in singles], float)
    assert together["tokens"] == tokens.sum()
    loss = np.dot(tokens, [row["loss"] for row in singles]) / tokens.sum()
    accuracy = np.dot(tokens, [row["accuracy"] for row in singles]) / tokens.sum()
    assert together["loss"] == pytest.approx(loss, abs=2e-3)
    assert together["accuracy"] == pytest.approx(accuracy, abs=2e-3)
    # An untrained model is near the uniform loss, log V, and no pair is empty.
    assert together["loss"] == pytest.approx(np.log(tiny_tokenizer.vocabulary_size()), rel=0.2)
    with pytest.raises(ValueError, match="no pair fits"):
        fit_gap.teacher_forced_fit(model, tiny_tokenizer, [])


def test_fit_gap_refuses_an_eager_run_and_an_unfinished_one(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import fit_gap

    with pytest.raises(SystemExit, match="lacks"):
        fit_gap.measure(tmp_path)
    for name in ("model.keras", "vocab.model"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "run_identity.json").write_text(json.dumps(
        {"model": "eager_translator", "aligned_batching": True}))
    with pytest.raises(SystemExit, match="aligned stream"):
        fit_gap.measure(tmp_path)

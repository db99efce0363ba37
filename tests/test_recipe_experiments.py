"""`recipes/recipe_experiments.py`: the recipe table's resumable runner.

One tiny cell (5 steps on corpus files the tests write) is run once per module
and shared: it writes its result file, scored on the valid split only; a rerun
skips it; `--score-test` is the only way to the test split, and only once. The
table and the plot are built from result files alone.
"""

import json
import shutil

import keras
import numpy as np
import pytest

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo import workflow
from keras_attn_zoo.optimizers import Adam
from keras_attn_zoo.training.averaging import average_checkpoints
from tests.conftest import load_recipe
from tests.conftest import write_parallel_files

RUNNER = load_recipe("recipe_experiments")
TRAIN_WMT = load_recipe("train_wmt")


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory, tiny_parallel_corpus):
    return write_parallel_files(tmp_path_factory.mktemp("recipe_corpus"),
                                {"train": tiny_parallel_corpus[:120],
                                 "valid": tiny_parallel_corpus[280:286],
                                 "test": tiny_parallel_corpus[290:293]})


def runner_flags(corpus_files, directory, steps=5):
    # One batch an epoch: one batch shape, so the step is traced once.
    base = {"preset": "tiny", "data": "files", "vocab_size": 100, "batch_tokens": 4000,
            "beam_size": 1, "eval_every": 1, "checkpoint_every": 0, "quiet": "true",
            # Early stopping evaluates every step and never stops: the cap ends the cell.
            "valid_every": 1, "patience": 0,
            **{key: str(path) for key, path in corpus_files.items()}}
    flags = []
    for key, value in base.items():
        flags += ["--base", f"{key}={value}"]
    return flags + ["--steps", str(steps), "--no-matmul-rate",
                    "--results-dir", str(directory / "results"),
                    "--runs-dir", str(directory / "runs")]


@pytest.fixture(scope="module")
def one_cell(tmp_path_factory, corpus_files):
    """The `default` cell run once: `(flags, directory, evaluated pairs, files read)`."""
    directory = tmp_path_factory.mktemp("recipe_run")
    flags = runner_flags(corpus_files, directory)
    evaluated, read = [], []
    evaluate, read_files = workflow.evaluate, zoo_data.read_parallel_files

    def spy_evaluate(config, translator, pairs, split="test"):
        evaluated.append((split, list(pairs)))
        return evaluate(config, translator, pairs, split=split)

    def spy_read(source, target, *args, **kwargs):
        read.append((str(source), str(target)))
        return read_files(source, target, *args, **kwargs)

    workflow.evaluate, zoo_data.read_parallel_files = spy_evaluate, spy_read
    try:
        assert RUNNER.main(flags + ["--cells", "default"]) == 0
    finally:
        workflow.evaluate, zoo_data.read_parallel_files = evaluate, read_files
    return flags, directory, evaluated, read


def test_a_cell_writes_its_result_scored_on_the_valid_split_only(one_cell, corpus_files,
                                                                  tiny_parallel_corpus):
    _, directory, evaluated, read = one_cell
    path = directory / "results" / "default-seed0-5steps.json"
    result = json.loads(path.read_text())
    assert result["cell"] == "default" and result["split"] == "valid"
    assert result["steps"] == 5 and result["steps_budget"] == 5 and result["seed"] == 0
    assert result["valid"]["valid_pairs"] == 6 and "test_pairs" not in result["valid"]
    assert result["valid"]["sacrebleu_signature"].startswith("nrefs:1")
    assert result["train_seconds"] > 0 and result["train_target_tokens_per_second"] > 0
    assert len(result["load_average_at_start"]) == 3
    # The learning curve: early stopping's evaluations of the whole valid split;
    # a cell that reaches the cap is recorded as not converged.
    assert [point["step"] for point in result["learning_curve"]] == [1, 2, 3, 4, 5]
    assert {"bleu", "chrf", "minutes"} <= set(result["learning_curve"][0])
    assert result["stop_reason"] == "max_steps" and result["converged"] is False
    assert result["early_stopping"]["valid_pairs"] == 6
    assert result["best_step"] in range(1, 6) and result["max_steps"] == 5
    # The best checkpoint is also scored at each search of the grid, on valid only;
    # the recipe's own search (beam 4, penalty 0.6) gives the same score again.
    grid = {(row["beam_size"], row["length_penalty"]): row
            for row in result["valid_search_grid"]}
    assert list(grid) == [(1, 0.0), (4, 0.6), (4, 1.0), (8, 0.6), (8, 1.0)]
    assert grid[4, 0.6]["bleu"] == result["valid"]["bleu"]
    assert all(row["length_ratio"] > 0 for row in grid.values())
    # The mean of the 4 best evaluations' checkpoints is scored on the same grid,
    # and the cell's model stays the best checkpoint.
    steps = result["mean_of_best_steps"]
    assert len(set(steps)) == 4 and steps[0] == result["best_step"]
    ranked = sorted(result["learning_curve"], key=lambda point: (-point["bleu"], point["step"]))
    assert {point["step"] for point in ranked[:4]} == set(steps)
    assert [(row["beam_size"], row["length_penalty"])
            for row in result["valid_search_grid_mean_of_best"]] == list(grid)
    run_dir = directory / "runs" / "default-seed0-5steps"
    exported = keras.saving.load_model(run_dir / "model.keras", compile=False)
    weights = [w.numpy().copy() for w in exported.weights]
    average_checkpoints(exported, [str(run_dir / "best" / f"step-{steps[0]}")])
    for before, variable in zip(weights, exported.weights):
        np.testing.assert_array_equal(before, variable.numpy())
    # The preset's schedule, as train_wmt.py applies it.
    assert (result["config"]["learning_rate"], result["config"]["warmup_steps"]) == \
        TRAIN_WMT.SCHEDULE_DEFAULTS["tiny"]
    # Only the valid pairs were translated; the test files were not even read.
    assert evaluated == [("valid", tiny_parallel_corpus[280:286])]
    assert (str(corpus_files["test_src"]), str(corpus_files["test_tgt"])) not in read
    assert (directory / "runs" / "default-seed0-5steps" / "model.keras").exists()
    assert (f"| default | (default) | 5 | {result['best_step']} | not converged (max_steps) |"
            in (directory / "results" / "TABLE.md").read_text())


def test_a_rerun_skips_a_finished_cell(one_cell, monkeypatch, capsys):
    flags, directory, _, _ = one_cell
    path = directory / "results" / "default-seed0-5steps.json"
    before = (path.read_bytes(), path.stat().st_mtime_ns)

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(workflow, "train", no_training)
    monkeypatch.setattr(workflow, "prepare_data", no_training)
    assert RUNNER.main(flags + ["--cells", "default"]) == 0
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert "default: done already" in capsys.readouterr().out
    # Another base (another model's table) is not "done" by this one's result.
    with pytest.raises(SystemExit, match="with --base .*a table with another base needs "
                                         "its own --results-dir"):
        RUNNER.main(flags + ["--cells", "default", "--base", "model=bahdanau_rnn"])
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_partial_records_an_unfinished_cells_curve_from_its_run_directory(one_cell):
    flags, directory, _, _ = one_cell
    # The finished cell has its result: nothing partial to record.
    with pytest.raises(SystemExit, match="default .* has finished"):
        RUNNER.main(flags + ["--partial", "--cells", "default"])
    # The same run's directory as an unfinished cell's (killed before its result file).
    finished = directory / "runs" / "default-seed0-5steps"
    shutil.copytree(finished, directory / "runs" / "vocab-4000-seed0-5steps")
    assert RUNNER.main(flags + ["--partial", "--cells", "vocab-4000",
                                "--note", "one thread"]) == 0
    [path] = (directory / "results" / "partial").glob("vocab-4000-seed0-curve-*.json")
    record = json.loads(path.read_text())
    curve = [json.loads(line) for line in (finished / "curve.jsonl").read_text().splitlines()]
    assert record["curve"] == curve and len(curve) == 5
    best = max(curve, key=lambda point: (point["bleu"], -point["step"]))
    assert record["best_so_far"] == {"metric": "bleu",
                                     **{key: best[key] for key in ("step", "bleu", "chrf")}}
    assert record["early_stopping_state"] == json.loads(
        (finished / "early_stopping.json").read_text())
    assert record["status"].startswith("not converged at step 5: unfinished")
    assert record["note"] == "one thread" and record["training_seconds_at_last_checkpoint"] >= 0
    assert len(record["machine"]["load_average"]) == 3
    assert not (directory / "results" / "vocab-4000-seed0-5steps.json").exists()
    # A cell that has not been evaluated here: a clear error, no file.
    with pytest.raises(SystemExit, match="holds no valid curve"):
        RUNNER.main(flags + ["--partial", "--cells", "dropout-0.3"])
    with pytest.raises(SystemExit, match="--partial wants --cells"):
        RUNNER.main(flags + ["--partial"])


def test_score_test_scores_the_test_split_once(one_cell, tiny_parallel_corpus,
                                               monkeypatch):
    """With the weights and search the valid results chose: here the result file
    is made to say the mean of the 4 best with beam 8 and penalty 1.0 won."""
    flags, directory, _, _ = one_cell
    path = directory / "results" / "default-seed0-5steps.json"
    valid = json.loads(path.read_text())
    for row in valid["valid_search_grid_mean_of_best"]:
        if (row["beam_size"], row["length_penalty"]) == (8, 1.0):
            row["bleu"] = 99.0
    monkeypatch.setattr(RUNNER, "load_results", lambda results_dir: [valid])
    evaluated = []
    evaluate = workflow.evaluate

    def spy_evaluate(config, translator, pairs, split="test"):
        evaluated.append((split, list(pairs), config.beam_size, config.length_penalty,
                          [w.numpy().copy() for w in translator.model.weights]))
        return evaluate(config, translator, pairs, split=split)

    monkeypatch.setattr(workflow, "evaluate", spy_evaluate)
    assert RUNNER.main(flags + ["--score-test", "default"]) == 0
    [(split, pairs, beam, penalty, weights)] = evaluated
    assert (split, pairs, beam, penalty) == ("test", tiny_parallel_corpus[290:293], 8, 1.0)
    result = json.loads((directory / "results" / "default-seed0-5steps.test.json").read_text())
    assert result["split"] == "test" and result["test_pairs"] == 3
    assert (result["beam_size"], result["length_penalty"]) == (8, 1.0)
    assert result["chosen_on_valid"]["weights"] == "mean_of_best"
    assert result["averaged_steps"] == valid["mean_of_best_steps"]
    # Committed beside the cells: the translations stay, the corpus's sentences do not.
    assert [sorted(example) for example in result["examples"]] == [["index", "translation"]] * 3
    # What translated the test split is the mean of the 4 best checkpoints.
    run_dir = directory / "runs" / "default-seed0-5steps"
    mean = keras.saving.load_model(run_dir / "model.keras", compile=False)
    average_checkpoints(mean, [run_dir / "best" / f"step-{s}" for s in result["averaged_steps"]])
    for used, expected in zip(weights, mean.weights):
        np.testing.assert_allclose(used, expected.numpy(), rtol=1e-6, atol=1e-7)
    monkeypatch.undo()
    with pytest.raises(SystemExit, match="scored for default already"):
        RUNNER.main(flags + ["--score-test", "default"])
    # The table stays the valid split's.
    assert [r["cell"] for r in RUNNER.load_results(directory / "results")] == ["default"]


def grid(bleu_by_setting):
    return [{"beam_size": beam, "length_penalty": penalty, "bleu": bleu, "chrf": 20.0}
            for (beam, penalty), bleu in bleu_by_setting.items()]


def test_the_search_is_chosen_by_its_mean_over_the_seeds_that_all_scored_it():
    seed_0 = {"seed": 0,
              "valid_search_grid": grid({(1, 0.0): 6.0, (4, 0.6): 6.5, (4, 1.0): 6.2}),
              "valid_search_grid_mean_of_best": grid({(4, 0.6): 6.4, (4, 1.0): 6.9})}
    seed_1 = {"seed": 1,
              "valid_search_grid": grid({(1, 0.0): 6.2, (4, 0.6): 6.9, (4, 1.0): 6.9}),
              "valid_search_grid_mean_of_best": grid({(4, 0.6): 6.6, (4, 1.0): 6.8})}
    choice = RUNNER.chosen_search([seed_0, seed_1])
    # Means: best (4, 0.6) 6.7, best (4, 1.0) 6.55, mean (4, 1.0) 6.85: the mean wins
    # though seed 1 alone prefers the best checkpoint.
    assert (choice["weights"], choice["beam_size"], choice["length_penalty"]) == \
        ("mean_of_best", 4, 1.0)
    assert choice["bleu"] == pytest.approx(6.85) and choice["seeds"] == [0, 1]
    assert len(choice["candidates"]) == 5
    # A seed that kept no mean (an older cell) leaves the means out for every seed.
    older = {**seed_1, "valid_search_grid_mean_of_best": None}
    choice = RUNNER.chosen_search([seed_0, older])
    assert (choice["weights"], choice["beam_size"], choice["length_penalty"]) == ("best", 4, 0.6)
    assert {c["weights"] for c in choice["candidates"]} == {"best"}
    # A tie goes to the earlier, cheaper setting.
    flat = {"seed": 0, "valid_search_grid": grid({(1, 0.0): 5.0, (4, 0.6): 5.0})}
    assert RUNNER.chosen_search([flat])["beam_size"] == 1
    with pytest.raises(ValueError, match="share no scored search"):
        RUNNER.chosen_search([{"seed": 0}])


def test_a_family_ranked_by_chrf_chooses_its_search_by_chrf():
    """The RNN families' cells rank by chrF (their greedy BLEU is noise), and so
    does the choice of their search: here BLEU prefers beam 4, chrF beam 1."""
    rows = [{"beam_size": 1, "length_penalty": 0.6, "bleu": 0.4, "chrf": 14.1},
            {"beam_size": 4, "length_penalty": 0.6, "bleu": 0.5, "chrf": 13.2}]
    ranked_by = {metric: {"seed": 0, "config": {"valid_metric": metric},
                          "valid_search_grid": rows} for metric in ("bleu", "chrf")}
    assert RUNNER.chosen_search([ranked_by["bleu"]])["beam_size"] == 4
    choice = RUNNER.chosen_search([ranked_by["chrf"]])
    assert (choice["metric"], choice["beam_size"], choice["chrf"]) == ("chrf", 1, 14.1)
    assert RUNNER._best_search(ranked_by["chrf"]) == "1 / 0.6: chrf 14.10"
    assert RUNNER._best_search(ranked_by["bleu"]) == "4 / 0.6: 0.50"
    with pytest.raises(ValueError, match=r"different valid metrics \['bleu', 'chrf'\]"):
        RUNNER.chosen_search([ranked_by["bleu"], {**ranked_by["chrf"], "seed": 1}])


def fake_result(cell, bleu, chrf, change, seconds=600.0):
    return {"cell": cell, "change": change, "seed": 0, "steps_budget": 3000,
            "steps": 3000, "train_seconds": seconds,
            "train_target_tokens_per_second": 1234.5, "machine": {"matmul_gflops": 101.5},
            "valid": {"bleu": bleu, "chrf": chrf,
                      "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|"
                                             "smooth:exp|version:2.4.0"},
            "learning_curve": [{"step": 200, "minutes": 0.7, "bleu": bleu / 3,
                                "chrf": chrf / 2}]}


def test_table_and_plot_from_the_result_files_alone(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    grid = [{"beam_size": beam, "length_penalty": penalty, "bleu": bleu, "chrf": 40.0}
            for beam, penalty, bleu in ((1, 0.0, 12.0), (4, 0.6, 12.5), (8, 1.0, 13.1))]
    (results / "vocab-4000-seed0-3000steps.json").write_text(json.dumps(
        dict(fake_result("vocab-4000", 12.5, 40.0, "vocab_size=4000", seconds=540.0),
             stop_reason="converged", best_step=2500, valid_search_grid=grid,
             valid_search_grid_mean_of_best=[dict(row, bleu=row["bleu"] + 0.3, beam_size=4)
                                             for row in grid[:1]])))
    (results / "default-seed0-3000steps.json").write_text(json.dumps(
        fake_result("default", 10.0, 38.25, "(default)")))
    (results / "default-seed0-3000steps.test.json").write_text(json.dumps(
        {"cell": "default", "split": "test", "bleu": 99.0}))
    assert RUNNER.main(["--table", "--plot", "--results-dir", str(results)]) == 0
    lines = (results / "TABLE.md").read_text().splitlines()
    assert lines[0].startswith("| cell | change | steps | best step | stopped | train min | "
                               "train tok/s | matmul GFLOP/s | dev BLEU")
    # A result from before early stopping says it trained a fixed number of steps.
    assert lines[2] == ("| default | (default) | 3000 | - | fixed steps | 10.0 | 1234 | 101.5 "
                        "| 10.00 | 38.25 | +0.00 | - | - |")
    assert lines[3] == ("| vocab-4000 | vocab_size=4000 | 3000 | 2500 | converged | 9.0 | 1234 "
                        "| 101.5 | 12.50 | 40.00 | +2.50 | 8 / 1.0: 13.10 | 4 / 0.0: 12.30 |")
    assert len([line for line in lines if line.startswith("| ")]) == 3  # no test row
    assert "smooth:exp" in lines[-1]
    png = (results / "learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG")

    # A second seed of the default: its row and the seed noise under the table.
    (results / "default-seed1-3000steps.json").write_text(json.dumps(
        dict(fake_result("default", 9.25, 37.0, "(default)"), seed=1)))
    assert RUNNER.main(["--table", "--results-dir", str(results)]) == 0
    text = (results / "TABLE.md").read_text()
    assert "| default (seed 1) | (default) | 3000 |" in text
    assert ("Seed noise at 3000 steps: the default's dev BLEU is 10.00 (seed 0), "
            "9.25 (seed 1), a spread of 0.75.") in text


def test_the_plot_draws_the_converged_cells_their_seeds_as_one_group():
    def result(cell, seed, cap, stop_reason="converged"):
        return dict(fake_result(cell, 7.0, 26.0, cell), seed=seed, steps=cap // 2,
                    steps_budget=cap, stop_reason=stop_reason)

    curves, groups = RUNNER.plot_curves([
        fake_result("default", 5.0, 23.0, "(default)"),  # 2,000 steps, 100 sentences
        result("low-resource", 0, 12000, "max_steps"), result("low-resource", 0, 24000),
        result("low-resource", 1, 24000), result("low-resource-3-layers", 0, 24000)])
    assert groups == {"low-resource (cap 12000) seed 0": "low-resource (cap 12000)",
                      "low-resource seed 0": "low-resource",
                      "low-resource seed 1": "low-resource",
                      "low-resource-3-layers seed 0": "low-resource-3-layers"}
    # Each curve ends with the beam-4 score of its best checkpoint at its last step.
    assert curves["low-resource seed 1"][-1] == {"step": 12000, "minutes": 10.0,
                                                 "bleu": 7.0, "chrf": 26.0}


def test_the_table_compares_converged_cells_with_the_default_seed_by_seed(tmp_path):
    results = tmp_path / "results"
    results.mkdir()

    def write(cell, seed, steps, bleu, chrf, stop_reason="converged"):
        (results / f"{cell}-seed{seed}-{steps}steps.json").write_text(json.dumps(dict(
            fake_result(cell, bleu, chrf, cell), seed=seed, steps_budget=steps,
            steps=steps // 2, stop_reason=stop_reason, best_step=1000)))

    # The defaults converged under a 12,000-step cap, the cell under 24,000 (and
    # its seed 0 also stopped at a lower cap first: the higher cap's result counts).
    write("default", 0, 12000, 6.0, 25.0)
    write("default", 1, 12000, 6.2, 24.8)
    write("low-resource", 0, 12000, 5.0, 20.0, stop_reason="max_steps")
    write("low-resource", 0, 24000, 6.5, 26.0)
    write("low-resource", 1, 24000, 7.0, 25.3)
    write("vocab-4000", 0, 12000, 5.5, 24.0)  # one seed: no test
    write("dropout-0.3", 0, 12000, 9.0, 30.0, stop_reason="max_steps")  # not converged
    # Stopped at 2,500 by a run from before early stopping's floor (a quarter of
    # the cap, 3,000 here): it may still have been learning, so it does not pair.
    write("learning-rate-1e-3", 0, 12000, 9.0, 30.0)
    early = results / "learning-rate-1e-3-seed0-12000steps.json"
    early.write_text(json.dumps(dict(json.loads(early.read_text()), steps=2500)))
    assert RUNNER.main(["--table", "--results-dir", str(results)]) == 0
    text = (results / "TABLE.md").read_text()
    assert "| learning-rate-1e-3 | 0 |" not in text
    assert "stopped before the floor: does not rank" in next(
        line for line in text.splitlines() if line.startswith("| learning-rate-1e-3 |"))
    # ... and is not finished: a rerun resumes it under the floor, --partial records it.
    args = RUNNER.parse_args(["--results-dir", str(results), "--steps", "12000"])
    assert RUNNER.finished_result("learning-rate-1e-3", args) is None
    assert RUNNER.finished_result("vocab-4000", args)["cell"] == "vocab-4000"
    with pytest.raises(SystemExit, match="holds no valid curve"):  # not "has finished"
        RUNNER.main(["--partial", "--cells", "learning-rate-1e-3", "--steps", "12000",
                     "--results-dir", str(results), "--runs-dir", str(tmp_path / "runs"),
                     "--no-matmul-rate"])
    assert "At convergence against the default, seed by seed" in text
    # +0.5 and +0.8: t = 0.65 / (0.2121 / sqrt 2) = 4.33, one-sided p (1 df) 0.072;
    # Holm over the one cell with two seeds leaves it.
    row = next(line for line in text.splitlines() if line.startswith("| low-resource | 0, 1"))
    assert row.startswith("| low-resource | 0, 1 | +0.50, +0.80 | +0.65 | 0.072 (0.072) | "
                          "+1.00, +0.50 | +0.75 |"), row
    assert "| vocab-4000 | 0 | -0.50 | -0.50 | - |" in text
    assert "| dropout-0.3 | 0 |" not in text
    assert "against `low-resource`" not in text  # no cell around it yet

    # A one-change cell around `low-resource` is compared with it too, seed by seed.
    write("low-resource-heads-2", 0, 24000, 6.9, 26.1)
    write("low-resource-heads-2", 1, 24000, 7.2, 25.2)
    assert RUNNER.main(["--table", "--results-dir", str(results)]) == 0
    around = (results / "TABLE.md").read_text().split(
        "At convergence against `low-resource`, seed by seed")[1]
    # +0.4 and +0.2: t = 0.3 / (0.1414 / sqrt 2) = 3.0, one-sided p (1 df) 0.102.
    assert "| low-resource-heads-2 | 0, 1 | +0.40, +0.20 | +0.30 | 0.102 (0.102) | " \
           "+0.10, -0.10 | +0.00 |" in around
    assert "| low-resource | " not in around and "| vocab-4000 |" not in around


def test_cells_base_and_extra_cells_make_the_configs(tmp_path):
    args = RUNNER.parse_args([
        "--steps", "3000", "--base", "preset=tiny", "--base", "model-options=dropout=0.2",
        "--extra-cell", 'combined={"vocab_size": 4000, "word_dropout": 0.1}'])
    cells = RUNNER.all_cells(args)
    assert list(cells)[:3] == ["default", "vocab-4000", "vocab-2000"]
    assert cells["combined"] == {"vocab_size": 4000, "word_dropout": 0.1}
    overrides = RUNNER.resolve(cells["average-last-5"], 3000)
    assert overrides == {"average_checkpoints": 5, "checkpoint_every": 300}
    config = RUNNER.cell_config("heads-2", RUNNER.resolve(cells["heads-2"], 3000), args.base,
                                3000, 1, tmp_path)
    assert config.preset == "tiny" and config.max_steps == 3000 and config.seed == 1
    assert config.model_options == "dropout=0.2;num_heads=2"
    assert config.time_budget_minutes is None and config.test_src is None
    assert config.min_steps == 750  # early stopping's floor: a quarter of the cap
    assert config.output_dir == str(tmp_path / "heads-2-seed1-3000steps")
    default = RUNNER.cell_config("default", {}, {}, 3000, 0, tmp_path)
    expected = TRAIN_WMT.parse_args(["--max-steps", "3000"])
    assert (default.model, default.preset, default.data, default.learning_rate,
            default.warmup_steps, default.vocab_size) == (
        expected.model, expected.preset, expected.data, expected.learning_rate,
        expected.warmup_steps, expected.vocab_size)
    with pytest.raises(SystemExit, match="set by the runner"):
        RUNNER.cell_config("x", {"max_steps": 5}, {}, 3000, 0, tmp_path)
    with pytest.raises(SystemExit, match="unknown RunConfig field"):
        RUNNER.cell_config("x", {"vocabulary": 5}, {}, 3000, 0, tmp_path)
    with pytest.raises(SystemExit, match="NAME=JSON"):
        RUNNER.all_cells(RUNNER.parse_args(["--extra-cell", "broken=4000"]))


def test_a_capped_cell_has_its_own_run_and_the_cap_left_after_its_sessions(tmp_path):
    """`--cap-minutes`: the leaderboard's wall-time cap, counted over every session."""
    args = RUNNER.parse_args(["--steps", "24000", "--cap-minutes", "240"])
    assert RUNNER.budget_flags(args) == "--steps 24000 --cap-minutes 240"
    fresh = RUNNER.cell_config("default", {}, {}, 24000, 0, tmp_path, cap_minutes=240.0)
    assert fresh.output_dir == str(tmp_path / "default-seed0-24000steps-240min")
    assert (fresh.max_steps, fresh.time_budget_minutes) == (24000, 240.0)
    # Resumed after sessions that trained for 30 minutes up to its last checkpoint.
    run_dir = tmp_path / "default-seed0-24000steps-240min"
    run_dir.mkdir()
    (run_dir / "progress.json").write_text(json.dumps({"500": {"seconds": 1800.0}}))
    resumed = RUNNER.cell_config("default", {}, {}, 24000, 0, tmp_path, cap_minutes=240.0)
    assert resumed.time_budget_minutes == pytest.approx(210.0)
    # Uncapped cells keep their names and results; the two never mix in the table.
    assert RUNNER.run_id("default", 0, 24000) == "default-seed0-24000steps"
    capped = {"cell": "default", "seed": 0, "steps_budget": 24000, "cap_minutes": 240.0,
              "valid": {"bleu": 3.0, "chrf": 20.0}}
    uncapped = {"cell": "default", "seed": 0, "steps_budget": 24000,
                "valid": {"bleu": 5.0, "chrf": 25.0}}
    cell = {**capped, "cell": "learning-rate-1e-3", "valid": {"bleu": 4.0, "chrf": 22.0}}
    assert RUNNER.same_budget(capped, args) and not RUNNER.same_budget(uncapped, args)
    table = RUNNER.table_markdown([uncapped, capped, cell])
    assert "| +1.00 |" in table and "| -1.00 |" not in table
    with pytest.raises(SystemExit):
        RUNNER.parse_args(["--cap-minutes", "0"])


def test_the_low_resource_cells_are_train_wmts_low_resource_recipe(tmp_path):
    recipe = TRAIN_WMT.parse_args(["--recipe", "low-resource", "--max-steps", "3000"])
    cells = RUNNER.all_cells(RUNNER.parse_args([]))
    cell = RUNNER.cell_config("low-resource", cells["low-resource"], {}, 3000, 0, tmp_path)
    fields = ("vocab_size", "word_dropout", "model_options", "learning_rate",
              "warmup_steps", "label_smoothing", "batch_tokens", "preset")
    assert [getattr(cell, f) for f in fields] == [getattr(recipe, f) for f in fields]
    # ... but the search trains in float32 on every machine kind (the recipe: "auto");
    # precision is a cell of its own.
    assert (recipe.mixed_precision, cell.mixed_precision) == ("auto", "none")
    bf16 = RUNNER.cell_config("low-resource-bf16", cells["low-resource-bf16"], {}, 3000, 0,
                              tmp_path)
    assert bf16.mixed_precision == "bf16"
    narrow = RUNNER.cell_config("low-resource-d-128", cells["low-resource-d-128"], {}, 3000,
                                0, tmp_path)
    assert narrow.builder_options == {**recipe.builder_options, "model_dim": 128,
                                      "intermediate_dim": 512}


def test_every_cells_model_options_build_its_model(tmp_path):
    """A misspelt builder option in a cell fails here, not hours into a queue."""
    cells = RUNNER.all_cells(RUNNER.parse_args([]))
    built = {}
    for name, overrides in cells.items():
        config = RUNNER.cell_config(name, RUNNER.resolve(overrides, 3000),
                                    {"preset": "tiny"}, 3000, 0, tmp_path)
        key = (config.model, config.model_options)
        if key not in built:
            model = workflow.build_for_vocabulary(config, 64)
            built[key] = model.count_params()
    assert built[("transformer", "dropout=0.3;attention_dropout=0.1;activation_dropout=0.1;"
                  "model_dim=512;intermediate_dim=2048")] > built[
        ("transformer", "dropout=0.3;attention_dropout=0.1;activation_dropout=0.1")]


def test_a_run_restored_at_max_steps_trains_no_further(tmp_path, tiny_parallel_corpus,
                                                       tiny_tokenizer):
    """A cell killed after training (during its evaluation) resumes without a step more."""
    from keras_attn_zoo.data.vocabulary import vocabulary_size
    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.training import Trainer

    dataset, _ = zoo_data.make_dataset(tiny_parallel_corpus[:60], tiny_tokenizer,
                                       batch_tokens=300, max_length=64, seed=0)

    def trainer():
        model = build_model("transformer", vocabulary_size(tiny_tokenizer), preset="tiny")
        return Trainer(model, Adam(1e-3), checkpoint_every=0,
                       checkpoint_dir=str(tmp_path / "checkpoints"), jit_compile=False)

    first = trainer()
    first.optimizer.iterations.assign(2)  # as if it had trained 2 steps (no tracing)
    first.save()
    summary = trainer().train(lambda epoch: dataset, max_steps=2, verbose=0)
    assert (summary.steps, summary.resumed_from_step, summary.target_tokens) == (2, 2, 0)

"""Early stopping on the valid split: the stop, the best weights exported, and resume.

Real recipe runs of a tiny 2 + 2-layer Transformer on files the tests write,
evaluated on a real valid split with the exported search. The stop decision
is made deterministic without faking the scores: with `--min-improvement 100`
no evaluation after the first counts as an improvement, so every later one
counts against the patience, whatever the BLEU of the tiny model is (and with
`-100` every one resets it). Which weights are kept is the highest score's
(`min_improvement` only decides when to stop), read from the run's own curve.
"""

import contextlib
import io
import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import workflow
from keras_attn_zoo.training.early_stopping import EarlyStopping
from tests.conftest import load_recipe
from tests.conftest import write_parallel_files

RECIPE = load_recipe("train_wmt")


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory, tiny_parallel_corpus):
    return write_parallel_files(tmp_path_factory.mktemp("early_stopping"),
                                {"train": tiny_parallel_corpus[:120],
                                 "valid": tiny_parallel_corpus[200:206],
                                 "test": tiny_parallel_corpus[280:283]})


@pytest.fixture(scope="module")
def run_without_valid(corpus_files, tmp_path_factory):
    """`(config, results, printed)` of a 4-step run with no valid split and
    `--ema-momentum 0.9`: early stopping off, no evaluation, a checkpoint every
    2 steps. One run (each costs ~20 s of tracing) read by three tests; a test
    that writes to its directory works on a copy."""
    run_dir = tmp_path_factory.mktemp("without_valid") / "run"
    config = run_config(corpus_files, run_dir, "--ema-momentum", "0.9", steps=4, valid=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = workflow.training_run(config)
    return config, results, printed.getvalue()


@pytest.fixture(scope="module")
def ema_run(corpus_files, tmp_path_factory):
    """`(run_dir, results)` of a run with `--ema-momentum 0.9` that evaluates every
    2 steps and stops on the second evaluation (patience 1)."""
    run_dir = tmp_path_factory.mktemp("ema") / "run"
    results = workflow.training_run(run_config(
        corpus_files, run_dir, "--patience", "1", "--ema-momentum", "0.9"))
    return run_dir, results


PLATEAU_FLAGS = ("--patience", "3", "--average-checkpoints", "2")


@pytest.fixture(scope="module")
def plateau_first_run(corpus_files, tmp_path_factory):
    """`(run_dir, results)` of a 4-step run with PLATEAU_FLAGS (evaluations at 2
    and 4, both kept). Read-only: the resume test and the kill test each go on
    from a copy (one run of ~20 s fewer)."""
    run_dir = tmp_path_factory.mktemp("plateau") / "run"
    return run_dir, workflow.training_run(run_config(corpus_files, run_dir, *PLATEAU_FLAGS,
                                                     steps=4))


def run_config(corpus_files, run_dir, *flags, steps=40, valid=True):
    data = ["--data", "files"]
    for split in ("train", "valid", "test") if valid else ("train", "test"):
        data += [f"--{split}-src", str(corpus_files[f"{split}_src"]),
                 f"--{split}-tgt", str(corpus_files[f"{split}_tgt"])]
    return RECIPE.parse_args([
        "--preset", "tiny", *data, "--max-steps", str(steps), "--vocab-size", "100",
        "--batch-tokens", "300", "--checkpoint-every", "2", "--beam-size", "1",
        "--output-dir", str(run_dir), "--no-export", "--no-monitoring", "--quiet",
        "--valid-every", "2", "--min-improvement", "100", *flags])


def model_weights(model):
    return [np.asarray(w.numpy()) for w in model.weights if "float" in str(w.dtype)]


def checkpoint_weights(saved_model, prefix):
    """The float weights a checkpoint at `prefix` holds, read into a copy of the model."""
    fresh = type(saved_model).from_config(saved_model.get_config())
    tf.train.Checkpoint(model=fresh).restore(prefix).expect_partial()
    return model_weights(fresh)


def ranked_steps(curve, metric="bleu"):
    """The evaluated steps, best first (the earlier step first on a tie)."""
    return [e["step"] for e in sorted(curve, key=lambda e: (-e[metric], e["step"]))]


def assert_same(weights, expected, atol=1e-6):
    assert len(weights) == len(expected)
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(got, want, atol=atol)


def test_the_best_weights_replace_the_last_ones_before_evaluation(run_without_valid,
                                                                    tmp_path):
    """`final_weights` puts the best checkpoint in the model, here one that is not
    the last: the run's step-2 weights ranked above those of step 4."""
    config, _, _ = run_without_valid
    run_dir = tmp_path / "run"  # a copy: this test writes best/ into it
    shutil.copytree(config.paths[0], run_dir)
    model = keras.saving.load_model(run_dir / "model.keras")
    tf.train.Checkpoint(model=model).read(str(run_dir / "checkpoints" / "ckpt-4"))
    step_2 = checkpoint_weights(model, str(run_dir / "checkpoints" / "ckpt-2"))
    assert any(not np.allclose(a, b) for a, b in zip(model_weights(model), step_2))

    stopper = EarlyStopping(model, str(run_dir / "vocab.model"), [("a b", "c d")],
                            run_dir, every=2)
    stopper.evaluations = [{"step": 2, "bleu": 5.0, "chrf": 30.0},
                           {"step": 4, "bleu": 4.0, "chrf": 31.0}]
    tf.train.Checkpoint(model=model).read(str(run_dir / "checkpoints" / "ckpt-2"))
    stopper._checkpoint.write(stopper._prefix(2))
    stopper.kept = [2]
    tf.train.Checkpoint(model=model).read(str(run_dir / "checkpoints" / "ckpt-4"))
    entries = workflow.final_weights(config, model, None, stopper)
    assert entries["evaluated_steps"] == [2] and stopper.best_step == 2
    assert_same(model_weights(model), step_2)


def test_a_resumed_plateau_run_keeps_its_patience_and_averages_its_best_checkpoints(
        corpus_files, plateau_first_run, tmp_path):
    """Two tests' behaviours on one resumed run (a run is ~20 s of fixed cost):
    test_a_run_stops_on_a_plateau_and_its_resume_keeps_the_patience_counter, and
    test_averaging_composes_as_the_mean_of_the_best_checkpoints: with
    `--average-checkpoints 2` early stopping evaluates and saves the mean of the
    2 best evaluations' checkpoints. (That without averaging the best one alone
    is kept and saved: test_the_ema_is_what_is_evaluated_and_the_raw_weights_train_on.)"""
    run_dir = tmp_path / "run"
    shutil.copytree(plateau_first_run[0], run_dir)
    first, flags = plateau_first_run[1], PLATEAU_FLAGS
    assert first["stop_reason"] == "max_steps"
    assert first["early_stopping"]["evaluations_since_best"] == 1
    # The same command with more steps: evaluations at 6 and 8 use up the
    # patience of 3 with the one at 4. A run that forgot its state would count
    # its first evaluation after the resume (6) as an improvement and stop at 12.
    second = workflow.training_run(run_config(corpus_files, run_dir, *flags, steps=40))
    assert second["resumed_from_step"] == 4
    assert second["stop_reason"] == "converged" and second["steps"] == 8
    assert [e["step"] for e in second["valid_curve"]] == [2, 4, 6, 8]
    assert first["valid_curve"] == second["valid_curve"][:2]
    assert second["early_stopping"]["evaluations_since_best"] == 3
    assert second["early_stopping"]["valid_pairs"] == 6
    for point in second["valid_curve"]:
        assert set(point) == {"step", "bleu", "chrf"}
    two_best = ranked_steps(second["valid_curve"])[:2]
    assert second["best_step"] == two_best[0]
    assert second["evaluated_steps"] == two_best and second["averaged_checkpoints"] == 2
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    # The 2 best checkpoints alone are kept, and their mean is what was
    # evaluated and saved.
    assert {p.name.split(".")[0] for p in (run_dir / "best").iterdir()} == {
        f"step-{step}" for step in two_best}
    saved = keras.saving.load_model(run_dir / "model.keras")
    first_best, second_best = (checkpoint_weights(saved, str(run_dir / "best" / f"step-{s}"))
                               for s in two_best)
    assert_same(model_weights(saved), [(a + b) / 2 for a, b in zip(first_best, second_best)])

    # A converged run started again trains nothing and exports the same best.
    third = workflow.training_run(run_config(corpus_files, run_dir, *flags, steps=40))
    assert third["steps"] == 8 and third["resumed_from_step"] == 8
    assert third["stop_reason"] == "converged"
    # With no step trained there is no rate and no loss (not 0 tokens/s and NaN,
    # which a table would show as a measurement).
    assert third["train_target_tokens_per_second"] is None and third["final_loss"] is None
    assert second["train_target_tokens_per_second"] > 0 and second["final_loss"] > 0
    assert third["best_step"] == second["best_step"]
    assert third["evaluated_steps"] == second["evaluated_steps"]


def test_a_floor_keeps_the_patience_from_stopping_a_run_early(corpus_files,
                                                               plateau_first_run, tmp_path):
    """`--min-steps`: the 4-step run's evaluations at 2 and 4 already use up a
    patience of 1, so resumed without a floor it stops before any step; with a
    floor of 8 it trains on, evaluates at 6 and 8, and stops at the floor, the
    best checkpoint still chosen among all four evaluations."""
    run_dir = tmp_path / "run"
    shutil.copytree(plateau_first_run[0], run_dir)
    floored = workflow.training_run(run_config(corpus_files, run_dir, "--patience", "1",
                                               "--min-steps", "8", steps=40))
    assert floored["resumed_from_step"] == 4
    assert floored["stop_reason"] == "converged" and floored["steps"] == 8
    assert [e["step"] for e in floored["valid_curve"]] == [2, 4, 6, 8]
    assert floored["best_step"] == ranked_steps(floored["valid_curve"])[0]
    assert floored["early_stopping"]["min_steps"] == 8
    assert json.loads((run_dir / "early_stopping.json").read_text())["min_steps"] == 8
    # The same directory without the floor: converged, it trains nothing more.
    again = workflow.training_run(run_config(corpus_files, run_dir, "--patience", "1",
                                             steps=40))
    assert again["steps"] == 8 and again["stop_reason"] == "converged"


class ResumingTrainer:
    """What `EarlyStopping.on_train_start` uses of a `Trainer`: `request_stop`, and
    `optimizer` (a plateau schedule's halvings; none here)."""

    stopped = None
    optimizer = None

    def request_stop(self, reason):
        self.stopped = reason


def test_a_kill_between_an_evaluation_and_its_checkpoint_is_redone_once(corpus_files,
                                                                       plateau_first_run,
                                                                       tmp_path):
    run_dir = tmp_path / "run"  # a copy of a 4-step run: evaluations at 2 and 4, both kept
    shutil.copytree(plateau_first_run[0], run_dir)
    flags = PLATEAU_FLAGS
    # Make it look like the process died after step 4's evaluation wrote
    # best/step-4 and the state, before its checkpoint ckpt-4 was registered.
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n')
    state = json.loads((run_dir / "early_stopping.json").read_text())
    assert [e["step"] for e in state["evaluations"]] == [2, 4]
    assert sorted(state["kept"]) == [2, 4]
    assert list((run_dir / "best").glob("step-4.*"))

    stopper = EarlyStopping(keras.saving.load_model(run_dir / "model.keras"),
                            str(run_dir / "vocab.model"), [("a b", "c d")], run_dir,
                            every=2, keep_best=2)
    trainer = ResumingTrainer()
    stopper.on_train_start(trainer, 2)
    assert [e["step"] for e in stopper.evaluations] == [2]
    assert sorted(stopper.kept) == [2] and not list((run_dir / "best").glob("step-4*"))
    assert trainer.stopped is None

    # The real resume: trains 2 -> 4 again and evaluates step 4 once.
    results = workflow.training_run(run_config(corpus_files, run_dir, *flags, steps=4))
    assert results["resumed_from_step"] == 2
    assert [e["step"] for e in results["valid_curve"]] == [2, 4]
    assert sorted(results["evaluated_steps"]) == [2, 4]


def test_the_ema_is_what_is_evaluated_and_the_raw_weights_train_on(ema_run,
                                                                    run_without_valid):
    run_dir, results = ema_run
    assert results["stop_reason"] == "converged" and results["steps"] == 4
    best = results["best_step"]
    saved = keras.saving.load_model(run_dir / "model.keras")
    # The best checkpoint alone is kept, and it is what was evaluated and saved.
    assert {p.name.split(".")[0] for p in (run_dir / "best").iterdir()} == {f"step-{best}"}
    averaged = checkpoint_weights(saved, str(run_dir / "best" / f"step-{best}"))
    assert_same(model_weights(saved), averaged)
    # The best checkpoint holds the moving average; the run's own checkpoint
    # at the same step the raw weights, which training went on from.
    raw = checkpoint_weights(saved, str(run_dir / "checkpoints" / f"ckpt-{best}"))
    assert any(not np.allclose(a, b, atol=1e-6) for a, b in zip(averaged, raw))

    # The same 4 steps without any evaluation (no valid split) train the same
    # raw weights: evaluating the average did not disturb training.
    config, same_without, _ = run_without_valid
    assert same_without["stop_reason"] == "max_steps"
    plain = checkpoint_weights(saved, str(config.paths[0] / "checkpoints" / "ckpt-4"))
    with_evaluations = checkpoint_weights(saved, str(run_dir / "checkpoints" / "ckpt-4"))
    assert_same(with_evaluations, plain, atol=1e-5)


def test_a_run_without_a_valid_split_says_it_exports_the_last_weights(run_without_valid):
    _, results, printed = run_without_valid
    assert "early stopping: off, the data has no valid split" in printed
    assert results["stop_reason"] == "max_steps" and "best_step" not in results


@pytest.mark.parametrize("flags, message", [
    (["--valid-every", "-1"], "--valid-every, --patience and --min-steps must be >= 0"),
    (["--patience", "-2"], "--valid-every, --patience and --min-steps must be >= 0"),
    (["--min-steps", "-1"], "--valid-every, --patience and --min-steps must be >= 0"),
    (["--valid-sentences", "0"], "--valid-sentences must be >= 1"),
])
def test_bad_early_stopping_flags_are_refused_before_any_work(corpus_files, tmp_path, flags,
                                                              message):
    with pytest.raises(SystemExit, match=message):
        workflow.training_run(run_config(corpus_files, tmp_path / "run", *flags))
    assert not (tmp_path / "run").exists()



@pytest.mark.parametrize("metric, other", [("bleu", "chrf"), ("chrf", "bleu")])
def test_the_length_penalty_chosen_on_valid_is_the_test_evaluations(corpus_files, tmp_path,
                                                                    metric, other):
    """`--length-penalty-choices`: every choice searched on the valid split at the
    run's beam, the best one's penalty by the run's `--valid-metric` then used by
    the test evaluation."""
    results = workflow.training_run(run_config(
        corpus_files, tmp_path / "run", "--beam-size", "2", "--valid-metric", metric,
        "--length-penalty-choices", "0.0,2.0", steps=2))
    choice = results["length_penalty_choice"]
    assert choice["metric"] == metric
    assert [row["length_penalty"] for row in choice["rows"]] == [0.0, 2.0]
    assert {row["beam_size"] for row in choice["rows"]} == {2}
    assert choice["valid_pairs"] == 6 and choice["by"] == "valid"
    best = max(choice["rows"], key=lambda row: (row[metric], row[other]))
    assert choice["chosen"] == best["length_penalty"]
    assert results["length_penalty"] == choice["chosen"] and results["beam_size"] == 2
    assert results["test_pairs"] == 3


@pytest.mark.parametrize("flags, message", [
    (["--length-penalty-choices", "0.6,-1"], "--length-penalty-choices must be >= 0"),
    (["--length-penalty-choices", "0.6,1.0"], "needs --beam-size >= 2"),  # run_config: beam 1
    (["--model", "eager_translator", "--beam-size", "4", "--model-options",
      "length_normalization=average", "--length-penalty-choices", "0.6,1.0"],
     "length_normalization='average' ranks hypotheses without the GNMT length penalty"),
])
def test_length_penalty_choices_that_cannot_act_are_refused_before_any_work(
        corpus_files, tmp_path, flags, message):
    with pytest.raises(SystemExit, match=message):
        workflow.training_run(run_config(corpus_files, tmp_path / "run", *flags))
    assert not (tmp_path / "run").exists()


def test_a_model_ranking_by_average_log_prob_has_no_penalty_to_choose(
        corpus_files, tmp_path, capsys):
    """The eager translator ranks by the reference's average log-prob by default:
    `--length-penalty-choices` (make train passes it) is then not applicable,
    said and recorded, and the run goes on to its test evaluation."""
    results = workflow.training_run(run_config(
        corpus_files, tmp_path / "run", "--model", "eager_translator", "--beam-size", "2",
        "--length-penalty-choices", "0.6,1.0", steps=2))
    assert results["length_penalty_choice"] == {
        "chosen": None, "by": "not applicable", "length_normalization": "average"}
    assert "length penalty: not chosen" in capsys.readouterr().out
    assert results["test_pairs"] == 3


def test_length_penalty_choices_must_be_numbers(corpus_files, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_config(corpus_files, tmp_path / "run", "--length-penalty-choices", "0.6,long")
    assert "expected numbers separated by commas, got '0.6,long'" in capsys.readouterr().err


def test_an_unknown_metric_is_refused_by_the_recipe(corpus_files, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_config(corpus_files, tmp_path / "run", "--valid-metric", "ter")
    assert "--valid-metric: invalid choice: 'ter'" in capsys.readouterr().err


def test_a_run_resumed_under_the_other_metric_ranks_its_evaluations_by_it(
        corpus_files, plateau_first_run, tmp_path):
    """A family whose greedy BLEU is too low to rank by goes on by chrF: the recorded
    evaluations (each holds both) are ranked again, the kept checkpoints follow,
    and the change is recorded."""
    run_dir = tmp_path / "run"  # a copy: evaluations at 2 and 4 by BLEU, both kept
    shutil.copytree(plateau_first_run[0], run_dir)
    resumed = workflow.training_run(run_config(corpus_files, run_dir, *PLATEAU_FLAGS,
                                               "--valid-metric", "chrf", steps=6))
    assert resumed["resumed_from_step"] == 4 and resumed["steps"] == 6
    assert resumed["early_stopping"]["metric"] == "chrf"
    assert resumed["early_stopping"]["metric_changes"] == [
        {"step": 4, "from": "bleu", "to": "chrf"}]
    curve = resumed["valid_curve"]
    assert [e["step"] for e in curve] == [2, 4, 6]
    assert curve[:2] == plateau_first_run[1]["valid_curve"]
    two_best = ranked_steps(curve, "chrf")[:2]
    assert resumed["best_step"] == two_best[0] and resumed["evaluated_steps"] == two_best
    assert resumed["best_valid_chrf"] == max(e["chrf"] for e in curve)
    state = json.loads((run_dir / "early_stopping.json").read_text())
    assert state["metric"] == "chrf" and state["kept"] == two_best
    assert {p.name.split(".")[0] for p in (run_dir / "best").iterdir()} == {
        f"step-{step}" for step in two_best}


def test_a_metric_whose_best_weights_were_not_kept_is_refused(corpus_files, ema_run,
                                                              tmp_path):
    run_dir = tmp_path / "run"  # a copy of a run that kept its BLEU-best checkpoint only
    shutil.copytree(ema_run[0], run_dir)
    path = run_dir / "early_stopping.json"
    state = json.loads(path.read_text())
    (kept,) = state["kept"]
    other = next(e for e in state["evaluations"] if e["step"] != kept)
    other["chrf"] = 1000.0  # ranked by chrF the best is a step whose weights are gone
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=rf"the weights of steps \[{other['step']}\] "
                                         "were not kept: start a new run directory"):
        workflow.training_run(run_config(corpus_files, run_dir, "--patience", "1",
                                         "--ema-momentum", "0.9", "--valid-metric", "chrf"))
    assert json.loads(path.read_text()) == state  # nothing re-ranked, nothing deleted
    assert any(p.name.startswith(f"step-{kept}") for p in (run_dir / "best").iterdir())


def test_a_plateau_schedule_halves_the_rate_at_each_evaluation_without_gain(
        corpus_files, tmp_path, monkeypatch):
    """The eager paper's SGD: a constant rate, halved whenever a valid evaluation does
    not improve (here every one after the first, `--min-improvement 100`); a resumed
    run takes its halvings from the early-stopping state."""
    from keras_attn_zoo.optimizers import plateau_schedule

    made = []  # the runs' real optimizers, as workflow.build made them
    make_optimizer = workflow.make_optimizer
    monkeypatch.setattr(workflow, "make_optimizer",
                        lambda config, ema: made.append(make_optimizer(config, ema)) or made[-1])

    def rate():
        return float(np.asarray(made[-1].learning_rate))

    run_dir = tmp_path / "run"
    flags = ("--optimizer", "sgd", "--schedule", "plateau-halving", "--learning-rate", "0.5",
             "--warmup-steps", "0", "--patience", "5")
    first = workflow.training_run(run_config(corpus_files, run_dir, *flags, steps=6))
    assert [e["step"] for e in first["valid_curve"]] == [2, 4, 6]
    assert isinstance(made[-1], keras.optimizers.SGD)
    assert float(plateau_schedule(made[-1]).halvings.numpy()) == 2 and rate() == 0.125
    # Resumed to step 7 (no evaluation in it): the evaluations at 4 and 6 had no
    # gain, so it trains on at 0.5 / 4; a run that forgot them would be back at 0.5.
    second = workflow.training_run(run_config(corpus_files, run_dir, *flags, steps=7))
    assert second["resumed_from_step"] == 6 and second["steps"] == 7
    assert rate() == 0.125
    # The rule needs the evaluations it halves at.
    with pytest.raises(SystemExit, match="needs early stopping"):
        workflow.training_run(run_config(corpus_files, tmp_path / "other", *flags,
                                         "--valid-every", "0", steps=2))


def test_rnnsearch_papers_recipe_keeps_its_adadelta_rate_and_clips_the_gradients(
        corpus_files, tmp_path, monkeypatch):
    """`--recipe rnnsearch-paper`: Adadelta (rho 0.95, epsilon 1e-6) at a constant
    rate 1, which evaluations without gain do not halve, and the gradients'
    global norm rescaled to at most `--clip-norm` (the recipe's 1, here also a
    tiny one, under which a step cannot move the weights further)."""
    made = []
    make_optimizer = workflow.make_optimizer
    monkeypatch.setattr(workflow, "make_optimizer",
                        lambda config, ema: made.append(make_optimizer(config, ema)) or made[-1])

    def step_change(results, run_dir):
        """The global L2 norm of the weights' change in the run's last step."""
        model = keras.saving.load_model(results["keras_model_path"])
        last = results["steps"]
        before, after = (checkpoint_weights(model, str(run_dir / "checkpoints" / f"ckpt-{s}"))
                         for s in (last - 1, last))
        return float(np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(after, before))))

    flags = ("--model", "bahdanau_rnn", "--recipe", "rnnsearch-paper", "--checkpoint-every", "1")
    paper = workflow.training_run(run_config(corpus_files, tmp_path / "paper", *flags, steps=4))
    optimizer = made[-1]
    assert isinstance(optimizer, keras.optimizers.Adadelta)
    assert (optimizer.rho, optimizer.epsilon) == (0.95, 1e-6)
    # Evaluations at steps 2 and 4, the second without gain (--min-improvement 100):
    # a plateau schedule would be at 0.5 now.
    assert [e["step"] for e in paper["valid_curve"]] == [2, 4]
    assert float(np.asarray(optimizer.learning_rate)) == 1.0
    tiny = workflow.training_run(run_config(corpus_files, tmp_path / "tiny", *flags,
                                            "--clip-norm", "1e-6", steps=2))
    assert step_change(tiny, tmp_path / "tiny") < 1e-5 < 1e-3 < step_change(
        paper, tmp_path / "paper")
    with pytest.raises(SystemExit, match="--clip-norm must be > 0"):
        workflow.training_run(run_config(corpus_files, tmp_path / "bad", "--clip-norm", "0",
                                         steps=1))


def test_evaluations_without_gain_count_every_one_not_only_the_last_in_a_row():
    from keras_attn_zoo.training.early_stopping import evaluations_since_best
    from keras_attn_zoo.training.early_stopping import evaluations_without_gain

    curve = [{"bleu": value} for value in (1.0, 2.0, 1.5, 3.0, 2.0, 2.5)]
    assert evaluations_without_gain(curve, "bleu") == 3
    assert evaluations_since_best(curve, "bleu") == 2
    assert evaluations_without_gain(curve, "bleu", min_improvement=1.5) == 4

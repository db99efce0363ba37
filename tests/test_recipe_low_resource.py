"""The low-resource recipe's run options do what they say, through the workflow.

`--word-dropout`, `--average-checkpoints` and `--ema-momentum` (`RunConfig`
fields of the same names): word dropout on the training batches, the mean of
the run's last checkpoints, the optimizer's moving average of the weights,
each put in the model after training while the checkpoints on disk keep the
raw trained weights; and a monitored run's dev learning curve (printed, drawn,
kept in the results). Tiny models, a few steps, no test split unless needed.
"""

import contextlib
import dataclasses
import io
import json

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import workflow
from keras_attn_zoo.data.vocabulary import UNK_ID
from keras_attn_zoo.training.averaging import latest_checkpoints
from tests.conftest import load_recipe
from tests.conftest import write_parallel_files

RECIPE = load_recipe("train_wmt")


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory, tiny_parallel_corpus):
    return write_parallel_files(tmp_path_factory.mktemp("low_resource"),
                                {"train": tiny_parallel_corpus[:120],
                                 "test": tiny_parallel_corpus[280:283],
                                 "valid": tiny_parallel_corpus[283:287]})


def recipe_config(corpus_files, tmp_path, *flags, model="transformer", steps=2,
                  test=False):
    """`train_wmt.py`'s config for a tiny run on the corpus files."""
    data = ["--data", "files", "--train-src", str(corpus_files["train_src"]),
            "--train-tgt", str(corpus_files["train_tgt"])]
    if test:
        data += ["--test-src", str(corpus_files["test_src"]),
                 "--test-tgt", str(corpus_files["test_tgt"]), "--beam-size", "1"]
    return RECIPE.parse_args([
        "--model", model, "--preset", "tiny", *data, "--max-steps", str(steps),
        "--vocab-size", "100", "--batch-tokens", "300", "--checkpoint-every", "0",
        "--output-dir", str(tmp_path / "run"), "--no-export", "--no-monitoring",
        "--quiet", *flags])


def restored_weights(model, path):
    """`model`'s weights as the checkpoint at `path` holds them (model left restored)."""
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    return [np.asarray(weight.numpy()) for weight in model.weights]


# ---- --word-dropout ------------------------------------------------------------------------


def test_word_dropout_flag_zero_keeps_the_batches_and_one_drops_every_word(
        corpus_files, tmp_path, tiny_parallel_corpus, tiny_tokenizer):
    from keras_attn_zoo import data as zoo_data

    def make_dataset(epoch):
        dataset, _ = zoo_data.make_dataset(tiny_parallel_corpus[:60], tiny_tokenizer,
                                           batch_tokens=300, max_length=64, seed=epoch)
        return dataset

    clean = list(make_dataset(1))
    config = recipe_config(corpus_files, tmp_path)
    assert config.word_dropout == 0.0
    off = list(workflow.with_word_dropout(config, make_dataset)(1))
    assert len(off) == len(clean)
    for (features, labels), (clean_features, clean_labels) in zip(off, clean):
        for key in ("source_ids", "target_ids"):
            np.testing.assert_array_equal(features[key], clean_features[key])
        np.testing.assert_array_equal(labels, clean_labels)

    config = recipe_config(corpus_files, tmp_path, "--word-dropout", "1")
    dropped = list(workflow.with_word_dropout(config, make_dataset)(1))
    for (features, labels), (clean_features, clean_labels) in zip(dropped, clean):
        for key in ("source_ids", "target_ids"):
            ids, clean_ids = features[key].numpy(), clean_features[key].numpy()
            words = clean_ids > 3  # PAD, UNK, BOS, EOS stay
            assert words.any() and (ids[words] == UNK_ID).all()
            np.testing.assert_array_equal(ids[~words], clean_ids[~words])
        np.testing.assert_array_equal(labels, clean_labels)  # every reference token


def test_word_dropout_is_refused_for_a_model_with_its_own_ids(corpus_files, tmp_path):
    config = recipe_config(corpus_files, tmp_path, "--word-dropout", "0.1",
                           model="eager_translator")
    with pytest.raises(SystemExit, match="--word-dropout would turn eager_translator's"):
        workflow.training_run(config)


@pytest.mark.parametrize("flags, message", [
    (["--word-dropout", "1.5"], "--word-dropout must be in"),
    (["--ema-momentum", "1"], "--ema-momentum must be in"),
    (["--average-checkpoints", "-1"], "--average-checkpoints must be"),
    (["--ema-momentum", "0.9", "--average-checkpoints", "2"], "choose one"),
])
def test_bad_low_resource_flags_are_refused_before_any_work(corpus_files, tmp_path, flags,
                                                            message):
    config = recipe_config(corpus_files, tmp_path, *flags)
    with pytest.raises(SystemExit, match=message):
        workflow.training_run(config)
    assert not (tmp_path / "run").exists()


# ---- --recipe -------------------------------------------------------------------------------


def test_the_low_resource_recipe_is_its_flags_and_given_flags_win(capsys):
    spelled_out = RECIPE.parse_args([
        "--vocab-size", "4000", "--word-dropout", "0.1", "--max-steps", "5",
        "--model-options", "dropout=0.3;attention_dropout=0.1;activation_dropout=0.1",
        "--mixed-precision", "auto"])
    recipe = RECIPE.parse_args(["--recipe", "low-resource", "--max-steps", "5"])
    assert dataclasses.replace(recipe, name=None) == spelled_out
    # Its own run directory and export: not the default run's, which it would resume.
    assert recipe.run_name == "transformer-small-ding-de-en-low-resource"
    assert RECIPE.parse_args(["--recipe", "low-resource", "--name", "x"]).run_name == "x"
    assert RECIPE.parse_args(["--max-steps", "5", "--recipe", "default"]) == \
        RECIPE.parse_args(["--max-steps", "5"])
    given = RECIPE.parse_args(["--vocab-size", "2000", "--recipe", "low-resource",
                               "--model-options", "num_heads=2;dropout=0.2"])
    assert (given.vocab_size, given.word_dropout) == (2000, 0.1)
    assert given.builder_options == {"dropout": 0.2, "attention_dropout": 0.1,
                                     "activation_dropout": 0.1, "num_heads": 2}
    assert given.time_budget_minutes == RECIPE.DEFAULT_BUDGET_MINUTES  # no stop flag given
    with pytest.raises(SystemExit):
        RECIPE.parse_args(["--recipe", "low-ressource"])
    assert "--recipe: invalid choice: 'low-ressource'" in capsys.readouterr().err


def test_the_converged_recipe_trains_the_model_its_recipe_cells_measured():
    """`--recipe low-resource-3-layers` is the recipe cell `low-resource-3-layers`
    (the same training, so the same run identity) with the weights and search
    its valid results chose, where bf16 multiplies natively."""
    experiments = load_recipe("recipe_experiments")
    recipe = RECIPE.parse_args(["--recipe", "low-resource-3-layers", "--max-steps", "24000"])
    cell = experiments.cell_config(
        "low-resource-3-layers", experiments.CELLS["low-resource-3-layers"], {}, 24000,
        0, "runs", keep_test=True)
    for field in workflow.RUN_IDENTITY_FIELDS:
        # The cells train float32 on every machine kind; options compare as a dict.
        if field not in ("mixed_precision", "model_options"):
            assert getattr(recipe, field) == getattr(cell, field), field
    assert recipe.builder_options == cell.builder_options
    assert recipe.builder_options["num_encoder_layers"] == 3
    assert recipe.builder_options["num_decoder_layers"] == 3
    assert recipe.mixed_precision == "auto"
    assert (recipe.average_checkpoints, recipe.beam_size, recipe.length_penalty) == (4, 8, 1.0)
    assert recipe.run_name == "transformer-small-ding-de-en-low-resource-3-layers"


def test_a_run_directory_resumes_only_the_run_it_holds(corpus_files, tmp_path):
    first = recipe_config(corpus_files, tmp_path, "--model-options", "dropout=0.3;num_heads=2")
    run_dir = workflow.open_run_directory(first)
    identity = json.loads((run_dir / workflow.RUN_IDENTITY_FILE).read_text())
    assert identity["vocab_size"] == 100 and identity["model_options"] == {
        "dropout": 0.3, "num_heads": 2}
    # Other stop conditions, evaluation and early stopping, and the options in another
    # order: the same run, resumed.
    same = recipe_config(corpus_files, tmp_path, "--model-options", "num_heads=2;dropout=0.3",
                         "--patience", "2", "--beam-size", "2", steps=9)
    assert workflow.open_run_directory(same) == run_dir
    other = recipe_config(corpus_files, tmp_path, "--vocab-size", "120", "--word-dropout",
                          "0.1", "--model-options", "dropout=0.3;num_heads=2")
    with pytest.raises(SystemExit, match=r"holds a run with other settings.*vocab_size 100 "
                                         r"there, 120 now; word_dropout 0\.0 there, 0\.1 now"):
        workflow.training_run(other)
    assert sorted(path.name for path in run_dir.iterdir()) == [workflow.RUN_IDENTITY_FILE]


# ---- --average-checkpoints -----------------------------------------------------------------


@pytest.fixture(scope="module")
def low_resource_run(corpus_files, tmp_path_factory):
    """`(run_dir, results, printed)` of one monitored 4-step run with every
    low-resource option at once (2 + 2 layers, a checkpoint every 2 steps, the
    last 2 averaged) and the dev monitor on 4 valid pairs, every step. Shared by
    the averaging and the learning-curve tests: a run is ~20 s of fixed cost,
    and the monitor only reads the weights it evaluates."""
    options = "dropout=0.3;attention_dropout=0.1;activation_dropout=0.1;decoder_layer_drop=0.2"
    tmp_path = tmp_path_factory.mktemp("low_resource_run")
    config = recipe_config(
        corpus_files, tmp_path, "--model-options", options, "--word-dropout", "0.2",
        "--average-checkpoints", "2", "--checkpoint-every", "2",
        "--valid-src", str(corpus_files["valid_src"]),
        "--valid-tgt", str(corpus_files["valid_tgt"]), "--eval-every", "1",
        "--beam-size", "1", "--valid-every", "0", steps=4)
    config = dataclasses.replace(config, no_monitoring=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = workflow.training_run(config)
    return tmp_path / "run", results, printed.getvalue()


def test_a_low_resource_run_averages_its_last_checkpoints(low_resource_run):
    """End to end, 2 + 2 layers: every low-resource option at once."""
    import keras

    run_dir, results, _ = low_resource_run
    assert results["steps"] == 4 and results["averaged_checkpoints"] == 2
    assert results["word_dropout"] == 0.2 and results["model_options"]["decoder_layer_drop"] == 0.2
    checkpoints = run_dir / "checkpoints"
    paths = latest_checkpoints(checkpoints, 3)
    assert [path.rsplit("-", 1)[1] for path in paths] == ["2", "4"]

    exported = keras.saving.load_model(run_dir / "model.keras")
    assert [block.feed_forward._dropout_layer.rate
            for block in exported.decoder_blocks] == [0.1, 0.1]
    fresh = type(exported).from_config(exported.get_config())
    older, newer = (restored_weights(fresh, path) for path in paths)
    floats = [i for i, w in enumerate(exported.weights) if "float" in str(w.dtype)]
    for i in floats:
        np.testing.assert_allclose(exported.weights[i].numpy(), (older[i] + newer[i]) / 2,
                                   atol=1e-6)
    # The last checkpoint keeps the raw weights, not the average.
    assert any(not np.allclose(exported.weights[i].numpy(), newer[i]) for i in floats)


def test_averaging_more_checkpoints_than_the_run_can_have_is_refused(corpus_files,
                                                                     tmp_path):
    # Known before training: one checkpoint every 2 steps up to 4, and the last.
    config = recipe_config(corpus_files, tmp_path, "--average-checkpoints", "4",
                           "--checkpoint-every", "2", steps=4)
    with pytest.raises(SystemExit, match="can have at most 3 checkpoint"):
        workflow.training_run(config)
    assert not (tmp_path / "run" / "checkpoints").exists()
    # With early stopping the mean is of the best evaluations: 4 of them by step 8,
    # where the trainer keeps only its last checkpoint.
    evaluated = dataclasses.replace(config, valid_every=2, max_steps=8, checkpoint_every=0)
    workflow.check_checkpoints_to_average(evaluated)
    with pytest.raises(SystemExit, match="at most 1 checkpoint.* or 4 early-stopping evaluation"):
        workflow.check_checkpoints_to_average(dataclasses.replace(evaluated,
                                                                  average_checkpoints=5))
    # Stopped by time, early stopping's evaluations are unbounded until training ends.
    workflow.check_checkpoints_to_average(dataclasses.replace(
        evaluated, max_steps=None, time_budget_minutes=1.0, average_checkpoints=5))


# ---- --ema-momentum ------------------------------------------------------------------------


def test_ema_after_finalize_is_the_warmed_up_average_computed_by_hand(
        tiny_tokenizer, tiny_parallel_corpus):
    """Through the `Trainer`'s own step (`optimizer.apply_gradients`): the momentum
    of step t is min(ema_momentum, (1 + t) / (10 + t)), so the first steps' weights
    do not linger in the average (Keras' constant momentum keeps them)."""
    import keras

    from keras_attn_zoo import data as zoo_data
    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.optimizers import Adam
    from keras_attn_zoo.training import Trainer

    dataset, _ = zoo_data.make_dataset(tiny_parallel_corpus[:40], tiny_tokenizer,
                                       batch_tokens=200, max_length=64)
    # One batch three times (one trace), taken before the reseed, which drops
    # the tokenizer's resource.
    batches = list(dataset.take(1)) * 3
    keras.utils.set_random_seed(0)
    model = transformer(200, preset="tiny")
    # Step 1 is warming up (2/11 < 0.2), step 2 is capped (3/12 > 0.2).
    ema_momentum = 0.2
    optimizer = Adam(1e-2, use_ema=True, ema_momentum=ema_momentum)
    trainer = Trainer(model, optimizer)
    average = None
    for step, (inputs, labels) in enumerate(batches):
        trainer.train_on_batch(inputs, labels)
        weights = [np.asarray(v.numpy(), np.float64) for v in model.trainable_variables]
        momentum = min(ema_momentum, (1 + step) / (10 + step))
        # The average starts at the first step's weights, as Keras' does.
        average = weights if average is None else [
            momentum * a + (1 - momentum) * w for a, w in zip(average, weights)]
    raw = [v.numpy() for v in model.trainable_variables]
    optimizer.finalize_variable_values(model.trainable_variables)
    for variable, expected, last in zip(model.trainable_variables, average, raw):
        np.testing.assert_allclose(variable.numpy(), expected, atol=1e-6)
    assert any(not np.allclose(v.numpy(), r) for v, r in zip(model.trainable_variables, raw))


def test_ema_run_puts_the_average_in_the_model_and_keeps_raw_weights_on_disk(
        corpus_files, tmp_path):
    """The Weighted Transformer's `wrap_optimizer` (κ/α warm-up) keeps the EMA."""
    from keras_attn_zoo.models.weighted_optimizer import BranchWeightAdam
    from keras_attn_zoo.training.strategy import select_strategy

    config = recipe_config(corpus_files, tmp_path, "--ema-momentum", "0.5",
                           "--model-options", "branch_weight_warmup_steps=1",
                           model="weighted_transformer", steps=3)
    corpus, tokenizer = workflow.prepare_data(config)
    strategy = select_strategy(config.strategy)
    model, optimizer = workflow.build(config, tokenizer, strategy)
    assert isinstance(optimizer, BranchWeightAdam) and optimizer.use_ema
    assert optimizer.ema_momentum == 0.5
    workflow.train(config, model, optimizer, strategy, corpus, tokenizer)
    raw = [v.numpy() for v in model.trainable_variables]
    assert workflow.final_weights(config, model, optimizer) == {}
    averages = optimizer._model_variables_moving_average
    changed = 0
    for variable, average, raw_value in zip(model.trainable_variables, averages, raw):
        if variable.constraint is None:
            np.testing.assert_array_equal(variable.numpy(), average.numpy())
        else:  # κ/α: the average projected onto the simplex
            values = variable.numpy()
            assert values.min() >= 0 and values.sum(-1) == pytest.approx(1.0, abs=1e-5)
        changed += not np.allclose(variable.numpy(), raw_value)
    assert changed
    latest = latest_checkpoints(tmp_path / "run" / "checkpoints", 1)
    on_disk = restored_weights(model, latest[0])
    by_path = {w.path: value for w, value in zip(model.weights, on_disk)}
    for variable, raw_value in zip(model.trainable_variables, raw):
        np.testing.assert_array_equal(by_path[variable.path], raw_value)

    # A run stopped by time or epochs learns only now that it has too few
    # checkpoints to average: refused, the trained checkpoint kept.
    config.ema_momentum, config.average_checkpoints = 0.0, 2
    with pytest.raises(SystemExit, match="has only 1 checkpoint"):
        workflow.final_weights(config, model, optimizer)
    config.average_checkpoints = 1  # the mean of one checkpoint: its raw weights
    assert workflow.final_weights(config, model, optimizer) == {"averaged_checkpoints": 1}
    for variable, raw_value in zip(model.trainable_variables, raw):
        np.testing.assert_array_equal(variable.numpy(), raw_value)


# ---- the learning curve of a run -----------------------------------------------------------


def test_a_monitored_run_prints_and_draws_its_dev_learning_curve(low_resource_run):
    run_dir, results, printed = low_resource_run
    curve = results["learning_curve"]
    # Evaluated at step 1, then postponed by the 4% time share (not every step).
    assert curve[0]["step"] == 1 and 1 <= len(curve) <= 3
    minutes = [point["minutes"] for point in curve]
    assert minutes == sorted(minutes) and minutes[0] > 0
    assert all(0 <= point["bleu"] <= 100 and 0 <= point["chrf"] <= 100 for point in curve)
    png = run_dir / "learning_curve.png"
    assert results["learning_curve_png"] == str(png)
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "dev learning curve" in printed
    # Kept next to the results.
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["learning_curve"] == curve

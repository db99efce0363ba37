"""Every builder option `recipes/train_wmt.py --model-options` accepts takes effect.

Options that act during training get their help from the model's own hooks
(`training_callbacks`, `wrap_optimizer`), options that shape the training data
reach the data path, and options that could not act in a recipe run are
refused with an error naming them. Each test runs the recipe in process
(`parse_args` + `training_run`) on the `tiny` presets for a few steps on small
parallel files, and looks at the model and trainer the run used.
"""


import numpy as np
import pytest

from keras_attn_zoo import workflow
from keras_attn_zoo.training import InverseSquareRootSchedule
from tests.conftest import load_recipe

TRANSFORMER_FAMILY = ["transformer", "gmm_transformer", "ran_transformer",
                      "hard_coded_transformer", "synthesizer_transformer"]


RECIPE = load_recipe("train_wmt")


@pytest.fixture(scope="module")
def train_files(tmp_path_factory, tiny_parallel_corpus):
    directory = tmp_path_factory.mktemp("recipe_options")
    pairs = tiny_parallel_corpus[:120]
    source, target = directory / "train.de", directory / "train.en"
    source.write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    target.write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    return source, target


def run_recipe(train_files, tmp_path, monkeypatch, model, options="", steps=2,
               flags=()):
    """Runs the recipe; returns `(results, {"model": ..., "trainer": ..., "builds":
    [vocabulary size of each model built]})`.

    No test split, export or monitoring: only the training the options change.
    """
    used = {}
    build_model = workflow.build_model

    def recording_build_model(*args, **kwargs):
        used["model"] = build_model(*args, **kwargs)
        used.setdefault("builds", []).append(used["model"].zoo_config["vocabulary_size"])
        return used["model"]

    class RecordingTrainer(workflow.Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            used["trainer"] = self

    monkeypatch.setattr(workflow, "build_model", recording_build_model)
    monkeypatch.setattr(workflow, "Trainer", RecordingTrainer)
    source, target = train_files
    args = RECIPE.parse_args([
        "--model", model, "--preset", "tiny", "--model-options", options,
        "--data", "files", "--train-src", str(source), "--train-tgt", str(target),
        "--max-steps", str(steps), "--vocab-size", "100", "--batch-tokens", "300",
        "--checkpoint-every", "0", "--output-dir", str(tmp_path / "run"),
        "--no-export", "--no-monitoring", "--quiet", *flags])
    return RECIPE.training_run(args), used


# ---- bahdanau_rnn: the teacher-forcing schedule ----------------------------------------------


def test_teacher_forcing_decay_decays_during_the_run(train_files, tmp_path, monkeypatch):
    decay = '{"schedule": "linear", "final": 0.5, "steps": 4}'
    # One step: a second one only retraces the training step for its batch shape
    # (~4 s) and the schedule is as much in effect after one.
    results, used = run_recipe(train_files, tmp_path, monkeypatch, "bahdanau_rnn",
                               f"teacher_forcing_decay={decay}", steps=1)
    assert results["steps"] == 1
    # p(1) on the linear schedule from 1.0 to 0.5 over 4 steps.
    assert used["model"].teacher_forcing_ratio == pytest.approx(0.875)


def test_a_constant_teacher_forcing_ratio_needs_no_schedule():
    from keras_attn_zoo.models import bahdanau_rnn

    assert bahdanau_rnn(50, preset="tiny", teacher_forcing_ratio=0.7).training_callbacks() == []
    assert bahdanau_rnn(50, preset="tiny").training_callbacks() == []


# ---- weighted_transformer: κ/α on the simplex, their own warm-up -----------------------------


def test_weighted_branch_weight_warmup_trains_kappa_alpha_on_their_schedule(
        train_files, tmp_path, monkeypatch):
    from keras_attn_zoo.models.weighted_transformer import weighted_branch_weights
    from keras_attn_zoo.training.simplex import BranchWeightAdam

    steps, heads = 3, 4
    # max_length=20 too: this run is also the Transformer family's case of
    # test_model_max_length_bounds_the_training_pairs (a run of its own cost ~20 s).
    results, used = run_recipe(
        train_files, tmp_path, monkeypatch, "weighted_transformer",
        f'num_heads={heads};branch_weight_warmup_steps=1;max_length=20',
        steps=steps)
    assert results["steps"] == steps
    assert used["model"].zoo_config["max_length"] == 20
    assert 0 < results["pairs_dropped_too_long"] < 120
    optimizer = used["trainer"].optimizer
    assert isinstance(optimizer, BranchWeightAdam)
    assert optimizer.branch_weight_learning_rate.warmup_steps == 1
    weights = weighted_branch_weights(used["model"])
    assert weights
    moved = 0.0
    for layer in weights.values():
        for name in ("kappa", "alpha"):
            values = np.asarray(layer[name])
            assert values.min() >= 0.0 and values.sum() == pytest.approx(1.0, abs=1e-5)
            moved = max(moved, float(np.abs(values - 1.0 / heads).max()))
    # Adam moves a weight by about its learning rate per step. The main
    # schedule (tiny: peak 2e-3, warm-up 100) sums to 1.2e-4 over 3 steps, the
    # κ/α schedule with a 1-step warm-up to ~0.04 (measured: κ/α moved at most
    # 1.8e-4 from uniform without the option, 0.068 with it).
    peak, warmup = RECIPE.SCHEDULE_DEFAULTS["tiny"]
    main = InverseSquareRootSchedule(peak, warmup)
    assert sum(float(main(step)) for step in range(steps)) < 2e-4
    assert moved > 5e-3


@pytest.mark.parametrize("model", TRANSFORMER_FAMILY)
def test_branch_weight_warmup_without_branches_is_refused(
        model, train_files, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="branch_weight_warmup_steps"):
        run_recipe(train_files, tmp_path, monkeypatch, model,
                   'attention_options={"branch_weight_warmup_steps": 400}', steps=1)


# ---- every Transformer variant: the model's max_length bounds the training pairs ------------


# The limit is read from `zoo_config["max_length"]` whatever the builder, so two
# builders stand for all: RAN (a fixed-size table, as the synthesizer: the run
# would stop at the first longer batch) and a Transformer (it would train on
# lengths it then refuses to translate, as GMM, HC-SA and RNNsearch would): the
# Weighted Transformer's run above, with the same max_length=20 and checks.
@pytest.mark.parametrize("model", ["ran_transformer"])
def test_model_max_length_bounds_the_training_pairs(model, train_files, tmp_path,
                                                    monkeypatch):
    # One step (a second only retraces the training step for its batch shape).
    results, used = run_recipe(train_files, tmp_path, monkeypatch, model, "max_length=20",
                               steps=1)
    assert used["model"].zoo_config["max_length"] == 20
    assert results["steps"] == 1
    # About half of these pairs are longer than 20 pieces (vocabulary 100).
    assert 0 < results["pairs_dropped_too_long"] < 120


def test_a_model_max_length_that_leaves_no_pair_is_refused(train_files, tmp_path,
                                                           monkeypatch):
    with pytest.raises(SystemExit, match="max_length"):
        run_recipe(train_files, tmp_path, monkeypatch, "ran_transformer", "max_length=4")


# ---- eager_translator: its start pads and special ids shape the data -------------------------


def test_eager_start_pads_shape_the_targets_and_the_model_is_built_once_with_its_ids(
        train_files, tmp_path, monkeypatch):
    """Two checks on one eager run (a run each cost ~12 s): the start pads reach
    the training targets, and the model is built once, for the tokenizer's
    pieces and the ids it adds."""
    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.data.vocabulary import vocabulary_size
    from keras_attn_zoo.models import extra_token_count
    from keras_attn_zoo.models.eager import preprocessing as eager

    assert extra_token_count("eager_translator") == 3
    assert extra_token_count("transformer") == 0
    with pytest.raises(ValueError, match="Unknown model"):
        extra_token_count("no_such_model")

    seen = []
    make_eager_dataset = eager.make_eager_dataset

    def recording(id_pairs, *args, **kwargs):
        seen.append(id_pairs)
        return make_eager_dataset(id_pairs, *args, **kwargs)

    monkeypatch.setattr(eager, "make_eager_dataset", recording)
    results, used = run_recipe(train_files, tmp_path, monkeypatch, "eager_translator",
                               "start_pads=2", steps=1)
    assert results["steps"] == 1
    start = used["model"].special_ids.start_id
    targets = [target for _, target in seen[0]]
    assert targets and all(list(t[:2]) == [start, start] and t[2] != start for t in targets)

    pieces = vocabulary_size(load_tokenizer(tmp_path / "run" / "vocab.model"))
    # One build, for the tokenizer's pieces and the start, ε and source-pad ids.
    assert used["builds"] == [pieces + 3]
    assert used["model"].extra_token_count == 3


def test_eager_special_id_on_a_vocabulary_piece_is_refused(train_files, tmp_path,
                                                           monkeypatch):
    with pytest.raises(SystemExit, match="epsilon_id"):
        run_recipe(train_files, tmp_path, monkeypatch, "eager_translator", "epsilon_id=5",
                   steps=1)


def test_eager_aligned_batching_is_refused_for_other_models(train_files, tmp_path,
                                                            monkeypatch):
    with pytest.raises(SystemExit, match="--eager-aligned-batching"):
        run_recipe(train_files, tmp_path, monkeypatch, "transformer", steps=1,
                   flags=["--eager-aligned-batching"])


@pytest.mark.parametrize("value, message", [
    ("valid", "eager_translator only"), ("-1", "model, valid or a number")])
def test_source_padding_injection_is_refused_where_it_cannot_act(value, message):
    config = RECIPE.parse_args(["--source-padding-injection", value, "--max-steps", "1"])
    with pytest.raises(SystemExit, match=message):
        workflow.check_run_options(config)


def test_sentence_repeats_weigh_the_example_sentences_against_the_phrases(tmp_path,
                                                                         monkeypatch):
    from keras_attn_zoo.data import ding
    lines = [f"Wort{n} {{n}} | Hier steht der Satz Nummer {n}. :: "
             f"word{n} | Here is the sentence number {n}." for n in range(60)]
    path = tmp_path / "de-en.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv(ding.DING_ENV_VAR, str(path))

    def train_pairs(*flags):
        config = RECIPE.parse_args(["--data", "ding:all", "--max-steps", "1", *flags])
        workflow.check_run_options(config)
        return workflow.load_corpus(config).train

    once, thrice = train_pairs(), train_pairs("--sentence-repeats", "3")
    sentences = set(ding.ding_corpus("train", "sentences", path=path))
    assert sentences and set(once) - sentences  # both kinds are in the training split
    assert sorted(once) == sorted(set(once))
    for pair in once:
        assert thrice.count(pair) == (3 if pair in sentences else 1)
    # The copies are spread through the list, not appended, and the order is seeded.
    assert thrice[len(once):] != [pair for pair in once if pair in sentences] * 2
    assert thrice == train_pairs("--sentence-repeats", "3")
    assert thrice != train_pairs("--sentence-repeats", "3", "--seed", "1")


@pytest.mark.parametrize("flags, message", [
    (["--sentence-repeats", "0"], ">= 1"),
    (["--data", "ding", "--sentence-repeats", "2"], "--data ding has no phrases")])
def test_sentence_repeats_out_of_range_or_without_phrases_are_refused(flags, message):
    config = RECIPE.parse_args([*flags, "--max-steps", "1"])
    with pytest.raises(SystemExit, match=message):
        workflow.check_run_options(config)


# ---- mixed precision: auto is decided by the hardware, and recorded as decided -------------------


def test_mixed_precision_auto_trains_in_bf16_where_the_cpu_multiplies_it_natively(
        train_files, tmp_path, monkeypatch):
    import json

    import keras

    from keras_attn_zoo import runtime

    expected = "bf16" if runtime.cpu_has_native_bf16() else "none"
    try:
        results, used = run_recipe(train_files, tmp_path, monkeypatch, "transformer",
                                   steps=1, flags=["--mixed-precision", "auto"])
        compute_dtype = used["model"].dtype_policy.compute_dtype
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert compute_dtype == ("bfloat16" if expected == "bf16" else "float32")
    # The results and the resume check see the precision the run trained in.
    assert results["mixed_precision"] == expected
    identity = json.loads((tmp_path / "run" / workflow.RUN_IDENTITY_FILE).read_text())
    assert identity["mixed_precision"] == expected


def test_an_unknown_mixed_precision_is_refused_with_the_choices():
    config = workflow.RunConfig(mixed_precision="bfloat16")
    with pytest.raises(SystemExit, match="--mixed-precision must be one of .*auto"):
        workflow.check_run_options(config)

"""Training: the loss, the schedule, the loop, distribution and resuming."""

import json
import math
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.models import transformer
from keras_attn_zoo.training import InverseSquareRootSchedule
from keras_attn_zoo.training import LabelSmoothedCrossEntropy
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training import token_loss_sum
from keras_attn_zoo.training.curve import logged_training_loss
from keras_attn_zoo.training.seeding import seed_everything
from keras_attn_zoo.optimizers import Adam

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_label_smoothing_zero_is_sparse_cross_entropy_over_real_tokens():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 7)).astype("float32")
    labels = np.array([[4, 5, 6, 0], [3, 0, 0, 0]], "int32")
    total, count, _ = token_loss_sum(labels, logits, label_smoothing=0.0)
    expected = keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True
    ).numpy()[labels != 0]
    assert float(count) == 4
    np.testing.assert_allclose(float(total), expected.sum(), rtol=1e-5)


def test_label_smoothed_loss_and_its_gradient_match_the_log_softmax_definition():
    """The fused form equals sum over real tokens of (1-e)(-log p_y) + e mean_v(-log p_v)."""
    rng = np.random.default_rng(2)
    logits = tf.constant(rng.normal(scale=3.0, size=(2, 5, 11)), tf.float32)
    labels = np.array([[4, 5, 6, 10, 0], [3, 7, 0, 0, 0]], "int32")
    mask = (labels != 0)[..., None].astype("float32")

    def reference(logits):
        log_probs = tf.nn.log_softmax(logits)
        nll = -tf.gather(log_probs, labels, batch_dims=2)
        per_token = 0.8 * nll - 0.2 * tf.reduce_mean(log_probs, -1)
        return tf.reduce_sum(per_token * mask[..., 0])

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        total, count, correct = token_loss_sum(labels, logits, label_smoothing=0.2)
        expected = reference(logits)
    np.testing.assert_allclose(float(total), float(expected), rtol=1e-5)
    np.testing.assert_allclose(tape.gradient(total, logits).numpy(),
                               tape.gradient(expected, logits).numpy(), atol=1e-5)
    assert float(count) == 6
    assert float(correct) == float(np.sum((np.argmax(logits, -1) == labels) & (labels != 0)))


def test_padding_positions_do_not_change_the_loss():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(1, 3, 7)).astype("float32")
    labels = np.array([[4, 5, 3]], "int32")
    loss = LabelSmoothedCrossEntropy(0.1)
    padded_logits = np.concatenate([logits, rng.normal(size=(1, 2, 7))], 1).astype("float32")
    padded_labels = np.pad(labels, [[0, 0], [0, 2]])
    np.testing.assert_allclose(
        float(loss(labels, logits)), float(loss(padded_labels, padded_logits)), rtol=1e-6
    )


def test_inverse_square_root_schedule_warms_up_then_decays():
    schedule = InverseSquareRootSchedule(peak_learning_rate=1e-3, warmup_steps=100)
    rates = [float(schedule(step)) for step in (0, 49, 99, 399)]
    assert rates[0] == pytest.approx(1e-5, rel=1e-5)
    assert rates[1] == pytest.approx(5e-4, rel=1e-5)
    assert rates[2] == pytest.approx(1e-3, rel=1e-5)
    assert rates[3] == pytest.approx(5e-4, rel=1e-5)  # sqrt(100 / 400) of the peak


@pytest.fixture(scope="module")
def ding_sample(tmp_path_factory):
    """Real Ding sentences and a small SentencePiece model trained on them."""
    # Seed first: tf.random.set_seed clears TF's kernel cache, which drops the
    # SentencePiece resource of any tokenizer created before it.
    seed_everything(0)
    pairs = zoo_data.ding_corpus("train", "sentences")[:3000]
    path = tmp_path_factory.mktemp("ding") / "vocab.model"
    zoo_data.train_sentencepiece(pairs, path, vocab_size=1000)
    return pairs, zoo_data.load_tokenizer(path)


def test_training_on_real_ding_lowers_the_loss(ding_sample, tmp_path):
    pairs, tokenizer = ding_sample
    model = transformer(zoo_data.vocabulary_size(tokenizer), preset="tiny")
    trainer = Trainer(model, Adam(3e-3), log_dir=str(tmp_path / "logs"),
                      log_every=5)
    losses = []

    class Record:
        def on_step_end(self, trainer, step, logs):
            losses.append(logs["loss"])

    trainer.callbacks.append(Record())
    dataset, _ = zoo_data.make_dataset(pairs, tokenizer, batch_tokens=1500, max_length=64)
    trainer.train(lambda epoch: dataset, max_steps=40, verbose=0)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
    # Bucketed batches of several shapes, one shape-generic trace of the graph step.
    assert len({tuple(labels.shape) for _, labels in dataset.take(40)}) > 1
    assert trainer.compiled_shapes == 1
    # TensorBoard got the scalars.
    events = list((tmp_path / "logs").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    tags = {
        value.tag
        for record in tf.compat.v1.train.summary_iterator(str(events[0]))
        for value in record.summary.value
    }
    assert {"loss", "learning_rate", "target_tokens_per_second"} <= tags
    # The logged batches' losses read back, those of steps 5, 10, ..., 40.
    assert logged_training_loss(tmp_path / "logs") == [
        [step, pytest.approx(losses[step - 1], abs=1e-4)] for step in range(5, 41, 5)]


def test_a_run_resumed_with_its_time_budget_spent_trains_no_step(ding_sample, tmp_path):
    """A run stopped by its wall-time cap, resumed under the same cap (nothing
    left: `remaining_cap_minutes` 0), keeps its checkpoint's weights and step."""
    pairs, tokenizer = ding_sample
    dataset, _ = zoo_data.make_dataset(pairs, tokenizer, batch_tokens=1500, max_length=64)

    def run(budget_seconds, max_steps=None):
        seed_everything(0)
        model = transformer(zoo_data.vocabulary_size(tokenizer), preset="tiny")
        trainer = Trainer(model, Adam(3e-3), checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=0)
        summary = trainer.train(lambda epoch: dataset, max_steps=max_steps,
                                time_budget_seconds=budget_seconds, verbose=0)
        return summary, [w.numpy() for w in model.weights]

    first, trained = run(None, max_steps=3)  # saved at its stop
    resumed, weights = run(0.0)
    assert (resumed.steps, resumed.resumed_from_step) == (first.steps, first.steps) == (3, 3)
    assert resumed.stop_reason == "time_budget" and resumed.final_loss is None
    for before, after in zip(trained, weights, strict=True):
        np.testing.assert_array_equal(before, after)


def test_a_resumed_runs_logged_losses_replace_the_abandoned_ones(tmp_path):
    """A run killed after step 150 and resumed from its checkpoint at step 100
    logs steps 150 and 200 again in a new event file: those replace the first
    file's from step 150 on, whatever order the files were listed in."""
    def write(directory, points):
        writer = tf.summary.create_file_writer(str(directory))
        with writer.as_default():
            for step, loss in points:
                tf.summary.scalar("loss", loss, step=step)
                tf.summary.scalar("learning_rate", 1e-3, step=step)
        writer.close()
        return next(directory.glob("events.out.tfevents.*"))

    logs = tmp_path / "logs"
    logs.mkdir()
    first = write(tmp_path / "first", [(50, 5.0), (100, 4.0), (150, 3.5), (200, 3.0)])
    second = write(tmp_path / "second", [(150, 3.6), (200, 3.2)])
    # Start times in the names (seconds; compared as numbers, not as text): the
    # resumed session's file is the later.
    first.rename(logs / "events.out.tfevents.99999.host.example.7.v2")
    second.rename(logs / "events.out.tfevents.100000.host.example.8.v2")
    assert logged_training_loss(logs) == [[50, 5.0], [100, 4.0], [150, 3.6], [200, 3.2]]
    assert logged_training_loss(tmp_path / "no-logs") == []
    # Killed while writing: the cut last record (step 200's learning rate) is lost,
    # the records before it are read (TensorFlow reports DATA_LOSS on the cut).
    cut = logs / "events.out.tfevents.100000.host.example.8.v2"
    cut.write_bytes(cut.read_bytes()[:-5])
    assert logged_training_loss(logs) == [[50, 5.0], [100, 4.0], [150, 3.6], [200, 3.2]]


def test_a_nan_loss_stops_the_run_naming_the_step(ding_sample, tmp_path):
    pairs, tokenizer = ding_sample
    dataset, _ = zoo_data.make_dataset(pairs[:200], tokenizer, batch_tokens=800, max_length=64)
    model = transformer(zoo_data.vocabulary_size(tokenizer), preset="tiny")
    weight = model.embedding.embeddings
    weight.assign(np.full(weight.shape, np.nan, "float32"))
    trainer = Trainer(model, Adam(1e-3), checkpoint_dir=str(tmp_path / "c"))
    with pytest.raises(FloatingPointError, match="at step 1"):
        trainer.train(lambda epoch: dataset, max_steps=3, verbose=0)
    assert not list((tmp_path / "c").glob("ckpt-*")), "a NaN model was checkpointed"


def test_epoch_datasets_keep_their_batches_without_the_autotune_thread(ding_sample):
    # tf.data's autotune thread made the end of every epoch wait up to 60 s with the
    # CPU idle (`data.pipeline.without_autotune_thread`): the trainer switches it off.
    pairs, tokenizer = ding_sample
    dataset, _ = zoo_data.make_dataset(pairs[:200], tokenizer, batch_tokens=800,
                                       max_length=64, shuffle=False)
    assert dataset.options().autotune.enabled is not False
    model = transformer(zoo_data.vocabulary_size(tokenizer), preset="tiny")
    trainer = Trainer(model, Adam(1e-3))
    trainer.batches_in_epoch.assign(2)  # a resumed epoch: two batches trained on
    epoch = trainer.epoch_dataset(lambda number: dataset, 0)
    assert epoch.options().autotune.enabled is False
    expected = list(dataset.as_numpy_iterator())[2:]
    batches = list(epoch.as_numpy_iterator())
    assert len(batches) == len(expected) > 0
    for (features, labels), (want_features, want_labels) in zip(batches, expected):
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(features["source_ids"], want_features["source_ids"])


def test_mirrored_strategy_first_step_equals_single_device():
    """Two logical CPU replicas compute the single-device loss and update."""
    # The XLA step compiles at -O0 (conftest.py's XLA_FLAGS, inherited): its
    # losses still agree to 1e-6 (the compiled maths is the same).
    out = subprocess.run(
        [sys.executable, str(REPO / "tests" / "distributed_first_step.py")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2
    assert result["mirrored"]["tokens"] == result["single"]["tokens"]
    assert math.isclose(result["mirrored"]["loss"], result["single"]["loss"], rel_tol=1e-5)
    assert result["max_weight_diff"] < 1e-5

"""TensorBoard monitoring: a short training run writes the promised tags.

One tiny GMM Transformer trains a few steps with `default_callbacks` (every 2 steps);
the event files are read back with TensorBoard's EventAccumulator and each tag's
plugin (scalars, images, histograms, text) is checked. The Weighted Transformer's κ/α
and RAN's matrices are checked by calling their monitors directly (no training).
"""

import types

import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.data.vocabulary import vocabulary_size
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training.callbacks import AttentionMonitor
from keras_attn_zoo.training.callbacks import DevTranslationMonitor
from keras_attn_zoo.training.callbacks import WeightMonitor
from keras_attn_zoo.training.callbacks import _Monitor
from keras_attn_zoo.training.callbacks import default_callbacks
from keras_attn_zoo.training.callbacks import translation_table
from keras_attn_zoo.optimizers import Adam


def read_tags(log_dir):
    """`{tag: plugin name}` of every summary in the event files under `log_dir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {tag: accumulator.SummaryMetadata(tag).plugin_data.plugin_name
            for tag in accumulator.Tags()["tensors"]}, accumulator


def fake_trainer(log_dir, chief=True):
    return types.SimpleNamespace(
        writer=tf.summary.create_file_writer(str(log_dir)) if chief
        else tf.summary.create_noop_writer(),
        is_chief=chief, log_every=1)


def test_training_run_writes_scalar_image_histogram_and_text_tags(
        tiny_parallel_corpus, tiny_sentencepiece_model, tmp_path):
    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.models.gmm_transformer import gmm_transformer

    # A tokenizer of its own: an earlier test on this worker may have reseeded
    # TensorFlow, which destroys the session tokenizer's SentencePiece resource.
    tiny_tokenizer = load_tokenizer(tiny_sentencepiece_model)

    model = gmm_transformer(vocabulary_size(tiny_tokenizer), preset="tiny")
    valid = tiny_parallel_corpus[-6:]
    callbacks = default_callbacks(model, tiny_tokenizer, valid, every=2, bleu_sentences=4,
                                  num_examples=2, beam_size=2, raise_errors=True,
                                  max_time_share=None)  # exact cadence: every 2 steps
    trainer = Trainer(model, Adam(1e-3), log_dir=str(tmp_path / "logs"),
                      log_every=2, checkpoint_every=0, callbacks=callbacks)

    def make_epoch(epoch):
        dataset, _ = zoo_data.make_dataset(tiny_parallel_corpus[:200], tiny_tokenizer,
                                           batch_tokens=400, seed=epoch)
        return dataset

    trainer.train(make_epoch, max_steps=4, verbose=0)
    tags, accumulator = read_tags(tmp_path / "logs")
    expected = {
        "loss": "scalars", "perplexity": "scalars", "token_accuracy": "scalars",
        "learning_rate": "scalars", "target_tokens_per_second": "scalars",
        "dev/bleu": "scalars", "dev/chrf": "scalars", "gmm/gate_mean/layer_0": "scalars",
        "dev/eval_seconds": "scalars", "dev/time_share": "scalars",
        "dev/translations": "text",
        "attention/cross/sentence_0": "images", "attention/cross/sentence_2": "images",
        "gmm/gate/layer_0": "histograms",
    }
    for tag, plugin in expected.items():
        assert tags.get(tag) == plugin, (tag, tags)
    # Refreshed every 2 steps: written at steps 2 and 4.
    assert [event.step for event in accumulator.Tensors("dev/bleu")] == [2, 4]
    assert [e.step for e in accumulator.Tensors("attention/cross/sentence_0")] == [2, 4]
    image = accumulator.Tensors("attention/cross/sentence_0")[-1].tensor_proto
    width, height, png = tf.make_ndarray(image)
    assert int(width) > 50 and int(height) > 50 and png.startswith(b"\x89PNG")
    text = tf.make_ndarray(accumulator.Tensors("dev/translations")[-1].tensor_proto)
    assert b"| source | reference | translation |" in text.item()
    assert valid[0][1].encode() in text.item()
    gates = accumulator.Tensors("gmm/gate/layer_0")[-1]
    assert tf.make_ndarray(gates.tensor_proto).shape[1] == 3  # histogram buckets


def test_weighted_transformer_kappa_alpha_histograms_and_scalars(tmp_path):
    from keras_attn_zoo.models.weighted_transformer import weighted_branch_weights
    from keras_attn_zoo.models.weighted_transformer import weighted_transformer

    model = weighted_transformer(50, preset="tiny")
    callbacks = default_callbacks(model, b"unused", [], every=2)
    monitors = [c for c in callbacks if isinstance(c, WeightMonitor)]
    assert len(monitors) == 1  # and no dev monitor without dev pairs
    assert not any(isinstance(c, DevTranslationMonitor) for c in callbacks)
    trainer = fake_trainer(tmp_path / "logs")
    for step in (1, 2, 3):
        monitors[0].on_step_end(trainer, step, {})
    trainer.writer.flush()
    tags, accumulator = read_tags(tmp_path / "logs")
    weights = weighted_branch_weights(model)
    assert weights
    for layer, values in weights.items():
        for name in ("kappa", "alpha"):
            assert tags[f"weighted/{layer}/{name}"] == "histograms"
            for index, value in enumerate(values[name]):
                tag = f"weighted/{layer}/{name}_{index}"
                assert tags[tag] == "scalars"
                events = accumulator.Tensors(tag)
                assert [e.step for e in events] == [1, 2, 3]  # every log_every step
                assert float(tf.make_ndarray(events[-1].tensor_proto)) == pytest.approx(value)


def test_ran_matrices_image_and_chief_only(tmp_path, tiny_tokenizer, tiny_parallel_corpus):
    from keras_attn_zoo.models.ran_transformer import ran_transformer

    model = ran_transformer(vocabulary_size(tiny_tokenizer), preset="tiny", apply_to="all",
                            max_length=40)
    monitor = AttentionMonitor(model, tiny_tokenizer, tiny_parallel_corpus[:2], every=1,
                               raise_errors=True)
    worker = fake_trainer(tmp_path / "worker")
    worker.is_chief = False  # a real writer, to show the monitor itself stays silent
    monitor.on_step_end(worker, 1, {})
    worker.writer.flush()
    assert read_tags(tmp_path / "worker")[0] == {}
    trainer = fake_trainer(tmp_path / "logs")
    monitor.on_step_end(trainer, 1, {})
    tags, _ = read_tags(tmp_path / "logs")
    assert tags["attention/ran/encoder_self"] == "images"
    assert tags["attention/ran/decoder_self"] == "images"
    assert tags["attention/cross/sentence_1"] == "images"


def test_the_input_independent_attention_is_drawn_at_image_positions(tmp_path,
                                                                     tiny_tokenizer,
                                                                     monkeypatch):
    from keras_attn_zoo.models import attention_kinds
    from keras_attn_zoo.models.ran_transformer import ran_transformer

    model = ran_transformer(vocabulary_size(tiny_tokenizer), preset="tiny",
                            apply_to="encoder", max_length=40)
    drawn = []
    original = attention_kinds.attention_images

    def spy(model, size):
        images = original(model, size)
        drawn.extend(weights.shape[-2:] for weights, _ in images.values())
        return images

    monkeypatch.setattr(attention_kinds, "attention_images", spy)
    monitor = AttentionMonitor(model, tiny_tokenizer, [], every=1, image_positions=7,
                               raise_errors=True)
    monitor.on_step_end(fake_trainer(tmp_path / "logs"), 1, {})
    assert drawn == [(7, 7)]
    # The former, mechanism-named keyword still works, with a warning.
    with pytest.warns(DeprecationWarning, match="image_positions"):
        former = AttentionMonitor(model, tiny_tokenizer, [], every=1, ran_size=5)
    assert former.image_positions == 5


def test_a_failing_monitor_switches_itself_off(tmp_path, tiny_sentencepiece_model,
                                               tiny_parallel_corpus):
    class Broken:
        max_decode_length = None  # no length limit

        def attention_maps(self, source_ids, target_ids):
            raise RuntimeError("no weights today")

    pairs = tiny_parallel_corpus[:2]
    monitor = AttentionMonitor(Broken(), str(tiny_sentencepiece_model), pairs, every=1,
                               max_pieces=1000)
    assert len(monitor.pairs) == 2
    with pytest.warns(UserWarning, match="switched off.*no weights today"):
        monitor.on_step_end(fake_trainer(tmp_path / "logs"), 1, {})
    assert not monitor.enabled
    monitor.on_step_end(fake_trainer(tmp_path / "logs"), 2, {})  # silently skipped
    strict = AttentionMonitor(Broken(), str(tiny_sentencepiece_model), pairs, every=1,
                              max_pieces=1000, raise_errors=True)
    with pytest.raises(RuntimeError, match="no weights today"):
        strict.on_step_end(fake_trainer(tmp_path / "logs"), 1, {})


def test_translation_table_escapes_pipes():
    table = translation_table(["a | b"], ["c"], ["d\ne"])
    assert "a \\| b" in table and "d e" in table
    assert table.count("\n") == 2


# ---- the monitors' share of the wall time ---------------------------------------------------


def test_dev_monitor_keeps_under_its_time_share_in_a_real_run(tiny_parallel_corpus,
                                                              tiny_sentencepiece_model,
                                                              tmp_path):
    """`every=1` on a tiny Transformer trained eagerly (no step to trace): a beam search
    over dev sentences costs far more than a step, so the monitor postpones; by its own
    measurements its seconds stay within 5% of the time between evaluations, plus the
    last evaluation."""
    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.training.losses import token_loss_sum

    tokenizer = load_tokenizer(tiny_sentencepiece_model)
    model = build_model("transformer", vocabulary_size(tokenizer), preset="tiny")
    optimizer = Adam(1e-3)
    share, steps = 0.05, 5
    monitor = DevTranslationMonitor(model, tokenizer, tiny_parallel_corpus[-4:], every=1,
                                    max_sentences=4, beam_size=2, raise_errors=True,
                                    max_time_share=share)
    trainer = fake_trainer(tmp_path / "logs")
    dataset, _ = zoo_data.make_dataset(tiny_parallel_corpus[:200], tokenizer,
                                       batch_tokens=100, max_length=32, seed=0)
    seen = []
    for step, (inputs, labels) in enumerate(dataset.repeat().take(steps), start=1):
        with tf.GradientTape() as tape:
            loss, tokens, _ = token_loss_sum(labels, model(inputs, training=True))
            loss = loss / tokens
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        logs = {"loss": float(loss)}
        monitor.on_step_end(trainer, step, logs)
        seen.append(logs)

    timings = monitor.timings
    assert timings[0]["step"] == 1  # the first due step is evaluated: the cost is learnt
    assert 2 in monitor.skipped  # one tiny step is not 20 beam searches
    assert len(timings) + len(monitor.skipped) == steps
    assert [step for step, _, _ in monitor.history] == [t["step"] for t in timings]
    # Each evaluation waited cost / share after the previous one ended ...
    for previous, current in zip(timings, timings[1:]):
        started = current["elapsed_seconds"] - current["seconds"]
        assert started - previous["elapsed_seconds"] >= previous["seconds"] / share
    # ... so the total is within the share of the elapsed time plus one evaluation.
    elapsed = timings[-1]["elapsed_seconds"]
    assert monitor.seconds_spent <= share * elapsed + max(t["seconds"] for t in timings)
    assert seen[0]["dev_eval_seconds"] == timings[0]["seconds"]
    assert seen[0]["dev_evals_skipped"] == 0 and "dev_eval_seconds" not in seen[1]


class _CostlyMonitor(_Monitor):
    """Evaluations of 1 s on a fake clock (steps take 1/8 s: exact in binary)."""

    def __init__(self, clock, **options):
        super().__init__(**options)
        self.clock = clock

    def _write(self, trainer, step, logs):
        self.clock[0] += 1.0


@pytest.mark.parametrize("share, expected", [
    (None, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    (0.25, [1, 33, 65, 97]),  # 4 s of steps (32 of them) after each 1-s evaluation
    (1.0, [1, 9, 17, 25, 33, 41, 49, 57, 65, 73]),
])
def test_postponed_evaluations_follow_the_measured_cost(monkeypatch, tmp_path, share,
                                                        expected):
    from keras_attn_zoo.training import callbacks as module

    clock = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    monitor = _CostlyMonitor(clock, every=1, max_time_share=share)
    trainer = fake_trainer(tmp_path / "logs")
    for step in range(1, 101):
        clock[0] += 0.125
        monitor.on_step_end(trainer, step, {})
    assert [t["step"] for t in monitor.timings][:10] == expected
    assert all(t["seconds"] == pytest.approx(1.0) for t in monitor.timings)
    assert len(monitor.skipped) == 100 - len(monitor.timings)
    if share is not None:
        assert monitor.seconds_spent <= share * clock[0] + 1.0


def test_time_share_out_of_range_is_refused():
    with pytest.raises(ValueError, match="max_time_share"):
        _CostlyMonitor([0.0], every=1, max_time_share=0.0)

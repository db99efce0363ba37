"""TensorBoard monitoring: a short training run writes the promised tags.

One tiny GMM Transformer trains a few steps with `default_callbacks` (every 2 steps);
the event files are read back with TensorBoard's EventAccumulator and each tag's
plugin (scalars, images, histograms, text) is checked. The Weighted Transformer's κ/α
and RAN's matrices are checked by calling their monitors directly (no training).
"""

import types

import keras
import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.data.vocabulary import vocabulary_size
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training.callbacks import AttentionMonitor
from keras_attn_zoo.training.callbacks import BranchWeightMonitor
from keras_attn_zoo.training.callbacks import DevTranslationMonitor
from keras_attn_zoo.training.callbacks import default_callbacks
from keras_attn_zoo.training.callbacks import translation_table


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
                                  num_examples=2, beam_size=2, raise_errors=True)
    trainer = Trainer(model, keras.optimizers.Adam(1e-3), log_dir=str(tmp_path / "logs"),
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
    monitors = [c for c in callbacks if isinstance(c, BranchWeightMonitor)]
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


def test_a_failing_monitor_switches_itself_off(tmp_path, tiny_sentencepiece_model,
                                               tiny_parallel_corpus):
    class Broken:
        zoo_config = {}

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

"""The XLA-compiled training step and the fixed-shape batches it needs.

Fixed-shape data has a bounded set of shapes (one per bucket), and the step
compiles once per shape however many steps run.

Under `MirroredStrategy` and multi-worker the compiled step is checked by
tests/distributed_first_step.py and tests/multi_worker_train.py, and a kill
and restart of the recipe with `--xla on` by tests/test_crash_safety.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.data import pipeline
from keras_attn_zoo.data.vocabulary import PAD_ID
from keras_attn_zoo.models import transformer
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training.seeding import seed_everything
from keras_attn_zoo.optimizers import Adam

BATCH_TOKENS = 160


def fixed_batches(pairs, tokenizer, seed=0):
    dataset, stats = pipeline.make_dataset(pairs, tokenizer, batch_tokens=BATCH_TOKENS,
                                           max_length=40, seed=seed, fixed_shapes=True)
    return dataset, stats


def test_fixed_shape_batches_have_one_shape_per_bucket_and_keep_every_pair_once(
        tiny_tokenizer, tiny_parallel_corpus):
    dataset, stats = fixed_batches(tiny_parallel_corpus, tiny_tokenizer)
    boundaries, sizes = pipeline.bucket_layout(40, BATCH_TOKENS, fixed_shapes=True)
    shape_of_length = {boundary - 1: (size, boundary - 1)
                       for boundary, size in zip(boundaries, sizes)}
    seen, label_tokens = [], 0
    for features, labels in dataset.as_numpy_iterator():
        length = labels.shape[1]
        assert labels.shape == features["source_ids"].shape == features["target_ids"].shape
        assert labels.shape == shape_of_length[length]
        real = labels.any(axis=1)  # filler rows have all-padding labels
        label_tokens += int((labels != PAD_ID).sum())
        sources = tiny_tokenizer.detokenize(tf.constant(features["source_ids"][real]))
        targets = tiny_tokenizer.detokenize(tf.constant(labels[real]))
        seen.extend(zip(sources, targets))
    assert label_tokens == stats.target_tokens
    assert stats.kept == len(tiny_parallel_corpus)
    assert sorted(seen) == sorted(tiny_parallel_corpus)
    assert len(boundaries) <= 10  # coarse: 8, 12, ..., 40


def tiny_model(weights=None):
    seed_everything(0)
    model = transformer(tiny_vocabulary_size(), preset="tiny")
    if weights is not None:
        model.set_weights(weights)
    return model


def tiny_vocabulary_size():
    return 64


def random_batch(rows=6, length=12, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, 64, (rows, length)).astype("int32")
    target = rng.integers(4, 64, (rows, length)).astype("int32")
    for row in range(rows):
        source[row, rng.integers(3, length):] = 0
        target[row, rng.integers(3, length):] = 0
    labels = np.roll(target, -1, axis=1)
    labels[target == 0] = 0
    return {"source_ids": source, "target_ids": target}, labels


class LossLog:
    """Records each step's loss (a Trainer callback)."""

    def __init__(self):
        self.losses = []

    def on_step_end(self, trainer, step, logs):
        self.losses.append(logs["loss"])


def test_compiled_step_equals_the_graph_step_and_resumes_exactly(tmp_path):
    """Same weights, same batches: the compiled run's losses equal the graph run's
    (1e-5); killed after step 3 (checkpoints at 2 and 3) and resumed to 4, it ends
    with the weights of the unbroken graph-mode run."""
    inputs, labels = random_batch(rows=16, seed=0)
    make = lambda epoch: tf.data.Dataset.from_tensor_slices(  # noqa: E731
        (inputs, labels)).batch(4)
    weights = tiny_model().get_weights()

    def run(directory, max_steps, jit_compile=True):
        model, log = tiny_model(weights), LossLog()
        trainer = Trainer(model, Adam(1e-3), jit_compile=jit_compile,
                          checkpoint_dir=str(directory), checkpoint_every=2, callbacks=[log])
        summary = trainer.train(make, max_steps=max_steps, verbose=0)
        return model, log.losses, summary, trainer.compiled_shapes

    unbroken, graph_losses, _, _ = run(tmp_path / "unbroken", 4, jit_compile=False)
    _, compiled_losses, first, compilations = run(tmp_path / "broken", 3)
    # One batch shape: one compilation for all three steps, not one per step.
    assert compilations == 1
    resumed, resumed_losses, second, _ = run(tmp_path / "broken", 4)
    assert (first.steps, second.resumed_from_step, second.steps) == (3, 3, 4)
    np.testing.assert_allclose(compiled_losses + resumed_losses, graph_losses, rtol=1e-5)
    for a, b in zip(unbroken.get_weights(), resumed.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_jit_compile_setting_is_checked():
    with pytest.raises(ValueError, match="jit_compile"):
        Trainer(tiny_model(), Adam(1e-3), jit_compile="yes")

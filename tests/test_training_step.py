"""The training step's fast paths compute what the plain step computes.

* the TensorFlow loss (one softmax, a hand-written gradient) against the
  `keras.ops` one (Keras' fused sparse cross-entropy, `logsumexp`, `mean`);
* projecting only the real target tokens (`real_token_loss_sum`,
  `Trainer(project_real_tokens=True)`) against the full logits of
  `model(inputs)`: same loss, same gradients, same dropout draws, with padding
  in the batch.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.models import build_model
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training import token_loss_sum
from keras_attn_zoo.training import losses
from keras_attn_zoo.training.seeding import seed_everything


def padded_batch(vocabulary_size=40, batch=4, length=7, seed=0):
    """Random ids, row r padded by r tokens on both sides (labels too)."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocabulary_size, (batch, length)).astype("int32")
    target = rng.integers(4, vocabulary_size, (batch, length)).astype("int32")
    labels = rng.integers(4, vocabulary_size, (batch, length)).astype("int32")
    for row in range(batch):
        for ids in (source, target, labels):
            ids[row, length - row:] = 0
    return {"source_ids": tf.constant(source), "target_ids": tf.constant(target)}, \
        tf.constant(labels)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tensorflow_loss_and_gradient_match_the_keras_ops_loss(dtype):
    rng = np.random.default_rng(3)
    logits = tf.cast(tf.constant(rng.normal(scale=4.0, size=(3, 5, 13)), tf.float32), dtype)
    labels = rng.integers(0, 13, (3, 5))
    labels[0] = np.argmax(tf.cast(logits, tf.float32).numpy()[0], -1)  # hits
    labels = tf.constant(labels, tf.int32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        fast, fast_correct = losses._tensorflow_token_losses(
            labels, tf.cast(logits, tf.float32), 0.2)
        plain, plain_correct = losses._generic_token_losses(
            labels, tf.cast(logits, tf.float32), 0.2)
        # Row weights, as a masked, normalised sum gives them.
        weights = tf.constant(rng.uniform(size=(3, 5)), tf.float32)
        fast_total, plain_total = (tf.reduce_sum(fast * weights),
                                   tf.reduce_sum(plain * weights))
    np.testing.assert_allclose(fast.numpy(), plain.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(fast_correct.numpy(), plain_correct.numpy())
    assert 5 <= fast_correct.numpy().sum() < 15
    fast_gradient = tape.gradient(fast_total, logits)
    assert fast_gradient.dtype == logits.dtype
    np.testing.assert_allclose(
        tf.cast(fast_gradient, tf.float32).numpy(),
        tf.cast(tape.gradient(plain_total, logits), tf.float32).numpy(), atol=1e-6)


def test_tensorflow_loss_stays_finite_for_a_hopeless_label():
    """`lse` from the softmax at the argmax: a label 200 nats below the best
    logit (its probability underflows float32) still gets its exact loss."""
    logits = tf.constant([[0.0, 200.0, 1.0]])
    labels = tf.constant([0])
    loss, _ = losses._tensorflow_token_losses(labels, logits, 0.0)
    np.testing.assert_allclose(loss.numpy(), [200.0 + np.log1p(np.exp(-199.0))],
                               rtol=1e-6)


@pytest.mark.parametrize("name", ["transformer", "eager_translator"])
def test_real_token_loss_and_gradients_equal_the_full_logits_ones(name):
    seed_everything(0)
    model = build_model(name, 40, preset="tiny")
    inputs, labels = padded_batch()
    variables = model.trainable_variables
    with tf.GradientTape(persistent=True) as tape:
        full = token_loss_sum(labels, model(inputs, training=False), 0.1)
        hidden, project = model.forward_before_projection(inputs, training=False)
        real = losses.real_token_loss_sum(labels, hidden, project, 0.1)
    for got, expected in zip(real, full):
        np.testing.assert_allclose(float(got), float(expected), rtol=1e-6)
    assert float(real[1]) == float(np.count_nonzero(labels.numpy()))
    for variable, got, expected in zip(variables, tape.gradient(real[0], variables),
                                       tape.gradient(full[0], variables)):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(),
                                   tf.convert_to_tensor(expected).numpy(),
                                   atol=2e-6, err_msg=variable.path)


def sgd_step(project_real_tokens, name, overrides, policy="float32"):
    """One `Trainer` step of SGD (learning rate 1: weights move by the gradient)."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        seed_everything(0)
        model = build_model(name, 40, preset="tiny", **overrides)
        trainer = Trainer(model, keras.optimizers.SGD(1.0), label_smoothing=0.1,
                          jit_compile=False, project_real_tokens=project_real_tokens)
        metrics = trainer.train_on_batch(*padded_batch())
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return metrics, [v.numpy() for v in model.trainable_variables]


@pytest.mark.parametrize("name, overrides", [
    # Dropout and LayerDrop on: both paths must draw the same masks.
    ("transformer", dict(dropout=0.3, attention_dropout=0.2, decoder_layer_drop=0.3)),
    ("gmm_transformer", dict(dropout=0.2)),
    # RNNsearch's encoder and decoder dropout, and its maxout readout.
    ("bahdanau_rnn", dict(dropout=0.3)),
    ("bahdanau_rnn", dict(dropout=0.2, output="dense")),
    # The eager translator's word dropout and locked dropouts.
    ("eager_translator", dict(embedding_dropout=0.2, input_dropout=0.2, hidden_dropout=0.2,
                              output_dropout=0.2, combiner_dropout=0.2)),
])
def test_trainer_step_projecting_real_tokens_equals_the_full_logits_step(name, overrides):
    fast, fast_weights = sgd_step(True, name, overrides)
    full, full_weights = sgd_step(False, name, overrides)
    assert fast["loss"] == pytest.approx(full["loss"], abs=1e-5)
    assert fast["tokens"] == full["tokens"] and fast["correct"] == full["correct"]
    for got, expected in zip(fast_weights, full_weights):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_mixed_precision_step_projecting_real_tokens_matches_within_bf16():
    fast, fast_weights = sgd_step(True, "transformer", {}, policy="mixed_bfloat16")
    full, full_weights = sgd_step(False, "transformer", {}, policy="mixed_bfloat16")
    assert fast["loss"] == pytest.approx(full["loss"], rel=1e-2)
    for got, expected in zip(fast_weights, full_weights):
        np.testing.assert_allclose(got, expected, atol=2e-2)


def test_mixed_precision_logits_are_float32_within_bf16_of_the_float32_ones():
    """Under mixed_bfloat16 the tied output layer multiplies in bf16 and returns
    float32 logits, within bf16 rounding of the float32 layer's."""
    from keras_attn_zoo.layers.embedding import SharedEmbedding

    hidden = tf.random.stateless_normal((6, 16), seed=(1, 2))
    full = SharedEmbedding(50, 16)
    mixed = SharedEmbedding(50, 16, dtype="mixed_bfloat16")
    full.build(), mixed.build()
    mixed.set_weights(full.get_weights())
    expected = full(hidden, reverse=True).numpy()
    logits = mixed(hidden, reverse=True)
    assert logits.dtype == tf.float32
    # bf16 keeps 8 bits of mantissa: each of the 16 products rounds to ~0.4%.
    np.testing.assert_allclose(logits.numpy(), expected, atol=0.05 * np.abs(expected).max())
    assert not np.array_equal(logits.numpy(), expected)  # the product really ran in bf16


def test_scheduled_sampling_trains_on_full_logits():
    # Its readout feeds back its own predictions: no split while training.
    model = build_model("bahdanau_rnn", 40, preset="tiny", teacher_forcing_ratio=0.5)
    inputs, _ = padded_batch()
    assert model.forward_before_projection(inputs, training=True) is None
    hidden, project = model.forward_before_projection(inputs, training=False)
    np.testing.assert_allclose(project(hidden).numpy(),
                               model(inputs, training=False).numpy(), atol=1e-5)

"""The recipes' Adam (one fused `ResourceApplyAdam` per variable) computes Keras' Adam.

Same model, same batches, same schedule: the weights and both moments after a
few steps equal those of `keras.optimizers.Adam` to float32 rounding, with an
embedding (sparse gradient) among the variables, in eager mode and inside a
`tf.function`; the κ/α learning rate of `BranchWeightAdam` still applies; and
`amsgrad` falls back to Keras' update. Under `MirroredStrategy` the fused update
is checked by `tests/distributed_first_step.py` (`test_training.py`).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.layers.branched_weighted_attention import is_branch_weight
from keras_attn_zoo.models.weighted_optimizer import BranchWeightAdam
from keras_attn_zoo.optimizers import Adam
from keras_attn_zoo.optimizers import InverseSquareRootSchedule


def embedding_model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,), dtype="int32")
    hidden = keras.layers.Embedding(30, 8)(inputs)
    hidden = keras.layers.Dense(16, activation="relu")(hidden)
    outputs = keras.layers.Dense(30)(hidden)
    return keras.Model(inputs, outputs)


def batches(count=4):
    rng = np.random.default_rng(1)
    return [(tf.constant(rng.integers(0, 30, (3, 5)), tf.int32),
             tf.constant(rng.integers(0, 30, (3, 5)), tf.int32)) for _ in range(count)]


def train(optimizer, in_function, model=None):
    model = model or embedding_model()
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return gradients

    step = tf.function(step, autograph=False) if in_function else step
    for inputs, labels in batches():
        gradients = step(inputs, labels)
    assert isinstance(gradients[0], tf.IndexedSlices)  # the embedding's
    return model, optimizer


def state(model, optimizer):
    return ([v.numpy() for v in model.trainable_variables]
            + [m.numpy() for m in optimizer._momentums]
            + [v.numpy() for v in optimizer._velocities])


def assert_same_state(actual, expected):
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("optimizer_class", [Adam, BranchWeightAdam])
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
def test_fused_update_equals_keras_adam(optimizer_class, in_function):
    schedule = lambda: InverseSquareRootSchedule(1e-2, warmup_steps=3)  # noqa: E731
    options = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    fused = state(*train(optimizer_class(schedule(), **options), in_function))
    reference = state(*train(keras.optimizers.Adam(schedule(), **options), in_function))
    assert_same_state(fused, reference)
    # The steps moved the weights well beyond the tolerance.
    assert np.abs(fused[1] - embedding_model().trainable_variables[1].numpy()).max() > 1e-2


def test_branch_weight_learning_rate_still_applies_to_flagged_variables():
    """A κ/α rate of 0 freezes the flagged variable while the others train."""
    model = embedding_model()
    frozen, trained = model.trainable_variables[1:3]  # the first Dense kernel and bias
    setattr(frozen, "_zoo_branch_weight", True)  # as BranchedWeightedAttention marks κ/α
    assert is_branch_weight(frozen)
    before = [frozen.numpy(), trained.numpy()]
    train(BranchWeightAdam(1e-2, branch_weight_learning_rate=0.0), in_function=True,
          model=model)
    np.testing.assert_array_equal(frozen.numpy(), before[0])
    assert np.abs(trained.numpy() - before[1]).max() > 1e-2


def test_amsgrad_uses_keras_update():
    fused = state(*train(Adam(1e-2, amsgrad=True), in_function=True))
    reference = state(*train(keras.optimizers.Adam(1e-2, amsgrad=True), in_function=True))
    assert_same_state(fused, reference)

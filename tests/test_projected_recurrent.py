"""ProjectedGRU / ProjectedLSTM: Keras' GRU / LSTM with the input projection out of the loop.

They must give Keras' layers' outputs, states and gradients for the same weights
(float32, up to summation order), with masks, backwards, and both GRU variants.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.layers import ProjectedGRU
from keras_attn_zoo.layers import ProjectedLSTM


def _pair(projected_class, keras_class, **options):
    ours = projected_class(6, return_sequences=True, return_state=True, **options)
    reference = keras_class(6, return_sequences=True, return_state=True, **options)
    return ours, reference


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    # Padding at the end of two rows: the states must stop at each row's last token.
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], bool)
    return tf.constant(x), tf.constant(mask)


def _outputs_and_gradients(layer, x, mask, initial_state):
    with tf.GradientTape() as tape:
        tape.watch(x)
        outputs = tf.nest.flatten(
            layer(x, mask=mask, initial_state=initial_state, training=True))
        # Fixed random weights on every output: each element's gradient differs.
        rng = np.random.default_rng(2)
        loss = sum(tf.reduce_sum(o * rng.normal(size=o.shape).astype("float32"))
                   for o in outputs)
    gradients = tape.gradient(loss, [x] + layer.trainable_variables)
    return [np.asarray(o) for o in outputs], [np.asarray(g) for g in gradients]


@pytest.mark.parametrize("kind,options", [
    ("gru", {"reset_after": False}),
    ("gru", {"reset_after": True}),
    ("gru", {"reset_after": False, "go_backwards": True}),
    ("lstm", {}),
    ("lstm", {"go_backwards": True}),
])
def test_projected_layers_match_keras_outputs_states_and_gradients(kind, options):
    projected_class, keras_class = ((ProjectedGRU, keras.layers.GRU) if kind == "gru"
                                    else (ProjectedLSTM, keras.layers.LSTM))
    ours, reference = _pair(projected_class, keras_class, **options)
    x, mask = _inputs()
    states = 1 if kind == "gru" else 2
    rng = np.random.default_rng(1)
    initial_state = [tf.constant(rng.normal(size=(3, 6)).astype("float32"))
                     for _ in range(states)]
    ours(x, initial_state=initial_state)
    reference(x, initial_state=initial_state)
    reference.set_weights([w * 1.0 for w in ours.get_weights()])
    our_outputs, our_gradients = _outputs_and_gradients(ours, x, mask, initial_state)
    reference_outputs, reference_gradients = _outputs_and_gradients(
        reference, x, mask, initial_state)
    for got, want in zip(our_outputs, reference_outputs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(our_gradients) == len(reference_gradients)
    for got, want in zip(our_gradients, reference_gradients):
        assert np.abs(want).max() > 0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_projected_gru_keeps_keras_loop_for_cell_dropout():
    """With cell dropout in training the per-step masks need Keras' own loop."""
    layer = ProjectedGRU(4, dropout=0.5, return_sequences=True)
    x, mask = _inputs()
    keras.utils.set_random_seed(0)
    dropped = np.asarray(layer(x, training=True))
    plain = np.asarray(layer(x, training=False))
    assert dropped.shape == plain.shape == (3, 5, 4)
    assert not np.allclose(dropped, plain)


def test_projected_layers_round_trip_through_their_config():
    for layer_class in (ProjectedGRU, ProjectedLSTM):
        layer = layer_class(4, return_sequences=True, name="rnn")
        clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(clone) is layer_class and clone.units == 4 and clone.return_sequences


@pytest.mark.parametrize("layer_class,keras_class", [(ProjectedGRU, keras.layers.GRU),
                                                     (ProjectedLSTM, keras.layers.LSTM)])
def test_the_input_projection_runs_once_for_all_steps(layer_class, keras_class):
    """Outside the loop ours multiplies all B * T inputs at once; Keras does not."""
    x, mask = _inputs()
    rows = x.shape[0] * x.shape[1]

    def projections_of_all_steps(layer):
        graph = tf.function(lambda x, mask: layer(x, mask=mask, training=True)) \
            .get_concrete_function(x, mask).graph
        return [op for op in graph.get_operations() if "MatMul" in op.type
                and op.outputs[0].shape[0] == rows]

    assert len(projections_of_all_steps(layer_class(4, return_sequences=True))) == 1
    assert not projections_of_all_steps(keras_class(4, return_sequences=True))


@pytest.mark.parametrize("layer_class,keras_class", [(ProjectedGRU, keras.layers.GRU),
                                                     (ProjectedLSTM, keras.layers.LSTM)])
def test_weights_saved_with_keras_layers_load_into_ours(layer_class, keras_class, tmp_path):
    """Models saved before the swap (issue 36) keep loading: a `.keras` weights file
    addresses a model's layers by class name, and the eager translator's LSTMs sit
    directly in its layer list."""
    x, _ = _inputs()

    def model(recurrent_class):
        inputs = keras.Input((None, 4))
        return keras.Model(inputs, recurrent_class(6, return_sequences=True)(inputs))

    saved = model(keras_class)
    saved.save_weights(tmp_path / "saved.weights.h5")
    loaded = model(layer_class)
    loaded.load_weights(tmp_path / "saved.weights.h5")
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(saved(x)), rtol=1e-5,
                               atol=1e-6)

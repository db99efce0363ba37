"""keras-hub's layer habits, checked for every public layer of `keras_attn_zoo.layers`.

`run_layer_test` is modelled on keras-hub's `TestCase.run_layer_test`: each
layer, on tiny inputs,

* survives a config round trip (`from_config(get_config())` gives the same
  config and, with the same weights, the same outputs);
* survives a `.keras` round trip inside a functional model (so it also runs
  on symbolic inputs);
* runs under `mixed_float16`: float32 variables, outputs in the compute
  dtype (or float32 where the layer promises it), close to the float32 layer
  with the same weights;
* ignores padded positions where it takes a mask: extra positions with junk
  values, masked out, change no output of the real positions;
* honours the training flag: dropout only while training, inference
  deterministic;
* creates every weight in `build` (its sublayers' too): calling it adds none.

Every public layer either has a case here or is a base class tested through
its subclasses (`BASES`); a new layer without a case fails
`test_every_public_layer_has_a_case`. Each layer's docstring has keras-hub's
sections (`Args:`, `Call arguments:`, `Examples:`), and its `Examples:` are
run.
"""

import dataclasses
import doctest
import inspect
import json
import re
from typing import Callable, Optional

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attn_zoo.layers as zoo_layers

# Base classes without a `call` of their own; their subclasses' cases test them.
BASES = {"HeadedAttention", "FixedPatternAttention", "TransformerBlock"}
MIXED_RTOL = MIXED_ATOL = 3e-2  # float16 keeps ~3 significant digits
PAD = 3  # extra, masked positions appended by the masking check


def _floats(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _ids(*shape, vocabulary_size=20, seed=0):
    return np.random.default_rng(seed).integers(1, vocabulary_size, shape).astype("int32")


def _mask(batch, length):
    """`True` for real positions; row 1 has two padded positions at its end."""
    mask = np.ones((batch, length), bool)
    mask[1, -2:] = False
    return mask


_RAN_STACK = []


def _ran_matrix(length):
    """`A_1[:, :length, :length]` of one stack (the same for every length asked)."""
    if not _RAN_STACK:
        _RAN_STACK.append(zoo_layers.RecurrentAttentionMatrices(
            num_heads=2, max_length=16, num_layers=1))
    return np.asarray(_RAN_STACK[0](np.zeros((1, length), "int32"))[0]["attention_matrix"])


@dataclasses.dataclass
class Case:
    """How to build and call one layer.

    make: `make(dtype=None)` returns a fresh layer (with dropout where the
        layer has it, so the training check has something to see).
    args, kwargs: tensors (numpy) the layer is called with; `options` are the
        call's non-tensor arguments.
    padded: the names (`"arg0"`, or a keyword) of the tensors whose axis 1 the
        mask covers, or None when the layer takes no mask. The mask keyword
        itself is among them.
    float32_output: the first output stays float32 under mixed precision.
    has_dropout: training and inference differ.
    build_shapes: what `build` takes; None: the shapes of `args`.
    """

    make: Callable
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    options: dict = dataclasses.field(default_factory=dict)
    padded: Optional[tuple] = None
    float32_output: bool = False
    has_dropout: bool = True
    pad: Optional[Callable] = None  # a custom padding (inputs) -> inputs
    build_shapes: Optional[tuple] = None


def _attention(cls, **extra):
    return lambda dtype=None: cls(num_heads=2, key_dim=4, dropout=0.5, dtype=dtype, **extra)


def _encoder_block(dtype=None):
    return zoo_layers.TransformerEncoderBlock(
        zoo_layers.MultiHeadAttention(2, 4, dropout=0.5, dtype=dtype), 16, dropout=0.5,
        dtype=dtype)


def _decoder_block(dtype=None):
    return zoo_layers.TransformerDecoderBlock(
        zoo_layers.MultiHeadAttention(2, 4, dtype=dtype),
        zoo_layers.MultiHeadAttention(2, 4, dtype=dtype), 16, dropout=0.5, dtype=dtype)


def _pad_ran(inputs):
    """RAN: queries, mask and the layer's matrix grow together."""
    inputs = dict(inputs)
    length = inputs["arg0"].shape[1] + PAD
    inputs["arg0"] = np.pad(inputs["arg0"], [(0, 0), (0, PAD), (0, 0)], constant_values=7.0)
    inputs["context_mask"] = np.pad(inputs["context_mask"], [(0, 0), (0, PAD)])
    inputs["attention_matrix"] = _ran_matrix(length)
    return inputs


B, T, S, D = 2, 5, 6, 8
CASES = {
    "MultiHeadAttention": Case(
        _attention(zoo_layers.MultiHeadAttention), (_floats(B, T, D),),
        {"context_mask": _mask(B, T)}, padded=("arg0", "context_mask")),
    "GaussianMixtureCrossAttention": Case(
        _attention(zoo_layers.GaussianMixtureCrossAttention),
        (_floats(B, T, D), _floats(B, S, D, seed=1)), {"context_mask": _mask(B, S)},
        padded=("arg1", "context_mask")),
    "HardCodedGaussianAttention": Case(
        _attention(zoo_layers.HardCodedGaussianAttention), (_floats(B, T, D),),
        {"context_mask": _mask(B, T)}, options={"causal": True},
        padded=("arg0", "context_mask")),
    "RandomSynthesizerAttention": Case(
        _attention(zoo_layers.RandomSynthesizerAttention, max_length=16),
        (_floats(B, T, D),), {"context_mask": _mask(B, T)},
        padded=("arg0", "context_mask")),
    "RecurrentAttention": Case(
        _attention(zoo_layers.RecurrentAttention), (_floats(B, T, D),),
        {"context_mask": _mask(B, T), "attention_matrix": _ran_matrix(T)},
        padded=("arg0",), pad=_pad_ran),
    "BranchedWeightedAttention": Case(
        _attention(zoo_layers.BranchedWeightedAttention, intermediate_dim=16),
        (_floats(B, T, D),), {"context_mask": _mask(B, T)},
        padded=("arg0", "context_mask")),
    "RecurrentAttentionMatrices": Case(
        lambda dtype=None: zoo_layers.RecurrentAttentionMatrices(
            num_heads=2, max_length=16, num_layers=2, transition="ffn", dtype=dtype),
        (_ids(B, T),), has_dropout=False),
    "BahdanauAttention": Case(
        lambda dtype=None: zoo_layers.BahdanauAttention(units=8, normalize=True, dtype=dtype),
        (_floats(B, D), _floats(B, S, D, seed=1)), {"memory_mask": _mask(B, S)},
        padded=("arg1", "memory_mask"), has_dropout=False),
    "RNNSearchDecoder": Case(
        lambda dtype=None: zoo_layers.RNNSearchDecoder(20, 8, 8, 8, dropout=0.5, dtype=dtype),
        (_ids(B, T), _floats(B, S, 16, seed=1), _mask(B, S)),
        padded=("arg1", "arg2"), float32_output=True,
        build_shapes=()),  # its sizes are all in its config
    "SharedEmbedding": Case(
        lambda dtype=None: zoo_layers.SharedEmbedding(20, D, dropout=0.5, dtype=dtype),
        (_ids(B, T),)),
    "EagerEmbedding": Case(
        lambda dtype=None: zoo_layers.EagerEmbedding(20, D, dropout=0.5, dtype=dtype),
        (_ids(B, T),)),
    # Dropout makes them run Keras' loop in training; inference, masking and
    # mixed precision go through the projected one.
    "ProjectedGRU": Case(
        lambda dtype=None: zoo_layers.ProjectedGRU(6, dropout=0.5, return_sequences=True,
                                                   dtype=dtype),
        (_floats(B, T, D),), {"mask": _mask(B, T)}, padded=("arg0", "mask")),
    "ProjectedLSTM": Case(
        lambda dtype=None: zoo_layers.ProjectedLSTM(6, dropout=0.5, return_sequences=True,
                                                    dtype=dtype),
        (_floats(B, T, D),), {"mask": _mask(B, T)}, padded=("arg0", "mask")),
    "Maxout": Case(
        lambda dtype=None: zoo_layers.Maxout(4, dtype=dtype), (_floats(B, T, D),),
        has_dropout=False),
    "HeadsProjection": Case(
        lambda dtype=None: zoo_layers.HeadsProjection(2, 4, dtype=dtype), (_floats(B, T, D),),
        has_dropout=False),
    "HeadsOutput": Case(
        lambda dtype=None: zoo_layers.HeadsOutput(D, dtype=dtype), (_floats(B, T, 2, 4),),
        has_dropout=False),
    "LayerNormalization": Case(
        lambda dtype=None: zoo_layers.LayerNormalization(epsilon=1e-6, dtype=dtype),
        (_floats(B, T, D),), has_dropout=False),
    "FeedForward": Case(
        lambda dtype=None: zoo_layers.FeedForward(16, dropout=0.5, dtype=dtype),
        (_floats(B, T, D),)),
    "TransformerEncoderBlock": Case(
        _encoder_block, (_floats(B, T, D),), {"padding_mask": _mask(B, T)},
        padded=("arg0", "padding_mask")),
    "TransformerDecoderBlock": Case(
        _decoder_block, (_floats(B, T, D), _floats(B, S, D, seed=1)),
        {"memory_mask": _mask(B, S)}, padded=("arg1", "memory_mask")),
    "LayerDrop": Case(
        lambda dtype=None: zoo_layers.LayerDrop(1.0, dtype=dtype),
        (_floats(B, T, D), _floats(B, T, D, seed=1))),
}


# ---- calling a case ------------------------------------------------------------------


def _inputs(case):
    inputs = {f"arg{index}": value for index, value in enumerate(case.args)}
    inputs.update(case.kwargs)
    return inputs


def _call(layer, case, inputs, **flags):
    args = [inputs[f"arg{index}"] for index in range(len(case.args))]
    kwargs = {name: value for name, value in inputs.items() if not name.startswith("arg")}
    return layer(*args, **kwargs, **case.options, **flags)


def _first(outputs):
    return np.asarray(keras.tree.flatten(outputs)[0])


def _all(outputs):
    return [np.asarray(value, np.float32) for value in keras.tree.flatten(outputs)]


def _assert_same(actual, expected, atol=1e-6, what=""):
    assert len(actual) == len(expected), what
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=atol, err_msg=what)


# ---- the shared test -------------------------------------------------------------------


def check_config_round_trip(case):
    layer = case.make()
    outputs = _call(layer, case, _inputs(case))
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert json.dumps(clone.get_config(), sort_keys=True, default=str) == json.dumps(
        config, sort_keys=True, default=str)
    _call(clone, case, _inputs(case))  # builds it
    clone.set_weights(layer.get_weights())
    _assert_same(_all(_call(clone, case, _inputs(case))), _all(outputs),
                 what="from_config(get_config()) with the same weights")


def check_keras_file_round_trip(case, path):
    inputs = {name: keras.Input(batch_shape=value.shape, dtype=str(value.dtype), name=name)
              for name, value in _inputs(case).items()}
    model = keras.Model(inputs, _call(case.make(), case, inputs))
    expected = _all(model(_inputs(case)))
    model.save(path)
    restored = keras.saving.load_model(path)
    _assert_same(_all(restored(_inputs(case))), expected, what=".keras round trip")


def check_mixed_precision(case):
    full = case.make()
    expected = _first(_call(full, case, _inputs(case)))
    mixed = case.make(dtype="mixed_float16")
    _call(mixed, case, _inputs(case))
    mixed.set_weights(full.get_weights())
    assert {variable.dtype for variable in mixed.weights} <= {"float32", "int64", "uint32"}, \
        "variables stay float32 under mixed precision"
    output = keras.tree.flatten(_call(mixed, case, _inputs(case)))[0]
    if np.issubdtype(expected.dtype, np.floating):
        want = "float32" if case.float32_output else "float16"
        assert keras.backend.standardize_dtype(output.dtype) == want
        np.testing.assert_allclose(np.asarray(output, np.float32), expected,
                                   rtol=MIXED_RTOL, atol=MIXED_ATOL)


def check_masking(case):
    layer = case.make()
    inputs = _inputs(case)
    expected = _first(_call(layer, case, inputs))
    if case.pad is not None:
        padded = case.pad(inputs)
    else:
        padded = dict(inputs)
        for name in case.padded:
            value = inputs[name]
            widths = [(0, 0), (0, PAD)] + [(0, 0)] * (value.ndim - 2)
            junk = False if value.dtype == bool else 7  # masked: any value will do
            padded[name] = np.pad(value, widths, constant_values=junk)
    output = _first(_call(layer, case, padded))
    real = output[tuple(slice(0, size) for size in expected.shape)]
    np.testing.assert_allclose(real, expected, atol=1e-5,
                               err_msg="masked padding changed real positions")


def check_training_flag(case):
    layer = case.make()
    inputs = _inputs(case)
    inference = _all(_call(layer, case, inputs, training=False))
    _assert_same(_all(_call(layer, case, inputs, training=False)), inference,
                 what="inference is deterministic")
    training = _all(_call(layer, case, inputs, training=True))
    if case.has_dropout:
        assert any(not np.allclose(t, i) for t, i in zip(training, inference)), \
            "training=True should apply dropout"
    else:
        _assert_same(training, inference, what="no dropout: training changes nothing")


def check_build_creates_every_weight(case):
    layer = case.make()
    shapes = [value.shape for value in case.args] if case.build_shapes is None \
        else case.build_shapes
    layer.build(*shapes)
    built = [variable.path for variable in layer.weights]
    _call(layer, case, _inputs(case))
    assert [variable.path for variable in layer.weights] == built, \
        "the first call created weights that build did not"


def run_layer_test(case, tmp_path):
    """Runs every check that applies to `case` (each asserts); returns their names."""
    check_build_creates_every_weight(case)
    check_config_round_trip(case)
    check_keras_file_round_trip(case, tmp_path / "layer.keras")
    check_mixed_precision(case)
    checks = ["build", "config", "keras_file", "mixed_precision"]
    if case.padded is not None:
        check_masking(case)
        checks.append("masking")
    check_training_flag(case)
    return checks + ["training_flag"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer(name, tmp_path):
    checks = run_layer_test(CASES[name], tmp_path)
    assert {"build", "config", "keras_file", "mixed_precision", "training_flag"} <= set(checks)
    assert ("masking" in checks) == (CASES[name].padded is not None)


def _public_layers():
    return {name: value for name, value in vars(zoo_layers).items()
            if inspect.isclass(value) and issubclass(value, keras.layers.Layer)}


def test_every_public_layer_has_a_case():
    assert sorted(set(_public_layers()) - BASES) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(_public_layers()))
def test_docstring_has_keras_hubs_sections(name):
    doc = inspect.getdoc(_public_layers()[name])
    for section in ("Call arguments:", "Examples:"):
        assert f"\n{section}\n" in doc, f"{name} documents no {section}"
    # The projected RNNs take keras.layers.GRU's / LSTM's constructor unchanged.
    assert "\nArgs:\n" in doc or re.search(
        r"Same arguments, weights and results as `keras\.layers\.\w+`", doc), \
        f"{name} documents no Args:"


@pytest.mark.parametrize("name", sorted(_public_layers()))
def test_docstring_example_runs(name):
    cls = _public_layers()[name]
    globs = {"keras": keras, "np": np, name: cls}
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(cls, name, globs=globs)
    assert tests and tests[0].examples, f"{name} has no Example"
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"{name}'s Example does not run as written"


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_normalization_equals_keras_values_and_gradients(policy):
    """The closed-form gradient against automatic differentiation of Keras' layer."""
    layers = [zoo_layers.LayerNormalization(epsilon=1e-6, dtype=policy),
              keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)]
    x = tf.constant(_floats(B, T, 16) * 3.0 + 1.0)
    upstream = tf.constant(_floats(B, T, 16, seed=1))
    weights = [_floats(16, seed=2), _floats(16, seed=3)]
    results = []
    for layer in layers:
        layer.build(x.shape)
        layer.set_weights(weights)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        results.append([y, *tape.gradient(loss, [x, *layer.trainable_variables])])
    assert results[0][0].dtype == results[1][0].dtype
    for ours, keras_values in zip(*results):
        np.testing.assert_allclose(tf.cast(ours, tf.float32).numpy(),
                                   tf.cast(keras_values, tf.float32).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_eager_embedding_checks_lengths_in_a_graph():
    layer = zoo_layers.EagerEmbedding(20, D)
    spec = tf.TensorSpec([None, None], tf.int32)
    embed = tf.function(lambda source, target: layer([source, target]),
                        input_signature=[spec, spec])
    assert embed(_ids(B, T), _ids(B, T)).shape == (B, T, 2 * D)
    with pytest.raises(tf.errors.InvalidArgumentError, match="equally long"):
        embed(_ids(B, T), _ids(B, T + 1))

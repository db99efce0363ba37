"""`layers.attention_utils`' shape helpers, traced with the dims a graph may leave unknown."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.layers.attention_utils import axis_size
from keras_attn_zoo.layers.attention_utils import flat_dense
from keras_attn_zoo.layers.attention_utils import leading_dims


# (traced signature, the input): both leading dims unknown (training batches), one
# unknown (a decoding step), none, and a static empty batch beside an unknown length
# (where a reshape cannot infer -1).
CASES = [([None, None, 4], (3, 5, 4)), ([None, 1, 4], (6, 1, 4)), ([2, 3, 4], (2, 3, 4)),
         ([0, None, 4], (0, 5, 4)), ([None, 1, 4], (0, 1, 4))]


@pytest.mark.parametrize("signature, shape", CASES)
def test_flat_dense_equals_the_einsum_for_any_known_and_unknown_dims(signature, shape):
    rng = np.random.default_rng(0)
    kernel = tf.constant(rng.normal(size=(4, 6)), tf.float32)
    bias = tf.constant(rng.normal(size=(6,)), tf.float32)
    inputs = tf.constant(rng.normal(size=shape), tf.float32)
    heads = tf.function(lambda x: flat_dense(x, kernel, bias, (2, 3)), autograph=False,
                        input_signature=[tf.TensorSpec(signature, tf.float32)])
    expected = tf.einsum("bti,io->bto", inputs, kernel) + bias
    np.testing.assert_allclose(heads(inputs).numpy(),
                               tf.reshape(expected, shape[:2] + (2, 3)).numpy(), atol=1e-5)


def test_helpers_make_no_shape_ops_where_the_dims_are_static_or_one_is_unknown():
    def shape_ops(signature, function):
        graph = tf.function(function, autograph=False).get_concrete_function(
            tf.TensorSpec(signature, tf.float32)).graph
        return sum(op.type in ("Shape", "StridedSlice") for op in graph.get_operations())

    assert shape_ops([None, 1, 4], lambda x: tf.reshape(x, leading_dims(x, 2) + (4,))) == 0
    assert shape_ops([None, 7, 4], lambda x: tf.fill([axis_size(x, 1)], 1.0)) == 0
    assert leading_dims(tf.zeros([2, 3, 4]), 2) == (2, 3)
    # Two unknown dims: read from the tensor's shape, as Keras' ops.shape gives them.
    assert shape_ops([None, None, 4], lambda x: tf.reshape(x, leading_dims(x, 2) + (4,))) > 0

"""`seed_everything`: Keras, NumPy and Python draw the same numbers again, and a
tokenizer loaded before keeps working (`keras.utils.set_random_seed` clears it)."""

import random

import keras
import numpy as np

from keras_attn_zoo.training.seeding import seed_everything


def draws():
    layer = keras.layers.Dense(3)
    layer.build((None, 4))
    return (keras.ops.convert_to_numpy(layer.kernel),
            keras.ops.convert_to_numpy(keras.random.normal((5,))),
            np.random.rand(2), random.random())


def test_the_same_seed_gives_the_same_weights_and_draws():
    seed_everything(7)
    first = draws()
    seed_everything(7)
    again = draws()
    seed_everything(8)
    other = draws()
    for a, b, c in zip(first, again, other):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_a_tokenizer_loaded_before_survives_the_seeding(tiny_tokenizer):
    before = tiny_tokenizer.tokenize(["the cat sees the dog"])
    seed_everything(3)
    after = tiny_tokenizer.tokenize(["the cat sees the dog"])
    np.testing.assert_array_equal(np.asarray(before), np.asarray(after))

"""Seeding that leaves TensorFlow resources alone."""

import random

import numpy as np
# Private on purpose: Keras' only public setter of its global seed,
# `keras.utils.set_random_seed`, also calls `tf.random.set_seed` (see below).
from keras.src.backend.common import global_state
from keras.src.random import seed_generator
from keras.src.utils import rng_utils


def seed_everything(seed):
    """Seeds Python, NumPy and Keras' global seed generator, not `tf.random`.

    `keras.utils.set_random_seed` also calls `tf.random.set_seed`, which
    clears TensorFlow's kernel cache and with it the SentencePiece resource of
    every tokenizer loaded before (later `tf.data` or tokenizer calls then fail
    with `NotFoundError: Resource ... SentencepieceOp ... does not exist`).
    Keras initializers and dropout draw from the generator seeded here, and the
    zoo's `tf.data` pipelines take explicit seeds, so runs stay reproducible.
    """
    if not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}.")
    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)

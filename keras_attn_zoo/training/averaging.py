"""Checkpoint averaging: the mean of a model's weights over its last checkpoints.

Every major toolkit offers it (fairseq's `average_checkpoints.py`, OpenNMT-tf's
`average_checkpoints`, Marian's `--exponential-smoothing` as its running
cousin); on small data it smooths the noise of the last updates (Araabi &
Monz, 2020). Works on the `Trainer`'s checkpoints (`tf.train.Checkpoint` with
the model under `model`).
"""

import os

import numpy as np
import tensorflow as tf


def average_checkpoints(model, checkpoint_paths):
    """Sets `model`'s weights to their mean over `checkpoint_paths`.

    Args:
        model: the model the checkpoints were written from (same variables).
        checkpoint_paths: checkpoint prefixes, e.g. the
            `tf.train.CheckpointManager(...).checkpoints` of a run.

    Returns:
        The number of checkpoints averaged.

    Raises:
        ValueError: for an empty list, a path with no checkpoint, or a
            checkpoint that does not hold every weight of `model` (written by
            another architecture); nothing is changed then.
    """
    paths = [os.fspath(path) for path in checkpoint_paths]
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint.")
    missing = [path for path in paths if not tf.io.gfile.exists(path + ".index")]
    if missing:
        raise ValueError(f"No checkpoint at {missing} (expected '<prefix>.index').")
    checkpoint = tf.train.Checkpoint(model=model)
    # Float weights are averaged; integer state (seed generators) keeps the
    # last checkpoint's value, which the last restore leaves in place.
    floats = [variable for variable in model.weights
              if np.issubdtype(np.dtype(variable.dtype), np.floating)]
    total = [np.zeros(variable.shape, np.float64) for variable in floats]
    original = [variable.numpy() for variable in model.weights]
    for path in paths:
        # `read`, not `restore`: it neither expects nor creates a save counter,
        # which the early-stopping checkpoints (`write`) do not hold.
        status = checkpoint.read(path)
        status.expect_partial()  # the optimizer's slots are not wanted
        try:
            # A weight the checkpoint lacks would otherwise keep its current
            # value and enter the mean silently.
            status.assert_existing_objects_matched()
        except AssertionError as error:
            for variable, value in zip(model.weights, original):
                variable.assign(value)
            raise ValueError(f"The checkpoint {path} does not hold every weight of the "
                             f"model ({str(error).splitlines()[0][:200]}).") from None
        for index, variable in enumerate(floats):
            total[index] += np.asarray(variable.numpy(), np.float64)
    for variable, value in zip(floats, total):
        variable.assign((value / len(paths)).astype(variable.dtype))
    return len(paths)


def latest_checkpoints(directory, count):
    """The newest `count` checkpoint prefixes of a `Trainer`'s directory, oldest first."""
    state = tf.train.get_checkpoint_state(os.fspath(directory))
    if state is None:
        raise ValueError(f"No checkpoints in {directory}.")
    return list(state.all_model_checkpoint_paths)[-int(count):]

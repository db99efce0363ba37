"""Choosing a `tf.distribute` strategy from a flag."""

import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "default", "mirrored", "multi_worker")


def select_strategy(name="auto"):
    """Returns a `tf.distribute.Strategy`.

    * `auto`: `MirroredStrategy` when more than one GPU is visible, else the
      default (single-device) strategy.
    * `default`: the default strategy.
    * `mirrored`: `MirroredStrategy` over every visible GPU, or every logical
      CPU device when there is no GPU (how the tests run it).
    * `multi_worker`: `MultiWorkerMirroredStrategy`, configured from the
      standard `TF_CONFIG` environment variable. Call this before any other
      TensorFlow work in the process.
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {STRATEGIES}.")
    if name == "multi_worker":
        # Before anything lists devices: collective ops must be configured
        # before TensorFlow initialises its runtime.
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "--strategy multi_worker needs the TF_CONFIG environment variable "
                "(cluster addresses and this worker's task); see docs/training.md, "
                "\"Multi-worker\"."
            )
        json.loads(os.environ["TF_CONFIG"])  # fail early on malformed JSON
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = [d.name for d in gpus] or [
            d.name for d in tf.config.list_logical_devices("CPU")
        ]
        return tf.distribute.MirroredStrategy(devices)


def is_chief(strategy):
    """True on the worker that writes checkpoints, logs and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type is None or (task_type == "chief") or (
        task_type == "worker" and task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )

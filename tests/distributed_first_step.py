"""Runs one training step on one device and under MirroredStrategy, prints JSON.

The single-device step runs in graph mode, the mirrored one XLA-compiled
(`Trainer(jit_compile=True)`): equal results check both the distribution and
the compiled step.

Run as a separate process: logical CPU devices must be configured before
TensorFlow initialises its devices, which a pytest process has done already.
"""

import json
import sys

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)

import numpy as np  # noqa: E402

from keras_attn_zoo.models import transformer  # noqa: E402
from keras_attn_zoo.training import Trainer  # noqa: E402
from keras_attn_zoo.training.seeding import seed_everything  # noqa: E402
from keras_attn_zoo.optimizers import Adam  # noqa: E402
from keras_attn_zoo.runtime import freeze_import_time_objects  # noqa: E402
from graph_settings import turn_off_grappler  # noqa: E402 (tests/, this script's directory)

freeze_import_time_objects()  # a faster exit
turn_off_grappler()  # tests/graph_settings.py


def one_step(strategy, initial_weights, inputs, labels, jit_compile):
    with strategy.scope():
        model = transformer(64, preset="tiny")
        model.set_weights(initial_weights)
        optimizer = Adam(1e-3)
    trainer = Trainer(model, optimizer, strategy, jit_compile=jit_compile)
    dataset = tf.data.Dataset.from_tensors((inputs, labels))
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    metrics = trainer.train_on_batch(*batch)
    return metrics, model.get_weights()


def main():
    seed_everything(0)
    reference = transformer(64, preset="tiny")
    weights = reference.get_weights()
    rng = np.random.default_rng(0)
    # 4 sentences of different real lengths: the replicas see different
    # token counts, which is where per-replica averaging would go wrong.
    source = rng.integers(4, 64, (4, 9)).astype("int32")
    target = rng.integers(4, 64, (4, 8)).astype("int32")
    for row, cut in enumerate([9, 3, 7, 2]):
        source[row, cut:] = 0
    for row, cut in enumerate([8, 2, 6, 3]):
        target[row, cut:] = 0
    labels = np.roll(target, -1, axis=1)
    labels[target == 0] = 0
    inputs = {"source_ids": source, "target_ids": target}

    single, single_weights = one_step(tf.distribute.get_strategy(), weights, inputs, labels,
                                      jit_compile=False)
    mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    mirrored, mirrored_weights = one_step(mirrored_strategy, weights, inputs, labels,
                                          jit_compile=True)
    max_weight_diff = max(
        float(np.abs(a - b).max()) for a, b in zip(single_weights, mirrored_weights)
    )
    print(json.dumps({
        "replicas": mirrored_strategy.num_replicas_in_sync,
        "single": single,
        "mirrored": mirrored,
        "max_weight_diff": max_weight_diff,
    }))


if __name__ == "__main__":
    sys.exit(main())

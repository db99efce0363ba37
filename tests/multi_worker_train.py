"""One worker of a real two-process MultiWorkerMirroredStrategy run.

Started twice by tests/test_multi_worker.py with TF_CONFIG set; trains a few
steps of the tiny Transformer (the chief asks to stop one step early, as early
stopping does) through the zoo's Trainer (its XLA-compiled step,
so the compiled step is tested under multi-worker collectives) and prints a
JSON line with the step count, the loss and a fingerprint of the weights.
"""

import hashlib
import json
import sys

import tensorflow as tf

from keras_attn_zoo.training import select_strategy

strategy = select_strategy("multi_worker")  # must come before other TF work

import numpy as np  # noqa: E402

from keras_attn_zoo.models import transformer  # noqa: E402
from keras_attn_zoo.training import Trainer  # noqa: E402
from keras_attn_zoo.training.strategy import is_chief  # noqa: E402
from keras_attn_zoo.training.seeding import seed_everything  # noqa: E402
from keras_attn_zoo.optimizers import Adam  # noqa: E402
from keras_attn_zoo.runtime import freeze_import_time_objects  # noqa: E402
from graph_settings import turn_off_grappler  # noqa: E402 (tests/, this script's directory)

freeze_import_time_objects()  # a faster exit
turn_off_grappler()  # tests/graph_settings.py


class ChiefStopsAt:
    """Asks the Trainer to stop at `step` on the chief only, as early stopping does
    (the chief alone evaluates): the workers must agree and stop together."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, step, logs):
        if trainer.is_chief and step == self.step:
            trainer.request_stop("converged")


def main(checkpoint_dir, steps):
    seed_everything(0)
    rng = np.random.default_rng(0)
    source = rng.integers(4, 64, (64, 9)).astype("int32")
    target = rng.integers(4, 64, (64, 8)).astype("int32")
    labels = np.roll(target, -1, axis=1)
    dataset = (
        tf.data.Dataset.from_tensor_slices(
            ({"source_ids": source, "target_ids": target}, labels)
        )
        .batch(8)
        .repeat()
    )
    with strategy.scope():
        model = transformer(64, preset="tiny")
        optimizer = Adam(1e-3)
    trainer = Trainer(model, optimizer, strategy, checkpoint_dir=checkpoint_dir,
                      checkpoint_every=steps, jit_compile=True,
                      callbacks=[ChiefStopsAt(steps - 1)])
    summary = trainer.train(lambda epoch: dataset, max_steps=steps, verbose=0)
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    print(json.dumps({
        "chief": is_chief(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "steps": summary.steps,
        "stop_reason": summary.stop_reason,
        "compiled_shapes": trainer.compiled_shapes,
        "loss": summary.final_loss,
        "weights_sha256": digest.hexdigest(),
    }), flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))

"""Runs every model builder on Keras' JAX backend; `tests/test_jax_backend.py` starts it.

`python tests/jax_backend_check.py DIR` (with `KERAS_BACKEND=jax`): `DIR`
holds, per builder, `NAME.keras` and `NAME.npy`, a tiny model saved by the
TensorFlow backend and its logits on `DIR/batch.npz`. For each builder this
process checks, in one JAX process (starting one costs more than the checks):

* the TensorFlow-saved `.keras` file loads and gives the TensorFlow logits;
* a fresh tiny model runs forward and `fit`s a few steps (the loss is finite
  and the weights move);
* its own `.keras` round trip gives the same logits.

TensorFlow is blocked in this process: the builders, the loss and the schedule
must run on a JAX machine that has no TensorFlow (`recipes/recipe_screen.py`
trains there).

It prints one JSON line, `{builder: {"error": ...} or the measured figures}`,
so the parent names every builder that failed, not only the first.
"""

import importlib.abc
import json
import pathlib
import sys
import traceback


class _NoTensorFlow(importlib.abc.MetaPathFinder):
    """Fails any import of TensorFlow, naming the module that wanted it."""

    def find_spec(self, name, path, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError(f"{name} imported on the JAX backend (it may be absent there)")
        return None


# Only when run as the check: tests/test_jax_backend.py imports this module for
# its constants, and the blocker would stay in that pytest process.
if __name__ == "__main__":
    sys.meta_path.insert(0, _NoTensorFlow())

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn_zoo.models import MODEL_BUILDERS  # noqa: E402
from keras_attn_zoo.models import build_model  # noqa: E402
from keras_attn_zoo.training.losses import LabelSmoothedCrossEntropy  # noqa: E402
from keras_attn_zoo.training.schedules import InverseSquareRootSchedule  # noqa: E402

VOCABULARY_SIZE = 40
FIT_STEPS = 3


def _logits(model, batch):
    return np.asarray(model(batch, training=False), np.float32)


def _check(name, directory, batch, labels):
    saved_by_tensorflow = keras.saving.load_model(directory / f"{name}.keras")
    expected = np.load(directory / f"{name}.npy")
    tensorflow_gap = float(np.max(np.abs(_logits(saved_by_tensorflow, batch) - expected)))

    keras.utils.set_random_seed(0)
    model = build_model(name, VOCABULARY_SIZE, preset="tiny")
    before = _logits(model, batch)
    weights_before = [np.array(w) for w in model.trainable_weights]
    # The recipe's loss and schedule (a peak of 1e-2 after one warm-up step).
    model.compile(optimizer=keras.optimizers.Adam(InverseSquareRootSchedule(1e-2, 1)),
                  loss=LabelSmoothedCrossEntropy(0.1))
    history = model.fit(batch, labels, batch_size=len(labels), epochs=FIT_STEPS,
                        verbose=0, shuffle=False)
    weight_move = max(float(np.max(np.abs(np.array(w) - old)))
                      for w, old in zip(model.trainable_weights, weights_before))
    path = directory / f"{name}.jax.keras"
    model.save(path)
    round_trip_gap = float(np.max(np.abs(
        _logits(keras.saving.load_model(path), batch) - _logits(model, batch))))
    return {
        "tensorflow_gap": tensorflow_gap,
        "finite_forward": bool(np.isfinite(before).all()),
        "losses": [float(loss) for loss in history.history["loss"]],
        "weight_move": weight_move,
        "round_trip_gap": round_trip_gap,
    }


def main(directory):
    assert keras.backend.backend() == "jax", keras.backend.backend()
    directory = pathlib.Path(directory)
    arrays = np.load(directory / "batch.npz")
    batch = {"source_ids": arrays["source_ids"], "target_ids": arrays["target_ids"]}
    results = {}
    for name in MODEL_BUILDERS:
        try:
            results[name] = _check(name, directory, batch, arrays["labels"])
        except Exception:  # reported per builder; the parent asserts on it
            results[name] = {"error": traceback.format_exc()[-3000:]}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])

"""Every model builder on Keras' JAX backend (layers and models use `keras.ops` only).

The backend is chosen when Keras is first imported, so the JAX half runs in one
subprocess (`tests/jax_backend_check.py`) for all builders. This process, on
the TensorFlow backend, saves each tiny model and its logits first: the JAX
side must load the file and reproduce them, so the two backends are checked
against each other, not only each against itself. jax comes with the `dev`
extra; without it the subprocess fails naming the missing module (no skip:
`make test` runs this).
"""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np

from keras_attn_zoo.models import MODEL_BUILDERS
from keras_attn_zoo.models import build_model
from tests.jax_backend_check import VOCABULARY_SIZE
from tests.model_checks import random_batch

REPO = pathlib.Path(__file__).resolve().parents[1]
# float32 on both backends; XLA (JAX) and TensorFlow order reductions
# differently, so logits agree to rounding, not bit for bit.
BACKEND_ATOL = 1e-4


def _run_jax_check(directory):
    # Equal lengths: the eager translator reads one source and one target token per step.
    batch = random_batch(VOCABULARY_SIZE, batch=3, source_length=6, target_length=6)
    labels = np.roll(batch["target_ids"], -1, axis=1)
    labels[:, -1] = 0
    np.savez(directory / "batch.npz", labels=labels, **batch)
    for name in MODEL_BUILDERS:
        keras.utils.set_random_seed(0)
        model = build_model(name, VOCABULARY_SIZE, preset="tiny")
        np.save(directory / f"{name}.npy", np.asarray(model(batch, training=False), np.float32))
        model.save(directory / f"{name}.keras")
    # XLA_FLAGS (the cheaper compiles conftest.py sets) comes with os.environ.
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    process = subprocess.run(
        [sys.executable, str(REPO / "tests" / "jax_backend_check.py"), str(directory)],
        env=env, cwd=REPO, capture_output=True, text=True,
        timeout=1800)  # a guard against a hang: about 95 s of CPU
    assert process.returncode == 0, process.stderr[-4000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


def _problem(result):
    """What is wrong with one builder's result, or None."""
    if "error" in result:
        return result["error"]
    checks = {
        "the TensorFlow logits": result["tensorflow_gap"] < BACKEND_ATOL,
        "a finite forward pass": result["finite_forward"],
        "3 finite fit losses": (len(result["losses"]) == 3
                                and bool(np.isfinite(result["losses"]).all())),
        "weights moved by fit": result["weight_move"] > 0,
        "the .keras round trip": result["round_trip_gap"] < 1e-6,
    }
    failed = [what for what, ok in checks.items() if not ok]
    return f"failed: {failed}; {result}" if failed else None


# One test, not one per builder: under pytest-xdist a module fixture runs once
# per worker, and the JAX process is the expensive part.
def test_every_builder_runs_on_jax(tmp_path):
    results = _run_jax_check(tmp_path)
    assert sorted(results) == sorted(MODEL_BUILDERS)
    problems = {name: _problem(result) for name, result in results.items()}
    assert not any(problems.values()), {n: p for n, p in problems.items() if p}

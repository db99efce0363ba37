"""Every model builder on Keras' JAX backend (layers and models use `keras.ops` only).

The backend is chosen when Keras is first imported, so the JAX half runs in one
subprocess (`tests/jax_backend_check.py`) for all builders. This process, on
the TensorFlow backend, saves each tiny model and its logits first: the JAX
side must load the file and reproduce them, so the two backends are checked
against each other, not only each against itself.
"""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_attn_zoo.models import MODEL_BUILDERS
from keras_attn_zoo.models import build_model
from tests.jax_backend_check import VOCABULARY_SIZE
from tests.model_checks import random_batch

REPO = pathlib.Path(__file__).resolve().parents[1]
# float32 on both backends; XLA (JAX) and TensorFlow order reductions
# differently, so logits agree to rounding, not bit for bit.
BACKEND_ATOL = 1e-4

pytest.importorskip("jax")


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jax")
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
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    process = subprocess.run(
        [sys.executable, str(REPO / "tests" / "jax_backend_check.py"), str(directory)],
        env=env, cwd=REPO, capture_output=True, text=True,
        timeout=1800)  # a guard against a hang: about 75 s of CPU when the machine is idle
    assert process.returncode == 0, process.stderr[-4000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(MODEL_BUILDERS))
def test_builder_runs_on_jax(jax_results, name):
    result = jax_results[name]
    assert "error" not in result, result.get("error")
    assert result["tensorflow_gap"] < BACKEND_ATOL, result
    assert result["finite_forward"]
    assert len(result["losses"]) == 3 and np.isfinite(result["losses"]).all(), result
    assert result["weight_move"] > 0, result
    assert result["round_trip_gap"] < 1e-6, result

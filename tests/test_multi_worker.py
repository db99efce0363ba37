"""A real two-worker MultiWorkerMirroredStrategy run on 127.0.0.1, stopped early by the chief."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_train_identical_weights_and_the_chief_checkpoint_restores(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        env["CUDA_VISIBLE_DEVICES"] = ""
        processes.append(subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "multi_worker_train.py"),
             str(tmp_path / f"ckpt{index}"), "4"],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    outputs = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr[-3000:]
            outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for process in processes:
            process.kill()
    chief, other = outputs
    assert chief["chief"] and not other["chief"]
    assert chief["replicas"] == other["replicas"] == 2
    # The chief alone asked to stop at step 3 (of 4): both stopped there; a
    # worker that went on would have waited forever on the chief's collectives.
    assert chief["steps"] == other["steps"] == 3
    assert chief["stop_reason"] == "converged"
    assert other["stop_reason"] == "another worker stopped"
    assert chief["compiled_shapes"] == other["compiled_shapes"] == 1  # one batch shape
    assert np.isfinite(chief["loss"])
    assert chief["weights_sha256"] == other["weights_sha256"]
    # Only the chief kept a checkpoint, and it restores.
    assert list((tmp_path / "ckpt0").glob("ckpt-3.index"))
    assert not (tmp_path / "ckpt1").exists() or not list((tmp_path / "ckpt1").glob("ckpt-*"))
    import tensorflow as tf
    from keras_attn_zoo.models import transformer

    model = transformer(64, preset="tiny")
    status = tf.train.Checkpoint(model=model).restore(str(tmp_path / "ckpt0" / "ckpt-3"))
    status.expect_partial().assert_existing_objects_matched()

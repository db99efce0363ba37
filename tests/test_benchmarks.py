"""The benchmarks run (smoke mode): they are measurements, not tests, but must not rot."""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_decode_speed_smoke(tmp_path):
    # A subprocess: the benchmark seeds TensorFlow, which clears the kernel cache of
    # the process (and with it eagerly created SentencePiece resources of other tests).
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "decode_speed.py"), "--smoke",
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "ratio ours/keras-hub" in completed.stdout
    [path] = tmp_path.glob("decode_speed-*-smoke.json")
    results = json.loads(path.read_text())
    assert {(row["batch"], row["beam"]) for row in results["translate"]} == {
        (1, 1), (4, 1), (1, 2), (4, 2)}
    assert all(row["sentences_per_s"] > 0 for row in results["translate"])
    comparison = results["comparison"]
    assert comparison["ratio_ours_over_keras_hub"] > 0
    assert comparison["ours_long_ratio"] > 0 and comparison["keras_hub_long_ratio"] > 0

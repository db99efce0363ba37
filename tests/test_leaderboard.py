"""recipes/leaderboard.py --quick on tiny files: both files, one row per model, resumable."""

import json
import os
import pathlib
import subprocess
import sys

from tests.conftest import make_synthetic_parallel_sentences

REPO = pathlib.Path(__file__).resolve().parents[1]


def _write_split(directory, name, pairs):
    source, target = directory / f"{name}.de", directory / f"{name}.en"
    source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    target.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return source, target


# Two models of two families keep the test short; every builder is
# trained through the same recipe code by tests/test_recipe_options.py.
MODELS = ["transformer", "bahdanau_rnn"]


def test_quick_leaderboard_writes_one_row_per_model(tmp_path):
    pairs = make_synthetic_parallel_sentences(260, seed=3)
    train_src, train_tgt = _write_split(tmp_path, "train", pairs[:240])
    test_src, test_tgt = _write_split(tmp_path, "test", pairs[240:])
    output = tmp_path / "board"
    command = [
        sys.executable, str(REPO / "recipes" / "leaderboard.py"), "--quick",
        "--preset", "tiny", "--output-dir", str(output), "--decode-batch", "20",
        "--data", "files", "--train-src", str(train_src), "--train-tgt", str(train_tgt),
        "--test-src", str(test_src), "--test-tgt", str(test_tgt),
        "--max-steps", "2", "--eval-limit", "5", "--vocab-size", "120",
        "--batch-tokens", "256", "--max-length", "32", "--models", ",".join(MODELS),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env=env, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-3000:]

    document = json.loads((output / "leaderboard.json").read_text(encoding="utf-8"))
    rows = document["rows"]
    assert sorted(row["model"] for row in rows) == sorted(MODELS)
    markdown = (output / "leaderboard.md").read_text(encoding="utf-8")
    for model in MODELS:
        assert f"| {model} |" in markdown
    finished = [row for row in rows if row["status"] == "ok"]
    # Every model of the Transformer family and RNNsearch trains on plain pairs.
    assert {"transformer", "bahdanau_rnn"} <= {
        row["model"] for row in finished}
    for row in finished:
        assert row["bleu"] is not None and row["chrf"] is not None
        assert row["params"] > 0 and row["train_target_tokens_per_second"] > 0
        assert row["decode_sentences_per_second"] > 0
        assert row["paper_gain"]
        assert (output / row["model"] / "leaderboard_row.json").exists()
    for row in rows:
        if row["status"] != "ok":
            assert row["error"]  # e.g. the eager translator until its data path lands

    # Resumable: run again (killed or not), finished models are skipped.
    again_models = sorted(row["model"] for row in finished)[:2]
    again = subprocess.run(command + ["--models", ",".join(again_models)],
                           capture_output=True, text=True, timeout=600, env=env,
                           cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished before") == len(again_models)
    assert "training (" not in again.stdout

"""Kill -9 a real training run mid-epoch and restart it with the same command."""

import json
import pathlib
import re
import signal
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def write_corpus(directory, pairs):
    source, target = directory / "train.de", directory / "train.en"
    source.write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    target.write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    return source, target


def newest_registered_step(checkpoints):
    """Step of the checkpoint `tf.train.CheckpointManager` last finished, or -1."""
    state = checkpoints / "checkpoint"
    try:
        text = state.read_text()
    except FileNotFoundError:
        return -1
    match = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.MULTILINE)
    return int(match.group(1)) if match else -1


def test_sigkill_then_restart_resumes_from_the_last_checkpoint(tmp_path, tiny_parallel_corpus,
                                                               monkeypatch):
    source, target = write_corpus(tmp_path, tiny_parallel_corpus * 4)
    run_dir = tmp_path / "run"
    command = [
        sys.executable, str(REPO / "recipes" / "train_wmt.py"),
        "--data", "files", "--train-src", str(source), "--train-tgt", str(target),
        "--preset", "tiny", "--vocab-size", "200", "--batch-tokens", "300",
        "--max-steps", "400", "--checkpoint-every", "10", "--no-export", "--quiet",
        "--output-dir", str(run_dir),
    ]
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    checkpoints = run_dir / "checkpoints"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            if newest_registered_step(checkpoints) >= 20:
                break
            assert first.poll() is None, first.stderr.read()[-3000:]
            time.sleep(0.2)
        else:
            raise AssertionError("no checkpoint at step 20 within 240 s")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        first.kill()
    monkeypatch.chdir(tmp_path)  # where the killed process ran
    # The kill may land while a newer checkpoint's files are half written: the
    # manager's state file names only finished ones, and that is what resumes.
    killed_at = newest_registered_step(checkpoints)
    assert killed_at >= 20

    # The same command again, one step further (a second step would only retrace
    # the training step for a new batch shape). The kill is what needs a
    # process; the restart runs the recipe's `main` in this one (a second
    # process only paid TensorFlow's import again): it starts from the files alone.
    from tests.conftest import load_recipe

    second_argv = command[2:]
    second_argv[second_argv.index("400")] = str(killed_at + 1)
    assert load_recipe("train_wmt").main(second_argv) == 0
    results = json.loads((run_dir / "results.json").read_text())
    # Lost at most one checkpoint interval: it restarted from the newest one.
    assert results["resumed_from_step"] == killed_at
    assert results["steps"] == killed_at + 1
    # train_seconds are the second session's; the clock adds the first one's.
    first_session = json.loads((run_dir / "progress.json").read_text())[str(killed_at)]
    assert results["training_clock_seconds"] >= first_session["seconds"] + results[
        "train_seconds"] - 0.2
    print(f"killed after the checkpoint of step {killed_at}; "
          f"finished at {results['steps']}")


def test_write_atomically_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    from keras_attn_zoo.files import write_atomically

    path = tmp_path / "deep" / "cell.json"
    write_atomically(path, "first\n")
    write_atomically(path, b"second\n")
    assert path.read_bytes() == b"second\n"
    assert [p.name for p in path.parent.iterdir()] == ["cell.json"]

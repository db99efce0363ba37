"""recipes/leaderboard.py --jobs: cells in parallel processes, each on its own cores.

Its own file so that the test suite's workers (`--dist loadfile`) can run it beside
the rest of the leaderboard's tests.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.conftest import load_recipe
from tests.conftest import make_synthetic_parallel_sentences
from tests.conftest import write_parallel_files

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_jobs_split_the_cores_and_each_cell_process_runs_its_cell_alone(monkeypatch):
    from keras_attn_zoo.leaderboard.jobs import core_groups

    assert core_groups(2, cpus=[0, 1, 2]) == [[0, 1], [2]]
    assert core_groups(2, cpus=[5, 3]) == [[3], [5]]
    assert core_groups(1, cpus=[0, 1]) == [[0, 1]]
    with pytest.raises(ValueError, match="3 jobs want a core each.*may use 2"):
        core_groups(3, cpus=[0, 1])
    monkeypatch.syspath_prepend(str(REPO / "recipes"))  # it imports train_wmt
    recipe = load_recipe("leaderboard")
    # The cell's process: the same command for that cell alone, one job, no table.
    argv = ["--models", "transformer,GMM", "--seeds=0,1", "--jobs", "2", "--readme",
            "docs/leaderboard.md", "--steps", "4", "--patience", "1"]
    command = recipe.cell_process_command(argv, "GMM", 1)
    assert command[2:] == ["--steps", "4", "--patience", "1", "--models", "GMM",
                           "--seeds", "1", "--jobs", "1", "--no-report"]
    args = recipe.parse_args(command[2:])
    assert (args.models, args.seeds, args.jobs, args.no_report, args.readme) == (
        ["GMM"], [1], 1, True, None)
    for other in (["--report-only"], ["--partial"], ["--time-seeds"], ["--adopt-run", "x"]):
        with pytest.raises(SystemExit):
            recipe.parse_args(["--jobs", "2", "--models", "GMM", "--seeds", "0", *other])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not shutil.which("taskset"),
                    reason="two cores and taskset (util-linux) to pin two cell processes")
def test_jobs_train_cells_in_parallel_processes_pinned_to_their_own_cores(tmp_path):
    pairs = make_synthetic_parallel_sentences(200, seed=5)
    files = write_parallel_files(tmp_path, {"train": pairs[:170], "valid": pairs[170:185],
                                            "test": pairs[185:]})
    runs, results = tmp_path / "runs", tmp_path / "results"
    command = [
        sys.executable, str(REPO / "recipes" / "leaderboard.py"), "--quick",
        "--preset", "tiny", "--output-dir", str(runs), "--results-dir", str(results),
        "--decode-batch", "8", "--decode-repeats", "1", "--data", "files",
        "--steps", "2", "--cap-minutes", "30", "--valid-every", "1", "--patience", "1",
        *(item for name, path in files.items()
          for item in (f"--{name.replace('_', '-')}", str(path))), "--eval-limit", "8",
        "--vocab-size", "120", "--batch-tokens", "256", "--max-length", "32",
        "--models", "transformer", "--seeds", "0,1", "--jobs", "2"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               cwd=tmp_path, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-3000:]
    out = completed.stdout
    assert "FAILED" not in out, out[-4000:]
    # Each cell in its own process on its own core, its output in its own log.
    assert "[transformer/seed0] started on core(s) " in out, out[-2000:]
    cores = sorted(line.split("core(s) ")[1].split(",")[0] for line in out.splitlines()
                   if "started on core(s)" in line)
    assert len(cores) == 2 and cores[0] != cores[1]
    cells = []
    for seed in (0, 1):
        cell = json.loads((results / "transformer" / f"seed{seed}" / "cell.json").read_text())
        cells.append(cell)
        assert cell["machine"]["cpus_usable"] == 1  # pinned: TensorFlow sized its pools to it
        assert f"--seeds {seed} --jobs 1 --no-report" in cell["command"]
        log = (runs / "logs" / f"transformer-seed{seed}.log").read_text()
        assert f"[transformer/seed{seed}] BLEU" in log
    # The vocabulary was trained once, before the processes: one for both cells.
    assert cells[0]["vocabulary"] == cells[1]["vocabulary"]
    assert cells[0]["final_loss"] != cells[1]["final_loss"]  # different seeds
    # The table is written once, by the command, from both cells.
    table = (results / "leaderboard.md").read_text()
    assert "| transformer |" in table and "| 2 |" in table

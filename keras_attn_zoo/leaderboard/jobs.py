"""Cells in parallel processes, each on its own cores (`recipes/leaderboard.py --jobs N`).

A cell is one process's work (its checkpoints, its training clock, its wall-time
cap), so N processes fill the table N times as fast on a machine with the cores
for them. Each process is pinned to its own share of the cores (`taskset`):
TensorFlow sizes its thread pools by the cores a process may use, so the
processes do not oversubscribe the machine, and each cell's `machine` record
says how many cores it had (`cpus_usable`). The files every cell shares - the
SentencePiece vocabulary and the gold links - are made once before the first
process starts: two cells training the vocabulary at once could leave the table
two. A process per cell also means a crashed cell costs only itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from keras_attn_zoo.leaderboard.cells import CELL_FILE
from keras_attn_zoo.leaderboard.cells import align_gold
from keras_attn_zoo.leaderboard.cells import cell_dir
from keras_attn_zoo.leaderboard.cells import cell_name
from keras_attn_zoo.leaderboard.cells import shared_vocabulary

POLL_SECONDS = 2.0


def core_groups(jobs, cpus=None):
    """`jobs` disjoint, contiguous lists of the cores this process may use (or
    `cpus`), as even as they divide: 2 jobs over cores 0-2 get [0, 1] and [2]."""
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs > len(cpus):
        raise ValueError(f"{jobs} jobs want a core each, and this process may use "
                         f"{len(cpus)} ({', '.join(map(str, cpus))})")
    size, extra = divmod(len(cpus), jobs)
    groups, start = [], 0
    for index in range(jobs):
        end = start + size + (index < extra)
        groups.append(cpus[start:end])
        start = end
    return groups


def pending_cells(board):
    """The (model, seed) cells without a cell file, seed-major like a sequential run."""
    return [(model, seed) for seed in board.seeds for model in board.models
            if not (cell_dir(board.results_dir, model, seed) / CELL_FILE).exists()]


def prepare_shared_files(board, cells):
    """The vocabulary of every size the cells use, and the gold links, made once."""
    configs = {}
    for model, seed in cells:
        config = board.config_of(model, seed)
        configs.setdefault(config.vocab_size, config)
    for config in configs.values():
        print(f"shared vocabulary: {shared_vocabulary(board, config)}", flush=True)
    print(f"gold links: {align_gold(board)}", flush=True)


def run_in_processes(board, command_of, jobs, log_dir):
    """Runs each pending cell as its own process, `jobs` at a time, each pinned to
    its own cores; `command_of(model, seed)` is the process's argv. A cell's output
    goes to `log_dir/<model>-seed<N>.log`. Returns the cells that left no cell file
    (failed, killed), each with its process's exit status."""
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit("--jobs pins each cell's process to its own cores with taskset "
                         "(util-linux); install it, or run the cells one by one (--jobs 1)")
    groups = core_groups(jobs)
    queue = pending_cells(board)
    if not queue:
        return {}
    prepare_shared_files(board, queue)
    log_dir.mkdir(parents=True, exist_ok=True)
    free, running, unfinished = list(range(jobs)), {}, {}
    try:
        while queue or running:
            while queue and free:
                slot, (model, seed) = free.pop(0), queue.pop(0)
                cores = ",".join(map(str, groups[slot]))
                log_path = log_dir / f"{model}-seed{seed}.log"
                log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
                process = subprocess.Popen(
                    [taskset, "--cpu-list", cores, *command_of(model, seed)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                running[process] = (slot, model, seed, log)
                print(f"[{cell_name(model, seed)}] started on core(s) {cores}, "
                      f"log {log_path}", flush=True)
            time.sleep(POLL_SECONDS)
            for process in [p for p in running if p.poll() is not None]:
                slot, model, seed, log = running.pop(process)
                log.close()
                free.append(slot)
                if (cell_dir(board.results_dir, model, seed) / CELL_FILE).exists():
                    print(f"[{cell_name(model, seed)}] finished", flush=True)
                else:
                    unfinished[model, seed] = process.returncode
                    print(f"[{cell_name(model, seed)}] left no cell file (exit status "
                          f"{process.returncode}): see {log.name}", flush=True)
    finally:  # interrupted: the cells stop with this command (each resumes on a rerun)
        for process, (_, _, _, log) in running.items():
            process.terminate()
            process.wait()
            log.close()
    return unfinished

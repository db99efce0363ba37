#!/usr/bin/env python
"""Runs several benchmarks' ``--smoke`` modes in turn, in one Python process.

Each benchmark alone pays TensorFlow's import and start-up (about 10 s on two
cores); here they pay it once. Each script's ``main`` runs with ``--smoke
--output-dir <output-dir>/<name>``; its stdout goes to ``<name>/stdout.txt`` and,
if it fails, its traceback to ``<name>/error.txt`` (the others still run). The
exit status is 1 if any failed.

Usage:
    python benchmarks/smoke.py --output-dir DIR decode_speed mfu ...

``ct2_speed`` sets TensorFlow's thread pools (the same threads for both of its
engines, one inter-op thread), which only works before TensorFlow starts and
would then hold for every later benchmark: it runs in a child process of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import pathlib
import sys
import subprocess
import time
import traceback

BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parent
# They set process-wide state that the others must not inherit (thread pools).
OWN_PROCESS = ("ct2_speed",)


def reset_keras():
    """Drops what a benchmark left in Keras' global state (graph names, dtype policy)."""
    import keras

    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy("float32")


def run_smokes(names, output_dir):
    """``{name: seconds or the traceback text}`` of each benchmark's smoke run."""
    if str(BENCHMARKS_DIR) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS_DIR))
    outcomes = {}
    for name in names:
        if name in OWN_PROCESS and len(names) > 1:
            subprocess.run([sys.executable, __file__, "--output-dir", str(output_dir),
                            name], check=False)
            error = pathlib.Path(output_dir) / name / "error.txt"
            outcomes[name] = error.read_text() if error.exists() else 0.0
            continue
        directory = pathlib.Path(output_dir) / name
        directory.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with open(directory / "stdout.txt", "w", encoding="utf-8") as stdout, \
                contextlib.redirect_stdout(stdout):
            try:
                importlib.import_module(name).main(
                    ["--smoke", "--output-dir", str(directory)])
                outcomes[name] = round(time.perf_counter() - started, 1)
            except BaseException:  # noqa: BLE001  (SystemExit from argparse too)
                outcomes[name] = traceback.format_exc()
                (directory / "error.txt").write_text(outcomes[name], encoding="utf-8")
        reset_keras()
        print(f"{name}: {outcomes[name] if isinstance(outcomes[name], float) else 'FAILED'}",
              flush=True)
    return outcomes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("names", nargs="+", help="benchmark script names (no .py)")
    args = parser.parse_args(argv)
    outcomes = run_smokes([name.removesuffix(".py") for name in args.names],
                          args.output_dir)
    return 0 if all(isinstance(v, float) for v in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

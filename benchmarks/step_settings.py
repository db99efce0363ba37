#!/usr/bin/env python
"""Settings of the training step, measured: threads, allocator, oneDNN, the optimiser.

TensorFlow reads the process settings when it starts, so each setting runs in a
fresh process (``common.run_isolated`` with the setting's environment
variables): it measures the machine's matmul rate, then times
``Trainer.train_on_batch`` of a zoo model (``--model``, default the small
Transformer; no XLA) on the synthetic Ding-like batches of
``train_throughput.py``: the first call (the step's trace), then the steps.
Settings alternate in rounds (A B C, C B A, ...), so the machine's load falls on
all; each row reports the median tokens/s, the MFU against the same process's
matmul rate, the first call's seconds, and the ratios to ``default``
(TensorFlow's own choices: as many inter- and intra-op threads as cores, its
default CPU allocator, oneDNN on; the zoo's fused Adam update). ``Keras Adam``
trains with ``keras.optimizers.Adam``'s update instead.

How to spend the cores on several runs (the recipe cells and the leaderboard
train many): ``1 process x 1 thread`` is one run on one core; ``2 processes x 1
thread`` starts two such processes at once, which warm up, wait for each other
(a file barrier) and then step side by side; its tokens/s is the two processes'
tokens over the span from the first one's timed start to the last one's end,
against ``default``'s one process on every core.

Usage:
    python benchmarks/step_settings.py --precision float32 --rounds 2
    python benchmarks/step_settings.py --smoke

Writes ``benchmarks/results/step_settings[-<tag>]-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import statistics
import tempfile
import time

import common


def setting(environment=None, optimizer="zoo", processes=1):
    """A contender: environment variables, `train_throughput.make_optimizer`'s kind,
    and how many processes step side by side."""
    return {"environment": environment or {}, "optimizer": optimizer,
            "processes": processes}


ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


SETTINGS = {
    "default": setting(),
    "inter-op 1": setting({"TF_NUM_INTEROP_THREADS": "1"}),
    "pooled allocator": setting({"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "pooled allocator + inter-op 1": setting({"TF_CPU_ALLOCATOR_USE_BFC": "true",
                                              "TF_NUM_INTEROP_THREADS": "1"}),
    "oneDNN off": setting({"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "Keras Adam": setting(optimizer="keras"),
    "1 process x 1 thread": setting(ONE_THREAD),
    "2 processes x 1 thread": setting(ONE_THREAD, processes=2),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--precision", default="float32", help="float32 | bf16")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-tokens", type=int, default=6000)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per process")
    parser.add_argument("--output-dir", default=str(common.RESULTS_DIR))
    parser.add_argument("--tag", default="", help="suffix of the results file name")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.batch_tokens, args.length = "tiny", 64, 8
        args.rounds, args.steps, args.settings = 1, 1, "default,Keras Adam,2 processes x 1 thread"
    args.settings = common.str_list(args.settings)  # names hold no commas
    unknown = sorted(set(args.settings) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {sorted(SETTINGS)}")
    return args


def wait_for_parties(directory, parties, timeout=600.0):
    """A barrier across processes: marks this one arrived in `directory`, then
    waits until `parties` have."""
    directory = pathlib.Path(directory)
    (directory / str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while sum(1 for _ in directory.iterdir()) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{parties} processes did not all reach the barrier in "
                               f"{timeout:g} s")
        time.sleep(0.01)


def measure(model, preset, precision, batch_tokens, length, steps, smoke, optimizer="zoo",
            barrier=None):
    """In the child: the matmul rate, then the first call's seconds, the step's
    tokens/s and MFU. `barrier` (`{"directory", "parties"}`): wait for the other
    processes after the warm-up, so that the timed steps run side by side."""
    import keras

    import train_throughput
    from keras_attn_zoo.evaluation.flops import training_flops
    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.training.seeding import seed_everything
    from keras_attn_zoo.workflow import MIXED_PRECISION_POLICIES

    vocabulary = 64 if smoke else 8000
    rate = common.matmul_rate("bfloat16" if precision == "bf16" else "float32",
                              size=256 if smoke else 2048)["gflops"]
    batches = train_throughput.equal_length_batches(train_throughput.synthetic_batches(
        4, max(1, batch_tokens // length), length, max(2, length // 2), vocabulary))
    keras.mixed_precision.set_global_policy(
        MIXED_PRECISION_POLICIES["bf16" if precision == "bf16" else "none"])
    seed_everything(0)
    zoo_model = build_model(model, vocabulary, preset=preset)
    step = train_throughput.zoo_step(zoo_model, optimizer=optimizer)
    first_call, _ = common.timed_once(lambda: train_throughput.relax(step, batches))
    one_step = train_throughput.stepper(step, batches, 1)
    common.time_call(one_step, repeats=1, warmup=1)  # two warm-up steps
    arrived = time.time()
    if barrier:
        wait_for_parties(barrier["directory"], barrier["parties"])
    timed_start = time.time()
    timing, _ = common.time_call(one_step, repeats=steps, warmup=0)
    timed_end = time.time()
    stats = train_throughput.batch_statistics(batches)
    flops = training_flops(zoo_model, stats["batch_size"], stats["source_length"],
                           stats["target_length"])["total"]
    return {"matmul_gflops": rate, "first_call_seconds": first_call,
            "step_seconds": timing.median,
            "tokens_per_s": stats["mean_target_tokens"] / timing.median,
            "tokens_per_step": stats["mean_target_tokens"],
            "arrived": arrived, "timed_start": timed_start, "timed_end": timed_end,
            "mfu": flops / timing.median / (rate * 1e9), "load": common.load_average()}


def side_by_side(runs, steps):
    """Processes that stepped at once, as one contender: all their target tokens
    over the span from the first timed start to the last end. (Each process's
    own matmul rate was measured while the others started, so no MFU.)"""
    span = max(run["timed_end"] for run in runs) - min(run["timed_start"] for run in runs)
    return {"tokens_per_s": sum(run["tokens_per_step"] for run in runs) * steps / span,
            "first_call_seconds": max(run["first_call_seconds"] for run in runs),
            "mfu": None,
            "matmul_gflops": statistics.median(run["matmul_gflops"] for run in runs),
            "processes": runs}


def measure_setting(name, args):
    """One sample of a setting: its process(es) in its environment."""
    kwargs = dict(model=args.model, preset=args.preset, precision=args.precision,
                  batch_tokens=args.batch_tokens, length=args.length, steps=args.steps,
                  smoke=args.smoke, optimizer=SETTINGS[name]["optimizer"])
    processes = SETTINGS[name]["processes"]
    saved = dict(os.environ)
    os.environ.update(SETTINGS[name]["environment"])  # the children inherit it
    try:
        if processes == 1:
            results = [common.run_isolated(__file__, "measure", kwargs)]
        else:
            with tempfile.TemporaryDirectory() as directory, \
                    concurrent.futures.ThreadPoolExecutor(processes) as pool:
                barrier = {"directory": directory, "parties": processes}
                results = list(pool.map(
                    lambda _: common.run_isolated(__file__, "measure",
                                                  dict(kwargs, barrier=barrier)),
                    range(processes)))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    failed = [result["error"] for result in results if "error" in result]
    if failed:
        raise RuntimeError(f"setting {name!r} failed: {failed[0]}")
    return results[0] if processes == 1 else side_by_side(results, args.steps)


def run(args):
    run_info = common.start_run()
    samples = {name: [] for name in args.settings}
    for round_index in range(args.rounds):
        order = args.settings if round_index % 2 == 0 else args.settings[::-1]
        for name in order:
            result = measure_setting(name, args)
            samples[name].append(result)
            mfu = "-" if result["mfu"] is None else f"{result['mfu']:.1%}"
            print(f"round {round_index} {name}: first call "
                  f"{result['first_call_seconds']:.2f} s, {result['tokens_per_s']:.0f} tok/s, "
                  f"MFU {mfu}, matmul {result['matmul_gflops']:.0f}", flush=True)
    def median(runs, key):
        return statistics.median(run[key] for run in runs)

    default = samples.get("default")
    rows = []
    for name, runs in samples.items():
        tokens, first_call = median(runs, "tokens_per_s"), median(runs, "first_call_seconds")
        rows.append({"setting": name, **SETTINGS[name],
                     "tokens_per_s": tokens, "first_call_seconds": first_call,
                     "first_call_over_default": (
                         first_call / median(default, "first_call_seconds")
                         if default else None),
                     "mfu": (None if runs[0]["mfu"] is None else median(runs, "mfu")),
                     "matmul_gflops": median(runs, "matmul_gflops"),
                     "over_default": (tokens / median(default, "tokens_per_s")
                                      if default else None),
                     "runs": runs})
    return {"model": args.model, "preset": args.preset, "precision": args.precision,
            "rows": rows}, run_info


COLUMNS = [("setting", "setting", ""), ("first_call_seconds", "first call s", ".2f"),
           ("first_call_over_default", "first call x default", ".3f"),
           ("tokens_per_s", "tok/s", ".0f"),
           ("mfu", "MFU", ".1%"), ("matmul_gflops", "matmul GFLOP/s", ".0f"),
           ("over_default", "x default", ".3f")]


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    common.print_table(results["rows"], COLUMNS,
                       f"\n{args.model} ({args.preset}, {args.precision}), medians over "
                       f"{args.rounds} alternating rounds:")
    name = "step_settings" + (f"-{args.tag}" if args.tag else "")
    path = common.write_results(name, results, args.output_dir,
                                smoke=args.smoke, run=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

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

Usage:
    python benchmarks/step_settings.py --precision float32 --rounds 2
    python benchmarks/step_settings.py --smoke

Writes ``benchmarks/results/step_settings[-<tag>]-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import os
import statistics

import common


def setting(environment=None, optimizer="zoo"):
    """A contender: environment variables, and `train_throughput.make_optimizer`'s kind."""
    return {"environment": environment or {}, "optimizer": optimizer}


SETTINGS = {
    "default": setting(),
    "inter-op 1": setting({"TF_NUM_INTEROP_THREADS": "1"}),
    "pooled allocator": setting({"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "pooled allocator + inter-op 1": setting({"TF_CPU_ALLOCATOR_USE_BFC": "true",
                                              "TF_NUM_INTEROP_THREADS": "1"}),
    "oneDNN off": setting({"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "Keras Adam": setting(optimizer="keras"),
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
        args.rounds, args.steps, args.settings = 1, 1, "default,inter-op 1,Keras Adam"
    args.settings = common.str_list(args.settings)  # names hold no commas
    unknown = sorted(set(args.settings) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {sorted(SETTINGS)}")
    return args


def measure(model, preset, precision, batch_tokens, length, steps, smoke, optimizer="zoo"):
    """In the child: the matmul rate, then the first call's seconds, the step's
    tokens/s and MFU."""
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
    timing, _ = common.time_call(train_throughput.stepper(step, batches, 1),
                                 repeats=steps, warmup=2)
    stats = train_throughput.batch_statistics(batches)
    flops = training_flops(zoo_model, stats["batch_size"], stats["source_length"],
                           stats["target_length"])["total"]
    return {"matmul_gflops": rate, "first_call_seconds": first_call,
            "step_seconds": timing.median,
            "tokens_per_s": stats["mean_target_tokens"] / timing.median,
            "mfu": flops / timing.median / (rate * 1e9), "load": common.load_average()}


def run(args):
    run_info = common.start_run()
    samples = {name: [] for name in args.settings}
    for round_index in range(args.rounds):
        order = args.settings if round_index % 2 == 0 else args.settings[::-1]
        for name in order:
            saved = dict(os.environ)
            os.environ.update(SETTINGS[name]["environment"])
            try:
                result = common.run_isolated(__file__, "measure", dict(
                    model=args.model, preset=args.preset, precision=args.precision,
                    batch_tokens=args.batch_tokens, length=args.length,
                    steps=args.steps, smoke=args.smoke,
                    optimizer=SETTINGS[name]["optimizer"]))
            finally:
                os.environ.clear()
                os.environ.update(saved)
            if "error" in result:
                raise RuntimeError(f"setting {name!r} failed: {result['error']}")
            samples[name].append(result)
            print(f"round {round_index} {name}: first call "
                  f"{result['first_call_seconds']:.2f} s, {result['tokens_per_s']:.0f} tok/s, "
                  f"MFU {result['mfu']:.1%}, matmul {result['matmul_gflops']:.0f}",
                  flush=True)
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
                     "mfu": median(runs, "mfu"),
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

#!/usr/bin/env python
"""Decode-loop speed of this checkout against another one, alternating.

Issue 34 replaced the searches' three ``tf.while_loop``s by one loop with
strategies (``keras_attn_zoo/decoding/loop.py``). This benchmark checks that
it costs nothing: each checkout runs in a worker process of its own (the
``rnn_throughput.py --baseline-tree`` protocol), builds the same seeded
random model and source batch, and times greedy search, sampling, beam search
and forced scoring, each inside ``tf.function(autograph=False)`` as the export
traces them. The parent asks the workers in turn (A B / B A ...), so load from
other processes hits both alike, and records the matmul rate and the load
average beside the times. The outputs of both checkouts are compared (ids,
scores, steps): a ratio of two searches that decode different tokens would
mean nothing.

Usage:
    python benchmarks/decode_loop.py --baseline-tree /work/main
    python benchmarks/decode_loop.py --smoke          # seconds: both workers this tree

Writes ``benchmarks/results/decode_loop-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import common
from rnn_throughput import WorkerProcess
from rnn_throughput import worker_main

REPO = pathlib.Path(__file__).resolve().parent.parent
SEARCHES = ("greedy", "sample", "beam4", "score")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", default=None,
                        help="another checkout whose keras_attn_zoo runs as the baseline")
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--output-length", type=int, default=30,
                        help="max_length_b with max_length_a=0: the steps of an "
                             "untrained model, which rarely emits EOS")
    parser.add_argument("--calls", type=int, default=2, help="calls per timed sample")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    common.add_common_arguments(parser, repeats=6, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.vocab_size, args.batch = "tiny", 200, 4
        args.output_length, args.repeats, args.calls = 6, 2, 1
        args.baseline_tree = args.baseline_tree or str(REPO)
    return args


# ---- the worker (one checkout) -------------------------------------------------------------


class Worker:
    """One checkout's model, sources and traced searches."""

    def __init__(self, spec):
        import keras
        import numpy as np
        import tensorflow as tf

        import keras_attn_zoo
        from keras_attn_zoo.decoding import beam_search, greedy_search
        from keras_attn_zoo.decoding import sample_search, score_targets
        from keras_attn_zoo.models import build_model

        self.spec = spec
        keras.utils.set_random_seed(0)
        model = build_model(spec["model"], spec["vocab_size"], preset=spec["preset"])
        rng = np.random.default_rng(0)
        sources = rng.integers(4, spec["vocab_size"], (spec["batch"], spec["source_length"]))
        sources[:, -1] = 3  # EOS
        self.sources = tf.constant(sources, tf.int32)
        limit = dict(max_length_a=0.0, max_length_b=float(spec["output_length"]))
        targets = tf.constant(rng.integers(4, spec["vocab_size"],
                                           (spec["batch"], spec["output_length"])), tf.int32)

        def graph(function):
            return tf.function(function, autograph=False)

        self.searches = {
            "greedy": graph(lambda s: greedy_search(model, s, **limit)),
            "sample": graph(lambda s: sample_search(model, s, top_k=20, seed=1, **limit)),
            "beam4": graph(lambda s: beam_search(model, s, beam_size=4, **limit)),
            "score": graph(lambda s: score_targets(model, s, targets)),
        }
        self.info = {"keras_attn_zoo": str(pathlib.Path(keras_attn_zoo.__file__).parent),
                     "outputs": {}}
        for name, search in self.searches.items():
            started = time.perf_counter()
            result = search(self.sources)  # traces
            self.info[f"{name}_trace_seconds"] = time.perf_counter() - started
            self.info["outputs"][name] = {
                key: np.asarray(value).tolist() for key, value in result.items()
                if key in ("ids", "scores", "steps", "total")}
        self.info.update(self.matmul())

    def matmul(self):
        return {"matmul_gflops": common.matmul_rate(size=1024, repeats=3)["gflops"]}

    def handle(self, command):
        if command["do"] == "time":
            search = self.searches[command["search"]]
            cpu = time.process_time()
            timing, _ = common.time_call(lambda: search(self.sources),
                                         repeats=command["calls"], warmup=0)
            return {"seconds": sum(timing.times), "cpu_seconds": time.process_time() - cpu}
        if command["do"] == "matmul":
            return self.matmul()
        raise ValueError(f"unknown command {command!r}")


# ---- the parent --------------------------------------------------------------------------


def run(args):
    spec = {key: getattr(args, key) for key in (
        "model", "preset", "vocab_size", "batch", "source_length", "output_length")}
    trees = {"this": REPO, "baseline": pathlib.Path(args.baseline_tree).resolve()}
    workers, infos = {}, {}
    try:
        for label, tree in trees.items():  # one at a time: tracing takes the cores
            workers[label] = WorkerProcess(tree, spec, script=__file__)
            infos[label] = workers[label].reply()
            print(f"{label}: {infos[label]['keras_attn_zoo']}, matmul "
                  f"{infos[label]['matmul_gflops']:.0f} GFLOP/s", flush=True)
        same_outputs = {name: infos["this"]["outputs"][name]
                        == infos["baseline"]["outputs"][name] for name in SEARCHES}
        times = {(label, name): [] for label in trees for name in SEARCHES}
        # CPU seconds of the worker's threads: on a loaded machine less
        # dependent on its share of the cores than wall time.
        cpu_times = {key: [] for key in times}
        loads, labels = [], list(trees)
        for round_index in range(max(args.repeats, 1)):
            order = labels if round_index % 2 == 0 else labels[::-1]
            for name in SEARCHES:
                for label in order:
                    timed = workers[label].ask(do="time", search=name, calls=args.calls)
                    times[(label, name)].append(timed["seconds"] / args.calls)
                    cpu_times[(label, name)].append(timed["cpu_seconds"] / args.calls)
            loads.append(common.load_average())
            print(f"round {round_index + 1}/{args.repeats}: load {loads[-1]}", flush=True)
        matmul_end = {label: worker.ask(do="matmul")["matmul_gflops"]
                      for label, worker in workers.items()}
    finally:
        for worker in workers.values():
            worker.close()
    rows = []
    for name in SEARCHES:
        this, base = times[("this", name)], times[("baseline", name)]
        round_ratios = [b / t for t, b in zip(this, base)]
        this_cpu = statistics.median(cpu_times[("this", name)])
        base_cpu = statistics.median(cpu_times[("baseline", name)])
        rows.append({
            "search": name, "this_seconds": statistics.median(this),
            "baseline_seconds": statistics.median(base),
            "this_over_baseline_speed": statistics.median(base) / statistics.median(this),
            "median_round_ratio": statistics.median(round_ratios),
            "round_ratios": round_ratios, "this_times": this, "baseline_times": base,
            "this_cpu_seconds": this_cpu, "baseline_cpu_seconds": base_cpu,
            "this_over_baseline_cpu": base_cpu / this_cpu,
            "same_outputs": same_outputs[name],
            "steps": infos["this"]["outputs"][name].get("steps"),
            "this_trace_seconds": infos["this"][f"{name}_trace_seconds"],
            "baseline_trace_seconds": infos["baseline"][f"{name}_trace_seconds"],
        })
    return {"spec": spec, "calls_per_sample": args.calls, "repeats": args.repeats,
            "trees": {label: infos[label]["keras_attn_zoo"] for label in trees},
            "matmul_gflops_start": {label: infos[label]["matmul_gflops"] for label in trees},
            "matmul_gflops_end": matmul_end, "load_average_per_round": loads,
            "rows": rows}


COLUMNS = [("search", "search", ""), ("baseline_seconds", "baseline s", ".4f"),
           ("this_seconds", "this s", ".4f"),
           ("this_over_baseline_speed", "this/base speed", ".3f"),
           ("median_round_ratio", "median round ratio", ".3f"),
           ("this_over_baseline_cpu", "this/base CPU s", ".3f"),
           ("same_outputs", "same outputs", ""), ("steps", "steps", "")]


def main(argv=None):
    args = parse_args(argv)
    if args.worker is not None:
        worker_main(args.worker, make_worker=Worker)
        return 0
    if args.baseline_tree is None:
        raise SystemExit("--baseline-tree PATH is required (or --smoke).")
    run_info = common.start_run()
    results = run(args)
    path = common.write_results("decode_loop", results, output_dir=args.output_dir,
                                smoke=args.smoke, run=run_info)
    common.print_table(results["rows"], COLUMNS,
                       title=f"decode loop: this over the baseline, {args.model} "
                             f"{args.preset}, batch {args.batch}, alternating")
    print(f"matmul GFLOP/s start {results['matmul_gflops_start']}, end "
          f"{results['matmul_gflops_end']}; load per round "
          f"{results['load_average_per_round']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

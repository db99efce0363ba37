#!/usr/bin/env python
"""Training throughput of the RNN families, this checkout against another (issue 36).

RNNsearch (``bahdanau_rnn``) and the eager translator (``eager_translator``), with
our Transformer as a peer, trained with ``Trainer.train_on_batch`` (the step
``recipes/train_wmt.py`` runs; float32, no XLA) on the same batches: target tokens
per second, MFU against the same process's matmul rate, and the load average.

Each checkout runs in a worker process of its own (``--worker``) that imports
``keras_attn_zoo`` from that checkout: this one, and with ``--baseline-tree PATH``
another (e.g. ``git worktree add /tmp/rnn-base main``). The workers build the
same models from the same seed, so they start from the same weights; they load
the same batches (made once by the parent, saved to a ``.npz``), measure their
own matmul rate, and wait. The parent then asks for one timed call at a time,
alternating the checkouts (A B, B A, ...) for every model, so a slow period of the
shared machine is spread over both; the idle worker sleeps on its pipe. The
result has tokens/s per checkout and model, the ratio this / baseline, and each
worker's loss of batch 0 before training (``training=False``) and of its first
training step: equal weights and equal math give equal losses, so the ratio is
of the same computation. With the Transformer in both workers (unchanged code)
its ratio shows how fair the alternation was.

Batches are ``train_throughput``'s: synthetic (real lengths uniform in
``--min-length``..``--length``) or ``--data ding`` (one bucket of
``make_dataset``'s Ding batches), source and target equally long (the eager
translator reads one source token per target token); ``--batch-tokens`` defaults
to the recipe's 1500.

``--profile`` also writes, per checkout and model, where one step's time goes:
TensorFlow's profiler traces one ``train_on_batch`` and the kernel times of its
ops are summed by phase (forward, backward, optimizer), part (encoder, recurrent
cell, attention, output projection, loss, ...) and whether they ran inside a
recurrent loop (``benchmarks/results/rnn_profile-<date>.json``); ``wall_share``
splits each stretch of wall time among the ops running at once (kernel times
count concurrent ops in full: two backward matmuls running side by side look
twice as long as they cost).

``--this-env`` / ``--baseline-env`` set environment variables in one worker
only, so a process setting (e.g. ``TF_ENABLE_ONEDNN_OPTS``) is alternated like
code; without ``--baseline-tree`` both workers run this checkout.

Usage:
    python benchmarks/rnn_throughput.py --data ding --baseline-tree /tmp/rnn-base
    python benchmarks/rnn_throughput.py --profile --repeats 1
    python benchmarks/rnn_throughput.py --baseline-full-logits   # real-token projection on vs off
    python benchmarks/rnn_throughput.py --this-env TF_ENABLE_ONEDNN_OPTS=1 \
        --baseline-env TF_ENABLE_ONEDNN_OPTS=0   # a process setting, alternated
    python benchmarks/rnn_throughput.py --smoke   # seconds; the checkout against itself

Writes ``benchmarks/results/rnn_throughput-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

import common

REPO = pathlib.Path(__file__).resolve().parent.parent
MODELS = ("bahdanau_rnn", "eager_translator", "transformer")
# The worker's reply lines start with this (TensorFlow may print on stdout too).
REPLY = "RNN_THROUGHPUT_REPLY "


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-tokens", type=int, default=1500,
                        help="padded tokens per batch (default: the recipe's 1500)")
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--min-length", type=int, default=12)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2,
                        help="training steps per timed call (default 2)")
    parser.add_argument("--data", default="synthetic", help="synthetic | ding")
    parser.add_argument("--baseline-tree", default=None,
                        help="another checkout whose keras_attn_zoo runs as the baseline")
    parser.add_argument("--baseline-full-logits", action="store_true",
                        help="the baseline's Trainer scores the full logits "
                             "(project_real_tokens=False); without --baseline-tree "
                             "the baseline is this checkout")
    parser.add_argument("--this-env", default="",
                        help="KEY=VALUE,... set in this checkout's worker only (e.g. "
                             "TF_ENABLE_ONEDNN_OPTS=1: process settings alternated)")
    parser.add_argument("--baseline-env", default="",
                        help="KEY=VALUE,... set in the baseline's worker only")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one step per checkout and model")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tag", default=None,
                        help="suffix of the results files' names (e.g. before, after)")
    common.add_common_arguments(parser, repeats=5, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.batch_tokens, args.length, args.min_length = "tiny", 64, 8, 4
        args.vocab_size, args.batches, args.steps = 64, 2, 1
        args.repeats, args.warmup = 2, 1
        args.data = "synthetic"
        args.models = "bahdanau_rnn,eager_translator"
        # The alternation and profile paths, on this checkout against itself.
        args.baseline_tree = args.baseline_tree or str(REPO)
        args.profile = True
    if (args.baseline_full_logits or args.baseline_env) and not args.baseline_tree:
        args.baseline_tree = str(REPO)
    args.models = common.str_list(args.models)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown --models {unknown}; choose from {list(MODELS)}")
    return args


# ---- the worker: one checkout's keras_attn_zoo -------------------------------------

def load_batches(path):
    import numpy as np
    import tensorflow as tf

    arrays = np.load(path)
    count = len([k for k in arrays.files if k.startswith("labels_")])
    return [({"source_ids": tf.constant(arrays[f"source_{i}"]),
              "target_ids": tf.constant(arrays[f"target_{i}"])},
             tf.constant(arrays[f"labels_{i}"])) for i in range(count)]


def batch_loss(model, inputs, labels):
    """Label-smoothed token loss of one batch, dropout off (the Trainer's loss)."""
    from keras_attn_zoo.training.losses import token_loss_sum

    loss_sum, tokens, _ = token_loss_sum(labels, model(inputs, training=False), 0.1)
    return float(loss_sum / tokens)


class Worker:
    """Models, steps and batches of one checkout, driven by the parent's commands."""

    def __init__(self, spec):
        import keras_attn_zoo
        import train_throughput
        from keras_attn_zoo.evaluation.flops import training_flops
        from keras_attn_zoo.models import build_model
        from keras_attn_zoo.training.seeding import seed_everything

        self.batches = load_batches(spec["batches"])
        stats = train_throughput.batch_statistics(self.batches)
        self.steps = spec["steps"]
        self.info = {"keras_attn_zoo": str(pathlib.Path(keras_attn_zoo.__file__).parent),
                     "pid": os.getpid(), "batches": stats, "models": {},
                     "trainer_options": spec.get("trainer_options", {})}
        rate = matmul_rates(spec["matmul_size"])
        self.info["matmul_gflops_start"] = rate["gflops"]
        self.info["matmul_gflop_per_cpu_s_start"] = rate["gflop_per_cpu_s"]
        self.steppers, self.train_steps = {}, {}
        for name in spec["models"]:
            seed_everything(0)
            model = build_model(name, spec["vocab_size"], preset=spec["preset"])
            inputs, labels = self.batches[0]
            eval_loss = batch_loss(model, inputs, labels)
            # Only options a worker is given: an older checkout's Trainer may lack them.
            step = train_throughput.zoo_step(model, **spec.get("trainer_options", {}))
            first = step(inputs, labels)  # the same first step in every checkout
            train_throughput.relax(step, self.batches)
            self.train_steps[name] = step
            self.steppers[name] = train_throughput.stepper(step, self.batches, self.steps)
            for _ in range(spec["warmup"]):
                self.steppers[name]()
            flops = training_flops(model, stats["batch_size"], stats["source_length"],
                                   stats["target_length"])["total"]
            self.info["models"][name] = {
                "params": model.count_params(), "eval_loss_batch0": eval_loss,
                "first_step_loss": first["loss"], "train_gflop_per_step": flops / 1e9}

    def handle(self, command):
        if command["do"] == "time":
            cpu_started = time.process_time()
            seconds, _ = common.timed_once(self.steppers[command["model"]])
            return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu_started}
        if command["do"] == "matmul":
            return matmul_rates(command["size"])
        if command["do"] == "profile":
            return profile_step(self.train_steps[command["model"]], self.batches[0],
                                command["logdir"])
        raise ValueError(f"unknown command {command!r}")


def matmul_rates(size, repeats=5):
    """``common.matmul_rate`` (GFLOP/s of wall time) and GFLOP per CPU second.

    On a machine shared with other jobs the wall rate falls with this process's
    share of the cores; FLOPs per second of this process's CPU time do not, so
    the training steps' FLOPs per CPU second over it is an MFU that the load
    moves less. (CPU time covers ``matmul_rate``'s warm-up call too: a lower
    bound of the rate.)
    """
    started = time.process_time()
    rate = common.matmul_rate("float32", size=size, repeats=repeats)
    cpu_seconds = time.process_time() - started
    flops = (repeats + 1) * 8 * 2.0 * size ** 3  # matmul_rate's calls, warm-up included
    return {"gflops": rate["gflops"], "gflop_per_cpu_s": flops / cpu_seconds / 1e9}


def worker_main(spec_json, make_worker=None):
    """Builds a `Worker` (or `make_worker(spec)`: `decode_loop.py`'s), replies with
    its info, then answers one command per line."""
    worker = (make_worker or Worker)(json.loads(spec_json))
    print(REPLY + json.dumps(worker.info), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["do"] == "quit":
            break
        print(REPLY + json.dumps(worker.handle(command)), flush=True)


class WorkerProcess:
    """The parent's handle of a worker running one checkout's code.

    `script`: the benchmark whose `--worker SPEC` mode the worker runs (this
    one by default; `decode_loop.py` reuses the protocol): it replies with
    lines starting with `REPLY`.
    """

    def __init__(self, tree, spec, script=__file__, extra_environment=None):
        environment = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2",
                           **(extra_environment or {}))
        self.process = subprocess.Popen(
            [sys.executable, str(pathlib.Path(script).resolve()), "--worker",
             json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment)

    def reply(self):
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        raise RuntimeError(f"worker {self.process.pid} ended (exit status "
                           f"{self.process.wait()}) without a reply; see its stderr")

    def ask(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self.reply()

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write(json.dumps({"do": "quit"}) + "\n")
            self.process.stdin.close()
        self.process.wait(timeout=120)


# ---- profile of one step -----------------------------------------------------------------

# (pattern on the op name, part); the first match wins. Inside a recurrent loop
# an op matched by none of the earlier patterns is the recurrent cell's step
# (Keras names its ops gru_cell / lstm_cell; the zoo's projected loops do not).
PARTS = [
    (r"(^|/)adam/|AssignVariableOp|AssignSubVariableOp|AssignAddVariableOp", "optimizer"),
    (r"encoder", "encoder"),
    (r"attention|key_projection|query_projection", "attention"),
    # x W + b of all steps before the loop (layers.projected_recurrent).
    (r"(lstm_\d+\w*|decoder\w*)/(Tensordot|MatMul)", "input projection"),
    (r"(gru|lstm)_cell|/while/|while_grad", "recurrent cell"),
    (r"logits|shared_embedding_?\d*/(MatMul|BiasAdd|transpose|Reshape|Tensordot)",
     "output projection"),
    (r"SoftmaxCrossEntropy|ReduceLogSumExp|token_loss|^gradient_tape/(BroadcastTo|Sum|Mul|Neg)|"
     r"^(Equal|BitwiseAnd|Less|SelectV2|Sum|Mul|Cast|truediv|Maximum)", "loss"),
    (r"embedding", "embedding"),
    (r"dropout", "dropout"),
    (r"transpose|concat|Slice|ReverseV2|zeros", "reshaping"),
]
# Ops whose duration holds other ops' (function calls, loops, conditionals).
CONTAINER_OPS = {"While", "StatelessWhile", "PartitionedCall", "StatefulPartitionedCall",
                 "If", "StatelessIf", "Case", "StatelessCase"}


def op_phase(name, part):
    """forward, backward (autodiff's `gradient_tape/` ops) or optimizer.

    A `tf.custom_gradient`'s gradient ops are not under `gradient_tape/`: a
    hand-written gradient must name its ops so that a rule here finds them.
    """
    if part == "optimizer":
        return "optimizer"
    if name.startswith("gradient_tape/"):
        return "backward"
    return "forward"


def wall_attribution(intervals):
    """Each op's share of the wall time: `{key: seconds}` from `(start, end, key)`.

    Kernels overlap (inter-op parallelism: two independent ops of the backward
    pass run at once, each on part of the cores, and each lasts longer than it
    would alone), so summed kernel durations count such stretches twice. Here
    every instant of wall time is split equally among the ops running then;
    the result sums to the time during which any op ran.
    """
    events = sorted([(start, 1, index) for index, (start, _, _) in enumerate(intervals)]
                    + [(end, -1, index) for index, (_, end, _) in enumerate(intervals)])
    shares = collections.Counter()
    running, last = set(), None
    for time_point, change, index in events:
        if running and last is not None and time_point > last:
            portion = (time_point - last) / len(running)
            for active in running:
                shares[intervals[active][2]] += portion
        if change > 0:
            running.add(index)
        else:
            running.discard(index)
        last = time_point
    return shares


def op_part(name, op_type):
    if op_type.startswith("TensorList") or "TensorArray" in op_type:
        return "loop plumbing"
    for pattern, part in PARTS:
        if re.search(pattern, name):
            return part
    return "other"


def profile_step(train_on_batch, batch, logdir):
    """Kernel time of one ``train_on_batch`` by phase, part and recurrent loop.

    Sums the durations of the op events (``name:Type``) the profiler records on
    TensorFlow's compute threads: CPU seconds of kernels, so with 2 threads the
    sum may exceed the step's wall time, and time between kernels (scheduling,
    loop iterations waiting) is the difference the result calls ``unattributed``.
    Ops that run at once are also counted once each; ``wall_share`` splits
    such stretches among them (`wall_attribution`).
    """
    import glob
    import time

    import tensorflow as tf

    inputs, labels = batch
    train_on_batch(inputs, labels)
    tf.profiler.experimental.start(logdir)
    started = time.perf_counter()
    train_on_batch(inputs, labels)
    wall = time.perf_counter() - started
    tf.profiler.experimental.stop()
    [path] = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    return summarize_trace(path, wall)


def summarize_trace(path, wall):
    """`profile_step`'s result from a trace file (``*.xplane.pb``) and the step's wall time."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(pathlib.Path(path).read_bytes())
    groups, by_type = collections.Counter(), collections.Counter()
    counts = collections.Counter()
    intervals = []
    top = collections.Counter()
    for plane in space.planes:
        names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_"):
                continue
            for event in line.events:
                name = names[event.metadata_id]
                if ":" not in name or "::" in name:
                    continue  # not an op (executor and thread-pool events)
                op_name, op_type = name.rsplit(":", 1)
                if op_type in CONTAINER_OPS:
                    continue  # their ops are counted one by one
                seconds = event.duration_ps / 1e12
                part = op_part(op_name, op_type)
                phase = op_phase(op_name, part)
                in_loop = "/while" in op_name
                groups[(phase, part, in_loop)] += seconds
                start = (line.timestamp_ns * 1000 + event.offset_ps) / 1e12
                intervals.append((start, start + seconds, (phase, part, in_loop)))
                counts[(phase, in_loop)] += 1
                by_type[op_type] += seconds
                # One name per op of the loop body, not per iteration's id.
                top[re.sub(r"/body/_\d+/", "/body/", op_name) + ":" + op_type] += seconds
    kernel_seconds = sum(groups.values())
    wall_shares = wall_attribution(intervals)
    busy_seconds = sum(wall_shares.values())
    rows = [{"phase": phase, "part": part, "in_recurrent_loop": in_loop,
             "seconds": round(seconds, 4), "share": round(seconds / kernel_seconds, 4),
             "wall_seconds": round(wall_shares[(phase, part, in_loop)], 4),
             "wall_share": round(wall_shares[(phase, part, in_loop)] / busy_seconds, 4)}
            for (phase, part, in_loop), seconds in groups.most_common()]
    return {
        "wall_seconds": wall, "kernel_seconds": kernel_seconds,
        # Wall time during which some op ran, split among the ops running at once
        # (`wall_attribution`); the rows' wall_share are shares of it.
        "busy_wall_seconds": busy_seconds,
        "kernel_seconds_in_recurrent_loops": sum(
            s for (_, _, in_loop), s in groups.items() if in_loop),
        "op_executions": {f"{phase}{' (loop)' if in_loop else ''}": count
                          for (phase, in_loop), count in sorted(counts.items())},
        "by_part": rows,
        "by_op_type": [{"type": t, "seconds": round(s, 4),
                        "share": round(s / kernel_seconds, 4)}
                       for t, s in by_type.most_common(15)],
        "top_ops": [{"op": op, "seconds": round(s, 4)} for op, s in top.most_common(25)],
    }


# ---- the parent -----------------------------------------------------------------------

def trim_padding(batches):
    """The batches cut after their last column holding a token in any of them.

    ``ding_batches`` pads one bucket's batches to ``--length``; the recipe's
    batches end at their bucket's longest pair, and a recurrent step's cost
    grows with every padded column, so the benchmark cuts the extra ones
    (one shape for all batches still).
    """
    import numpy as np

    last = 1
    for inputs, labels in batches:
        for ids in (inputs["source_ids"], inputs["target_ids"], labels):
            columns = np.flatnonzero(np.asarray(ids).any(axis=0))
            if columns.size:
                last = max(last, int(columns[-1]) + 1)
    return [({k: v[:, :last] for k, v in inputs.items()}, labels[:, :last])
            for inputs, labels in batches]


def make_batches_file(args, directory):
    """The batches every worker trains on, as ``batches.npz``; returns (path, vocab size)."""
    import numpy as np

    import train_throughput

    batches, vocab_size = train_throughput.benchmark_batches(args, directory)
    batches = trim_padding(train_throughput.equal_length_batches(batches))
    arrays = {}
    for index, (inputs, labels) in enumerate(batches):
        arrays[f"source_{index}"] = inputs["source_ids"].numpy()
        arrays[f"target_{index}"] = inputs["target_ids"].numpy()
        arrays[f"labels_{index}"] = labels.numpy()
    path = directory / "batches.npz"
    np.savez(path, **arrays)
    return path, vocab_size


def parse_environment(text):
    """``"A=1,B=x"`` -> ``{"A": "1", "B": "x"}``."""
    pairs = [item.split("=", 1) for item in common.str_list(text)]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"expected KEY=VALUE,... got {text!r}")
    return dict(pairs)


def run(args):
    run_info = common.start_run()
    directory = pathlib.Path(tempfile.mkdtemp(prefix="rnn_throughput-"))
    batches_path, vocab_size = make_batches_file(args, directory)
    trees = {"this": REPO}
    if args.baseline_tree:
        trees["baseline"] = pathlib.Path(args.baseline_tree).resolve()
    spec = {"batches": str(batches_path), "models": args.models, "preset": args.preset,
            "vocab_size": vocab_size, "steps": args.steps, "warmup": args.warmup,
            "matmul_size": 256 if args.smoke else 2048}
    # One worker at a time builds and warms up: no timing runs meanwhile, but
    # two tracing processes would also take twice the memory.
    workers = {}
    try:
        for label, tree in trees.items():
            options = ({"project_real_tokens": False}
                       if label == "baseline" and args.baseline_full_logits else {})
            extra = parse_environment(args.this_env if label == "this" else args.baseline_env)
            workers[label] = WorkerProcess(tree, dict(spec, trainer_options=options),
                                           extra_environment=extra)
            info = workers[label].reply()
            print(f"{label}: {info['keras_attn_zoo']}, matmul "
                  f"{info['matmul_gflops_start']:.0f} GFLOP/s, "
                  + ", ".join(f"{m} loss {v['eval_loss_batch0']:.6f}"
                              for m, v in info["models"].items()), flush=True)
            info["environment"] = extra
            workers[label].info = info
        times = {(label, model): [] for label in trees for model in args.models}
        cpu_times = {key: [] for key in times}
        loads = []
        labels = list(trees)
        for round_index in range(max(args.repeats, 1)):
            order = labels if round_index % 2 == 0 else labels[::-1]
            for model in args.models:
                for label in order:
                    timed = workers[label].ask(do="time", model=model)
                    times[(label, model)].append(timed["seconds"])
                    cpu_times[(label, model)].append(timed["cpu_seconds"])
            loads.append(common.load_average())
            print(f"round {round_index + 1}/{args.repeats}: load {loads[-1]}", flush=True)
        for label, worker in workers.items():
            rate = worker.ask(do="matmul", size=spec["matmul_size"])
            worker.info["matmul_gflops_end"] = rate["gflops"]
            worker.info["matmul_gflop_per_cpu_s_end"] = rate["gflop_per_cpu_s"]
        profiles = {}
        if args.profile:
            for label, worker in workers.items():
                for model in args.models:
                    profiles[f"{label}/{model}"] = worker.ask(
                        do="profile", model=model,
                        logdir=str(directory / f"profile-{label}-{model}"))
    finally:
        for worker in workers.values():
            worker.close()
    return summarize(args, workers, times, cpu_times, loads, profiles), run_info


def summarize(args, workers, times, cpu_times, loads, profiles):
    rows = []
    for (label, model), seconds in times.items():
        info = workers[label].info
        timing = common.Timing(seconds)
        step_seconds = timing.median / args.steps
        step_cpu_seconds = statistics.median(cpu_times[(label, model)]) / args.steps
        matmul = (info["matmul_gflops_start"] + info["matmul_gflops_end"]) / 2
        matmul_cpu = (info["matmul_gflop_per_cpu_s_start"]
                      + info["matmul_gflop_per_cpu_s_end"]) / 2
        flops = info["models"][model]["train_gflop_per_step"] * 1e9
        rows.append({
            "tree": label, "model": model, "step_seconds": step_seconds,
            "tokens_per_s": info["batches"]["mean_target_tokens"] / step_seconds,
            "spread": timing.spread, "times": seconds,
            # CPU seconds of the worker's threads: on a loaded machine less
            # dependent on its share of the cores than wall time.
            "step_cpu_seconds": step_cpu_seconds,
            "tokens_per_cpu_s": info["batches"]["mean_target_tokens"] / step_cpu_seconds,
            "cpu_times": cpu_times[(label, model)],
            "cpu_mfu": flops / step_cpu_seconds / (matmul_cpu * 1e9),
            "mfu": flops / step_seconds / (matmul * 1e9),
            **info["models"][model]})
    comparison = []
    if "baseline" in workers:
        for model in args.models:
            this, base = (next(r for r in rows if r["tree"] == t and r["model"] == model)
                          for t in ("this", "baseline"))
            ratios = [b / t for t, b in zip(this["times"], base["times"])]
            comparison.append({
                "model": model, "this_tokens_per_s": this["tokens_per_s"],
                "baseline_tokens_per_s": base["tokens_per_s"],
                "this_over_baseline": base["step_seconds"] / this["step_seconds"],
                # Per round: the pairs timed next to each other.
                "round_ratios": ratios,
                "median_round_ratio": statistics.median(ratios),
                "this_over_baseline_cpu": base["step_cpu_seconds"] / this["step_cpu_seconds"],
                "eval_loss_difference": abs(this["eval_loss_batch0"]
                                            - base["eval_loss_batch0"]),
                "first_step_loss_difference": abs(this["first_step_loss"]
                                                  - base["first_step_loss"]),
            })
    batches = dict(workers["this"].info["batches"])
    batches["label_padding_share"] = 1 - batches["mean_target_tokens"] / (
        batches["batch_size"] * batches["target_length"])
    return {
        "data": args.data, "preset": args.preset, "batch_tokens": args.batch_tokens,
        "steps_per_call": args.steps, "repeats": args.repeats,
        "batches": batches,
        "trees": {label: {k: v for k, v in worker.info.items() if k != "models"}
                  for label, worker in workers.items()},
        "load_average_per_round": loads, "rows": rows, "comparison": comparison,
        "profiles": profiles,
    }


COLUMNS = [
    ("tree", "tree", ""), ("model", "model", ""), ("step_seconds", "s/step", ".3f"),
    ("tokens_per_s", "tgt tok/s", ".0f"), ("mfu", "MFU", ".1%"), ("spread", "spread", ".2f"),
    ("tokens_per_cpu_s", "tok/CPU s", ".0f"), ("cpu_mfu", "CPU MFU", ".1%"),
    ("eval_loss_batch0", "loss b0", ".6f"),
]
COMPARISON_COLUMNS = [
    ("model", "model", ""), ("baseline_tokens_per_s", "baseline tok/s", ".0f"),
    ("this_tokens_per_s", "this tok/s", ".0f"), ("this_over_baseline", "this/base", ".2f"),
    ("median_round_ratio", "median of rounds", ".2f"),
    ("this_over_baseline_cpu", "this/base CPU s", ".2f"),
    ("eval_loss_difference", "|Δ loss b0|", ".2e"),
    ("first_step_loss_difference", "|Δ step-1 loss|", ".2e"),
]


def print_results(results, file=None):
    for label, tree in results["trees"].items():
        print(f"{label}: {tree['keras_attn_zoo']}; matmul {tree['matmul_gflops_start']:.0f}"
              f" -> {tree['matmul_gflops_end']:.0f} GFLOP/s, "
              f"{tree['matmul_gflop_per_cpu_s_start']:.0f} -> "
              f"{tree['matmul_gflop_per_cpu_s_end']:.0f} GFLOP per CPU s; Trainer options "
              f"{tree.get('trainer_options') or 'default'}",
              file=file or sys.stdout)
    print(f"batches {results['batches']}; load per round "
          f"{results['load_average_per_round']}", file=file or sys.stdout)
    common.print_table(results["rows"], COLUMNS, "\nTrainer.train_on_batch, float32:",
                       file=file)
    if results["comparison"]:
        common.print_table(results["comparison"], COMPARISON_COLUMNS,
                           "\nthis checkout over the baseline, alternating:", file=file)
    for key, profile in results["profiles"].items():
        common.print_table(profile["by_part"][:12], PROFILE_COLUMNS,
                           f"\nprofile {key}: wall {profile['wall_seconds']:.3f} s, kernels "
                           f"{profile['kernel_seconds']:.3f} s", file=file)


PROFILE_COLUMNS = [("phase", "phase", ""), ("part", "part", ""),
                   ("in_recurrent_loop", "in loop", ""), ("seconds", "kernel s", ".3f"),
                   ("share", "share", ".1%"), ("wall_seconds", "wall s", ".3f"),
                   ("wall_share", "wall share", ".1%")]


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return None
    results, run_info = run(args)
    print_results(results)
    profiles = results.pop("profiles")
    paths = [common.write_results("rnn_throughput", results, args.output_dir,
                                  smoke=args.smoke, run=run_info)]
    if profiles:
        paths.append(common.write_results(
            "rnn_profile", {"batches": results["batches"], "trees": results["trees"],
                            "profiles": profiles}, args.output_dir, smoke=args.smoke))
    for path in paths:
        if args.tag:
            path = path.replace(path.with_name(f"{path.stem}-{args.tag}{path.suffix}"))
        print(f"wrote {path}")
    results["profiles"] = profiles
    return results


if __name__ == "__main__":
    main()

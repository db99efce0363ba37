#!/usr/bin/env python
"""Where a training step's time goes: TensorFlow's profiler over ``Trainer`` steps.

Builds a zoo model (``--model``, any ``build_model`` name; ``--preset``), trains it
with ``Trainer.train_on_batch`` (the recipe's step: Adam, label smoothing 0.1, no
XLA) on the batches of ``benchmarks/train_throughput.py`` (``--data ding``: the
Ding corpus, one padded shape; ``synthetic``: random ids of Ding-like lengths),
times ``--steps`` steps without the profiler, then traces ``--profile-steps`` more
with ``tf.profiler.experimental`` and reads the trace (the ``XSpace`` protobuf)
directly:

* every TensorFlow op's *own* time (its span on an executor thread less the ops
  nested in it), summed per op, per op type and per category: the output
  projection (the tied ``[d, V]`` matmul and its operand transposes, forward and
  backward), the loss
  (``token_loss`` scope), attention, feed-forward, layer norm, residual dropout,
  embedding lookup, casts, the optimizer update (``adam`` scope), recurrent cells
  (RNN models) and the rest; each split into forward and backward
  (``gradient_tape/`` ops);
* the op time against the step's wall time (with two inter-op threads the ops of
  one step may overlap, so their sum can exceed the wall time).

The profiler's own overhead inflates the small ops; shares are what to read, and
``step_seconds`` (unprofiled) is the step's real time.

Usage:
    python benchmarks/step_profile.py --model transformer --precisions float32,bf16 \
        --data ding --label before
    python benchmarks/step_profile.py --model bahdanau_rnn --preset small
    python benchmarks/step_profile.py --smoke        # tiny, seconds (tests)

Writes ``benchmarks/results/step_profile-<date>-<model>[-<label>].json`` and prints
the tables.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys
import tempfile

import common
import train_throughput

# (category, pattern on the op's name) in the order they are tried; the op type
# ``Cast`` is its own category wherever it sits (mixed precision's casts).
CATEGORIES = (
    ("loss", r"(^|/)token_loss(_\d+)?/"),
    ("optimizer", r"(^|/)adam(_\d+)?/|(^|/)Adam|AssignAddVariableOp|AssignVariableOp|"
                  r"ResourceApply"),
    ("layer norm", r"_norm(_\d+)?/"),
    ("attention", r"attention"),
    ("feed-forward", r"feed_forward"),
    ("dropout", r"dropout"),
    ("embedding", r"embedding"),
    ("recurrent cells", r"(gru|lstm|rnn|while)"),
)
CATEGORY_PATTERNS = [(name, re.compile(pattern, re.IGNORECASE))
                     for name, pattern in CATEGORIES]
# The tied output layer: a product (or its operand's transpose) in the shared
# embedding's scope; grappler renames them (`.../ArithmeticOptimizer/...`).
OUTPUT_PROJECTION = re.compile(r"shared_embedding|output_projection")
PRODUCT_TYPE = re.compile(r"MatMul|Transpose|Einsum")
# Executor threads: their events are the ops (the Eigen pool's threads only
# record which region they helped with).
EXECUTOR_THREAD = re.compile(r"^tf_Compute|^tf_inter_op|^tf_data")
OP_EVENT = re.compile(r"^(?P<name>[^:]+):(?P<type>[A-Za-z0-9_]+)$")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="transformer",
                        help="a keras_attn_zoo.models.build_model name")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--precisions", default="float32",
                        help="float32 and/or bf16 (mixed precision)")
    parser.add_argument("--data", default="ding", help="ding | synthetic")
    parser.add_argument("--batch-tokens", type=int, default=6000)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--min-length", type=int, default=12)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6,
                        help="unprofiled timed steps (the median is step_seconds)")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="ops and op types listed")
    parser.add_argument("--label", default="",
                        help="added to the results file's name (e.g. before, after)")
    parser.add_argument("--output-dir", default=str(common.RESULTS_DIR))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny preset, tiny synthetic batches, one profiled step")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.data = "tiny", "synthetic"
        args.batch_tokens, args.length, args.min_length = 64, 8, 4
        args.vocab_size, args.batches = 64, 2
        args.steps, args.profile_steps, args.top = 2, 1, 5
    args.precisions = common.str_list(args.precisions)
    return args


# ---- reading the trace ----------------------------------------------------------------

def categorize(op_name, op_type):
    """The category of one op, from its type (casts) and its name scope."""
    if op_type == "Cast":
        return "cast"
    if OUTPUT_PROJECTION.search(op_name) and PRODUCT_TYPE.search(op_type):
        return "output projection"
    for category, pattern in CATEGORY_PATTERNS:
        if pattern.search(op_name):
            return category
    return "other"


def own_op_times(xspace):
    """``[(op name, op type, own seconds)]`` of every op event on an executor thread.

    An event's own time is its span less the spans of the events nested in it
    (a function call op holds the ops it runs).
    """
    ops = []
    for plane in xspace.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            if not EXECUTOR_THREAD.search(line.name):
                continue
            events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
            stack = []  # [end_ps, own_ps, name, type]
            for event in events:
                match = OP_EVENT.match(plane.event_metadata[event.metadata_id].name)
                if match is None:
                    continue
                start, end = event.offset_ps, event.offset_ps + event.duration_ps
                while stack and stack[-1][0] <= start:
                    ops.append(_finished(stack.pop()))
                if stack:
                    stack[-1][1] -= event.duration_ps
                stack.append([end, event.duration_ps, match["name"], match["type"]])
            ops.extend(_finished(entry) for entry in reversed(stack))
    return ops


def _finished(entry):
    _, own_ps, name, op_type = entry
    return name, op_type, max(own_ps, 0) / 1e12


def summarize(ops, steps, top):
    """Per-step seconds by category (forward/backward), op type and op."""
    by_category = collections.defaultdict(lambda: {"forward": 0.0, "backward": 0.0})
    by_type, by_op = collections.Counter(), collections.Counter()
    for name, op_type, seconds in ops:
        seconds /= steps
        part = "backward" if name.startswith("gradient_tape/") else "forward"
        by_category[categorize(name, op_type)][part] += seconds
        by_type[op_type] += seconds
        by_op[f"{name} ({op_type})"] += seconds
    total = sum(by_type.values())
    categories = {
        name: {"seconds": parts["forward"] + parts["backward"],
               "share": (parts["forward"] + parts["backward"]) / total if total else 0.0,
               "forward_seconds": parts["forward"], "backward_seconds": parts["backward"]}
        for name, parts in sorted(by_category.items(), key=lambda item: -sum(item[1].values()))
    }
    return {
        "op_seconds_per_step": total,
        "categories": categories,
        "op_types": [{"type": t, "seconds": s, "share": s / total}
                     for t, s in by_type.most_common(top)],
        "ops": [{"op": o, "seconds": s, "share": s / total}
                for o, s in by_op.most_common(top)],
    }


def profile_steps(run_step, steps, logdir):
    """Traces ``steps`` calls of ``run_step``; returns the parsed ``XSpace``."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    tf.profiler.experimental.start(str(logdir))
    try:
        for _ in range(steps):
            run_step()
    finally:
        tf.profiler.experimental.stop()
    files = sorted(pathlib.Path(logdir).rglob("*.xplane.pb"))
    if not files:
        raise RuntimeError(f"The profiler wrote no trace under {logdir}.")
    xspace = xplane_pb2.XSpace()
    xspace.ParseFromString(files[-1].read_bytes())
    return xspace


# ---- the run -------------------------------------------------------------------------

def profile_precision(args, precision, batches, vocab_size, peak, workdir):
    import keras

    from keras_attn_zoo.evaluation.flops import training_flops
    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.training.seeding import seed_everything
    from keras_attn_zoo.workflow import MIXED_PRECISION_POLICIES

    keras.mixed_precision.set_global_policy(
        MIXED_PRECISION_POLICIES["bf16" if precision == "bf16" else "none"])
    try:
        seed_everything(0)
        model = build_model(args.model, vocab_size, preset=args.preset)
        step = train_throughput.relax(train_throughput.zoo_step(model), batches)
        run_step = train_throughput.stepper(step, batches, 1)
        timing, _ = common.time_call(run_step, repeats=args.steps, warmup=2)
        xspace = profile_steps(run_step, args.profile_steps, workdir / precision)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    stats = train_throughput.batch_statistics(batches)
    flops = training_flops(model, stats["batch_size"], stats["source_length"],
                           stats["target_length"])["total"]
    summary = summarize(own_op_times(xspace), args.profile_steps, args.top)
    return {
        "model": args.model, "preset": args.preset, "precision": precision,
        "params": model.count_params(),
        "step_seconds": timing.median, "step_spread": timing.spread,
        "tokens_per_s": stats["mean_target_tokens"] / timing.median,
        "train_gflop_per_step": flops / 1e9,
        "mfu": flops / timing.median / (peak * 1e9),
        "profiled_steps": args.profile_steps,
        **summary,
        "op_seconds_over_step_seconds": summary["op_seconds_per_step"] / timing.median,
    }


def print_profile(row, file=None):
    file = file or sys.stdout
    print(f"\n{row['model']} ({row['preset']}, {row['precision']}): "
          f"{row['step_seconds']:.3f} s/step unprofiled, {row['tokens_per_s']:.0f} "
          f"target tok/s, MFU {row['mfu']:.1%}; op time {row['op_seconds_per_step']:.3f} "
          f"s/step ({row['op_seconds_over_step_seconds']:.2f}x the step)", file=file)
    categories = [{"category": name, **values} for name, values in row["categories"].items()]
    common.print_table(categories, [
        ("category", "category", ""), ("seconds", "s/step", ".3f"), ("share", "share", ".1%"),
        ("forward_seconds", "forward", ".3f"), ("backward_seconds", "backward", ".3f")],
        file=file)
    common.print_table(row["op_types"], [
        ("type", "op type", ""), ("seconds", "s/step", ".4f"), ("share", "share", ".1%")],
        file=file)
    common.print_table(row["ops"], [
        ("op", "op", ""), ("seconds", "s/step", ".4f"), ("share", "share", ".1%")],
        file=file)


def run(args):
    run_info = common.start_run()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="step_profile-"))
    if "bf16" in args.precisions and not common.cpu_supports_bf16():
        print("note: this CPU has no native bf16; bf16 rows run emulated", flush=True)
    size = 256 if args.smoke else 2048
    peaks = {precision: common.matmul_rate(
        "bfloat16" if precision == "bf16" else "float32", size=size)["gflops"]
        for precision in args.precisions}
    print("matmul rate (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()),
          flush=True)
    batches, vocab_size = train_throughput.benchmark_batches(args, workdir)
    # Equal source and target lengths: the eager translator reads one source
    # token per target token (a no-op for Ding batches, padded to one length).
    batches = train_throughput.equal_length_batches(batches)
    stats = train_throughput.batch_statistics(batches)
    print(f"batches: {stats}", flush=True)
    rows = []
    for precision in args.precisions:
        rows.append(profile_precision(args, precision, batches, vocab_size,
                                      peaks[precision], workdir))
        print_profile(rows[-1])
    return {"data": args.data, "batches": stats, "matmul_gflops": peaks,
            "profiles": rows}, run_info


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    path = common.write_results("step_profile", results, args.output_dir,
                                smoke=args.smoke, run=run_info)
    # step_profile-<date>[-smoke].json -> step_profile-<date>-<model>[-<label>][-smoke].json
    suffix = "".join(f"-{part}" for part in (args.model, args.label) if part)
    stem = path.stem[:-len("-smoke")] if args.smoke else path.stem
    named = path.with_name(f"{stem}{suffix}{'-smoke' if args.smoke else ''}.json")
    path.replace(named)
    print(f"\nwrote {named}")
    return results


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""The default run's training loop: before and after issue 19, XLA, and keras-hub.

Every contender trains the recipe's default model (the ``small`` Transformer,
an 8,000-piece SentencePiece vocabulary of the Ding sentences) on the recipe's
own batches (``make_dataset``, ``--batch-tokens`` 1500, ``--max-length`` 128),
one pass over the first ``--batches`` batches per timed round, the contenders
alternating (A B C, C B A, ...) in one process:

* ``session start``: ``Trainer`` in graph mode with the loss as it was
  (``log_softmax`` then a gather, whose gradient scatters into a dense
  ``[tokens, vocabulary]`` tensor; ``reference_token_loss_sum`` below);
* ``graph``: today's ``Trainer`` (fused loss), ``jit_compile=False``;
* ``xla``: today's ``Trainer`` with ``jit_compile=True`` on the fixed-shape
  batches it needs (``make_dataset(..., fixed_shapes=True)``: more padding,
  counted against it);
* ``keras-hub graph`` / ``keras-hub xla``: keras-hub's layers of the same
  dimensions (``reference.KerasHubTransformer``), a plain custom step with the
  same optimizer and today's fused loss, on the dynamic / fixed-shape batches.

``--cpu-allocator``: ``pooled`` (default, what the recipe uses since issue 19:
``runtime.use_pooled_cpu_allocator``) or ``default`` (TensorFlow's, as at the
session start). It is process-wide, so the two are separate runs.

Tokens/s counts real target tokens (padding and filler rows excluded). MFU is
the model FLOPs of the batches as computed (padded shapes, forward + backward
matmuls, ``evaluation.flops.training_flops``) per second over the matmul rate
measured in the same run (``common.matmul_rate``: distinct operands, results
used, checked against the CPU's hardware peak). Compilation (first pass) is
timed separately.

Usage:
    python benchmarks/training_loop.py                  # ~12 min on 2 cores
    python benchmarks/training_loop.py --smoke          # seconds, for tests
Writes ``benchmarks/results/training_loop[-default-allocator]-<date>.json`` and
prints the table.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import sys
import tempfile
import time

import common
from reference import KerasHubTransformer

CONTENDERS = ("session start", "graph", "xla", "keras-hub graph", "keras-hub xla")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-tokens", type=int, default=1500)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batches", type=int, default=30,
                        help="batches per timed round (one pass)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny preset, 200-piece vocabulary, 2 batches, 1 round")
    parser.add_argument("--cpu-allocator", default="pooled", choices=["pooled", "default"])
    parser.add_argument("--output-dir")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.vocab_size, args.batches, args.rounds = "tiny", 200, 2, 1
    args.contenders = common.str_list(args.contenders)
    unknown = set(args.contenders) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; choose from {CONTENDERS}")
    return args


def reference_token_loss_sum(labels, logits, label_smoothing=0.1):
    """The loss as the session-start loop computed it (same value, slower gradient)."""
    from keras import ops

    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.cast(labels, "int32")
    nll = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), -1)
    losses = (1.0 - label_smoothing) * nll - label_smoothing * ops.mean(log_probs, -1)
    mask = ops.cast(ops.not_equal(labels, 0), "float32")
    correct = ops.cast(ops.equal(ops.argmax(log_probs, axis=-1), labels), "float32")
    return ops.sum(losses * mask), ops.sum(mask), ops.sum(correct * mask)


def recipe_batches(args, workdir):
    """The first ``--batches`` batches of the recipe's pipeline, dynamic and fixed shapes."""
    from keras_attn_zoo import data as zoo_data

    pairs = zoo_data.load_pairs("ding:sentences", "train", "de-en")
    if args.smoke:
        pairs = pairs[:400]
    vocab = zoo_data.train_sentencepiece(pairs, workdir / "vocab.model",
                                         vocab_size=args.vocab_size)
    tokenizer = zoo_data.load_tokenizer(vocab)
    batches = {}
    for fixed in (False, True):
        dataset, _ = zoo_data.make_dataset(
            pairs, tokenizer, batch_tokens=args.batch_tokens, max_length=args.max_length,
            seed=0, fixed_shapes=fixed)
        batches[fixed] = list(dataset.take(args.batches))
    return batches, int(tokenizer.vocabulary_size())


def zoo_trainer_step(model, jit_compile, session_start=False):
    """``Trainer.train_on_batch`` of a fresh trainer (``session_start``: the old loss)."""
    from keras_attn_zoo.training import Trainer
    from keras_attn_zoo.training import trainer as trainer_module
    from train_throughput import make_optimizer

    trainer = Trainer(model, make_optimizer(), label_smoothing=0.1, jit_compile=jit_compile)
    if not session_start:
        return trainer.train_on_batch

    def train_on_batch(inputs, labels):
        # The step is traced on its first calls; the loss it traces is the one
        # the trainer module names then.
        current = trainer_module.token_loss_sum
        trainer_module.token_loss_sum = reference_token_loss_sum
        try:
            return trainer.train_on_batch(inputs, labels)
        finally:
            trainer_module.token_loss_sum = current
    return train_on_batch


def one_pass(train_on_batch, batches, cpu_seconds):
    """A zero-argument callable: one step per batch; returns the real target tokens.

    Adds the process's user and system CPU seconds of each call to
    ``cpu_seconds`` (the contenders alternate, so each call's share is its own).
    """
    def run():
        before = resource.getrusage(resource.RUSAGE_SELF)
        tokens = 0.0
        for inputs, labels in batches:
            tokens += train_on_batch(inputs, labels)["tokens"]
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu_seconds["user"] += after.ru_utime - before.ru_utime
        cpu_seconds["system"] += after.ru_stime - before.ru_stime
        cpu_seconds["calls"] += 1
        return tokens
    return run


def batch_flops(config, batches):
    from keras_attn_zoo.evaluation.flops import training_flops

    return sum(training_flops(config, int(labels.shape[0]), int(inputs["source_ids"].shape[1]),
                              int(labels.shape[1]))["total"] for inputs, labels in batches)


def main(argv=None):
    args = parse_args(argv)
    run = common.start_run()
    from keras_attn_zoo.runtime import use_pooled_cpu_allocator

    if args.cpu_allocator == "pooled":
        use_pooled_cpu_allocator()
    else:
        os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "false"
    # (No effect where TensorFlow had started already, as in benchmarks/smoke.py.)
    import keras

    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.training.seeding import seed_everything
    from train_throughput import custom_step

    rate = common.matmul_rate("float32")
    print(f"matmul rate {rate['gflops']:.1f} GFLOP/s float32 "
          f"({rate['share_of_hardware_peak'] or 0:.0%} of the hardware peak "
          f"{rate['hardware_peak_gflops']}); load {common.load_average()}")
    with tempfile.TemporaryDirectory() as workdir:
        batches, vocabulary_size = recipe_batches(args, pathlib.Path(workdir))
    seed_everything(0)
    reference = transformer(vocabulary_size, preset=args.preset)
    config = dict(reference.zoo_config)
    weights = reference.get_weights()

    contenders, setups, cpu = {}, {}, {}
    for name in args.contenders:
        fixed = jit_compile = name.endswith("xla")  # XLA trains on fixed shapes
        seed_everything(0)
        if name.startswith("keras-hub"):
            model = KerasHubTransformer(**config, max_positions=args.max_length + 8) \
                .training_model()
            step = custom_step(model, jit_compile)
            params = model.count_params()
        else:
            model = transformer(vocabulary_size, preset=args.preset)
            model.set_weights(weights)
            step = zoo_trainer_step(model, jit_compile, session_start=name == "session start")
            params = model.count_params()
        cpu[name] = {"user": 0.0, "system": 0.0, "calls": 0}
        contenders[name] = one_pass(step, batches[fixed], cpu[name])
        started = time.perf_counter()
        contenders[name]()  # traces and compiles every shape once
        cpu[name].update(user=0.0, system=0.0, calls=0)
        setups[name] = {"first_pass_seconds": round(time.perf_counter() - started, 1),
                        "params": params, "fixed_shapes": fixed, "xla": jit_compile}
        print(f"{name}: first pass {setups[name]['first_pass_seconds']} s", flush=True)
    timings, tokens = common.alternate(contenders, repeats=args.rounds, warmup=0)

    rows = []
    for name in args.contenders:
        seconds = timings[name].median
        data = batches[setups[name]["fixed_shapes"]]
        cells = sum(int(labels.shape[0] * labels.shape[1]) for _, labels in data)
        flops = batch_flops(config, data)
        rows.append({
            "contender": name, **setups[name],
            "pass_seconds": round(seconds, 2), "spread": round(timings[name].spread, 3),
            "target_tokens": int(tokens[name]),
            "tokens_per_s": round(tokens[name] / seconds, 1),
            "label_padding_share": round(1 - tokens[name] / cells, 3),
            "train_gflop_per_pass": round(flops / 1e9, 1),
            "mfu": round(flops / seconds / 1e9 / rate["gflops"], 3),
            # Per timed pass: where the default run's system time went.
            "user_cpu_seconds_per_pass": round(cpu[name]["user"] / cpu[name]["calls"], 2),
            "system_cpu_seconds_per_pass": round(cpu[name]["system"] / cpu[name]["calls"], 2),
        })
    base = {row["contender"]: row["tokens_per_s"] for row in rows}
    for row in rows:
        row["x_session_start"] = (round(row["tokens_per_s"] / base["session start"], 3)
                                  if "session start" in base else None)
    hub_best = max((row["tokens_per_s"] for row in rows
                    if row["contender"].startswith("keras-hub")), default=None)
    for row in rows:
        row["x_keras_hub_best"] = round(row["tokens_per_s"] / hub_best, 3) if hub_best else None
    name = "training_loop" + ("" if args.cpu_allocator == "pooled" else "-default-allocator")
    path = common.write_results(name, {
        "preset": args.preset, "vocabulary_size": vocabulary_size,
        "cpu_allocator": args.cpu_allocator,
        "batch_tokens": args.batch_tokens, "batches": args.batches, "rounds": args.rounds,
        "matmul_rate": rate, "rows": rows,
    }, output_dir=args.output_dir, smoke=args.smoke, run=run)
    common.print_table(rows, [
        ("contender", "contender", ""), ("first_pass_seconds", "first pass s", ".1f"),
        ("tokens_per_s", "target tok/s", ".1f"), ("label_padding_share", "padding", ".3f"),
        ("mfu", "MFU", ".3f"), ("x_session_start", "x session start", ".3f"),
        ("x_keras_hub_best", "x keras-hub best", ".3f"),
        ("system_cpu_seconds_per_pass", "system CPU s/pass", ".2f"), ("spread", "spread", ".3f"),
    ], title=f"training loop, {args.preset}, {args.cpu_allocator} CPU allocator, "
             f"{args.batches} recipe batches x {args.rounds} "
             f"rounds (matmul {rate['gflops']:.1f} GFLOP/s)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

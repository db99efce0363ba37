#!/usr/bin/env python
"""Training throughput: our Transformer against keras-hub's, and every zoo model.

1. **Ours vs keras-hub**, per preset (default ``small`` and ``base``), precision
   (float32, and bfloat16 mixed precision when the CPU has native bf16) and XLA
   (off / on): target tokens per second of

   * ours: the zoo's ``transformer`` trained with ``Trainer.train_on_batch`` (the
     step ``recipes/train_wmt.py`` runs; for XLA ``Trainer(jit_compile=True)``,
     which compiles the forward and backward pass and leaves the optimizer
     update outside; runs before 2026-11-25 compiled the whole step, update
     included, by replacing the Trainer's step function), and
   * keras-hub: a model of the same dimensions built from
     ``keras_hub.layers.TokenAndPositionEmbedding`` (one for each language),
     ``TransformerEncoder`` and ``TransformerDecoder`` and a ``Dense`` output layer
     (float32 logits), trained by a custom step with the same optimizer (Adam 0.9 /
     0.98 / 1e-9, inverse-square-root schedule), the same loss
     (``token_loss_sum``, label smoothing 0.1) and the same XLA setting,
     over the full logits (ours projects only the real target tokens,
     ``Trainer(project_real_tokens=True)``; since 2026-11-25, issue 36, the
     loss both use is one softmax with a hand-written gradient on TensorFlow,
     so keras-hub's step got faster with ours),

   on the same batches, in the same process, alternating (A B, B A, ...). The goal
   of issue 7: ours >= 1.2x keras-hub.
2. **MFU** of every row: model FLOPs per step (``keras_attn_zoo.evaluation.flops``,
   forward + backward, matmuls only) over the step time, divided by the machine's
   matmul rate in the row's precision (``common.matmul_rate``).
3. **bf16 against float32** (``--precision-ab``): ours in both precisions,
   alternating in one process, beside the ratio of the same process's bf16 and
   float32 matmul rates (the step's bf16 gain against a bare matmul's).
4. **Every zoo model** (``--zoo-preset``, default small, float32, no XLA): tokens/s
   relative to our Transformer on the same batches, all models alternating.

Batches: synthetic ids of realistic lengths (default: source and target padded to
24 tokens, real lengths uniform in 12..24, about what a Ding sentence pair is in
8k SentencePiece pieces), ``--batch-tokens`` padded tokens per batch (the recipe's
6000 by default). Source and target are equally long so the eager translator (one
source token per target token) trains on the same batches. ``--data ding`` uses
``keras_attn_zoo.data.make_dataset`` batches of the Ding corpus instead (a
SentencePiece vocabulary is trained first; one bucket's batches, so every
contender sees the same shapes).

Shapes: ``Trainer.train`` feeds bucketed batches of varying shapes, so after its
second batch ``tf.function`` (``reduce_retracing``) runs a trace for any batch size
and length. With ``--shapes relaxed`` (default) every contender is first called on
a batch of another shape to get that same trace; ``--shapes static`` keeps the
first, fully static trace, which Keras' TensorFlow backend runs differently (its
``einsum`` becomes a broadcasting batched matmul when the shapes are static; the
keras-hub contender's ``EinsumDense`` projections go through it).

Usage:
    python benchmarks/train_throughput.py                 # small + base, ~30 min
    python benchmarks/train_throughput.py --presets small --no-zoo
    python benchmarks/train_throughput.py --smoke         # seconds, for tests

Writes ``benchmarks/results/train_throughput-<date>.json`` and prints the tables.
"""

from __future__ import annotations

import argparse
import sys

import common
from reference import KerasHubTransformer
from keras_attn_zoo.training.seeding import seed_everything

ZOO_MODELS = ("transformer", "ran_transformer", "gmm_transformer",
              "weighted_transformer", "hard_coded_transformer",
              "synthesizer_transformer", "bahdanau_rnn", "eager_translator")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="small,base")
    parser.add_argument("--precisions", default="float32,bf16",
                        help="float32 and/or bf16 (bf16 skipped without native CPU "
                             "support unless --force-bf16)")
    parser.add_argument("--force-bf16", action="store_true")
    parser.add_argument("--xla", default="off,on", help="off and/or on")
    parser.add_argument("--batch-tokens", type=int, default=6000)
    parser.add_argument("--length", type=int, default=24,
                        help="padded source and target length (default 24)")
    parser.add_argument("--min-length", type=int, default=12,
                        help="shortest real length (default 12)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=4,
                        help="distinct batches cycled through (default 4)")
    parser.add_argument("--steps", type=int, default=2,
                        help="training steps per timed call (default 2)")
    parser.add_argument("--data", default="synthetic", help="synthetic | ding")
    parser.add_argument("--shapes", default="relaxed",
                        help="relaxed (default: every step function is first called on "
                             "a batch of another shape, so tf.function traces it for "
                             "any batch and length, as Trainer.train does on bucketed "
                             "data) or static (traced for the benchmark's one shape)")
    parser.add_argument("--no-keras-hub", action="store_true")
    parser.add_argument("--precision-ab", action="store_true",
                        help="also time ours in float32 against ours in bf16, "
                             "alternating in one process")
    parser.add_argument("--no-zoo", action="store_true",
                        help="skip the every-zoo-model table")
    parser.add_argument("--zoo-preset", default="small")
    parser.add_argument("--zoo-models", default=",".join(ZOO_MODELS))
    common.add_common_arguments(parser, repeats=3, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.presets, args.zoo_preset = "tiny", "tiny"
        args.batch_tokens, args.length, args.min_length = 64, 8, 4
        args.vocab_size, args.batches, args.steps = 64, 2, 1
        args.repeats, args.warmup = 1, 1
        args.xla = "off"
        args.precisions = "float32"
        args.zoo_models = "transformer,ran_transformer,eager_translator"
        # One trace per step function: mfu.py's shapes A/B runs the relaxed path.
        args.shapes = "static"
    args.presets = common.str_list(args.presets)
    args.precisions = common.str_list(args.precisions)
    args.xla = [x == "on" for x in common.str_list(args.xla)]
    args.zoo_models = common.str_list(args.zoo_models)
    return args


# ---- batches --------------------------------------------------------------------------

def synthetic_batches(num_batches, batch_size, length, min_length, vocab_size, seed=0):
    """``(inputs, labels)`` batches of random ids, real lengths in [min_length, length].

    Sources end with EOS, targets start with BOS (``target_ids``) and the labels
    end with EOS; everything is 0-padded to ``length``.
    """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(num_batches):
        source = np.zeros([batch_size, length], "int32")
        target_in = np.zeros([batch_size, length], "int32")
        labels = np.zeros([batch_size, length], "int32")
        for row in range(batch_size):
            n_source = int(rng.integers(min_length, length + 1))
            n_target = int(rng.integers(min_length, length + 1))
            source[row, :n_source - 1] = rng.integers(4, vocab_size, n_source - 1)
            source[row, n_source - 1] = 3
            words = rng.integers(4, vocab_size, n_target - 1)
            target_in[row, 0] = 2
            target_in[row, 1:n_target] = words
            labels[row, :n_target - 1] = words
            labels[row, n_target - 1] = 3
        batches.append(({"source_ids": tf.constant(source),
                         "target_ids": tf.constant(target_in)}, tf.constant(labels)))
    return batches


def ding_batches(num_batches, batch_tokens, length, vocab_size, workdir):
    """Batches of the Ding corpus from ``make_dataset``, all of one padded shape."""
    import tensorflow as tf

    from keras_attn_zoo import data as zoo_data

    pairs = zoo_data.load_pairs("ding:sentences", "train", "de-en")
    vocab = zoo_data.train_sentencepiece(pairs, workdir / "vocab.model",
                                         vocab_size=vocab_size)
    tokenizer = zoo_data.load_tokenizer(vocab)
    dataset, _ = zoo_data.make_dataset(pairs, tokenizer, batch_tokens=batch_tokens,
                                       max_length=length, seed=0)
    batches, shape = [], None
    for inputs, labels in dataset:
        # Pad to `length` so every contender (and XLA) sees one shape.
        def pad(x):
            return tf.pad(x, [[0, 0], [0, length - tf.shape(x)[1]]])
        inputs = {k: pad(v) for k, v in inputs.items()}
        labels = pad(labels)
        if shape is None:
            shape = tuple(labels.shape)
        if tuple(labels.shape) == shape:
            batches.append((inputs, labels))
        if len(batches) == num_batches:
            break
    return batches, int(tokenizer.vocabulary_size())


def equal_length_batches(batches):
    """The same batches with the source cut/padded to the target's length."""
    import tensorflow as tf

    out = []
    for inputs, labels in batches:
        length = labels.shape[1]
        source = inputs["source_ids"][:, :length]
        source = tf.pad(source, [[0, 0], [0, length - source.shape[1]]])
        out.append(({"source_ids": source, "target_ids": inputs["target_ids"]}, labels))
    return out


def benchmark_batches(args, workdir):
    """`(batches, vocabulary size)` of `--data`: Ding batches (a vocabulary is
    trained in `workdir`) or synthetic ones of `--length` / `--min-length`."""
    if args.data == "ding":
        return ding_batches(args.batches, args.batch_tokens, args.length, args.vocab_size,
                            workdir)
    batches = synthetic_batches(args.batches, max(1, args.batch_tokens // args.length),
                                args.length, args.min_length, args.vocab_size)
    return batches, args.vocab_size


# ---- contenders --------------------------------------------------------------------------

def make_optimizer(kind="zoo"):
    """The recipes' Adam: the zoo's (``"zoo"``, one fused kernel per variable on
    TensorFlow) or ``keras.optimizers.Adam`` itself (``"keras"``)."""
    import keras

    from keras_attn_zoo.optimizers import Adam
    from keras_attn_zoo.training import InverseSquareRootSchedule

    optimizer_class = {"zoo": Adam, "keras": keras.optimizers.Adam}[kind]
    return optimizer_class(InverseSquareRootSchedule(1e-3, 1000), beta_1=0.9,
                           beta_2=0.98, epsilon=1e-9)


def zoo_step(model, jit_compile=False, optimizer="zoo", **trainer_options):
    """Our training step: ``Trainer.train_on_batch`` (optionally under XLA; other
    ``Trainer`` arguments in ``trainer_options``; ``optimizer``: `make_optimizer`'s kind)."""
    from keras_attn_zoo.training import Trainer

    trainer = Trainer(model, make_optimizer(optimizer), label_smoothing=0.1,
                      jit_compile=bool(jit_compile), **trainer_options)
    return trainer.train_on_batch


def custom_step(model, jit_compile=False):
    """A keras-hub model's step: same optimizer and loss as ``Trainer``."""
    import tensorflow as tf

    from keras_attn_zoo.training.losses import token_loss_sum

    optimizer = make_optimizer()
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def step(inputs, labels):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss_sum, tokens, correct = token_loss_sum(labels, logits, 0.1)
            loss = loss_sum / tf.maximum(tokens, 1.0)
        variables = model.trainable_variables
        gradients = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(gradients, variables))
        return {"loss": loss, "tokens": tokens, "correct": correct}

    def train_on_batch(inputs, labels):
        return {k: float(v) for k, v in step(inputs, labels).items()}

    return train_on_batch


def relax(train_on_batch, batches):
    """Calls ``train_on_batch`` on a batch of another shape (half the rows, 4 fewer
    tokens), so that its next trace is shape-generic (``reduce_retracing``)."""
    inputs, labels = batches[0]
    rows, length = labels.shape[0], labels.shape[1]
    rows, length = max(1, rows // 2), max(2, length - 4)
    train_on_batch({k: v[:rows, :length] for k, v in inputs.items()},
                   labels[:rows, :length])
    return train_on_batch


def stepper(train_on_batch, batches, steps):
    """A zero-argument callable running ``steps`` steps over the cycled batches."""
    position = [0]

    def run():
        result = None
        for _ in range(steps):
            inputs, labels = batches[position[0] % len(batches)]
            position[0] += 1
            result = train_on_batch(inputs, labels)
        return result
    return run


def batch_statistics(batches):
    import numpy as np

    tokens = [int(np.count_nonzero(labels.numpy())) for _, labels in batches]
    inputs, labels = batches[0]
    return {"batch_size": int(labels.shape[0]),
            "source_length": int(inputs["source_ids"].shape[1]),
            "target_length": int(labels.shape[1]),
            "mean_target_tokens": float(np.mean(tokens))}


# ---- measurements ---------------------------------------------------------------------

def measure_ours_vs_keras_hub(args, batches, vocab_size, peaks):
    import keras

    from keras_attn_zoo.evaluation.flops import training_flops
    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.workflow import MIXED_PRECISION_POLICIES

    stats = batch_statistics(batches)
    rows = []
    for preset in args.presets:
        for precision in args.precisions:
            keras.mixed_precision.set_global_policy(
                MIXED_PRECISION_POLICIES["bf16" if precision == "bf16" else "none"])
            seed_everything(0)
            ours = transformer(vocab_size, preset=preset)
            config = ours.zoo_config
            hub = None
            if not args.no_keras_hub:
                hub = KerasHubTransformer(
                    **config, max_positions=stats["target_length"] + 8).training_model()
            flops = training_flops(config, stats["batch_size"], stats["source_length"],
                                   stats["target_length"])["total"]
            prepare = relax if args.shapes == "relaxed" else (lambda f, b: f)
            for xla in args.xla:
                contenders = {"ours": stepper(prepare(zoo_step(ours, xla), batches),
                                              batches, args.steps)}
                if hub is not None:
                    contenders["keras-hub"] = stepper(
                        prepare(custom_step(hub, xla), batches), batches, args.steps)
                timings, _ = common.alternate(contenders, args.repeats, args.warmup)
                for name, timing in timings.items():
                    step_seconds = timing.median / args.steps
                    peak = peaks.get("bf16" if precision == "bf16" else "float32")
                    rows.append({
                        "preset": preset, "precision": precision,
                        "xla": "on" if xla else "off", "model": name,
                        "params": (ours if name == "ours" else hub).count_params(),
                        "step_seconds": step_seconds,
                        "tokens_per_s": stats["mean_target_tokens"] / step_seconds,
                        "spread": timing.spread,
                        "train_gflop_per_step": flops / 1e9,
                        "mfu": (flops / step_seconds / (peak * 1e9)) if peak else None,
                    })
                if "keras-hub" in timings:
                    ratio = timings["keras-hub"].median / timings["ours"].median
                    for row in rows[-2:]:
                        row["ours_over_keras_hub"] = ratio
                print(common.format_table(rows[-len(timings):], TABLE_COLUMNS),
                      flush=True)
    keras.mixed_precision.set_global_policy("float32")
    return rows


def measure_precision_ab(args, batches, vocab_size, peaks):
    """Ours in float32 and in bf16 mixed precision, alternating, per preset."""
    import keras

    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.workflow import MIXED_PRECISION_POLICIES

    rows = []
    for preset in args.presets:
        contenders = {}
        for precision in ("float32", "bf16"):
            keras.mixed_precision.set_global_policy(
                MIXED_PRECISION_POLICIES["bf16" if precision == "bf16" else "none"])
            seed_everything(0)
            step = zoo_step(transformer(vocab_size, preset=preset))
            contenders[precision] = stepper(
                relax(step, batches) if args.shapes == "relaxed" else step,
                batches, args.steps)
        keras.mixed_precision.set_global_policy("float32")
        timings, _ = common.alternate(contenders, args.repeats, args.warmup)
        rows.append({
            "preset": preset,
            "float32_step_seconds": timings["float32"].median / args.steps,
            "bf16_step_seconds": timings["bf16"].median / args.steps,
            "bf16_over_float32": timings["float32"].median / timings["bf16"].median,
            "matmul_bf16_over_float32": peaks["bf16"] / peaks["float32"],
            "spread_float32": timings["float32"].spread,
            "spread_bf16": timings["bf16"].spread,
        })
        print(common.format_table(rows[-1:], PRECISION_COLUMNS), flush=True)
    return rows


def measure_zoo(args, batches, vocab_size, peaks):
    from keras_attn_zoo.evaluation.flops import training_flops
    from keras_attn_zoo.models import build_model

    equal = equal_length_batches(batches)
    stats = batch_statistics(equal)
    contenders, models = {}, {}
    for name in args.zoo_models:
        seed_everything(0)
        model = build_model(name, vocab_size, preset=args.zoo_preset)
        models[name] = model
        step = zoo_step(model)
        contenders[name] = stepper(relax(step, equal) if args.shapes == "relaxed"
                                   else step, equal, args.steps)
    timings, _ = common.alternate(contenders, args.repeats, args.warmup)
    base = timings.get("transformer")
    rows = []
    for name, timing in timings.items():
        step_seconds = timing.median / args.steps
        flops = training_flops(models[name], stats["batch_size"], stats["source_length"],
                               stats["target_length"])["total"]
        rows.append({
            "model": name, "preset": args.zoo_preset,
            "params": models[name].count_params(),
            "step_seconds": step_seconds,
            "tokens_per_s": stats["mean_target_tokens"] / step_seconds,
            "relative_to_transformer": (base.median / timing.median) if base else None,
            "train_gflop_per_step": flops / 1e9,
            "mfu": flops / step_seconds / (peaks["float32"] * 1e9),
            "spread": timing.spread,
        })
    return rows, stats


TABLE_COLUMNS = [
    ("preset", "preset", ""), ("precision", "precision", ""), ("xla", "xla", ""),
    ("model", "model", ""), ("step_seconds", "s/step", ".3f"),
    ("tokens_per_s", "tgt tok/s", ".0f"), ("ours_over_keras_hub", "ours/hub", ".2f"),
    ("mfu", "MFU", ".1%"), ("spread", "spread", ".2f"),
]
PRECISION_COLUMNS = [
    ("preset", "preset", ""), ("float32_step_seconds", "float32 s/step", ".3f"),
    ("bf16_step_seconds", "bf16 s/step", ".3f"), ("bf16_over_float32", "bf16 x", ".2f"),
    ("matmul_bf16_over_float32", "matmul bf16 x", ".2f"),
    ("spread_float32", "spread f32", ".2f"), ("spread_bf16", "spread bf16", ".2f"),
]
ZOO_COLUMNS = [
    ("model", "model", ""), ("params", "params", ","), ("step_seconds", "s/step", ".3f"),
    ("tokens_per_s", "tgt tok/s", ".0f"),
    ("relative_to_transformer", "vs transformer", ".2f"), ("mfu", "MFU", ".1%"),
]


def run(args):
    import pathlib
    import tempfile

    import tensorflow  # noqa: F401  (its version goes into the machine info)

    run_info = common.start_run()
    if "bf16" in args.precisions and not (common.cpu_supports_bf16() or args.force_bf16):
        print("no native bf16 on this CPU: bf16 rows skipped", flush=True)
        args.precisions = [p for p in args.precisions if p != "bf16"]
    size = 256 if args.smoke else 2048
    peaks = {"float32": common.matmul_rate("float32", size=size)["gflops"]}
    if "bf16" in args.precisions:
        peaks["bf16"] = common.matmul_rate("bfloat16", size=size)["gflops"]
    print("matmul rate (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()),
          flush=True)

    batches, vocab_size = benchmark_batches(
        args, pathlib.Path(tempfile.mkdtemp(prefix="train_throughput-")))
    stats = batch_statistics(batches)
    print(f"batches: {stats}", flush=True)

    rows = measure_ours_vs_keras_hub(args, batches, vocab_size, peaks)
    precision_rows = (measure_precision_ab(args, batches, vocab_size, peaks)
                      if args.precision_ab and "bf16" in peaks else [])
    zoo_rows, zoo_stats = ([], None) if args.no_zoo else measure_zoo(
        args, batches, vocab_size, peaks)
    return {
        "data": args.data, "shapes": args.shapes, "batches": stats,
        "zoo_batches": zoo_stats,
        "steps_per_call": args.steps, "repeats": args.repeats,
        "matmul_gflops": peaks, "ours_vs_keras_hub": rows,
        "bf16_vs_float32": precision_rows, "zoo": zoo_rows,
    }, run_info


def print_results(results, file=None):
    print(f"\nmatmul rate: {results['matmul_gflops']} GFLOP/s; batches "
          f"{results['batches']}", file=file or sys.stdout)
    common.print_table(results["ours_vs_keras_hub"], TABLE_COLUMNS,
                       "\nours (Trainer.train_on_batch) vs keras-hub layers, alternating:",
                       file=file)
    if results.get("bf16_vs_float32"):
        common.print_table(results["bf16_vs_float32"], PRECISION_COLUMNS,
                           "\nours in bf16 vs ours in float32, alternating:", file=file)
    if results["zoo"]:
        common.print_table(results["zoo"], ZOO_COLUMNS,
                           f"\nevery zoo model (preset {results['zoo'][0]['preset']}, "
                           "float32, no XLA), alternating:", file=file)


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    print_results(results)
    path = common.write_results("train_throughput", results, args.output_dir,
                                smoke=args.smoke, run=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

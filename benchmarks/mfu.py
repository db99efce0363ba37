#!/usr/bin/env python
"""Hardware limit: the machine's matmul rate, model FLOPs per token, and MFU.

1. **Matmul rate** through TensorFlow (``common.matmul_rate``), float32 and
   bfloat16, at several sizes; the best is the peak the MFU divides by.
2. **FLOPs per target token** of every Transformer preset
   (``keras_attn_zoo.evaluation.flops``): training (forward + backward = 3x the
   forward matmuls) at ``--length`` tokens per side, and decoding at beam 4.
3. **MFU of training** ``--preset`` (default base) with ``Trainer.train_on_batch``
   on synthetic batches of ``--batch-tokens`` (float32, and bf16 mixed precision
   when the CPU has it): model FLOPs per step / step time / peak.
4. **What holds it back**: one profiled training step (TensorFlow's profiler; the
   trace is read from its XSpace protobuf), op time grouped into matmuls,
   reductions, elementwise, data movement and the rest, with the slowest ops; and
   an A/B of the same step traced for static shapes and for relaxed shapes (what
   ``Trainer.train`` runs on bucketed data).
5. **MFU of decoding**: the export's search on ``--preset`` at batch 32, beam 4,
   output forced to ``--length`` tokens (``decode_speed.py``'s method), ideal
   decoding FLOPs over the float32 peak.

The attention projections are one 2-D matmul each
(``layers.HeadsProjection`` / ``HeadsOutput``). The 2026-11-22
run of this script timed the earlier ``EinsumDense`` projections, which with
static shapes become a broadcasting batched matmul whose kernel gradient ends
in a ``Sum`` over the batch, against 2-D matmuls: x1.47 per float32 base step
with static shapes. Relaxed shapes gave x1.46, because ``tf.einsum`` also
reaches one matmul. The package now uses 2-D matmuls, fast under either trace.

Usage:
    python benchmarks/mfu.py                   # base, ~10 min on 2 loaded cores
    python benchmarks/mfu.py --preset small --no-decode
    python benchmarks/mfu.py --smoke

Writes ``benchmarks/results/mfu-<date>.json`` and prints the tables.
"""

from __future__ import annotations

import argparse
import collections
import glob
import sys
import tempfile

import common
from keras_attn_zoo.training.seeding import seed_everything

MATMUL_OPS = ("MatMul", "BatchMatMul", "Einsum", "Conv")
REDUCTION_OPS = ("Sum", "Mean", "Max", "Min", "ArgMax", "Prod", "BiasAddGrad",
                 "UnsortedSegmentSum", "AddN", "LogSoftmax", "Softmax")
MOVEMENT_OPS = ("Transpose", "Reshape", "Concat", "Gather", "Slice", "Tile", "Pad",
                "Pack", "Unpack", "Split", "Identity", "Broadcast", "Select",
                "Scatter", "Copy", "Cast")
WRAPPER_EVENTS = ("ExecutorState::Process", "ThreadpoolListener", "ParallelFor")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--batch-tokens", type=int, default=6000)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--sizes", default="512,1024,2048,4096",
                        help="matmul sizes of the rate measurement")
    parser.add_argument("--no-bf16", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--no-shapes-ab", action="store_true",
                        help="skip the static vs relaxed shapes A/B")
    parser.add_argument("--no-decode", action="store_true")
    common.add_common_arguments(parser, repeats=3, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.batch_tokens, args.length = "tiny", 64, 8
        args.vocab_size, args.sizes, args.repeats = 120, "128,256", 1
        args.no_bf16 = True
    args.sizes = common.int_list(args.sizes)
    return args


def matmul_rates(args):
    rows = []
    dtypes = ["float32"] + ([] if args.no_bf16 or not common.cpu_supports_bf16()
                            else ["bfloat16"])
    for dtype in dtypes:
        for size in args.sizes:
            rows.append(common.matmul_rate(dtype, size=size, repeats=args.repeats + 2))
    peaks = {}
    for row in rows:
        key = "bf16" if row["dtype"] == "bfloat16" else "float32"
        peaks[key] = max(peaks.get(key, 0.0), row["gflops"])
    return rows, peaks


def flops_table(args):
    from keras_attn_zoo.evaluation.flops import decoding_flops
    from keras_attn_zoo.evaluation.flops import training_flops
    from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS

    rows = []
    for preset, sizes in TRANSFORMER_PRESETS.items():
        config = dict(sizes, vocabulary_size=args.vocab_size,
                      encoder_self_attention="multi_head",
                      decoder_self_attention="multi_head", cross_attention="multi_head")
        train = training_flops(config, 1, args.length, args.length)
        decode = decoding_flops(config, args.length, args.length, beam_size=4)
        rows.append({"preset": preset,
                     "train_mflop_per_target_token": train["per_target_token"] / 1e6,
                     "decode_mflop_per_target_token_beam4":
                         decode["per_target_token"] / 1e6})
    return rows


def _batches(args):
    from train_throughput import synthetic_batches

    return synthetic_batches(2, max(1, args.batch_tokens // args.length), args.length,
                             max(2, args.length // 2), args.vocab_size)


def measure_training(args, batches, peaks):
    import keras

    from keras_attn_zoo.evaluation.flops import training_flops
    from keras_attn_zoo.models import transformer
    from train_throughput import batch_statistics
    from train_throughput import relax
    from train_throughput import stepper
    from train_throughput import zoo_step

    stats = batch_statistics(batches)
    rows = []
    for precision in peaks:
        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if precision == "bf16" else "float32")
        seed_everything(0)
        model = transformer(args.vocab_size, preset=args.preset)
        flops = training_flops(model, stats["batch_size"], stats["source_length"],
                               stats["target_length"])["total"]
        step = relax(zoo_step(model), batches)  # the trace Trainer.train runs
        timing, _ = common.time_call(stepper(step, batches, 1),
                                     repeats=args.repeats, warmup=args.warmup)
        rows.append({"preset": args.preset, "precision": precision,
                     "step_seconds": timing.median,
                     "tokens_per_s": stats["mean_target_tokens"] / timing.median,
                     "train_gflop_per_step": flops / 1e9,
                     "achieved_gflops": flops / timing.median / 1e9,
                     "peak_gflops": peaks[precision],
                     "mfu": flops / timing.median / (peaks[precision] * 1e9)})
    keras.mixed_precision.set_global_policy("float32")
    return rows, stats


def classify(op_type):
    if any(op_type.endswith(m) or m in op_type for m in MATMUL_OPS):
        return "matmul"
    if any(r in op_type for r in REDUCTION_OPS):
        return "reduction"
    if any(m in op_type for m in MOVEMENT_OPS):
        return "data movement"
    if "Random" in op_type:
        return "dropout rng"
    return "elementwise/other"


def profile_step(args, batches):
    """Op time of one training step, grouped by kind, from TensorFlow's profiler."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from keras_attn_zoo.models import transformer
    from train_throughput import stepper
    from train_throughput import zoo_step

    from train_throughput import relax

    seed_everything(0)
    run = stepper(relax(zoo_step(transformer(args.vocab_size, preset=args.preset)),
                        batches), batches, 1)
    run()
    logdir = tempfile.mkdtemp(prefix="mfu-profile-")
    tf.profiler.experimental.start(logdir)
    run()
    tf.profiler.experimental.stop()
    path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    by_kind, by_op = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if any(wrapper in name for wrapper in WRAPPER_EVENTS):
                    continue
                op_type = name.rsplit(":", 1)[-1]
                seconds = event.duration_ps / 1e12
                by_kind[classify(op_type)] += seconds
                by_op[name] += seconds
    total = sum(by_kind.values()) or 1.0
    return {
        "op_seconds": total,
        "by_kind": {kind: {"seconds": s, "share": s / total}
                    for kind, s in by_kind.most_common()},
        "slowest_ops": [{"op": name[:160], "seconds": s} for name, s in
                        by_op.most_common(15)],
    }


def shapes_ab(args, batches):
    """Step time of the same step traced for static and for relaxed shapes."""
    from keras_attn_zoo.models import transformer
    from train_throughput import relax
    from train_throughput import stepper
    from train_throughput import zoo_step

    seed_everything(0)
    static = stepper(zoo_step(transformer(args.vocab_size, preset=args.preset)),
                     batches, 1)
    seed_everything(0)
    relaxed = stepper(relax(zoo_step(transformer(args.vocab_size, preset=args.preset)),
                            batches), batches, 1)
    timings, _ = common.alternate({"static": static, "relaxed": relaxed},
                                  repeats=args.repeats, warmup=1)
    return {"static_seconds": timings["static"].median,
            "relaxed_seconds": timings["relaxed"].median,
            "relaxed_speedup": timings["static"].median / timings["relaxed"].median}


def measure_decoding(args, peaks):
    import pathlib
    import types

    from inputs import benchmark_vocabulary
    from inputs import zoo_source_ids
    from zoo_decoding import build_zoo_translator
    from zoo_decoding import zoo_call
    from keras_attn_zoo.evaluation.flops import decoding_flops

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="mfu-"))
    vocab = benchmark_vocabulary(types.SimpleNamespace(
        vocab_size=args.vocab_size, smoke=args.smoke, source_words=15), workdir)
    translator, model = build_zoo_translator("transformer", vocab, args.preset,
                                             args.length)
    batch, beam = (4, 2) if args.smoke else (32, 4)
    source = zoo_source_ids(batch, args.length, translator.vocabulary_size)
    timing, _ = common.time_call(zoo_call(translator, source, beam, args.length),
                                 repeats=args.repeats, warmup=1)
    flops = batch * decoding_flops(model, args.length, args.length, beam)["total"]
    return {"preset": args.preset, "batch": batch, "beam": beam,
            "output_length": args.length, "seconds": timing.median,
            "sentences_per_s": batch / timing.median,
            "achieved_gflops": flops / timing.median / 1e9,
            "mfu": flops / timing.median / (peaks["float32"] * 1e9)}


def run(args):
    import tensorflow  # noqa: F401  (its version goes into the machine info)

    run_info = common.start_run()
    rate_rows, peaks = matmul_rates(args)
    print(common.format_table(rate_rows, RATE_COLUMNS, "matmul rate:"), flush=True)
    results = {"matmul": rate_rows, "peak_gflops": peaks,
               "flops_per_token": flops_table(args)}
    batches = _batches(args)
    results["training"], results["batches"] = measure_training(args, batches, peaks)
    print(common.format_table(results["training"], TRAIN_COLUMNS, "training:"),
          flush=True)
    if not args.no_profile:
        results["profile"] = profile_step(args, batches)
    if not args.no_shapes_ab:
        results["shapes_ab"] = shapes_ab(args, batches)
    if not args.no_decode:
        results["decoding"] = measure_decoding(args, peaks)
    return results, run_info


RATE_COLUMNS = [("dtype", "dtype", ""), ("size", "n", ""), ("gflops", "GFLOP/s", ".0f"),
                ("best_gflops", "best", ".0f")]
FLOPS_COLUMNS = [("preset", "preset", ""),
                 ("train_mflop_per_target_token", "train MFLOP/tok", ".1f"),
                 ("decode_mflop_per_target_token_beam4", "decode MFLOP/tok (beam 4)",
                  ".1f")]
TRAIN_COLUMNS = [("preset", "preset", ""), ("precision", "precision", ""),
                 ("step_seconds", "s/step", ".2f"), ("tokens_per_s", "tgt tok/s", ".0f"),
                 ("achieved_gflops", "GFLOP/s", ".1f"), ("peak_gflops", "peak", ".0f"),
                 ("mfu", "MFU", ".1%")]


def print_results(results, file=None):
    file = file or sys.stdout
    common.print_table(results["matmul"], RATE_COLUMNS, "\nmatmul rate through "
                       "TensorFlow:", file=file)
    common.print_table(results["flops_per_token"], FLOPS_COLUMNS,
                       "\nmodel FLOPs per target token (matmuls only):", file=file)
    common.print_table(results["training"], TRAIN_COLUMNS,
                       f"\ntraining MFU (batches {results['batches']}):", file=file)
    if "profile" in results:
        profile = results["profile"]
        rows = [{"kind": kind, **value} for kind, value in profile["by_kind"].items()]
        common.print_table(rows, [("kind", "op kind", ""), ("seconds", "s", ".3f"),
                                  ("share", "share", ".1%")],
                           f"\nwhere one float32 training step's op time goes "
                           f"({profile['op_seconds']:.2f} s of op time):", file=file)
        common.print_table(profile["slowest_ops"][:10],
                           [("seconds", "s", ".3f"), ("op", "slowest ops", "")],
                           file=file)
    if "shapes_ab" in results:
        w = results["shapes_ab"]
        print(f"\none float32 step, static shapes {w['static_seconds']:.2f} s; relaxed "
              f"shapes {w['relaxed_seconds']:.2f} s (x{w['relaxed_speedup']:.2f})",
              file=file)
    if "decoding" in results:
        d = results["decoding"]
        print(f"\ndecoding MFU ({d['preset']}, batch {d['batch']}, beam {d['beam']}, "
              f"{d['output_length']} tokens): {d['achieved_gflops']:.1f} GFLOP/s, "
              f"MFU {d['mfu']:.2%}, {d['sentences_per_s']:.1f} sentences/s", file=file)


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    print_results(results)
    path = common.write_results("mfu", results, args.output_dir, smoke=args.smoke,
                                run=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

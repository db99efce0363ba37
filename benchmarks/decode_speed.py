#!/usr/bin/env python
"""Decoding speed of the exported `translate`, and of keras-hub's BeamSampler.

Measures, on the exported SavedModel (loaded with ``tf.saved_model.load``, as a
server would):

1. sentences/s and target tokens/s of ``translate_with_options`` (the exported
   ``translate`` with the beam size as an input) at batch 1, 32, 100 and beam 1, 4,
   with the export's default output limit ``ceil(a * source + b)``;
2. the same search against ``keras_hub.samplers.BeamSampler`` driving a model of the
   same size built from ``keras_hub.layers.TransformerEncoder/TransformerDecoder``
   with their key/value caches, both decoding the same number of steps (ours with
   ``max_length_a=0, max_length_b=T``; keras-hub with a prompt of ``T + 2`` slots and
   no stop token), at batch 32 and beam 4: the time ratio ours / keras-hub;
3. the cost of 4x longer outputs (T -> 4T steps) for both: time ratio (4 = linear);
4. every zoo model (``--models``; RAN-ALL is ``ran_transformer:apply_to=all``):
   sentences/s and target tokens/s by batch size (1, 10, 32, 100) and beam size (1,
   4, 8), as the RAN paper's Figure 3 plots, all models alternating at each point,
   with each model's speed relative to the Transformer (goal of issue 7: RAN-ALL >=
   1.25x at batch 100; the paper: 1.236x) and the decoding MFU (ideal decoding
   FLOPs from ``keras_attn_zoo.evaluation.flops`` over the float32 matmul rate).

Fixed output length (table 4): every zoo model decodes with EOS banned until L
tokens (``--output-length``), see ``zoo_decoding.py``; the rows record the mean
output length.

Both models are random (or the trained export's weights for ours): what is measured
is the search, not the translation. An untrained model rarely emits EOS, so outputs
run to the length limit; a trained model's outputs end earlier, so also read the
target tokens/s, not only sentences/s.

Usage:
    python benchmarks/decode_speed.py --preset small          # untrained, built here
    python benchmarks/decode_speed.py --model-dir saved_models/NAME
    python benchmarks/decode_speed.py --smoke                 # seconds, for tests
    python benchmarks/decode_speed.py --no-keras-hub --models transformer,\
        ran_transformer:apply_to=all --zoo-batches 100 --zoo-beams 4

Writes ``benchmarks/results/decode_speed-<date>.json`` (``-smoke`` before ``.json`` in
smoke mode) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import common
from inputs import benchmark_sentences
from inputs import benchmark_vocabulary
from inputs import synthetic_corpus
from inputs import vocabulary_words
from reference import KerasHubTransformer
from zoo_decoding import ZOO_COLUMNS
from zoo_decoding import measure_zoo
from zoo_decoding import zoo_summary
from keras_attn_zoo.data.vocabulary import sentencepiece_processor
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.training.seeding import seed_everything

RESULTS_DIR = common.RESULTS_DIR
ZOO_MODELS = ("transformer,ran_transformer:apply_to=all,ran_transformer,gmm_transformer,"
              "weighted_transformer,hard_coded_transformer,synthesizer_transformer,"
              "bahdanau_rnn,eager_translator")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model-dir", help="an exported model (base or version dir)")
    source.add_argument("--preset", default="small",
                        help="build an untrained transformer of this preset "
                             "(default small)")
    parser.add_argument("--vocab-size", type=int, default=8000,
                        help="SentencePiece vocabulary for --preset (default 8000)")
    parser.add_argument("--source-words", type=int, default=15,
                        help="words per synthetic source sentence (default 15)")
    parser.add_argument("--sentences", help="file of source sentences (one a line)")
    parser.add_argument("--batches", default="1,32,100")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--compare-batch", type=int, default=32)
    parser.add_argument("--compare-beam", type=int, default=DEFAULT_BEAM_SIZE)
    parser.add_argument("--steps", type=int, default=32,
                        help="output tokens T of the keras-hub comparison (default 32)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per configuration; the median is kept")
    parser.add_argument("--output-dir", default=str(RESULTS_DIR))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny preset, small batches and vocabulary, one run each")
    parser.add_argument("--no-keras-hub", action="store_true",
                        help="skip the keras-hub comparison")
    parser.add_argument("--models", default=ZOO_MODELS,
                        help="zoo models of table 4: builder names, options after "
                             "':' as key=value pairs joined by ';' (default: all, "
                             "plus RAN-ALL)")
    parser.add_argument("--zoo-preset", default=None,
                        help="preset of the zoo models (default: --preset)")
    parser.add_argument("--zoo-batches", default="1,10,32,100")
    parser.add_argument("--zoo-beams", default="1,4,8")
    parser.add_argument("--output-length", type=int, default=24,
                        help="forced output tokens L of table 4 (default 24)")
    parser.add_argument("--source-tokens", type=int, default=16,
                        help="source tokens incl. EOS of table 4 (default 16)")
    parser.add_argument("--no-zoo", action="store_true", help="skip table 4")
    args = parser.parse_args(argv)
    if args.smoke:
        if args.model_dir is None:
            args.preset = "tiny"
        args.vocab_size = min(args.vocab_size, 120)
        args.source_words = min(args.source_words, 5)
        args.batches, args.beams = "1,4", "1,2"
        args.compare_batch, args.compare_beam = 4, 2
        args.steps = min(args.steps, 6)
        args.repeats = 1
        args.models = "transformer,ran_transformer:apply_to=all,eager_translator"
        args.zoo_batches, args.zoo_beams = "1,4", "1,2"
        args.output_length, args.source_tokens = 6, 5
    args.batches = [int(b) for b in args.batches.split(",")]
    args.beams = [int(b) for b in args.beams.split(",")]
    args.zoo_batches = common.int_list(args.zoo_batches)
    args.zoo_beams = common.int_list(args.zoo_beams)
    args.models = common.str_list(args.models)
    if args.zoo_preset is None:
        args.zoo_preset = args.preset or "small"
    return args


# ---- the export ----------------------------------------------------------------

def build_export(args, workdir):
    """Trains a SentencePiece model on synthetic text, builds and exports a model."""

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.export import export_saved_model
    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.workflow import RunConfig
    from keras_attn_zoo.workflow import run_translator

    num_words = max(50, args.vocab_size)
    vocab_path = benchmark_vocabulary(args, workdir)
    _, words, weights = synthetic_corpus(num_words, 0, args.source_words)
    seed_everything(0)
    tokenizer = load_tokenizer(vocab_path)
    model = transformer(int(tokenizer.vocabulary_size()), preset=args.preset)
    path = export_saved_model(run_translator(RunConfig(), model, tokenizer),
                              workdir / "saved_models" / "bench",
                              model_card={"preset": args.preset, "data": "untrained"})
    return path, words, weights


# ---- timing -----------------------------------------------------------------------

def ours_call(signature, sentences, beam, a, b):
    import tensorflow as tf

    text = tf.constant(sentences)
    options = dict(beam_size=tf.constant(beam, tf.int32),
                   length_penalty=tf.constant(DEFAULT_LENGTH_PENALTY, tf.float32),
                   max_length_a=tf.constant(float(a), tf.float32),
                   max_length_b=tf.constant(float(b), tf.float32))
    return lambda: signature(text=text, **options)


# ---- main ---------------------------------------------------------------------------

def run(args):
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="decode_speed-"))
    run_info = common.start_run()
    if args.model_dir:
        from keras_attn_zoo.export import latest_version

        model_dir = latest_version(args.model_dir)
        words, weights = vocabulary_words((model_dir / "assets" / "vocab.model")
                                          .read_bytes())
        source_label = str(model_dir)
    else:
        model_dir, words, weights = build_export(args, workdir)
        source_label = f"untrained transformer preset={args.preset}"
    card = json.loads((model_dir / "model_card.json").read_text(encoding="utf-8"))
    config = card.get("model_config") or {}
    defaults = card.get("defaults", {})
    a, b = defaults.get("max_length_a", 2.0), defaults.get("max_length_b", 10)
    loaded = tf.saved_model.load(str(model_dir))
    signature = loaded.signatures["translate_with_options"]
    sentences = benchmark_sentences(args, max(args.batches + [args.compare_batch]),
                                    words, weights)

    rows = []
    for beam in args.beams:
        for batch in args.batches:
            timing, out = common.time_call(
                ours_call(signature, sentences[:batch], beam, a, b), args.repeats)
            seconds = timing.median
            tokens = int(out["length"].numpy().sum())
            rows.append({
                "batch": batch, "beam": beam, "seconds": seconds,
                "sentences_per_s": batch / seconds, "target_tokens_per_s": tokens / seconds,
                "mean_target_length": tokens / batch,
                "mean_source_tokens": float(np.mean(
                    (out["source_pieces"].numpy() != b"").sum(axis=1))),
            })

    comparison = None
    batch, beam, steps = args.compare_batch, args.compare_beam, args.steps
    compare_sentences = sentences[:batch]
    ours = {}
    for length in (steps, 4 * steps):
        timing, out = common.time_call(
            ours_call(signature, compare_sentences, beam, 0, length), args.repeats)
        ours[length] = {"seconds": timing.median,
                        "mean_target_length": float(out["length"].numpy().mean())}
    comparison = {
        "batch": batch, "beam": beam, "target_tokens": steps,
        "ours_seconds": ours[steps]["seconds"],
        "ours_mean_target_length": ours[steps]["mean_target_length"],
        "ours_long_ratio": ours[4 * steps]["seconds"] / ours[steps]["seconds"],
        "ours_long_mean_target_length": ours[4 * steps]["mean_target_length"],
    }
    if not args.no_keras_hub and config:
        # The keras-hub model gets the same source ids as ours.
        sp = sentencepiece_processor(model_dir / "assets" / "vocab.model")
        ids = [sp.encode(s) + [3] for s in compare_sentences]
        width = max(len(i) for i in ids)
        source = np.array([i + [0] * (width - len(i)) for i in ids], "int32")
        seed_everything(0)
        hub = KerasHubTransformer(**config, max_positions=max(4 * steps + 2, width) + 8)
        hub_seconds = {}
        for length in (steps, 4 * steps):
            timing, _ = common.time_call(hub.call(source, length, beam), args.repeats)
            hub_seconds[length] = timing.median
        comparison.update({
            "keras_hub_seconds": hub_seconds[steps],
            "ratio_ours_over_keras_hub": ours[steps]["seconds"] / hub_seconds[steps],
            "speedup_over_keras_hub": hub_seconds[steps] / ours[steps]["seconds"],
            "keras_hub_long_ratio": hub_seconds[4 * steps] / hub_seconds[steps],
            "ratio_ours_over_keras_hub_long": (ours[4 * steps]["seconds"]
                                               / hub_seconds[4 * steps]),
        })

    zoo_rows, zoo_info = [], None
    if not args.no_zoo and args.models:
        vocab_path = (model_dir / "assets" / "vocab.model" if args.model_dir
                      else benchmark_vocabulary(args, workdir))
        peak = common.matmul_rate("float32", size=256 if args.smoke else 2048)
        zoo_rows = measure_zoo(args, vocab_path, peak["gflops"])
        zoo_info = {"preset": args.zoo_preset, "output_length": args.output_length,
                    "source_tokens": args.source_tokens,
                    "matmul_gflops_float32": peak["gflops"],
                    "fixed_length": "EOS banned before L tokens, max_length_a=0, "
                                    "max_length_b=L (EOS forced at step L)",
                    "summary": zoo_summary(zoo_rows)}

    results = {
        "date": run_info["date"],
        "model": source_label,
        "model_config": config,
        "smoke": args.smoke,
        "max_length_a": a, "max_length_b": b,
        "repeats": args.repeats,
        "translate": rows,
        "comparison": comparison,
        "zoo": zoo_rows,
        "zoo_settings": zoo_info,
    }
    return results, run_info


def print_table(results, file=sys.stdout):
    print(f"model: {results['model']}  (output limit ceil({results['max_length_a']} * "
          f"source + {results['max_length_b']}))", file=file)
    print(f"{'beam':>4} {'batch':>5} {'sent/s':>9} {'tok/s':>9} {'tgt len':>8} "
          f"{'seconds':>8}", file=file)
    for row in results["translate"]:
        print(f"{row['beam']:>4} {row['batch']:>5} {row['sentences_per_s']:>9.2f} "
              f"{row['target_tokens_per_s']:>9.1f} {row['mean_target_length']:>8.1f} "
              f"{row['seconds']:>8.3f}", file=file)
    c = results["comparison"]
    if c:
        print(f"\nbatch {c['batch']} beam {c['beam']}, T={c['target_tokens']} tokens "
              f"(ours mean length {c['ours_mean_target_length']:.1f}):", file=file)
        print(f"  ours {c['ours_seconds']:.3f} s", end="", file=file)
        if "keras_hub_seconds" in c:
            print(f", keras-hub BeamSampler {c['keras_hub_seconds']:.3f} s, "
                  f"ratio ours/keras-hub {c['ratio_ours_over_keras_hub']:.2f} "
                  f"(ours {1 / c['ratio_ours_over_keras_hub']:.2f}x faster)", end="",
                  file=file)
        print(file=file)
        print(f"  4x longer outputs: ours x{c['ours_long_ratio']:.2f}", end="", file=file)
        if "keras_hub_long_ratio" in c:
            print(f", keras-hub x{c['keras_hub_long_ratio']:.2f} "
                  f"(ratio at 4T {c['ratio_ours_over_keras_hub_long']:.2f})", end="",
                  file=file)
        print(file=file)
    if results.get("zoo"):
        settings = results["zoo_settings"]
        common.print_table(
            results["zoo"], ZOO_COLUMNS,
            f"\nevery zoo model, preset {settings['preset']}, {settings['source_tokens']} "
            f"source tokens, output forced to {settings['output_length']} tokens "
            "(alternating at each point):", file=file)
        for key, value in (settings.get("summary") or {}).items():
            print(f"  {key}: {value:.3f}", file=file)


def write_results(results, output_dir, smoke=False, run_info=None):
    return common.write_results("decode_speed", results, output_dir, smoke=smoke,
                                run=run_info)


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    print_table(results)
    path = write_results(results, args.output_dir, smoke=args.smoke, run_info=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

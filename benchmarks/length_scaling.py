#!/usr/bin/env python
"""How training and decoding time grow with the sentence length (16 -> 256 tokens).

For each model (default: the Transformer, RAN-ALL and the eager translator) and each
length L in ``--lengths`` (doubling):

* **training**: seconds per step of ``Trainer.train_on_batch`` on a batch of
  ``--train-batch`` sentence pairs whose source and target are both L tokens long
  (random ids; the number of sentences is fixed, so a model whose cost is linear in
  the length shows exponent 1 and full self-attention pushes it towards 2);
* **decoding**: seconds per sentence of the export's search
  (``Translator.translate_ids``) on ``--decode-batch`` sources of L tokens, beam
  ``--beam``, the output forced to exactly L tokens (EOS banned, the length
  limit L forces it, as in ``decode_speed.py``).

The exponent is the least-squares slope of log(time) against log(L), over all
lengths and over the longest three (the asymptotic regime). With key/value caches
a decoder step should cost O(1) matmul work plus O(t) attention, so a sentence
costs O(L) + O(L^2) with a small quadratic constant: "near-linear" means an
exponent close to 1 over these lengths. Every point alternates the models.

Usage:
    python benchmarks/length_scaling.py                      # small preset, ~20 min
    python benchmarks/length_scaling.py --models transformer --lengths 16,32,64
    python benchmarks/length_scaling.py --smoke

Writes ``benchmarks/results/length_scaling-<date>.json`` and prints the tables.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import types

import common
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.training.seeding import seed_everything

DEFAULT_MODELS = ("transformer,ran_transformer:apply_to=all;max_length=320,"
                  "eager_translator")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help="model specs as in decode_speed.py --models")
    parser.add_argument("--lengths", default="16,32,64,128,256")
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--decode-batch", type=int, default=8)
    parser.add_argument("--beam", type=int, default=DEFAULT_BEAM_SIZE)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--no-train", action="store_true")
    parser.add_argument("--no-decode", action="store_true")
    common.add_common_arguments(parser, repeats=3, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.lengths = "tiny", "8,16"
        args.models = "transformer,eager_translator"
        args.train_batch, args.decode_batch, args.beam = 4, 2, 2
        args.vocab_size, args.repeats = 120, 1
    args.lengths = common.int_list(args.lengths)
    args.models = common.str_list(args.models)
    return args


def train_batch(batch, length, vocab_size, seed=0):
    """One batch of random pairs, source and target exactly ``length`` tokens."""
    from train_throughput import synthetic_batches

    return synthetic_batches(1, batch, length, length, vocab_size, seed=seed)


def measure_training(args, vocab_size):
    from zoo_decoding import parse_model_spec
    from keras_attn_zoo.models import build_model
    from train_throughput import stepper
    from train_throughput import zoo_step

    steps = {}
    for spec in args.models:
        name, kwargs, _ = parse_model_spec(spec)
        seed_everything(0)
        steps[spec] = zoo_step(build_model(name, vocab_size, preset=args.preset,
                                           **kwargs))
    rows = []
    for length in args.lengths:
        batches = train_batch(args.train_batch, length, vocab_size)
        timings, _ = common.alternate(
            {spec: stepper(step, batches, 1) for spec, step in steps.items()},
            repeats=args.repeats, warmup=args.warmup)
        for spec, timing in timings.items():
            rows.append({"model": spec, "length": length,
                         "step_seconds": timing.median,
                         "seconds_per_sentence": timing.median / args.train_batch,
                         "spread": timing.spread})
        print(common.format_table(rows[-len(timings):], TRAIN_COLUMNS,
                                  f"training, length {length}:"), flush=True)
    return rows


def measure_decoding(args, vocab_path):
    from inputs import zoo_source_ids
    from zoo_decoding import build_zoo_translator
    from zoo_decoding import zoo_call

    translators = {}
    longest = max(args.lengths)
    for spec in args.models:
        translator, _ = build_zoo_translator(spec, vocab_path, args.preset, longest)
        translators[spec] = translator
    vocab_size = translators[args.models[0]].vocabulary_size
    rows = []
    for length in args.lengths:
        source = zoo_source_ids(args.decode_batch, length, vocab_size)
        calls = {spec: zoo_call(translator, source, args.beam, length)
                 for spec, translator in translators.items()}
        timings, outputs = common.alternate(calls, repeats=args.repeats,
                                            warmup=args.warmup)
        for spec, timing in timings.items():
            rows.append({"model": spec, "length": length,
                         "seconds_per_sentence": timing.median / args.decode_batch,
                         "mean_target_length": float(
                             outputs[spec]["lengths"].numpy().mean()),
                         "spread": timing.spread})
        print(common.format_table(rows[-len(timings):], DECODE_COLUMNS,
                                  f"decoding, length {length}:"), flush=True)
    return rows


def exponents(rows, key):
    """Per model: log-log slope over all lengths and over the longest three."""
    result = {}
    for model in dict.fromkeys(row["model"] for row in rows):
        points = sorted((row["length"], row[key]) for row in rows if row["model"] == model)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        result[model] = {"all": common.log_log_slope(xs, ys),
                         "longest_three": common.log_log_slope(xs[-3:], ys[-3:])}
    return result


TRAIN_COLUMNS = [("model", "model", ""), ("length", "L", ""),
                 ("step_seconds", "s/step", ".3f"),
                 ("seconds_per_sentence", "s/sentence", ".4f"), ("spread", "spread", ".2f")]
DECODE_COLUMNS = [("model", "model", ""), ("length", "L", ""),
                  ("seconds_per_sentence", "s/sentence", ".4f"),
                  ("mean_target_length", "out len", ".1f"), ("spread", "spread", ".2f")]


def run(args):
    from inputs import benchmark_vocabulary

    run_info = common.start_run()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="length_scaling-"))
    vocab_args = types.SimpleNamespace(vocab_size=args.vocab_size, smoke=args.smoke,
                                       source_words=15)
    vocab_path = benchmark_vocabulary(vocab_args, workdir)
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor

    vocab_size = sentencepiece_processor(vocab_path).get_piece_size()
    results = {"preset": args.preset, "models": args.models, "lengths": args.lengths,
               "train_batch": args.train_batch, "decode_batch": args.decode_batch,
               "beam": args.beam, "repeats": args.repeats}
    if not args.no_train:
        results["training"] = measure_training(args, vocab_size)
        results["training_exponents"] = exponents(results["training"],
                                                  "seconds_per_sentence")
    if not args.no_decode:
        results["decoding"] = measure_decoding(args, vocab_path)
        results["decoding_exponents"] = exponents(results["decoding"],
                                                  "seconds_per_sentence")
    return results, run_info


def print_results(results, file=None):
    file = file or sys.stdout
    for part, columns in (("training", TRAIN_COLUMNS), ("decoding", DECODE_COLUMNS)):
        if part not in results:
            continue
        common.print_table(results[part], columns, f"\n{part} (preset "
                           f"{results['preset']}):", file=file)
        print(f"exponent of time per sentence vs length ({part}):", file=file)
        for model, slopes in results[f"{part}_exponents"].items():
            print(f"  {model}: {slopes['all']:.2f} over all lengths, "
                  f"{slopes['longest_three']:.2f} over the longest three", file=file)


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    print_results(results)
    path = common.write_results("length_scaling", results, args.output_dir,
                                smoke=args.smoke, run=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

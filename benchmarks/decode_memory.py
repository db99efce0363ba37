#!/usr/bin/env python
"""Peak resident memory of decoding as the input grows: the eager translator vs the others.

Each point runs in a fresh Python process (``common.run_isolated``), so no
allocation of an earlier point is counted: the child builds the model (untrained,
``--preset``), runs one short call (traces the search), records its peak resident
memory so far (``ru_maxrss``) as the *baseline*, then translates ``--batch``
source(s) of N tokens (``--lengths``, EOS included) with the output forced to N
tokens (as in ``decode_speed.py``: EOS banned, ``max_length_a=0, max_length_b=N``)
and records the peak again. The growth ``delta = peak - baseline`` is what the
decoding of that input needed.

Contenders (``--models``):

* the zoo models decoded by the export's search (``Translator.translate_ids``,
  beam ``--beam``): keys/values caches grow with the output, cross-attention
  memory with the input, and the search keeps an alignment ``[rows, T, S]``;
* ``eager_translator`` through the same search (its state is constant, but the
  search still records the hard alignment ``[rows, T, S]``);
* ``eager_stream``: the eager translator's ``EagerStreamer`` (greedy, one source
  token in, one target token out), whose state is the LSTM states and three
  counters: the claim of Press & Smith that memory does not grow with the input.

Fixed-length models (RAN, the synthesizer, HC-SA) accept at most their
``max_length`` (256) tokens; longer points are recorded as skipped.

Usage:
    python benchmarks/decode_memory.py                 # small preset, ~10 min
    python benchmarks/decode_memory.py --lengths 16,256 --models transformer,eager_stream
    python benchmarks/decode_memory.py --smoke     # all points in ONE fresh process

Writes ``benchmarks/results/decode_memory-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
import types

import common
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.training.seeding import seed_everything

DEFAULT_MODELS = "eager_stream,eager_translator,transformer,bahdanau_rnn,ran_transformer"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--lengths", default="16,64,256,1024")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--beam", type=int, default=DEFAULT_BEAM_SIZE)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--timeout", type=int, default=1200,
                        help="seconds per point (default 1200)")
    common.add_common_arguments(parser, repeats=1, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.lengths = "tiny", "8,32"
        args.models = "eager_stream,transformer"
        args.vocab_size = 120
    args.models = common.str_list(args.models)
    args.lengths = common.int_list(args.lengths)
    return args


def measure_point(spec, length, preset, vocab_path, batch=1, beam=4):
    """Runs in the child process: one model, one input length. Returns a dict."""
    import numpy as np

    from inputs import zoo_source_ids
    from zoo_decoding import build_zoo_translator
    from zoo_decoding import parse_model_spec
    from zoo_decoding import zoo_call

    name, kwargs, _ = parse_model_spec(spec)
    if name == "eager_stream":
        return _measure_stream(length, preset, vocab_path, batch)
    translator, model = build_zoo_translator(spec, vocab_path, preset, length)
    limit = model.max_decode_length
    if limit is not None and length + 1 > limit:
        return {"skipped": f"{name} accepts at most max_length={limit} positions"}
    vocab_size = translator.vocabulary_size
    zoo_call(translator, zoo_source_ids(batch, 4, vocab_size), beam, 4)()  # trace
    common.mark_baseline()
    source = zoo_source_ids(batch, length, vocab_size)
    start = time.perf_counter()
    output = zoo_call(translator, source, beam, length)()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "params": int(model.count_params()),
            "source_tokens_per_s": batch * length / seconds,
            "mean_target_length": float(np.mean(output["lengths"].numpy()))}


def measure_points(points):
    """Runs in the child process: :func:`measure_point` of each point in turn.

    For ``--smoke`` (TensorFlow starts once, not once per point): the points
    share the process, so a row's ``peak_rss_mb`` is the peak so far and its
    ``baseline_rss_mb`` the peak before its measured part; they exercise the
    code, they are no memory figures.
    """
    rows = []
    for point in points:
        common.reset_baseline()
        row = dict(measure_point(**point))
        row["peak_rss_mb"] = round(common.peak_rss_mb(), 1)
        baseline = common.baseline_rss_mb()
        if baseline is not None:
            row["baseline_rss_mb"] = round(baseline, 1)
            row["delta_rss_mb"] = round(row["peak_rss_mb"] - baseline, 1)
        rows.append(row)
    return {"rows": rows}


def _measure_stream(length, preset, vocab_path, batch):
    from inputs import zoo_source_ids
    from keras_attn_zoo.decoding.eager_processor import EagerStreamer
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.models import eager_translator

    vocab_size = sentencepiece_processor(vocab_path).get_piece_size()
    seed_everything(0)
    model = eager_translator(vocab_size + 3, preset=preset)  # + start, epsilon, pad
    streamer = EagerStreamer(model, source_padding_injection=0)
    warm = zoo_source_ids(1, 4, vocab_size)[0]
    streamer.feed([int(t) for t in warm[:-1]])
    streamer.finish()
    common.mark_baseline()
    start = time.perf_counter()
    produced = 0
    for row in zoo_source_ids(batch, length, vocab_size):
        for token in row[:-1]:
            produced += len(streamer.feed([int(token)]))
        produced += len(streamer.finish())
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "params": int(model.count_params()),
            "source_tokens_per_s": batch * length / seconds,
            "mean_target_length": produced / batch,
            "note": "greedy streaming, one source token per call; output stripped of "
                    "start/epsilon tokens"}


def run(args):
    from inputs import benchmark_vocabulary

    run_info = common.start_run()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="decode_memory-"))
    vocab_path = benchmark_vocabulary(types.SimpleNamespace(
        vocab_size=args.vocab_size, smoke=args.smoke, source_words=15), workdir)
    points = [{"spec": spec, "length": length, "preset": args.preset,
               "vocab_path": str(vocab_path), "batch": args.batch, "beam": args.beam}
              for length in args.lengths for spec in args.models]
    if args.smoke:
        shared = common.run_isolated(__file__, "measure_points", {"points": points},
                                     timeout=args.timeout)
        results = shared.get("rows") or [shared] * len(points)  # one error for all
    else:
        results = (common.run_isolated(__file__, "measure_point", point,
                                       timeout=args.timeout) for point in points)
    rows = []
    for point, result in zip(points, results):
        row = {"model": point["spec"], "length": point["length"], **result}
        rows.append(row)
        print(common.format_table([row], COLUMNS), flush=True)
    growth = {}
    for spec in args.models:
        points = [(r["length"], r["delta_rss_mb"]) for r in rows
                  if r["model"] == spec and "delta_rss_mb" in r]
        # Below a few hundred tokens the growth is within the allocator's noise.
        if len(points) >= 2 and points[-1][0] - points[0][0] >= 200:
            (first_length, first), (last_length, last) = points[0], points[-1]
            growth[spec] = {"mb_per_1000_tokens": (last - first) * 1000 / (
                last_length - first_length), "from": first_length, "to": last_length}
    return {"preset": args.preset, "batch": args.batch, "beam": args.beam,
            "rows": rows, "growth": growth,
            "eager_speedup": eager_speedup(rows)}, run_info


def eager_speedup(rows, eager="eager_translator"):
    """Source tokens/s of ``eager`` over each other model's, per input length
    (same search and beam; Press & Smith report about 3x an attention model)."""
    speedups = {}
    for length in sorted({r["length"] for r in rows}):
        at = {r["model"]: r for r in rows
              if r["length"] == length and "source_tokens_per_s" in r}
        if eager not in at:
            continue
        speedups[str(length)] = {
            model: at[eager]["source_tokens_per_s"] / row["source_tokens_per_s"]
            for model, row in at.items() if model not in (eager, "eager_stream")}
    return speedups


COLUMNS = [("model", "model", ""), ("length", "N", ""),
           ("baseline_rss_mb", "baseline MiB", ".1f"), ("peak_rss_mb", "peak MiB", ".1f"),
           ("delta_rss_mb", "delta MiB", ".1f"), ("seconds", "s", ".2f"),
           ("source_tokens_per_s", "src tok/s", ".1f"), ("params", "params", ","),
           ("mean_target_length", "out len", ".1f"), ("skipped", "skipped", ""),
           ("error", "error", "")]


def print_results(results, file=None):
    common.print_table(results["rows"], COLUMNS,
                       f"\npeak resident memory of decoding (preset {results['preset']}, "
                       f"batch {results['batch']}, beam {results['beam']}; each point in a "
                       "fresh process):", file=file)
    for spec, growth in results["growth"].items():
        print(f"  {spec}: {growth['mb_per_1000_tokens']:+.1f} MiB per 1000 input tokens "
              f"({growth['from']} -> {growth['to']})", file=file or sys.stdout)
    for length, ratios in results.get("eager_speedup", {}).items():
        text = ", ".join(f"{model} x{ratio:.2f}" for model, ratio in ratios.items())
        print(f"  eager_translator source tokens/s at N={length}: {text}",
              file=file or sys.stdout)


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    print_results(results)
    path = common.write_results("decode_memory", results, args.output_dir,
                                smoke=args.smoke, run=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""The leaderboard: every zoo model, several seeds, one recipe; a verdict per paper claim.

Each cell is one (model, seed): the model (a ``MODEL_VARIANTS`` name: transformer,
RAN-E, RAN-D, RAN-ALL, GMM, weighted, HC-SA, Syn-R, RNNsearch, eager) trained by
``keras_attn_zoo.workflow.training_run`` - the code behind ``recipes/train_wmt.py``, so
every ``train_wmt.py`` flag works here and means the same - with the same data,
SentencePiece vocabulary (trained once), recipe and caps for every model.

Two protocols (``--protocol``). ``converge`` (the default, issue 33): every cell
trains to convergence with early stopping on the valid split (train_wmt's
``--valid-every``/``--patience``/``--valid-metric``, greedy on every valid sentence;
the best checkpoint is scored), under the same cap for every model in steps
(``--steps``, default 12000) and in training wall time (``--cap-minutes``, default
240). The cell records why it stopped (``stop_reason``: converged, max_steps or
time_budget) and its ``best_step``; a cell stopped at a cap is reported "untested:
not converged" by the claims (`claims.engine`). ``fixed``: the committed 2,000-step
table's protocol (``--steps`` steps, or ``--budget-minutes``, the last weights, no
early stopping). Then the cell

1. translates the whole test split with the same beam search for every model
   (``Translator``, train_wmt's ``--beam-size``/``--length-penalty``), keeps the
   translations (``hypotheses.txt.gz``) and scores BLEU and chrF, also by source length;
2. times decoding of the trained model: sentences/s and source tokens/s at batch 100,
   beam 4 (``--decode-batch``/``--decode-beam``), the output ending at EOS as in use;
3. probes it for its paper's claim (``keras_attn_zoo.evaluation.claims.probe_model``:
   cross-attention entropy, GMM gates, kappa/alpha, RAN matrices, AER against the
   table's gold links: eflomal's, aligned once into ``gold-links-*.json`` beside the
   results directories and read by every cell);
4. writes ``<results-dir>/<model>/seed<N>/cell.json``. When the Transformer cell of
   the same seed exists, the paired bootstrap of the two systems' translations of the
   same sentences (sacreBLEU, 1,000 resamples) is added to the cell, and for GMM the
   same comparison on the longest tenth of the test split (signed bootstrap).

A rerun skips finished cells, evaluates a trained one and resumes a killed one from
its checkpoint, so the table fills over several sessions. The table, the claims'
verdicts and the plots (``leaderboard.md``/``.json``, ``bleu_vs_params.png``,
``bleu_vs_decode_speed.png``, ``learning_curves.png``) are regenerated from the cell
files alone (``--report-only``); ``--readme docs/leaderboard.md`` also rewrites that
page's generated leaderboard section (any markdown file with the markers).
``--time-seeds`` times the decoding of every model of a seed in one process, round
by round, with the scored models (``speed-seed<N>.json``; the speed claims read it);
``--retime-decoding`` times finished cells' decoding against speed peers trained
after them, in one process, as a cell would have.

Usage:
    python recipes/leaderboard.py                                 # 10 models x 3 seeds
    python recipes/leaderboard.py --models transformer,RAN-D --seeds 0
    python recipes/leaderboard.py --report-only --protocol fixed --steps 2000 \\
        --readme docs/leaderboard.md          # the committed 2,000-step table
    python recipes/leaderboard.py --time-seeds --seeds 0      # every model of seed 0
    python recipes/leaderboard.py --quick --preset tiny --data files \\
        --train-src train.de --train-tgt train.en --test-src test.de \\
        --test-tgt test.en --steps 2 --vocab-size 150
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import gc
import gzip
import hashlib
import json
import os
import pathlib
import shutil
import sys
import time
import traceback

from train_wmt import machine_speed
from train_wmt import parse_args as parse_train_args

REPO = pathlib.Path(__file__).resolve().parents[1]
CELL_FILE = "cell.json"
HYPOTHESES_FILE = "hypotheses.txt.gz"
# Each model trained the way its paper trains it, where the zoo offers that way.
VARIANT_FLAGS = {
    # Press & Smith (2018): one aligned stream, the LSTM state carried across windows.
    "eager": ["--eager-aligned-batching"],
}
QUICK_DEFAULTS = ["--vocab-size", "2000", "--eval-limit", "100"]
PROTOCOLS = ("converge", "fixed")
# The converged table's caps, the same for every model: the Transformer's dev BLEU
# peaked near step 5,000 (issue 31) and the recipe search caps at 12,000 steps.
CONVERGE_STEPS = 12000
CONVERGE_MINUTES = 240.0
FIXED_STEPS = 2000
# Source-length buckets (words) of the BLEU-by-length column; the last is the
# "longest bucket" of the GMM claim (Ding's test sentences: 1-50 words, most under 15).
LENGTH_BOUNDARIES = (5, 10, 15, 20)
# Flags the leaderboard sets per cell; the budget is --steps / --budget-minutes.
_OWN_FLAGS = ("--model", "--model-options", "--output-dir", "--name", "--export-dir",
              "--log-dir", "--seed", "--max-steps", "--time-budget-minutes", "--epochs",
              "--no-export")


def parse_args(argv=None):
    from keras_attn_zoo.models import MODEL_VARIANTS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Any other flag is a recipes/train_wmt.py flag, passed on to every run.")
    parser.add_argument("--models", default=",".join(MODEL_VARIANTS),
                        help=f"comma-separated model names (default: all of "
                             f"{', '.join(MODEL_VARIANTS)})")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="converge",
                        help="converge: early stopping on the valid split under a cap "
                             "(default); fixed: a fixed budget, the last weights (the "
                             "committed 2,000-step table)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int,
                        help=f"converge: the step cap of every cell (default "
                             f"{CONVERGE_STEPS}); fixed: the steps per cell (default "
                             f"{FIXED_STEPS})")
    budget.add_argument("--budget-minutes", type=float,
                        help="fixed: training minutes per cell instead of a step budget")
    parser.add_argument("--cap-minutes", type=float, default=CONVERGE_MINUTES,
                        help=f"converge: the training wall-time cap of every cell "
                             f"(default {CONVERGE_MINUTES:g})")
    parser.add_argument("--model-options", default="",
                        help="builder options added to every model's (key=value;...)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--quick", action="store_true",
                        help="smoke defaults: 2000-piece vocabulary, 100 test sentences, "
                             "one timed decoding call")
    parser.add_argument("--output-dir",
                        help="run directories: checkpoints, logs, model.keras "
                             "(default runs/leaderboard/<preset>-<budget>)")
    parser.add_argument("--results-dir",
                        help="cell files, translations, probes, table and plots (default "
                             "benchmarks/results/leaderboard/<preset>-<budget>)")
    parser.add_argument("--decode-batch", type=int, default=100)
    parser.add_argument("--decode-beam", type=int, default=4)
    parser.add_argument("--decode-repeats", type=int,
                        help="timed decoding calls, the median is kept (default 3, "
                             "1 with --quick)")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: the table, verdicts and plots from the cells")
    parser.add_argument("--readme", help="also rewrite the generated leaderboard section of this markdown "
                             "file (docs/leaderboard.md)")
    parser.add_argument("--align-gold", action="store_true",
                        help="train nothing: align the probed test sentences once into the "
                             "table's gold links file (gold-links-*.json beside the results "
                             "directories; commit it), or check the one there")
    parser.add_argument("--time-seeds", action="store_true",
                        help="train nothing: time the decoding of every model of each "
                             "seed in one process, round by round, with the scored "
                             "models (speed-seed<N>.json); then the report")
    parser.add_argument("--retime-decoding", action="store_true",
                        help="train nothing: time finished cells' decoding against the "
                             "speed peers (Transformer, RNNsearch) they were not timed "
                             "with, in one process; then the report")
    args, passthrough = parser.parse_known_args(argv)
    for flag in _OWN_FLAGS:
        if any(item == flag or item.startswith(flag + "=") for item in passthrough):
            parser.error(f"{flag} is set per cell by the leaderboard")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(args.models) - set(MODEL_VARIANTS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODEL_VARIANTS)}")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds wants integers joined by commas, got {args.seeds!r}")
    if not args.seeds:
        parser.error("--seeds is empty")
    if args.protocol == "converge" and args.budget_minutes is not None:
        parser.error("--budget-minutes is the fixed protocol's; converge caps the wall "
                     "time with --cap-minutes")
    if args.steps is None and args.budget_minutes is None:
        args.steps = CONVERGE_STEPS if args.protocol == "converge" else FIXED_STEPS
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.cap_minutes <= 0:
        parser.error("--cap-minutes must be > 0")
    if args.protocol == "converge":
        args.budget = (f"to convergence, cap {args.steps} steps / {args.cap_minutes:g} min")
        tag = f"{args.preset}-converge-{args.steps}steps-{args.cap_minutes:g}min"
    else:
        args.budget = (f"{args.steps} steps" if args.steps is not None
                       else f"{args.budget_minutes:g} min")
        tag = f"{args.preset}-{args.budget.replace(' ', '')}"
    args.output_dir = pathlib.Path(args.output_dir or REPO / "runs" / "leaderboard" / tag)
    args.results_dir = pathlib.Path(
        args.results_dir or REPO / "benchmarks" / "results" / "leaderboard" / tag)
    if args.decode_repeats is None:
        args.decode_repeats = 1 if args.quick else 3
    args.passthrough = (QUICK_DEFAULTS if args.quick else []) + passthrough
    return args


# ---- one cell -------------------------------------------------------------------------------


def cell_name(model, seed):
    return f"{model}/seed{seed}"


def cell_dir(root, model, seed):
    """`<root>/<model>/seed<seed>`: a cell's run dir (root `--output-dir`) or its
    result files (root `--results-dir`)."""
    return root / model / f"seed{seed}"


def cell_config(args, model, seed):
    """The cell's `RunConfig`, parsed by train_wmt's own parser."""
    from keras_attn_zoo.models import MODEL_VARIANTS

    builder, options = MODEL_VARIANTS[model]
    model_options = ";".join(filter(None, [
        ";".join(f"{key}={value}" for key, value in options.items()), args.model_options]))
    if args.protocol == "converge":  # both caps: whichever comes first stops the cell
        budget = ["--max-steps", str(args.steps), "--time-budget-minutes",
                  str(args.cap_minutes)]
    else:
        budget = (["--max-steps", str(args.steps)] if args.steps is not None
                  else ["--time-budget-minutes", str(args.budget_minutes)])
    argv = ["--model", builder, "--model-options", model_options, "--preset", args.preset,
            "--seed", str(seed), "--output-dir", str(cell_dir(args.output_dir, model, seed)),
            "--name", f"leaderboard-{model}-seed{seed}", "--no-export", "--quiet",
            *budget, *VARIANT_FLAGS.get(model, []), *args.passthrough]
    return parse_train_args(argv)


def shared_vocabulary(args, config):
    """One SentencePiece model for every cell (trained once, then copied)."""
    from keras_attn_zoo.data.vocabulary import train_sentencepiece
    from keras_attn_zoo.workflow import load_corpus

    path = args.output_dir / f"vocab-{config.vocab_size}.model"
    if not path.exists():
        corpus = load_corpus(config)
        args.output_dir.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp.model")
        train_sentencepiece(corpus.train, temporary, vocab_size=config.vocab_size)
        temporary.replace(path)
    return path


def remaining_cap_minutes(run_dir, cap_minutes):
    """The wall-time cap left to a cell: the cap less the training clock of the
    sessions before (`curve.clock_seconds`), so that a cell resumed over several
    sessions gets the same cap as one trained in one. A cell at its cap already
    trains one more step and stops (a budget must be positive)."""
    from keras_attn_zoo.training.curve import clock_seconds

    return max(cap_minutes - clock_seconds(run_dir) / 60.0, 1e-3)


def train(args, config):
    """The run's results: trained now (or resumed), or read back when it finished before."""
    from keras_attn_zoo.workflow import training_run

    run_dir = config.paths[0]
    results_path = run_dir / "results.json"
    if results_path.exists() and (run_dir / "model.keras").exists():
        print(f"  trained before ({results_path}); evaluating", flush=True)
        return json.loads(results_path.read_text(encoding="utf-8"))
    vocabulary = shared_vocabulary(args, config)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "vocab.model").exists():
        shutil.copyfile(vocabulary, run_dir / "vocab.model")
    # The test split is translated once, by `evaluate`, with the model.keras written.
    # converge: early stopping on the valid split, the best weights; fixed (the
    # committed table's protocol): the last weights, the dev monitor's curve.
    if args.protocol == "fixed":
        config = dataclasses.replace(config, valid_every=0)
    elif not config.valid_every:
        raise SystemExit("--protocol converge needs early stopping: --valid-every >= 1.")
    else:
        config = dataclasses.replace(config, time_budget_minutes=remaining_cap_minutes(
            run_dir, args.cap_minutes))
    return training_run(dataclasses.replace(config, eval_limit=0), machine=machine_speed())


def references_digest(references):
    """A fingerprint of the test references: paired tests need the same sentences."""
    return hashlib.sha256("\n".join(references).encode("utf-8")).hexdigest()[:16]


# The references of the papers' speed claims (RAN-ALL and eager against the
# Transformer, eager against RNNsearch): timed in the same process as the cell's
# model, round by round, so that the ratio does not depend on the machine's load.
SPEED_PEERS = ("transformer", "RNNsearch")


def _timed_search(translator, text, args, length_penalty):
    """`(call, translations of a first, tracing call)` of one translator's beam search;
    `call()` gives the lengths."""
    import tensorflow as tf

    options = (tf.constant(args.decode_beam, tf.int32), tf.constant(length_penalty, tf.float32),
               tf.constant(translator.max_length_a, tf.float32),
               tf.constant(translator.max_length_b, tf.float32))

    def call(key="length"):
        return translator.translate_with_options(text, *options)[key].numpy()

    return call, [t.decode("utf-8") for t in call("translation")]


def trained_translator(args, model_name, seed):
    """The `Translator` of a cell's trained model (its run dir), or None when absent."""
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.workflow import run_translator

    run_dir = cell_dir(args.output_dir, model_name, seed)
    if not (run_dir / "model.keras").exists():
        return None
    return run_translator(cell_config(args, model_name, seed),
                          keras.saving.load_model(run_dir / "model.keras"),
                          load_tokenizer(run_dir / "vocab.model"))


def speed_peers(args, model_name, seed, names=SPEED_PEERS):
    """`{peer: Translator}` of the trained speed peers of the same seed (their run dirs)."""
    peers = {}
    for peer in names:
        translator = None if peer == model_name else trained_translator(args, peer, seed)
        if translator is not None:
            peers[peer] = translator
    return peers


def timed_rounds(searches, repeats):
    """`({name: median seconds}, {name: lengths})` of the searches `{name: (call,
    translations)}`, timed round by round: each round calls every search once, the
    order rotated by one each round (no search always runs first, after the same
    one), so that a change of the machine's load falls on all of them alike."""
    import numpy as np

    names = list(searches)
    times = {name: [] for name in names}
    lengths = {}
    for round_number in range(max(repeats, 1)):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            lengths[name] = searches[name][0]()
            times[name].append(time.perf_counter() - started)
    return {name: float(np.median(values)) for name, values in times.items()}, lengths


def decoding_speed(args, translator, tokenizer, sources, length_penalty, peers=None):
    """Sentences/s and tokens/s of the traced beam search at `--decode-batch`.

    `peers`: `{name: Translator}` timed on the same batch in the same rounds
    (median over `--decode-repeats` rounds each); their ratios go under
    `decode_versus`. Returns `(row, {name or None: translations of the batch})`.
    """
    import tensorflow as tf

    batch = [sources[i % len(sources)] for i in range(args.decode_batch)]
    pieces = tokenizer.tokenize(batch)
    pieces = pieces.to_list() if hasattr(pieces, "to_list") else pieces
    source_tokens = int(sum(len(ids) for ids in pieces))
    text = tf.constant([s.encode("utf-8") for s in batch])
    searches = {None: _timed_search(translator, text, args, length_penalty)}
    for name, peer in (peers or {}).items():
        searches[name] = _timed_search(peer, text, args, peer.length_penalty)
    seconds, lengths = timed_rounds(searches, args.decode_repeats)
    own = seconds.pop(None)
    translations = {name: first for name, (_, first) in searches.items()}
    row = {"decode_sentences_per_second": round(args.decode_batch / own, 2),
           "decode_source_tokens_per_second": round(source_tokens / own, 1),
           "decode_target_tokens_per_second": round(float(lengths[None].sum()) / own, 1),
           "decode_mean_target_length": round(float(lengths[None].mean()), 2),
           "decode_batch": args.decode_batch, "decode_beam": args.decode_beam}
    if seconds:
        # The same sentences: a ratio of sentences/s is one of source tokens/s.
        row["decode_versus"] = {
            name: {"peer_sentences_per_second": round(args.decode_batch / value, 2),
                   "ratio": round(value / own, 4),
                   "peer_mean_target_length": round(float(lengths[name].mean()), 2)}
            for name, value in seconds.items()}
    return row, translations


def gold_links_path(args, config, test):
    """Where the table's gold links live: beside the tables' results directories,
    named by the data and the probed test pairs, shared by every protocol and preset."""
    from keras_attn_zoo.evaluation.claims.probes import PROBED_PAIRS
    from keras_attn_zoo.evaluation.claims.probes import pairs_digest

    probed = list(test)[:PROBED_PAIRS]
    data = config.data.replace(":", "-").replace("/", "-")
    return args.results_dir.parent / (f"gold-links-{data}-test{len(probed)}-"
                                      f"{pairs_digest(probed)[:8]}.json")


def test_links(args, config, corpus, test):
    """`(links, gold)`: the gold word links of the probed test pairs from the table's
    gold links file (aligned by eflomal and written by the first cell that needs them,
    then committed and read by every cell), and the entry a cell keeps to say which
    file it was scored against; `(None, None)` without eflomal."""
    from keras_attn_zoo.evaluation.claims.probes import gold_links_record
    from keras_attn_zoo.evaluation.claims.probes import read_gold_links
    from keras_attn_zoo.training.curve import write_atomically

    path = gold_links_path(args, config, test)
    if not path.exists():
        try:
            record = gold_links_record(corpus.train, test, args.output_dir / "eflomal-cache")
        except ImportError as error:
            print(f"  no AER: {error}", flush=True)
            return None, None
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"  gold links written once: {path} ({record['sure_links']} links)", flush=True)
    try:
        record = read_gold_links(path, test)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    gold = {"file": path.name, "links_digest": record["links_digest"],
            "sure_links": record["sure_links"]}
    return record["links"], gold


def align_gold(args):
    """Writes (or checks) the table's gold links file, as the first cell would."""
    from keras_attn_zoo.workflow import load_corpus

    config = cell_config(args, args.models[0], args.seeds[0])
    corpus = load_corpus(config)
    test = corpus.test if config.eval_limit is None else corpus.test[:config.eval_limit]
    _, gold = test_links(args, config, corpus, test)
    print(f"gold links: {gold}")


def evaluate(args, config, results, directory, model_name):
    """Translations, scores, decoding speed and probes of the trained model."""
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.evaluation import claims
    from keras_attn_zoo.evaluation.attention import has_attention
    from keras_attn_zoo.evaluation.analysis import length_buckets
    from keras_attn_zoo.evaluation.analysis import scores_by_bucket
    from keras_attn_zoo.evaluation.scores import corpus_scores
    from keras_attn_zoo.training.callbacks import teacher_forcing_batch
    from keras_attn_zoo.training.curve import write_atomically
    from keras_attn_zoo.workflow import load_corpus
    from keras_attn_zoo.workflow import run_translator

    run_dir = config.paths[0]
    model = keras.saving.load_model(run_dir / "model.keras")
    tokenizer = load_tokenizer(run_dir / "vocab.model")
    corpus = load_corpus(config)
    test = corpus.test if config.eval_limit is None else corpus.test[:config.eval_limit]
    if not test:
        raise SystemExit("the leaderboard scores the test split: the data has none.")
    sources, references = [s for s, _ in test], [t for _, t in test]
    translator = run_translator(config, model, tokenizer)
    started = time.monotonic()
    hypotheses = translator.translate_texts(sources)
    row = corpus_scores(hypotheses, references)
    row.update(test_pairs=len(test), test_references=references_digest(references),
               eval_seconds=round(time.monotonic() - started, 1),
               beam_size=config.beam_size, length_penalty=config.length_penalty)
    buckets = length_buckets([len(s.split()) for s in sources], LENGTH_BOUNDARIES)
    row["bleu_by_source_length"] = scores_by_bucket(hypotheses, references, buckets)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / HYPOTHESES_FILE,
                     gzip.compress("".join(h + "\n" for h in hypotheses).encode("utf-8"),
                                   mtime=0))
    row.update(decoding_speed(args, translator, tokenizer, sources, config.length_penalty,
                              speed_peers(args, model_name, config.seed))[0])
    links, gold = (test_links(args, config, corpus, test) if has_attention(model)
                   else (None, None))
    make_batch = functools.partial(teacher_forcing_batch, sentencepiece_processor(tokenizer))
    row["probes"] = claims.probe_model(model, tokenizer, test, directory / "probes",
                                       model_name=model_name, make_batch=make_batch,
                                       source_links=links)
    if gold and "aer" in row["probes"]:
        row["probes"]["aer"]["gold_links"] = gold  # every cell: the same file
    return row


def run_cell(args, model, seed):
    """Trains, evaluates and probes one cell unless its file exists; returns the cell."""
    from keras_attn_zoo.training.curve import write_atomically

    directory = cell_dir(args.results_dir, model, seed)
    path = directory / CELL_FILE
    if path.exists():
        print(f"[{cell_name(model, seed)}] finished before: {path}", flush=True)
        return json.loads(path.read_text(encoding="utf-8"))
    config = cell_config(args, model, seed)
    print(f"[{cell_name(model, seed)}] {config.model} ({config.builder_options or 'preset'}),"
          f" {args.budget}", flush=True)
    started = time.monotonic()
    results = train(args, config)
    cell = {"model": model, "builder": config.model, "model_options": config.builder_options,
            "seed": seed, "preset": config.preset, "budget": args.budget,
            "protocol": args.protocol,
            "caps": ({"steps": args.steps, "minutes": args.cap_minutes}
                     if args.protocol == "converge" else None),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": command_line(), "status": "ok",
            "config": {k: v for k, v in dataclasses.asdict(config).items()
                       if not k.endswith(("_src", "_tgt"))}}
    cell.update({key: results.get(key) for key in (
        "params", "steps", "train_seconds", "train_target_tokens_per_second", "final_loss",
        "data", "epochs_completed", "learning_curve", "machine", "epsilon_proportion",
        "resumed_from_step", "training_clock_seconds",
        # Why training stopped (converged, max_steps, time_budget) and, with early
        # stopping, the best evaluation (its weights are the ones scored).
        "stop_reason", "best_step", "best_valid_bleu", "best_valid_chrf", "valid_curve",
        "early_stopping")})
    cell["converged"] = cell.get("stop_reason") == "converged"
    if results.get("epsilon_proportion") is not None:
        cell["eager"] = {"epsilon_share": results["epsilon_proportion"],
                         # {start pads: share}: the share falls as they grow
                         "epsilon_share_by_start_pads":
                             results.get("epsilon_proportion_by_start_pads")}
    # Every cell must share the vocabulary: its fingerprint is in the table's settings.
    cell["vocabulary"] = hashlib.sha256(
        (config.paths[0] / "vocab.model").read_bytes()).hexdigest()[:16]
    cell.update(evaluate(args, config, results, directory, model))
    cell["wall_seconds"] = round(time.monotonic() - started, 1)
    write_atomically(path, json.dumps(cell, indent=2, ensure_ascii=False) + "\n")
    print(f"[{cell_name(model, seed)}] BLEU {cell['bleu']} chrF {cell['chrf']} -> {path}",
          flush=True)
    return cell


def _agreement(translations, hypotheses):
    """Share of the timed batch (the test sources, cycled) translated as the cell did."""
    same = sum(t == hypotheses[i % len(hypotheses)] for i, t in enumerate(translations))
    return round(same / len(translations), 4)


def retime_decoding(args):
    """Adds the same-process decoding ratios (`decode_versus`) that finished cells of
    --models/--seeds lack because a speed peer's trained model was missing when the
    cell ran (the peer trained later, or its run dir lost and retrained).

    The cell's model and the peers, loaded from their run dirs, are timed on the cell's
    batch in the same rounds, as a cell times them. The cell's own first timing stays;
    each new entry says when and on which machine it was timed, and which share of the
    batch each model translates as its cell did: a retrained peer stands for its cell's
    model only as far as they agree.
    """
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.training.curve import write_atomically
    from keras_attn_zoo.workflow import load_corpus

    for seed in args.seeds:
        for model in args.models:
            path = cell_dir(args.results_dir, model, seed) / CELL_FILE
            if not path.exists():
                continue
            cell = json.loads(path.read_text(encoding="utf-8"))
            timed = cell.get("decode_versus") or {}
            # Only peers with a cell of their own: their translations are compared.
            peers = speed_peers(args, model, seed, [
                p for p in SPEED_PEERS if p not in timed
                and (cell_dir(args.results_dir, p, seed) / CELL_FILE).exists()])
            if not peers:
                continue
            translator = trained_translator(args, model, seed)
            if translator is None:
                print(f"[{cell_name(model, seed)}] cannot retime: no model.keras in "
                      f"{args.output_dir / model / f'seed{seed}'}", flush=True)
                continue
            config = cell_config(args, model, seed)
            sources = [s for s, _ in load_corpus(config).test[:cell["test_pairs"]]]
            tokenizer = load_tokenizer(config.paths[0] / "vocab.model")
            row, translations = decoding_speed(args, translator, tokenizer, sources,
                                               config.length_penalty, peers)
            retimed = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "command": command_line(), "machine": machine_speed(),
                       "sentences_per_second": row["decode_sentences_per_second"],
                       "agreement_with_cell": _agreement(
                           translations[None], read_hypotheses(path.parent))}
            for peer, entry in row["decode_versus"].items():
                peer_hypotheses = read_hypotheses(cell_dir(args.results_dir, peer, seed))
                timed[peer] = {**entry, "retimed": {
                    **retimed, "peer_agreement_with_cell": _agreement(translations[peer],
                                                                      peer_hypotheses)}}
                print(f"[{cell_name(model, seed)}] decoding {entry['ratio']}x the "
                      f"{peer}'s, timed in one process", flush=True)
            cell["decode_versus"] = timed
            write_atomically(path, json.dumps(cell, indent=2, ensure_ascii=False) + "\n")
            keras.backend.clear_session()
            gc.collect()


SPEED_FILE = "speed-seed{seed}.json"


def time_seed(args):
    """Times the decoding of every model of each seed in --seeds in one process, round
    by round (`timed_rounds`), with the scored models themselves: each cell's
    model.keras from its run dir, checked to translate the timed batch as its cell
    did (`agreement_with_cell`; below 1.0 it is not the model the cell scored, and
    its speed is kept apart). Writes `<results-dir>/speed-seed<N>.json` with the
    machine's matmul rate and load before and after; the report's speed ratios come
    from these files where they exist."""
    import keras
    import tensorflow as tf

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.evaluation.claims.engine import BASELINE
    from keras_attn_zoo.training.curve import write_atomically
    from keras_attn_zoo.workflow import load_corpus

    for seed in args.seeds:
        translators, cells = {}, {}
        for model in args.models:
            path = cell_dir(args.results_dir, model, seed) / CELL_FILE
            translator = trained_translator(args, model, seed) if path.exists() else None
            if translator is None:
                print(f"[{cell_name(model, seed)}] not timed: no cell or no model.keras",
                      flush=True)
                continue
            translators[model] = translator
            cells[model] = json.loads(path.read_text(encoding="utf-8"))
        if not translators:
            continue
        first = next(iter(cells.values()))
        config = cell_config(args, first["model"], seed)
        sources = [s for s, _ in load_corpus(config).test[:first["test_pairs"]]]
        batch = [sources[i % len(sources)] for i in range(args.decode_batch)]
        tokenizer = load_tokenizer(config.paths[0] / "vocab.model")
        pieces = tokenizer.tokenize(batch)
        pieces = pieces.to_list() if hasattr(pieces, "to_list") else pieces
        source_tokens = int(sum(len(ids) for ids in pieces))
        text = tf.constant([s.encode("utf-8") for s in batch])
        machine_before = machine_speed()
        searches = {model: _timed_search(translator, text, args, translator.length_penalty)
                    for model, translator in translators.items()}
        seconds, lengths = timed_rounds(searches, args.decode_repeats)
        entries = {}
        for model, value in seconds.items():
            agreement = _agreement(searches[model][1],
                                   read_hypotheses(cell_dir(args.results_dir, model, seed)))
            entries[model] = {"sentences_per_second": round(args.decode_batch / value, 2),
                              "source_tokens_per_second": round(source_tokens / value, 1),
                              "mean_target_length": round(float(lengths[model].mean()), 2),
                              "agreement_with_cell": agreement}
        if BASELINE in seconds:
            for model, entry in entries.items():
                entry["ratio_to_transformer"] = round(seconds[BASELINE] / seconds[model], 4)
        record = {"seed": seed, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "command": command_line(), "batch": args.decode_batch,
                  "beam": args.decode_beam, "rounds": max(args.decode_repeats, 1),
                  "source_tokens": source_tokens, "machine_before": machine_before,
                  "machine_after": machine_speed(), "models": entries}
        path = args.results_dir / SPEED_FILE.format(seed=seed)
        write_atomically(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        print(f"seed {seed}: {len(entries)} models timed together -> {path}", flush=True)
        keras.backend.clear_session()
        gc.collect()


def load_speed_records(results_dir):
    """`{seed: record}` of the `time_seed` files in `results_dir`."""
    records = {}
    for path in sorted(pathlib.Path(results_dir).glob(SPEED_FILE.format(seed="*"))):
        record = json.loads(path.read_text(encoding="utf-8"))
        records[record["seed"]] = {**record, "file": path.name}
    return records


# ---- the paired tests -------------------------------------------------------------------------


def read_hypotheses(directory):
    text = gzip.decompress((directory / HYPOTHESES_FILE).read_bytes()).decode("utf-8")
    return text.split("\n")[:-1]


def load_cells(results_dir):
    """Every finished cell under `results_dir`, with its directory (`_dir`)."""
    cells = []
    for path in sorted(pathlib.Path(results_dir).glob(f"*/seed*/{CELL_FILE}")):
        cell = json.loads(path.read_text(encoding="utf-8"))
        cell["_dir"] = path.parent
        cells.append(cell)
    return cells


def add_paired_tests(args, cells, references=None):
    """Adds `versus_transformer` (paired bootstrap, same seed) to the cells lacking it.

    The references are the test split's, loaded once when a test is due; a cell whose
    references differ from the Transformer's (another test set) is left without.
    """
    from keras_attn_zoo.evaluation.claims.engine import BASELINE
    from keras_attn_zoo.evaluation.significance import paired_bootstrap
    from keras_attn_zoo.training.curve import write_atomically

    baselines = {c["seed"]: c for c in cells if c["model"] == BASELINE}
    for cell in cells:
        baseline = baselines.get(cell["seed"])
        if (cell["model"] == BASELINE or baseline is None or "versus_transformer" in cell
                or cell.get("test_references") != baseline.get("test_references")):
            continue
        if references is None:
            references = test_references(args, cell)
        if references_digest(references) != cell["test_references"]:
            continue
        result = paired_bootstrap(read_hypotheses(baseline["_dir"]),
                                  {cell["model"]: read_hypotheses(cell["_dir"])}, references)
        system, base = result[cell["model"]], result["baseline"]
        cell["versus_transformer"] = {
            "bleu_difference": round(system["bleu"] - base["bleu"], 2),
            "bleu_p_value": system["bleu_p_value"],
            "chrf_difference": round(system["chrf"] - base["chrf"], 2),
            "chrf_p_value": system["chrf_p_value"],
            "method": "sacreBLEU paired bootstrap, 1000 resamples, seed 12345"}
        stored = {k: v for k, v in cell.items() if k != "_dir"}
        write_atomically(cell["_dir"] / CELL_FILE,
                         json.dumps(stored, indent=2, ensure_ascii=False) + "\n")
    return references


def test_pairs_of(args, cell):
    """The test `(source, reference)` pairs of a cell's run, as the cell translated them."""
    from keras_attn_zoo.workflow import load_corpus

    config = cell_config(args, cell["model"], cell["seed"])
    test = load_corpus(config).test
    return list(test[:cell.get("test_pairs", len(test))])


def test_references(args, cell):
    """The test references of a cell's run, as the cell translated them."""
    return [t for _, t in test_pairs_of(args, cell)]


# The models whose claims read BLEU on the longest sentences (GMM, Figure 7).
LONGEST_DECILE_MODELS = ("GMM",)


def add_longest_decile(args, cells, pairs=None):
    """Adds `longest_decile_versus_transformer` to the cells of
    `LONGEST_DECILE_MODELS` lacking it: BLEU of the cell and the Transformer of the
    same seed on the longest tenth of the test split by source words
    (`significance.longest_share`), with the signed paired bootstrap each way
    (`significance.subset_comparison`). Returns the test pairs (loaded once)."""
    from keras_attn_zoo.evaluation.claims.engine import BASELINE
    from keras_attn_zoo.evaluation.significance import longest_share
    from keras_attn_zoo.evaluation.significance import subset_comparison
    from keras_attn_zoo.training.curve import write_atomically

    baselines = {c["seed"]: c for c in cells if c["model"] == BASELINE}
    for cell in cells:
        baseline = baselines.get(cell["seed"])
        if (cell["model"] not in LONGEST_DECILE_MODELS or baseline is None
                or "longest_decile_versus_transformer" in cell
                or cell.get("test_references") != baseline.get("test_references")):
            continue
        pairs = test_pairs_of(args, cell) if pairs is None else pairs
        references = [t for _, t in pairs]
        if references_digest(references) != cell["test_references"]:
            continue
        indices, shortest = longest_share([len(s.split()) for s, _ in pairs])
        cell["longest_decile_versus_transformer"] = {
            **subset_comparison(read_hypotheses(baseline["_dir"]),
                                read_hypotheses(cell["_dir"]), references, indices),
            "min_source_words": shortest,
            "method": "longest tenth of the test split by source words; Koehn's signed "
                      "paired bootstrap, 1000 resamples, seed 12345"}
        stored = {k: v for k, v in cell.items() if k != "_dir"}
        write_atomically(cell["_dir"] / CELL_FILE,
                         json.dumps(stored, indent=2, ensure_ascii=False) + "\n")
    return pairs


# ---- the report: keras_attn_zoo.evaluation.leaderboard, written here ---------------------------


# The ε share of the Ding training targets by start pads (benchmarks/eager_epsilon_share.py):
# a property of the data, read by the ε claim where the eager cells lack it.
EPSILON_SHARE_FILE = REPO / "benchmarks" / "results" / "eager_epsilon_share-2026-11-25.json"


def data_properties(args, cells):
    """What the claims read besides the cells: the seeds' decoding timings
    (`time_seed`'s files) and the ε share of the data (`EPSILON_SHARE_FILE`, when
    the cells trained on its data and vocabulary size)."""
    properties = {"speed": load_speed_records(args.results_dir)}
    eager = [c for c in cells if c["model"] == "eager"]
    if eager and EPSILON_SHARE_FILE.exists():
        record = json.loads(EPSILON_SHARE_FILE.read_text(encoding="utf-8"))
        config = eager[0].get("config") or {}
        if (config.get("data") == record["data"].split(":")[0]
                and config.get("vocab_size") == record["vocab_size"]):
            properties["epsilon_share"] = {**record,
                                           "source": shown_path(EPSILON_SHARE_FILE).as_posix()}
    return properties


def shown_path(results_dir):
    """The results directory as the report names it: relative to the repository when
    it lies inside it."""
    try:
        return pathlib.Path(results_dir).resolve().relative_to(REPO)
    except ValueError:
        return pathlib.Path(results_dir)


def report(args, cells=None):
    """leaderboard.md / .json and the plots in --results-dir, from the cell files."""
    from keras_attn_zoo.evaluation import claims
    from keras_attn_zoo.evaluation.leaderboard import aggregate
    from keras_attn_zoo.evaluation.leaderboard import budget_evidence
    from keras_attn_zoo.evaluation.leaderboard import machines_of
    from keras_attn_zoo.evaluation.leaderboard import probe_images
    from keras_attn_zoo.evaluation.leaderboard import section_markdown
    from keras_attn_zoo.evaluation.leaderboard import settings_of
    from keras_attn_zoo.evaluation.leaderboard import write_plots
    from keras_attn_zoo.models import MODEL_VARIANTS
    from keras_attn_zoo.training.curve import write_atomically

    cells = load_cells(args.results_dir) if cells is None else cells
    if not cells:
        raise SystemExit(f"no finished cell in {args.results_dir}.")
    add_paired_tests(args, cells)
    add_longest_decile(args, cells)
    properties = data_properties(args, cells)
    order = [m for m in MODEL_VARIANTS if any(c["model"] == m for c in cells)]
    rows = aggregate(cells, order, properties["speed"])
    stored = [{k: v for k, v in c.items() if k != "_dir"} for c in cells]
    verdicts = claims.claim_verdicts(stored, properties)
    files = write_plots(args.results_dir, cells, rows)
    settings, machines = settings_of(cells), machines_of(cells)
    settings["budget_evidence"] = budget_evidence(stored)
    files.update(probe_images(cells))
    text = section_markdown(rows, verdicts, settings, machines, files,
                            shown_path(args.results_dir), pathlib.Path("."))
    document = {"settings": settings, "machines": machines, "rows": rows,
                "verdicts": verdicts, "files": files}
    write_atomically(args.results_dir / "leaderboard.json",
                     json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    write_atomically(args.results_dir / "leaderboard.md", "# Leaderboard\n\n" + text)
    return rows, verdicts, settings, machines, files


def replace_readme_section(readme, text):
    """Rewrites a markdown page (docs/leaderboard.md) between the generated section's
    markers."""
    from keras_attn_zoo.evaluation.leaderboard import replace_section
    from keras_attn_zoo.training.curve import write_atomically

    readme = pathlib.Path(readme)
    try:
        updated = replace_section(readme.read_text(encoding="utf-8"), text, readme)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    write_atomically(readme, updated)


def command_line():
    return " ".join([pathlib.Path(sys.argv[0]).name] + sys.argv[1:])


def main(argv=None):
    args = parse_args(argv)
    if args.align_gold:
        align_gold(args)
        return
    if args.time_seeds:
        time_seed(args)
    elif args.retime_decoding:
        retime_decoding(args)
    elif not args.report_only:
        import keras

        for seed in args.seeds:  # seed-major: every model gets its first seed first
            for model in args.models:
                try:
                    run_cell(args, model, seed)
                except (Exception, SystemExit) as error:  # one failure must not stop the rest
                    print(f"[{cell_name(model, seed)}] FAILED: {type(error).__name__}: "
                          f"{error}\n{traceback.format_exc()[-3000:]}", flush=True)
                keras.backend.clear_session()
                gc.collect()
    parts = report(args)
    if args.readme:
        from keras_attn_zoo.evaluation.leaderboard import section_markdown

        readme = pathlib.Path(args.readme).resolve()
        images = pathlib.Path(os.path.relpath(args.results_dir.resolve(), readme.parent))
        replace_readme_section(readme, section_markdown(*parts, shown_path(args.results_dir),
                                                        images))
    print((args.results_dir / "leaderboard.md").read_text(encoding="utf-8"))
    print(f"wrote {args.results_dir / 'leaderboard.md'}")


if __name__ == "__main__":
    main()

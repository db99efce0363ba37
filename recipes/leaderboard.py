#!/usr/bin/env python
"""Train every zoo model with the same recipe, data and time budget; rank them.

For each model (``--models``, default: all of ``MODEL_BUILDERS``) the leaderboard

1. trains it with ``keras_attn_zoo.workflow.training_run`` - the code behind
   ``recipes/train_wmt.py`` - on a ``RunConfig`` built by ``train_wmt.parse_args``, so
   every ``train_wmt.py`` flag works here too and means the same (``--data``,
   ``--batch-tokens``, ``--max-steps``, ``--mixed-precision`` ...). Each model gets
   the same wall-clock budget, ``--budget-minutes`` (train_wmt's
   ``--time-budget-minutes``), and the same SentencePiece vocabulary (trained once,
   copied into each run directory);
2. evaluates it on the test split with the same beam search for every model
   (``Translator.translate_texts``, train_wmt's ``--beam-size`` and
   ``--length-penalty``, on the first ``--eval-limit`` pairs): sacreBLEU and chrF;
3. times decoding: sentences/s of that same traced search at batch 100 (test
   sentences, cycled if fewer) and beam 4, the output ending at EOS as in use;
4. writes ``leaderboard.json`` and ``leaderboard.md`` in ``--output-dir``: model,
   parameters, BLEU, chrF, training target tokens/s, decoding sentences/s, the
   paper's reported gain for comparison, and the status (a model that fails is
   listed as failed with its error; the others go on).

Resuming: a model whose ``<output-dir>/<model>/leaderboard_row.json`` exists is
skipped; one whose ``results.json`` exists (trained, killed before its evaluation)
is only evaluated; one killed while training resumes from its checkpoint (the
Trainer's). Run the same command again after a kill.

The evaluation is done here rather than inside ``training_run`` (which gets
``--eval-limit 0``) so that each model's search is traced once and used for both
the scores and the speed measurement; it is the same ``Translator`` and the same
``corpus_scores`` that ``training_run`` uses.

``--quick``: a smoke run for 2 CPU cores in under 15 minutes: 0.5 minute of
training per model, 2000-piece vocabulary, evaluation on 100 test sentences, no
SavedModel export, one timed decoding call. Any flag given explicitly wins over the
quick defaults.

Usage:
    python recipes/leaderboard.py                       # 20 minutes per model
    python recipes/leaderboard.py --quick
    python recipes/leaderboard.py --budget-minutes 60 --preset base --models \\
        transformer,ran_transformer
    python recipes/leaderboard.py --quick --preset tiny --data files \\
        --train-src train.de --train-tgt train.en --test-src test.de \\
        --test-tgt test.en --max-steps 2 --eval-limit 5 --vocab-size 150
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import shutil
import sys
import time
import traceback

from train_wmt import parse_args as parse_train_args

PAPER_GAINS = {
    "transformer": "baseline (Vaswani et al., 2017)",
    "ran_transformer": "RAN-D: +0.48 BLEU on average over 10 tasks; RAN-ALL decodes "
                       "up to 1.236x faster (Zeng et al., 2021)",
    "gmm_transformer": "+0.75 BLEU, WMT14 En-De, base (Zhang & Feng, 2021)",
    "weighted_transformer": "+0.5 BLEU WMT14 En-De, +0.4 En-Fr (Ahmed et al., 2017)",
    "hard_coded_transformer": "below the Transformer (HC-SA in the RAN paper's "
                              "comparison)",
    "synthesizer_transformer": "below the Transformer (Syn-R in the RAN paper's "
                               "comparison)",
    "bahdanau_rnn": "pre-Transformer baseline (RNNsearch, Bahdanau et al., 2015)",
    "eager_translator": "at most 4.8% below an attention model (De-En), ~3x the "
                        "source tokens/s (Press & Smith, 2018)",
}
QUICK_DEFAULTS = ["--vocab-size", "2000", "--eval-limit", "100", "--no-export"]
ROW_FILE = "leaderboard_row.json"
COLUMNS = [("model", "model"), ("params", "parameters"), ("bleu", "BLEU"),
           ("chrf", "chrF"), ("train_target_tokens_per_second", "train tgt tok/s"),
           ("decode_sentences_per_second", "decode sent/s (batch {batch}, beam {beam})"),
           ("decode_mean_target_length", "decode mean output pieces"),
           ("paper_gain", "paper's reported gain"), ("status", "status")]


def parse_args(argv=None):
    from keras_attn_zoo.models import MODEL_BUILDERS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Any other flag is a recipes/train_wmt.py flag, passed on to every run.")
    parser.add_argument("--models", default=",".join(MODEL_BUILDERS),
                        help="comma-separated model builder names (default: all)")
    parser.add_argument("--budget-minutes", type=float,
                        help="training wall-clock budget per model (default 20, "
                             "0.5 with --quick)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: under 15 minutes on 2 cores")
    parser.add_argument("--output-dir", default="runs/leaderboard",
                        help="run directories and the leaderboard files")
    parser.add_argument("--decode-batch", type=int, default=100)
    parser.add_argument("--decode-beam", type=int, default=4)
    parser.add_argument("--decode-repeats", type=int,
                        help="timed decoding calls, the median is kept (default 3, "
                             "1 with --quick)")
    args, passthrough = parser.parse_known_args(argv)
    for flag in ("--model", "--output-dir", "--name", "--export-dir", "--log-dir"):
        if any(item == flag or item.startswith(flag + "=") for item in passthrough):
            parser.error(f"{flag} is set per model by the leaderboard")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(args.models) - set(MODEL_BUILDERS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {sorted(MODEL_BUILDERS)}")
    if args.budget_minutes is None:
        args.budget_minutes = 0.5 if args.quick else 20.0
    if args.decode_repeats is None:
        args.decode_repeats = 1 if args.quick else 3
    args.passthrough = (QUICK_DEFAULTS if args.quick else []) + passthrough
    args.output_dir = pathlib.Path(args.output_dir)
    return args


def model_arguments(args, model):
    """The `RunConfig` of one model (train_wmt's own parser)."""
    run_dir = args.output_dir / model
    argv = ["--model", model, "--preset", args.preset,
            "--time-budget-minutes", str(args.budget_minutes),
            "--output-dir", str(run_dir), "--name", f"leaderboard-{model}",
            "--export-dir", str(args.output_dir / "saved_models" / model),
            "--quiet"] + list(args.passthrough)
    return parse_train_args(argv)


def shared_vocabulary(args, train_args):
    """One SentencePiece model for every run (trained once, then copied)."""
    from keras_attn_zoo.data.vocabulary import train_sentencepiece
    from keras_attn_zoo.workflow import load_corpus

    path = args.output_dir / f"vocab-{train_args.vocab_size}.model"
    if not path.exists():
        corpus = load_corpus(train_args)
        args.output_dir.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp.model")
        train_sentencepiece(corpus.train, temporary, vocab_size=train_args.vocab_size)
        os.replace(temporary, path)
    return path


def restore_model(train_args, vocab_path):
    """The trained model, rebuilt and restored from its newest checkpoint."""
    import keras
    import tensorflow as tf

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.data.vocabulary import vocabulary_size
    from keras_attn_zoo.workflow import MIXED_PRECISION_POLICIES
    from keras_attn_zoo.workflow import build_for_vocabulary

    keras.mixed_precision.set_global_policy(
        MIXED_PRECISION_POLICIES[train_args.mixed_precision])
    tokenizer = load_tokenizer(vocab_path)
    # The run's own build phase: with the ids the model adds (extra_token_count).
    model = build_for_vocabulary(train_args, vocabulary_size(tokenizer))
    checkpoints = pathlib.Path(train_args.output_dir) / "checkpoints"
    latest = tf.train.latest_checkpoint(str(checkpoints))
    if latest is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoints}")
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    return model, tokenizer


def evaluate(args, train_args, eval_limit, vocab_path):
    """BLEU/chrF on the test split and decoding speed, with one traced search."""
    import numpy as np
    import tensorflow as tf

    from keras_attn_zoo.evaluation.scores import corpus_scores
    from keras_attn_zoo.export import Translator
    from keras_attn_zoo.workflow import load_corpus

    model, tokenizer = restore_model(train_args, vocab_path)
    translator = Translator(model, tokenizer, beam_size=train_args.beam_size,
                            length_penalty=train_args.length_penalty)
    corpus = load_corpus(train_args)
    test = corpus.test if eval_limit is None else corpus.test[:eval_limit]
    row = {}
    if test:
        started = time.monotonic()
        hypotheses = translator.translate_texts([s for s, _ in test])
        row.update(corpus_scores(hypotheses, [t for _, t in test]))
        row.update(test_pairs=len(test), eval_seconds=round(time.monotonic() - started, 1))
    sources = [s for s, _ in (corpus.test or corpus.valid or corpus.train)]
    if sources:
        batch = [sources[i % len(sources)] for i in range(args.decode_batch)]
        text = tf.constant([s.encode("utf-8") for s in batch])
        options = (tf.constant(args.decode_beam, tf.int32),
                   tf.constant(train_args.length_penalty, tf.float32),
                   tf.constant(translator.max_length_a, tf.float32),
                   tf.constant(translator.max_length_b, tf.float32))
        if not test:  # the evaluation above traced the search; else warm up here
            translator.translate_with_options(text, *options)
        times, lengths = [], None
        for _ in range(max(args.decode_repeats, 1)):
            started = time.perf_counter()
            output = translator.translate_with_options(text, *options)
            lengths = output["length"].numpy()
            times.append(time.perf_counter() - started)
        seconds = float(np.median(times))
        row.update(decode_sentences_per_second=round(args.decode_batch / seconds, 2),
                   decode_target_tokens_per_second=round(float(lengths.sum()) / seconds, 1),
                   decode_mean_target_length=round(float(lengths.mean()), 2),
                   decode_batch=args.decode_batch, decode_beam=args.decode_beam)
    return row


def run_model(args, model):
    """Trains (or resumes), evaluates and times one model; returns its row."""
    from keras_attn_zoo.workflow import training_run

    train_args = model_arguments(args, model)
    run_dir = pathlib.Path(train_args.output_dir)
    row_path = run_dir / ROW_FILE
    if row_path.exists():
        print(f"[{model}] finished before: {row_path}", flush=True)
        return json.loads(row_path.read_text(encoding="utf-8"))
    row = {"model": model, "paper_gain": PAPER_GAINS.get(model, ""),
           "preset": train_args.preset, "budget_minutes": args.budget_minutes}
    started = time.monotonic()
    try:
        vocab_path = shared_vocabulary(args, train_args)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / "vocab.model").exists():
            shutil.copyfile(vocab_path, run_dir / "vocab.model")
        results_path = run_dir / "results.json"
        if results_path.exists():
            print(f"[{model}] trained before; evaluating", flush=True)
            results = json.loads(results_path.read_text(encoding="utf-8"))
        else:
            print(f"[{model}] training ({args.budget_minutes} min budget)", flush=True)
            eval_limit, train_args.eval_limit = train_args.eval_limit, 0
            results = training_run(train_args)
            train_args.eval_limit = eval_limit
        row.update({key: results.get(key) for key in (
            "params", "steps", "train_seconds", "train_target_tokens_per_second",
            "final_loss", "export_path")})
        row.update(evaluate(args, train_args, train_args.eval_limit,
                            run_dir / "vocab.model"))
        row["status"] = "ok"
    except (Exception, SystemExit) as error:  # a failing model must not stop the rest
        message = f"{type(error).__name__}: {error}".strip()
        row.update(status="failed", error=message[:2000],
                   traceback=traceback.format_exc()[-4000:])
        print(f"[{model}] FAILED: {message[:500]}", flush=True)
    row["wall_seconds"] = round(time.monotonic() - started, 1)
    if row["status"] == "ok":
        temporary = row_path.with_name(ROW_FILE + ".tmp")
        temporary.write_text(json.dumps(row, indent=2, ensure_ascii=False) + "\n",
                             encoding="utf-8")
        os.replace(temporary, row_path)
    return row


def _cell(key, value):
    if value is None:
        return "-"
    if key in ("params",):
        return f"{value:,}"
    if key in ("train_target_tokens_per_second",):
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def write_leaderboard(args, rows, settings):
    """``leaderboard.json`` and ``leaderboard.md`` (best BLEU first, failures last)."""
    ranked = sorted(rows, key=lambda r: (r.get("status") != "ok",
                                         -(r.get("bleu") or 0.0)))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    document = {"settings": settings, "rows": ranked}
    for name, text in (
            ("leaderboard.json", json.dumps(document, indent=2, ensure_ascii=False) + "\n"),
            ("leaderboard.md", markdown(ranked, settings))):
        path = args.output_dir / name
        temporary = path.with_name(name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    return args.output_dir / "leaderboard.md", args.output_dir / "leaderboard.json"


def markdown(rows, settings):
    lines = ["# keras-attn-zoo leaderboard", "",
             f"Same recipe, data and budget for every model: preset "
             f"`{settings['preset']}`, {settings['budget_minutes']} min of training "
             f"each, data `{settings['data']}`, beam {settings['beam_size']} "
             f"(length penalty {settings['length_penalty']}) for the scores; decoding "
             f"speed at batch {settings['decode_batch']}, beam "
             f"{settings['decode_beam']}. Command: `{settings['command']}`.", "",
             "| " + " | ".join(header.format(batch=settings["decode_batch"],
                                             beam=settings["decode_beam"])
                              for _, header in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for row in rows:
        cells = []
        for key, _ in COLUMNS:
            value = row.get(key)
            if key == "status" and row.get("status") == "failed":
                value = f"failed: {row.get('error', '')[:200]}"
            cells.append(_cell(key, value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import keras

    rows = []
    for model in args.models:
        rows.append(run_model(args, model))
        keras.backend.clear_session()
        gc.collect()
    first = model_arguments(args, args.models[0])
    settings = {"preset": args.preset, "budget_minutes": args.budget_minutes,
                "data": first.data, "direction": first.direction,
                "beam_size": first.beam_size, "length_penalty": first.length_penalty,
                "eval_limit": first.eval_limit, "decode_batch": args.decode_batch,
                "decode_beam": args.decode_beam, "quick": args.quick,
                "command": " ".join([pathlib.Path(sys.argv[0]).name] + (
                    sys.argv[1:] if argv is None else list(argv)))}
    markdown_path, json_path = write_leaderboard(args, rows, settings)
    print(markdown_path.read_text(encoding="utf-8"))
    print(f"wrote {markdown_path} and {json_path}")
    return rows


if __name__ == "__main__":
    main()

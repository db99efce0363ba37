#!/usr/bin/env python
"""How well trained runs fit their training data against the valid split.

For each run directory (a recipe or leaderboard run: its `model.keras`,
`vocab.model` and `run_identity.json`), the teacher-forced token loss
(cross-entropy without label smoothing, nats per target token) and token
accuracy on a seeded sample of its training pairs and on the whole valid
split, from the same weights, with the gap between them. A large gap with a
low training loss is over-fitting: the run's valid translations stopped
improving because it memorises the training pairs, which a slower learning
rate does not cure and regularisation may (issue 33's recipe grids).

The losses are per token of the model's own vocabulary, so runs with different
vocabulary sizes compare by their gaps, not by their losses.

The eager translator trains on an aligned stream with start pads, not on
these batches: its runs are refused (its source-use probe,
`models.eager.probe`, is its fit measurement).

Usage:
    python benchmarks/fit_gap.py runs/recipe-rnnsearch/default-seed0-24000steps-240min \
        runs/leaderboard/small-converge-24000steps-240min/transformer/seed2

Writes ``benchmarks/results/fit_gap-<date>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

import numpy as np

import common


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=pathlib.Path,
                        help="run directories (model.keras, vocab.model, run_identity.json)")
    parser.add_argument("--train-sample", type=int, default=1200,
                        help="training pairs measured (a seeded sample; default: as many "
                             "as Ding's valid split)")
    parser.add_argument("--seed", type=int, default=0, help="the training sample's seed")
    parser.add_argument("--batch-tokens", type=int, default=1500)
    parser.add_argument("--smoke", action="store_true",
                        help="accepted for the benchmarks' common flags; needs runs")
    parser.add_argument("--output-dir", default=None)
    return parser.parse_args(argv)


def teacher_forced_fit(model, tokenizer, pairs, batch_tokens=1500):
    """`{"loss", "accuracy", "tokens"}` of `model` on `pairs`, teacher-forced.

    Loss is the mean cross-entropy (no label smoothing) over every real target
    token (EOS included, padding excluded), accuracy the share of them the
    argmax predicts; batches as training makes them, unshuffled.
    """
    from keras_attn_zoo.data.pipeline import make_dataset
    from keras_attn_zoo.training.losses import token_loss_sum

    pairs = list(pairs)
    dataset, _ = make_dataset(pairs, tokenizer, batch_tokens=batch_tokens, shuffle=False)
    loss = tokens = correct = 0.0
    for features, labels in dataset:
        logits = model(features, training=False)
        batch_loss, batch_tokens_, batch_correct = token_loss_sum(
            labels, logits, label_smoothing=0.0)
        loss += float(batch_loss)
        tokens += float(batch_tokens_)
        correct += float(batch_correct)
    if not tokens:
        raise ValueError("teacher_forced_fit: no pair fits the model's max_length; "
                         f"{len(pairs)} pairs given.")
    return {"loss": round(loss / tokens, 4), "accuracy": round(correct / tokens, 4),
            "tokens": int(tokens)}


def run_corpus(run_dir):
    """The run's corpus, from its `run_identity.json` (the data it trained on)."""
    from keras_attn_zoo import workflow

    identity = json.loads((run_dir / "run_identity.json").read_text())
    if identity.get("aligned_batching") or identity.get("model") == "eager_translator":
        raise SystemExit(f"{run_dir}: the eager translator trains on an aligned stream, "
                         "not on these batches; its fit is its source-use probe.")
    fields = {field.name for field in dataclasses.fields(workflow.RunConfig)}
    config = workflow.RunConfig(**{key: value for key, value in identity.items()
                                   if key in fields and key != "model_options"})
    return identity, workflow.load_corpus(config)


def measure(run_dir, train_sample=1200, seed=0, batch_tokens=1500):
    """One run's fit on a training sample and on the valid split, and their gap."""
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer

    run_dir = pathlib.Path(run_dir)
    missing = [name for name in ("model.keras", "vocab.model", "run_identity.json")
               if not (run_dir / name).exists()]
    if missing:
        raise SystemExit(f"{run_dir} is not a finished run: it lacks {missing}.")
    identity, corpus = run_corpus(run_dir)
    train = list(corpus.train)
    chosen = np.random.default_rng(seed).choice(len(train), min(train_sample, len(train)),
                                                replace=False)
    tokenizer = load_tokenizer(run_dir / "vocab.model")
    model = keras.models.load_model(run_dir / "model.keras", compile=False)
    train_fit = teacher_forced_fit(model, tokenizer, [train[i] for i in sorted(chosen)],
                                   batch_tokens)
    valid_fit = teacher_forced_fit(model, tokenizer, corpus.valid, batch_tokens)
    results_file = run_dir / "results.json"
    step = json.loads(results_file.read_text()).get("best_step") if results_file.exists() else None
    return {"run": str(run_dir), "model": identity.get("model"),
            "vocab_size": identity.get("vocab_size"), "best_step": step,
            "train_pairs": len(chosen), "valid_pairs": len(corpus.valid),
            "train": train_fit, "valid": valid_fit,
            "loss_gap": round(valid_fit["loss"] - train_fit["loss"], 4),
            "accuracy_gap": round(train_fit["accuracy"] - valid_fit["accuracy"], 4)}


def main(argv=None):
    args = parse_args(argv)
    if not args.runs:
        raise SystemExit("fit_gap measures trained runs: name at least one run directory.")
    run = common.start_run()
    rows = []
    for run_dir in args.runs:
        row = measure(run_dir, args.train_sample, args.seed, args.batch_tokens)
        print(f"{run_dir}: train loss {row['train']['loss']} (accuracy "
              f"{row['train']['accuracy']}), valid {row['valid']['loss']} "
              f"({row['valid']['accuracy']}), gap {row['loss_gap']}", flush=True)
        rows.append(row)
    settings = {"train_sample": args.train_sample, "seed": args.seed,
                "batch_tokens": args.batch_tokens}
    path = common.write_results("fit_gap", {"settings": settings, "runs": rows},
                                args.output_dir, smoke=args.smoke, run=run)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Screens recipe cells at convergence on a GPU with Keras' JAX backend.

On 2 CPU cores one cell of `recipes/recipe_experiments.py` trains to
convergence in about an hour, so the search around the low-resource settings
(issue 31) would take days. This screen trains the same cells on a GPU machine
that has JAX but no TensorFlow, with the zoo's own builders, loss
(`LabelSmoothedCrossEntropy`), schedule (`InverseSquareRootSchedule`), Adam
settings, token budget, word dropout and SentencePiece vocabulary, and
translates the whole valid split greedily every `valid_every` steps. Scoring
happens back on the TensorFlow machine: sacreBLEU BLEU/chrF of every
evaluation, then the recipe's early-stopping rule applied to the curve
(`truncate_at_convergence`: a run stopped early made exactly the evaluations
before its stop, so training to the cap and truncating is the same run).

The screen chooses which cells the CPU table (the recipe `make train` runs)
confirms; it does not choose the default itself. What differs from the CPU
runs, and is said in the table:

* batches: the rows of the fixed-shape bucket grid of
  `data.pipeline.bucket_layout(..., fixed_shapes=True)` (the XLA path: the
  same pairs per batch), padded to a few shapes (`SHAPE_LENGTHS` by the
  grid's largest batch) so that XLA compiles 4 steps, not 15; padding rows
  and positions carry no labels, so the loss and the gradient are those of
  the real rows;
* word dropout draws from NumPy, not `tf.random.stateless_uniform`;
* greedy search recomputes the decoder on the prefix each step (no cache),
  limit `2 * source length + 10` tokens, then EOS, as the exported search;
* the GPU's float32 matmuls may use TF32.

Three steps (`DIR` stays out of git: it holds ids of the GPL corpus):

    python recipes/recipe_screen.py prepare runs/screen --cells default,low-resource
    KERAS_BACKEND=jax python recipes/recipe_screen.py train runs/screen --out OUT
    python recipes/recipe_screen.py score runs/screen OUT [--write RESULTS.json]

`prepare` (TensorFlow machine) resolves each cell's `RunConfig` as
`recipe_experiments.py` does and writes `DIR/cells.json`, one SentencePiece
vocabulary per size and the train/valid ids. `train` (any backend; the GPU
machine) trains the cells of `cells.json` (`--cells` picks some, `--jobs N`
runs N processes side by side on one GPU) and writes `OUT/<cell>.npz`: the
greedy valid translations of every evaluation and the training losses.
`score` reads them and prints the table.

Cost, measured on an H100 on 2026-11-25 with four cells side by side: XLA
compiled the 4 training shapes and the greedy search in about 250 s per
process, then each cell trained about 500 steps per 10 s, evaluations
included (12,000 steps: about 4 minutes). Four cells fit a 10-minute call;
thirteen did not (their compilations alone outran it). The translations are
saved after every evaluation, so a cell cut by `--minutes` keeps its curve.
A device call brings back at most 8 files: four cells' `.npz` and `.json`, so
write logs elsewhere, and keep `--minutes` two below the call's limit. The whole
path (prepare, `train --jobs 2` on the JAX CPU backend, score) ran end to end
here on 2026-11-28 with the tiny preset.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # data.vocabulary's (asserted by prepare)
FIRST_WORD_ID = EOS_ID + 1
# RunConfig fields the screen reproduces; any other field that differs from the
# recipe's default makes `prepare` refuse the cell.
SCREENED_FIELDS = ("model", "preset", "model_options", "batch_tokens", "max_length",
                   "vocab_size", "learning_rate", "warmup_steps", "label_smoothing",
                   "word_dropout", "valid_every", "valid_metric", "patience",
                   "min_improvement", "min_steps", "max_steps", "seed")
VALID_BATCH_ROWS = 200
# Every batch is padded to one of these lengths (and all to one row count):
# each new shape costs an XLA compilation of the step, tens of seconds.
SHAPE_LENGTHS = (16, 32, 64, 128)
DECODE_LENGTH_A, DECODE_LENGTH_B = 2.0, 10  # the exported search's default limit


# ---- prepare (TensorFlow machine) -----------------------------------------------------------


def _flat(sequences):
    lengths = np.array([len(s) for s in sequences], np.int32)
    flat = np.concatenate([np.asarray(s, np.int32) for s in sequences]) if len(sequences) \
        else np.zeros([0], np.int32)
    return flat, lengths


def _unflat(flat, lengths):
    ends = np.cumsum(lengths)
    return [flat[end - n:end] for n, end in zip(lengths, ends)]


def prepare(directory, cells, steps, seed):
    sys.path.insert(0, str(REPO / "recipes"))
    import recipe_experiments as recipe  # TensorFlow, the corpus, the recipe's defaults
    from keras_attn_zoo import workflow
    from keras_attn_zoo.data import vocabulary
    from keras_attn_zoo.data.pipeline import bucket_layout

    assert (vocabulary.PAD_ID, vocabulary.UNK_ID, vocabulary.BOS_ID,
            vocabulary.EOS_ID) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    directory.mkdir(parents=True, exist_ok=True)
    default = dataclasses.asdict(recipe.cell_config("default", {}, {}, steps, seed, "runs"))
    resolved = {}
    for cell in cells:
        if cell not in recipe.CELLS:
            raise SystemExit(f"unknown cell {cell!r}; cells: {sorted(recipe.CELLS)}")
        config = dataclasses.asdict(recipe.cell_config(
            cell, recipe.resolve(recipe.CELLS[cell], steps), {}, steps, seed, "runs"))
        other = sorted(key for key in config if key not in SCREENED_FIELDS
                       and key not in ("name", "output_dir") and config[key] != default[key])
        if other or config["data"] != "ding":
            raise SystemExit(f"cell {cell!r} changes {other or ['data']}, which the screen "
                             "does not reproduce; train it with recipe_experiments.py.")
        if config["valid_every"] <= 0:
            raise SystemExit(f"cell {cell!r} has no valid evaluations (valid_every=0).")
        entry = {key: config[key] for key in SCREENED_FIELDS}
        entry["changes"] = recipe.describe(recipe.resolve(recipe.CELLS[cell], steps))
        entry["buckets"] = bucket_layout(config["max_length"], config["batch_tokens"],
                                         fixed_shapes=True)
        resolved[cell] = entry

    config = recipe.cell_config("default", {}, {}, steps, seed, "runs")
    corpus = workflow.load_corpus(config)
    for size in sorted({entry["vocab_size"] for entry in resolved.values()}):
        path = directory / f"vocab-{size}.model"
        if not path.exists():
            vocabulary.train_sentencepiece(corpus.train, path, vocab_size=size)
        tokenizer = vocabulary.load_tokenizer(path)
        arrays = {}
        for split, pairs in (("train", corpus.train), ("valid", corpus.valid)):
            sources = tokenizer([source for source, _ in pairs])
            targets = tokenizer([target for _, target in pairs])
            arrays[f"{split}_source"], arrays[f"{split}_source_lengths"] = _flat(sources)
            arrays[f"{split}_target"], arrays[f"{split}_target_lengths"] = _flat(targets)
        np.savez_compressed(directory / f"ids-{size}.npz", **arrays)
        print(f"vocabulary {size}: {len(corpus.train)} train, {len(corpus.valid)} valid pairs")
    (directory / "cells.json").write_text(json.dumps(resolved, indent=1) + "\n")
    print(f"{len(resolved)} cells -> {directory / 'cells.json'}")


# ---- train (any Keras backend; the GPU machine) ---------------------------------------------


def epoch_batches(sources, targets, buckets, rng):
    """One epoch of `(source_ids, target_ids, labels)` batches, shuffled, bucketed.

    A pair goes to the first bucket whose boundary exceeds max(source + EOS,
    BOS + target); pairs longer than the last bucket's length were dropped
    before. A bucket's batch goes out when it holds its batch size of rows; the
    last, short batches of the epoch are padded with empty rows.
    """
    boundaries, batch_sizes = buckets
    pending = [[] for _ in boundaries]
    rows_per_batch = -(-max(batch_sizes) // 8) * 8

    def batch(bucket, rows):
        length = padded_length(boundaries[bucket] - 1)
        shape = (rows_per_batch, length)
        source = np.zeros(shape, np.int32)
        decoder_input = np.zeros(shape, np.int32)
        labels = np.zeros(shape, np.int32)
        for row, index in enumerate(rows):
            s, t = sources[index], targets[index]
            source[row, :len(s) + 1] = np.append(s, EOS_ID)
            decoder_input[row, :len(t) + 1] = np.insert(t, 0, BOS_ID)
            labels[row, :len(t) + 1] = np.append(t, EOS_ID)
        return source, decoder_input, labels

    for index in rng.permutation(len(sources)):
        longest = max(len(sources[index]), len(targets[index])) + 1
        bucket = int(np.searchsorted(boundaries, longest, side="right"))
        pending[bucket].append(index)
        if len(pending[bucket]) == batch_sizes[bucket]:
            yield batch(bucket, pending[bucket])
            pending[bucket] = []
    for bucket, rows in enumerate(pending):
        if rows:
            yield batch(bucket, rows)


def padded_length(length):
    """The shortest of `SHAPE_LENGTHS` that holds `length` (or `length` itself)."""
    return next((option for option in SHAPE_LENGTHS if option >= length), length)


def drop_words(ids, rate, rng):
    """Word dropout (`data.noise.word_dropout`'s rule): real tokens -> UNK with `rate`."""
    if not rate:
        return ids
    dropped = (ids >= FIRST_WORD_ID) & (rng.random(ids.shape) < rate)
    return np.where(dropped, UNK_ID, ids).astype(np.int32)


def _valid_batches(sources):
    """The valid sources sorted by length, in batches padded to a multiple of 8."""
    order = np.argsort([len(s) for s in sources], kind="stable")
    for start in range(0, len(order), VALID_BATCH_ROWS):
        rows = order[start:start + VALID_BATCH_ROWS]
        longest = max(len(sources[i]) for i in rows) + 1
        length = padded_length(longest)
        source = np.zeros((VALID_BATCH_ROWS, length), np.int32)
        for row, index in enumerate(rows):
            source[row, :len(sources[index]) + 1] = np.append(sources[index], EOS_ID)
        limit = int(np.ceil(DECODE_LENGTH_A * (longest - 1) + DECODE_LENGTH_B))
        # BOS, the limit's tokens and EOS, within the longest training length
        yield rows, source, padded_length(min(limit + 2, SHAPE_LENGTHS[-1]))


def make_greedy(model):
    """`greedy(source, target_length) -> ids [B, target_length]`, jitted on JAX."""
    import jax
    import jax.numpy as jnp

    def search(trainable, non_trainable, source, target_length):
        rows = source.shape[0]
        lengths = jnp.sum(source != PAD_ID, axis=1)
        limits = jnp.ceil(DECODE_LENGTH_A * (lengths - 1) + DECODE_LENGTH_B).astype(jnp.int32)
        tokens = jnp.zeros((rows, target_length), jnp.int32).at[:, 0].set(BOS_ID)
        done = lengths == 0

        def cond(state):
            step, _, done = state
            return (step < target_length - 1) & ~jnp.all(done)

        def body(state):
            step, tokens, done = state
            logits, _ = model.stateless_call(
                trainable, non_trainable, {"source_ids": source, "target_ids": tokens},
                training=False)
            logits = jax.lax.dynamic_index_in_dim(logits, step, axis=1, keepdims=False)
            logits = logits.astype(jnp.float32).at[:, jnp.array([PAD_ID, BOS_ID])].set(-1e9)
            chosen = jnp.argmax(logits, axis=-1).astype(jnp.int32)
            chosen = jnp.where(step >= limits, EOS_ID, chosen)
            chosen = jnp.where(done, PAD_ID, chosen)
            tokens = jax.lax.dynamic_update_index_in_dim(tokens, chosen, step + 1, axis=1)
            return step + 1, tokens, done | (chosen == EOS_ID)

        _, tokens, _ = jax.lax.while_loop(cond, body, (0, tokens, done))
        return tokens[:, 1:]

    compiled = jax.jit(search, static_argnums=3)

    def greedy(source, target_length):
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        return np.asarray(compiled(trainable, non_trainable, source, target_length))

    return greedy


def translate_valid(greedy, sources):
    """Greedy ids of every valid source, in the split's order, EOS and after removed."""
    out = [None] * len(sources)
    for rows, source, target_length in _valid_batches(sources):
        ids = greedy(source, target_length)
        for row, index in enumerate(rows):
            sentence = ids[row]
            end = np.flatnonzero(sentence == EOS_ID)
            out[index] = sentence[:end[0] if len(end) else len(sentence)]
    return out


def train_cell(name, cell, data_dir, out_dir, deadline):
    import keras

    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.models import extra_token_count
    from keras_attn_zoo.models import parse_model_options
    from keras_attn_zoo.training.losses import LabelSmoothedCrossEntropy
    from keras_attn_zoo.training.schedules import InverseSquareRootSchedule

    ids = np.load(data_dir / f"ids-{cell['vocab_size']}.npz")
    sources = _unflat(ids["train_source"], ids["train_source_lengths"])
    targets = _unflat(ids["train_target"], ids["train_target_lengths"])
    longest = cell["buckets"][0][-1] - 1
    kept = [i for i in range(len(sources))
            if max(len(sources[i]), len(targets[i])) + 1 <= longest]
    sources, targets = [sources[i] for i in kept], [targets[i] for i in kept]
    valid_sources = _unflat(ids["valid_source"], ids["valid_source_lengths"])

    if extra_token_count(cell["model"]):
        raise SystemExit(f"{name}: the screen trains models without extra ids only.")
    keras.utils.set_random_seed(cell["seed"])
    model = build_model(cell["model"], cell["vocab_size"], preset=cell["preset"],
                        **parse_model_options(cell["model_options"]))
    model.compile(
        optimizer=keras.optimizers.Adam(
            InverseSquareRootSchedule(cell["learning_rate"], cell["warmup_steps"]),
            beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=LabelSmoothedCrossEntropy(cell["label_smoothing"]), jit_compile=True)
    greedy = make_greedy(model)
    rng = np.random.default_rng(cell["seed"])
    step, epoch, losses, evaluations, decoded = 0, 0, [], [], []
    started = time.monotonic()
    finished = "max_steps"
    while step < cell["max_steps"] and finished == "max_steps":
        for source, decoder_input, labels in epoch_batches(sources, targets, cell["buckets"],
                                                           rng):
            features = {"source_ids": drop_words(source, cell["word_dropout"], rng),
                        "target_ids": drop_words(decoder_input, cell["word_dropout"], rng)}
            loss = model.train_on_batch(features, labels)
            step += 1
            if step % 100 == 0:
                losses.append((step, float(loss)))
            if step in (1, 50, 200):
                print(f"{name}: step {step} at {time.monotonic() - started:.1f} s", flush=True)
            if step % cell["valid_every"] == 0:
                evaluations.append(step)
                decoded.append(translate_valid(greedy, valid_sources))
                # after every evaluation: a killed process keeps its curve so far
                _save(name, out_dir, evaluations, decoded, losses, step, epoch, "running",
                      time.monotonic() - started, model, len(sources))
                print(f"{name}: step {step}, loss {float(loss):.3f}, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
            if step >= cell["max_steps"]:
                break
            if time.monotonic() > deadline:
                finished = "deadline"
                break
        epoch += 1
    record = _save(name, out_dir, evaluations, decoded, losses, step, epoch, finished,
                   time.monotonic() - started, model, len(sources))
    print(json.dumps(record), flush=True)


def _save(name, out_dir, evaluations, decoded, losses, step, epoch, ended, seconds, model,
          train_pairs):
    """`OUT/<cell>.npz` (the translations of every evaluation) and `OUT/<cell>.json`."""
    width = max((len(s) for sentences in decoded for s in sentences), default=0)
    table = np.zeros((len(decoded), len(decoded[0]) if decoded else 0, width), np.int16)
    for e, sentences in enumerate(decoded):
        for i, sentence in enumerate(sentences):
            table[e, i, :len(sentence)] = sentence
    np.savez_compressed(out_dir / f"{name}.npz", steps=np.array(evaluations, np.int32),
                        decoded=table, losses=np.array(losses, np.float32))
    import keras
    record = {"cell": name, "steps": step, "epochs": epoch, "ended": ended,
              "seconds": round(seconds, 1), "params": model.count_params(),
              "backend": keras.backend.backend(), "device": _device_name(),
              "train_pairs": train_pairs}
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def _device_name():
    try:
        import jax
        return str(jax.devices()[0].device_kind)
    except Exception:  # another backend: the name is only a record
        return "unknown"


def _finished(out_dir, name):
    """Whether the cell reached its cap (one cut by `--minutes` trains again)."""
    path = out_dir / f"{name}.json"
    return path.exists() and json.loads(path.read_text())["ended"] == "max_steps"


# XLA's kernel autotuning benchmarks candidate kernels while it compiles; off,
# the default kernels run. Compilation was the screen's bottleneck: on an H200
# (2026-11-28, through a second harness since removed) one small-model training
# step took 63 s to compile alone, and twelve cells side by side reached no
# evaluation in 575 s. Untested on a GPU so far; a caller's XLA_FLAGS win.
XLA_FLAGS = "--xla_gpu_autotune_level=0"


def train(data_dir, out_dir, names, jobs, minutes):
    if "XLA_FLAGS" not in os.environ:  # read when JAX starts, below
        os.environ["XLA_FLAGS"] = XLA_FLAGS
    cells = json.loads((data_dir / "cells.json").read_text())
    names = names or list(cells)
    todo = [name for name in names if not _finished(out_dir, name)]
    out_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 60 * minutes
    if jobs <= 1 or len(todo) <= 1:
        for name in todo:
            train_cell(name, cells[name], data_dir, out_dir, deadline)
        return
    # Several small models share one GPU: one process each (XLA takes GPU memory
    # as it needs it, not 75% up front).
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    processes = {}
    for name in todo:
        while sum(p.poll() is None for p in processes.values()) >= jobs:
            time.sleep(1)
        remaining = max(0.1, (deadline - time.monotonic()) / 60)
        processes[name] = subprocess.Popen(
            [sys.executable, __file__, "train", str(data_dir), "--out", str(out_dir),
             "--cells", name, "--minutes", f"{remaining:.2f}"], env=env)
    failed = [name for name, p in processes.items() if p.wait() != 0]
    if failed:
        raise SystemExit(f"cells failed: {failed}")


# ---- score (TensorFlow machine) -------------------------------------------------------------


def score(data_dir, out_dir, write):
    sys.path.insert(0, str(REPO / "recipes"))
    import recipe_experiments as recipe
    from keras_attn_zoo import workflow
    from keras_attn_zoo.data import vocabulary
    from keras_attn_zoo.evaluation.scores import corpus_scores
    from keras_attn_zoo.training.early_stopping import truncate_at_convergence

    cells = json.loads((data_dir / "cells.json").read_text())
    corpus = workflow.load_corpus(recipe.cell_config("default", {}, {}, 1, 0, "runs"))
    references = [target for _, target in corpus.valid]
    rows = {}
    for name, cell in cells.items():
        path = out_dir / f"{name}.npz"
        if not path.exists():
            continue
        arrays = np.load(path)
        record = json.loads((out_dir / f"{name}.json").read_text())
        tokenizer = vocabulary.load_tokenizer(data_dir / f"vocab-{cell['vocab_size']}.model")
        curve = []
        for step, table in zip(arrays["steps"], arrays["decoded"]):
            hypotheses = tokenizer.detokenize([[int(t) for t in row if t] for row in table])
            scores = corpus_scores(hypotheses, references)
            curve.append({"step": int(step), "bleu": round(scores["bleu"], 2),
                          "chrf": round(scores["chrf"], 2)})
        stopped, converged = truncate_at_convergence(
            curve, cell["valid_metric"], cell["patience"], cell["min_improvement"],
            cell.get("min_steps", 0))
        best = max(stopped, key=lambda e: (e[cell["valid_metric"]], -e["step"]))
        rows[name] = {"cell": name, "changes": cell.get("changes", "?"),
                      "converged": converged, "stop_step": stopped[-1]["step"],
                      "best": best, "curve": curve, "training": record,
                      "final_loss": float(arrays["losses"][-1][1]) if len(arrays["losses"])
                      else None}
    print("| cell | changes | best step | greedy valid BLEU | chrF | stopped at | converged |")
    print("|---|---|---|---|---|---|---|")
    for row in sorted(rows.values(), key=lambda r: -r["best"]["bleu"]):
        print(f"| {row['cell']} | {row['changes']} | {row['best']['step']} | "
              f"{row['best']['bleu']:.2f} | {row['best']['chrf']:.2f} | {row['stop_step']} | "
              f"{'yes' if row['converged'] else 'no (cap)'} |")
    if write:
        write.parent.mkdir(parents=True, exist_ok=True)
        write.write_text(json.dumps({"cells": rows}, indent=1) + "\n")
        print(f"wrote {write}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="vocabularies, ids and cells (TensorFlow machine)")
    p.add_argument("directory", type=pathlib.Path)
    p.add_argument("--cells", required=True, help="cells of recipe_experiments.py, ','")
    p.add_argument("--steps", type=int, default=12000, help="the cap, as the CPU table's")
    p.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="train the cells (the GPU machine, JAX backend)")
    t.add_argument("directory", type=pathlib.Path)
    t.add_argument("--out", type=pathlib.Path, required=True)
    t.add_argument("--cells", default="", help="a subset of cells.json (default: all)")
    t.add_argument("--jobs", type=int, default=1, help="processes side by side")
    t.add_argument("--minutes", type=float, default=1e9,
                   help="stop every cell by then (its curve so far is kept, marked)")
    s = sub.add_parser("score", help="BLEU/chrF curves and the table (TensorFlow machine)")
    s.add_argument("directory", type=pathlib.Path)
    s.add_argument("out", type=pathlib.Path)
    s.add_argument("--write", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.directory, [c for c in args.cells.split(",") if c], args.steps, args.seed)
    elif args.command == "train":
        train(args.directory, args.out, [c for c in args.cells.split(",") if c], args.jobs,
              args.minutes)
    else:
        score(args.directory, args.out, args.write)


if __name__ == "__main__":
    main()

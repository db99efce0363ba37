#!/usr/bin/env python
"""The keras.io "English-to-Spanish translation with KerasHub" recipe as a peer.

Both systems get the same data (the Ding corpus, German -> English, the split of
``recipes/train_wmt.py``: trained on the training sentences, tested on the test
sentences), the same SentencePiece vocabulary (trained by our run) and the same
wall-clock training budget (``--budget-minutes``; ``train_wmt.py``'s default run
trains for 24 minutes). Then both are scored with sacreBLEU and chrF on the Ding
test sentences (``--eval-limit`` for a shorter run). Our default must win.

* **ours**: ``keras_attn_zoo.workflow.training_run`` with ``train_wmt.py``'s
  defaults (the ``small`` Transformer, label smoothing, inverse-square-root Adam,
  beam 4 with length penalty 0.6) and ``--time-budget-minutes``.
* **the peer**, rebuilt here from the recipe's description (our own code): one
  ``keras_hub.layers.TransformerEncoder`` and one ``TransformerDecoder`` (model
  width 256, FFN 2048, 8 heads) on ``TokenAndPositionEmbedding`` inputs (one for
  each language, padding masked), dropout 0.5 before a softmax ``Dense`` output;
  sequences of at most 40 tokens (sources truncated to 40, targets packed as
  BOS + pieces + EOS into 41 positions and shifted); batches of 64; ``rmsprop``
  with sparse categorical cross-entropy over the real (non-padding) tokens;
  ``model.fit`` epoch after epoch until the budget is spent (checked after every
  batch); greedy decoding with ``keras_hub.samplers.GreedySampler`` that re-runs
  the model on the whole prefix at each step, up to 40 tokens, stopping at EOS.
  Where the recipe uses two WordPiece vocabularies of 15,000 words, the peer uses
  our joint SentencePiece vocabulary: the comparison is of the models and their
  training, on equal data.

Usage:
    python benchmarks/keras_io_peer.py                       # 2 x 20 min + evaluation
    python benchmarks/keras_io_peer.py --budget-minutes 5 --eval-limit 500
    python benchmarks/keras_io_peer.py --ours-args "--warmup-steps 200"
    python benchmarks/keras_io_peer.py --ours-args \
        "--mixed-precision auto --length-penalty-choices 0.6,1.0"  # ours as `make train`
    python benchmarks/keras_io_peer.py --smoke
    make train && python benchmarks/keras_io_peer.py --budget-minutes 24 \
        --ours-results runs/transformer-small-ding-de-en   # only the peer trains

Both systems' dev learning curves (BLEU against training minutes; ours from its
early stopping, greedy on every valid sentence, or without it its dev monitor's
first 100 valid sentences at beam 4; the peer's on the first 100 valid
sentences at 8 points of its budget, greedy, its clock stopped while it is
evaluated; `learning_curve_sentences` names each) go into
the results and ``keras_io_peer-<date>.png``, drawn by the project's
``plot_learning_curves``. The matmul rate is measured before and after.

Writes ``benchmarks/results/keras_io_peer-<date>.json`` and ``.png`` and prints
the table.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import shlex
import sys
import tempfile
import time

import common
from keras_attn_zoo.training.seeding import seed_everything

SEQUENCE_LENGTH = 40
BATCH_SIZE = 64
EMBED_DIM = 256
INTERMEDIATE_DIM = 2048
NUM_HEADS = 8
DEV_SENTENCES = 100


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-minutes", type=float,
                        help="training wall-clock budget of EACH system (default: "
                             "train_wmt.py's default run, 24)")
    parser.add_argument("--eval-limit", type=int,
                        help="score on the first N test sentences (default: all)")
    parser.add_argument("--work-dir", help="run directories (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ours-results", metavar="RUN_DIR",
                        help="do not train ours: take a finished train_wmt.py run's "
                             "results.json and vocab.model from RUN_DIR (e.g. "
                             "`make train`'s, on this machine, with the same budget); "
                             "only the peer trains")
    parser.add_argument("--ours-args", default="",
                        help="extra train_wmt.py flags for our run, e.g. "
                             "'--warmup-steps 200 --batch-tokens 2000' (default: none, "
                             "train_wmt.py's defaults)")
    common.add_common_arguments(parser, repeats=1, warmup=0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.eval_limit = 5
    if args.budget_minutes is None:
        args.budget_minutes = train_wmt_module().DEFAULT_BUDGET_MINUTES
    return args


def finished_run(run_dir, budget_minutes):
    """`(results, run directory)` of a finished `train_wmt.py` run trained for the budget
    (or converged inside it: early stopping ended it sooner)."""
    import datetime
    import json

    run_dir = pathlib.Path(run_dir)
    path = run_dir / "results.json"
    if not path.exists() or not (run_dir / "vocab.model").exists():
        raise SystemExit(f"--ours-results {run_dir}: no results.json and vocab.model there "
                         "(the run directory of a finished train_wmt.py run).")
    results = json.loads(path.read_text())
    if results.get("bleu") is None:
        raise SystemExit(f"{path} has no test BLEU: the run did not evaluate the test split.")
    # Equal budgets: the trainer stops at the first step past the budget, or earlier
    # when early stopping ends the run (converged; the peer still trains it all).
    budget_seconds = budget_minutes * 60
    converged_inside = (results.get("stop_reason") == "converged"
                        and results["train_seconds"] <= budget_seconds + 60)
    if not converged_inside and abs(results["train_seconds"] - budget_seconds) > 60:
        raise SystemExit(f"{path}: ours trained {results['train_seconds']} s, not the "
                         f"--budget-minutes {budget_minutes:g} of the peer.")
    results["finished"] = datetime.datetime.fromtimestamp(
        path.stat().st_mtime).isoformat(timespec="seconds")
    return results, run_dir


def train_wmt_module():
    sys.path.insert(0, str(common.REPO_DIR / "recipes"))
    import train_wmt

    return train_wmt


def train_wmt_parse_args():
    return train_wmt_module().parse_args


def smoke_files(directory):
    """Tiny synthetic parallel files (a word-for-word toy language) for --smoke."""
    rng = random.Random(0)
    words = ["haus", "baum", "kind", "hund", "katze", "auto", "buch", "tisch"]
    english = {"haus": "house", "baum": "tree", "kind": "child", "hund": "dog",
               "katze": "cat", "auto": "car", "buch": "book", "tisch": "table"}
    paths = {}
    for split, count in (("train", 200), ("valid", 6), ("test", 12)):
        pairs = []
        for _ in range(count):
            sentence = rng.choices(words, k=rng.randint(2, 6))
            pairs.append((" ".join(sentence), " ".join(english[w] for w in sentence)))
        for side, index in (("de", 0), ("en", 1)):
            path = directory / f"{split}.{side}"
            path.write_text("".join(p[index] + "\n" for p in pairs), encoding="utf-8")
            paths[f"{split}_{side}"] = path
    return ["--data", "files", "--train-src", str(paths["train_de"]),
            "--train-tgt", str(paths["train_en"]), "--valid-src", str(paths["valid_de"]),
            "--valid-tgt", str(paths["valid_en"]), "--test-src", str(paths["test_de"]),
            "--test-tgt", str(paths["test_en"]), "--eval-every", "1"]


# ---- the peer -----------------------------------------------------------------------------

def build_peer(vocabulary_size):
    import keras
    import keras_hub

    encoder_inputs = keras.Input((None,), dtype="int32", name="encoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size, SEQUENCE_LENGTH, EMBED_DIM, mask_zero=True)(encoder_inputs)
    encoder_outputs = keras_hub.layers.TransformerEncoder(
        INTERMEDIATE_DIM, NUM_HEADS)(x)
    encoder = keras.Model(encoder_inputs, encoder_outputs, name="peer_encoder")

    decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
    encoded = keras.Input((None, EMBED_DIM), name="encoded")
    y = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size, SEQUENCE_LENGTH, EMBED_DIM, mask_zero=True)(decoder_inputs)
    y = keras_hub.layers.TransformerDecoder(INTERMEDIATE_DIM, NUM_HEADS)(
        decoder_sequence=y, encoder_sequence=encoded)
    y = keras.layers.Dropout(0.5)(y)
    outputs = keras.layers.Dense(vocabulary_size, activation="softmax",
                                 dtype="float32")(y)
    decoder = keras.Model([decoder_inputs, encoded], outputs, name="peer_decoder")
    model = keras.Model([encoder_inputs, decoder_inputs],
                        decoder([decoder_inputs, encoder(encoder_inputs)]),
                        name="keras_io_peer")
    return model, encoder, decoder


def peer_arrays(pairs, sentencepiece):
    """Source ``[N, 40]``, decoder inputs ``[N, 40]`` and targets ``[N, 40]``."""
    import numpy as np

    count = len(pairs)
    source = np.zeros([count, SEQUENCE_LENGTH], "int32")
    packed = np.zeros([count, SEQUENCE_LENGTH + 1], "int32")
    for row, (german, english) in enumerate(pairs):
        pieces = sentencepiece.encode(german)[:SEQUENCE_LENGTH]
        source[row, :len(pieces)] = pieces
        target = ([2] + sentencepiece.encode(english) + [3])[:SEQUENCE_LENGTH + 1]
        packed[row, :len(target)] = target
    return source, packed[:, :-1], packed[:, 1:]


class WallClockBudget:
    """Keras callback: stops ``fit`` once ``seconds`` of training have passed.

    With ``evaluate`` (a function of no arguments returning ``{"bleu", "chrf"}``)
    it also records the dev learning curve: ``evaluations`` points spread evenly
    over the budget and one at the end. The clock stops while it evaluates, so
    the peer's evaluations cost it no training time (ours count against its
    budget, at most 5% of it: the comparison favours the peer, if anything).
    """

    def __new__(cls, seconds, max_steps=None, evaluate=None, evaluations=8):
        import keras

        class _Budget(keras.callbacks.Callback):
            started, steps, done, paused = None, 0, False, 0.0
            curve = []
            next_evaluation = seconds / max(evaluations, 1)

            def training_seconds(self):
                return time.monotonic() - self.started - self.paused

            def record(self):
                minutes = round(self.training_seconds() / 60, 3)  # before evaluating
                began = time.monotonic()
                scores = evaluate()
                self.curve.append({"step": self.steps, "bleu": scores["bleu"],
                                   "chrf": scores["chrf"], "minutes": minutes})
                print(f"peer dev: step {self.steps}, {self.curve[-1]['minutes']:.2f} "
                      f"training min, BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}",
                      flush=True)
                self.paused += time.monotonic() - began

            def on_train_batch_end(self, batch, logs=None):
                if self.started is None:
                    self.started = time.monotonic()
                self.steps += 1
                self.done = (self.training_seconds() >= seconds
                             or (max_steps is not None and self.steps >= max_steps))
                if self.done:
                    self.model.stop_training = True
                if evaluate is None:
                    return
                if self.done:
                    self.record()
                elif self.training_seconds() >= self.next_evaluation:
                    self.record()
                    self.next_evaluation += seconds / evaluations

        budget = _Budget()
        budget.curve = []
        return budget


def train_peer(corpus, sentencepiece, budget_seconds, max_steps=None, seed=0,
               dev_pairs=()):
    """Trains the peer for ``budget_seconds``; ``dev_pairs``: the learning curve's
    sentences (greedy decoding, as the recipe's)."""
    import keras
    import tensorflow as tf

    seed_everything(seed)
    model, encoder, decoder = build_peer(sentencepiece.get_piece_size())
    model.compile(optimizer="rmsprop",
                  loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=0),
                  metrics=["accuracy"])
    source, decoder_in, target = peer_arrays(corpus.train, sentencepiece)
    dataset = (tf.data.Dataset.from_tensor_slices(((source, decoder_in), target))
               .shuffle(min(len(target), 200_000), seed=seed)
               .batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE))
    peer = {"encoder": encoder, "decoder": decoder}
    evaluate = None
    if dev_pairs:
        from keras_attn_zoo.evaluation.scores import corpus_scores

        def evaluate():
            hypotheses = greedy_translate(peer, sentencepiece, [s for s, _ in dev_pairs])
            return corpus_scores(hypotheses, [t for _, t in dev_pairs])

    budget = WallClockBudget(budget_seconds, max_steps, evaluate=evaluate)
    started = time.monotonic()
    epochs = 0
    while not budget.done:  # epoch after epoch until the budget is spent
        model.fit(dataset, epochs=1, verbose=0, callbacks=[budget])
        epochs += 1
    seconds = time.monotonic() - started - budget.paused
    tokens_per_pair = float((target != 0).sum(axis=1).mean())
    return {"model": model, **peer,
            "steps": budget.steps, "epochs_started": epochs, "train_seconds": seconds,
            "evaluation_seconds": round(budget.paused, 1),
            "learning_curve": budget.curve,
            "params": model.count_params(),
            "train_target_tokens_per_second":
                budget.steps * BATCH_SIZE * tokens_per_pair / max(seconds, 1e-9)}


def greedy_translate(peer, sentencepiece, sentences, batch_size=64):
    """The recipe's decoding: GreedySampler, the model re-run on the prefix."""
    import keras_hub
    import numpy as np
    from keras import ops

    encoder, decoder = peer["encoder"], peer["decoder"]
    sampler = keras_hub.samplers.GreedySampler()
    outputs = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        source = np.zeros([len(chunk), SEQUENCE_LENGTH], "int32")
        for row, sentence in enumerate(chunk):
            pieces = sentencepiece.encode(sentence)[:SEQUENCE_LENGTH]
            source[row, :len(pieces)] = pieces
        encoded = encoder(source, training=False)
        prompt = np.zeros([len(chunk), SEQUENCE_LENGTH], "int32")
        prompt[:, 0] = 2

        def next_fn(prompt, cache, index):
            probabilities = decoder([prompt, encoded], training=False)[:, index - 1, :]
            return ops.log(ops.maximum(probabilities, 1e-12)), None, cache

        generated = sampler(next_fn, ops.convert_to_tensor(prompt), index=1,
                            stop_token_ids=[3])
        for row in np.asarray(generated):
            ids = []
            for token in row[1:].tolist():
                if token == 3:
                    break
                if token > 3:
                    ids.append(int(token))
            outputs.append(sentencepiece.decode(ids))
    return outputs


# ---- main --------------------------------------------------------------------------------

def run(args):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.evaluation.scores import corpus_scores
    from keras_attn_zoo.workflow import load_corpus
    from keras_attn_zoo.workflow import training_run

    run_info = common.start_run()
    # The machine's speed beside the time-budgeted scores (before and after).
    rates = [] if args.smoke else [common.matmul_rate(size=1024, repeats=3, chain=4)["gflops"]]
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="keras_io_peer-"))
    work.mkdir(parents=True, exist_ok=True)
    parse_train_args = train_wmt_parse_args()
    extra = []
    if args.smoke:
        # Valid evaluations at both steps: ours' learning curve has points, as the peer's.
        extra = smoke_files(work) + ["--preset", "tiny", "--max-steps", "2",
                                     "--vocab-size", "60", "--batch-tokens", "256",
                                     "--valid-every", "1"]
    ours_args = parse_train_args(
        ["--time-budget-minutes", str(args.budget_minutes), "--output-dir",
         str(work / "ours"), "--no-export", "--quiet", "--seed", str(args.seed)]
        + (["--eval-limit", str(args.eval_limit)] if args.eval_limit is not None else [])
        + extra + shlex.split(args.ours_args))
    if args.ours_results:
        ours, ours_dir = finished_run(args.ours_results, args.budget_minutes)
        print(f"ours: the finished run in {ours_dir}", flush=True)
    else:
        print(f"ours: train_wmt.py defaults, {args.budget_minutes} min", flush=True)
        ours, ours_dir = training_run(ours_args), work / "ours"

    corpus = load_corpus(ours_args)
    sentencepiece = sentencepiece_processor(ours_dir / "vocab.model")
    print(f"peer: keras.io recipe, {args.budget_minutes} min", flush=True)
    # The learning curve's sentences: the first 100 valid pairs, as ours' dev monitor.
    peer = train_peer(corpus, sentencepiece, args.budget_minutes * 60,
                      max_steps=2 if args.smoke else None, seed=args.seed,
                      dev_pairs=corpus.valid[:DEV_SENTENCES])
    test = corpus.test if args.eval_limit is None else corpus.test[:args.eval_limit]
    if ours.get("test_pairs") not in (None, len(test)):
        raise SystemExit(f"ours was scored on {ours['test_pairs']} test pairs, the peer "
                         f"would be on {len(test)}: give the same --eval-limit.")
    started = time.monotonic()
    hypotheses = greedy_translate(peer, sentencepiece, [s for s, _ in test])
    peer_scores = corpus_scores(hypotheses, [t for _, t in test])
    peer_decode_seconds = time.monotonic() - started
    if not args.smoke:
        rates.append(common.matmul_rate(size=1024, repeats=3, chain=4)["gflops"])

    rows = [
        {"system": f"ours (train_wmt.py {args.ours_args or 'default'}: {ours['preset']} "
                   f"{ours['model']}, beam {ours_args.beam_size})",
         "params": ours["params"], "steps": ours["steps"],
         "train_seconds": ours["train_seconds"],
         "train_target_tokens_per_second": ours["train_target_tokens_per_second"],
         "bleu": ours.get("bleu"), "chrf": ours.get("chrf"),
         "decode_seconds": ours.get("decode_seconds")},
        {"system": "keras.io recipe (1+1 layers, rmsprop, greedy)",
         "params": peer["params"], "steps": peer["steps"],
         "train_seconds": round(peer["train_seconds"], 1),
         "train_target_tokens_per_second": peer["train_target_tokens_per_second"],
         "bleu": peer_scores["bleu"], "chrf": peer_scores["chrf"],
         "decode_seconds": round(peer_decode_seconds, 1)},
    ]
    winner = None
    if rows[0]["bleu"] is not None:
        winner = "ours" if rows[0]["bleu"] > rows[1]["bleu"] else "peer"
    return {"budget_minutes": args.budget_minutes, "test_pairs": len(test),
            "ours_results": ours.get("results_path") if args.ours_results else None,
            "ours_finished": ours.get("finished") if args.ours_results else None,
            "ours_machine": ours.get("machine"),
            "ours_beam_size": ours_args.beam_size,
            "ours_args": args.ours_args,
            "data": ours.get("data"), "rows": rows, "winner": winner,
            "sacrebleu_signature": peer_scores.get("sacrebleu_signature"),
            "peer_examples": [{"source": s, "reference": t, "translation": h}
                              for (s, t), h in list(zip(test, hypotheses))[:5]],
            "ours_examples": ours.get("examples"),
            "learning_curves": {"ours": ours.get("learning_curve") or [],
                                "keras.io peer": peer["learning_curve"]},
            "learning_curve_sentences": {
                "ours": ours_curve_sentences(ours, ours_args.beam_size),
                "keras.io peer": f"first {DEV_SENTENCES} valid sentences, greedy"},
            "peer_evaluation_seconds": peer["evaluation_seconds"],
            "machine": {"matmul_gflops_before_and_after": [round(r, 1) for r in rates]}
            }, run_info


def ours_curve_sentences(ours, beam_size):
    """What ours' learning curve scored: early stopping's valid set and search, or the
    dev monitor's first 100 valid sentences (runs without early stopping)."""
    stopping = ours.get("early_stopping")
    if stopping:
        search = ("greedy" if stopping["beam_size"] == 1
                  else f"beam {stopping['beam_size']}")
        return f"{stopping['valid_pairs']} valid sentences, {search}"
    return f"first {DEV_SENTENCES} valid sentences, beam {beam_size}"


COLUMNS = [("system", "system", ""), ("params", "params", ","), ("steps", "steps", ""),
           ("train_seconds", "train s", ".0f"),
           ("train_target_tokens_per_second", "tgt tok/s", ".0f"),
           ("bleu", "BLEU", ".2f"), ("chrf", "chrF", ".2f"),
           ("decode_seconds", "decode s", ".1f")]


def print_results(results, file=None):
    common.print_table(results["rows"], COLUMNS,
                       f"\nsame data ({results['data']}), vocabulary and "
                       f"{results['budget_minutes']} min budget; scored on "
                       f"{results['test_pairs']} test sentences:", file=file)
    print(f"winner: {results['winner']}", file=file or sys.stdout)


def plot_curves(results, path):
    """Dev BLEU against training minutes of both systems (the JSON's name, .png)."""
    from keras_attn_zoo.evaluation.plots import plot_learning_curves

    sentences = results["learning_curve_sentences"]
    return plot_learning_curves(
        results["learning_curves"], path,
        title=f"dev BLEU: ours ({sentences['ours']}) and the keras.io recipe "
              f"({sentences['keras.io peer']}), {results['budget_minutes']:g} min each")


def main(argv=None):
    from keras_attn_zoo.runtime import start_tensorflow

    start_tensorflow()  # both systems: the pooled CPU allocator, no start-up noise
    args = parse_args(argv)
    results, run_info = run(args)
    print_results(results)
    path = common.write_results("keras_io_peer", results, args.output_dir,
                                smoke=args.smoke, run=run_info)
    picture = plot_curves(results, pathlib.Path(path).with_suffix(".png"))
    print(f"\nwrote {path} and {picture}")
    return results


if __name__ == "__main__":
    main()

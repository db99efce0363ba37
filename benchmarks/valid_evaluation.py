"""How early stopping should evaluate: greedy or beam, all valid pairs or a subset.

Early stopping ranks a run's checkpoints by a valid-split score. This script
takes a run directory that kept its checkpoints (e.g. `train_wmt.py
--checkpoint-every 500 --average-checkpoints 16`), translates the whole valid
split at each checkpoint with greedy search and with beam 4, and reports:

* BLEU and chrF per checkpoint and search, and the seconds each evaluation took
  beside the training seconds between checkpoints (the run's `progress.json`);
* whether greedy ranks the checkpoints as beam 4 does: Kendall's tau over the
  checkpoints and whether both pick the same best checkpoint;
* the noise of a subset of the first N valid pairs: the bootstrap standard
  deviation of BLEU over resampled sentences (sacreBLEU's statistics summed,
  so the resampled score is the corpus score of the resample), beside the
  BLEU change between neighbouring checkpoints that early stopping must see.

    python benchmarks/valid_evaluation.py --run-dir runs/conv-baseline-seed0

Results: `benchmarks/results/valid_evaluation-<date>.json`, with the
machine's matmul rate and load average.
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np

import common

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from keras_attn_zoo.runtime import start_tensorflow  # noqa: E402

start_tensorflow()

import sacrebleu  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn_zoo import data as zoo_data  # noqa: E402
from keras_attn_zoo.data.vocabulary import load_tokenizer  # noqa: E402
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE  # noqa: E402
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY  # noqa: E402
from keras_attn_zoo.data.vocabulary import vocabulary_size  # noqa: E402
from keras_attn_zoo.evaluation.scores import corpus_scores  # noqa: E402
from keras_attn_zoo.models import build_model  # noqa: E402
from keras_attn_zoo.workflow import RunConfig  # noqa: E402
from keras_attn_zoo.workflow import run_translator  # noqa: E402


def checkpoint_steps(directory):
    state = tf.train.get_checkpoint_state(str(directory))
    if state is None:
        raise SystemExit(f"No checkpoints in {directory}.")
    return sorted(int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths)


def kendall_tau(xs, ys):
    """Kendall's tau-a of two score lists over the same items."""
    concordant = discordant = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            sign = np.sign(xs[i] - xs[j]) * np.sign(ys[i] - ys[j])
            concordant += sign > 0
            discordant += sign < 0
    pairs = len(xs) * (len(xs) - 1) / 2
    return float((concordant - discordant) / pairs) if pairs else float("nan")


def bootstrap_bleu_std(hypotheses, references, size, samples=200, seed=0):
    """The standard deviation of corpus BLEU over `samples` resamples of `size` pairs."""
    bleu = sacrebleu.metrics.BLEU()
    stats = np.array([bleu._extract_corpus_statistics([h], [[r]])[0]
                      for h, r in zip(hypotheses, references)], dtype=np.float64)
    generator = np.random.default_rng(seed)
    scores = []
    for _ in range(samples):
        rows = generator.integers(0, len(stats), size)
        scores.append(bleu._compute_score_from_stats(list(stats[rows].sum(0))).score)
    return float(np.std(scores))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--model-options", default="")
    parser.add_argument("--beam-size", type=int, default=DEFAULT_BEAM_SIZE)
    parser.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY)
    parser.add_argument("--subsets", type=common.int_list, default=[100, 300, 600, 1200])
    parser.add_argument("--first-step", type=int, default=0,
                        help="skip checkpoints before this step")
    args = parser.parse_args(argv)
    run = common.start_run()
    rate = common.matmul_rate(size=1024, repeats=3, chain=4)

    from keras_attn_zoo.models import parse_model_options

    run_dir = pathlib.Path(args.run_dir)
    tokenizer = load_tokenizer(run_dir / "vocab.model")
    model = build_model(args.model, vocabulary_size(tokenizer), preset=args.preset,
                        **parse_model_options(args.model_options))
    valid = zoo_data.load_pairs("ding:sentences", "valid", "de-en")
    sources, references = [s for s, _ in valid], [t for _, t in valid]
    progress = {}
    if (run_dir / "progress.json").exists():
        progress = {int(k): v for k, v in json.loads(
            (run_dir / "progress.json").read_text()).items()}

    rows = []
    translator = None
    for step in checkpoint_steps(run_dir / "checkpoints"):
        if step < args.first_step:
            continue
        tf.train.Checkpoint(model=model).restore(
            str(run_dir / "checkpoints" / f"ckpt-{step}")).expect_partial()
        if translator is None:
            translator = run_translator(RunConfig(beam_size=args.beam_size,
                                                  length_penalty=args.length_penalty),
                                        model, tokenizer)
        row = {"step": step}
        for name, beam in (("greedy", 1), ("beam", args.beam_size)):
            started = time.monotonic()
            hypotheses = translator.translate_texts(sources, beam_size=beam)
            row[f"{name}_seconds"] = round(time.monotonic() - started, 1)
            scores = corpus_scores(hypotheses, references)
            row[f"{name}_bleu"], row[f"{name}_chrf"] = scores["bleu"], scores["chrf"]
            if name == "greedy":
                row["greedy_bootstrap_std"] = {
                    n: round(bootstrap_bleu_std(hypotheses, references, n), 3)
                    for n in args.subsets}
                row["greedy_subset_bleu"] = {
                    n: corpus_scores(hypotheses[:n], references[:n])["bleu"]
                    for n in args.subsets}
        if step in progress:
            row["training_seconds_to_here"] = round(progress[step]["seconds"], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)

    greedy = [r["greedy_bleu"] for r in rows]
    beam = [r["beam_bleu"] for r in rows]
    best = {name: rows[int(np.argmax(values))]["step"]
            for name, values in (("greedy", greedy), ("beam", beam))}
    changes = [abs(b - a) for a, b in zip(greedy, greedy[1:])]
    summary = {
        "checkpoints": len(rows),
        "kendall_tau_greedy_vs_beam_bleu": round(kendall_tau(greedy, beam), 3),
        "kendall_tau_greedy_vs_beam_chrf": round(kendall_tau(
            [r["greedy_chrf"] for r in rows], [r["beam_chrf"] for r in rows]), 3),
        "best_step": best,
        "median_abs_bleu_change_between_checkpoints": (
            round(float(np.median(changes)), 3) if changes else None),
        "median_greedy_seconds": float(np.median([r["greedy_seconds"] for r in rows])),
        "median_beam_seconds": float(np.median([r["beam_seconds"] for r in rows])),
    }
    print(json.dumps(summary, indent=1))
    path = common.write_results("valid_evaluation", {
        "run_dir": str(run_dir), "model": args.model, "preset": args.preset,
        "valid_pairs": len(valid), "rows": rows, "summary": summary,
        "matmul_gflops": round(rate["gflops"], 1),
        "hardware_peak_gflops": rate["hardware_peak_gflops"]}, run=run)
    print(f"results: {path}")


if __name__ == "__main__":
    main()

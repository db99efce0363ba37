#!/usr/bin/env python
"""Train, evaluate and export a zoo model.

With no flags: the `small` Transformer on the Ding German-English corpus
(de->en), a 24-minute training budget on CPU, beam-4 evaluation on the Ding
test sentences, and a SavedModel export under `saved_models/`.

    python recipes/train_wmt.py                                 # the default run
    python recipes/train_wmt.py --model transformer --preset tiny --max-steps 50
    python recipes/train_wmt.py --data tfds:wmt14_translate/de-en --preset base
    python recipes/train_wmt.py --data files --train-src train.de --train-tgt train.en \
        --valid-src dev.de --valid-tgt dev.en --test-src test.de --test-tgt test.en
    python recipes/train_wmt.py --model eager_translator --preset small  # Press & Smith
    python recipes/train_wmt.py --recipe low-resource-3-layers --max-steps 24000  # converged

A killed run restarted with the same command resumes from its last checkpoint.
`--recipe low-resource` (Sennrich & Zhang 2019) sets a 4,000-piece vocabulary,
word dropout and more dropout, and bf16 where the CPU or GPU multiplies it natively
(`--mixed-precision auto`); `--recipe low-resource-3-layers` adds 3 + 3 layers and
the mean of the 4 best checkpoints, beam 8. Checkpoint averaging or a weight EMA
come on top of either:

    python recipes/train_wmt.py --recipe low-resource --max-steps 24000 \
        --average-checkpoints 5 --checkpoint-every 500
"""

import argparse
import dataclasses
import json
import sys

from keras_attn_zoo.runtime import start_tensorflow

start_tensorflow()  # before the workflow imports TensorFlow: no start-up noise

from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE  # noqa: E402
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY  # noqa: E402
from keras_attn_zoo.workflow import MIXED_PRECISION_SETTINGS  # noqa: E402
from keras_attn_zoo.workflow import RECIPES  # noqa: E402
from keras_attn_zoo.workflow import OPTIMIZERS  # noqa: E402
from keras_attn_zoo.workflow import SCHEDULES  # noqa: E402
from keras_attn_zoo.workflow import RunConfig  # noqa: E402
from keras_attn_zoo.workflow import join_model_options  # noqa: E402
from keras_attn_zoo.workflow import load_average  # noqa: E402
from keras_attn_zoo.workflow import training_run  # noqa: E402


# (peak learning rate, warm-up steps) of the inverse-square-root schedule when
# --learning-rate / --warmup-steps are not given. base and big: Vaswani et al.'s
# schedule, d^-0.5 * 4000^-0.5 (7.0e-4 and 4.9e-4). tiny and small: runs of a few
# hundred steps on CPU, where the pre-norm `small` preset reaches a given BLEU in
# far fewer steps at 2e-3 than the post-norm model at 1e-3 (docs/measurements.md).
SCHEDULE_DEFAULTS = {"tiny": (2e-3, 100), "small": (2e-3, 100),
                     "base": (7e-4, 4000), "big": (4.9e-4, 4000)}
FALLBACK_SCHEDULE = (1e-3, 1000)  # other builders' presets (e.g. eager "paper")
# With no stop condition: 24 minutes of training, then the data's preparation, the
# test split's beam search and the export fit in 30 minutes on 2 cores.
DEFAULT_BUDGET_MINUTES = 24.0


def float_tuple(text):
    """``"0.6,1.0"`` -> ``(0.6, 1.0)``; ``""`` -> ``()``."""
    try:
        return tuple(float(value) for value in text.split(",") if value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}")


def parse_args(argv=None):
    """The flags as a `RunConfig` (the default budget and the preset's schedule applied)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="default", choices=list(RECIPES),
                   help="named settings under the flags (default: default). "
                        "low-resource: --vocab-size 4000 --word-dropout 0.1 and "
                        "--model-options 'dropout=0.3;attention_dropout=0.1;"
                        "activation_dropout=0.1' (Transformer family), the better "
                        "recipe at convergence. low-resource-3-layers: the same "
                        "with num_encoder_layers=3;num_decoder_layers=3 and "
                        "--average-checkpoints 4 --beam-size 8 --length-penalty 1.0, "
                        "the converged run's recipe. eager-paper: --optimizer sgd "
                        "--learning-rate 20 --warmup-steps 0 --schedule "
                        "plateau-halving (Press & Smith 2018). rnnsearch-paper: "
                        "--optimizer adadelta --learning-rate 1 --warmup-steps 0 "
                        "--schedule constant --clip-norm 1 --label-smoothing 0 "
                        "(Bahdanau et al. 2015). rnnsearch-low-resource: "
                        "--vocab-size 4000 --word-dropout 0.1 --model-options "
                        "dropout=0.4 (RNNsearch regularised for ~16k pairs). Flags given beside "
                        "it win, and "
                        "--model-options adds to its options. A run of a named "
                        "recipe is called <model>-<preset>-<data>-<direction>-<recipe> "
                        "unless --name says otherwise")
    p.add_argument("--model", default="transformer", help="zoo model builder name")
    p.add_argument("--preset", default="small", help="tiny | small | base | big")
    p.add_argument(
        "--data", default="ding",
        help="ding | ding:sentences | ding:all | files | tfds:NAME (e.g. "
             "tfds:wmt14_translate/de-en). 'ding' trains on the Ding example "
             "sentences, 'ding:all' adds the dictionary phrases; both evaluate "
             "on the test sentences.",
    )
    p.add_argument("--sentence-repeats", type=int, default=1, metavar="N",
                   help="with --data ding:all, each example sentence appears N times "
                        "per epoch and each dictionary phrase once, so the sentences "
                        "keep their share of the batches (default 1)")
    for split in ("train", "valid", "test"):
        several = (", or several joined by ',' (streamed from disk; one file per "
                   "worker or more: each worker reads its own)") if split == "train" else ""
        p.add_argument(f"--{split}-src", help=f"{split} source file{several} (--data files)")
        p.add_argument(f"--{split}-tgt", help=f"{split} target file{several} (--data files)")
    p.add_argument("--direction", default="de-en", help="de-en (default) or en-de")
    p.add_argument("--epochs", type=int, help="stop after this many epochs")
    p.add_argument("--max-steps", type=int, help="stop after this many steps")
    p.add_argument(
        "--time-budget-minutes", type=float,
        help="stop after this much training time (default 24 when no other "
             "stop condition is given)",
    )
    p.add_argument("--model-options", default="",
                   help="builder arguments over the preset, key=value pairs joined "
                        "by ';' (e.g. 'norm_first=true' or 'apply_to=all')")
    p.add_argument("--batch-tokens", type=int, default=1500,
                   help="token budget per global batch")
    p.add_argument("--max-length", type=int, default=128,
                   help="longest training sequence in pieces; longer pairs are "
                        "dropped and counted")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--learning-rate", type=float,
                   help="peak learning rate after warm-up (default: by preset, see "
                        "SCHEDULE_DEFAULTS)")
    p.add_argument("--warmup-steps", type=int,
                   help="warm-up steps (default: by preset, see SCHEDULE_DEFAULTS)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                   help="adam (beta 0.9/0.98; default), sgd (plain SGD, the eager "
                        "translator paper's) or adadelta (rho 0.95, epsilon 1e-6, "
                        "RNNsearch's paper's)")
    p.add_argument("--schedule", choices=SCHEDULES, default="inverse-sqrt",
                   help="inverse-sqrt (warm-up, then 1/sqrt(step); default), "
                        "plateau-halving (warm-up, then constant, halved at every valid "
                        "evaluation without a gain; needs --valid-every) or constant "
                        "(warm-up, then constant)")
    p.add_argument("--clip-norm", type=float, default=None, metavar="NORM",
                   help="rescale the gradients to at most this global L2 norm "
                        "(default: the model's rule; off except on the eager "
                        "translator's aligned stream, 0.25)")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--strategy", default="auto",
                   help="auto | default | mirrored | multi_worker")
    p.add_argument("--mixed-precision", default="none", choices=MIXED_PRECISION_SETTINGS,
                   help="none | bf16 | fp16 (fp16 only on GPUs) | auto (bf16 where the "
                        "CPU or GPU multiplies bf16 natively, float32 elsewhere)")
    p.add_argument("--xla", default="auto", choices=["auto", "on", "off"],
                   help="XLA-compiled training step on fixed batch shapes (auto: on "
                        "where a GPU is visible; on 2 CPU cores it does not pay)")
    p.add_argument("--output-dir", help="run directory (default runs/<name>)")
    p.add_argument("--log-dir", help="TensorBoard directory (default <output>/logs)")
    p.add_argument("--export-dir",
                   help="SavedModel base directory (default saved_models/<name>)")
    p.add_argument("--name", help="run name (default <model>-<preset>-<data>-<direction>)")
    p.add_argument("--beam-size", type=int, default=DEFAULT_BEAM_SIZE)
    p.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY)
    p.add_argument("--length-penalty-choices", type=float_tuple, default=(),
                   metavar="A,B,...",
                   help="choose the GNMT length penalty among these by BLEU on the valid "
                        "split (--valid-sentences of it) at --beam-size, after training "
                        "and before the test evaluation and the export (default: none, "
                        "--length-penalty; make train passes 0.6,1.0)")
    p.add_argument("--eval-limit", type=int,
                   help="evaluate on the first N test pairs only (smoke runs)")
    p.add_argument("--checkpoint-every", type=int, default=500)
    p.add_argument("--eval-every", type=int, default=200,
                   help="steps between TensorBoard dev BLEU/chrF, translations and "
                        "attention images")
    p.add_argument("--no-monitoring", action="store_true",
                   help="no dev evaluation, attention images, gate or kappa/alpha "
                        "summaries during training (the loss scalars stay)")
    stop = p.add_argument_group(
        "early stopping on the valid split (the best weights are evaluated and exported)")
    stop.add_argument("--valid-every", type=int, default=RunConfig.valid_every,
                      metavar="N", help="evaluate the valid split every N steps "
                      f"(default {RunConfig.valid_every}; 0: never, export the last weights)")
    stop.add_argument("--valid-metric", default=RunConfig.valid_metric,
                      choices=["bleu", "chrf"],
                      help=f"sacreBLEU metric that ranks the evaluations, and the "
                           f"valid split's choices of length penalty and source padding "
                           f"injection (default {RunConfig.valid_metric})")
    stop.add_argument("--patience", type=int, default=RunConfig.patience, metavar="K",
                      help="stop after K evaluations in a row without an improvement "
                           f"(default {RunConfig.patience}; 0: never stop early)")
    stop.add_argument("--min-improvement", type=float, default=RunConfig.min_improvement,
                      help="the improvement that resets the patience (default "
                           f"{RunConfig.min_improvement})")
    stop.add_argument("--min-steps", type=int, default=RunConfig.min_steps, metavar="N",
                      help="the patience cannot stop the run before step N (default "
                           f"{RunConfig.min_steps}: no floor)")
    stop.add_argument("--valid-sentences", type=int, default=RunConfig.valid_sentences,
                      metavar="N", help="evaluate the first N valid pairs (default: all)")
    stop.add_argument("--valid-beam-size", type=int, default=RunConfig.valid_beam_size,
                      help="search of the valid evaluations (default "
                           f"{RunConfig.valid_beam_size}: greedy)")
    p.add_argument("--eager-aligned-batching", action="store_true",
                   help="eager_translator only: train on the paper's aligned stream "
                        "(LSTM state carried across BPTT windows) instead of "
                        "per-sentence batches")
    p.add_argument("--source-padding-injection", default=RunConfig.source_padding_injection,
                   metavar="model|valid|N",
                   help="eager_translator only: the decoding's source padding injection. "
                        "model: the model's (default); valid: the best of 0..10 by "
                        "--valid-metric on the valid split (--valid-sentences of it, the paper's "
                        "choice), set before the test evaluation and the export; N: N")
    p.add_argument("--seed", type=int, default=0)
    low = p.add_argument_group(
        "low-resource recipe (Sennrich & Zhang 2019; with --model-options "
        "'dropout=0.3;attention_dropout=0.1;activation_dropout=0.1;"
        "decoder_layer_drop=0.1' on Transformer-family models)")
    low.add_argument("--word-dropout", type=float, default=0.0, metavar="RATE",
                     help="replace each word piece of the source and decoder input "
                          "(not the labels) by UNK with this probability during "
                          "training, seeded by --seed (default 0: off)")
    low.add_argument("--average-checkpoints", type=int, default=0, metavar="N",
                     help="after training, evaluate and export the mean of the run's "
                          "last N checkpoints (keeps max(3, N); default 0: off)")
    low.add_argument("--ema-momentum", type=float, default=0.0, metavar="M",
                     help="keep an exponential moving average of the weights with "
                          "momentum M (e.g. 0.999) and evaluate and export it "
                          "(default 0: off; not with --average-checkpoints)")
    p.add_argument("--no-export", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    recipe = dict(RECIPES[p.parse_known_args(argv)[0].recipe])
    recipe_options = recipe.pop("model_options", "")
    p.set_defaults(**recipe)  # the recipe's values replace the defaults, not given flags
    args = p.parse_args(argv)
    args.model_options = join_model_options(recipe_options, args.model_options)
    recipe_name = args.__dict__.pop("recipe")
    if args.epochs is None and args.max_steps is None and args.time_budget_minutes is None:
        args.time_budget_minutes = DEFAULT_BUDGET_MINUTES
    peak, warmup = SCHEDULE_DEFAULTS.get(args.preset, FALLBACK_SCHEDULE)
    if args.learning_rate is None:
        args.learning_rate = peak
    if args.warmup_steps is None:
        args.warmup_steps = warmup
    values = vars(args)
    values["aligned_batching"] = values.pop("eager_aligned_batching")
    fields = {field.name for field in dataclasses.fields(RunConfig)}
    assert set(values) == fields, set(values) ^ fields  # every flag is a config field
    config = RunConfig(**values)
    if recipe_name != "default" and config.name is None:  # its own run directory and export
        config = dataclasses.replace(config, name=f"{config.run_name}-{recipe_name}")
    return config


def machine_speed():
    """The matmul rate (GFLOP/s) and load average now: beside a time-budgeted score."""
    import os
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import common  # benchmarks/common.py: the project's one measuring stick

    rate = common.matmul_rate(size=1024, repeats=3, chain=4)
    return {"matmul_gflops": round(rate["gflops"], 1),
            "hardware_peak_gflops": rate["hardware_peak_gflops"],
            "load_average_1_5_15": load_average(), "cpus": os.cpu_count(),
            # fewer where the process is pinned (leaderboard --jobs)
            "cpus_usable": len(os.sched_getaffinity(0))}


def main(argv=None):
    config = parse_args(argv)
    results = training_run(config, machine=machine_speed())
    print(json.dumps(results, indent=2))
    print(f"\nmodel:    {results['export_path'] or '(not exported)'}")
    print(f"logs:     {results['log_dir']}  (tensorboard --logdir {results['log_dir']})")
    print(f"results:  {results['results_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The leaderboard: every zoo model, several seeds, a recipe per family; a verdict per paper claim.

Each cell is one (model, seed): the model (a ``LEADERBOARD_MODELS`` name: transformer,
RAN-E, RAN-D, RAN-ALL, GMM, weighted, HC-SA, Syn-R, RNNsearch, eager, and the
Weighted Transformer's corrected forms weighted-gain, weighted-gain-random,
weighted-gain-rms-random and weighted-port, whose cells choose its default) trained by
``keras_attn_zoo.workflow.training_run`` - the code behind ``recipes/train_wmt.py``, so
every ``train_wmt.py`` flag works here and means the same - with the same data and
caps for every model, its family's recipe (``--family-recipes``: train_wmt's
``--recipe`` for the Transformer family, RNNsearch and the eager translator, each
chosen for its family on the valid split) and one SentencePiece vocabulary per size
(trained once).

Two protocols (``--protocol``). ``converge`` (the default, issue 33): every cell
trains to convergence with early stopping on the valid split (train_wmt's
``--valid-every``/``--patience``/``--valid-metric``, greedy on every valid sentence;
the best checkpoint is scored), under the same cap for every model in steps
(``--steps``, default 24000) and in training wall time (``--cap-minutes``, default
240), and not before a floor of a quarter of the step cap (train_wmt's
``--min-steps``; 6,000 of 24,000). The cell records why it stopped (``stop_reason``:
converged, max_steps or time_budget) and its ``best_step``; a cell stopped at a cap is reported "untested:
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
``--partial`` records the valid curve so far of each unfinished cell of
``--models``/``--seeds`` (``<results-dir>/partial/<model>-seed<N>-curve-<date>.json``):
a cell's checkpoints stay on the machine that trains it, its curve in the repository.
``--adopt-run RESULT_JSON`` (one model, one seed) gives a cell, instead of its
training, the finished run of a family's recipe grid (``recipes/recipe_experiments.py``
under the table's caps): the grid's seed-0 cell of the chosen recipe is the run the
table's seed-0 cell would train again (every setting is checked, `cells.adopt_run`).

This file is the command: its flags, each cell's train_wmt flags (`cell_config`)
and the order of the work. The work is `keras_attn_zoo.leaderboard` (`cells`,
`timing`, `report`); the table and the verdicts are `keras_attn_zoo.evaluation`'s.

Usage:
    python recipes/leaderboard.py                                 # 14 models x 3 seeds
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
import gc
import pathlib
import sys
import traceback

from train_wmt import machine_speed  # starts TensorFlow quietly
from train_wmt import parse_args as parse_train_args

from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
# Each model trained the way its paper trains it, where the zoo offers that way.
VARIANT_FLAGS = {
    # Press & Smith (2018): one aligned stream, the LSTM state carried across
    # windows; the source padding injection chosen on the valid split, as the
    # paper tunes it on its development set (the model decodes with the
    # reference code's SPI and average log-prob ranking by default).
    "eager": ["--eager-aligned-batching", "--source-padding-injection", "valid"],
}
# Each family's recipe (a `workflow.RECIPES` name; train_wmt's --recipe), chosen for
# it on the valid split at convergence (issue 33): the Transformer family's by the
# recipe search (recipes/recipe_experiments.py, docs/measurements.md), RNNsearch's
# and the eager translator's by their own grids. "default" until a family's is chosen:
# low-resource beat the default at convergence on three seeds (+0.65 valid BLEU,
# one-sided paired t p 0.010; docs/measurements.md), and is frozen for the table:
# cells resume only under their recipe (docs/leaderboard.md).
FAMILY_RECIPES = {"transformer": "low-resource", "rnnsearch": "default", "eager": "default"}
# The family of a builder; every other builder is the Transformer family's.
BUILDER_FAMILIES = {"bahdanau_rnn": "rnnsearch", "eager_translator": "eager"}
# What each family's early stopping ranks by (train_wmt --valid-metric), part of its
# recipe. Greedy valid BLEU below about 1 is noise (the eager grid's default cell:
# 0.04-0.51 over steps 500-5,000 while chrF rose 7.69 -> 12.21), so the RNN families,
# whose curves start there, stop on chrF. Where BLEU is informative the two agree:
# on 7 of the 8 converged Transformer-family cells chrF with the same patience stops
# at the same step (docs/leaderboard.md). Chosen before the RNN grids' curves.
FAMILY_VALID_METRICS = {"transformer": "bleu", "rnnsearch": "chrf", "eager": "chrf"}
QUICK_DEFAULTS = ["--vocab-size", "2000", "--eval-limit", "100"]
PROTOCOLS = ("converge", "fixed")
# The converged table's caps, the same for every model: the Transformer family's
# recipe (low-resource) converged at 13,000-19,000 steps in the recipe search
# (issue 31), which caps at 24,000.
CONVERGE_STEPS = 24000
CONVERGE_MINUTES = 240.0
FIXED_STEPS = 2000
# The ε share of the Ding training targets by start pads (benchmarks/eager_epsilon_share.py):
# a property of the data, read by the ε claim where the eager cells lack it.
EPSILON_SHARE_FILE = REPO / "benchmarks" / "results" / "eager_epsilon_share-2026-11-25.json"
# Flags the leaderboard sets per cell; the budget is --steps / --budget-minutes.
_OWN_FLAGS = ("--model", "--model-options", "--output-dir", "--name", "--export-dir",
              "--log-dir", "--seed", "--max-steps", "--time-budget-minutes", "--epochs",
              "--no-export", "--recipe")


def parse_args(argv=None):
    from keras_attn_zoo.models import LEADERBOARD_MODELS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Any other flag is a recipes/train_wmt.py flag, passed on to every run.")
    parser.add_argument("--models", default=",".join(LEADERBOARD_MODELS),
                        help=f"comma-separated model names (default: all of "
                             f"{', '.join(LEADERBOARD_MODELS)})")
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
    parser.add_argument("--family-recipes", default="",
                        help="family=recipe pairs joined by commas, each a train_wmt "
                             "--recipe for every model of the family (transformer, "
                             "rnnsearch, eager; default " + ",".join(
                                 f"{k}={v}" for k, v in FAMILY_RECIPES.items()) + ")")
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
    parser.add_argument("--decode-beam", type=int, default=DEFAULT_BEAM_SIZE)
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
    parser.add_argument("--adopt-run", metavar="RESULT_JSON",
                        help="the one cell of --models/--seeds takes, instead of training, "
                             "the finished run of this recipe-grid result file "
                             "(recipes/recipe_experiments.py under the same caps, settings "
                             "and vocabulary; its run directory is the one the file records, "
                             "or --adopt-run-dir)")
    parser.add_argument("--adopt-run-dir", metavar="DIR",
                        help="the run directory of --adopt-run's result")
    parser.add_argument("--partial", action="store_true",
                        help="train nothing: record each unfinished cell's valid curve so "
                             "far (from its run directory) in <results-dir>/partial/, so a "
                             "cell longer than a session leaves a committed trace")
    parser.add_argument("--note", default="",
                        help="with --partial: how the cell trained (threads, pauses)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="cells trained at once, each in its own process pinned to "
                             "its own share of the cores (default 1: one by one, in this "
                             "process); the table is written when all are done")
    parser.add_argument("--no-report", action="store_true",
                        help="train the cells; write no table (the processes of --jobs)")
    parser.add_argument("--retime-decoding", action="store_true",
                        help="train nothing: time finished cells' decoding against the "
                             "speed peers (Transformer, RNNsearch) they were not timed "
                             "with, in one process; then the report")
    args, passthrough = parser.parse_known_args(argv)
    for flag in _OWN_FLAGS:
        if any(item == flag or item.startswith(flag + "=") for item in passthrough):
            parser.error(f"{flag} is set per cell by the leaderboard")
    args.family_recipes = parse_family_recipes(parser, args.family_recipes)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(args.models) - set(LEADERBOARD_MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(LEADERBOARD_MODELS)}")
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
    if args.adopt_run_dir and not args.adopt_run:
        parser.error("--adopt-run-dir goes with --adopt-run")
    if args.adopt_run and (len(args.models), len(args.seeds)) != (1, 1):
        parser.error("--adopt-run makes one cell: give one model (--models) and one seed "
                     "(--seeds)")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    not_training = [flag for flag, on in (
        ("--report-only", args.report_only), ("--partial", args.partial),
        ("--time-seeds", args.time_seeds), ("--retime-decoding", args.retime_decoding),
        ("--align-gold", args.align_gold), ("--adopt-run", args.adopt_run)) if on]
    if args.jobs > 1 and not_training:
        parser.error(f"--jobs trains cells in parallel; {not_training[0]} trains none "
                     "or one")
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


def parse_family_recipes(parser, text):
    """`FAMILY_RECIPES` with the `--family-recipes` pairs of `text` in their place."""
    from keras_attn_zoo.workflow import RECIPES

    recipes = dict(FAMILY_RECIPES)
    for item in filter(None, (part.strip() for part in text.split(","))):
        family, _, recipe = (part.strip() for part in item.partition("="))
        if family not in FAMILY_RECIPES:
            parser.error(f"--family-recipes: unknown family {family!r}; choose from "
                         f"{list(FAMILY_RECIPES)}")
        if recipe not in RECIPES:
            parser.error(f"--family-recipes: unknown recipe {recipe!r} for {family}; "
                         f"choose from {list(RECIPES)}")
        recipes[family] = recipe
    return recipes


# ---- the command's settings -----------------------------------------------------------------


def family_of(model):
    """The recipe family of leaderboard model `model`."""
    from keras_attn_zoo.models import LEADERBOARD_MODELS

    builder, _ = LEADERBOARD_MODELS[model]
    return BUILDER_FAMILIES.get(builder, "transformer")


def recipe_of(args, model):
    """The train_wmt --recipe of `model`'s family."""
    return args.family_recipes[family_of(model)]


def cell_config(args, model, seed):
    """The cell's `RunConfig`, parsed by train_wmt's own parser."""
    from keras_attn_zoo.leaderboard.cells import cell_dir
    from keras_attn_zoo.models import LEADERBOARD_MODELS
    from keras_attn_zoo.models import format_model_options
    from keras_attn_zoo.training.early_stopping import table_min_steps
    from keras_attn_zoo.workflow import join_model_options

    builder, options = LEADERBOARD_MODELS[model]
    model_options = join_model_options(format_model_options(options), args.model_options)
    if args.protocol == "converge":  # both caps: whichever comes first stops the cell
        budget = ["--max-steps", str(args.steps), "--time-budget-minutes",
                  str(args.cap_minutes), "--min-steps", str(table_min_steps(args.steps))]
    else:
        budget = (["--max-steps", str(args.steps)] if args.steps is not None
                  else ["--time-budget-minutes", str(args.budget_minutes)])
    argv = ["--model", builder, "--model-options", model_options, "--preset", args.preset,
            "--seed", str(seed), "--output-dir", str(cell_dir(args.output_dir, model, seed)),
            "--name", f"leaderboard-{model}-seed{seed}", "--no-export", "--quiet",
            "--recipe", recipe_of(args, model), *budget, *VARIANT_FLAGS.get(model, []),
            "--valid-metric", FAMILY_VALID_METRICS[family_of(model)],
            # float32 for every family on every machine: the cells compare under one
            # wall-time cap, and bf16 (the low-resource recipe's "auto") would give
            # one family more steps on one machine kind.
            "--mixed-precision", "none", *args.passthrough]
    return parse_train_args(argv)


def budget_flags(args):
    """The command-line flags of the cells' budget (part of a cell's command)."""
    if args.protocol == "converge":
        return f"--steps {args.steps} --cap-minutes {args.cap_minutes:g}"
    return (f"--steps {args.steps}" if args.steps is not None
            else f"--budget-minutes {args.budget_minutes:g}")


def record_partial_cells(args):
    """`--partial`: each unfinished cell's curve so far, beside the finished cells' files."""
    from keras_attn_zoo.leaderboard.cells import CELL_FILE
    from keras_attn_zoo.leaderboard.cells import cell_dir
    from keras_attn_zoo.training.curve import run_so_far
    from keras_attn_zoo.training.curve import write_run_so_far

    machine = machine_speed()
    for seed in args.seeds:
        for model in args.models:
            if (cell_dir(args.results_dir, model, seed) / CELL_FILE).exists():
                print(f"{model} seed {seed}: finished, nothing partial to record")
                continue
            try:
                so_far = run_so_far(cell_dir(args.output_dir, model, seed))
            except ValueError as error:
                print(f"{model} seed {seed}: {error}")
                continue
            last = so_far["curve"][-1]["step"]
            record = {"model": model, "seed": seed, "budget": args.budget,
                      "recipe": recipe_of(args, model),
                      "status": (f"not finished at step {last}: its checkpoints stay on the "
                                 "machine that trains it (resumable there with the command)"),
                      "command": (f"recipes/leaderboard.py --models {model} --seeds {seed} "
                                  f"--protocol {args.protocol} {budget_flags(args)}"),
                      "metric": "greedy valid BLEU / chrF (early stopping's evaluations)",
                      "note": args.note, **so_far, "machine": machine}
            path = write_run_so_far(args.results_dir / "partial", f"{model}-seed{seed}", record)
            best = so_far["best_so_far"]
            print(f"{model} seed {seed}: step {last}, best at {best['step']} by "
                  f"{best['metric']} (greedy valid BLEU {best['bleu']}, chrF {best['chrf']}) "
                  f"-> {path}")


def command_line():
    return " ".join([pathlib.Path(sys.argv[0]).name] + sys.argv[1:])


def leaderboard_of(args):
    """The package's `Leaderboard` of the parsed command."""
    from keras_attn_zoo.leaderboard import Leaderboard

    return Leaderboard(
        output_dir=args.output_dir, results_dir=args.results_dir,
        config_of=lambda model, seed: cell_config(args, model, seed),
        recipe_of=lambda model: recipe_of(args, model),
        models=args.models, seeds=args.seeds, protocol=args.protocol, steps=args.steps,
        cap_minutes=args.cap_minutes, budget=args.budget, decode_batch=args.decode_batch,
        decode_beam=args.decode_beam, decode_repeats=args.decode_repeats,
        machine=machine_speed, command=command_line(), repo=REPO,
        epsilon_share_file=EPSILON_SHARE_FILE)


def cell_process_command(argv, model, seed):
    """The argv of one cell's own process under --jobs: this command for that cell
    alone, one job, no table (the last --models/--seeds/--jobs win in argparse)."""
    own = ("--models", "--seeds", "--jobs", "--readme")
    kept, skip_value = [], False
    for item in argv:
        if skip_value:
            skip_value = False
        elif item in own:
            skip_value = True
        elif not item.startswith(tuple(flag + "=" for flag in own)):
            kept.append(item)
    return [sys.executable, str(pathlib.Path(__file__).resolve()), *kept,
            "--models", model, "--seeds", str(seed), "--jobs", "1", "--no-report"]


def train_cells(args, board, argv):
    """Trains the cells of the command: one by one in this process, or --jobs at once."""
    import keras

    from keras_attn_zoo import leaderboard

    if args.adopt_run:
        leaderboard.adopt_run(board, args.models[0], args.seeds[0], args.adopt_run,
                              args.adopt_run_dir)
    if args.jobs > 1:
        unfinished = leaderboard.run_in_processes(
            board, lambda model, seed: cell_process_command(argv, model, seed), args.jobs,
            args.output_dir / "logs")
        for (model, seed), status in unfinished.items():
            print(f"[{leaderboard.cells.cell_name(model, seed)}] FAILED: no cell file "
                  f"(exit status {status}); its log is in {args.output_dir / 'logs'}",
                  flush=True)
        return
    for seed in args.seeds:  # seed-major: every model gets its first seed first
        for model in args.models:
            try:
                leaderboard.run_cell(board, model, seed)
            except (Exception, SystemExit) as error:  # one failure must not stop the rest
                print(f"[{leaderboard.cells.cell_name(model, seed)}] FAILED: "
                      f"{type(error).__name__}: "
                      f"{error}\n{traceback.format_exc()[-3000:]}", flush=True)
            keras.backend.clear_session()
            gc.collect()


def main(argv=None):
    from keras_attn_zoo import leaderboard

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    board = leaderboard_of(args)
    if args.align_gold:
        print(f"gold links: {leaderboard.align_gold(board)}")
        return
    if args.partial:
        record_partial_cells(args)
        return
    if args.time_seeds:
        leaderboard.time_seeds(board)
    elif args.retime_decoding:
        leaderboard.retime_decoding(board)
    elif not args.report_only:
        train_cells(args, board, argv)
        if args.no_report:
            return
    parts = leaderboard.write_report(board)
    if args.readme:
        leaderboard.rewrite_page(board, args.readme, parts)
    print((args.results_dir / "leaderboard.md").read_text(encoding="utf-8"))
    print(f"wrote {args.results_dir / 'leaderboard.md'}")


if __name__ == "__main__":
    main()

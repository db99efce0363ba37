#!/usr/bin/env python
"""Issue 19's recipe table: one change at a time from the default, scored on the valid split.

Each cell is a set of `RunConfig` overrides over `recipes/train_wmt.py`'s
defaults (the `small` Transformer on Ding de->en, the preset's learning-rate
schedule). Every cell trains to convergence: early stopping on the valid
split (the recipe's `--valid-every`, `--patience`, greedy search on every
valid sentence), capped at `--steps` steps for every cell (steps, not minutes,
so a loaded machine changes the wall time, not the result), and not stopped
before a quarter of the cap (the leaderboard's floor, `--min-steps`; a cell or
`--base` may set its own `min_steps`). A cell that
reaches the cap before its patience runs out is recorded as not converged
(`converged: false`, `stop_reason: max_steps`). The best checkpoint is then
scored on the whole valid split with the recipe's search (beam 4, length
penalty 0.6, sacreBLEU BLEU and chrF), and again with each search of
`SEARCH_GRID` (beam 1, 4 and 8; length penalty 0.6 and 1.0), so that the search
too is chosen on the valid split (the table's last column). Each cell keeps
the checkpoints of its `AVERAGED_BEST` best evaluations and scores their mean
on the same grid (`valid_search_grid_mean_of_best`): checkpoint averaging
judged at convergence, on every cell, at no extra training. The test split is
never translated, except by `--score-test CELL`, once, for the chosen default,
with the weights (best checkpoint or mean of the best) and the search that the
cell's valid results chose over its seeds (`chosen_search`).

    python recipes/recipe_experiments.py                      # every cell, to convergence
    python recipes/recipe_experiments.py --cells default,vocab-4000 --steps 3000
    python recipes/recipe_experiments.py --extra-cell \
        'combined={"vocab_size": 4000, "model_options": "dropout=0.3"}' --cells combined
    python recipes/recipe_experiments.py --table              # TABLE.md from the results
    python recipes/recipe_experiments.py --plot               # learning curves PNG
    python recipes/recipe_experiments.py --score-test vocab-4000   # once, at the end
    python recipes/recipe_experiments.py --partial --cells vocab-4000 --note "1 thread"

`--partial` records an unfinished cell's valid curve so far (from its run
directory; no training) in `<results-dir>/partial/`, so that a run longer than a
session leaves a committed trace.

Resumable: a cell's result goes to
`benchmarks/results/recipe/<cell>-seed<seed>-<steps>steps.json` (written under a
temporary name and renamed) and a rerun skips the cells that have one (but
resumes a cell that a run from before early stopping's floor stopped below it); a cell
killed while training resumes from the checkpoints in its run directory
`runs/recipe/<cell>-seed<seed>-<steps>steps`. `--base KEY=VALUE` overrides
every cell (e.g. `--base preset=tiny --base data=files --base train_src=...`);
another model's table keeps its own files:

    python recipes/recipe_experiments.py --base model=bahdanau_rnn --base valid_metric=chrf \
        --results-dir benchmarks/results/recipe-rnnsearch --runs-dir runs/recipe-rnnsearch

(the RNN families stop on chrF, the table's `FAMILY_VALID_METRICS`).

`--cap-minutes M` also stops a cell at M minutes of training wall time summed
over its sessions, the leaderboard's cap: a family's recipe for the table is
chosen under the budget the table gives it.
"""

import argparse
import dataclasses
import datetime
import importlib.util
import json
import pathlib
import sys
import time

from keras_attn_zoo.runtime import start_tensorflow

start_tensorflow()  # before the workflow imports TensorFlow: no start-up noise

import keras  # noqa: E402

from keras_attn_zoo import workflow  # noqa: E402
from keras_attn_zoo.training import select_strategy  # noqa: E402
from keras_attn_zoo.training.curve import LearningCurve  # noqa: E402
from keras_attn_zoo.training.curve import read_curve  # noqa: E402
from keras_attn_zoo.training.curve import remaining_cap_minutes  # noqa: E402
from keras_attn_zoo.training.curve import run_so_far  # noqa: E402
from keras_attn_zoo.training.curve import training_probes  # noqa: E402
from keras_attn_zoo.training.curve import write_run_so_far  # noqa: E402
from keras_attn_zoo.training.early_stopping import table_min_steps  # noqa: E402
from keras_attn_zoo.evaluation.scores import best_setting  # noqa: E402
from keras_attn_zoo.evaluation.scores import search_grid  # noqa: E402
from keras_attn_zoo.files import write_atomically  # noqa: E402
from keras_attn_zoo.training.averaging import average_checkpoints  # noqa: E402
from keras_attn_zoo.training.seeding import seed_everything  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results" / "recipe"
RUNS_DIR = pathlib.Path("runs") / "recipe"
DEFAULT_STEPS = 12000  # a cap: cells stop when they converge
# The searches each converged cell's best checkpoint is also scored with on the
# valid split (beam 4 with length penalty 0.6, the recipe's, scored below greedy
# on two converged models; docs/measurements.md): the search is chosen on them.
SEARCH_GRID = {"beam_sizes": (1, 4, 8), "length_penalties": (0.6, 1.0)}
# The mean of the best few checkpoints is scored beside the best one (on four
# converged runs the mean of the best and the last three scored +0.14 to
# +0.69 BLEU at beam 4 on valid; docs/measurements.md).
AVERAGED_BEST = 4


def _load_script(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train_wmt = _load_script(REPO / "recipes" / "train_wmt.py", "train_wmt_recipe")
sys.path.insert(0, str(REPO / "benchmarks"))
import common  # noqa: E402  (benchmarks/common.py: load average, machine, matmul rate)


def every_tenth_of_the_steps(steps):
    """A checkpoint every tenth of the budget: the last 5 span its second half."""
    return max(1, steps // 10)


# The low-resource literature's starting point for ~16k pairs (Sennrich & Zhang
# 2019; Araabi & Monz 2020): a small vocabulary, heavy dropout in every place,
# word dropout; judged at convergence (issue 31). `train_wmt.py --recipe low-resource`.
# The search runs in float32 on every machine, so cells from either machine kind
# compare; precision is a cell of its own (`low-resource-bf16`).
LOW_RESOURCE = {key: value for key, value in workflow.RECIPES["low-resource"].items()
                if key != "mixed_precision"}


def _low_resource_model(options):
    """LOW_RESOURCE with more `model_options` (``"key=value;..."``) on top."""
    return {**LOW_RESOURCE,
            "model_options": workflow.join_model_options(LOW_RESOURCE["model_options"], options)}


# name -> RunConfig overrides relative to the default. A value may be a function of
# the step budget (resolved when the cell runs). One change per cell; a combination
# is one more entry (or `--extra-cell NAME=JSON`).
CELLS = {
    "default": {},
    "vocab-4000": {"vocab_size": 4000},
    "vocab-2000": {"vocab_size": 2000},
    "dropout-0.3": {"model_options": "dropout=0.3"},
    # At this budget the model is under-trained (12 epochs, dev chrF still rising):
    # the other direction of dropout and a faster learning rate.
    "dropout-0.0": {"model_options": "dropout=0.0"},
    "learning-rate-3e-3": {"learning_rate": 3e-3},
    # The RNN families' grid (issue 33; with --base model=...): their papers train
    # slower, at 5e-4 (the RNNsearch seed study's Adam), where the Transformer's
    # recipe takes 2e-3.
    "learning-rate-1e-3": workflow.RECIPES["learning-rate-1e-3"],
    "learning-rate-5e-4": workflow.RECIPES["learning-rate-5e-4"],
    # The eager translator's own optimisation (train_wmt --recipe eager-paper).
    "eager-paper": workflow.RECIPES["eager-paper"],
    # RNNsearch's own optimisation (train_wmt --recipe rnnsearch-paper).
    "rnnsearch-paper": workflow.RECIPES["rnnsearch-paper"],
    # RNNsearch regularised for this corpus size (train_wmt --recipe rnnsearch-low-resource).
    "rnnsearch-low-resource": workflow.RECIPES["rnnsearch-low-resource"],
    "attention+activation-dropout-0.1": {
        "model_options": "attention_dropout=0.1;activation_dropout=0.1"},
    "label-smoothing-0.2": {"label_smoothing": 0.2},
    "word-dropout-0.1": {"word_dropout": 0.1},
    "decoder-layer-drop-0.1": {"model_options": "decoder_layer_drop=0.1"},
    "heads-2": {"model_options": "num_heads=2"},
    "average-last-5": {"average_checkpoints": 5,
                       "checkpoint_every": every_tenth_of_the_steps},
    "ema-0.999": {"ema_momentum": 0.999},
    "dictionary-all": {"data": "ding:all"},
    "batch-3000": {"batch_tokens": 3000},
    "low-resource": LOW_RESOURCE,
    # One change at a time around it, at convergence (issue 31).
    "low-resource-bf16": {**LOW_RESOURCE, "mixed_precision": "bf16"},
    "low-resource-vocab-2000": {**LOW_RESOURCE, "vocab_size": 2000},
    "low-resource-label-smoothing-0.2": {**LOW_RESOURCE, "label_smoothing": 0.2},
    # The model's size (the small preset: d 256, FFN 1,024, 4 heads, 2+2 layers):
    # deeper, a smaller FFN, fewer heads, narrower. Smaller models take cheaper steps.
    "low-resource-3-layers": _low_resource_model("num_encoder_layers=3;num_decoder_layers=3"),
    "low-resource-ffn-512": _low_resource_model("intermediate_dim=512"),
    "low-resource-heads-2": _low_resource_model("num_heads=2"),
    "low-resource-d-128": _low_resource_model("model_dim=128;intermediate_dim=512"),
    "low-resource-d-512": _low_resource_model("model_dim=512;intermediate_dim=2048"),
    "low-resource-4-layers": _low_resource_model("num_encoder_layers=4;num_decoder_layers=4"),
    "low-resource-dropout-0.2": _low_resource_model("dropout=0.2"),
    "low-resource-learning-rate-1e-3": {**LOW_RESOURCE, "learning_rate": 1e-3},
    # The two changes that each beat `low-resource` on both of their seeds
    # (+0.30 and +0.27 valid BLEU on average, neither established), together.
    "low-resource-label-smoothing-0.2-ffn-512": {
        **_low_resource_model("intermediate_dim=512"), "label_smoothing": 0.2},
    # The deeper model (the best single change on seed 0, +0.65) with the
    # regulariser that beat `low-resource` on both of its seeds.
    "low-resource-3-layers-label-smoothing-0.2": {
        **_low_resource_model("num_encoder_layers=3;num_decoder_layers=3"),
        "label_smoothing": 0.2},
    # The dictionary's 318,723 phrases (762,483 target words) beside the 15,942
    # sentences (132,775), each sentence 5 times an epoch: 47% of the target
    # words are sentences' (at 2,000 steps, all mixed in once, they crowded the
    # sentences out: "dictionary-all").
    "low-resource-dictionary-x5": {**LOW_RESOURCE, "data": "ding:all",
                                   "sentence_repeats": 5},
}

# What the runner sets itself: the budget, the seed, where the run lives, and
# the test split (kept out of training runs).
_RESERVED = {"max_steps", "epochs", "time_budget_minutes", "seed", "output_dir",
             "log_dir", "export_dir", "name", "no_export", "eval_limit"}
_TEST_FIELDS = ("test_src", "test_tgt")


def run_id(cell, seed, steps, cap_minutes=None):
    """The cell's run (and result file) name; a wall-time cap is part of it."""
    cap = "" if cap_minutes is None else f"-{cap_minutes:g}min"
    return f"{cell}-seed{seed}-{steps}steps{cap}"


def parse_assignment(text, flag):
    """`KEY=VALUE` -> `(key, value)`, the value read as JSON where it parses."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"{flag} wants KEY=VALUE, got {text!r}.")
    try:
        value = json.loads(value)
    except json.JSONDecodeError:
        pass
    return key.strip().replace("-", "_"), value


def resolve(overrides, steps):
    """The overrides with budget-dependent values computed for `steps`."""
    return {key: value(steps) if callable(value) else value
            for key, value in overrides.items()}


def describe(overrides):
    """`key=value; ...` of a cell's (resolved) overrides, or "(default)"."""
    if not overrides:
        return "(default)"
    return "; ".join(f"{key}={value}" for key, value in overrides.items())


def merge(base, overrides):
    """`base` then `overrides`; builder options are joined (`base;cell`)."""
    merged = {**base, **overrides}
    options = workflow.join_model_options(base.get("model_options"),
                                          overrides.get("model_options"))
    if options:
        merged["model_options"] = options
    return merged


def cell_config(cell, overrides, base, steps, seed, runs_dir, keep_test=False,
                cap_minutes=None):
    """The cell's `RunConfig`: `train_wmt.py`'s defaults for the preset, then the overrides.

    With `cap_minutes`, the cell also stops at that much training wall time,
    summed over the sessions of a resumed cell (the leaderboard's cap)."""
    merged = merge(base, overrides)
    fields = {field.name for field in dataclasses.fields(workflow.RunConfig)}
    unknown = sorted(set(merged) - fields)
    if unknown:
        raise SystemExit(f"unknown RunConfig field(s) {unknown} in cell {cell!r}.")
    reserved = sorted(set(merged) & _RESERVED)
    if reserved:
        raise SystemExit(f"{reserved} are set by the runner (--steps, --seed, run "
                         f"directories), not by cell {cell!r} or --base.")
    # The preset's learning-rate schedule, as the recipe applies it.
    config = train_wmt.parse_args(["--preset", str(merged.get("preset", "small")),
                                   "--max-steps", str(steps)])
    name = run_id(cell, seed, steps, cap_minutes)
    output_dir = pathlib.Path(runs_dir) / name
    budget = None if cap_minutes is None else remaining_cap_minutes(output_dir, cap_minutes)
    merged.setdefault("min_steps", table_min_steps(steps))
    config = dataclasses.replace(
        config, **merged, max_steps=steps, epochs=None, time_budget_minutes=budget,
        seed=seed, name=name, output_dir=str(output_dir), no_export=True, eval_limit=None)
    if not keep_test:
        config = dataclasses.replace(config, test_src=None, test_tgt=None)
    return config


# ---- one cell -------------------------------------------------------------------------------


def train_and_score_valid(config):
    """Trains the cell (resuming from its checkpoints) and scores the valid split.

    The phases of `workflow.training_run`, with the valid split where the run
    scores the test split; the test pairs are dropped as soon as the corpus is
    loaded. Returns the record (also the run directory's `results.json`, next
    to `model.keras`, which `--score-test` reuses).
    """
    workflow.check_run_options(config)
    workflow.check_checkpoints_to_average(config)
    config = workflow.use_mixed_precision(config)
    output_dir = workflow.open_run_directory(config)
    seed_everything(config.seed)
    started, load_at_start = time.monotonic(), common.load_average()

    corpus, tokenizer = workflow.prepare_data(config)
    corpus = dataclasses.replace(corpus, test=[])  # never translated here
    if not corpus.valid:
        raise SystemExit("the recipe table scores the valid split: the data has none "
                         "(--base valid_src=... --base valid_tgt=... with --data files).")
    strategy = select_strategy(config.strategy)
    model, optimizer = workflow.build(config, tokenizer, strategy)
    translator = workflow.run_translator(config, model, tokenizer)  # the cell's one
    stopper = workflow.early_stopping(config, model, tokenizer, corpus.valid, translator,
                                      keep_best=AVERAGED_BEST)
    monitors = ([stopper] if stopper else []) + workflow.default_monitors(
        config, model, tokenizer, corpus.valid, dev_translation=stopper is None,
        translator=translator)
    recorder = LearningCurve(monitors, output_dir, config.checkpoint_every)
    recorder.begin()  # the training data's preparation counts, as in the budget
    summary, training_data = workflow.train(config, model, optimizer, strategy, corpus,
                                            tokenizer, monitors=monitors + [recorder])
    totals = recorder.finish(summary.steps)
    load_after_training = common.load_average()
    record = {
        "steps": summary.steps,
        "max_steps": config.max_steps,
        "stop_reason": summary.stop_reason,
        "converged": summary.stop_reason == "converged",
        "resumed_from_step": summary.resumed_from_step,
        "train_seconds": round(totals["seconds"] if totals else summary.train_seconds, 1),
        "session_train_seconds": round(summary.train_seconds, 1),
        "train_target_tokens_per_second": workflow.training_rate(summary),
        "final_loss": summary.final_loss,
        "monitor_seconds": round(totals["monitor_seconds"], 1) if totals else None,
        "monitor_evaluations_postponed": totals["monitor_skipped"] if totals else None,
        "params": model.count_params(),
        "data": corpus.description,
        "pairs_dropped_too_long": training_data.dropped_too_long,
        "load_average_at_start": load_at_start,
        "load_average_after_training": load_after_training,
    }
    if record["monitor_seconds"] is not None and record["train_seconds"]:
        record["monitor_time_share"] = round(
            record["monitor_seconds"] / record["train_seconds"], 4)
    if stopper is not None:
        record.update(stopper.summary())
    record.update(workflow.final_weights(config, model, optimizer, stopper))
    scores = workflow.evaluate(config, translator, corpus.valid, split="valid")
    scores.pop("examples", None)
    record["valid"] = scores
    record["valid_search_grid"] = search_grid(
        translator, corpus.valid, **SEARCH_GRID,
        log=search_logger("valid"))
    if stopper is not None and not config.average_checkpoints:
        record.update(score_mean_of_best(stopper, model, translator, corpus.valid))
    record["learning_curve"] = read_curve(output_dir / "curve.jsonl")
    record["training_probes"] = training_probes(output_dir)
    record["load_average_at_end"] = common.load_average()
    record["wall_seconds"] = round(time.monotonic() - started, 1)
    return workflow.export(config, translator, record)


def search_logger(what):
    """A `search_grid` log that prints each search's BLEU and chrF (a run may rank by either)."""
    return lambda row: print(
        f"  {what}, beam {row['beam_size']} / length penalty {row['length_penalty']}: "
        f"BLEU {row['bleu']}, chrF {row['chrf']}", flush=True)


def score_mean_of_best(stopper, model, translator, valid):
    """Scores the mean of the `AVERAGED_BEST` best checkpoints on `SEARCH_GRID`, then
    puts the best one back (the cell's model stays the best checkpoint). A cell
    that kept fewer (resumed from a run that kept one) records why."""
    if len(stopper.kept) < AVERAGED_BEST:
        return {"valid_search_grid_mean_of_best": None,
                "mean_of_best_missing": f"{len(stopper.kept)} best checkpoint(s) kept, "
                                        f"{AVERAGED_BEST} needed"}
    steps = stopper.restore_best(model, AVERAGED_BEST)
    rows = search_grid(
        translator, valid, **SEARCH_GRID,
        log=search_logger(f"valid, mean of the {AVERAGED_BEST} best"))
    stopper.restore_best(model, 1)
    return {"valid_search_grid_mean_of_best": rows, "mean_of_best_steps": steps}


def budget_flags(args):
    """`--steps N`, and `--cap-minutes M` where the cells have one."""
    cap = "" if args.cap_minutes is None else f" --cap-minutes {args.cap_minutes:g}"
    return f"--steps {args.steps}{cap}"


def result_path(cell, args, suffix=".json"):
    """Where `cell`'s result for `args`' seed and budget goes (`.test.json`: its test score)."""
    name = run_id(cell, args.seed, args.steps, args.cap_minutes)
    return pathlib.Path(args.results_dir) / f"{name}{suffix}"


def finished_result(cell, args):
    """`cell`'s result for `args`' seed and budget, or None while it is to train:
    no result yet, or one stopped before early stopping's floor (resumed under it)."""
    path = result_path(cell, args)
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    return None if stopped_before_the_floor(result) else result


def same_budget(result, args):
    """Whether `result` was trained under `args`' step budget and wall-time cap."""
    return (result.get("steps_budget") == args.steps
            and result.get("cap_minutes") == args.cap_minutes)


def run_cell(cell, overrides, args, base, machine):
    """Runs one cell unless its result file exists; returns the result."""
    steps, seed = args.steps, args.seed
    path = result_path(cell, args)
    done = finished_result(cell, args)
    if done is not None:
        if done.get("base", {}) != args.base:
            raise SystemExit(
                f"{path} is {cell}'s result with --base {done.get('base', {})}, not "
                f"{args.base}: a table with another base needs its own --results-dir "
                "and --runs-dir.")
        print(f"{cell}: done already ({path}), skipped")
        return done
    if path.exists():
        print(f"{cell}: {path} stopped before early stopping's floor; resuming under it")
    resolved = resolve(overrides, steps)
    config = cell_config(cell, resolved, args.base, steps, seed, args.runs_dir,
                         cap_minutes=args.cap_minutes)
    run_results = config.paths[0] / "results.json"
    cap = "" if args.cap_minutes is None else f", cap {args.cap_minutes:g} min"
    print(f"\n=== {cell}: {describe(resolved)} ({steps} steps{cap}, seed {seed})", flush=True)
    record = None
    if run_results.exists():  # trained and scored, killed before the result file
        record = json.loads(run_results.read_text())
        if (record.get("valid") is None or stopped_before_the_floor(
                dict(record, steps_budget=steps))
                or record.get("max_steps", record.get("steps")) != steps):
            record = None
    if record is None:
        record = train_and_score_valid(config)
    result = {
        "cell": cell,
        "change": describe(resolved),
        "overrides": resolved,
        "base": args.base,
        "seed": seed,
        "steps_budget": steps,
        "cap_minutes": args.cap_minutes,
        "split": "valid",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "config": dataclasses.asdict(config),
        **record,
        "machine": machine,
    }
    write_atomically(path, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    valid = record["valid"]
    print(f"{cell}: valid BLEU {valid.get('bleu')} chrF {valid.get('chrf')} -> {path}")
    return result


# ---- an unfinished cell's curve so far --------------------------------------------------------


def record_partial(cell, args, machine):
    """Writes the valid curve and early-stopping state of `cell`'s unfinished run
    (`<results-dir>/partial/<cell>-seed<seed>-curve-<date>.json`); returns the path."""
    if finished_result(cell, args) is not None:
        raise SystemExit(f"{cell} (seed {args.seed}, {budget_flags(args)}) has finished: its "
                         f"result is {result_path(cell, args)}.")
    try:
        so_far = run_so_far(pathlib.Path(args.runs_dir)
                            / run_id(cell, args.seed, args.steps, args.cap_minutes))
    except ValueError as error:
        raise SystemExit(f"{cell}: {error} (--runs-dir)") from None
    curve, best = so_far["curve"], so_far["best_so_far"]
    record = {
        "cell": cell,
        "seed": args.seed,
        "status": (f"not converged at step {curve[-1]['step']}: unfinished; its checkpoints "
                   "stay on the machine that trains it (resumable there with the command)"),
        "command": (f"recipes/recipe_experiments.py --cells {cell} --seed {args.seed} "
                    f"{budget_flags(args)}"),
        "metric": "greedy valid BLEU / chrF, all valid sentences (early stopping's evaluations)",
        "note": args.note,
        **so_far,
        "machine": machine,
    }
    partial_dir = pathlib.Path(args.results_dir) / "partial"
    path = write_run_so_far(partial_dir, f"{cell}-seed{args.seed}", record)
    print(f"{cell}: step {curve[-1]['step']}, best at {best['step']} by {best['metric']} "
          f"(greedy valid BLEU {best['bleu']}, chrF {best['chrf']}) -> {path}")
    return path


# ---- the test split, once ---------------------------------------------------------------------


# The weights each search grid of a cell's result was scored with.
GRIDS = {"best": "valid_search_grid", "mean_of_best": "valid_search_grid_mean_of_best"}


def chosen_search(results):
    """The weights (the best checkpoint, or the mean of the `AVERAGED_BEST` best) and
    the search (beam, length penalty) that the valid split chooses for a cell.

    `results`: the cell's valid results, one per seed. A setting is a candidate
    only if every seed scored it (cells run before they kept their best 4 have no
    mean), so each candidate's means are over the same seeds; the highest mean of
    the cells' `valid_metric` (BLEU, or chrF for the RNN families) wins, the other
    metric breaking ties, then the earlier in `GRIDS` and grid order (the cheaper).
    Returns the winner with every candidate's means."""
    if not results:
        raise ValueError("no valid results to choose a search from.")
    metric = valid_metric_of(results)
    per_seed = []
    for result in results:
        per_seed.append({(weights, row["beam_size"], row["length_penalty"]): row
                         for weights, key in GRIDS.items()
                         for row in result.get(key) or []})
    settings = [setting for setting in per_seed[0]
                if all(setting in rows for rows in per_seed[1:])]
    if not settings:
        raise ValueError("the results share no scored search (cells scored before "
                         "the search grid have none).")
    means = []
    for weights, beam, penalty in settings:
        rows = [rows[weights, beam, penalty] for rows in per_seed]
        means.append({"weights": weights, "beam_size": beam, "length_penalty": penalty,
                      **{metric: round(sum(row[metric] for row in rows) / len(rows), 3)
                         for metric in ("bleu", "chrf")}})
    winner = best_setting(means, metric)
    return {**winner, "metric": metric, "seeds": sorted(result["seed"] for result in results),
            "candidates": means}


def valid_metric_of(results):
    """The metric that `results` (one cell's, or one grid's) rank by on the valid
    split: their runs' `valid_metric` (results before it was recorded: BLEU)."""
    metrics = {(result.get("config") or {}).get("valid_metric", "bleu") for result in results}
    if len(metrics) > 1:
        raise ValueError(f"the results rank by different valid metrics {sorted(metrics)}: "
                         "compare a family's cells under one.")
    return metrics.pop()


def score_test(cell, args):
    """Scores the test split once with the cell's trained model (its run directory),
    with the weights and search its valid results chose (`chosen_search`, over
    every seed of the cell at this budget)."""
    cells = all_cells(args)
    if cell not in cells:
        raise SystemExit(f"unknown cell {cell!r}; cells: {', '.join(cells)}.")
    path = result_path(cell, args, ".test.json")
    if path.exists():
        raise SystemExit(f"the test split was scored for {cell} already: {path}. It is "
                         "scored once; delete the file to score it again.")
    if not result_path(cell, args).exists():
        raise SystemExit(f"{cell} has no valid result for seed {args.seed} and "
                         f"{budget_flags(args)}: run the cell first.")
    config = cell_config(cell, resolve(cells[cell], args.steps), args.base, args.steps,
                         args.seed, args.runs_dir, keep_test=True,
                         cap_minutes=args.cap_minutes)
    output_dir = config.paths[0]
    model_path = output_dir / "model.keras"
    if not model_path.exists():
        raise SystemExit(f"no trained model at {model_path}.")
    seeds = [result for result in load_results(args.results_dir)
             if result["cell"] == cell and same_budget(result, args)
             and result.get("base", {}) == args.base]
    choice = chosen_search(seeds)
    config = dataclasses.replace(config, beam_size=choice["beam_size"],
                                 length_penalty=choice["length_penalty"])
    corpus = workflow.load_corpus(config)
    if not corpus.test:
        raise SystemExit("the data has no test split (--base test_src=... test_tgt=...).")
    from keras_attn_zoo.data.vocabulary import load_tokenizer

    tokenizer = load_tokenizer(output_dir / "vocab.model")
    model = keras.saving.load_model(model_path)
    averaged = []
    if choice["weights"] == "mean_of_best":
        averaged = next(result for result in seeds
                        if result["seed"] == args.seed)["mean_of_best_steps"]
        average_checkpoints(model, [output_dir / "best" / f"step-{step}" for step in averaged])
    print(f"{cell}: the valid split chose the {choice['weights'].replace('_', ' ')} "
          f"checkpoint(s), beam {choice['beam_size']}, length penalty "
          f"{choice['length_penalty']} (mean valid {choice['metric']} "
          f"{choice[choice['metric']]} over seeds "
          f"{choice['seeds']})")
    scores = workflow.evaluate(config, workflow.run_translator(config, model, tokenizer),
                               corpus.test, split="test")
    result = {"cell": cell, "seed": args.seed, "steps_budget": args.steps,
              "cap_minutes": args.cap_minutes, "split": "test",
              "model": str(model_path), "averaged_steps": averaged,
              "chosen_on_valid": choice,
              "date": datetime.datetime.now().isoformat(timespec="seconds"), **scores}
    # Committed beside the cells: the examples keep their translations, not Ding's text.
    write_atomically(path, json.dumps(common.without_corpus_text(result), indent=2,
                                      ensure_ascii=False) + "\n")
    print(f"{cell}: TEST BLEU {scores['bleu']} chrF {scores['chrf']} -> {path}")
    return result


# ---- the table and the plot -------------------------------------------------------------------


def load_results(results_dir):
    """Every cell result (not the test scores) in `results_dir`, in CELLS order."""
    results = []
    for path in sorted(pathlib.Path(results_dir).glob("*.json")):
        if path.name.endswith(".test.json"):
            continue
        result = json.loads(path.read_text())
        if "cell" in result and "valid" in result:
            results.append(result)
    order = list(CELLS)
    results.sort(key=lambda r: (order.index(r["cell"]) if r["cell"] in order else len(order),
                                r["cell"], r.get("steps_budget", 0), r.get("seed", 0)))
    return results


def _number(value, spec):
    return "-" if value is None else format(value, spec)


def _best_search(result, key="valid_search_grid"):
    """`"8 / 1.0: 7.36"`: the cell's best search of `SEARCH_GRID` on dev (`key`: of the
    best checkpoint, or of the mean of the best); `-` without one (the cells scored
    before it)."""
    rows = result.get(key)
    if not rows:
        return "-"
    metric = valid_metric_of([result])
    best = best_setting(rows, metric)
    shown = "" if metric == "bleu" else f" {metric}"
    return f"{best['beam_size']} / {best['length_penalty']}:{shown} {best[metric]:.2f}"


def table_markdown(results):
    """The recipe table: one row per result, the BLEU delta against the default
    of the same seed and budget (steps and wall-time cap)."""
    def budget(r):
        return r.get("steps_budget"), r.get("cap_minutes")

    defaults = {(r.get("seed"), budget(r)): r["valid"].get("bleu")
                for r in results if r["cell"] == "default"}
    lines = ["| cell | change | steps | best step | stopped | train min | train tok/s "
             "| matmul GFLOP/s | dev BLEU | dev chrF | Δ BLEU vs default "
             "| best search on dev (beam / penalty: BLEU, or chrF where the cell ranks by it) "
             f"| mean of the {AVERAGED_BEST} best: best search on dev |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        bleu = r["valid"].get("bleu")
        reference = defaults.get((r.get("seed"), budget(r)))
        delta = None if bleu is None or reference is None else bleu - reference
        seed = "" if r.get("seed", 0) == 0 else f" (seed {r['seed']})"
        change = r.get("change", "").replace("|", "\\|")
        minutes = None if r.get("train_seconds") is None else r["train_seconds"] / 60
        lines.append(
            f"| {r['cell']}{seed} | {change} | {r.get('steps')} | "
            f"{_number(r.get('best_step'), 'd')} | {_stopped(r)} | {_number(minutes, '.1f')} | "
            f"{_number(r.get('train_target_tokens_per_second'), '.0f')} | "
            f"{_number((r.get('machine') or {}).get('matmul_gflops'), '.1f')} | "
            f"{_number(bleu, '.2f')} | {_number(r['valid'].get('chrf'), '.2f')} | "
            f"{_number(delta, '+.2f')} | {_best_search(r)} | "
            f"{_best_search(r, 'valid_search_grid_mean_of_best')} |")
    # The same recipe under other seeds: how large a Δ seed noise alone makes.
    for steps, cap in sorted({key for _, key in defaults}, key=str):
        seeds = sorted((seed, bleu) for (seed, key), bleu in defaults.items()
                       if key == (steps, cap) and bleu is not None)
        if len(seeds) > 1:
            values = [bleu for _, bleu in seeds]
            at = f"{steps} steps" + ("" if cap is None else f" (cap {cap:g} min)")
            lines += ["", f"Seed noise at {at}: the default's dev BLEU is "
                      + ", ".join(f"{bleu:.2f} (seed {seed})" for seed, bleu in seeds)
                      + f", a spread of {max(values) - min(values):.2f}."]
    lines += converged_comparison(results)
    # The one-change cells around `low-resource` against it, their own base.
    around = [cell for cell in dict.fromkeys(r["cell"] for r in results)
              if cell.startswith("low-resource-")]
    lines += converged_comparison(results, base="low-resource", cells=around)
    signatures = sorted({r["valid"].get("sacrebleu_signature") for r in results} - {None})
    searches = sorted({(r["valid"].get("beam_size"), r["valid"].get("length_penalty"))
                       for r in results} - {(None, None)})
    if signatures:
        lines += ["", "Dev: the whole valid split"
                  + "".join(f", beam {beam}, length penalty {penalty}"
                            for beam, penalty in searches)
                  + "; " + "; ".join(f"`{s}`" for s in signatures) + "."]
    return "\n".join(lines) + "\n"


def converged_comparison(results, base="default", cells=None):
    """Lines comparing each of `cells` (default: every cell but `base`) with the
    cell `base` at convergence, seed by seed.

    A cell's converged result for seed s pairs with the base's converged
    result for seed s (whatever their caps: both stopped by early stopping).
    Per cell: the per-seed differences in valid BLEU and chrF, their mean, and
    a one-sided paired t-test over the seeds that the cell is better (training
    variance; `evaluation.significance.seed_t_test`), Holm-adjusted over the
    cells with two or more seeds. No lines when nothing pairs.
    """
    from keras_attn_zoo.evaluation.significance import holm_bonferroni
    from keras_attn_zoo.evaluation.significance import seed_t_test

    def converged_by_seed(cell):
        chosen = {}
        for r in results:  # the largest cap per seed, as a rerun with a higher cap resumes
            if r["cell"] == cell and r.get("stop_reason") == "converged" and (
                    not stopped_before_the_floor(r)) and (
                    r.get("seed") not in chosen
                    or r.get("steps_budget", 0) > chosen[r.get("seed")].get("steps_budget", 0)):
                chosen[r.get("seed")] = r
        return chosen

    defaults = converged_by_seed(base)
    if cells is None:
        cells = [cell for cell in dict.fromkeys(r["cell"] for r in results) if cell != base]
    rows = []
    for cell in cells:
        pairs = sorted((seed, r, defaults[seed]) for seed, r in converged_by_seed(cell).items()
                       if seed in defaults)
        if not pairs:
            continue
        bleu = [r["valid"]["bleu"] - d["valid"]["bleu"] for _, r, d in pairs]
        chrf = [r["valid"]["chrf"] - d["valid"]["chrf"] for _, r, d in pairs]
        rows.append((cell, [seed for seed, _, _ in pairs], bleu, chrf,
                     seed_t_test(bleu)[0], seed_t_test(chrf)[0]))
    if not rows:
        return []
    tested = [index for index, row in enumerate(rows) if row[4] is not None]
    adjusted = dict(zip(tested, holm_bonferroni([rows[i][4] for i in tested])))
    name = "the default" if base == "default" else f"`{base}`"
    lines = ["", f"At convergence against {name}, seed by seed (valid split, each "
             "run's best checkpoint; p: one-sided paired t-test over the seeds that the "
             "cell is better, Holm-adjusted over the cells with two or more seeds):", "",
             "| cell | seeds | Δ BLEU per seed | mean Δ BLEU | p (Holm) | Δ chrF per seed "
             "| mean Δ chrF | p chrF |",
             "|---|---|---|---:|---:|---|---:|---:|"]
    for index, (cell, seeds, bleu, chrf, p_bleu, p_chrf) in enumerate(rows):
        p_text = "-" if p_bleu is None else f"{p_bleu:.3f} ({adjusted[index]:.3f})"
        lines.append(
            f"| {cell} | {', '.join(str(seed) for seed in seeds)} | "
            f"{', '.join(f'{d:+.2f}' for d in bleu)} | {sum(bleu) / len(bleu):+.2f} | "
            f"{p_text} | {', '.join(f'{d:+.2f}' for d in chrf)} | "
            f"{sum(chrf) / len(chrf):+.2f} | {_number(p_chrf, '.3f')} |")
    return lines


def stopped_before_the_floor(result):
    """Whether `result` converged before the floor its cap now gives (a run from
    before early stopping had one): it was stopped while it may still have been
    learning, so it neither ranks nor pairs until it is resumed under the floor."""
    floor = table_min_steps(result.get("steps_budget") or 0)
    return (result.get("stop_reason") == "converged"
            and (result.get("early_stopping") or {}).get("min_steps") is None
            and result.get("steps") is not None and result["steps"] < floor)


def _stopped(result):
    """Why a cell's training ended, in the table: converged, or not (at the cap)."""
    reason = result.get("stop_reason")
    if reason is None:
        return "fixed steps"  # the tables before early stopping
    if stopped_before_the_floor(result):
        return "stopped before the floor: does not rank"
    return "converged" if reason == "converged" else f"not converged ({reason})"


def write_table(results_dir):
    text = table_markdown(load_results(results_dir))
    write_atomically(pathlib.Path(results_dir) / "TABLE.md", text)
    print(text)
    return text


def plot_curves(results):
    """The learning curves of the cells judged at convergence, and their legend groups.

    Returns `(curves, groups)` for `plot_learning_curves`: one curve per run of
    a cell trained under early stopping (greedy BLEU on all 1,200 valid
    sentences, then beam 4 on them at its end), its seeds one colour and one
    legend entry. The 2,000-step cells from before early stopping scored the
    first 100 valid sentences only, a different scale, and are left out.
    """
    converged = [r for r in results if r.get("stop_reason") is not None]
    largest_cap = {}
    for r in converged:
        largest_cap[r["cell"]] = max(largest_cap.get(r["cell"], 0), r.get("steps_budget", 0))
    curves, groups = {}, {}
    for r in converged:
        group = r["cell"]
        if r.get("steps_budget", 0) < largest_cap[r["cell"]]:  # an earlier, shorter cap
            group += f" (cap {r.get('steps_budget')})"
        label = f"{group} seed {r.get('seed', 0)}"
        points = list(r.get("learning_curve") or [])
        minutes = None if r.get("train_seconds") is None else r["train_seconds"] / 60
        points.append({"step": r.get("steps"), "minutes": minutes,
                       "bleu": r["valid"].get("bleu"), "chrf": r["valid"].get("chrf")})
        curves[label], groups[label] = points, group
    return curves, groups


def write_plot(results_dir, path=None):
    from keras_attn_zoo.evaluation.plots import plot_learning_curves

    curves, groups = plot_curves(load_results(results_dir))
    path = pathlib.Path(path or pathlib.Path(results_dir) / "learning_curves.png")
    plot_learning_curves(curves, path, groups=groups,
                         title="valid BLEU during training, cells trained to convergence "
                               "(greedy, all 1,200 sentences; last point: beam 4); "
                               "one colour per cell, its seeds alike")
    print(f"plot: {path}")
    return path


# ---- the command line ------------------------------------------------------------------------


def all_cells(args):
    cells = dict(CELLS)
    for text in args.extra_cell:
        name, sep, value = text.partition("=")
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
        if not sep or not name.strip() or not isinstance(value, dict):
            raise SystemExit(f"--extra-cell wants NAME=JSON, a JSON object of RunConfig "
                             f"overrides, got {text!r}.")
        cells[name.strip()] = value
    return cells


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", help="comma-separated cells to run (default: all, in order)")
    p.add_argument("--extra-cell", action="append", default=[], metavar="NAME=JSON",
                   help="one more cell, e.g. 'combined={\"vocab_size\": 4000, "
                        "\"word_dropout\": 0.1}' (repeatable)")
    p.add_argument("--base", action="append", default=[], metavar="KEY=VALUE",
                   help="a RunConfig override for every cell, e.g. preset=tiny or "
                        "data=files (repeatable; VALUE read as JSON where it parses)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"the most training steps of a cell; it stops earlier when it "
                        f"converges (default {DEFAULT_STEPS})")
    p.add_argument("--cap-minutes", type=float,
                   help="also stop a cell at this much training wall time, summed over "
                        "the sessions of a resumed cell (the leaderboard's --cap-minutes: "
                        "a family's recipe for the table is chosen under the table's cap); "
                        "part of the cell's run and result names")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", default=str(RESULTS_DIR))
    p.add_argument("--runs-dir", default=str(RUNS_DIR))
    p.add_argument("--no-matmul-rate", action="store_true",
                   help="do not measure the machine's matmul rate (about a second)")
    p.add_argument("--list", action="store_true", help="print the cells and exit")
    p.add_argument("--table", action="store_true",
                   help="write TABLE.md from the result files and print it (no training)")
    p.add_argument("--plot", action="store_true",
                   help="write learning_curves.png from the result files (no training)")
    p.add_argument("--score-test", metavar="CELL",
                   help="score the test split once with CELL's trained model, with "
                        "the weights and search its valid results chose")
    p.add_argument("--partial", action="store_true",
                   help="record the valid curve so far of the --cells' unfinished runs "
                        "in <results-dir>/partial/ (no training)")
    p.add_argument("--note", default="",
                   help="with --partial: how the run trained (threads, pauses), kept in "
                        "the record")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.cap_minutes is not None and args.cap_minutes <= 0:
        p.error("--cap-minutes must be > 0")
    args.base = dict(parse_assignment(text, "--base") for text in args.base)
    return args


def measured_machine(with_matmul_rate):
    """`common.machine_info()`, with its float32 matmul rate when asked (about a second)."""
    machine = common.machine_info()
    if with_matmul_rate:
        rate = common.matmul_rate(size=1024, repeats=3, chain=4)
        machine["matmul_gflops"] = round(rate["gflops"], 1)
    return machine


def main(argv=None):
    args = parse_args(argv)
    if args.table or args.plot:
        if args.table:
            write_table(args.results_dir)
        if args.plot:
            write_plot(args.results_dir)
        return 0
    if args.score_test:
        score_test(args.score_test, args)
        return 0
    cells = all_cells(args)
    names = list(cells) if not args.cells else [c.strip() for c in args.cells.split(",")
                                                 if c.strip()]
    unknown = [name for name in names if name not in cells]
    if unknown:
        raise SystemExit(f"unknown cell(s) {unknown}; cells: {', '.join(cells)}.")
    if args.list:
        for name in names:
            print(f"{name}: {describe(resolve(cells[name], args.steps))}")
        return 0
    if args.partial:
        if not args.cells:
            raise SystemExit("--partial wants --cells: the unfinished cells to record.")
        machine = dict(measured_machine(not args.no_matmul_rate),
                       load_average=common.load_average())
        for name in names:
            record_partial(name, args, machine)
        return 0
    pending = [name for name in names if finished_result(name, args) is None]
    machine = measured_machine(pending and not args.no_matmul_rate)
    for name in names:
        run_cell(name, cells[name], args, args.base, machine)
    write_table(args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

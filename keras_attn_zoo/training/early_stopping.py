"""Early stopping on the valid split, with the best checkpoints kept for export.

A small model on 16k sentence pairs stops learning long before a CPU budget
runs out, and then gets worse: the `small` Transformer's dev BLEU peaked at
step 5,000 and fell by a third by step 6,000 (issue 31). So a run evaluates
the valid split every `every` steps, keeps the weights of its best
evaluations, stops once `patience` evaluations in a row have not beaten the
best by `min_improvement`, and evaluates and exports the best weights, not
the last. A floor, `min_steps`, keeps the patience from ending a run before
that step: a barely trained model's first scores move with its output length
(the eager translator's valid chrF 6.93 at step 500, then 6.61 ... 5.76 while
its source-use probe kept improving), and without the floor four such
evaluations stop a run that is still learning. The evaluations before the
floor still count, for the best and for the counter; the floor only delays
the stop, so a run that stops after the floor stops where it would without
one. Keras' `EarlyStopping(start_from_epoch=...)` also waits, but ignores the
early evaluations; here the best checkpoint may come from before the floor.
OpenNMT-tf's `early_stopping` (metric, min_improvement, steps) and Keras'
`EarlyStopping(restore_best_weights=True)` are the models.

The evaluation translates the valid pairs with the exported search (greedy by
default, `beam_size=1`) and scores them with sacreBLEU: BLEU or chrF is the
named metric. It runs at fixed steps whatever the machine's speed, so two runs
of the same command stop at the same step.

State that survives a kill (`<run>/early_stopping.json`, written atomically
after the best checkpoint it names): every evaluation `(step, bleu, chrf)` and
the best checkpoints `<run>/best/step-<N>`. A resumed run keeps the
evaluations up to the step it resumed from, deletes the best checkpoints
written after it (that stretch is trained again) and so has the best score and
the patience counter it had at that step; a run that had converged stops
before its first step. A run resumed under the other metric ranks the recorded
evaluations by it (each holds both) when the checkpoints that ranking keeps
are in `best/`, and records the change (`metric_changes`); else it is refused.

With the optimizer's weight EMA (`use_ema`) the evaluation and the best
checkpoints are of the averaged weights (as Marian validates its smoothed
model); the raw weights are put back after each evaluation. With `keep_best=k`
the `k` best evaluations' checkpoints are kept (for averaging them).
"""

import json
import pathlib
import shutil

import numpy as np
import tensorflow as tf

from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.evaluation.scores import VALID_METRICS as METRICS
from keras_attn_zoo.evaluation.scores import check_valid_metric
from keras_attn_zoo.training.callbacks import DevTranslationMonitor
from keras_attn_zoo.files import write_atomically
from keras_attn_zoo.optimizers import plateau_schedule

STATE_FILE = "early_stopping.json"
BEST_DIRECTORY = "best"
# The tables' floor (the leaderboard's converge protocol, the recipe grids): a
# quarter of the step cap, the same for every model; 6,000 of the 24,000-step
# cap. Set after two eager grid cells were stopped at 2,500 and 3,000 while
# learning; every cell that had converged by then stopped at 6,500 or later,
# so the floor changes none of them.
TABLE_FLOOR_SHARE = 0.25


def table_min_steps(step_cap):
    """The `min_steps` of a table cell capped at `step_cap` steps."""
    return int(step_cap * TABLE_FLOOR_SHARE)


def evaluations_since_best(evaluations, metric, min_improvement=0.0):
    """The patience counter: evaluations in a row, to the last, that did not
    improve on the best before them by `min_improvement`."""
    best, count = None, 0
    for entry in evaluations:
        if best is None or entry[metric] > best + min_improvement:
            best, count = entry[metric], 0
        else:
            count += 1
    return count


def evaluations_without_gain(evaluations, metric, min_improvement=0.0):
    """All the evaluations, not only the last in a row, that did not improve on the
    best before them by `min_improvement`: the halvings of a plateau schedule."""
    best, count = None, 0
    for entry in evaluations:
        if best is None or entry[metric] > best + min_improvement:
            best = entry[metric]
        else:
            count += 1
    return count


def has_converged(evaluations, metric, patience, min_improvement=0.0, min_steps=0):
    """Whether a run that made `evaluations` stops after the last: `patience`
    evaluations in a row without an improvement, at step `min_steps` or later."""
    return (bool(patience) and bool(evaluations) and evaluations[-1]["step"] >= min_steps
            and evaluations_since_best(evaluations, metric, min_improvement) >= patience)


def truncate_at_convergence(evaluations, metric, patience, min_improvement=0.0,
                            min_steps=0):
    """The evaluations a run stopping by this rule would have made.

    Early stopping does not change the steps before the stop, so a run
    trained to a cap and truncated here equals the early-stopped run
    (`recipes/recipe_screen.py`). Returns `(evaluations, converged)`.
    """
    for end in range(1, len(evaluations) + 1):
        if has_converged(evaluations[:end], metric, patience, min_improvement, min_steps):
            return list(evaluations[:end]), True
    return list(evaluations), False


class EarlyStopping(DevTranslationMonitor):
    """Evaluates the valid split every `every` steps; keeps the best; stops on a plateau.

    Args:
        model: the model being trained.
        tokenizer: its vocabulary.
        pairs: the valid `(source, reference)` pairs.
        run_dir: the run directory (`early_stopping.json`, `best/`).
        every: steps between evaluations.
        metric: "bleu" or "chrf" (sacreBLEU's, on the evaluated pairs).
        patience: evaluations in a row without an improvement before training
            stops; 0 never stops (the best weights are still kept).
        min_improvement: how much the metric must beat the best by to count.
        min_steps: no stop before this step (the floor; 0: none).
        max_sentences: valid pairs evaluated (the first ones that fit the
            model); None: all.
        beam_size: the search's beam (1: greedy).
        length_penalty: the search's length penalty.
        keep_best: how many of the best evaluations' checkpoints to keep.
        translator: the run's `Translator` of `model` (searching with this
            `beam_size`); None: one is built.

    After training: `best_step`, `best_score`, `best_checkpoints()` (best
    first), `evaluations` (every session's) and `summary()` for the results.
    """

    name = "EarlyStopping"

    def __init__(self, model, tokenizer, pairs, run_dir, every=500, metric="bleu",
                 patience=4, min_improvement=0.0, max_sentences=None, beam_size=1,
                 length_penalty=DEFAULT_LENGTH_PENALTY, keep_best=1, translator=None,
                 min_steps=0):
        check_valid_metric(metric)
        if every < 1:
            raise ValueError(f"every must be >= 1 step, got {every}.")
        if patience < 0 or keep_best < 1 or min_steps < 0:
            raise ValueError(f"patience and min_steps must be >= 0 and keep_best >= 1, "
                             f"got {patience}, {min_steps} and {keep_best}.")
        pairs = list(pairs)
        if not pairs:
            raise ValueError("Early stopping needs valid pairs; the run has none.")
        super().__init__(model, tokenizer, pairs, every=every,
                         max_sentences=max_sentences or len(pairs), beam_size=beam_size,
                         length_penalty=length_penalty, raise_errors=True,
                         max_time_share=None, translator=translator)
        self.run_dir = pathlib.Path(run_dir)
        self.metric = metric
        self.patience = patience
        self.min_improvement = min_improvement
        self.min_steps = min_steps
        self.keep_best = keep_best
        self.evaluations = []  # {"step", "bleu", "chrf"}, every session's
        self.kept = []  # steps whose checkpoint is in best/, best first
        self.metric_changes = []  # {"step", "from", "to"}: a resumed run re-ranked
        self._checkpoint = tf.train.Checkpoint(model=model)

    # ---- state ---------------------------------------------------------------------

    @property
    def state_path(self):
        return self.run_dir / STATE_FILE

    @property
    def best_directory(self):
        return self.run_dir / BEST_DIRECTORY

    def _prefix(self, step):
        return str(self.best_directory / f"step-{step}")

    def _ranked(self):
        """The evaluations, best first (the earlier step first on a tie)."""
        return sorted(self.evaluations, key=lambda e: (-e[self.metric], e["step"]))

    @property
    def best(self):
        """The best evaluation so far (None before the first)."""
        ranked = self._ranked()
        return ranked[0] if ranked else None

    @property
    def best_step(self):
        return self.best["step"] if self.best else None

    @property
    def best_score(self):
        return self.best[self.metric] if self.best else None

    @property
    def evaluations_since_best(self):
        """Evaluations in a row, to the last, that did not improve on the best
        before them by `min_improvement` (the patience counter)."""
        return evaluations_since_best(self.evaluations, self.metric, self.min_improvement)

    @property
    def converged(self):
        return has_converged(self.evaluations, self.metric, self.patience,
                             self.min_improvement, self.min_steps)

    def best_checkpoints(self):
        """Prefixes of the kept best checkpoints, best first."""
        return [self._prefix(step) for step in self.kept]

    def _save_state(self):
        state = {"metric": self.metric, "patience": self.patience,
                 "min_improvement": self.min_improvement, "min_steps": self.min_steps,
                 "every": self.every, "evaluations": self.evaluations, "kept": self.kept}
        if self.metric_changes:
            state["metric_changes"] = self.metric_changes
        write_atomically(self.state_path, json.dumps(state, indent=1) + "\n")

    def _remove_unkept(self):
        """Deletes the files in `best/` of checkpoints the state does not keep."""
        kept = {f"step-{step}" for step in self.kept}
        for path in self.best_directory.glob("step-*"):
            if path.name.split(".")[0] in kept:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    def on_train_start(self, trainer, step):
        """Takes the state of the step the run resumed from; stops a converged run."""
        if self.state_path.exists():
            state = json.loads(self.state_path.read_text())
            self.evaluations = [e for e in state["evaluations"] if e["step"] <= step]
            self.kept = [s for s in state["kept"] if s <= step]
            self.metric_changes = [c for c in state.get("metric_changes", [])
                                   if c["step"] <= step]
            if state.get("metric", self.metric) != self.metric:
                self._rerank(state["metric"], step)
                if getattr(trainer, "is_chief", True):  # before best/ loses the others
                    self._save_state()
        self._remove_unkept()  # among them those written after `step`: trained again
        self._follow_plateau(trainer)
        if self.converged:
            trainer.request_stop("converged")

    def _rerank(self, previous, step):
        """Ranks the recorded evaluations by this run's metric instead of `previous`.

        Every evaluation holds both metrics, so the ranking is the one this
        metric would have made, and so are the patience counter and the
        plateau's halvings. The best checkpoints it keeps must be among those
        kept under `previous` (their weights are in `best/`); else refused,
        naming the steps whose weights are gone."""
        wanted = [e["step"] for e in self._ranked()[:self.keep_best]]
        missing = [s for s in wanted if s not in self.kept]
        if missing:
            raise ValueError(
                f"{self.state_path} ranks checkpoints by {previous!r}; ranked by "
                f"{self.metric!r} its best evaluations are at steps {wanted}, and the "
                f"weights of steps {missing} were not kept: start a new run directory "
                f"to rank by {self.metric!r}.")
        self.kept = wanted
        self.metric_changes.append({"step": step, "from": previous, "to": self.metric})
        print(f"early stopping: the {len(self.evaluations)} evaluations to step {step} "
              f"ranked by {self.metric} instead of {previous}: best step "
              f"{self.best_step}, {self.evaluations_since_best} evaluations since",
              flush=True)

    def _follow_plateau(self, trainer):
        """Sets a plateau schedule's halvings (`optimizers.PlateauHalvingSchedule`)
        from the evaluations, the resumed session's included."""
        schedule = plateau_schedule(trainer.optimizer)
        if schedule is not None:
            schedule.set_halvings(evaluations_without_gain(
                self.evaluations, self.metric, self.min_improvement))

    # ---- the evaluation ------------------------------------------------------------

    def _write(self, trainer, step, logs):
        with evaluated_weights(trainer.optimizer, self.model):
            super()._write(trainer, step, logs)
            _, bleu, chrf = self.history[-1]
            self.evaluations.append({"step": step, "bleu": bleu, "chrf": chrf})
            ranked = [e["step"] for e in self._ranked()]
            if step in ranked[:self.keep_best]:
                # The checkpoint first, then the state that names it.
                self._checkpoint.write(self._prefix(step))
                self.kept = [s for s in ranked[:self.keep_best]
                             if s in self.kept or s == step]
        self._save_state()
        self._remove_unkept()
        self._follow_plateau(trainer)
        logs["valid_" + self.metric] = self.evaluations[-1][self.metric]
        logs["valid_best_step"] = self.best_step
        with trainer.writer.as_default(step=step):
            tf.summary.scalar(f"valid/best_{self.metric}", self.best_score)
            tf.summary.scalar("valid/evaluations_since_best", self.evaluations_since_best)
        if self.converged:
            trainer.request_stop("converged")

    # ---- after training ------------------------------------------------------------

    def restore_best(self, model=None, count=1):
        """Puts the best checkpoint in `model` (default: the monitored model), or the
        mean of the `count` best; returns the steps used (empty: none was kept)."""
        from keras_attn_zoo.training.averaging import average_checkpoints

        model = model or self.model
        steps = self.kept[:count]
        if len(steps) < count:
            raise ValueError(
                f"{count} best checkpoints were asked for, the run kept {len(steps)} "
                f"(keep_best={self.keep_best}, {len(self.evaluations)} evaluations).")
        if steps:
            average_checkpoints(model, [self._prefix(step) for step in steps])
        return steps

    def summary(self):
        """The entries `results.json` keeps."""
        evaluated = self.timings
        return {
            "early_stopping": {
                "metric": self.metric, "every": self.every, "patience": self.patience,
                "min_improvement": self.min_improvement, "min_steps": self.min_steps,
                "beam_size": self.beam_size,
                "valid_pairs": len(self.pairs), "evaluations": len(self.evaluations),
                "evaluations_since_best": self.evaluations_since_best,
                "session_evaluation_seconds": round(
                    sum(entry["seconds"] for entry in evaluated), 1),
                **({"metric_changes": self.metric_changes} if self.metric_changes else {}),
            },
            "best_step": self.best_step,
            f"best_valid_{self.metric}": self.best_score,
            "valid_curve": self.evaluations,
        }


class evaluated_weights:
    """Within it, `model` holds the weights to evaluate: the optimizer's moving
    average when it keeps one (`use_ema`), else the trained weights as they are.
    The trained weights are put back on exit."""

    def __init__(self, optimizer, model):
        inner = getattr(optimizer, "inner_optimizer", optimizer)  # loss scaling
        self.optimizer = inner if getattr(inner, "use_ema", False) else None
        self.model = model
        self.saved = None

    def __enter__(self):
        if self.optimizer is not None:
            variables = self.model.trainable_variables
            self.saved = [np.array(v.numpy()) for v in variables]
            self.optimizer.finalize_variable_values(variables)
            for variable in variables:  # constrained weights (κ/α): projected once more
                if variable.constraint is not None:
                    variable.assign(variable.constraint(variable))
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            for variable, value in zip(self.model.trainable_variables, self.saved):
                variable.assign(value)
        return False


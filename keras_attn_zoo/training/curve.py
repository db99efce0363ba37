"""The dev learning curve of a run, kept across restarts (`curve.jsonl`).

`LearningCurve` is a `Trainer` callback placed after the monitors: it appends
the dev monitor's new points, each with the training minutes so far, to
`<run>/curve.jsonl`. A restarted run resumes at its last checkpoint: the
recorder keeps the training seconds of every checkpoint step
(`progress.json`), starts its clock from those of the step the run resumed
from and drops the points after it (they are trained again).
"""

import json
import pathlib
import time

import tensorflow as tf

from keras_attn_zoo.files import read_json_lines
from keras_attn_zoo.files import write_atomically
from keras_attn_zoo.files import write_json_lines
from keras_attn_zoo.training.callbacks import DevTranslationMonitor


class LearningCurve:
    """Records `(step, bleu, chrf, minutes)` of the dev monitor in `monitors`.

    Args:
        monitors: the run's monitoring callbacks (the `DevTranslationMonitor`
            among them gives the points; those with `timings` give the
            evaluation seconds).
        run_dir: where `curve.jsonl` and `progress.json` go.
        checkpoint_every: the `Trainer`'s; the totals are kept at those steps.
    """

    def __init__(self, monitors, run_dir, checkpoint_every):
        self.dev = next((m for m in monitors if isinstance(m, DevTranslationMonitor)), None)
        self.monitors = [m for m in monitors if hasattr(m, "timings")]
        self.curve_path = pathlib.Path(run_dir) / "curve.jsonl"
        self.progress_path = pathlib.Path(run_dir) / "progress.json"
        self.checkpoint_every = checkpoint_every
        self.offset = None
        self.recorded = 0
        self.started = None  # set by `begin`, just before training
        self.resumed = None

    def begin(self):
        """Starts the clock (the training data's preparation counts, as in a budget)."""
        self.started = time.monotonic()

    def _progress(self):
        if self.progress_path.exists():
            return json.loads(self.progress_path.read_text())
        return {}

    def _resume(self, step):
        self.resumed = resumed = step - 1
        progress = {int(k): v for k, v in self._progress().items()}
        earlier = [k for k in progress if k <= resumed]
        self.offset = progress[max(earlier)] if earlier else {
            "seconds": 0.0, "monitor_seconds": 0.0, "monitor_skipped": 0}
        points = [p for p in read_curve(self.curve_path) if p["step"] <= resumed]
        write_json_lines(self.curve_path, points)

    def totals(self):
        """Training seconds, monitor seconds and postponed evaluations, all sessions."""
        if self.started is None:
            self.begin()
        seconds = self.offset["seconds"] + time.monotonic() - self.started
        spent = self.offset["monitor_seconds"] + sum(m.seconds_spent for m in self.monitors)
        skipped = self.offset["monitor_skipped"] + sum(len(m.skipped) for m in self.monitors)
        return {"seconds": seconds, "monitor_seconds": spent, "monitor_skipped": skipped}

    def on_step_end(self, trainer, step, logs):
        if self.resumed is None:
            self._resume(step)
        if self.dev is not None and len(self.dev.history) > self.recorded:
            with open(self.curve_path, "a", encoding="utf-8") as file:
                for point_step, bleu, chrf in self.dev.history[self.recorded:]:
                    file.write(json.dumps({
                        "step": point_step, "bleu": bleu, "chrf": chrf,
                        "minutes": round(self.totals()["seconds"] / 60, 3)}) + "\n")
            self.recorded = len(self.dev.history)
        if self.checkpoint_every and step % self.checkpoint_every == 0:
            self._save_progress(step)

    def _save_progress(self, step):
        progress = self._progress()
        progress[str(step)] = self.totals()
        write_atomically(self.progress_path, json.dumps(progress, indent=1))

    def finish(self, step):
        """The totals at the end of training (kept for a restart during the evaluation);
        None when this session trained no step and none were kept."""
        if self.resumed is not None:
            self._save_progress(step)
            return self.totals()
        return self._progress().get(str(step))

    def points(self):
        """The curve so far, every session's points."""
        return read_curve(self.curve_path)


def clock_seconds(run_dir):
    """The training clock (all sessions, data preparation and evaluations included)
    at the run's last kept checkpoint step, where a restart resumes: 0.0 for a run
    not started. Lets a wall-time cap count every session, not only the next."""
    path = pathlib.Path(run_dir) / "progress.json"
    if not path.exists():
        return 0.0
    progress = json.loads(path.read_text())
    return float(progress[max(progress, key=int)]["seconds"]) if progress else 0.0


def remaining_cap_minutes(run_dir, cap_minutes):
    """The wall-time cap left to a run: the cap less the training clock of the
    sessions before (`clock_seconds`), so that a run resumed over several
    sessions gets the same cap as one trained in one. 0 for a run at its cap:
    resumed, it trains no step (the `Trainer`'s spent budget), so a run stopped
    by the cap is evaluated as it stopped."""
    return max(cap_minutes - clock_seconds(run_dir) / 60.0, 0.0)


def run_so_far(run_dir):
    """An unfinished run's state, read from its directory, for a record that
    outlives the machine holding its checkpoints: `curve` (every valid
    evaluation), `best_so_far` (step, BLEU, chrF; the earlier step on a tie),
    `early_stopping_state` (None without one),
    `training_seconds_at_last_checkpoint`, `training_loss_logged` (from
    `<run_dir>/logs`, `logged_training_loss`) and `training_probes`. Raises
    `ValueError` when the directory holds no valid curve (not evaluated yet, or
    another directory)."""
    run_dir = pathlib.Path(run_dir)
    curve = read_curve(run_dir / "curve.jsonl")
    if not curve:
        raise ValueError(f"{run_dir} holds no valid curve: the run has not been evaluated "
                         "yet on this machine, or its run directory is elsewhere.")
    state_path = run_dir / "early_stopping.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else None
    # Early stopping's own ranking (an RNN-family run stops on chrF).
    metric = (state or {}).get("metric", "bleu")
    best = max(curve, key=lambda point: (point[metric], -point["step"]))
    return {"best_so_far": {"metric": metric,
                            **{key: best[key] for key in ("step", "bleu", "chrf")}},
            "early_stopping_state": state,
            "curve": curve,
            "training_seconds_at_last_checkpoint": round(clock_seconds(run_dir), 1),
            "training_loss_logged": logged_training_loss(run_dir / "logs"),
            "training_probes": training_probes(run_dir)}


def write_run_so_far(partial_dir, stem, record):
    """Writes a `run_so_far` record (with its fields around it) to
    `<partial_dir>/<stem>-curve-<today>.json`, atomically, dated; returns the path."""
    import datetime

    record = {**record, "date": datetime.datetime.now().isoformat(timespec="seconds")}
    path = pathlib.Path(partial_dir) / f"{stem}-curve-{datetime.date.today()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(record, indent=1) + "\n")
    return path


def logged_training_loss(log_dir):
    """The training loss a run's `Trainer` logged to TensorBoard (the loss of the
    one batch at every `log_every`-th step), as `[[step, loss], ...]` by step; []
    without event files.

    A resumed run starts a new event file and logs again the steps after the
    checkpoint it resumed from: a file's points replace the earlier files' from
    its first step on (that training was abandoned). Event files sort by the
    start time in their names; a file cut by a kill gives the records before the cut.
    """
    def started(path):
        return int(path.name.split(".")[3])  # events.out.tfevents.<seconds>.<host>...

    points = {}
    for path in sorted(pathlib.Path(log_dir).glob("events.out.tfevents.*"), key=started):
        found = {}
        try:
            for record in tf.data.TFRecordDataset(str(path)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.tag == "loss":
                        found[event.step] = (float(tf.make_ndarray(value.tensor))
                                             if value.HasField("tensor")
                                             else value.simple_value)
        except tf.errors.DataLossError:
            pass  # a process killed mid-write: its last record is cut, the rest holds
        if found:
            first = min(found)
            points = {step: loss for step, loss in points.items() if step < first}
            points.update(found)
    return [[step, round(points[step], 4)] for step in sorted(points)]


def training_probes(run_dir):
    """`{name: points}` of the model's monitoring callbacks
    (`ZooModel.monitoring_callbacks`), read from `<run_dir>/<name>.probe.jsonl`:
    every session's points, so a resumed run reports them all."""
    return {path.name[:-len(".probe.jsonl")]: read_json_lines(path)
            for path in sorted(pathlib.Path(run_dir).glob("*.probe.jsonl"))}


def read_curve(path):
    """The points of a `curve.jsonl` (none when it does not exist)."""
    return read_json_lines(path)


def curve_text(points, what="first 100 valid sentences"):
    """One line per point: "step, minutes, dev BLEU, chrF" (for the run's output);
    `what`: the evaluated sentences and search, for the heading."""
    lines = [f"dev learning curve ({what}): step, training minutes, BLEU, chrF"]
    for p in points:
        lines.append(f"  {p['step']:>6}  {p.get('minutes', float('nan')):7.2f}  "
                     f"{p['bleu']:6.2f}  {p['chrf']:6.2f}")
    return "\n".join(lines)



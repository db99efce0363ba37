"""One training loop for one device, `MirroredStrategy` and multi-worker.

Keras 3.15's `model.fit` fails under `MultiWorkerMirroredStrategy`
(keras-team/keras#20585), so the zoo trains with its own step under
`strategy.run`, and every strategy, including the default single-device one,
goes through the same code.

What a killed run keeps: a `tf.train.CheckpointManager` checkpoint (model,
optimizer with its step counter and slots, epoch, batches done in the epoch) at
most `checkpoint_every` steps old. Restarting the same command restores it and
skips the batches already seen in that epoch, as Keras' `BackupAndRestore`
does for `fit`. TensorFlow writes checkpoint files under temporary names and
updates the `checkpoint` index last, so a crash mid-save leaves the previous
checkpoint usable.

With `carry_state=True` (aligned batching, Press & Smith 2018) each replica
keeps the model's training state (`ZooModel.initial_training_state`) from one
batch to the next, with the gradient stopped between batches (truncated
BPTT); the state restarts from the initial one at every epoch and when a run
resumes (it is not checkpointed: at most one epoch's stream position is lost).

With `jit_compile=True` (the default where a GPU is visible) each replica's forward and backward pass
is compiled by XLA; the all-reduce of the token count and the optimizer
update stay outside it, so one step function serves every strategy. XLA
compiles once per batch shape: feed it the fixed shapes of
`data.make_dataset(..., fixed_shapes=True)`. The trainer traces its step once
per shape and counts them (`compiled_shapes`); it warns when that number keeps
growing, the sign of data with a new shape in every batch. On CPU the default
is off: on 2 cores the compiled step of the `small` Transformer ran at 0.98x
the graph-mode step's tokens/s (fixed shapes, 18.8% padding instead of 12.9%)
after an 89 s first pass over its 8 shapes (docs/speed.md, "Training speed").
"""

import dataclasses
import math
import shutil
import tempfile
import time

import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_attn_zoo.data.pipeline import count_target_tokens
from keras_attn_zoo.data.pipeline import without_autotune_thread
from keras_attn_zoo.training.losses import real_token_loss_sum
from keras_attn_zoo.training.losses import token_loss_sum
from keras_attn_zoo.training.strategy import is_chief

# More traced shapes than this means the data's shapes are not bucketed.
_MANY_SHAPES = 64


@dataclasses.dataclass
class TrainingSummary:
    """What a `Trainer.train` call did."""

    steps: int
    epochs_completed: int
    train_seconds: float
    target_tokens: int
    # None when this call trained no step (a run resumed at its end, or one
    # whose early stopping had already converged): there is no rate or loss.
    target_tokens_per_second: float | None
    final_loss: float | None
    resumed_from_step: int
    # Why training ended: "max_steps", "epochs", "time_budget", or the reason
    # a callback gave `Trainer.request_stop` (early stopping: "converged").
    stop_reason: str = "max_steps"


def resolve_jit_compile(setting):
    """`True`/`False`, or "auto": XLA where a GPU is visible (see the module doc)."""
    if setting == "auto":
        return bool(tf.config.list_logical_devices("GPU"))
    if isinstance(setting, bool):
        return setting
    raise ValueError(f"jit_compile must be True, False or 'auto', got {setting!r}.")


class Trainer:
    """Trains a zoo model with label-smoothed cross-entropy.

    Build the model and optimizer inside `strategy.scope()` before creating
    the trainer.

    Args:
        model: a zoo model taking `{"source_ids", "target_ids"}`.
        optimizer: a Keras optimizer.
        strategy: a `tf.distribute.Strategy` (default: the current one).
        label_smoothing: see `token_loss_sum`.
        checkpoint_dir: where checkpoints go (`None`: no checkpoints).
        log_dir: TensorBoard directory (`None`: no logs).
        checkpoint_every: steps between checkpoints.
        log_every: steps between TensorBoard scalar writes.
        keep_checkpoints: how many checkpoints to keep.
        callbacks: objects with optional `on_train_start(trainer, step)`
            (after the checkpoint is restored: `step` is the resumed step) and
            `on_step_end(trainer, step, logs)`; called on every worker, write
            only on the chief. A callback ends training with
            `trainer.request_stop(reason)` (e.g. early stopping).
        carry_state: carry the model's training state across the batches of
            an epoch (`ZooModel.initial_training_state` / `forward_with_state`).
        clip_norm: clip the gradients to this global norm (`None`: off).
        jit_compile: compile each replica's forward and backward pass with
            XLA (once per batch shape); "auto" (default): where a GPU is
            visible. Turn it off for data whose shapes are not bucketed, or
            to debug the model in graph mode.
        project_real_tokens: for a model that splits off its output
            projection (`ZooModel.forward_before_projection`), project and
            score only the real target tokens (`real_token_loss_sum`); the
            loss and gradients are those of the full logits. `False`: the
            full logits of `model(inputs)` (and models without the split,
            or with `carry_state`, always).
    """

    def __init__(
        self,
        model,
        optimizer,
        strategy=None,
        label_smoothing=0.1,
        checkpoint_dir=None,
        log_dir=None,
        checkpoint_every=500,
        log_every=50,
        keep_checkpoints=3,
        callbacks=(),
        carry_state=False,
        clip_norm=None,
        jit_compile="auto",
        project_real_tokens=True,
    ):
        self.model = model
        self.project_real_tokens = project_real_tokens
        self.jit_compile = jit_compile = resolve_jit_compile(jit_compile)
        self.carry_state = carry_state
        self.clip_norm = clip_norm
        self._state = None  # the carried training state (per replica)
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        self.label_smoothing = label_smoothing
        self.checkpoint_every = checkpoint_every
        self.log_every = log_every
        self.callbacks = list(callbacks)
        self.is_chief = is_chief(self.strategy)
        self._stop_reason = None  # set by `request_stop`
        with self.strategy.scope():
            self.optimizer.build(self.model.trainable_variables)
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.batches_in_epoch = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="batches_in_epoch"
            )
        self.checkpoint = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            epoch=self.epoch,
            batches_in_epoch=self.batches_in_epoch,
        )
        self.checkpoint_manager = None
        if checkpoint_dir:
            # Non-chief workers must take part in saving (collectives) but
            # write to a scratch directory that is removed afterwards.
            directory = checkpoint_dir if self.is_chief else tempfile.mkdtemp()
            self.checkpoint_manager = tf.train.CheckpointManager(
                self.checkpoint, directory, max_to_keep=keep_checkpoints
            )
        self.writer = (
            tf.summary.create_file_writer(log_dir)
            if (log_dir and self.is_chief)
            else tf.summary.create_noop_writer()
        )
        self._forward_backward = tf.function(self._replica_gradients, jit_compile=True,
                                             autograph=False) \
            if jit_compile else self._replica_gradients
        # Under XLA one trace per shape (each compiles once anyway); without
        # it one shape-generic trace (`_trace_shape_generic`). No autograph:
        # the step and the layers branch in Python or with explicit ops (the
        # layers run on JAX too), and converting them made the trace 1.4-1.7x
        # slower (tiny Transformer, slow kind).
        self._train_step = tf.function(self._distributed_step,
                                       reduce_retracing=not jit_compile, autograph=False)
        self._generic_traces = set()

    @property
    def compiled_shapes(self):
        """How many batch shapes the step was traced (and, with XLA, compiled) for."""
        return self._train_step.experimental_get_tracing_count()

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    def restore(self):
        """Restores the newest checkpoint, if any. Returns the restored step."""
        if self.checkpoint_manager and self.checkpoint_manager.latest_checkpoint:
            self.checkpoint.restore(self.checkpoint_manager.latest_checkpoint)
            return self.step
        return 0

    def save(self):
        """Writes a checkpoint at the current step (workers other than the chief drop theirs)."""
        if self.checkpoint_manager is not None:
            self.checkpoint_manager.save(checkpoint_number=self.step)
            if not self.is_chief:
                shutil.rmtree(self.checkpoint_manager.directory, ignore_errors=True)

    # ---- the step ---------------------------------------------------------------

    def _replica_gradients(self, inputs, labels, global_tokens, state):
        """Loss sums and the gradients of the global-mean loss on one replica's batch."""
        with tf.GradientTape() as tape:
            split = (self.model.forward_before_projection(inputs, training=True)
                     if self.project_real_tokens and not self.carry_state else None)
            if split is not None:
                hidden, project = split
                loss_sum, tokens, correct = real_token_loss_sum(
                    labels, hidden, project, self.label_smoothing)
            else:
                if self.carry_state:
                    logits, state = self.model.forward_with_state(
                        inputs, state, training=True)
                else:
                    logits = self.model(inputs, training=True)
                loss_sum, tokens, correct = token_loss_sum(
                    labels, logits, self.label_smoothing
                )
            loss = loss_sum / tf.maximum(global_tokens, 1.0)
            scaled_loss = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, self.model.trainable_variables)
        if self.carry_state:
            state = tf.nest.map_structure(tf.stop_gradient, state)
        return loss, tokens, correct, gradients, state

    def _replica_step(self, inputs, labels, state=None):
        replica = tf.distribute.get_replica_context()
        if self.carry_state and state is None:
            state = self.model.initial_training_state(tf.shape(labels)[0])
        # Divide by the global token count: the summed gradients of N
        # replicas then equal one device's gradient on the global batch.
        tokens = tf.cast(count_target_tokens(labels), tf.float32)
        global_tokens = replica.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        loss, tokens, correct, gradients, state = self._forward_backward(
            inputs, labels, global_tokens, state)
        if self.clip_norm:
            gradients, _ = tf.clip_by_global_norm(gradients, self.clip_norm)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        if self.carry_state:
            return loss, tokens, correct, state
        return loss, tokens, correct

    def _distributed_step(self, inputs, labels, state=None):
        outputs = self.strategy.run(self._replica_step, args=(inputs, labels, state))
        loss, tokens, correct = outputs[:3]
        total = tf.distribute.ReduceOp.SUM
        metrics = {
            "loss": self.strategy.reduce(total, loss, axis=None),
            "tokens": self.strategy.reduce(total, tokens, axis=None),
            "correct": self.strategy.reduce(total, correct, axis=None),
        }
        return metrics, (outputs[3] if self.carry_state else None)

    @property
    def carried_state(self):
        """The training state the next step starts from (None: the initial one)."""
        return self._state

    def reset_state(self):
        """Starts the carried training state afresh (at every epoch start)."""
        self._state = None

    def train_on_batch(self, inputs, labels):
        """One optimisation step on one (global) batch; returns float metrics.

        With `carry_state`, the step starts from the state the previous call
        left (or the model's initial one after `reset_state`) and keeps the new one.
        """
        if not self.jit_compile:
            self._trace_shape_generic(inputs, labels, self._state)
        values, state = self._train_step(inputs, labels, self._state)
        if self.jit_compile and self.compiled_shapes == _MANY_SHAPES + 1:
            warnings.warn(
                f"The XLA training step has been compiled for {self.compiled_shapes} "
                "batch shapes: the data is not bucketed into fixed shapes "
                "(data.make_dataset(..., fixed_shapes=True)); every new shape costs a "
                "compilation. Bucket the data or pass jit_compile=False.", stacklevel=2)
        if self.carry_state:
            self._state = state
        return {k: float(v) for k, v in values.items()}

    def _trace_shape_generic(self, inputs, labels, state):
        """Traces the graph-mode step once, for every batch shape, before its first call.

        `reduce_retracing` generalises only when a second shape arrives, so
        bucketed data paid two traces of the whole step (3.7 s each for the
        tiny Transformer on 2 cores); one trace with every dimension unknown
        serves all shapes, and later calls dispatch to it. A carried state
        changes the step's arguments (None, then tensors): one trace each.
        Per-replica values (`MirroredStrategy` over several devices) keep
        `reduce_retracing`.
        """
        key = state is None
        if key in self._generic_traces:
            return
        self._generic_traces.add(key)
        arguments = (inputs, labels, state)
        if not all(isinstance(value, tf.Tensor)
                   for value in tf.nest.flatten(arguments) if value is not None):
            return

        def any_shape(structure):
            return tf.nest.map_structure(
                lambda value: tf.TensorSpec([None] * value.shape.rank, value.dtype), structure)

        self._train_step.get_concrete_function(
            any_shape(inputs), any_shape(labels), None if state is None else any_shape(state))

    # ---- the loop -----------------------------------------------------------------

    def request_stop(self, reason):
        """Ends training after the current step (a callback's call; e.g. "converged").

        The step's checkpoint is still written; the summary's `stop_reason`
        is `reason`.
        """
        self._stop_reason = str(reason)

    def _agreed_stop(self, reason):
        """`reason` if this worker or any other wants to stop, else None.

        Under `MultiWorkerMirroredStrategy` the workers decide apart (the
        chief alone evaluates the dev set; each reads its own clock), so they
        agree with one all-reduce of the wish, every step, all at the same
        step. One process (one device or `MirroredStrategy`) needs none.
        """
        if not isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return reason
        wish = tf.constant(0.0 if reason is None else 1.0)
        wanted = self.strategy.reduce(
            tf.distribute.ReduceOp.SUM,
            self.strategy.run(lambda: tf.identity(wish)), axis=None)
        if float(wanted) > 0 and reason is None:
            return self._stop_reason or "another worker stopped"
        return reason

    def epoch_dataset(self, make_dataset, epoch):
        """Epoch `epoch`'s batches from the first one not trained on yet.

        A new iterator per epoch: without autotuning, whose thread made the
        deletion of the last epoch's iterator wait up to 60 s
        (`data.pipeline.without_autotune_thread`).
        """
        dataset = make_dataset(epoch).skip(int(self.batches_in_epoch.numpy()))
        return without_autotune_thread(dataset)

    def _learning_rate(self):
        # Keras evaluates a schedule at the current step; under a strategy the
        # plain-rate variable wraps a distributed variable, hence `.value`.
        rate = self.optimizer.learning_rate
        return float(tf.convert_to_tensor(getattr(rate, "value", rate)).numpy())

    def train(
        self,
        make_dataset,
        epochs=None,
        max_steps=None,
        time_budget_seconds=None,
        verbose=1,
    ):
        """Trains until `epochs`, `max_steps` or the time budget runs out.

        Args:
            make_dataset: `epoch -> tf.data.Dataset` of `(inputs, labels)`
                global batches; reshuffled per epoch by the caller (seed +
                epoch) so a resumed run sees the same order.
            epochs: passes over the data, a stop condition (at least one of
                the three must be set; each defaults to unbounded).
            max_steps: optimiser steps, a stop condition.
            time_budget_seconds: wall time, a stop condition; 0 (or less): the
                budget is spent, nothing is trained (a resumed run at its cap).
            verbose: 1 shows a Keras progress bar.
        """
        if epochs is None and max_steps is None and time_budget_seconds is None:
            raise ValueError("Set at least one of epochs, max_steps, time_budget_seconds.")
        resumed_from = self.restore()
        self._stop_reason = None
        for callback in self.callbacks:
            if hasattr(callback, "on_train_start"):
                callback.on_train_start(self, resumed_from)
        start = time.monotonic()
        tokens_seen = 0
        last_loss = None
        progress = keras.utils.Progbar(max_steps, stateful_metrics=["lr", "tok/s"]) if verbose else None
        window_start, window_tokens = time.monotonic(), 0
        # A run restored at (or past) max_steps, one a callback stops before
        # its first step (early stopping that had converged) or one whose time
        # budget is spent has nothing left to train.
        if max_steps is not None and resumed_from >= max_steps:
            stop_reason = "max_steps"
        elif self._stop_reason is None and (time_budget_seconds is not None
                                            and time_budget_seconds <= 0):
            stop_reason = "time_budget"
        else:
            stop_reason = self._stop_reason
        done = finished = stop_reason is not None
        while not done:
            epoch = int(self.epoch.numpy())
            if epochs is not None and epoch >= epochs:
                stop_reason = "epochs"
                break
            dataset = self.epoch_dataset(make_dataset, epoch)
            self.reset_state()
            for inputs, labels in self.strategy.experimental_distribute_dataset(dataset):
                metrics = self.train_on_batch(inputs, labels)
                self.batches_in_epoch.assign_add(1)
                step = self.step
                if not math.isfinite(metrics["loss"]):
                    raise FloatingPointError(
                        f"The loss became {metrics['loss']} at step {step}; the last "
                        "good checkpoint is kept. Lower the learning rate or check "
                        "the data."
                    )
                last_loss = metrics["loss"]
                tokens_seen += int(metrics["tokens"])
                window_tokens += int(metrics["tokens"])
                logs = {
                    "loss": metrics["loss"],
                    "accuracy": metrics["correct"] / max(metrics["tokens"], 1.0),
                    "lr": self._learning_rate(),
                }
                if step % self.log_every == 0:
                    elapsed = max(time.monotonic() - window_start, 1e-9)
                    logs["tok/s"] = window_tokens / elapsed
                    self._write_scalars(step, logs)
                    window_start, window_tokens = time.monotonic(), 0
                if progress is not None:
                    progress.update(step, [(k, v) for k, v in logs.items()])
                for callback in self.callbacks:
                    if hasattr(callback, "on_step_end"):
                        callback.on_step_end(self, step, logs)
                if self.checkpoint_every and step % self.checkpoint_every == 0:
                    self.save()
                if max_steps is not None and step >= max_steps:
                    stop_reason = "max_steps"
                elif (time_budget_seconds is not None
                      and time.monotonic() - start >= time_budget_seconds):
                    stop_reason = "time_budget"
                else:
                    stop_reason = self._stop_reason
                stop_reason = self._agreed_stop(stop_reason)
                if stop_reason is not None:
                    done = True
                    break
            else:
                self.epoch.assign_add(1)
                self.batches_in_epoch.assign(0)
        if not finished:
            self.save()
        self.writer.flush()
        seconds = time.monotonic() - start
        return TrainingSummary(
            steps=self.step,
            epochs_completed=int(self.epoch.numpy()),
            train_seconds=seconds,
            target_tokens=tokens_seen,
            target_tokens_per_second=(tokens_seen / max(seconds, 1e-9)
                                      if last_loss is not None else None),
            final_loss=last_loss,
            resumed_from_step=resumed_from,
            stop_reason=stop_reason or "epochs",
        )

    def _write_scalars(self, step, logs):
        with self.writer.as_default(step=step):
            tf.summary.scalar("loss", logs["loss"])
            tf.summary.scalar("perplexity", float(np.exp(min(logs["loss"], 50.0))))
            tf.summary.scalar("token_accuracy", logs["accuracy"])
            tf.summary.scalar("learning_rate", logs["lr"])
            if "tok/s" in logs:
                tf.summary.scalar("target_tokens_per_second", logs["tok/s"])

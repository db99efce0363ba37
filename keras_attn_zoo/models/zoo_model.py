"""The contract every zoo model keeps: the step protocol and its hooks.

One beam search, one greedy search, one exporter, one trainer and one set of
analyses serve every model. They use only what `ZooModel` declares here, never
`hasattr` probes on a model:

Required (a subclass that does not define them fails at class creation):

* `encode(source_ids, training=False) -> memory`: any nest of batch-first
  tensors.
* `initial_state(memory, max_length) -> state`: caches for `max_length`
  decoding steps. Every leaf is batch-first, except under the key `"shared"`
  (a dict the searches neither tile nor reorder). A state may hold
  `"attention"`, float32 `[B, S]`: the alignment of the last step.
* `decode_step(token, step, state) -> (logits [B, V], state)`: position
  `step` from the previous `token` `[B]`.

Hooks, with defaults that fit a plain encoder-decoder:

* `max_decode_length`: decoder positions the model has (None: unlimited).
* `extra_token_count`: vocabulary ids beyond the tokenizer's (0).
* `logits_processor`: `processor(log_probs, step, tokens_so_far, state)`
  the searches apply at every step, or None.
* `clean_output(ids, lengths, alignment)`: search output -> text ids (no-op).
* `attention_maps(source_ids, target_ids)`: one teacher-forced pass's
  attention weights, `{name: float32 [layers, batch, heads, queries, keys]}`
  (`{}`: the model has none; see `evaluation.attention` for the names).
* `stepwise_positions`, `training_callbacks`, `wrap_optimizer`: below.
* `training_data(...)`: how a recipe run prepares and batches this model's
  training pairs (a `TrainingData`); `initial_training_state` /
  `forward_with_state`: a state the `Trainer` carries from batch to batch
  (None: none, the default).
* `forward_before_projection(inputs, training)`: the teacher-forced pass up
  to a position-wise output projection and that projection, so the `Trainer`
  projects and scores only the real target tokens (None: the model's logits
  come whole from `model(inputs)`, the default).

A zoo model keeps its constructor arguments in `zoo_config`; that dict is its
Keras config (plus `name`), so `from_config` simply calls the constructor.
"""

import dataclasses
from typing import Callable

import keras
import numpy as np

REQUIRED_METHODS = ("encode", "initial_state", "decode_step")


@dataclasses.dataclass
class TrainingData:
    """A model's training data for one run, as `ZooModel.training_data` prepares it.

    `make_dataset(epoch)` gives that epoch's `(inputs, labels)` batches;
    `carry_state` and `clip_norm` go to the `Trainer`; `info` joins the run's
    results. `too_long`: the number of pairs dropped as too long, or the
    function that counts them, called once on the first read of
    `dropped_too_long` (a streamed corpus is counted after training, so its
    counting pass does not delay the first step).
    """

    make_dataset: Callable
    too_long: int | Callable[[], int]
    info: dict = dataclasses.field(default_factory=dict)
    carry_state: bool = False
    clip_norm: float | None = None

    @property
    def dropped_too_long(self) -> int:
        if callable(self.too_long):
            self.too_long = self.too_long()
        return self.too_long


class ZooModel(keras.Model):
    """Base of the zoo's models built as functional `keras.Model` subclasses.

    A subclass builds its functional graph in `__init__`, calls
    `super().__init__(inputs=..., outputs=..., **kwargs)` and then stores its
    constructor arguments as `self.zoo_config`. It defines the three methods
    of `REQUIRED_METHODS` and overrides the hooks it needs.
    """

    length_advice = "raise max_length when building the model."
    # Vocabulary ids the model adds after the tokenizer's pieces; `Translator`
    # and the recipes check `vocabulary_size == pieces + extra_token_count`.
    extra_token_count = 0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [name for name in REQUIRED_METHODS
                   if getattr(cls, name) is getattr(ZooModel, name)]
        if missing:
            raise TypeError(
                f"{cls.__name__} subclasses ZooModel but does not define "
                f"{', '.join(missing)}: the step protocol every search, the "
                "exporter and the trainer use (see keras_attn_zoo.models.zoo_model)."
            )

    # ---- the step protocol (required) -------------------------------------------

    def encode(self, source_ids, training=False):
        """Runs the encoder once; returns the memory `initial_state` takes."""
        raise NotImplementedError

    def initial_state(self, memory, max_length):
        """Decoding state for `max_length` steps (see the module docstring)."""
        raise NotImplementedError

    def decode_step(self, token, step, state):
        """`(logits [B, V], new_state)` for position `step` given `token` `[B]`."""
        raise NotImplementedError

    # ---- hooks ----------------------------------------------------------------

    @property
    def max_decode_length(self):
        """Decoder positions this model has (EOS included); None: unlimited."""
        return self.zoo_config.get("max_length")

    @property
    def logits_processor(self):
        """Decoding rules applied to every step's log-probabilities; None: none."""
        return None

    @property
    def length_normalization(self):
        """How beam search normalises scores by length (`decoding.common`): "gnmt"."""
        return "gnmt"

    def clean_output(self, ids, lengths, alignment=None):
        """Search output `(ids [B, T], lengths [B], alignment)` -> text ids.

        Default: unchanged. A model that emits ids with no text (the eager
        translator's ε and start pads) removes them here, in graph ops.
        """
        return ids, lengths, alignment

    def attention_maps(self, source_ids, target_ids):
        """Teacher-forced attention weights, `{name: float32 ndarray}`; `{}`: none.

        Every array is `[layers, batch, heads, queries, keys]` (`"gmm_gate"`:
        `[layers, batch, heads, queries]`); `keras_attn_zoo.evaluation.attention`
        documents the names.
        """
        del source_ids, target_ids
        return {}

    def check_length(self, length, what="sequence"):
        """Raises a clear error when `length` exceeds `max_decode_length` (None: no limit)."""
        limit = self.max_decode_length
        if limit is not None and length > limit:
            raise ValueError(
                f"The {what} has {length} tokens but this model's max_length is "
                f"{limit}; {self.length_advice}"
            )

    def stepwise_positions(self, source_ids, target_ids):
        """Bool `[B, T]`: where `decode_step` must equal the teacher-forced pass.

        Every real (non-0) target position; a model whose step decoding follows
        other rules at some positions (the eager translator after its source
        ends) narrows this. `decoding.consistency` and the tests use it.
        """
        del source_ids
        return np.asarray(target_ids) != 0

    def training_callbacks(self):
        """Callbacks that this model's own arguments need while it trains.

        Each works with `keras_attn_zoo.training.Trainer` (`on_step_end`) and
        with `model.fit`. Default: none.
        """
        return []

    def monitoring_callbacks(self, tokenizer, valid_pairs, run_dir, every):
        """Callbacks that measure this model on the `valid_pairs` while it trains.

        Each writes its points to `<run_dir>/<name>.probe.jsonl`, kept across
        restarts (the run's results read them back, `training.curve.training_probes`),
        every `every` steps. Default: none.
        """
        del tokenizer, valid_pairs, run_dir, every
        return []

    def wrap_optimizer(self, optimizer):
        """The optimizer to train this model with, given the run's optimizer.

        Called inside the strategy scope, before any loss-scale wrapping.
        Default: `optimizer` unchanged.
        """
        return optimizer

    def training_length_limit(self, max_length):
        """The run's `max_length`, lowered to the model's own `max_length` if it has one.

        Longer pairs are dropped (and counted) instead of stopping the run with
        a length error (fixed-size attention tables) or training positions the
        model refuses to translate.
        """
        limit = self.max_decode_length
        return max_length if limit is None else min(max_length, int(limit))

    def training_data(self, pairs, tokenizer, *, batch_tokens, max_length, seed,
                      work_dir, aligned_batching=False, fixed_shapes=False):
        """Prepares the training `pairs` of a recipe run; returns `TrainingData`.

        Default: token-budget batches of `data.training_stream` (`pairs`: a
        list, or a streaming source such as `data.open_parallel_files(...)`),
        pairs longer than `training_length_limit(max_length)` pieces dropped
        (counted by `data.pipeline_stats`: a list now, a streamed corpus after
        training), reshuffled per epoch with `seed + epoch`. `aligned_batching` needs a model with
        a carried training state (refused here). `work_dir` is where a model
        may cache what its data needs. `fixed_shapes`: a few batch shapes,
        for an XLA-compiled step (`make_dataset(..., fixed_shapes=True)`).
        """
        from keras_attn_zoo import data as zoo_data

        del work_dir
        if aligned_batching:
            raise ValueError(f"Aligned batching needs a model that carries a training "
                             f"state (initial_training_state); {self.name} has none.")
        limit = self.training_length_limit(max_length)
        options = dict(batch_tokens=batch_tokens, max_length=limit, fixed_shapes=fixed_shapes)
        note = "" if limit == max_length else " (the model's max_length)"
        # A first batch, unshuffled: a few chunks in (the whole corpus only when no pair fits).
        first = zoo_data.training_stream(pairs, tokenizer, shuffle=False, **options).take(1)
        if not list(zoo_data.without_autotune_thread(first)):
            # Trainer would wait forever for a first batch of an empty epoch.
            raise ValueError(f"No training pair has at most {limit} pieces{note} on "
                             "each side.")

        def count_dropped():
            stats = zoo_data.pipeline_stats(pairs, tokenizer, **options)
            empty = (f", {stats.dropped_empty} with an empty side" if stats.dropped_empty
                     else "")
            print(f"pipeline: {stats.kept} pairs kept, {stats.dropped_too_long} dropped as "
                  f"longer than {limit} pieces{note}{empty}; {stats.target_tokens} target "
                  "tokens per epoch")
            return stats.dropped_too_long

        def make_dataset(epoch):
            return zoo_data.training_stream(pairs, tokenizer, seed=seed + epoch, **options)

        # A list is counted now (Ding: about a second); a streamed corpus (a pass as long
        # as an epoch's tokenizing) when its count is first read, after training.
        return TrainingData(make_dataset,
                            count_dropped() if isinstance(pairs, list) else count_dropped)

    def initial_training_state(self, batch_size):
        """The state a `Trainer` with `carry_state` starts each epoch from; None: none."""
        del batch_size
        return None

    def forward_before_projection(self, inputs, training=False):
        """`(hidden [B, T, d], project)`, or None (the default): no split.

        A model whose logits are one position-wise projection of a last
        hidden state (`logits[b, t] = project(hidden[b, t])`, float32
        `[N, V]` from `[N, d]`) returns that state from the same teacher-forced
        pass `call` runs (same layers, same random draws) and the projection.
        The `Trainer` then gathers the rows of the real target tokens before
        projecting: no work on padding in the largest matmul and the loss.
        """
        del inputs, training
        return None

    def forward_with_state(self, inputs, state, training=False):
        """`(logits, new_state)` of a teacher-forced pass from a carried `state`."""
        raise NotImplementedError(f"{type(self).__name__} carries no training state.")

    def get_config(self):
        config = dict(self.zoo_config)
        config["name"] = self.name
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

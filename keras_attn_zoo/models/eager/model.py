"""The eager translator: one LSTM stack, no encoder, no attention (Press & Smith, 2018).

At step ``t`` the model reads the source token ``x_t`` and the previous target
token ``y_{t-1}``, both embedded with one shared embedding of size E, and
predicts ``y_t``:

    h_t = LSTM^L([emb(x_t); emb(y_{t-1})], h_{t-1})
    p(y_t) = softmax(E_out · tanh(W h_t + b) + c)     (E_out tied to the embedding)

Training pairs must be *eager feasible* (``keras_attn_zoo.models.eager.preprocessing``): the
source and target are equally long, so ``source_ids`` and ``target_ids`` have
the same length ``T`` (``target_ids`` = the previous target token of each
step, starting with BOS; labels = the target). Both are 0-padded at the end.

The model is a ``keras.Model`` built functionally in ``__init__`` (the
keras-hub pattern), with the zoo's step protocol reusing the same layers:

* ``encode(source_ids) -> memory``: the source ids themselves (no encoder);
* ``initial_state(memory, max_length) -> state``: zero LSTM states;
* ``decode_step(token, step, state) -> (logits, state)``: reads ``x_step`` from
  the memory and ``token`` (the previous target token).

Decoding rules (forced start tokens, ε limit, source padding injection) live in
``keras_attn_zoo.models.eager.processor``: pass its processor to the zoo's
``beam_search``/``greedy_search``; ``decoding.eager_processor.EagerStreamer`` translates a source that
arrives token by token in constant memory.

Source padding injection (SPI) in ``decode_step``: let ``n`` be the position of
the source EOS (the first ``EOS_ID`` of the row; a row without EOS is taken to
end right after its last token). Steps ``t < n`` read ``x_t``. At steps
``t >= n`` the model reads the source-pad token in place of the source EOS (the
training data put source pads *before* the source EOS, and so does the
reference code's SPI, which injects them "before the <eos> tag"); the
alternative "read the source EOS now and end" is computed in the same step,
and its EOS log-probability is returned in ``state["eos_log_prob"]``. With
``injection_end="reference"``, the default, the N pads are read first, as the
reference code does, and a hypothesis ends early only if the model predicts
EOS while reading a pad. ``"choose"`` (the zoo's earlier default) scores a
target EOS with the source-EOS reading and every other token with the
pad-reading logits, so a hypothesis chooses at each step ``t >= n`` between
ending and one more pad; trained models almost always end at the first such
step, which caps outputs at about 0.62 of the reference length (issue 32).

Export (``keras_attn_zoo.export.Translator`` hooks): the model exposes
``logits_processor`` (the decoding rules above with the paper's defaults),
``clean_output`` (drops start, ε and source-pad tokens from the search output,
with the matching alignment rows) and ``extra_token_count = 3`` (the ids
appended after the SentencePiece vocabulary), so ``Translator`` and
``export_saved_model`` work on it as on any zoo model:
``Translator.translate_texts`` gives what ``eager_translate``, then
``strip_eager_tokens`` and detokenization give (with the same beam options).
"""

import pathlib
import types

import keras
import numpy as np
from keras import ops

from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID, PAD_ID
from keras_attn_zoo.layers.eager_embedding import EagerEmbedding
from keras_attn_zoo.layers.projected_lstm import ProjectedLSTM
from keras_attn_zoo.models.eager.processor import DEFAULT_EPSILON_LIMIT
from keras_attn_zoo.models.eager.processor import DEFAULT_INJECTION_END
from keras_attn_zoo.models.eager.processor import DEFAULT_LENGTH_NORMALIZATION
from keras_attn_zoo.models.eager.processor import DEFAULT_SOURCE_PADDING_INJECTION
from keras_attn_zoo.models.eager.processor import INJECTION_ENDS
from keras_attn_zoo.models.eager.processor import LENGTH_NORMALIZATIONS
from keras_attn_zoo.models.eager.processor import eager_processor_for
from keras_attn_zoo.models.eager.special_ids import DEFAULT_START_PADS
from keras_attn_zoo.models.eager.special_ids import EagerSpecialIds
from keras_attn_zoo.models.eager.training import eager_training_data
from keras_attn_zoo.models.presets import constructor_arguments
from keras_attn_zoo.models.presets import resolve_preset
from keras_attn_zoo.models.zoo_model import ZooModel

# The paper's dropouts are those of its published training command (AWD-LSTM
# style; weight drop off): output 0.1, input 0.15, between layers 0.1,
# combiner 0.1; embedding dropout is not set there, so AWD-LSTM's default 0.1.
_PAPER_DROPOUTS = dict(embedding_dropout=0.1, input_dropout=0.15, hidden_dropout=0.1,
                       output_dropout=0.1, combiner_dropout=0.1)

EAGER_PRESETS = {
    "tiny": dict(embedding_dim=16, hidden_dim=32, num_layers=2, embedding_dropout=0.0,
                 input_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0,
                 combiner_dropout=0.0),
    "small": dict(embedding_dim=256, hidden_dim=512, num_layers=2, **_PAPER_DROPOUTS),
    # Press & Smith (2018): E = 500, 4 LSTM layers of 2E = 1000 units.
    "paper": dict(embedding_dim=500, hidden_dim=1000, num_layers=4, **_PAPER_DROPOUTS),
}


# Valid pairs of the source-use probe during training (`monitoring_callbacks`):
# the dev set of benchmarks/eager_length.py, whose probe it repeats; two
# teacher-forced passes over them cost seconds beside a valid evaluation.
PROBE_PAIRS = 200

# The decoding options a model carries in its config (`set_decoding`).
DECODING_OPTIONS = ("source_padding_injection", "epsilon_limit", "length_normalization",
                    "injection_end")


def _check_decoding_options(config):
    for name in ("source_padding_injection", "epsilon_limit"):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}.")
    if config["injection_end"] not in INJECTION_ENDS:
        raise ValueError(f"injection_end must be one of {INJECTION_ENDS}, "
                         f"got {config['injection_end']!r}.")
    if config["length_normalization"] not in LENGTH_NORMALIZATIONS:
        raise ValueError(f"length_normalization must be one of {LENGTH_NORMALIZATIONS}, "
                         f"got {config['length_normalization']!r}.")


def _locked_dropout(rate, name):
    """Variational ("locked") dropout: one mask per sequence, shared by all steps."""
    return keras.layers.Dropout(rate, noise_shape=(None, 1, None), name=name)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class EagerLSTMTranslator(ZooModel):
    """The eager translation model of Press & Smith (2018).

    Inputs are a dict ``{"source_ids": int32[B, T], "target_ids": int32[B, T]}``
    of EQUAL length (eager-feasible pairs; ``target_ids`` starts with BOS and
    holds the previous target token of each step); the output is float32
    logits ``[B, T, vocabulary_size]``. Unequal lengths raise a ValueError
    naming the problem.

    Args:
        vocabulary_size: SentencePiece size + 3 (see ``models.eager.special_ids``).
        embedding_dim: E, shared by both languages and the tied output layer.
        hidden_dim: LSTM units per layer (default 2E, the paper's choice).
        num_layers: stacked LSTMs (paper: 4).
        embedding_dropout: word dropout on the embedding table.
        input_dropout: locked dropout on the LSTM input ``[emb(x); emb(y)]``.
        hidden_dropout: locked dropout between LSTM layers.
        output_dropout: locked dropout on the top LSTM output.
        combiner_dropout: locked dropout on the ``Dense(E, tanh)`` combiner.
        start_id: the start token's id; ``None``: ``vocabulary_size - 3``.
        epsilon_id: the ε token's id; ``None``: ``vocabulary_size - 2``.
        source_pad_id: the source pad's id; ``None``: ``vocabulary_size - 1``.
        start_pads: start tokens the training targets begin with (the decoding
            processor forces that many).
        source_padding_injection: N of the decoding rules (paper's command:
            4; the paper tunes it on the development set:
            ``evaluation.source_padding.choose_source_padding_injection`` then
            ``set_decoding``).
        epsilon_limit: k of the decoding rules (paper's command: 3).
        length_normalization: how beam search ranks finished hypotheses:
            ``"average"`` (the default: log-prob / tokens, as the reference
            ``generate.py`` ranks by log-prob / (i + 1)) or ``"gnmt"`` (the
            GNMT penalty with the search's ``length_penalty`` alpha, the
            zoo's other models' ranking). With start pads P a hypothesis
            holds at most n + N - P word pieces (n = source pieces with EOS),
            so a larger N and a ranking that does not favour ending early
            lengthen the output.
        injection_end: ``"reference"`` (the default, the reference's SPI: the
            N pads are read before the source EOS) or ``"choose"`` (every step
            after the source may end by reading the source EOS); see
            ``models.eager.processor``. The defaults are the reference code's
            decoding; the zoo's earlier ``"choose"`` with GNMT ranking kept
            outputs at about 0.62 of the reference length (issue 32;
            ``benchmarks/results/eager_length-2026-11-25.json``).

    The reference code's weight drop (DropConnect on the recurrent weights)
    was off in the paper's runs and is not implemented.

    ``Translator`` hooks (see ``keras_attn_zoo.export.Translator``):
    ``logits_processor`` (the eager decoding rules, paper defaults),
    ``clean_output`` and ``extra_token_count``. The search state's
    ``"attention"`` is not attention (the model has none) but a hard one-hot of
    the source position read at each step (the source EOS position for the
    steps after it), so the exported ``alignment`` shows which source token
    was being read when each target piece was written.

    Examples:
        >>> model = eager_translator(1003, preset="tiny")
        >>> ids = np.array([[10, 11, 3]], "int32")
        >>> model({"source_ids": ids, "target_ids": np.array([[2, 1000, 1000]], "int32")}).shape
        (1, 3, 1003)
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim=500,
        hidden_dim=None,
        num_layers=4,
        embedding_dropout=0.1,
        input_dropout=0.15,
        hidden_dropout=0.1,
        output_dropout=0.1,
        combiner_dropout=0.1,
        start_id=None,
        epsilon_id=None,
        source_pad_id=None,
        start_pads=DEFAULT_START_PADS,
        source_padding_injection=DEFAULT_SOURCE_PADDING_INJECTION,
        epsilon_limit=DEFAULT_EPSILON_LIMIT,
        length_normalization=DEFAULT_LENGTH_NORMALIZATION,
        injection_end=DEFAULT_INJECTION_END,
        **kwargs,
    ):
        config = dict(
            vocabulary_size=vocabulary_size, embedding_dim=embedding_dim,
            hidden_dim=hidden_dim, num_layers=num_layers,
            embedding_dropout=embedding_dropout, input_dropout=input_dropout,
            hidden_dropout=hidden_dropout, output_dropout=output_dropout,
            combiner_dropout=combiner_dropout, start_id=start_id, epsilon_id=epsilon_id,
            source_pad_id=source_pad_id, start_pads=start_pads,
            source_padding_injection=source_padding_injection,
            epsilon_limit=epsilon_limit, length_normalization=length_normalization,
            injection_end=injection_end,
        )
        _check_decoding_options(config)
        default = EagerSpecialIds.for_model_vocabulary(vocabulary_size)
        special = EagerSpecialIds(
            default.start_id if start_id is None else start_id,
            default.epsilon_id if epsilon_id is None else epsilon_id,
            default.source_pad_id if source_pad_id is None else source_pad_id)
        for name, value in special._asdict().items():
            if not 4 <= value < vocabulary_size:
                raise ValueError(
                    f"{name}={value} must lie in [4, vocabulary_size={vocabulary_size}) "
                    "(ids 0..3 are PAD/UNK/BOS/EOS).")
        if len(set(special)) != 3:
            raise ValueError(f"The special ids must differ, got {special._asdict()}.")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}.")
        if start_pads < 0:
            raise ValueError(f"start_pads must be >= 0, got {start_pads}.")
        units = 2 * embedding_dim if hidden_dim is None else hidden_dim

        embedding = EagerEmbedding(vocabulary_size, embedding_dim, dropout=embedding_dropout,
                                   name="shared_embedding")
        input_drop = _locked_dropout(input_dropout, "input_locked_dropout")
        lstms = [
            ProjectedLSTM(units, return_sequences=True, return_state=True,
                          name=f"lstm_{i}")
            for i in range(num_layers)
        ]
        layer_drops = [
            _locked_dropout(hidden_dropout, f"hidden_locked_dropout_{i}")
            for i in range(num_layers - 1)
        ] + [_locked_dropout(output_dropout, "output_locked_dropout")]
        combiner = keras.layers.Dense(embedding_dim, activation="tanh", name="combiner")
        combiner_drop = _locked_dropout(combiner_dropout, "combiner_locked_dropout")

        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
        x = input_drop(embedding([source_ids, target_ids]))
        for lstm, drop in zip(lstms, layer_drops):
            x = drop(lstm(x)[0])
        hidden = combiner_drop(combiner(x))
        logits = embedding(hidden, reverse=True)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits, **kwargs)

        # The same graph up to the tied output layer, for the Trainer's
        # real-token projection (`forward_before_projection`). A namespace:
        # Keras does not track it, so weights, saving and `layers` are those
        # of this model alone.
        self._before_projection = types.SimpleNamespace(model=keras.Model(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=hidden, name=f"{self.name}_before_projection"))

        self.zoo_config = config
        # Straight into __dict__: Keras would track a tuple attribute as a list.
        self.__dict__["special_ids"] = special
        self.hidden_dim = units
        self.embedding = embedding
        self.input_drop = input_drop
        self.lstms = lstms
        self.layer_drops = layer_drops
        self.combiner = combiner
        self.combiner_drop = combiner_drop

    # ---- Translator / export hooks ---------------------------------------------------------

    # start, ε and source pad: the ids appended after the SentencePiece vocabulary
    # (``models.eager.special_ids.eager_vocabulary_size``); ``Translator`` checks the vocabulary with it.
    extra_token_count = 3

    @property
    def logits_processor(self):
        """The eager decoding rules with the model's decoding options, built once.

        ``eager_processor_for(self)``: start pads = the model's ``start_pads``,
        its ``epsilon_limit`` and ``source_padding_injection`` (paper's
        command: 3 and 4; ``models.eager.processor``). ``Translator`` and
        ``export_saved_model`` pass it to ``beam_search``; change the values
        with ``set_decoding`` (before exporting: an export traces the rules
        it finds) or call ``eager_processor_for(model, ...)`` directly.
        """
        processor = self.__dict__.get("_eager_logits_processor")
        if processor is None:
            processor = eager_processor_for(self)
            # Straight into __dict__: a plain cache, not state for Keras to track.
            self.__dict__["_eager_logits_processor"] = processor
        return processor

    @property
    def length_normalization(self):
        """The model's ``length_normalization`` (``Translator`` hook)."""
        return self.zoo_config["length_normalization"]

    def set_decoding(self, **options):
        """Changes ``source_padding_injection``, ``epsilon_limit``,
        ``length_normalization`` or ``injection_end`` (kept in the config, so
        saved and exported)."""
        unknown = sorted(set(options) - set(DECODING_OPTIONS))
        if unknown:
            raise TypeError(f"Unknown decoding option(s) {unknown}; valid ones are "
                            f"{list(DECODING_OPTIONS)}.")
        config = {**self.zoo_config, **options}
        _check_decoding_options(config)
        self.zoo_config = config
        self.__dict__.pop("_eager_logits_processor", None)

    def clean_output(self, ids, lengths, alignment=None):
        """Removes start, ε and source-pad tokens (and PAD/BOS) from search output.

        The graph version of ``strip_eager_tokens`` (core TensorFlow ops only, so
        ``Translator.translate_ids`` stays free of tensorflow-text ops): the kept
        tokens move to the front in their order, the rest is 0-padded and the
        width trimmed to the longest kept row; tokens at or after ``lengths``
        or from an EOS on are dropped too.

        Args:
            ids: int32 ``[B, T]``, a search's best hypotheses (no BOS/EOS, 0-padded).
            lengths: int32 ``[B]``, tokens per row.
            alignment: optional float32 ``[B, T, S]``, row t belonging to
                ``ids[:, t]``: its rows are filtered and moved exactly as the ids
                (kept rows keep their one-hot source position; rows beyond the
                new lengths are 0).

        Returns:
            ``(ids [B, T'], lengths [B], alignment [B, T', S] or None)``.
        """
        import tensorflow as tf

        ids = tf.convert_to_tensor(ids, tf.int32)
        lengths = tf.cast(lengths, tf.int32)
        width = tf.shape(ids)[1]
        positions = tf.range(width)[tf.newaxis, :]
        removed = tf.constant(
            sorted(set(self.special_ids) | {PAD_ID, BOS_ID}), tf.int32)
        is_removed = tf.reduce_any(tf.equal(ids[:, :, tf.newaxis], removed), axis=-1)
        before_eos = tf.equal(
            tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
        keep = tf.logical_and(tf.less(positions, lengths[:, tf.newaxis]), before_eos)
        keep = tf.logical_and(keep, tf.logical_not(is_removed))
        new_lengths = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)
        new_width = tf.reduce_max(tf.concat([new_lengths, [0]], axis=0))
        # Kept positions first, in their order (the sort keys are distinct).
        order = tf.argsort(tf.where(keep, positions, positions + width), axis=1)
        order = order[:, :new_width]
        valid = tf.less(tf.range(new_width)[tf.newaxis, :], new_lengths[:, tf.newaxis])
        new_ids = tf.where(valid, tf.gather(ids, order, batch_dims=1), PAD_ID)
        if alignment is None:
            return new_ids, new_lengths, None
        moved = tf.gather(tf.convert_to_tensor(alignment), order, batch_dims=1)
        new_alignment = tf.where(valid[:, :, tf.newaxis], moved, tf.zeros_like(moved))
        return new_ids, new_lengths, new_alignment

    # ---- carried training state (aligned batching) -------------------------------------

    def zero_states(self, batch_size):
        """Zero LSTM states: a list of ``[h, c]`` (each ``[B, hidden_dim]``) per layer."""
        return [[ops.zeros((batch_size, self.hidden_dim), self.compute_dtype)
                 for _ in range(2)] for _ in self.lstms]

    def initial_training_state(self, batch_size):
        """Zero LSTM states: the aligned stream starts each epoch from them."""
        return self.zero_states(batch_size)

    def training_data(self, pairs, tokenizer, **options):
        """Eager-feasible pairs, per sentence or as the aligned stream.

        See ``keras_attn_zoo.models.eager.training.eager_training_data``.
        """
        return eager_training_data(self, pairs, tokenizer, **options)

    def monitoring_callbacks(self, tokenizer, valid_pairs, run_dir, every):
        """`[SourceUseProbe]` on the first `PROBE_PAIRS` valid pairs (eflomal links
        cached in `<run_dir>/probe_alignments`), every `every` steps, into
        `<run_dir>/source_use.probe.jsonl`: a run's record then tells a model
        still learning to read its source (the gap grows) from one that does not
        (issue 32). None (an empty list) with fewer than two valid pairs."""
        from keras_attn_zoo.models.eager.preprocessing import make_eager_id_pairs
        from keras_attn_zoo.models.eager.probe import SourceUseProbe

        pairs = list(valid_pairs or [])[:PROBE_PAIRS]
        if len(pairs) < 2 or not every:
            return []
        run_dir = pathlib.Path(run_dir)
        id_pairs, _ = make_eager_id_pairs(
            pairs, tokenizer, aligner="eflomal", cache_dir=run_dir / "probe_alignments",
            start_pads=self.zoo_config["start_pads"], special_ids=self.special_ids)
        return [SourceUseProbe(id_pairs, every=every, path=run_dir / "source_use.probe.jsonl")]

    def forward_with_state(self, inputs, state, training=False):
        """Teacher-forced pass from given LSTM states; returns ``(logits, new_states)``.

        The same layers and dropouts as the functional graph; ``state`` (from
        ``initial_training_state`` or a previous call) lets the ``Trainer``
        carry the state across the windows of an aligned stream.
        """
        source_ids = ops.convert_to_tensor(inputs["source_ids"], "int32")
        target_ids = ops.convert_to_tensor(inputs["target_ids"], "int32")
        x = self.input_drop(self.embedding([source_ids, target_ids], training=training),
                            training=training)
        new_states = []
        for lstm, drop, layer_state in zip(self.lstms, self.layer_drops, state):
            x, h, c = lstm(x, initial_state=list(layer_state), training=training)
            new_states.append([h, c])
            x = drop(x, training=training)
        y = self.combiner_drop(self.combiner(x), training=training)
        return self.embedding(y, reverse=True), new_states

    def forward_before_projection(self, inputs, training=False):
        """`(combiner output [B, T, E], tied output layer)`: `call` before its logits.

        Runs the model's own functional graph without its last node, so the
        layers run in `call`'s order and every dropout (embedding, locked)
        draws the same masks; the `Trainer` then projects only the real target
        tokens (in the `small` preset's step the tied projection was 25% and
        the loss 15% of the kernel time). `tests/test_training_step.py` checks
        losses and gradients agree with the full logits.
        """
        hidden = self._before_projection.model(inputs, training=training)
        return hidden, self._project

    def _project(self, hidden):
        return self.embedding(hidden, reverse=True)

    # ---- one step -------------------------------------------------------------------------------

    def step_with_source(self, source_token, previous_token, states):
        """One step from explicit inputs: ``(logits [B, V], new_states)``.

        ``source_token`` and ``previous_token`` are int ``[B]``; ``states`` a
        list of ``[h, c]`` per layer. Used by ``decode_step`` and
        ``EagerStreamer`` (inference only: no dropout).
        """
        source_token = ops.reshape(ops.cast(source_token, "int32"), (-1, 1))
        previous_token = ops.reshape(ops.cast(previous_token, "int32"), (-1, 1))
        x = self.embedding([source_token, previous_token], training=False)[:, 0, :]
        new_states = []
        for lstm, (h, c) in zip(self.lstms, states):
            x, (h, c) = lstm.cell(x, [h, c], training=False)
            new_states.append([h, c])
        return self.embedding(self.combiner(x), reverse=True), new_states

    # ---- step protocol --------------------------------------------------------------------------

    def check_length(self, length, what="sequence"):
        """No length limit: the model keeps a constant-size state."""
        del length, what

    @staticmethod
    def source_end(source_ids):
        """Position of each row's source EOS (first ``EOS_ID``; else its length), int32 [B]."""
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        # One PAD column keeps argmax defined for empty sources.
        is_eos = ops.equal(ops.pad(source_ids, [[0, 0], [0, 1]]), EOS_ID)
        lengths = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)
        first_eos = ops.cast(ops.argmax(ops.cast(is_eos, "int32"), axis=1), "int32")
        return ops.where(ops.any(is_eos, axis=1), first_eos, lengths)

    def stepwise_positions(self, source_ids, target_ids):
        """Real target positions before the source EOS.

        From the source EOS on, `decode_step` injects the source-pad token
        (the paper's source padding) where the teacher-forced pass reads the
        given source, so only the reading positions must agree.
        """
        before_end = (np.arange(np.shape(target_ids)[1])[None, :]
                      < np.asarray(self.source_end(source_ids))[:, None])
        return super().stepwise_positions(source_ids, target_ids) & before_end

    def encode(self, source_ids, training=False):
        """No encoder: the memory is the source itself.

        Returns ``{"source_ids": [B, S + 1]`` (one PAD column appended so that
        empty sources can be indexed), ``"source_end": [B]}`` (see ``source_end``).
        """
        del training
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        return {"source_ids": ops.pad(source_ids, [[0, 0], [0, 1]]),
                "source_end": self.source_end(source_ids)}

    def initial_state(self, memory, max_length):
        """Zero LSTM states; every leaf is batch-first. ``max_length`` is not needed."""
        del max_length
        source_ids = memory["source_ids"]
        batch_size = ops.shape(source_ids)[0]
        return {
            "source_ids": source_ids,
            "source_end": memory["source_end"],
            "lstm": self.zero_states(batch_size),
            "eos_log_prob": ops.zeros((batch_size,), "float32"),
            # The source position read at each step, as a hard "alignment".
            # (At least one column: the searches cannot write empty alignment rows.)
            "attention": ops.zeros(
                (batch_size, ops.maximum(ops.shape(source_ids)[1] - 1, 1)), "float32"),
        }

    def decode_step(self, token, step, state):
        """Decodes position ``step`` from the previous target ``token`` ``[B]``.

        Reads ``x_step`` for ``step < source_end`` and the source-pad token
        afterwards (source padding injection); see the module docstring for
        ``state["eos_log_prob"]``.
        """
        source_ids = state["source_ids"]
        end = state["source_end"]
        step = ops.convert_to_tensor(step, "int32")
        last = ops.shape(source_ids)[1] - 1
        column = ops.take(source_ids, ops.minimum(step, last), axis=1)
        reading = ops.less(step, end)
        source_token = ops.where(reading, column, self.special_ids.source_pad_id)
        states = state["lstm"]
        logits, new_states = self.step_with_source(source_token, token, states)

        batch_size = ops.shape(source_ids)[0]

        def ending():
            eos = ops.full((batch_size,), EOS_ID, "int32")
            eos_logits, _ = self.step_with_source(eos, token, states)
            return ops.log_softmax(eos_logits, axis=-1)[:, EOS_ID]

        def not_ending():
            return ops.zeros((batch_size,), "float32")

        # Only computed once some row has reached its source EOS.
        eos_log_prob = ops.cond(ops.logical_not(ops.all(reading)), ending, not_ending)
        position = ops.where(reading, step, end)
        attention = ops.one_hot(position, ops.maximum(last, 1), dtype="float32")
        return logits, {
            "source_ids": source_ids,
            "source_end": end,
            "lstm": new_states,
            "eos_log_prob": eos_log_prob,
            "attention": attention,
        }


MODEL_ARGUMENTS = constructor_arguments(EagerLSTMTranslator)


def eager_translator(vocabulary_size, preset="small", **overrides):
    """Builds the eager translator (Press & Smith, 2018).

    Args:
        vocabulary_size: SentencePiece size + 3 (start, ε and source-pad ids
            appended; see ``keras_attn_zoo.models.eager.special_ids.eager_vocabulary_size``).
        preset: "tiny" (tests), "small" (E 256, 2 x 512) or "paper" (E 500,
            4 LSTM layers of 1000 units, the paper's dropouts).
        **overrides: any ``EagerLSTMTranslator`` argument.

    Returns:
        An ``EagerLSTMTranslator``: inputs ``{"source_ids", "target_ids"}`` of
        equal length, output float32 logits ``[batch, length, vocabulary_size]``.

    Examples:
        >>> model = eager_translator(8003, preset="tiny")
    """
    config = resolve_preset(EAGER_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    config.setdefault("name", "eager_translator")
    return EagerLSTMTranslator(vocabulary_size, **config)


# What the builder's models add to the tokenizer's ids, known before one is built
# (`keras_attn_zoo.models.extra_token_count`).
eager_translator.extra_token_count = EagerLSTMTranslator.extra_token_count

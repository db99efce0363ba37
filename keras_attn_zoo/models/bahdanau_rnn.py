"""RNNsearch (Bahdanau et al., 2015): bidirectional GRU encoder, additive attention.

`BahdanauRNN` follows the zoo's model pattern (the keras-hub one, as
`Seq2SeqTransformer`): a `keras.Model` whose teacher-forcing graph is built
functionally in `__init__` (inputs `{"source_ids", "target_ids"}`, output
float32 logits `[B, T, V]`), plus the step protocol `encode / initial_state /
decode_step` reusing the same layer objects, so the shared searches, the
exporter and `keras_attn_zoo.training.Trainer` drive it unchanged.

The math (i = target position, j = source position, H = `hidden_dim`):

* encoder: `h_j = [→h_j; ←h_j]`, a bidirectional GRU over the source
  embeddings. It is masked with `source_ids != 0`, so the backward GRU starts
  at each sentence's real last token and padding never changes `h_j`;
* attention: `e_ij = v^T tanh(W s_{i-1} + U h_j)`, `α_ij = softmax_j(e_ij)`,
  `c_i = Σ_j α_ij h_j` (`BahdanauAttention`; `U h` once per sentence);
* decoder: `s_0 = tanh(W_s ←h_1)` (the backward state at the first token),
  `s_i = GRU(s_{i-1}, [E y_{i-1}; c_i])` - the context uses `s_{i-1}`, the
  paper's order;
* output: `t_i = readout([s_i; c_i; E y_{i-1}])`, logits `W_o t_i` in float32.
  `output="maxout"` (paper): `t_i = maxout(U_o [...])`, 2l units max-pooled
  in adjacent pairs to l = `maxout_dim`; `output="dense"` (the seed study):
  one linear layer from `[s_i; c_i; E y_{i-1}]` straight to the vocabulary.
  The arXiv appendix (A.2.2) writes the readout with `s_{i-1}` while the main
  text and this zoo's reference use `s_i`; the zoo follows the reference.

Teacher forcing runs the recurrence with `keras.ops.scan` (Keras 3's
`keras.layers.RNN` has no `constants`): one step is "attend with `s_{i-1}`,
then GRU", the same Python function `decode_step` runs, so the two agree. For
speed (issue 36) the teacher-forced pass computes the GRU's input projection
of the embeddings, `E y_{i-1} W_E + b`, for all positions before the loop and
adds `c_i W_c` inside it, where a decoding step multiplies `[E y_{i-1}; c_i]`
by `W` at once: the same sum, in another order. The encoder's GRUs
(`layers.ProjectedGRU`) likewise project all source embeddings at once.

Scheduled sampling (the seed study's "teacher forcing ratio", Bengio et al.
2015): with `teacher_forcing_ratio=p < 1` (or a `teacher_forcing_decay`), in
`training=True` calls each target position i >= 1 is fed the gold token
`y_{i-1}` with probability p and otherwise the model's own previous argmax
prediction (no gradient through the choice). The recurrence then has to compute
the logits inside the loop. With `training=False` (evaluation, rescoring,
`check_cached_decoding`) the graph is always pure teacher forcing. `p` lives in
a non-trainable variable (the model then has one more weight) that
`TeacherForcingSchedule` (a callback for `Trainer` and `fit`, returned by the
model's `training_callbacks()`, which the recipe's workflow installs) updates
from the step count; the seed study found p = 0.5 better than 0.8, the default
1.0 is plain teacher forcing.

Long inputs: the model has no length limit (`max_length=None`): the encoder is
recurrent and the attention is over however many positions the source has.
Cost is O(S) per decoding step and memory O(S) per hypothesis, so a source of
thousands of tokens translates (slowly). An int `max_length` makes
`check_length` and the exporter refuse longer inputs with a clear error.

Embeddings: separate source and target embeddings by default (the paper has
two vocabularies); `share_embeddings=True` uses one matrix for both sides of the
zoo's joint SentencePiece vocabulary (half the embedding parameters). The
output projection is never tied (its input width differs from the embedding).

GRUs use `reset_after=False` (the paper's and Cho et al.'s GRU: the reset gate
acts before the recurrent matrix); `reset_after=True` is Keras' cuDNN variant.
Dropout (`dropout`, absent from the paper and named as missing by the seed
study) applies to the source and target embeddings and to the readout
(`t_i`, or `[s_i; c_i; E y_{i-1}]` for the dense output) before the
projection. Initialisation uses Keras' defaults (Glorot uniform kernels,
orthogonal recurrent kernels) rather than the paper's Gaussians.

References:
    Bahdanau, Cho, Bengio, "Neural Machine Translation by Jointly Learning to
    Align and Translate", ICLR 2015 (arXiv:1409.0473).
    Hiemsch, "Incorporating Attention Mechanisms in RNN-based Encoder-Decoder
    Models" (the seed study; `seeds/bahdanau-attention-rnn.txt`).
    Bengio et al., "Scheduled Sampling for Sequence Prediction with Recurrent
    Neural Networks", NeurIPS 2015.
    Goodfellow et al., "Maxout Networks", ICML 2013.
"""

import math

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import padding_mask_from_ids
from keras_attn_zoo.layers.projected_gru import ProjectedGRU
from keras_attn_zoo.layers.rnnsearch_decoder import RNNSearchDecoder
from keras_attn_zoo.models.presets import constructor_arguments
from keras_attn_zoo.models.presets import resolve_preset
from keras_attn_zoo.models.zoo_model import ZooModel

DECAY_SCHEDULES = ("linear", "exponential", "inverse_sigmoid")

BAHDANAU_PRESETS = {
    # For tests: seconds to build and run.
    "tiny": dict(embedding_dim=16, hidden_dim=32, attention_dim=32,
                 output="maxout", maxout_dim=16, dropout=0.0),
    # The seed study's sizes (embeddings 256, hidden 512, dense output); dropout
    # added, as the study names its absence as a weakness.
    "small": dict(embedding_dim=256, hidden_dim=512, attention_dim=512,
                  output="dense", maxout_dim=256, dropout=0.2),
    # The paper's RNNsearch: m = 620, n = n' = 1000, maxout l = 500, no dropout.
    "base": dict(embedding_dim=620, hidden_dim=1000, attention_dim=1000,
                 output="maxout", maxout_dim=500, dropout=0.0),
}


def teacher_forcing_probability(step, initial, decay=None):
    """The teacher-forcing probability p after `step` training steps.

    Args:
        step: training steps done (int).
        initial: p at step 0.
        decay: `None` (constant) or a dict `{"schedule", "final", "steps"}`:
            * `"linear"`: from `initial` to `final` over `steps`, then `final`;
            * `"exponential"`: `final + (initial - final) * exp(-5 step / steps)`
              (under 1% of the gap is left after `steps`);
            * `"inverse_sigmoid"` (Bengio et al. 2015's shape):
              `final + (initial - final) / (1 + exp(10 (step / steps - 0.5)))`,
              halfway at `steps / 2`.
    """
    if not decay:
        return float(initial)
    final, steps = float(decay["final"]), max(float(decay["steps"]), 1.0)
    progress = max(float(step), 0.0) / steps
    gap = float(initial) - final
    schedule = decay["schedule"]
    if schedule == "linear":
        return final + gap * max(0.0, 1.0 - progress)
    if schedule == "exponential":
        return final + gap * math.exp(-5.0 * progress)
    if schedule == "inverse_sigmoid":
        exponent = min(10.0 * (progress - 0.5), 700.0)
        return final + gap / (1.0 + math.exp(exponent))
    raise ValueError(f"Unknown schedule {schedule!r}; choose one of {DECAY_SCHEDULES}.")


def _validate_decay(decay):
    if decay is None:
        return None
    decay = dict(decay)
    missing = {"schedule", "final", "steps"} - set(decay)
    unknown = set(decay) - {"schedule", "final", "steps"}
    if missing or unknown:
        raise ValueError(
            "teacher_forcing_decay must be a dict with exactly the keys 'schedule', "
            f"'final', 'steps'; missing {sorted(missing)}, unknown {sorted(unknown)}."
        )
    if decay["schedule"] not in DECAY_SCHEDULES:
        raise ValueError(
            f"Unknown teacher_forcing_decay schedule {decay['schedule']!r}; choose one "
            f"of {DECAY_SCHEDULES}."
        )
    if not 0.0 <= float(decay["final"]) <= 1.0:
        raise ValueError(f"teacher_forcing_decay final={decay['final']} is not in [0, 1].")
    if int(decay["steps"]) < 1:
        raise ValueError(f"teacher_forcing_decay steps={decay['steps']} must be >= 1.")
    return decay


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BahdanauRNN(ZooModel):
    """RNNsearch: bidirectional GRU encoder, additive attention, GRU decoder.

    Inputs `{"source_ids": int32[B, S], "target_ids": int32[B, T]}` (0 =
    padding, `target_ids` starts with BOS); output float32 logits
    `[B, T, vocabulary_size]`. See the module docstring for the equations and
    the choices made.

    Args:
        vocabulary_size: joint vocabulary size.
        embedding_dim: word embedding size m (paper 620, seed study 256).
        hidden_dim: GRU size n of each encoder direction and of the decoder
            (paper 1000, seed study 512).
        attention_dim: alignment model size n' (paper 1000); None = hidden_dim.
        output: `"maxout"` (paper) or `"dense"` (seed study).
        maxout_dim: maxout units l (paper 500); None = hidden_dim // 2.
        dropout: embedding and readout dropout (paper: none).
        share_embeddings: one embedding matrix for source and target.
        normalize_attention: weight-normalised attention (`g v / ‖v‖` + bias).
        reset_after: Keras' cuDNN-style GRU instead of the paper's.
        teacher_forcing_ratio: probability p of feeding the gold previous token
            in training (1.0: plain teacher forcing; seed study best: 0.5).
        teacher_forcing_decay: optional `{"schedule", "final", "steps"}` decay
            of p (see `teacher_forcing_probability`), applied by the
            `TeacherForcingSchedule` callback of `training_callbacks()`.
        max_length: None (no limit) or the longest accepted sequence.
        seed: seed of scheduled sampling and in-loop dropout.

    Examples:
        >>> model = BahdanauRNN(8000, embedding_dim=256, hidden_dim=512, output="dense")
        >>> memory = model.encode(source_ids)
        >>> state = model.initial_state(memory, max_length=20)
        >>> logits, state = model.decode_step(bos, 0, state)  # state["attention"]: [B, S]

    References:
        Bahdanau, Cho, Bengio, ICLR 2015 (arXiv:1409.0473).
    """

    # `check_length` (from `ZooModel`) enforces the optional `max_length`.
    length_advice = "raise max_length (RNNsearch itself has no length limit)."

    def __init__(
        self,
        vocabulary_size,
        embedding_dim=620,
        hidden_dim=1000,
        attention_dim=1000,
        output="maxout",
        maxout_dim=500,
        dropout=0.0,
        share_embeddings=False,
        normalize_attention=False,
        reset_after=False,
        teacher_forcing_ratio=1.0,
        teacher_forcing_decay=None,
        max_length=None,
        seed=None,
        **kwargs,
    ):
        # `output` is checked by `RNNSearchDecoder`.
        if not 0.0 <= float(teacher_forcing_ratio) <= 1.0:
            raise ValueError(
                f"teacher_forcing_ratio={teacher_forcing_ratio} is not a probability.")
        teacher_forcing_decay = _validate_decay(teacher_forcing_decay)
        attention_dim = attention_dim or hidden_dim
        maxout_dim = maxout_dim or hidden_dim // 2
        config = dict(
            vocabulary_size=vocabulary_size,
            embedding_dim=embedding_dim,
            hidden_dim=hidden_dim,
            attention_dim=attention_dim,
            output=output,
            maxout_dim=maxout_dim,
            dropout=dropout,
            share_embeddings=share_embeddings,
            normalize_attention=normalize_attention,
            reset_after=reset_after,
            teacher_forcing_ratio=float(teacher_forcing_ratio),
            teacher_forcing_decay=teacher_forcing_decay,
            max_length=max_length,
            seed=seed,
        )
        scheduled_sampling = teacher_forcing_ratio < 1.0 or teacher_forcing_decay is not None
        decoder = RNNSearchDecoder(
            vocabulary_size, embedding_dim, hidden_dim, attention_dim,
            output=output, maxout_dim=maxout_dim, dropout=dropout,
            normalize_attention=normalize_attention, reset_after=reset_after,
            scheduled_sampling=scheduled_sampling,
            teacher_forcing_ratio=float(teacher_forcing_ratio), seed=seed,
            name="decoder",
        )
        if share_embeddings:
            source_embedding = decoder.embedding
        else:
            source_embedding = keras.layers.Embedding(
                vocabulary_size, embedding_dim, name="source_embedding")
        source_dropout = keras.layers.Dropout(dropout, seed=seed, name="source_dropout")
        encoder = keras.layers.Bidirectional(
            ProjectedGRU(hidden_dim, return_sequences=True, reset_after=reset_after,
                         name="gru"),  # weights named "forward_gru/...": not by process history
            merge_mode="concat", name="encoder",
        )

        # Functional graph (teacher forcing).
        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
        source_mask = padding_mask_from_ids(source_ids)
        x = source_dropout(source_embedding(source_ids))
        memory = encoder(x, mask=source_mask)
        logits = decoder(target_ids, memory, source_mask)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            **kwargs,
        )

        self.zoo_config = config
        self.source_embedding = source_embedding
        self.source_dropout = source_dropout
        self.encoder = encoder
        self.decoder = decoder

    def forward_before_projection(self, inputs, training=False):
        """`(t_i [B, T, l], the output projection)`: `call` before its logits.

        The encoder, then the decoder's teacher-forced pass, in the order the
        functional graph runs them (same dropout draws); None while scheduled
        sampling trains (`RNNSearchDecoder.teacher_forced_features`).
        """
        encoded = self.encode(inputs["source_ids"], training=training)
        features = self.decoder.teacher_forced_features(
            inputs["target_ids"], encoded["memory"], encoded["memory_mask"], training=training)
        return None if features is None else (features, self.decoder.projection)

    # ---- step protocol ----------------------------------------------------------

    def encode(self, source_ids, training=False):
        """Annotations `{"memory": [B, S, 2H], "memory_mask": [B, S]}`."""
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        mask = padding_mask_from_ids(source_ids)
        x = self.source_dropout(self.source_embedding(source_ids), training=training)
        memory = self.encoder(x, mask=mask, training=training)
        return {"memory": memory, "memory_mask": mask}

    def initial_state(self, memory, max_length=None):
        """`s_0`, the memory and `U h` (computed once); every leaf is batch-first.

        `max_length` is accepted for the protocol; the state does not grow.
        """
        return self.decoder.initial_state(memory["memory"], memory["memory_mask"])

    def decode_step(self, token, step, state):
        """Decodes one position from the previous `token` `[B]`.

        Returns float32 logits `[B, V]` and the new state, whose `"attention"`
        holds this step's weights `α_i` `[B, S]` (the alignment).
        """
        del step  # the recurrence carries position information
        return self.decoder.step(token, state)

    def attention_maps(self, source_ids, target_ids):
        """`{"cross": float32 [1, B, 1, T, S]}`: one layer, one head, teacher-forced.

        Row `[0, b, 0, i]` is `α_i` of sentence `b`, what `decode_step` leaves in
        `state["attention"]` at position i when fed the same targets.
        """
        memory = self.encode(source_ids)
        _, weights = self.decoder(
            ops.convert_to_tensor(target_ids, "int32"), memory["memory"],
            memory["memory_mask"], return_attention=True)
        weights = ops.convert_to_numpy(ops.cast(weights, "float32"))
        return {"cross": weights[None, :, None]}

    # ---- scheduled sampling ---------------------------------------------------------

    @property
    def teacher_forcing_ratio(self):
        """The current teacher-forcing probability p (1.0 without sampling)."""
        if not self.decoder.scheduled_sampling:
            return 1.0
        return float(ops.convert_to_numpy(self.decoder.teacher_forcing))

    def set_teacher_forcing_ratio(self, probability):
        """Sets the probability of feeding the reference token (scheduled sampling)."""
        if not self.decoder.scheduled_sampling:
            raise ValueError(
                "This model was built without scheduled sampling; build it with "
                "teacher_forcing_ratio < 1 or a teacher_forcing_decay.")
        if not 0.0 <= float(probability) <= 1.0:
            raise ValueError(f"{probability} is not a probability.")
        self.decoder.teacher_forcing.assign(float(probability))

    def teacher_forcing_ratio_at(self, step):
        """p after `step` training steps, from the constructor's schedule."""
        return teacher_forcing_probability(
            step, self.zoo_config["teacher_forcing_ratio"],
            self.zoo_config["teacher_forcing_decay"])

    def update_teacher_forcing(self, step):
        """Sets p to its scheduled value for `step`; returns it."""
        probability = self.teacher_forcing_ratio_at(step)
        if self.decoder.scheduled_sampling:
            self.set_teacher_forcing_ratio(probability)
        return probability

    def training_callbacks(self):
        """`[TeacherForcingSchedule()]` when built with a `teacher_forcing_decay`.

        Without it nothing moves p during training (a constant ratio needs no
        callback).
        """
        if self.zoo_config["teacher_forcing_decay"] is None:
            return []
        return [TeacherForcingSchedule()]


class TeacherForcingSchedule(keras.callbacks.Callback):
    """Applies a `BahdanauRNN`'s `teacher_forcing_decay` as training goes.

    Works with `keras_attn_zoo.training.Trainer` (`callbacks=[...]`, through
    `on_step_end`) and with `model.fit` (through `on_train_batch_begin`).
    """

    def on_step_end(self, trainer, step, logs=None):
        trainer.model.update_teacher_forcing(step)
        if logs is not None:
            logs["teacher_forcing"] = trainer.model.teacher_forcing_ratio

    def on_train_batch_begin(self, batch, logs=None):
        step = int(ops.convert_to_numpy(self.model.optimizer.iterations))
        self.model.update_teacher_forcing(step)


MODEL_ARGUMENTS = constructor_arguments(BahdanauRNN)


def bahdanau_rnn(vocabulary_size, preset="small", **overrides):
    """Builds RNNsearch (Bahdanau et al., 2015).

    Args:
        vocabulary_size: joint vocabulary size.
        preset: `"tiny"` (tests), `"small"` (the seed study: embeddings 256,
            hidden 512, dense output, dropout 0.2) or `"base"` (the paper:
            embeddings 620, hidden 1000, attention 1000, maxout 500).
        **overrides: any `BahdanauRNN` argument, e.g. `teacher_forcing_ratio=0.5`.

    Returns:
        A `BahdanauRNN`: inputs `{"source_ids", "target_ids"}`, output float32
        logits `[batch, target_length, vocabulary_size]`.

    Examples:
        >>> model = bahdanau_rnn(8000, preset="tiny")
    """
    config = resolve_preset(BAHDANAU_PRESETS, preset, overrides, MODEL_ARGUMENTS)
    config.setdefault("name", "bahdanau_rnn")
    return BahdanauRNN(vocabulary_size, **config)

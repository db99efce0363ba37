"""The attentive GRU decoder of RNNsearch (Bahdanau et al., 2015).

The equations and the choices made are in `keras_attn_zoo.models.bahdanau_rnn`.
"""

import keras
from keras import ops

from keras_attn_zoo.layers.bahdanau_attention import BahdanauAttention
from keras_attn_zoo.layers.maxout import Maxout
from keras_attn_zoo.layers.projected_gru import gru_biases
from keras_attn_zoo.layers.projected_gru import gru_update

OUTPUT_KINDS = ("maxout", "dense")


def _offset_seed(seed, offset):
    """Distinct seeds for the random streams of one model (None stays None)."""
    return None if seed is None else seed + offset


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class RNNSearchDecoder(keras.layers.Layer):
    """The attentive GRU decoder of RNNsearch, teacher-forced or one step at a time.

    Owns the target embedding, the attention, `W_s`, the GRU cell, the readout
    and the vocabulary projection. `call` runs the whole target with
    `keras.ops.scan`; `initial_state` + `step` run it one position at a time
    with the same sublayers (the model's `decode_step`).

    Args:
        vocabulary_size: target vocabulary size.
        embedding_dim: target embedding width.
        hidden_dim: GRU units; the memory (encoder output) has
            `2 * hidden_dim` features.
        attention_dim: width of the attention's hidden layer.
        output: `"maxout"` or `"dense"` (see `models.bahdanau_rnn`).
        maxout_dim: maxout units l (the readout has 2l before pooling).
        dropout: dropout on target embeddings and the readout.
        normalize_attention: weight-normalised attention.
        reset_after: GRU variant (False: the paper's).
        scheduled_sampling: build the scheduled-sampling training path and
            the `teacher_forcing_ratio` variable.
        teacher_forcing_ratio: initial p of that variable.
        seed: seed of the sampling coins and in-loop dropout masks.

    Call arguments:
        target_ids: int32 `[B, T]`, decoder inputs (BOS first, 0 = padding).
        memory: `[B, S, 2 * hidden_dim]` encoder annotations.
        memory_mask: boolean `[B, S]`.
        training: Python bool.
        return_attention: also return float32 weights `[B, T, S]`.

    Examples:
        >>> decoder = RNNSearchDecoder(50, 8, 16, 16)
        >>> logits = decoder(keras.ops.ones((2, 3), "int32"),
        ...                  keras.random.normal((2, 5, 32)), keras.ops.ones((2, 5), "bool"))

    References:
        Bahdanau et al., ICLR 2015, appendix A.2.2.
    """

    def __init__(self, vocabulary_size, embedding_dim, hidden_dim, attention_dim,
                 output="maxout", maxout_dim=None, dropout=0.0,
                 normalize_attention=False, reset_after=False,
                 scheduled_sampling=False, teacher_forcing_ratio=1.0, seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        if output not in OUTPUT_KINDS:
            raise ValueError(f"output must be one of {OUTPUT_KINDS}, got {output!r}.")
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.attention_dim = attention_dim
        self.output_kind = output
        self.maxout_dim = maxout_dim if maxout_dim is not None else hidden_dim // 2
        self.dropout = dropout
        self.normalize_attention = normalize_attention
        self.reset_after = reset_after
        self.scheduled_sampling = scheduled_sampling
        self.teacher_forcing_ratio = teacher_forcing_ratio
        self.seed = seed
        self.memory_dim = 2 * hidden_dim
        policy = self.dtype_policy

        self.embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=policy, name="target_embedding")
        self.embedding_dropout = keras.layers.Dropout(
            dropout, seed=_offset_seed(seed, 1), dtype=policy)
        self.attention = BahdanauAttention(
            attention_dim, normalize=normalize_attention, dtype=policy, name="attention")
        self.initial_dense = keras.layers.Dense(
            hidden_dim, activation="tanh", dtype=policy, name="initial_state")
        self.cell = keras.layers.GRUCell(
            hidden_dim, reset_after=reset_after, dtype=policy, name="gru_cell")
        if output == "maxout":
            self.readout_dense = keras.layers.Dense(
                2 * self.maxout_dim, dtype=policy, name="readout")
            self.maxout = Maxout(self.maxout_dim, 2, dtype=policy, name="maxout")
        else:
            self.readout_dense = None
            self.maxout = None
        self.readout_dropout = keras.layers.Dropout(
            dropout, seed=_offset_seed(seed, 2), dtype=policy)
        self.projection = keras.layers.Dense(
            vocabulary_size, dtype="float32", name="logits")
        self.seed_generator = keras.random.SeedGenerator(_offset_seed(seed, 3))

    @property
    def readout_input_dim(self):
        return self.hidden_dim + self.memory_dim + self.embedding_dim

    @property
    def readout_dim(self):
        return self.maxout_dim if self.output_kind == "maxout" else self.readout_input_dim

    def build(self, input_shape=None):
        if not self.embedding.built:
            self.embedding.build()
        self.attention.build((None, self.hidden_dim), (None, None, self.memory_dim))
        self.initial_dense.build((None, self.hidden_dim))
        self.cell.build((None, self.embedding_dim + self.memory_dim))
        if self.readout_dense is not None:
            self.readout_dense.build((None, self.readout_input_dim))
        self.projection.build((None, self.readout_dim))
        if self.scheduled_sampling:
            self.teacher_forcing = self.add_weight(
                name="teacher_forcing_ratio", shape=(), trainable=False,
                initializer=keras.initializers.Constant(self.teacher_forcing_ratio),
                dtype="float32",
            )
        self.built = True

    # ---- pieces shared by teacher forcing and stepping -----------------------

    def initial_state(self, memory, memory_mask):
        """`s_0`, `U h` and the memory: everything a decoding step reads."""
        backward_first = memory[:, 0, self.hidden_dim:]  # ←h_1
        return {
            "hidden": self.initial_dense(backward_first),
            "memory": memory,
            "keys": self.attention.precompute_keys(memory),
            "memory_mask": memory_mask,
            "attention": ops.zeros_like(ops.cast(memory_mask, "float32")),
        }

    def _recurrent_weights(self):
        """The GRU's recurrent kernel slices and biases, taken once per pass.

        Slicing a variable inside the loop would make its gradient a full-size
        `StridedSliceGrad` per step (see `layers.projected_recurrent`).
        """
        units = self.hidden_dim
        input_bias, recurrent_bias = gru_biases(self.cell)
        recurrent_kernel = self.cell.recurrent_kernel
        candidate_kernel = None
        if not self.reset_after:
            recurrent_kernel = self.cell.recurrent_kernel[:, :2 * units]
            candidate_kernel = self.cell.recurrent_kernel[:, 2 * units:]
        return {"input_bias": input_bias, "recurrent_bias": recurrent_bias,
                "recurrent_kernel": recurrent_kernel, "candidate_kernel": candidate_kernel}

    def _recurrence(self, project_input, hidden, memory, keys, memory_mask, gru_weights):
        """Attend with `s_{i-1}`, then `s_i = GRU(s_{i-1}, [E y_{i-1}; c_i])`.

        `project_input(c_i)` returns the GRU's input projection
        `[E y_{i-1}; c_i] W + b`: the teacher-forced pass has `E y W_E + b` of
        every position from before its loop and adds `c_i W_c` here; a single
        step multiplies the concatenation. `gru_weights` is `_recurrent_weights()`.
        """
        context, attention = self.attention(hidden, memory, memory_mask=memory_mask,
                                            keys=keys)
        projected_input = project_input(ops.cast(context, self.compute_dtype))
        recurrent = ops.matmul(hidden, gru_weights["recurrent_kernel"])
        if gru_weights["recurrent_bias"] is not None:
            recurrent = recurrent + gru_weights["recurrent_bias"]
        new_hidden = gru_update(self.cell, projected_input, hidden, recurrent,
                                gru_weights["candidate_kernel"])
        return new_hidden, context, attention

    def _whole_input_projection(self, embedded, gru_weights):
        """`project_input` of one step from its embedded previous token."""
        def project_input(context):
            projected = ops.matmul(ops.concatenate([embedded, context], axis=-1),
                                   self.cell.kernel)
            if gru_weights["input_bias"] is not None:
                projected = projected + gru_weights["input_bias"]
            return projected
        return project_input

    def _readout(self, hidden, context, embedded_previous, training=None,
                 dropout_mask=None):
        """Float32 logits from `[s_i; c_i; E y_{i-1}]`."""
        return self.projection(self._readout_features(
            hidden, context, embedded_previous, training, dropout_mask))

    def _readout_features(self, hidden, context, embedded_previous, training=None,
                          dropout_mask=None):
        """`t_i`, what the output projection reads (after the readout's dropout)."""
        features = ops.concatenate([hidden, context, embedded_previous], axis=-1)
        if self.output_kind == "maxout":
            features = self.maxout(self.readout_dense(features))
        if dropout_mask is not None:
            return features * dropout_mask
        return self.readout_dropout(features, training=training)

    def step(self, token, state):
        """One position: `token` int `[B]` -> (float32 logits `[B, V]`, new state)."""
        embedded = self.embedding(ops.cast(token, "int32"))
        gru_weights = self._recurrent_weights()
        hidden, context, attention = self._recurrence(
            self._whole_input_projection(embedded, gru_weights), state["hidden"],
            state["memory"], state["keys"], state["memory_mask"], gru_weights)
        logits = self._readout(hidden, context, embedded)
        new_state = dict(state)
        new_state["hidden"] = hidden
        new_state["attention"] = attention
        return logits, new_state

    # ---- teacher forcing -------------------------------------------------------

    def call(self, target_ids, memory, memory_mask, training=None,
             return_attention=False):
        target_ids = ops.cast(target_ids, "int32")
        state = self.initial_state(memory, memory_mask)
        if training and self.scheduled_sampling:
            logits, weights = self._sampled_pass(target_ids, state)
        else:
            logits, weights = self._teacher_forced_pass(target_ids, state, training)
        if return_attention:
            return logits, weights
        return logits

    def _initial_carry(self, state):
        return {
            "hidden": state["hidden"],
            "context": ops.zeros_like(state["memory"][:, 0, :]),
            "attention": state["attention"],
        }

    def teacher_forced_features(self, target_ids, memory, memory_mask, training=None):
        """`call`'s teacher-forced pass up to its readout `t_i` `[B, T, l]`
        (same layers, same order, same dropout draws); `projection(t_i)`
        are the logits. None with scheduled sampling in training (its
        readout feeds back its own predictions)."""
        if training and self.scheduled_sampling:
            return None
        state = self.initial_state(memory, memory_mask)
        return self._teacher_forced_pass(ops.cast(target_ids, "int32"), state, training,
                                         project=False)[0]

    def _teacher_forced_pass(self, target_ids, state, training, project=True):
        embedded = self.embedding_dropout(self.embedding(target_ids), training=training)
        memory, keys, mask = state["memory"], state["keys"], state["memory_mask"]
        gru_weights = self._recurrent_weights()
        # E y_{i-1} W_E + b for every position in one matmul, before the loop
        # (time-major, as the loop reads it); the loop adds c_i W_c.
        embedded_kernel = self.cell.kernel[:self.embedding_dim]
        context_kernel = self.cell.kernel[self.embedding_dim:]
        projected_embedded = ops.matmul(ops.transpose(embedded, (1, 0, 2)), embedded_kernel)
        if gru_weights["input_bias"] is not None:
            projected_embedded = projected_embedded + gru_weights["input_bias"]

        def body(carry, projected_embedded_previous):
            def project_input(context):
                return projected_embedded_previous + ops.matmul(context, context_kernel)

            hidden, context, attention = self._recurrence(
                project_input, carry["hidden"], memory, keys, mask, gru_weights)
            new = {"hidden": hidden, "context": context, "attention": attention}
            return new, new

        _, outputs = ops.scan(body, self._initial_carry(state), projected_embedded)
        hidden = ops.transpose(outputs["hidden"], (1, 0, 2))
        context = ops.transpose(outputs["context"], (1, 0, 2))
        attention = ops.transpose(outputs["attention"], (1, 0, 2))
        readout = self._readout if project else self._readout_features
        return readout(hidden, context, embedded, training=training), attention

    def _sampled_pass(self, target_ids, state):
        """Scheduled sampling: position i >= 1 reads y_{i-1} with probability p."""
        memory, keys, mask = state["memory"], state["keys"], state["memory_mask"]
        batch_size, length = ops.shape(target_ids)[0], ops.shape(target_ids)[1]
        time_major = (length, batch_size)
        coins = keras.random.uniform(time_major, seed=self.seed_generator)
        use_gold = ops.less(coins, ops.cast(self.teacher_forcing, "float32"))
        use_gold = ops.logical_or(use_gold, ops.equal(ops.arange(length), 0)[:, None])
        # -1 marks "feed the previous prediction". The loop runs over time
        # indices and reads the [T, ...] tensors itself (Keras' TF `scan` cannot
        # check several sequences of unknown length against each other).
        fed_gold = ops.where(use_gold, ops.transpose(target_ids), -1)
        masks = {}
        if self.dropout > 0:
            ones = ops.ones((length, batch_size, self.embedding_dim), self.compute_dtype)
            masks["embedding"] = keras.random.dropout(
                ones, self.dropout, seed=self.seed_generator)
            ones = ops.ones((length, batch_size, self.readout_dim), self.compute_dtype)
            masks["readout"] = keras.random.dropout(
                ones, self.dropout, seed=self.seed_generator)

        gru_weights = self._recurrent_weights()

        def body(carry, position):
            predicted = ops.cast(ops.argmax(carry["logits"], axis=-1), "int32")
            gold = ops.take(fed_gold, position, axis=0)
            token = ops.where(ops.greater_equal(gold, 0), gold, predicted)
            embedded = self.embedding(token)
            if "embedding" in masks:
                embedded = embedded * ops.take(masks["embedding"], position, axis=0)
            readout_mask = None
            if "readout" in masks:
                readout_mask = ops.take(masks["readout"], position, axis=0)
            hidden, context, attention = self._recurrence(
                self._whole_input_projection(embedded, gru_weights), carry["hidden"], memory,
                keys, mask, gru_weights)
            logits = self._readout(hidden, context, embedded, training=True,
                                   dropout_mask=readout_mask)
            new = {"hidden": hidden, "context": context, "attention": attention,
                   "logits": logits}
            return new, new

        carry = self._initial_carry(state)
        carry["logits"] = ops.zeros((batch_size, self.vocabulary_size), "float32")
        _, outputs = ops.scan(body, carry, ops.arange(length))
        logits = ops.transpose(outputs["logits"], (1, 0, 2))
        weights = ops.transpose(outputs["attention"], (1, 0, 2))
        return logits, weights

    def compute_output_spec(self, target_ids, memory, memory_mask, training=None,
                            return_attention=False):
        batch, length = target_ids.shape[0], target_ids.shape[1]
        logits = keras.KerasTensor((batch, length, self.vocabulary_size), "float32")
        if return_attention:
            return logits, keras.KerasTensor((batch, length, memory.shape[1]), "float32")
        return logits

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "embedding_dim": self.embedding_dim,
            "hidden_dim": self.hidden_dim,
            "attention_dim": self.attention_dim,
            "output": self.output_kind,
            "maxout_dim": self.maxout_dim,
            "dropout": self.dropout,
            "normalize_attention": self.normalize_attention,
            "reset_after": self.reset_after,
            "scheduled_sampling": self.scheduled_sampling,
            "teacher_forcing_ratio": self.teacher_forcing_ratio,
            "seed": self.seed,
        })
        return config

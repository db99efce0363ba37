"""Additive (Bahdanau) attention: `e_ij = v^T tanh(W s_{i-1} + U h_j)`."""

import math

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import masked_softmax


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BahdanauAttention(keras.layers.Layer):
    """Additive attention of RNNsearch (Bahdanau et al., 2015).

    For a decoder state `s` (the query) and encoder annotations `h_j` (the
    memory):

        e_j = v^T tanh(W s + U h_j),   α = softmax_j(e_j),   c = Σ_j α_j h_j.

    `U h_j` does not depend on the decoder state, so it is computed once per
    sentence with `precompute_keys(memory)` and passed back as `keys=` at every
    decoder step (teacher forcing and incremental decoding use the same cache).

    Scores are computed and normalised in float32 (mixed precision safe);
    padded source positions get the finite mask value of
    `attention_utils.masked_softmax`, so their weight is exactly 0 and a
    float16 model never sees `-inf` or NaN.

    `normalize=True` is the weight-normalised variant (Salimans & Kingma 2016,
    as popularised by TensorFlow's "normalized Bahdanau" attention):
    `e_j = g · (v / ‖v‖)^T tanh(W s + U h_j + b)` with a trainable scalar `g`
    (initialised to `1/sqrt(units)`) and bias `b`. The paper's form (the
    default) has no bias inside the tanh.

    Args:
        units: width `n'` of the alignment model (paper: 1000).
        normalize: use the weight-normalised variant.
        kernel_initializer: initializer of `W`, `U` and `v`.

    Call arguments:
        query: decoder state `s_{i-1}`, `[B, d_q]` (one step) or `[B, T, d_q]`
            (several independent queries at once).
        memory: annotations `h`, `[B, S, d_m]`.
        memory_mask: optional boolean `[B, S]`, `True` for real tokens.
        keys: optional `precompute_keys(memory)`, `[B, S, units]`.
        training: unused (no dropout), accepted for the Keras protocol.

    Returns:
        `(context, weights)`: context `[B, d_m]` (or `[B, T, d_m]`) in the
        layer's compute dtype and float32 weights `[B, S]` (or `[B, T, S]`)
        that sum to 1 over the real source positions and are 0 on padding.

    Examples:
        >>> attention = BahdanauAttention(units=8)
        >>> memory = keras.random.normal((2, 5, 6))
        >>> mask = keras.ops.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "bool")
        >>> keys = attention.precompute_keys(memory)
        >>> context, weights = attention(keras.random.normal((2, 4)), memory,
        ...                              memory_mask=mask, keys=keys)
        >>> tuple(context.shape), tuple(weights.shape)
        ((2, 6), (2, 5))

    References:
        Bahdanau, Cho, Bengio, "Neural Machine Translation by Jointly Learning
        to Align and Translate", ICLR 2015 (arXiv:1409.0473), appendix A.1.2.
        Salimans, Kingma, "Weight Normalization", NeurIPS 2016.
    """

    def __init__(self, units, normalize=False, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.normalize = normalize
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # W (query) and U (keys); the paper writes no bias here.
        self.query_dense = keras.layers.Dense(
            units, use_bias=False, kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy, name="query_projection",
        )
        self.key_dense = keras.layers.Dense(
            units, use_bias=False, kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy, name="key_projection",
        )

    def build(self, query_shape, memory_shape=None):
        self.query_dense.build(query_shape)
        if memory_shape is None:
            raise ValueError("BahdanauAttention.build needs the memory shape too.")
        if not self.key_dense.built:  # `precompute_keys` may have run first
            self.key_dense.build(memory_shape)
        self.score_vector = self.add_weight(
            name="score_vector", shape=(self.units,),
            initializer=self._vector_initializer(),
        )
        if self.normalize:
            self.score_gain = self.add_weight(
                name="score_gain", shape=(),
                initializer=keras.initializers.Constant(1.0 / math.sqrt(self.units)),
            )
            self.score_bias = self.add_weight(
                name="score_bias", shape=(self.units,), initializer="zeros",
            )
        self.built = True

    def _vector_initializer(self):
        # v is a [units] vector; give the initializer a [units, 1] kernel shape.
        initializer = self.kernel_initializer

        def init(shape, dtype=None):
            return ops.reshape(initializer((shape[0], 1), dtype=dtype), shape)

        return init

    def precompute_keys(self, memory):
        """`U h_j` for every source position, `[B, S, units]` (once per sentence)."""
        return self.key_dense(memory)

    def _effective_vector(self):
        vector = ops.cast(self.score_vector, "float32")
        if not self.normalize:
            return vector
        norm = ops.sqrt(ops.sum(ops.square(vector)) + 1e-12)
        return ops.cast(self.score_gain, "float32") * vector / norm

    def call(self, query, memory, memory_mask=None, keys=None, training=None):
        if keys is None:
            keys = self.precompute_keys(memory)
        projected_query = self.query_dense(query)
        single_step = len(query.shape) == 2
        if single_step:
            projected_query = projected_query[:, None, :]  # [B, 1, A]
            hidden = projected_query + keys  # [B, S, A]
        else:
            hidden = projected_query[:, :, None, :] + keys[:, None, :, :]  # [B,T,S,A]
        if self.normalize:
            hidden = hidden + ops.cast(self.score_bias, hidden.dtype)
        energies = ops.cast(ops.tanh(hidden), "float32")
        scores = ops.matmul(energies, self._effective_vector())  # [B, S] / [B, T, S]
        mask = None
        if memory_mask is not None:
            mask = ops.cast(memory_mask, "bool")
            if not single_step:
                mask = mask[:, None, :]
        weights = masked_softmax(scores, mask)
        # A batched matmul, not einsum("bs,bsd->bd"): in RNNsearch's training
        # step on CPU the einsum's gradient cost 4% more CPU time (issue 36).
        memory = ops.cast(memory, "float32")
        if single_step:
            context = ops.squeeze(ops.matmul(weights[:, None, :], memory), axis=1)
        else:
            context = ops.matmul(weights, memory)
        return ops.cast(context, self.compute_dtype), weights

    def compute_output_spec(self, query, memory, memory_mask=None, keys=None,
                            training=None):
        batch_and_queries = tuple(query.shape[:-1])
        context = keras.KerasTensor(
            batch_and_queries + (memory.shape[-1],), dtype=self.compute_dtype)
        weights = keras.KerasTensor(
            batch_and_queries + (memory.shape[1],), dtype="float32")
        return context, weights

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units,
            "normalize": self.normalize,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config

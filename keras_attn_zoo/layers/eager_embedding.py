"""`EagerEmbedding`: the eager translator's shared, tied word embedding."""

import keras
import numpy as np  # noqa: F401  (the docstring example)
from keras import ops

from keras_attn_zoo.runtime import checked_at_run_time


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class EagerEmbedding(keras.layers.Layer):
    """Shared word embedding with embedding dropout and a tied output layer.

    * ``call([source_ids, target_ids])`` -> ``[B, T, 2E]``, the two embeddings
      concatenated (the ids must be equally long; a clear error otherwise);
    * ``call(ids)`` -> ``[B, T, E]``;
    * ``call(hidden, reverse=True)`` -> float32 logits ``hidden @ E^T + c``.

    Embedding dropout (Gal & Ghahramani, 2016, as in AWD-LSTM) drops whole
    words: while training, each vocabulary row is zeroed with probability
    ``dropout`` (one mask per call, shared by both languages, the rest scaled
    by ``1 / (1 - dropout)``).

    Args:
        vocabulary_size: number of ids.
        embedding_dim: E.
        dropout: embedding (word) dropout rate.
        use_output_bias: add a per-word bias to the logits (the reference
            code's decoder is a biased linear layer).

    Call arguments:
        inputs: int ids, a pair of equally long id tensors, or float hidden
            states with ``reverse=True``.
        reverse: compute tied logits instead of embeddings.
        training: enables embedding dropout.

    Examples:
        >>> layer = EagerEmbedding(100, 8)
        >>> tuple(layer([np.ones((2, 5), "int32"), np.ones((2, 5), "int32")]).shape)
        (2, 5, 16)

    References:
        Press & Smith, You May Not Need Attention, 2018; Merity et al.,
        Regularizing and Optimizing LSTM Language Models, 2017.
    """

    def __init__(self, vocabulary_size, embedding_dim, dropout=0.0, use_output_bias=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.dropout = dropout
        self.use_output_bias = use_output_bias
        self.seed_generator = keras.random.SeedGenerator(1337)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocabulary_size, self.embedding_dim),
            initializer=keras.initializers.RandomUniform(-0.1, 0.1))
        self.output_bias = None
        if self.use_output_bias:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.vocabulary_size,), initializer="zeros")
        self.built = True

    def _table(self, training):
        table = ops.cast(self.embeddings, self.compute_dtype)
        if training and self.dropout > 0:
            keep = keras.random.dropout(
                ops.ones((self.vocabulary_size, 1), self.compute_dtype), self.dropout,
                seed=self.seed_generator)
            table = table * keep
        return table

    @staticmethod
    def _check_pair(source_ids, target_ids, symbolic=False):
        """`source_ids`, once known to be as long as `target_ids` (clear errors)."""
        source_length, target_length = source_ids.shape[1], target_ids.shape[1]
        if (source_length is not None and target_length is not None
                and source_length != target_length):
            raise ValueError(
                "The eager translator reads one source and one target token per step, so "
                f"source_ids and target_ids must be equally long; got {source_length} and "
                f"{target_length}. Make the pairs eager feasible (keras_attn_zoo.models.eager."
                "preprocessing.eager_feasible) and pad both to the same length.")
        if symbolic or (source_length is not None and target_length is not None):
            return source_ids
        # Dynamic lengths (a TensorFlow graph): checked when the graph runs.
        return checked_at_run_time(
            source_ids,
            lambda: ops.equal(ops.shape(source_ids)[1], ops.shape(target_ids)[1]),
            ["The eager translator needs equally long source_ids and target_ids "
             "(eager-feasible pairs)."],
            name="check_equal_lengths")

    def call(self, inputs, reverse=False, training=None):
        if reverse:
            logits = ops.matmul(ops.cast(inputs, "float32"),
                                ops.transpose(ops.cast(self.embeddings, "float32")))
            if self.output_bias is not None:
                logits = logits + ops.cast(self.output_bias, "float32")
            return logits
        table = self._table(training)
        if isinstance(inputs, (list, tuple)):
            source_ids, target_ids = inputs
            source_ids = self._check_pair(source_ids, target_ids)
            return ops.concatenate(
                [ops.take(table, source_ids, axis=0), ops.take(table, target_ids, axis=0)],
                axis=-1)
        return ops.take(table, inputs, axis=0)

    def compute_output_spec(self, inputs, reverse=False, training=None):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
            return keras.KerasTensor(shape, dtype="float32")
        if isinstance(inputs, (list, tuple)):
            source_ids, target_ids = inputs
            self._check_pair(source_ids, target_ids, symbolic=True)
            shape = tuple(source_ids.shape) + (2 * self.embedding_dim,)
        else:
            shape = tuple(inputs.shape) + (self.embedding_dim,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size, embedding_dim=self.embedding_dim,
                      dropout=self.dropout, use_output_bias=self.use_output_bias)
        return config

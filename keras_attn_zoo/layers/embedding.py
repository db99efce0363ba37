"""Shared (tied) token embedding and sinusoidal positions."""

import math

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import axis_size


def sinusoidal_positions(length, dim, start=0, dtype="float32"):
    """`[length, dim]` sinusoidal position encodings starting at `start`.

    Sines in the first half of the channels, cosines in the second half
    (tensor2tensor's layout), so one formula serves training and decoding.
    """
    positions = ops.cast(ops.arange(length) + start, "float32")
    half = dim // 2
    scale = math.log(10000.0) / max(half - 1, 1)
    frequencies = ops.exp(ops.cast(ops.arange(half), "float32") * -scale)
    angles = positions[:, None] * frequencies[None, :]
    encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
    if dim % 2:
        encoding = ops.pad(encoding, [[0, 0], [0, 1]])
    return ops.cast(encoding, dtype)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class SharedEmbedding(keras.layers.Layer):
    """One embedding matrix for source, target and the output projection.

    `call(ids, start=0)` returns `E[ids] * sqrt(d) + position(start + t)`;
    `call(hidden, reverse=True)` returns float32 logits `hidden @ E^T` (the
    tied output layer; the product in the compute dtype). Both go through
    `call` so a functional graph tracks the weight instead of capturing its
    value.

    Args:
        vocabulary_size: number of tokens.
        embedding_dim: model width `d`.
        dropout: dropout applied after adding positions.
        use_positions: add sinusoidal positions (off for recurrent models).

    Call arguments:
        inputs: int ids `[B, T]`, or hidden states `[..., d]` with
            `reverse=True`.
        start: position of the first id (decoding step `t` embeds one id at
            `start=t`).
        reverse: compute the tied logits instead.
        training: Python bool, enables dropout.

    Examples:
        >>> embedding = SharedEmbedding(vocabulary_size=100, embedding_dim=16)
        >>> hidden = embedding(keras.ops.ones((2, 5), "int32"))
        >>> tuple(hidden.shape), tuple(embedding(hidden, reverse=True).shape)
        ((2, 5, 16), (2, 5, 100))

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017, sections
        3.4-3.5 (shared embeddings scaled by `sqrt(d)`, sinusoidal
        positions). Press and Wolf, "Using the Output Embedding to Improve
        Language Models", EACL 2017 (tied output layer).
    """

    def __init__(self, vocabulary_size, embedding_dim, dropout=0.0,
                 use_positions=True, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.dropout = dropout
        self.use_positions = use_positions
        self._dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.embedding_dim),
            initializer=keras.initializers.RandomNormal(
                stddev=self.embedding_dim**-0.5
            ),
        )
        self.built = True

    def call(self, inputs, start=0, reverse=False, training=None):
        if reverse:
            # The product in the compute dtype (under mixed precision the
            # step's largest matmul runs at the bf16 rate, and so does its
            # gradient), the logits in float32 for the softmax and the loss:
            # Keras' mixed-precision recipe. Under bf16 the small Transformer's
            # step ran 1.31x faster than with a float32 product (Ding batches,
            # alternating in one process, 2 loaded cores); float32 models
            # compute exactly as before.
            product = ops.matmul(
                ops.cast(inputs, self.compute_dtype),
                ops.transpose(ops.cast(self.embeddings, self.compute_dtype)),
            )
            return ops.cast(product, "float32")
        ids = inputs
        embedded = ops.take(ops.cast(self.embeddings, self.compute_dtype), ids, axis=0)
        embedded = embedded * ops.cast(math.sqrt(self.embedding_dim), self.compute_dtype)
        if self.use_positions:
            positions = sinusoidal_positions(
                axis_size(ids, 1), self.embedding_dim, start, self.compute_dtype
            )
            embedded = embedded + positions[None]
        return self._dropout_layer(embedded, training=training)

    def logits(self, hidden):
        """Tied output layer: float32 `hidden @ E^T`."""
        return self(hidden, reverse=True)

    def compute_output_spec(self, inputs, start=0, reverse=False, training=None):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
            return keras.KerasTensor(shape, dtype="float32")
        shape = tuple(inputs.shape) + (self.embedding_dim,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "dropout": self.dropout,
                "use_positions": self.use_positions,
            }
        )
        return config

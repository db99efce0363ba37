"""`FeedForward`: the position-wise feed-forward network of a Transformer block."""

import keras

from keras_attn_zoo.layers.attention_utils import flat_dense


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class FeedForward(keras.layers.Layer):
    """Position-wise `Dense(intermediate, activation) -> Dropout -> Dense(d)`.

    `dropout` acts on the activations (the blocks' `activation_dropout`,
    fairseq's name); 0 adds nothing to the layer. The outer `Dense` is
    created in `build`: its width is the input's, known only from the input
    shape. `dense_layers()` gives both `Dense` layers to code that reads the
    weights (the CTranslate2 exporter).

    Args:
        intermediate_dim: inner width.
        activation: activation of the inner layer.
        dropout: dropout on the activations.

    Call arguments:
        x: `[..., d]`.
        training: Python bool, enables dropout.

    Examples:
        >>> ffn = FeedForward(intermediate_dim=32)
        >>> tuple(ffn(keras.ops.ones((2, 5, 16))).shape)
        (2, 5, 16)
        >>> [tuple(dense.kernel.shape) for dense in ffn.dense_layers()]
        [(16, 32), (32, 16)]

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017, section
        3.3. Ott et al., "fairseq: A Fast, Extensible Toolkit for Sequence
        Modeling", NAACL 2019 (activation dropout).
    """

    def __init__(self, intermediate_dim, activation="relu", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.dropout = dropout
        self._inner = keras.layers.Dense(
            intermediate_dim, activation=activation, name="inner",
            dtype=self.dtype_policy,
        )
        self._dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self._outer = None

    def build(self, input_shape):
        self._inner.build(input_shape)
        self._outer = keras.layers.Dense(
            input_shape[-1], name="outer", dtype=self.dtype_policy
        )
        self._outer.build(tuple(input_shape[:-1]) + (self.intermediate_dim,))
        self.built = True

    def dense_layers(self):
        """`(inner, outer)`: the two `keras.layers.Dense` (built with the layer)."""
        return self._inner, self._outer

    def call(self, x, training=None):
        # The Dense layers hold the weights; `flat_dense` computes them with
        # half the graph ops of their own call (the same matmuls).
        inner = self._inner.activation(flat_dense(x, self._inner.kernel, self._inner.bias))
        inner = self._dropout_layer(inner, training=training)
        return flat_dense(inner, self._outer.kernel, self._outer.bias)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": self.activation,
                "dropout": self.dropout,
            }
        )
        return config

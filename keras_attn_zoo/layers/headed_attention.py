"""`HeadedAttention`: the arguments every multi-head attention layer shares."""

import keras

from keras_attn_zoo.layers.heads_output import HeadsOutput


class HeadedAttention(keras.layers.Layer):
    """Base of the zoo's multi-head attention layers: the arguments they share.

    Stores `num_heads`, `key_dim`, `dropout` and `use_bias` (and returns them
    from `get_config`) and creates the attention-dropout layer
    `_dropout_layer`; `_build_output_projection(model_dim)` creates the
    usual output projection from the concatenated heads. Subclasses add the
    other projections, `build` and the protocol's `call` / `initial_cache` /
    `step`. The output projection is created in `build`, not `__init__`: its
    width is the query's, known only from the input shape (as in Keras'
    `MultiHeadAttention`).

    Args:
        num_heads: number of attention heads `h`.
        key_dim: size of each head.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.

    Call arguments:
        as `MultiHeadAttention`.

    Examples:
        >>> from keras_attn_zoo.layers import MultiHeadAttention
        >>> layer = MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1)
        >>> isinstance(layer, HeadedAttention), layer.get_config()["dropout"]
        (True, 0.1)

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (multi-head
        attention, attention dropout).
    """

    def __init__(self, num_heads, key_dim, dropout=0.0, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self._dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def _build_output_projection(self, model_dim):
        """Creates and builds `output_projection`, heads `[h, key_dim]` -> `d`."""
        self.output_projection = HeadsOutput(
            model_dim, use_bias=self.use_bias, name="output", dtype=self.dtype_policy)
        self.output_projection.build((None, None, self.num_heads, self.key_dim))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
            }
        )
        return config

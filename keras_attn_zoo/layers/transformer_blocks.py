"""What the encoder and decoder blocks share: the attention protocol, the base class.

`TransformerEncoderBlock` and `TransformerDecoderBlock` (each in its own
file) take their attention layers as arguments.

Any layer that follows the zoo's attention protocol plugs in:

* `call(query, context=None, context_mask=None, causal=False, training=None,
  return_attention=False, **extra)` for teacher forcing;
* `initial_cache(batch_size, max_length, context=None)` and
  `step(query, step, cache, context_mask=None, **extra) -> (output, cache,
  weights)` for incremental decoding.

`extra` carries mechanism-specific inputs (for example RAN's per-layer
attention matrix) from the model to the attention layer without the block
knowing about them. A layer that already contains its own feed-forward networks
(the Weighted Transformer's branches) is used with `use_feed_forward=False`.

Attention weights on request: the blocks' `call(..., return_attention=True)`
returns `(x, maps)`, `maps` a dict of float32 tensors `[B, h, queries, keys]`:
`"self"` (both blocks) and `"cross"` (decoder block), plus any extra maps a
layer reports. A layer reports extras when called with `return_attention=
ATTENTION_MAPS` by returning a dict `{"weights": [B, h, T, S], name: tensor}`
instead of the weights tensor (the Gaussian-mixture layer's components); other
layers treat the value as `True`.
"""

import keras

from keras_attn_zoo.layers.feed_forward import FeedForward
from keras_attn_zoo.layers.layer_normalization import LayerNormalization

LAYER_NORM_EPSILON = 1e-6
# The `return_attention` value that asks a layer for its extra maps too.
ATTENTION_MAPS = "maps"


def attend_with_maps(layer, return_attention, *args, **kwargs):
    """`(output, maps or None)` of one attention layer call."""
    if not return_attention:
        return layer(*args, **kwargs), None
    output, weights = layer(*args, return_attention=ATTENTION_MAPS, **kwargs)
    return output, dict(weights) if isinstance(weights, dict) else {"weights": weights}


def named_maps(maps, name):
    """A layer's maps with its `"weights"` renamed to the slot `name`."""
    maps = dict(maps)
    return {name: maps.pop("weights"), **maps}


class TransformerBlock(keras.layers.Layer):
    """Base of the encoder and decoder blocks: residuals, layer norms, feed-forward.

    A sublayer runs inside a residual, `x + Dropout(sublayer(norm(x)))`
    (pre-norm) or `norm(x + Dropout(sublayer(x)))` (post-norm, the paper's),
    and the block ends with the feed-forward network in the same way.
    Subclasses add their attention sublayers, `build` and `call`. The output
    has the input's shape (`compute_output_spec` says so without tracing).

    Args:
        intermediate_dim: inner width of the feed-forward network.
        dropout: residual dropout.
        activation: feed-forward activation.
        norm_first: pre-norm (`True`) or the original post-norm (`False`).
        use_feed_forward: `False` when the attention layer has its own FFNs
            (the Weighted Transformer's branches).
        activation_dropout: dropout after the feed-forward activation
            (fairseq's name; default 0: none).

    Call arguments:
        x: `[B, T, d]`; the subclass (`TransformerEncoderBlock`,
            `TransformerDecoderBlock`) defines the others.
        training: Python bool, enables dropout.
        return_attention: also return the attention maps (see the module
            docstring).

    Examples:
        >>> from keras_attn_zoo.layers import TransformerEncoderBlock
        >>> from keras_attn_zoo.layers import MultiHeadAttention
        >>> block = TransformerEncoderBlock(MultiHeadAttention(2, 8), 32)
        >>> isinstance(block, TransformerBlock), tuple(block(keras.ops.ones((2, 5, 16))).shape)
        (True, (2, 5, 16))

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (post-norm).
        Xiong et al., "On Layer Normalization in the Transformer
        Architecture", ICML 2020 (pre-norm).
    """

    def __init__(
        self,
        intermediate_dim,
        dropout=0.1,
        activation="relu",
        norm_first=False,
        use_feed_forward=True,
        activation_dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = activation
        self.norm_first = norm_first
        self.use_feed_forward = use_feed_forward
        self.activation_dropout = activation_dropout
        self._dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.feed_forward = (
            FeedForward(intermediate_dim, activation, dropout=activation_dropout,
                        name="feed_forward", dtype=self.dtype_policy)
            if use_feed_forward
            else None
        )
        self.feed_forward_norm = (
            self._norm("feed_forward_norm") if use_feed_forward else None
        )

    def _norm(self, name):
        return LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name=name, dtype=self.dtype_policy
        )

    def _residual(self, x, norm, sublayer, training):
        """Runs `sublayer` around a residual, pre- or post-norm.

        `sublayer(normed_x)` returns `(output, aux)`; `aux` is passed through.
        """
        inputs = norm(x) if self.norm_first else x
        output, aux = sublayer(inputs)
        x = x + self._dropout_layer(output, training=training)
        if not self.norm_first:
            x = norm(x)
        return x, aux

    def _feed_forward_part(self, x, training):
        if self.feed_forward is None:
            return x
        x, _ = self._residual(
            x,
            self.feed_forward_norm,
            lambda h: (self.feed_forward(h, training=training), None),
            training,
        )
        return x

    @staticmethod
    def _build_attention(layer, *shapes):
        """Builds an attention layer given to the block, unless it came built.

        A layer deserialized with the block (`from_config`, `.keras`) is
        already built from its own build config.
        """
        if not layer.built:
            layer.build(*shapes)

    def _build_feed_forward(self, input_shape):
        if self.feed_forward is not None:
            self.feed_forward.build(input_shape)
            self.feed_forward_norm.build(input_shape)

    def compute_output_spec(self, x, *args, return_attention=False, **kwargs):
        # A block returns a tensor shaped like its input (keras-hub's blocks
        # say so in `compute_output_shape`). Stating it spares Keras a symbolic
        # trace of `call`, which on JAX would slice a fixed-size table (the
        # Synthesizer's logits) to a symbolic length it cannot bound.
        if return_attention:
            return super().compute_output_spec(
                x, *args, return_attention=return_attention, **kwargs)
        return keras.KerasTensor(x.shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "use_feed_forward": self.use_feed_forward,
                "activation_dropout": self.activation_dropout,
            }
        )
        return config

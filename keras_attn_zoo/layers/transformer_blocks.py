"""Encoder and decoder blocks that take their attention layers as arguments.

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

LAYER_NORM_EPSILON = 1e-6
# The `return_attention` value that asks a layer for its extra maps too.
ATTENTION_MAPS = "maps"


def _attend(layer, return_attention, *args, **kwargs):
    """`(output, maps or None)` of one attention layer call."""
    if not return_attention:
        return layer(*args, **kwargs), None
    output, weights = layer(*args, return_attention=ATTENTION_MAPS, **kwargs)
    return output, dict(weights) if isinstance(weights, dict) else {"weights": weights}


def _named(maps, name):
    """A layer's maps with its `"weights"` renamed to the slot `name`."""
    maps = dict(maps)
    return {name: maps.pop("weights"), **maps}


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class FeedForward(keras.layers.Layer):
    """Position-wise `Dense(intermediate, activation) -> Dropout -> Dense(d)`.

    `dropout` acts on the activations (the blocks' `activation_dropout`,
    fairseq's name); 0 adds nothing to the layer.
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
        self._dropout_layer = keras.layers.Dropout(dropout)
        self._outer = None

    def build(self, input_shape):
        self._inner.build(input_shape)
        self._outer = keras.layers.Dense(
            input_shape[-1], name="outer", dtype=self.dtype_policy
        )
        self._outer.build(tuple(input_shape[:-1]) + (self.intermediate_dim,))
        self.built = True

    def call(self, x, training=None):
        return self._outer(self._dropout_layer(self._inner(x), training=training))

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


class _ResidualBlock(keras.layers.Layer):
    """Shared residual / layer-norm plumbing of encoder and decoder blocks."""

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
        self._dropout_layer = keras.layers.Dropout(dropout)
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
        return keras.layers.LayerNormalization(
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

    def _build_feed_forward(self, input_shape):
        if self.feed_forward is not None:
            self.feed_forward.build(input_shape)
            self.feed_forward_norm.build(input_shape)

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


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class TransformerEncoderBlock(_ResidualBlock):
    """Self-attention + feed-forward, each in a residual with layer norm.

    Args:
        self_attention: an attention layer (the zoo's attention protocol).
        intermediate_dim: inner width of the feed-forward network.
        dropout: residual dropout.
        activation: feed-forward activation.
        norm_first: pre-norm (`True`) or the original post-norm (`False`).
        use_feed_forward: `False` when the attention layer has its own FFNs.
        activation_dropout: dropout after the feed-forward activation
            (fairseq's name; default 0: none).

    Call arguments:
        x: `[B, S, d]`.
        padding_mask: boolean `[B, S]`, `True` for real tokens.
        attention_inputs: dict of extra inputs for the attention layer.
        training: Python bool.
        return_attention: also return `{"self": [B, h, S, S], ...}` (see the
            module docstring).
    """

    def __init__(self, self_attention, intermediate_dim, **kwargs):
        super().__init__(intermediate_dim, **kwargs)
        if isinstance(self_attention, dict):
            self_attention = keras.saving.deserialize_keras_object(self_attention)
        self.self_attention = self_attention
        self.self_attention_norm = self._norm("self_attention_norm")

    def build(self, x_shape):
        self.self_attention.build(x_shape)
        self.self_attention_norm.build(x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, attention_inputs=None, training=None,
             return_attention=False):
        extra = attention_inputs or {}
        x, maps = self._residual(
            x,
            self.self_attention_norm,
            lambda h: _attend(self.self_attention, return_attention, h,
                              context_mask=padding_mask, training=training, **extra),
            training,
        )
        x = self._feed_forward_part(x, training)
        return (x, _named(maps, "self")) if return_attention else x

    def get_config(self):
        config = super().get_config()
        config["self_attention"] = keras.saving.serialize_keras_object(
            self.self_attention
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class TransformerDecoderBlock(_ResidualBlock):
    """Causal self-attention, cross-attention and feed-forward.

    Args:
        self_attention: causal self-attention layer (attention protocol).
        cross_attention: cross-attention layer over the encoder output.
        intermediate_dim, dropout, activation, norm_first, use_feed_forward,
        activation_dropout: as in `TransformerEncoderBlock`.

    Call arguments:
        x: `[B, T, d]` decoder input.
        memory: `[B, S, d]` encoder output.
        memory_mask: boolean `[B, S]`, `True` for real source tokens.
        self_attention_inputs / cross_attention_inputs: extra inputs.
        training: Python bool.
        return_attention: also return `{"self": [B, h, T, T], "cross": [B, h,
            T, S], ...}` (see the module docstring).
    """

    def __init__(self, self_attention, cross_attention, intermediate_dim, **kwargs):
        super().__init__(intermediate_dim, **kwargs)
        if isinstance(self_attention, dict):
            self_attention = keras.saving.deserialize_keras_object(self_attention)
        if isinstance(cross_attention, dict):
            cross_attention = keras.saving.deserialize_keras_object(cross_attention)
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.self_attention_norm = self._norm("self_attention_norm")
        self.cross_attention_norm = self._norm("cross_attention_norm")

    def build(self, x_shape, memory_shape=None):
        memory_shape = memory_shape or x_shape
        self.self_attention.build(x_shape)
        self.self_attention_norm.build(x_shape)
        self.cross_attention.build(x_shape, memory_shape)
        self.cross_attention_norm.build(x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def call(
        self,
        x,
        memory,
        memory_mask=None,
        self_attention_inputs=None,
        cross_attention_inputs=None,
        training=None,
        return_attention=False,
    ):
        self_extra = self_attention_inputs or {}
        cross_extra = cross_attention_inputs or {}
        x, self_maps = self._residual(
            x,
            self.self_attention_norm,
            lambda h: _attend(self.self_attention, return_attention, h, causal=True,
                              training=training, **self_extra),
            training,
        )
        x, cross_maps = self._residual(
            x,
            self.cross_attention_norm,
            lambda h: _attend(self.cross_attention, return_attention, h, memory,
                              context_mask=memory_mask, training=training,
                              **cross_extra),
            training,
        )
        x = self._feed_forward_part(x, training)
        if not return_attention:
            return x
        return x, {**_named(self_maps, "self"), **_named(cross_maps, "cross")}

    def initial_cache(self, batch_size, max_length, memory):
        return {
            "self": self.self_attention.initial_cache(batch_size, max_length),
            "cross": self.cross_attention.initial_cache(
                batch_size, max_length, context=memory
            ),
        }

    def step(
        self,
        x,
        step,
        cache,
        memory_mask,
        self_attention_inputs=None,
        cross_attention_inputs=None,
    ):
        """One target position `[B, 1, d]`; returns `(x, cache, cross_weights)`."""
        new_cache = {}

        def self_part(h):
            out, new_cache["self"], _ = self.self_attention.step(
                h, step, cache["self"], **(self_attention_inputs or {})
            )
            return out, None

        def cross_part(h):
            out, new_cache["cross"], weights = self.cross_attention.step(
                h, step, cache["cross"], context_mask=memory_mask,
                **(cross_attention_inputs or {}),
            )
            return out, weights

        x, _ = self._residual(x, self.self_attention_norm, self_part, False)
        x, weights = self._residual(x, self.cross_attention_norm, cross_part, False)
        x = self._feed_forward_part(x, False)
        return x, new_cache, weights

    def get_config(self):
        config = super().get_config()
        config["self_attention"] = keras.saving.serialize_keras_object(
            self.self_attention
        )
        config["cross_attention"] = keras.saving.serialize_keras_object(
            self.cross_attention
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class LayerDrop(keras.layers.Layer):
    """Skips a whole block during training with probability `rate` (LayerDrop).

    Fan, Grave and Joulin (2019), "Reducing Transformer Depth on Demand with
    Structured Dropout": called as `layer_drop(block_input, block_output)`, it
    returns `block_input` (the block is the identity) with probability `rate`
    and `block_output` otherwise, one draw per call, i.e. per batch, shared
    by every sequence of the batch. At inference (`training` not true) it
    returns `block_output`. The draw is a scalar `keras.random.uniform` from
    the layer's `SeedGenerator` and the choice a `where`, so the layer works
    in graph mode and under XLA (`jit_compile=True`); the skipped block is
    still computed (its gradient is then zero).

    Args:
        rate: probability in `[0, 1]` of skipping the block.
        seed: seed of the layer's `SeedGenerator` (None: drawn from Keras'
            global seed, which `keras.utils.set_random_seed` fixes).
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        rate = float(rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"LayerDrop rate must be in [0, 1], got {rate}.")
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.built = True

    def call(self, block_input, block_output, training=None):
        if not training or self.rate == 0.0:
            return block_output
        draw = keras.random.uniform((), seed=self.seed_generator)
        return keras.ops.where(draw < self.rate, block_input, block_output)

    def compute_output_shape(self, block_input_shape, block_output_shape):
        return block_output_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config

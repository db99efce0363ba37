"""Recurrent Attention (RAN): learned attention matrices refined layer by layer.

Two layers work together:

* `RecurrentAttentionMatrices`, one per stack (encoder or decoder
  self-attention), holds the Initial Attention Matrices `A0` `(h, n, n)` and the
  one Recurrent Transition shared by all heads and layers, and computes
  `A_1 .. A_L` once per forward pass (once per decoding call at inference);
* `RecurrentAttention`, one per block, attends with its layer's matrix:
  `softmax(A_l[:, :T, :S]) . V_l`, with only value and output projections.
"""

import keras
from keras import ops

from keras_attn_zoo.layers.fixed_pattern_attention import FixedPatternAttention
from keras_attn_zoo.layers.fixed_pattern_attention import check_max_length
from keras_attn_zoo.layers.transformer_blocks import LAYER_NORM_EPSILON

TRANSITIONS = ("paper", "ffn")


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class RecurrentAttentionMatrices(keras.layers.Layer):
    """The attention matrices `A_1 .. A_L` of one RAN stack.

    `A0` `(h, n, n)` (n = `max_length`) is learned (or fixed, the paper's
    ablation). One Recurrent Transition, shared by every head and every layer,
    maps `A_{l-1}` to `A_l`:

    * `transition="paper"` (default, Eq. 3-4 of the paper):
      `A_l = A_{l-1} + LayerNorm(tanh(A_{l-1} W + b))`, `W` `(n, n)` acting on
      the key (last) axis, LayerNorm over the key axis. Parameters:
      `n^2 + n + 2n`.
    * `transition="ffn"` (the public code's default):
      `A_l = A_{l-1} + relu(A_{l-1} W1 + b1) W2 + b2`, `n -> 4n -> n`, no
      LayerNorm. Parameters: `8n^2 + 5n`.

    The matrices are computed over the full `n x n` grid and only then sliced
    to the sequence length, so padding a batch never changes them. They do not
    depend on the tokens, so no information flows between positions through
    them: the decoder's causality comes from the causal mask alone (the upper
    triangle of `A0` still feeds the lower one through `W`, which is harmless).

    Args:
        num_heads: heads `h`.
        max_length: `n`, the longest sequence the stack accepts (paper: 256).
        num_layers: `L`, how many matrices to produce.
        transition: "paper" or "ffn" (see above).
        trainable_initial: learn `A0` (default) or keep its random
            initialisation fixed (the paper's "fixed A0" ablation, -0.1 to
            -0.2 BLEU).
        initial_initializer: initializer of `A0`.
        transition_initializer: initializer of the transition kernels.

    Call arguments:
        ids: int `[B, length]` token ids of the stack's input; only the length
            is used. A length above `max_length` is an error naming both.

    Returns:
        A list of `L` dicts `{"attention_matrix": A_l[:, :length, :length]}`,
        the extra inputs of the stack's `L` `RecurrentAttention` layers.

    Example:
    >>> stack = RecurrentAttentionMatrices(num_heads=2, max_length=16, num_layers=3)
    >>> matrices = stack(keras.ops.zeros((4, 10), "int32"))
    >>> len(matrices), tuple(matrices[0]["attention_matrix"].shape)
    (3, (2, 10, 10))

    References:
        Zeng et al., "Recurrent Attention for Neural Machine Translation",
        EMNLP 2021.
    """

    def __init__(
        self,
        num_heads,
        max_length,
        num_layers,
        transition="paper",
        trainable_initial=True,
        initial_initializer="glorot_uniform",
        transition_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if transition not in TRANSITIONS:
            raise ValueError(
                f"Unknown transition {transition!r}; choose one of {TRANSITIONS}."
            )
        if max_length is None or int(max_length) < 1:
            raise ValueError(
                f"RAN needs a positive max_length (the size n of its attention "
                f"matrices); got max_length={max_length}."
            )
        self.num_heads = num_heads
        self.max_length = int(max_length)
        self.num_layers = num_layers
        self.transition = transition
        self.trainable_initial = trainable_initial
        self.initial_initializer = keras.initializers.get(initial_initializer)
        self.transition_initializer = keras.initializers.get(transition_initializer)
        n = self.max_length
        if transition == "paper":
            self.transition_norm = keras.layers.LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name="transition_norm",
                dtype=self.dtype_policy,
            )
        else:
            self.transition_inner = keras.layers.Dense(
                4 * n, activation="relu", name="transition_inner",
                kernel_initializer=self.transition_initializer,
                dtype=self.dtype_policy,
            )
            self.transition_outer = keras.layers.Dense(
                n, name="transition_outer",
                kernel_initializer=self.transition_initializer,
                dtype=self.dtype_policy,
            )

    def build(self, ids_shape=None):
        n, h = self.max_length, self.num_heads
        self.initial_matrices = self.add_weight(
            name="initial_matrices",
            shape=(h, n, n),
            initializer=self.initial_initializer,
            trainable=self.trainable_initial,
        )
        if self.transition == "paper":
            self.transition_kernel = self.add_weight(
                name="transition_kernel", shape=(n, n),
                initializer=self.transition_initializer,
            )
            self.transition_bias = self.add_weight(
                name="transition_bias", shape=(n,), initializer="zeros"
            )
            self.transition_norm.build((h, n, n))
        else:
            self.transition_inner.build((h, n, n))
            self.transition_outer.build((h, n, 4 * n))
        self.built = True

    def _transition(self, matrices):
        if self.transition == "paper":
            update = ops.tanh(
                ops.matmul(matrices, self.transition_kernel) + self.transition_bias
            )
            return matrices + self.transition_norm(update)
        return matrices + self.transition_outer(self.transition_inner(matrices))

    def full_matrices(self):
        """`[A_1, ..., A_L]`, each `(h, n, n)` (no slicing, no length check)."""
        if not self.built:
            self.build()
        matrices = ops.convert_to_tensor(self.initial_matrices)
        result = []
        for _ in range(self.num_layers):
            matrices = self._transition(matrices)
            result.append(matrices)
        return result

    def call(self, ids):
        length = check_max_length(ops.shape(ids)[1], self.max_length)
        size = (self.num_heads, length, length)
        return [
            {"attention_matrix": ops.slice(matrices, (0, 0, 0), size)}
            for matrices in self.full_matrices()
        ]

    def compute_output_spec(self, ids):
        length = ids.shape[1]
        if length is not None:
            check_max_length(length, self.max_length)
        # One KerasTensor object per layer: the functional graph identifies
        # outputs by object, so a single shared spec would wire every block to
        # the last matrix A_L.
        return [
            {
                "attention_matrix": keras.KerasTensor(
                    (self.num_heads, length, length), dtype=self.compute_dtype
                )
            }
            for _ in range(self.num_layers)
        ]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "max_length": self.max_length,
                "num_layers": self.num_layers,
                "transition": self.transition,
                "trainable_initial": self.trainable_initial,
                "initial_initializer": keras.initializers.serialize(
                    self.initial_initializer
                ),
                "transition_initializer": keras.initializers.serialize(
                    self.transition_initializer
                ),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class RecurrentAttention(FixedPatternAttention):
    """RAN self-attention: `softmax(A_l[:, :T, :S]) . V_l` for one layer.

    There are no query or key projections: the unnormalised scores are this
    layer's recurrently refined attention matrix `A_l`, the same for every
    sentence, computed once by the stack's `RecurrentAttentionMatrices` and
    passed in as `attention_matrix`. Padded keys are masked, the decoder is
    causally masked, the softmax is float32, then attention dropout (paper:
    0.2), a per-layer value projection and an output projection.

    While decoding, `attention_matrix` is the stack's output for the whole
    decoding length (computed once per call, kept in `state["shared"]`) and
    step `t` uses its row `t` over keys `0..t` with a value cache.

    Args:
        num_heads: heads `h` (must match the stack's).
        key_dim: per-head value size `d_v`.
        dropout: attention dropout (the paper uses 0.2 for RAN).
        use_bias: biases of the value and output projections.

    Call arguments:
        query: `[B, T, d]`.
        context: must be `None` (RAN is self-attention).
        context_mask: boolean `[B, T]`, `True` for real tokens.
        causal: decoder self-attention.
        training: Python bool, enables dropout.
        return_attention: also return the weights `[B, h, T, T]` (float32).
        attention_matrix: `A_l` `[h, >= T, >= T]` (rows and keys beyond `T`
            are ignored).

    Example:
    >>> stack = RecurrentAttentionMatrices(num_heads=2, max_length=16, num_layers=1)
    >>> layer = RecurrentAttention(num_heads=2, key_dim=8)
    >>> x = keras.random.normal((4, 10, 16))
    >>> matrix = stack(keras.ops.zeros((4, 10), "int32"))[0]["attention_matrix"]
    >>> tuple(layer(x, causal=True, attention_matrix=matrix).shape)
    (4, 10, 16)

    References:
        Zeng et al., "Recurrent Attention for Neural Machine Translation",
        EMNLP 2021.
    """

    def __init__(self, num_heads, key_dim, dropout=0.2, use_bias=True, **kwargs):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias,
                         **kwargs)

    def call(
        self,
        query,
        context=None,
        context_mask=None,
        causal=False,
        training=None,
        return_attention=False,
        attention_matrix=None,
    ):
        if context is not None:
            raise ValueError("RecurrentAttention is self-attention: pass no context.")
        return self._attend_sequence(
            query, None, context_mask, causal, training, return_attention,
            attention_matrix=attention_matrix,
        )

    def _pattern(self, query_start, query_length, key_length, attention_matrix=None):
        if attention_matrix is None:
            raise ValueError(
                "RecurrentAttention needs its layer's `attention_matrix` (from "
                "RecurrentAttentionMatrices)."
            )
        return ops.slice(
            attention_matrix, (0, query_start, 0),
            (self.num_heads, query_length, key_length),
        )

    def step(self, query, step, cache, context_mask=None, attention_matrix=None):
        if context_mask is not None:
            raise ValueError("RecurrentAttention is self-attention: no context_mask "
                             "in step.")
        return super().step(query, step, cache, attention_matrix=attention_matrix)

"""`RecurrentAttentionMatrices`: RAN's attention matrices `A_1 .. A_L` of one stack.

Computed once per forward pass (once per decoding call at inference) and
passed to the stack's `RecurrentAttention` layers, one matrix each.
"""

import keras
from keras import ops

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

    Examples:
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

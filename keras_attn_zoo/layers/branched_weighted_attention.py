"""The Weighted Transformer's branched attention (attention + branch FFNs)."""

import keras
from keras import ops

from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
from keras_attn_zoo.optimizers import SimplexProjection

PARAMETERIZATIONS = ("projection", "softmax")


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BranchedWeightedAttention(MultiHeadAttention):
    """Branched attention of the Weighted Transformer (Ahmed et al., 2017).

    M branches (M = `num_heads`), each with its own query/key/value
    projections `d -> d_k`, its own output projection `W_i^O: d_k -> d`, a
    concatenation weight κ_i and its own feed-forward network FFN_i:

        head_i     = Attention(Q W_i^Q, K W_i^K, V W_i^V)
        head_bar_i = κ_i · head_i W_i^O
        output     = Σ_i α_i FFN_i(head_bar_i)

    with κ and α non-negative and summing to 1. The layer therefore replaces
    a Transformer's attention sublayer *and* its FFN sublayer: use it in a
    block with `use_feed_forward=False`; the block adds the residual and the
    layer norm around it. All branches run in one batched einsum each.

    The attention itself, its masks and its decoding cache are those of
    `MultiHeadAttention` (this class subclasses it, one branch per head):
    only the output projection differs, replaced by the κ/FFN/α mixing above.

    κ and α are kept on the simplex by one of two parameterisations:

    * `"projection"` (default, the paper's): κ and α are the weights
      themselves, initialised to `1/M` and projected onto the simplex after
      each optimiser update by a `SimplexProjection` constraint (Euclidean
      projection, Duchi et al. 2008). A projection can set a weight to exactly
      0, which stops the gradient of that branch's other parameters (and, for
      κ_i while FFN_i's biases are still 0, of κ_i itself; see
      `keras_attn_zoo.optimizers`). `min_branch_weight > 0` prevents
      this (not in the paper).
    * `"softmax"`: κ = softmax(logits), α = softmax(logits), logits
      initialised to 0 (uniform); no constraint, weights never exactly 0.

    The branch FFN width is not stated in the seed text (the blog version of
    the paper), only that each branch has "its own" FFN_i of the Transformer's
    form. The zoo's builder gives each branch `intermediate_dim / M` by
    default, the public port's width, at which the model keeps the
    Transformer's size as in the paper's comparison; `"full"` gives every
    branch the whole `intermediate_dim` (M times the FFN parameters). See
    `keras_attn_zoo.models.weighted_transformer.branch_width`; this layer
    takes whichever width it is given.

    Args:
        num_heads: number of branches M.
        key_dim: width `d_k` of each branch's queries/keys/values.
        intermediate_dim: inner width of each branch FFN.
        dropout: dropout on the attention weights.
        feed_forward_dropout: dropout on the branch FFNs' hidden activations
            (0 like the zoo's `FeedForward` inside the blocks).
        activation: branch FFN activation (paper: ReLU).
        use_bias: biases in the projections and FFNs.
        weight_parameterization: `"projection"` or `"softmax"` (see above).
        min_branch_weight: floor of κ_i and α_i for `"projection"` (paper: 0).

    Call arguments:
        query: `[B, T, d]`.
        context: `[B, S, d]` keys/values; `None` means self-attention.
        context_mask: boolean `[B, S]`, `True` for real (unpadded) keys.
        causal: mask keys after each query (decoder self-attention).
        training: Python bool, enables dropout.
        return_attention: also return the branches' attention weights
            `[B, M, T, S]` (float32).

    Incremental decoding follows the zoo's attention protocol:
    `initial_cache(batch_size, max_length, context=None)` (cross-attention:
    every branch's source keys/values projected once) and
    `step(query, step, cache, context_mask=None)`.

    `branch_weights()` returns `{"kappa": [...], "alpha": [...]}` as floats.

    Example:
    >>> layer = BranchedWeightedAttention(num_heads=4, key_dim=8,
    ...                                   intermediate_dim=64)
    >>> x = keras.random.normal((2, 5, 32))
    >>> tuple(layer(x, causal=True).shape)
    (2, 5, 32)
    >>> layer.branch_weights()["kappa"]
    [0.25, 0.25, 0.25, 0.25]

    References:
        Ahmed, Keskar and Socher, "Weighted Transformer Network for Machine
        Translation", arXiv:1711.02132, 2017.
        Duchi, Shalev-Shwartz, Singer and Chandra, "Efficient Projections onto
        the l1-Ball for Learning in High Dimensions", ICML 2008.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        intermediate_dim,
        dropout=0.0,
        feed_forward_dropout=0.0,
        activation="relu",
        use_bias=True,
        weight_parameterization="projection",
        min_branch_weight=0.0,
        **kwargs,
    ):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias, **kwargs)
        if weight_parameterization not in PARAMETERIZATIONS:
            raise ValueError(
                f"weight_parameterization must be one of {PARAMETERIZATIONS}, "
                f"got {weight_parameterization!r}."
            )
        if min_branch_weight and weight_parameterization != "projection":
            raise ValueError("min_branch_weight applies to the projection only.")
        if num_heads * min_branch_weight >= 1.0:
            raise ValueError(
                f"min_branch_weight={min_branch_weight} leaves no room on the "
                f"simplex of {num_heads} branches (needs M * floor < 1)."
            )
        self.intermediate_dim = intermediate_dim
        self.feed_forward_dropout = feed_forward_dropout
        self.activation = activation
        self.weight_parameterization = weight_parameterization
        self.min_branch_weight = min_branch_weight
        self._feed_forward_dropout_layer = keras.layers.Dropout(feed_forward_dropout)

    def build(self, query_shape, context_shape=None):
        model_dim = query_shape[-1]
        context_dim = model_dim if context_shape is None else context_shape[-1]
        branches = self.num_heads
        # Per-branch Glorot: the kernels below hold M independent matrices
        # side by side; keras counts the branch axis into both fans, which
        # `scale=M` undoes.
        per_branch_glorot = keras.initializers.VarianceScaling(
            scale=float(branches), mode="fan_avg", distribution="uniform"
        )

        def dense(equation, output_shape, bias_axes, name, initializer,
                  activation=None):
            return keras.layers.EinsumDense(
                equation,
                output_shape=output_shape,
                bias_axes=bias_axes if self.use_bias else None,
                activation=activation,
                kernel_initializer=initializer,
                name=name,
                dtype=self.dtype_policy,
            )

        # Q/K/V of all branches are MultiHeadAttention's (identical maths to
        # M separate d -> d_k projections, same initialisation as the zoo's
        # Transformer baseline).
        self._build_input_projections(query_shape, context_dim)
        # W_i^O: d_k -> d for each branch, no sum over branches.
        self.output_projection = dense(
            "bthk,hkd->bthd", (None, branches, model_dim), "hd", "output",
            per_branch_glorot)
        self.ffn_inner = dense(
            "bthd,hdf->bthf", (None, branches, self.intermediate_dim), "hf",
            "ffn_inner", per_branch_glorot, activation=self.activation)
        self.ffn_outer = dense(
            "bthf,hfd->bthd", (None, branches, model_dim), "hd", "ffn_outer",
            per_branch_glorot)
        self.output_projection.build((None, None, branches, self.key_dim))
        self.ffn_inner.build((None, None, branches, model_dim))
        self.ffn_outer.build((None, None, branches, self.intermediate_dim))

        if self.weight_parameterization == "projection":
            initializer = keras.initializers.Constant(1.0 / branches)
            constraint = SimplexProjection(self.min_branch_weight)
            suffix = ""
        else:
            initializer, constraint, suffix = "zeros", None, "_logits"
        self.kappa = self.add_weight(
            name="kappa" + suffix, shape=(branches,), initializer=initializer,
            constraint=constraint, trainable=True,
        )
        self.alpha = self.add_weight(
            name="alpha" + suffix, shape=(branches,), initializer=initializer,
            constraint=constraint, trainable=True,
        )
        # Lets `BranchWeightLearningRate` optimisers find κ/α.
        self.kappa._zoo_branch_weight = True
        self.alpha._zoo_branch_weight = True
        self.built = True

    # ---- κ and α ------------------------------------------------------------------

    def _simplex_weights(self):
        """κ and α as float32 tensors on the simplex."""
        kappa = ops.cast(self.kappa, "float32")
        alpha = ops.cast(self.alpha, "float32")
        if self.weight_parameterization == "softmax":
            kappa, alpha = ops.softmax(kappa), ops.softmax(alpha)
        return kappa, alpha

    def branch_weights(self):
        """`{"kappa": [M floats], "alpha": [M floats]}`, each summing to 1."""
        kappa, alpha = self._simplex_weights()
        return {
            "kappa": [float(x) for x in ops.convert_to_numpy(kappa)],
            "alpha": [float(x) for x in ops.convert_to_numpy(alpha)],
        }

    # ---- the computation -------------------------------------------------------------

    def _combine_heads(self, heads, training):
        """`Σ_i α_i FFN_i(κ_i head_i W_i^O)` for heads `[B, T, M, d_k]`."""
        kappa, alpha = self._simplex_weights()
        dtype = self.compute_dtype
        branch = self.output_projection(heads)  # [B, T, M, d]
        branch = branch * ops.cast(kappa, dtype)[None, None, :, None]
        hidden = self._feed_forward_dropout_layer(
            self.ffn_inner(branch), training=training
        )
        outputs = self.ffn_outer(hidden)  # [B, T, M, d]
        return ops.einsum("btmd,m->btd", outputs, ops.cast(alpha, dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "feed_forward_dropout": self.feed_forward_dropout,
                "activation": self.activation,
                "weight_parameterization": self.weight_parameterization,
                "min_branch_weight": self.min_branch_weight,
            }
        )
        return config

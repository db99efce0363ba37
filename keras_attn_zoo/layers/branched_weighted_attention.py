"""The Weighted Transformer's branched attention (attention + branch FFNs)."""

import keras
from keras import ops

from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
from keras_attn_zoo.layers.simplex_projection import SimplexProjection
from keras_attn_zoo.layers.softmax_of_uniform import SoftmaxOfUniform
from keras_attn_zoo.layers.transformer_blocks import LAYER_NORM_EPSILON

PARAMETERIZATIONS = ("projection", "softmax")
# The mark `build` sets on κ and α and `is_branch_weight` reads: one module owns both.
_BRANCH_WEIGHT_MARK = "_zoo_branch_weight"
# How κ/α multiply the branches, as (gain on κ, gain on α) in powers of M:
# as they are (the paper's equations), both times M (mean 1 at the uniform
# start), or κ times M and α times sqrt(M) (the α-sum of M independent
# unit-RMS branches then has unit RMS at the uniform start). See the class
# docstring.
WEIGHT_GAINS = {"simplex": (0.0, 0.0), "branches": (1.0, 1.0), "branches_rms": (1.0, 0.5)}
# Where κ/α start: 1/M each (the paper does not say; the zoo's default), or
# the port's random start, softmax of logits drawn from U[0, 1).
WEIGHT_INITIALIZATIONS = ("uniform", "random")


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BranchedWeightedAttention(MultiHeadAttention):
    """Branched attention of the Weighted Transformer (Ahmed et al., 2017).

    M branches (M = `num_heads`), each with its own query/key/value
    projections `d -> d_k`, its own output projection `W_i^O: d_k -> d`, a
    concatenation weight κ_i and its own feed-forward network FFN_i. The
    paper's equations (arXiv:1711.02132, Eqs. 3-5; REFERENCE.md section 3):

        head_i     = Attention(Q W_i^Q, K W_i^K, V W_i^V)
        head_bar_i = κ_i · head_i W_i^O
        output     = Σ_i α_i FFN_i(head_bar_i)

    with κ and α non-negative and summing to 1 in each layer ("we require each
    of these variables to be non-negative and also add to 1"); the sum is
    then "added together and normalized", which the zoo's block does (the
    residual and LayerNorm around this layer). The layer therefore replaces a
    Transformer's attention sublayer *and* its FFN sublayer: use it in a block
    with `use_feed_forward=False`. All branches run in one batched einsum each.

    The attention itself, its masks and its decoding cache are those of
    `MultiHeadAttention` (this class subclasses it, one branch per head):
    only the output projection differs, replaced by the κ/FFN/α mixing above.

    What the paper leaves open, and the choices here (defaults reproduce the
    equations above literally; the options are named as not the paper's):

    * How κ and α stay on the simplex: the text says only that they must.
      `weight_parameterization="projection"` (default) keeps the weights
      themselves and projects them onto the simplex after each optimiser
      update (`SimplexProjection`, Euclidean projection, Duchi et al. 2008).
      That is a choice of the zoo (REFERENCE.md attributes it to a public
      port), not the paper's. The port jayparks/transformer (read for issue
      32) instead takes `softmax` of trainable logits, offered as
      `"softmax"`. A projection can set a weight to exactly 0, which stops
      the gradient of that branch's other parameters (and, for κ_i while
      FFN_i's biases are still 0, of κ_i itself; see
      `keras_attn_zoo.layers.simplex_projection`); `min_branch_weight > 0`
      prevents this.
    * The gain (`weight_gain`). At the uniform start each branch is scaled
      by κ_i α_i = 1/M², and ReLU FFNs with zero biases pass the scale
      through, so the sublayer's update to the residual stream is about 10x
      smaller than a Transformer attention sublayer's (issue 32: RMS
      0.057-0.079 against 0.57-0.67), an effective learning rate ~M² lower
      under Adam. `"simplex"` (default) is the paper's equation as written.
      `"branches"` keeps κ and α on the simplex (same constraint, same
      interpretation as selection probabilities) but applies them as M·κ_i
      and M·α_i, so the uniform start multiplies every branch by 1 (not the
      paper's; the zoo's correction, issue 32's proposal). The sum of M
      branches of unit scale then starts ~1.5x above the attention
      sublayer (layer-level at the "small" shape, 1.53-1.61x; with the
      random start below 1.78-2.01x). `"branches_rms"` applies M·κ_i and
      sqrt(M)·α_i: the α-sum of M roughly independent branches has RMS
      sqrt(Σ α_i²) = 1/sqrt(M) of one branch at the uniform start, which
      sqrt(M) restores (also the zoo's, not the paper's).
    * The per-branch residual and norm (`branch_residual_norm`). The port
      wraps each branch FFN in its own residual and LayerNorm, FFN_i(y) ->
      LN_i(y + FFN_i(y)) with y = κ_i head_i W_i^O; the paper's text has
      neither. Each branch then has unit RMS whatever κ_i, and the α-sum
      has RMS about 1/sqrt(M) at the uniform start. LayerNorm is scale
      invariant, so under this option κ_i acts only through FFN_i's biases
      (and the norm's epsilon): while those biases are 0 (a fresh layer)
      κ_i's gradient is ~0 (the port's PyTorch convolutions start with
      non-zero biases).
    * The start of κ and α (`weight_initialization`): the paper does not say.
      `"uniform"` (default): 1/M each. Then, with zero biases, FFN_i(κ_i y) =
      κ_i FFN_i(y), the output is Σ κ_i α_i FFN_i(y_i) and dL/dκ_i = α_i g_i
      = κ_i g_i = dL/dα_i: the two move in lockstep (one degree of freedom
      per branch, not two). `"random"` is the port's start, softmax of
      logits drawn from U[0, 1) (`SoftmaxOfUniform`), which breaks the tie
      (the gradients differ by the factor α_i / κ_i).

    The branch FFN width is not stated in the seed text (the blog version of
    the paper), only that each branch has "its own" FFN_i of the Transformer's
    form. The zoo's builder gives each branch `intermediate_dim / M` by
    default, at which the model keeps the Transformer's size as in the
    paper's comparison; `"full"` gives every branch the whole
    `intermediate_dim` (M times the FFN parameters). See
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
        weight_gain: `"simplex"` (paper), `"branches"` (M·κ_i, M·α_i) or
            `"branches_rms"` (M·κ_i, sqrt(M)·α_i).
        branch_residual_norm: the port's LN_i(y + FFN_i(y)) per branch.
        weight_initialization: `"uniform"` (1/M) or `"random"` (port).

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

    `branch_weights()` returns `{"kappa": [...], "alpha": [...]}` as floats
    (the simplex values, before any gain).

    Examples:
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
        weight_gain="simplex",
        branch_residual_norm=False,
        weight_initialization="uniform",
        **kwargs,
    ):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias, **kwargs)
        if weight_parameterization not in PARAMETERIZATIONS:
            raise ValueError(
                f"weight_parameterization must be one of {PARAMETERIZATIONS}, "
                f"got {weight_parameterization!r}."
            )
        for name, value, choices in (
            ("weight_gain", weight_gain, WEIGHT_GAINS),
            ("weight_initialization", weight_initialization, WEIGHT_INITIALIZATIONS),
        ):
            if value not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {value!r}.")
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
        self.weight_gain = weight_gain
        self.branch_residual_norm = bool(branch_residual_norm)
        self.weight_initialization = weight_initialization
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

        if self.branch_residual_norm:
            # LN_i of each branch: its own scale and offset over d.
            self.branch_norm_scale = self.add_weight(
                name="branch_norm_scale", shape=(branches, model_dim),
                initializer="ones", trainable=True)
            self.branch_norm_offset = self.add_weight(
                name="branch_norm_offset", shape=(branches, model_dim),
                initializer="zeros", trainable=True)

        random_start = self.weight_initialization == "random"
        if self.weight_parameterization == "projection":
            constraint = SimplexProjection(self.min_branch_weight)
            suffix = ""
        else:
            constraint, suffix = None, "_logits"

        def initializer():
            # A fresh random initializer per weight: one instance (seed drawn
            # once) would give κ and α the same draw, i.e. the tie again.
            if not random_start:
                return (keras.initializers.Constant(1.0 / branches)
                        if constraint is not None else "zeros")
            return (SoftmaxOfUniform() if constraint is not None
                    else keras.initializers.RandomUniform(0.0, 1.0))

        self.kappa = self.add_weight(
            name="kappa" + suffix, shape=(branches,), initializer=initializer(),
            constraint=constraint, trainable=True,
        )
        self.alpha = self.add_weight(
            name="alpha" + suffix, shape=(branches,), initializer=initializer(),
            constraint=constraint, trainable=True,
        )
        # Lets `BranchWeightLearningRate` optimisers find κ/α (`is_branch_weight`).
        setattr(self.kappa, _BRANCH_WEIGHT_MARK, True)
        setattr(self.alpha, _BRANCH_WEIGHT_MARK, True)
        self.built = True

    # ---- κ and α ------------------------------------------------------------------

    def _simplex_weights(self):
        """κ and α as float32 tensors on the simplex."""
        kappa = ops.cast(self.kappa, "float32")
        alpha = ops.cast(self.alpha, "float32")
        if self.weight_parameterization == "softmax":
            kappa, alpha = ops.softmax(kappa), ops.softmax(alpha)
        return kappa, alpha

    def _applied_weights(self):
        """κ and α as they multiply the branches (the gain applied)."""
        kappa, alpha = self._simplex_weights()
        kappa_power, alpha_power = WEIGHT_GAINS[self.weight_gain]
        return (kappa * float(self.num_heads) ** kappa_power,
                alpha * float(self.num_heads) ** alpha_power)

    def _branch_norm(self, x):
        """LayerNorm over d of each branch `[B, T, M, d]`, in float32."""
        x32 = ops.cast(x, "float32")
        mean = ops.mean(x32, axis=-1, keepdims=True)
        variance = ops.var(x32, axis=-1, keepdims=True)
        normed = (x32 - mean) * ops.rsqrt(variance + LAYER_NORM_EPSILON)
        normed = normed * self.branch_norm_scale + self.branch_norm_offset
        return ops.cast(normed, x.dtype)

    def branch_weights(self):
        """`{"kappa": [M floats], "alpha": [M floats]}`, each summing to 1."""
        kappa, alpha = self._simplex_weights()
        return {
            "kappa": [float(x) for x in ops.convert_to_numpy(kappa)],
            "alpha": [float(x) for x in ops.convert_to_numpy(alpha)],
        }

    # ---- the computation -------------------------------------------------------------

    def _combine_heads(self, heads, training):
        """`Σ_i α_i FFN_i(κ_i head_i W_i^O)` for heads `[B, T, M, d_k]`
        (with the options: gain on κ/α, LN_i(y + FFN_i(y)) per branch)."""
        kappa, alpha = self._applied_weights()
        dtype = self.compute_dtype
        branch = self.output_projection(heads)  # [B, T, M, d]
        branch = branch * ops.cast(kappa, dtype)[None, None, :, None]
        hidden = self._feed_forward_dropout_layer(
            self.ffn_inner(branch), training=training
        )
        outputs = self.ffn_outer(hidden)  # [B, T, M, d]
        if self.branch_residual_norm:
            outputs = self._branch_norm(branch + outputs)
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
                "weight_gain": self.weight_gain,
                "branch_residual_norm": self.branch_residual_norm,
                "weight_initialization": self.weight_initialization,
            }
        )
        return config


def is_branch_weight(variable):
    """`True` for the κ/α variables of `BranchedWeightedAttention` layers (the
    optimiser of `models.weighted_optimizer` gives them their own rate)."""
    return bool(getattr(variable, _BRANCH_WEIGHT_MARK, False))

"""Dot-product cross-attention fused with a Gaussian mixture (Zhang & Feng, 2021)."""

import math

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import attend_values
from keras_attn_zoo.layers.attention_utils import combine_key_mask
from keras_attn_zoo.layers.attention_utils import masked_softmax
from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention

NORMALIZATIONS = ("approximate", "strict", "none")

# "none" (Graves' synthesis network) exponentiates raw FFN outputs; they are
# clipped to this before `exp` so the unnormalised weights stay finite (and
# castable to float16: K * e^8 < 65504).
MAX_EXPONENT = 8.0
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class GaussianMixtureCrossAttention(MultiHeadAttention):
    """Cross-attention whose every head mixes dot-product and GMM attention.

    Each head computes the usual dot-product ("distributed") attention
    `alpha_ij = softmax_j(Q(s_i) K(z_j) / sqrt(d_k))` and a "concentrated"
    attention `beta_ij`, a mixture of `K` Gaussians over source positions
    whose parameters are predicted from the same query `Q(s_i)` by three small
    feed-forward networks shared by all heads (paper Eqs. 7-9):

        omega_hat, mu_hat, sigma_hat = V^T tanh(W^T Q(s_i) + b1) + b2

    with `W: d_k x d_k` and `V: d_k x K`. A gate predicted the same way
    (Eq. 14, `V_g: d_k x 1`), `g_i = sigmoid(V_g^T tanh(W_g^T Q(s_i) + b) + b')`,
    fuses them, `gamma_ij = (1 - g_i) alpha_ij + g_i beta_ij` (Eq. 13), and the
    context is `sum_j gamma_ij V(z_j)` (Eq. 15), followed by the usual output
    projection. The query/key/value/output projections are those of
    `MultiHeadAttention` (this class subclasses it); the gate and the three
    FFNs add `3 (d_k^2 + d_k + d_k K + K) + (d_k^2 + 2 d_k + 1)` parameters
    per layer (17,485 for Transformer-base's `d_k = 64`, `K = 4`).

    Conversions (paper Table 1), `J` being each sentence's real (unpadded)
    source length:

    * `"approximate"` (the paper's method and default): `omega =
      softmax(omega_hat)`, `mu = J sigmoid(mu_hat)`, `sigma = min(J/6
      sigmoid(sigma_hat), mu/3, (J - mu)/3)` (Eq. 12), `Z = sqrt(2 pi
      sigma^2)`, `beta_ij = sum_k omega_k exp(-(p_j - mu_k)^2 / (2
      sigma_k^2)) / Z_k` (Eq. 6).
    * `"strict"` ("Our Method+Norm."): `sigma = J sigmoid(sigma_hat)` and beta
      divided by its sum over the real source positions.
    * `"none"` (Graves' synthesis network): `Z = 1`, `omega = exp(omega_hat)`,
      `sigma = sqrt(exp(-sigma_hat) / 2)` and monotonic means `mu_i =
      mu_{i-1} + exp(mu_hat_i)` with `mu_{-1} = 0`: a cumulative sum over
      target positions in teacher forcing, the previous step's `mu` carried in
      the cache while decoding. `omega_hat`, `mu_hat` are clipped to at most
      `MAX_EXPONENT` (8) and `sigma_hat` to at least `-2 MAX_EXPONENT` before
      `exp` so nothing overflows (a choice of this implementation).

    Decisions the paper leaves open:

    * Position convention: source token `j` (0-based) sits at `p_j = j +
      position_offset`, by default the cell centre `j + 0.5`. The real source
      then spans `[0, J]`, `mu in (0, J)` ranges over it symmetrically, and
      Eq. 12's guarantee `[mu - 3 sigma, mu + 3 sigma] within [0, J]` means
      the Gaussian's 3-sigma interval lies over the source tokens' cells.
      `position_offset=0` gives the 0-based positions of a literal reading.
    * Sigma floor: `sigma = max(sigma, min_sigma)` (default 0.1 token) in every
      variant. Eq. 12 reaches `sigma = 0` at `mu -> 0`, `mu -> J` and
      `sigmoid(sigma_hat) -> 0`, and `J = 1` caps sigma at 1/6. Below ~0.1 a
      Gaussian sampled at unit spacing is already one-hot (or empty), so
      smaller values change no shape, only the height of the spike
      `1 / (sqrt(2 pi) sigma)`; the floor bounds it by ~4 and keeps the
      division and its gradients finite (no NaN for `J = 1`, nor for an
      all-padding row where `J = 0`).
    * Coverage: with `sigma >= 0.5` the unit-spaced sum of each approximately
      normalised Gaussian is within ~2% of its integral over `[0, J]`
      (>= 99.7%), so beta sums to >= 0.9 over the real source as the paper
      says; for smaller sigma (short sentences: `sigma <= J/6`) it may not.
    * Padded source positions get weight 0 in alpha, beta and gamma. All the
      mixture maths runs in float32 (the FFNs in the layer's compute dtype).

    Args:
        num_heads: number of heads `h`.
        key_dim: size of each head `d_k` (the FFNs are `d_k -> d_k -> K`).
        num_components: mixture size `K` (paper default 4, best of 1..8).
        normalization: `"approximate"`, `"strict"` or `"none"` (see above).
        min_sigma: floor of every standard deviation, in tokens.
        position_offset: position of token `j` is `j + position_offset`.
        dropout: dropout on the fused weights gamma.
        use_bias: whether the query/key/value/output projections have biases.

    Call arguments:
        query: `[B, T, d]` decoder states.
        context: `[B, S, d]` encoder output (required: cross-attention only).
        context_mask: boolean `[B, S]`, `True` for real source tokens; `None`
            means every position is real (`J = S`).
        causal: must be `False` (kept for the attention protocol).
        training: Python bool, enables dropout.
        return_attention: also return gamma `[B, h, T, S]` (float32);
            `"maps"` (the blocks' `ATTENTION_MAPS`) returns instead the dict
            `{"weights": gamma, "cross_dot_product": alpha, "cross_mixture":
            beta, "gmm_gate": gate}`, the names the model's `attention_maps`
            reports.
        return_components: return `(output, components)` instead, with the
            float32 dict `gate` `[B, h, T]`, `dot_product` (alpha), `mixture`
            (beta) and `fused` (gamma) `[B, h, T, S]`, and `omega`, `mu`,
            `sigma` `[B, h, T, K]`. Takes precedence over `return_attention`.

    Incremental decoding: `initial_cache(batch_size, max_length, context)`
    holds the projected source keys/values and, for `"none"`, `previous_mu`
    `[B, h, K]` (float32, zeros). `step(query, step, cache, context_mask)`
    reads `J` from `context_mask` (the protocol's `initial_cache` does not
    receive the mask; counting it is exact and cheap) and returns gamma as the
    attention weights `[B, h, 1, S]`.

    Examples:
        >>> layer = GaussianMixtureCrossAttention(num_heads=2, key_dim=8)
        >>> target = keras.random.normal((2, 5, 16))
        >>> source = keras.random.normal((2, 7, 16))
        >>> output, parts = layer(target, source, return_components=True)
        >>> tuple(output.shape), tuple(parts["mixture"].shape), tuple(parts["mu"].shape)
        ((2, 5, 16), (2, 2, 5, 7), (2, 2, 5, 4))

    References:
        Zhang & Feng, "Modeling Concentrated Cross-Attention for Neural
        Machine Translation with Gaussian Mixture Model", Findings of EMNLP
        2021. Graves, "Generating Sequences With Recurrent Neural Networks",
        2013 (the synthesis network, `normalization="none"`).
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        num_components=4,
        normalization="approximate",
        min_sigma=0.1,
        position_offset=0.5,
        dropout=0.0,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias, **kwargs)
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}."
            )
        if int(num_components) < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}.")
        if not min_sigma > 0:
            raise ValueError(f"min_sigma must be > 0, got {min_sigma}.")
        self.num_components = int(num_components)
        self.normalization = normalization
        self.min_sigma = float(min_sigma)
        self.position_offset = float(position_offset)

        def ffn(name, units):
            hidden = keras.layers.Dense(
                key_dim, activation="tanh", name=f"{name}_hidden",
                dtype=self.dtype_policy,
            )
            output = keras.layers.Dense(
                units, name=f"{name}_output", dtype=self.dtype_policy
            )
            return hidden, output

        self.omega_hidden, self.omega_output = ffn("omega", self.num_components)
        self.mu_hidden, self.mu_output = ffn("mu", self.num_components)
        self.sigma_hidden, self.sigma_output = ffn("sigma", self.num_components)
        self.gate_hidden, self.gate_output = ffn("gate", 1)

    def _ffns(self):
        return {
            "omega": (self.omega_hidden, self.omega_output),
            "mu": (self.mu_hidden, self.mu_output),
            "sigma": (self.sigma_hidden, self.sigma_output),
            "gate": (self.gate_hidden, self.gate_output),
        }

    def build(self, query_shape, context_shape=None):
        super().build(query_shape, context_shape)
        head_shape = (None, None, self.num_heads, self.key_dim)
        for hidden, output in self._ffns().values():
            hidden.build(head_shape)
            output.build(head_shape)
        self.built = True

    # ---- the mixture --------------------------------------------------------------

    def _predict(self, query_heads):
        """FFN outputs `[B, h, T, K]` (gate `[B, h, T, 1]`), float32."""
        outputs = {}
        for name, (hidden, output) in self._ffns().items():
            value = ops.cast(output(hidden(query_heads)), "float32")  # [B, T, h, n]
            outputs[name] = ops.transpose(value, (0, 2, 1, 3))
        return outputs

    def _mixture(self, predicted, key_mask, previous_mu=None):
        """Gaussian-mixture attention beta `[B, h, T, S]` and its parameters.

        Args:
            predicted: `_predict` output.
            key_mask: boolean `[B, S]`.
            previous_mu: `[B, h, K]` mean of the previous target position
                (step decoding of `"none"`); `None` in teacher forcing.
        """
        omega_hat, mu_hat, sigma_hat = (
            predicted["omega"], predicted["mu"], predicted["sigma"]
        )
        real = ops.cast(key_mask, "float32")  # [B, S]
        length = ops.sum(real, axis=-1)[:, None, None, None]  # J, [B, 1, 1, 1]
        if self.normalization == "none":
            log_omega = ops.minimum(omega_hat, MAX_EXPONENT)
            increments = ops.exp(ops.minimum(mu_hat, MAX_EXPONENT))
            if previous_mu is None:
                mu = ops.cumsum(increments, axis=2)
            else:
                mu = previous_mu[:, :, None, :] + increments
            sigma = ops.exp(-0.5 * ops.maximum(sigma_hat, -2.0 * MAX_EXPONENT))
            sigma = sigma / math.sqrt(2.0)
        else:
            log_omega = ops.log_softmax(omega_hat, axis=-1)
            mu = length * ops.sigmoid(mu_hat)
            if self.normalization == "approximate":
                sigma = ops.minimum(
                    length / 6.0 * ops.sigmoid(sigma_hat),
                    ops.minimum(mu / 3.0, (length - mu) / 3.0),
                )
            else:
                sigma = length * ops.sigmoid(sigma_hat)
        sigma = ops.maximum(sigma, self.min_sigma)

        source_length = ops.shape(key_mask)[1]
        positions = ops.cast(ops.arange(source_length), "float32") + self.position_offset
        distance = positions - mu[..., None]  # [B, h, T, K, S]
        log_terms = log_omega[..., None] - ops.square(distance) / (
            2.0 * ops.square(sigma)[..., None]
        )
        if self.normalization != "none":
            log_terms = log_terms - (_LOG_SQRT_2PI + ops.log(sigma))[..., None]
        real = real[:, None, None, :]  # [B, 1, 1, S]
        if self.normalization == "strict":
            beta = masked_softmax(ops.logsumexp(log_terms, axis=3), real > 0)
        else:
            beta = ops.sum(ops.exp(log_terms), axis=3)
        beta = beta * real
        return beta, {"omega": ops.exp(log_omega), "mu": mu, "sigma": sigma}

    def _fuse(self, query_heads, key_heads, value_heads, key_mask, training,
              previous_mu=None):
        alpha = self._attention_weights(
            query_heads, key_heads, combine_key_mask(key_mask)
        )
        predicted = self._predict(query_heads)
        beta, parameters = self._mixture(predicted, key_mask, previous_mu)
        gate = ops.sigmoid(predicted["gate"])  # [B, h, T, 1]
        gamma = (1.0 - gate) * alpha + gate * beta
        context = attend_values(gamma, value_heads, self._dropout_layer, training)
        components = {
            "gate": gate[..., 0],
            "dot_product": alpha,
            "mixture": beta,
            "fused": gamma,
            **parameters,
        }
        return self.output_projection(context), components

    @staticmethod
    def _key_mask(context_mask, context):
        if context_mask is None:
            return ops.ones(ops.shape(context)[:2], dtype="bool")
        return ops.cast(context_mask, "bool")

    def call(
        self,
        query,
        context=None,
        context_mask=None,
        causal=False,
        training=None,
        return_attention=False,
        return_components=False,
    ):
        if context is None:
            raise ValueError(
                "GaussianMixtureCrossAttention is cross-attention only: pass the "
                "encoder output as `context`."
            )
        if causal:
            raise ValueError("GaussianMixtureCrossAttention does not support causal=True.")
        output, components = self._fuse(
            self.query_projection(query),
            self.key_projection(context),
            self.value_projection(context),
            self._key_mask(context_mask, context),
            training,
        )
        if return_components:
            return output, components
        if isinstance(return_attention, str) and return_attention == "maps":
            return output, {"weights": components["fused"],
                            "cross_dot_product": components["dot_product"],
                            "cross_mixture": components["mixture"],
                            "gmm_gate": components["gate"]}
        return (output, components["fused"]) if return_attention else output

    # ---- incremental decoding -------------------------------------------------

    def initial_cache(self, batch_size, max_length, context=None):
        """Projected source keys/values (+ `previous_mu` zeros for `"none"`)."""
        if context is None:
            raise ValueError("GaussianMixtureCrossAttention needs the encoder output.")
        cache = super().initial_cache(batch_size, max_length, context)
        if self.normalization == "none":
            cache["previous_mu"] = ops.zeros(
                (batch_size, self.num_heads, self.num_components), "float32"
            )
        return cache

    def step(self, query, step, cache, context_mask=None):
        """Attends from one target position `[B, 1, d]` to the cached source.

        Returns:
            `(output [B, 1, d], cache, fused weights gamma [B, h, 1, S])`.
        """
        del step  # the mixture depends on the position only through the cache
        key_mask = self._key_mask(context_mask, cache["key"])
        output, components = self._fuse(
            self.query_projection(query),
            cache["key"],
            cache["value"],
            key_mask,
            training=False,
            previous_mu=cache.get("previous_mu"),
        )
        new_cache = {"key": cache["key"], "value": cache["value"]}
        if self.normalization == "none":
            new_cache["previous_mu"] = components["mu"][:, :, 0, :]
        return output, new_cache, components["fused"]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_components": self.num_components,
                "normalization": self.normalization,
                "min_sigma": self.min_sigma,
                "position_offset": self.position_offset,
            }
        )
        return config

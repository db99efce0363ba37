"""Hard-coded Gaussian self-attention (HC-SA), a RAN paper baseline."""

import math

import keras
from keras import ops

from keras_attn_zoo.layers.fixed_pattern_attention import FixedPatternAttention

ENCODER_OFFSETS = (-1, 1)
DECODER_OFFSETS = (-1, 0)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class HardCodedGaussianAttention(FixedPatternAttention):
    """Attention weights fixed to a Gaussian around each query's position.

    Head `k` gives key `j` of query `i` the weight
    `N(j; i + offset_k, sigma) = exp(-(j - i - offset_k)^2 / (2 sigma^2)) /
    (sigma sqrt(2 pi))` over integer positions. Offsets cycle over the heads:
    You et al. (and the RAN paper's HC-SA baseline) use `(-1, +1)` in the
    encoder and `(-1, 0)` in the decoder, `sigma = 1`. Only value and output
    projections are learned.

    Masking and normalisation: as in the reference, the weights are *not*
    renormalised by default, so masked keys (padding, and future keys in the
    decoder) simply get weight 0 and a row's weights sum to the Gaussian mass
    on its visible keys (about 1 inside a sentence, less near its edges or in
    the decoder, where `j > i` is cut off). Real tokens therefore never
    depend on how much padding follows them. `renormalize=True` divides
    each row by that mass instead (weights sum to 1 over visible keys).

    The pattern needs no table, so any length works.

    Args:
        num_heads: heads `h`.
        key_dim: per-head value size.
        offsets: sequence of integer centre offsets, head `k` uses
            `offsets[k % len(offsets)]`.
        sigma: standard deviation in positions.
        renormalize: divide each row by its mass over visible keys.
        dropout: dropout on the attention weights.
        use_bias: biases of the value and output projections.

    Call arguments:
        as `MultiHeadAttention`.

    Examples:
        >>> layer = HardCodedGaussianAttention(num_heads=2, key_dim=8, offsets=(-1, 0))
        >>> tuple(layer(keras.random.normal((2, 5, 16)), causal=True).shape)
        (2, 5, 16)

    References:
        You, Sun and Iyyer, "Hard-Coded Gaussian Attention for Neural Machine
        Translation", ACL 2020.
    """

    pattern_is_logits = False

    def __init__(
        self,
        num_heads,
        key_dim,
        offsets=ENCODER_OFFSETS,
        sigma=1.0,
        renormalize=False,
        dropout=0.0,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias,
                         **kwargs)
        offsets = [int(offset) for offset in offsets]
        if not offsets:
            raise ValueError("offsets must hold at least one offset.")
        if sigma <= 0:
            raise ValueError(f"sigma must be positive, got {sigma}.")
        self.offsets = offsets
        self.sigma = float(sigma)
        self.renormalize = renormalize

    def head_offsets(self):
        """The centre offset of every head, a list of `num_heads` ints."""
        return [self.offsets[k % len(self.offsets)] for k in range(self.num_heads)]

    def _pattern(self, query_start, query_length, key_length):
        queries = ops.cast(ops.arange(query_length) + query_start, "float32")
        keys = ops.cast(ops.arange(key_length), "float32")
        offsets = ops.convert_to_tensor(self.head_offsets(), "float32")
        distance = (
            keys[None, None, :] - queries[None, :, None] - offsets[:, None, None]
        )
        scale = 1.0 / (self.sigma * math.sqrt(2.0 * math.pi))
        return scale * ops.exp(-ops.square(distance) / (2.0 * self.sigma**2))

    def _finish_weights(self, weights):
        if not self.renormalize:
            return weights
        mass = ops.sum(weights, axis=-1, keepdims=True)
        return weights / ops.maximum(mass, 1e-12)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "offsets": list(self.offsets),
                "sigma": self.sigma,
                "renormalize": self.renormalize,
            }
        )
        return config

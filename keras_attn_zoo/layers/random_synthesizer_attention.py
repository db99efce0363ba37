"""Random Synthesizer attention (Syn-R), a RAN paper baseline."""

import keras
from keras import ops

from keras_attn_zoo.layers.fixed_pattern_attention import FixedPatternAttention
from keras_attn_zoo.layers.fixed_pattern_attention import check_max_length


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class RandomSynthesizerAttention(FixedPatternAttention):
    """Attention logits that are a learned `(n, n)` matrix per head.

    Scores for queries `0..T-1` and keys `0..S-1` are `R[:, :T, :S]` (the same
    for every sentence), masked like RAN (padded keys, future keys in the
    decoder), softmax over keys in float32, attention dropout, then a value
    and an output projection. Unlike RAN there is no transition: every layer
    owns its own `R` (`h n^2` parameters per layer).

    Args:
        num_heads: heads `h`.
        key_dim: per-head value size.
        max_length: `n`, the longest sequence accepted (RAN paper: 256). Longer
            sequences are an error naming `max_length`.
        dropout: dropout on the attention weights.
        use_bias: biases of the value and output projections.
        trainable_logits: learn `R` (Random Synthesizer) or keep its random
            initialisation (the "fixed random" variant of Tay et al.).
        logits_initializer: initializer of `R`.

    Call arguments:
        as `MultiHeadAttention`.

    Examples:
        >>> layer = RandomSynthesizerAttention(num_heads=2, key_dim=8, max_length=32)
        >>> tuple(layer(keras.random.normal((2, 5, 16)), causal=True).shape)
        (2, 5, 16)

    References:
        Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer
        Models", ICML 2021.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        max_length,
        dropout=0.0,
        use_bias=True,
        trainable_logits=True,
        logits_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias,
                         **kwargs)
        if max_length is None or int(max_length) < 1:
            raise ValueError(
                "RandomSynthesizerAttention needs a positive max_length (the size "
                f"of its logit matrices); got max_length={max_length}."
            )
        self.max_length = int(max_length)
        self.trainable_logits = trainable_logits
        self.logits_initializer = keras.initializers.get(logits_initializer)

    def build(self, query_shape, context_shape=None):
        super().build(query_shape, context_shape)
        n = self.max_length
        self.logits = self.add_weight(
            name="logits",
            shape=(self.num_heads, n, n),
            initializer=self.logits_initializer,
            trainable=self.trainable_logits,
        )
        self.built = True

    def _pattern(self, query_start, query_length, key_length):
        query_end = check_max_length(query_start + query_length, self.max_length)
        key_length = check_max_length(key_length, self.max_length)
        return ops.slice(
            ops.convert_to_tensor(self.logits), (0, query_end - query_length, 0),
            (self.num_heads, query_length, key_length),
        )

    def _check_cache_length(self, max_length):
        return check_max_length(max_length, self.max_length, "decoding length")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "trainable_logits": self.trainable_logits,
                "logits_initializer": keras.initializers.serialize(
                    self.logits_initializer
                ),
            }
        )
        return config

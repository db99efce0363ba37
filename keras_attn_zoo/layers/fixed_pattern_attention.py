"""Shared machinery of attention whose weights do not depend on the input.

RAN (`RecurrentAttention`), the Random Synthesizer
(`RandomSynthesizerAttention`) and hard-coded Gaussian attention
(`HardCodedGaussianAttention`) all attend with a per-head pattern that is a
function of the query and key *positions* only. What they share lives here,
once: the value and output projections (there are no query or key
projections), slicing the pattern to the current lengths, padding and causal
masking, float32 normalisation, attention dropout, and the incremental-decoding
cache (a value buffer; step `t` uses row `t` of the pattern over keys `0..t`).

A subclass implements `_pattern(query_start, query_length, key_length, **inputs)`
returning `[h, query_length, key_length]` scores for query positions
`query_start .. query_start + query_length - 1` and key positions
`0 .. key_length - 1`. With `pattern_is_logits = True` (the default) they are
logits normalised by a masked softmax; with `False` they are weights used as
they are, masked keys set to 0 (hard-coded Gaussian attention).

`check_max_length` is the one place a fixed-size table's limit is enforced:
a Python `ValueError` when the length is a Python int (eager execution, static
shapes), a run-time assertion in TensorFlow graphs (`tf.function`, exported
SavedModels) with dynamic lengths (`runtime.checked_at_run_time`). Both name
`max_length` and the actual length; sequences are never silently truncated.
"""

import keras
import numpy as np
from keras import ops

from keras_attn_zoo.layers.attention_utils import attend_values
from keras_attn_zoo.layers.attention_utils import combine_key_mask
from keras_attn_zoo.layers.attention_utils import empty_self_attention_cache
from keras_attn_zoo.layers.attention_utils import masked_softmax
from keras_attn_zoo.layers.attention_utils import sequence_mask
from keras_attn_zoo.layers.attention_utils import write_self_attention_step
from keras_attn_zoo.layers.headed_attention import HeadedAttention
from keras_attn_zoo.layers.heads_projection import HeadsProjection
from keras_attn_zoo.runtime import checked_at_run_time


def check_max_length(length, max_length, what="sequence"):
    """Returns `length` once it is known to be `<= max_length`.

    Args:
        length: Python int or scalar int tensor.
        max_length: Python int, or `None` for no limit.
        what: what is being measured, used in the message.

    Raises:
        ValueError: for a Python int above the limit. In a TensorFlow graph the
            returned tensor depends on an assertion that fails at run time with
            `InvalidArgumentError` naming `max_length` and the length.
    """
    if max_length is None:
        return length
    advice = (
        "this model has fixed-size attention tables; rebuild it with a larger "
        "max_length (inputs are never truncated)."
    )
    if isinstance(length, (int, np.integer)):
        if length > max_length:
            raise ValueError(
                f"The {what} has length {int(length)} but max_length is "
                f"{max_length}: {advice}"
            )
        return length
    # A tensor: a dynamic length in a TensorFlow graph (JAX and PyTorch have
    # Python ints here, or symbolic sizes while Keras infers output shapes).
    return checked_at_run_time(
        length, lambda: ops.less_equal(ops.cast(length, "int64"), max_length),
        [f"The {what} has length", length, f"but max_length is {max_length}:", advice],
        name="check_max_length",
    )


class FixedPatternAttention(HeadedAttention):
    """Base class: attention weights from a per-head positional pattern.

    Args:
        num_heads: number of heads `h`.
        key_dim: size of each head's value `d_v`; the output has the query's
            width.
        dropout: dropout rate on the attention weights.
        use_bias: whether the value and output projections have biases.

    Call arguments:
        as `MultiHeadAttention`.

    A subclass whose pattern needs inputs (RAN's `attention_matrix`) adds them
    to its own `call` and `step` and forwards them to `_attend_sequence` and
    `FixedPatternAttention.step`, which pass them on to `_pattern`. A
    subclass with weights of its own (the Synthesizer's logits) creates them
    in its `build` after calling this class's.

    Examples:
        >>> class Uniform(FixedPatternAttention):
        ...     def _pattern(self, query_start, query_length, key_length):
        ...         return keras.ops.zeros((self.num_heads, query_length, key_length))
        >>> layer = Uniform(num_heads=2, key_dim=8)
        >>> output, weights = layer(keras.random.normal((2, 5, 16)), causal=True,
        ...                         return_attention=True)
        >>> [round(float(w), 3) for w in weights[0, 0, 2]]
        [0.333, 0.333, 0.333, 0.0, 0.0]

    References:
        Zeng et al., "Recurrent Attention for Neural Machine Translation",
        EMNLP 2021 (RAN and the HC-SA and Syn-R baselines it compares).
    """

    pattern_is_logits = True

    def __init__(self, num_heads, key_dim, dropout=0.0, use_bias=True, **kwargs):
        super().__init__(num_heads, key_dim, dropout=dropout, use_bias=use_bias,
                         **kwargs)
        self.value_projection = HeadsProjection(
            num_heads, key_dim, use_bias, name="value", dtype=self.dtype_policy)
        self.output_projection = None

    def build(self, query_shape, context_shape=None):
        model_dim = query_shape[-1]
        context_dim = model_dim if context_shape is None else context_shape[-1]
        self.value_projection.build((None, None, context_dim))
        self._build_output_projection(model_dim)
        self.built = True

    def _pattern(self, query_start, query_length, key_length, **pattern_inputs):
        """`[h, query_length, key_length]` scores (see the module docstring)."""
        raise NotImplementedError

    def _weights(self, pattern, mask):
        """float32 `[1 or B, h, T, S]` weights from the pattern and the mask."""
        pattern = ops.cast(pattern, "float32")[None]
        if self.pattern_is_logits:
            return masked_softmax(pattern, mask)
        if mask is not None:
            pattern = ops.where(mask, pattern, ops.zeros_like(pattern))
        return self._finish_weights(pattern)

    def _finish_weights(self, weights):
        """Hook for fixed weights after masking (e.g. optional renormalising)."""
        return weights

    def _attend(self, pattern, values, mask, training):
        weights = self._weights(pattern, mask)
        batch_size = ops.shape(values)[0]
        weights = ops.broadcast_to(
            weights, (batch_size,) + tuple(ops.shape(weights)[1:])
        )
        context = attend_values(weights, values, self._dropout_layer, training)
        return self.output_projection(context), weights

    def call(
        self,
        query,
        context=None,
        context_mask=None,
        causal=False,
        training=None,
        return_attention=False,
    ):
        return self._attend_sequence(
            query, context, context_mask, causal, training, return_attention
        )

    def _attend_sequence(
        self, query, context, context_mask, causal, training, return_attention,
        **pattern_inputs,
    ):
        """`call` with extra `pattern_inputs` (subclasses add them to `call`)."""
        keys = query if context is None else context
        query_length = ops.shape(query)[1]
        key_length = ops.shape(keys)[1]
        pattern = self._pattern(0, query_length, key_length, **pattern_inputs)
        mask = sequence_mask(query_length, key_length, context_mask, causal)
        output, weights = self._attend(
            pattern, self.value_projection(keys), mask, training
        )
        return (output, weights) if return_attention else output

    # ---- incremental decoding -------------------------------------------------

    def _check_cache_length(self, max_length):
        """Hook: validate the decoding length before buffers are allocated."""
        return max_length

    def initial_cache(self, batch_size, max_length, context=None):
        """Cache for `step`: an empty value buffer that `step` grows (checked
        against `max_length` first; self-attention) or the projected source
        values (`context`)."""
        if context is not None:
            return {"value": self.value_projection(context)}
        self._check_cache_length(max_length)
        return {"value": empty_self_attention_cache(
            batch_size, self.num_heads, self.key_dim, self.compute_dtype)}

    def step(self, query, step, cache, context_mask=None, **pattern_inputs):
        """Attends from one query `[B, 1, d]` at position `step`.

        `context_mask=None`: causal self-attention; this step's value is
        written into the cache and row `step` of the pattern attends to keys
        `0..step`. Otherwise cross-attention over the cached source values.

        Returns:
            `(output [B, 1, d], cache, weights [B, h, 1, S])`.
        """
        if context_mask is None:
            cache, mask = write_self_attention_step(
                cache, step, {"value": self.value_projection(query)}
            )
        else:
            mask = combine_key_mask(context_mask)
        length = ops.shape(cache["value"])[1]
        pattern = self._pattern(step, 1, length, **pattern_inputs)
        output, weights = self._attend(pattern, cache["value"], mask, False)
        return output, cache, weights

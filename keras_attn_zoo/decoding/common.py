"""Pieces shared by the decode loop (``loop.py``) and its strategies.

The step protocol the loop drives (``keras_attn_zoo.models.zoo_model``):

* ``model.encode(source_ids) -> memory``
* ``model.initial_state(memory, max_length) -> state`` (a dict, batch first)
* ``model.decode_step(token, step, state) -> (logits, state)``
* ``model.max_decode_length``: decoder positions the model has, or None.

If ``state`` has the key ``"attention"`` (float32 ``[batch, source_length]``),
the searches record it at every step and return it as an alignment.

Leaves under ``state["shared"]`` are the same for every sentence (for example
RAN's attention matrices, computed once per call instead of once per step):
they are not batch-first and are never tiled or reordered with the beams.
"""

import tensorflow as tf

try:  # The data package owns the special ids; fall back if it is absent.
    from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID, PAD_ID
except ImportError:  # pragma: no cover - only while the data package is missing
    # Must stay identical to keras_attn_zoo/data/vocabulary.py.
    PAD_ID, BOS_ID, EOS_ID = 0, 2, 3

# Scores are float32; -inf would give NaN in (-inf) - (-inf), so dead
# hypotheses and banned tokens get this large finite negative instead.
NEG_INF = -1e9
# A score below this comes from a banned token or a dead hypothesis.
VALID_THRESHOLD = NEG_INF / 2
# When a sentence is forced to end at its max length but the model gives
# EOS zero probability, EOS gets this log-prob so a hypothesis still exists.
FORCED_EOS_FLOOR = -1e4
# Absorbs float32 rounding of max_length_a (1.2 * 5 = 6.0000002 -> ceil 7); the
# eager streamer (eager_processor.py) computes the same limit in Python with it.
CEIL_TOLERANCE = 1e-4


SHARED_STATE_KEY = "shared"


def map_batch_leaves(fn, state):
    """Applies ``fn`` to every batch-first leaf of ``state`` (not ``state["shared"]``)."""
    if isinstance(state, dict) and SHARED_STATE_KEY in state:
        rest = {k: v for k, v in state.items() if k != SHARED_STATE_KEY}
        mapped = tf.nest.map_structure(fn, rest)
        mapped[SHARED_STATE_KEY] = state[SHARED_STATE_KEY]
        return mapped
    return tf.nest.map_structure(fn, state)


def length_penalty(num_tokens, alpha):
    """GNMT length penalty ``((5 + num_tokens) / 6) ** alpha``.

    Args:
        num_tokens: int or int tensor, number of generated tokens *including*
            the final EOS.
        alpha: float or scalar float tensor; 0 turns the penalty off (lp = 1).

    Returns:
        float32 tensor shaped like ``num_tokens``.
    """
    num_tokens = tf.cast(num_tokens, tf.float32)
    return tf.pow((5.0 + num_tokens) / 6.0, tf.cast(alpha, tf.float32))


# The search every translation of the zoo runs unless told otherwise (the
# Translator, the run's evaluation, the dev monitor, the exported `translate`
# signature, the command line): beam 4, GNMT length penalty alpha 0.6.
DEFAULT_BEAM_SIZE = 4
DEFAULT_LENGTH_PENALTY = 0.6

# How beam search normalises a finished hypothesis' log-probability by its
# length: the GNMT penalty (the zoo's default), or the mean log-prob per token
# (Press & Smith's reference generate.py ranks by log-prob / (i + 1)).
LENGTH_NORMALIZATIONS = ("gnmt", "average")


def length_normalizer(kind, alpha):
    """``num_tokens -> divisor`` of a hypothesis' log-probability.

    Args:
        kind: ``"gnmt"``: :func:`length_penalty` with ``alpha``; ``"average"``:
            ``num_tokens`` itself (EOS included, as the reference's ``i + 1``;
            ``alpha`` is not used).
        alpha: the GNMT alpha (float or scalar float tensor).
    """
    if kind == "gnmt":
        return lambda num_tokens: length_penalty(num_tokens, alpha)
    if kind == "average":
        return lambda num_tokens: tf.cast(num_tokens, tf.float32)
    raise ValueError(
        f"length_normalization must be one of {LENGTH_NORMALIZATIONS}, got {kind!r}.")


def source_lengths(source_ids, pad_id=PAD_ID):
    """Number of non-pad tokens of each source sentence, int32 ``[B]``."""
    return tf.reduce_sum(tf.cast(tf.not_equal(source_ids, pad_id), tf.int32), axis=1)


def max_target_lengths(source_ids, max_length_a, max_length_b, max_decode_length=None):
    """Per-sentence limit ``ceil(a * source_length + b)``, int32 ``[B]``.

    The limit counts generated tokens *excluding* EOS: a sentence emits at most
    that many real tokens, and EOS is forced at the step right after them.
    With ``max_decode_length`` (a model's number of decoder positions,
    ``ZooModel.max_decode_length``) the limit is capped at
    ``max_decode_length - 1``, so the EOS step still has a position: a sentence
    reaching the cap gets EOS forced there, and the caches never outgrow the
    model.
    """
    length = tf.cast(source_lengths(source_ids), tf.float64)
    a = tf.cast(max_length_a, tf.float64)
    b = tf.cast(max_length_b, tf.float64)
    limit = tf.math.ceil(a * length + b - CEIL_TOLERANCE)
    limit = tf.maximum(tf.cast(limit, tf.int32), 0)
    if max_decode_length is not None:
        limit = tf.minimum(limit, tf.cast(max_decode_length, tf.int32) - 1)
    return limit


def num_decode_steps(max_lengths):
    """Steps the caches must hold: the batch's longest limit plus the EOS step."""
    # The appended 0 keeps reduce_max defined for an empty batch.
    return tf.reduce_max(tf.concat([max_lengths, [0]], axis=0)) + 1


def selection_log_probs(logits, step, tokens_so_far, state, row_max_lengths,
                        logits_processor):
    """Turns one step's logits into the float32 log-probs the search ranks.

    Order: log-softmax (float32) -> ``logits_processor`` -> PAD and BOS banned
    -> clamp to ``NEG_INF`` (so -inf never reaches the sums) -> rows at their
    max length may only emit EOS, with the model's own EOS log-prob (the
    processor cannot prevent a sentence from ending).

    Args:
        logits: ``[R, V]`` logits of any float dtype.
        step: scalar int32, 0-based index of the token being chosen.
        tokens_so_far: int32 ``[R, num_steps]``, tokens chosen before ``step``
            (0 from ``step`` on).
        state: the state returned by this step's ``decode_step``.
        row_max_lengths: int32 ``[R]``, each row's max length (excluding EOS).
        logits_processor: optional callable, see ``beam_search``.

    Returns:
        float32 ``[R, V]``, every entry ``>= NEG_INF``.
    """
    model_log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    log_probs = model_log_probs
    if logits_processor is not None:
        log_probs = tf.cast(
            logits_processor(log_probs, step, tokens_so_far, state), tf.float32)
    vocab = tf.range(tf.shape(log_probs)[-1])
    never_generated = tf.logical_or(tf.equal(vocab, PAD_ID), tf.equal(vocab, BOS_ID))
    log_probs = tf.where(never_generated[tf.newaxis, :], NEG_INF, log_probs)
    log_probs = tf.maximum(log_probs, NEG_INF)

    is_eos = tf.equal(vocab, EOS_ID)[tf.newaxis, :]
    eos_log_prob = tf.maximum(model_log_probs[:, EOS_ID], FORCED_EOS_FLOOR)
    only_eos = tf.where(is_eos, eos_log_prob[:, tf.newaxis], NEG_INF)
    at_limit = tf.greater_equal(step, row_max_lengths)[:, tf.newaxis]
    return tf.where(at_limit, only_eos, log_probs)


def write_column(buffer, step, values):
    """Returns ``buffer`` ``[R, T, ...]`` with ``buffer[:, step] = values``."""
    rows = tf.range(tf.shape(buffer)[0])
    indices = tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1)
    return tf.tensor_scatter_nd_update(buffer, indices, tf.cast(values, buffer.dtype))


def loop_shape_invariants(carry, state_key="state"):
    """``tf.while_loop`` shape invariants for a search's ``carry``.

    Every tensor keeps its shape, except the batch-first leaves of rank >= 3
    of ``carry[state_key]``, whose time axis (axis 1) may vary: self-attention
    caches ``[B, t, h, k]`` grow by one step per ``decode_step``
    (``layers.attention_utils.write_self_attention_step``). Rank-2 leaves
    (recurrent states ``[B, units]``) keep their static feature size.
    """
    def relax_time(tensor):
        shape = tensor.shape
        if shape.rank is None or shape.rank < 3:
            return shape
        return tf.TensorShape([shape[0], None]).concatenate(shape[2:])

    def own_shape(value):
        if isinstance(value, tf.TensorArray):
            return tf.TensorShape(None)  # while_loop tracks a TensorArray's own shape
        return value.shape

    invariants = tf.nest.map_structure(own_shape, carry)
    state = carry[state_key]
    if isinstance(state, dict) and SHARED_STATE_KEY in state:
        shared = invariants[state_key][SHARED_STATE_KEY]
        invariants[state_key] = map_batch_leaves(relax_time, state)
        invariants[state_key][SHARED_STATE_KEY] = shared
    else:
        invariants[state_key] = tf.nest.map_structure(relax_time, state)
    return invariants


def keep_static_shapes(new, shapes):
    """Gives each tensor of ``new`` the static shape in ``shapes``.

    Gathers with computed indices lose static dims; ``tf.while_loop`` rejects
    loop variables whose shape gets less specific, and Keras layers inside
    ``decode_step`` may need the static feature dims. ``shapes`` are the loop's
    ``loop_shape_invariants`` (so a growing cache keeps a free time axis).
    """
    def restore(new_tensor, shape):
        if not isinstance(new_tensor, tf.TensorArray):
            new_tensor.set_shape(shape)
        return new_tensor

    return tf.nest.map_structure(restore, new, shapes)


def mask_after_lengths(values, lengths):
    """Zeroes ``values[b, n, t, ...]`` for ``t >= lengths[b, n]``."""
    time = tf.range(tf.shape(values)[2])
    keep = tf.less(time[tf.newaxis, tf.newaxis, :], lengths[:, :, tf.newaxis])
    extra_dims = tf.rank(values) - 3
    keep = tf.reshape(keep, tf.concat(
        [tf.shape(keep), tf.ones([extra_dims], tf.int32)], axis=0))
    return tf.where(keep, values, tf.zeros_like(values))


def package_outputs(tokens, lengths, scores, alignment, steps):
    """Builds the search result dict, trimming time to the longest hypothesis.

    Args:
        tokens: int32 ``[B, N, num_steps]``.
        lengths: int32 ``[B, N]``, tokens excluding EOS.
        scores: float32 ``[B, N]``.
        alignment: float32 ``[B, N, num_steps, S]`` or None.
        steps: scalar int32, number of ``decode_step`` calls made.
    """
    longest = tf.reduce_max(tf.concat([tf.reshape(lengths, [-1]), [0]], axis=0))
    result = {
        "ids": mask_after_lengths(tokens[:, :, :longest], lengths),
        "lengths": lengths,
        "scores": scores,
        "steps": steps,
    }
    if alignment is not None:
        result["alignment"] = mask_after_lengths(alignment[:, :, :longest], lengths)
    return result

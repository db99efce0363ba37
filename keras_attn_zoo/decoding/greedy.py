"""Greedy decoding with ``tf.while_loop`` (no autograph needed)."""

import tensorflow as tf

from keras_attn_zoo.decoding import common


def greedy_search(model, source_ids, *, max_length_a=2.0, max_length_b=10,
                  logits_processor=None):
    """Picks the most probable token at every step.

    Usable eagerly, inside ``tf.function`` (with or without autograph) and with
    dynamic batch size and source length.

    Args:
        model: object implementing the step protocol (see ``common``).
        source_ids: int32 ``[B, S]``, 0 = padding.
        max_length_a, max_length_b: Python numbers or scalar tensors; sentence
            ``i`` emits at most ``ceil(a * source_length_i + b)`` tokens before
            EOS, which is forced at that point; capped for fixed-length
            models as in ``beam_search``.
        logits_processor: optional ``fn(log_probs, step, tokens_so_far, state)
            -> log_probs`` on ``[B, V]`` float32 log-probs (see ``beam_search``).

    Returns:
        The same dict as ``beam_search`` with N = 1: ``ids`` int32 ``[B, 1, T]``,
        ``lengths`` int32 ``[B, 1]``, ``scores`` float32 ``[B, 1]`` (sum of the
        log-probs of the tokens including EOS, no length penalty), ``steps``
        and, when the state has ``"attention"``, ``alignment``
        ``[B, 1, T, S]``.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch_size = tf.shape(source_ids)[0]
    max_lengths = common.max_target_lengths(
        source_ids, max_length_a, max_length_b, common.model_max_decode_length(model))
    num_steps = common.num_decode_steps(max_lengths)

    state = model.initial_state(model.encode(source_ids), num_steps)
    track_attention = isinstance(state, dict) and "attention" in state

    carry = {
        "step": tf.constant(0, tf.int32),
        "last_token": tf.fill([batch_size], common.BOS_ID),
        "tokens": tf.zeros([batch_size, num_steps], tf.int32),
        "scores": tf.zeros([batch_size], tf.float32),
        "lengths": tf.zeros([batch_size], tf.int32),
        "finished": tf.zeros([batch_size], tf.bool),
        "state": state,
    }
    if track_attention:
        source_length = tf.shape(state["attention"])[1]
        carry["alignment"] = tf.zeros([batch_size, num_steps, source_length], tf.float32)

    invariants = common.loop_shape_invariants(carry)

    def keep_going(carry):
        return tf.logical_and(tf.logical_not(tf.reduce_all(carry["finished"])),
                              carry["step"] < num_steps)

    def body(carry):
        step = carry["step"]
        logits, new_state = model.decode_step(carry["last_token"], step, carry["state"])
        log_probs = common.selection_log_probs(
            logits, step, carry["tokens"], new_state, max_lengths, logits_processor)
        token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token_log_prob = tf.gather(log_probs, token, batch_dims=1)

        active = tf.logical_not(carry["finished"])
        ends = tf.equal(token, common.EOS_ID)
        emits_word = tf.logical_and(active, tf.logical_not(ends))
        new_carry = {
            "step": step + 1,
            # Finished rows keep being fed PAD; their outputs are ignored.
            "last_token": tf.where(emits_word, token, common.PAD_ID),
            "tokens": common.write_column(
                carry["tokens"], step, tf.where(emits_word, token, common.PAD_ID)),
            # Frozen after EOS: nothing is added to a finished row's score.
            "scores": carry["scores"] + tf.where(active, token_log_prob, 0.0),
            "lengths": carry["lengths"] + tf.cast(emits_word, tf.int32),
            "finished": tf.logical_or(carry["finished"], ends),
            "state": new_state,
        }
        if track_attention:
            new_carry["alignment"] = common.write_column(
                carry["alignment"], step, new_state["attention"])
        return (common.keep_static_shapes(new_carry, invariants),)

    (carry,) = tf.while_loop(keep_going, body, (carry,), shape_invariants=(invariants,))

    alignment = carry["alignment"][:, tf.newaxis] if track_attention else None
    return common.package_outputs(
        tokens=carry["tokens"][:, tf.newaxis],
        lengths=carry["lengths"][:, tf.newaxis],
        scores=carry["scores"][:, tf.newaxis],
        alignment=alignment,
        steps=carry["step"],
    )

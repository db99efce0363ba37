"""Forced decoding: the log-probabilities a model gives to given translations.

OpenNMT-tf's ``score`` run, fairseq's ``--score-reference``, CTranslate2's
``score_batch``. The tokens are fed through the same step protocol and the same
``common.selection_log_probs`` as the searches, so the score of a search's own
output is the score the search reported (before its length penalty).
"""

import tensorflow as tf

from keras_attn_zoo.decoding import common


def score_targets(model, source_ids, target_ids, *, logits_processor=None):
    """Per-token and total log-probabilities of ``target_ids`` given ``source_ids``.

    Args:
        model: object implementing the step protocol.
        source_ids: int32 ``[B, S]``, 0 = padding.
        target_ids: int32 ``[B, T]``: target pieces without BOS and EOS,
            0-padded (the ``ids`` a search returns, one hypothesis per row).
            EOS is scored after each row's last piece.
        logits_processor: the processor the search used (the eager model's
            rules), so banned tokens score as the search would see them.

    Returns:
        dict with ``token_log_probs`` float32 ``[B, T + 1]`` (the log-prob of
        piece t, then of EOS at the row's length; 0 after it), ``total``
        float32 ``[B]`` (their sum) and ``lengths`` int32 ``[B]`` (pieces,
        EOS excluded). A banned token scores ``common.NEG_INF``.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    batch_size = tf.shape(target_ids)[0]
    lengths = common.source_lengths(target_ids)
    num_steps = tf.shape(target_ids)[1] + 1
    # The token chosen at step t: piece t, EOS at the row's length, PAD after.
    steps = tf.range(num_steps)[tf.newaxis, :]
    padded = tf.pad(target_ids, [[0, 0], [0, 1]])
    chosen = tf.where(steps == lengths[:, tf.newaxis], common.EOS_ID, padded)
    fed = tf.concat([tf.fill([batch_size, 1], common.BOS_ID), chosen[:, :-1]], axis=1)
    # No row is forced to EOS: the limit lies beyond every row's length.
    no_limit = tf.fill([batch_size], num_steps)

    state = model.initial_state(model.encode(source_ids), num_steps)
    carry = {
        "step": tf.constant(0, tf.int32),
        "tokens": tf.zeros([batch_size, num_steps], tf.int32),
        "scores": tf.zeros([batch_size, num_steps], tf.float32),
        "state": state,
    }
    invariants = common.loop_shape_invariants(carry)

    def body(carry):
        step = carry["step"]
        logits, new_state = model.decode_step(
            tf.gather(fed, step, axis=1), step, carry["state"])
        log_probs = common.selection_log_probs(
            logits, step, carry["tokens"], new_state, no_limit, logits_processor)
        target = tf.gather(chosen, step, axis=1)
        scored = tf.where(step <= lengths, tf.gather(log_probs, target, batch_dims=1), 0.0)
        new_carry = {
            "step": step + 1,
            "tokens": common.write_column(carry["tokens"], step, target),
            "scores": common.write_column(carry["scores"], step, scored),
            "state": new_state,
        }
        return (common.keep_static_shapes(new_carry, invariants),)

    (carry,) = tf.while_loop(lambda carry: carry["step"] < num_steps, body, (carry,),
                             shape_invariants=(invariants,))
    return {"token_log_probs": carry["scores"],
            "total": tf.reduce_sum(carry["scores"], axis=1),
            "lengths": lengths}

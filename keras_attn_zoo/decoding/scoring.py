"""Forced decoding: the log-probabilities a model gives to given translations.

OpenNMT-tf's ``score`` run, fairseq's ``--score-reference``, CTranslate2's
``score_batch``. Scoring is not a search, but it is a strategy of the shared
loop (``loop.py``) all the same: its "choice" at each step is the target's
token. So the tokens go through the same step protocol, the same caches and
the same ``common.selection_log_probs`` as the searches, and the score of a
search's own output is the score the search reported (before its length
penalty). The length limit is set beyond the targets, so no EOS is forced.
"""

import tensorflow as tf

from keras_attn_zoo.decoding import common
from keras_attn_zoo.decoding.loop import SearchStrategy
from keras_attn_zoo.decoding.loop import decode


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
    num_steps = tf.shape(target_ids)[1] + 1
    # No row is forced to EOS: the limit lies beyond every row's last step.
    no_limit = tf.fill([tf.shape(target_ids)[0]], num_steps)
    return decode(model, source_ids, ForcedTargets(target_ids), max_lengths=no_limit,
                  logits_processor=logits_processor, num_steps=num_steps)


class ForcedTargets(SearchStrategy):
    """The "search" whose choice at step t is the target's token t (EOS at the
    row's length, PAD after), recording the log-prob it had.

    Args:
        target_ids: int32 ``[B, T]``, as :func:`score_targets` takes them.
    """

    records_alignment = False

    def __init__(self, target_ids):
        self.lengths = common.source_lengths(target_ids)
        steps = tf.range(tf.shape(target_ids)[1] + 1)[tf.newaxis, :]
        padded = tf.pad(target_ids, [[0, 0], [0, 1]])
        # The token chosen at step t: piece t, EOS at the row's length, PAD after.
        self.chosen = tf.where(steps == self.lengths[:, tf.newaxis], common.EOS_ID,
                               padded)

    def begin(self, batch_size, num_steps, max_lengths):
        del max_lengths
        return {"scores": tf.zeros([batch_size, num_steps], tf.float32)}

    def step(self, step, log_probs, tokens, variables):
        del tokens
        target = tf.gather(self.chosen, step, axis=1)
        scored = tf.where(step <= self.lengths,
                          tf.gather(log_probs, target, batch_dims=1), 0.0)
        return target, None, {
            "scores": common.write_column(variables["scores"], step, scored)}

    def all_finished(self, variables):
        del variables  # every row runs to the longest target's EOS step
        return tf.constant(False)

    def finalize(self, variables, tokens, steps, alignment_of):
        del tokens, steps, alignment_of
        return {"token_log_probs": variables["scores"],
                "total": tf.reduce_sum(variables["scores"], axis=1),
                "lengths": self.lengths}

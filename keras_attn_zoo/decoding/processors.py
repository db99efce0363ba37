"""Logits processors shared by the searches: n-gram blocking and chaining.

A processor is ``fn(log_probs, step, tokens_so_far, state) -> log_probs`` (see
``beam_search``); banned entries get ``common.NEG_INF``.
"""

import tensorflow as tf

from keras_attn_zoo.decoding import common


def chain_processors(*processors):
    """One processor applying each non-None processor in order (None if none)."""
    processors = [p for p in processors if p is not None]
    if not processors:
        return None
    if len(processors) == 1:
        return processors[0]

    def chained(log_probs, step, tokens_so_far, state):
        for processor in processors:
            log_probs = processor(log_probs, step, tokens_so_far, state)
        return log_probs

    return chained


def no_repeat_ngram_processor(ngram_size):
    """Bans every token that would repeat an n-gram of the hypothesis (fairseq,
    CTranslate2 ``no_repeat_ngram_size``).

    At step ``t`` the last ``n - 1`` tokens form a prefix; for every earlier
    occurrence of that prefix the token that followed it is banned, so no
    n-gram occurs twice. ``n = 1`` bans every token already emitted; ``n <= 0``
    turns the rule off.

    Args:
        ngram_size: Python int or scalar int32 tensor (a call-time option of
            an exported signature).
    """
    n = tf.convert_to_tensor(ngram_size, tf.int32)

    def process(log_probs, step, tokens_so_far, state):
        del state
        step = tf.convert_to_tensor(step, tf.int32)

        def ban():
            length = tf.shape(tokens_so_far)[1]
            starts = tf.range(length)
            # An n-gram starting at j is complete before this step iff j <= t - n.
            candidates = tf.broadcast_to(
                (starts <= step - n)[tf.newaxis, :], tf.shape(tokens_so_far))

            def compare_one(i, match):
                later = tf.gather(tokens_so_far, tf.minimum(starts + i, length - 1), axis=1)
                prefix_token = tf.gather(tokens_so_far, step - n + 1 + i, axis=1)
                return i + 1, tf.logical_and(match, tf.equal(later, prefix_token[:, None]))

            _, match = tf.while_loop(lambda i, _: i < n - 1, compare_one,
                                     (tf.constant(0), candidates))
            followers = tf.gather(tokens_so_far, tf.minimum(starts + n - 1, length - 1),
                                  axis=1)
            found = tf.where(match)  # [M, 2] (row, start)
            indices = tf.stack(
                [found[:, 0], tf.cast(tf.gather_nd(followers, found), tf.int64)], axis=1)
            banned = tf.fill(tf.shape(found)[:1], tf.constant(common.NEG_INF, log_probs.dtype))
            return tf.tensor_scatter_nd_update(log_probs, indices, banned)

        # Before step n there is no complete n-gram to repeat.
        return tf.cond(tf.logical_and(n > 0, step >= n), ban, lambda: log_probs)

    return process


def with_ngram_blocking(logits_processor, no_repeat_ngram_size):
    """``logits_processor`` followed by n-gram blocking, unless the size is a
    Python 0 (a tensor size is applied at run time; n <= 0 is off there)."""
    if isinstance(no_repeat_ngram_size, int) and no_repeat_ngram_size <= 0:
        return logits_processor
    return chain_processors(logits_processor,
                            no_repeat_ngram_processor(no_repeat_ngram_size))

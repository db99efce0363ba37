"""Greedy decoding and sampling: one hypothesis per sentence, on the shared loop.

Both are a :class:`OneHypothesisSearch` for ``loop.decode`` and differ only
in how a step's token is chosen: the most probable one, or a draw from the
(tempered, top-k / top-p filtered) distribution for back-translation and
diverse outputs.
"""

import tensorflow as tf

from keras_attn_zoo.decoding import common
from keras_attn_zoo.decoding.loop import SearchStrategy
from keras_attn_zoo.decoding.loop import decode
from keras_attn_zoo.decoding.loop import sentence_limits
from keras_attn_zoo.decoding.processors import with_ngram_blocking


def greedy_search(model, source_ids, *, max_length_a=2.0, max_length_b=10,
                  logits_processor=None, no_repeat_ngram_size=0):
    """Picks the most probable token at every step.

    Usable eagerly, inside ``tf.function`` (with or without autograph) and with
    dynamic batch size and source length.

    Args:
        model: object implementing the step protocol (see ``common``).
        source_ids: int32 ``[B, S]``, 0 = padding.
        max_length_a: Python number or scalar tensor, ``a`` of the length
            limit; sentence ``i`` emits at most ``ceil(a * source_length_i + b)`` tokens before
            EOS, which is forced at that point; capped for fixed-length
            models as in ``beam_search``.
        max_length_b: ``b`` of that limit, Python number or scalar tensor.
        logits_processor: optional ``fn(log_probs, step, tokens_so_far, state)
            -> log_probs`` on ``[B, V]`` float32 log-probs (see ``beam_search``).
        no_repeat_ngram_size: as in ``beam_search``.

    Returns:
        The same dict as ``beam_search`` with N = 1: ``ids`` int32 ``[B, 1, T]``,
        ``lengths`` int32 ``[B, 1]``, ``scores`` float32 ``[B, 1]`` (sum of the
        log-probs of the tokens including EOS, no length penalty), ``steps``
        and, when the state has ``"attention"``, ``alignment``
        ``[B, 1, T, S]``.
    """
    return decode(model, source_ids, OneHypothesisSearch(most_probable_token),
                  max_lengths=sentence_limits(model, source_ids, max_length_a, max_length_b),
                  logits_processor=with_ngram_blocking(logits_processor,
                                                       no_repeat_ngram_size))


def sample_search(model, source_ids, *, temperature=1.0, top_k=0, top_p=1.0, seed=0,
                  max_length_a=2.0, max_length_b=10, logits_processor=None,
                  no_repeat_ngram_size=0):
    """Draws each token from the model's distribution (fairseq ``--sampling``).

    At every step the log-probs (after ``logits_processor`` and the search's
    rules) are divided by ``temperature``, cut to the ``top_k`` most probable
    tokens (0: all) and to the smallest set whose probability reaches
    ``top_p`` (1.0: all; the most probable token always stays), then one
    token is drawn. The draw is ``tf.random.stateless_categorical`` seeded by
    ``(seed, step)``: the same seed and inputs give the same output.

    Args:
        model: as in ``greedy_search``.
        source_ids: as in ``greedy_search``.
        max_length_a: as in ``greedy_search``.
        max_length_b: as in ``greedy_search``.
        logits_processor: as in ``greedy_search``.
        no_repeat_ngram_size: as in ``greedy_search``.
        temperature: > 0; below 1 sharpens, above 1 flattens.
        top_k: int >= 0.
        top_p: float in (0, 1].
        seed: int; Python numbers or scalar tensors for all four.

    Returns:
        The dict of ``greedy_search``; ``scores`` are the sum of the untempered
        log-probs of the drawn tokens (EOS included).
    """
    temperature = tf.convert_to_tensor(temperature, tf.float32)
    top_k = tf.convert_to_tensor(top_k, tf.int32)
    top_p = tf.convert_to_tensor(top_p, tf.float32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
    checks = [
        tf.debugging.assert_positive(temperature, message="temperature must be > 0"),
        tf.debugging.assert_non_negative(top_k, message="top_k must be >= 0"),
        tf.debugging.assert_positive(top_p, message="top_p must be in (0, 1]"),
        tf.debugging.assert_less_equal(top_p, 1.0, message="top_p must be in (0, 1]"),
    ]
    with tf.control_dependencies(checks):
        temperature = tf.identity(temperature)

    def draw(log_probs, step):
        logits = filter_top_k_top_p(log_probs / temperature, top_k, top_p)
        return tf.cast(tf.random.stateless_categorical(
            logits, 1, seed=tf.stack([seed, step]))[:, 0], tf.int32)

    return decode(model, source_ids, OneHypothesisSearch(draw),
                  max_lengths=sentence_limits(model, source_ids, max_length_a, max_length_b),
                  logits_processor=with_ngram_blocking(logits_processor,
                                                       no_repeat_ngram_size))


def filter_top_k_top_p(logits, top_k, top_p):
    """``logits`` ``[R, V]`` with all but the top-k / top-p tokens set to NEG_INF."""
    vocab_size = tf.shape(logits)[-1]
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab_size), vocab_size)
    sorted_logits = tf.sort(logits, axis=-1, direction="DESCENDING")
    kth_best = tf.gather(sorted_logits, k - 1, axis=-1)[:, tf.newaxis]
    # Nucleus: keep a sorted token while the probability before it is < top_p.
    probabilities = tf.nn.softmax(sorted_logits, axis=-1)
    before = tf.cumsum(probabilities, axis=-1, exclusive=True)
    kept_in_nucleus = tf.reduce_sum(tf.cast(before < top_p, tf.int32), axis=-1)
    nucleus_floor = tf.gather(sorted_logits, tf.maximum(kept_in_nucleus, 1) - 1,
                              batch_dims=1)[:, tf.newaxis]
    floor = tf.maximum(kth_best, nucleus_floor)
    return tf.where(logits >= floor, logits, common.NEG_INF)


def most_probable_token(log_probs, step):
    """Greedy's choice: the arg-max of each row's log-probs, int32 ``[R]``."""
    del step
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


class OneHypothesisSearch(SearchStrategy):
    """One hypothesis per sentence, extended by ``choose(log_probs, step) -> int32 [B]``.

    A row is finished once it chose EOS; after that it is fed PAD, its score
    and length are frozen and the loop ignores what it computes.
    """

    def __init__(self, choose):
        self.choose = choose

    def begin(self, batch_size, num_steps, max_lengths):
        del num_steps, max_lengths
        return {"scores": tf.zeros([batch_size], tf.float32),
                "lengths": tf.zeros([batch_size], tf.int32),
                "finished": tf.zeros([batch_size], tf.bool)}

    def step(self, step, log_probs, tokens, variables):
        del tokens
        token = self.choose(log_probs, step)
        token_log_prob = tf.gather(log_probs, token, batch_dims=1)
        active = tf.logical_not(variables["finished"])
        ends = tf.equal(token, common.EOS_ID)
        emits_word = tf.logical_and(active, tf.logical_not(ends))
        return tf.where(emits_word, token, common.PAD_ID), None, {
            # Frozen after EOS: nothing is added to a finished row's score.
            "scores": variables["scores"] + tf.where(active, token_log_prob, 0.0),
            "lengths": variables["lengths"] + tf.cast(emits_word, tf.int32),
            "finished": tf.logical_or(variables["finished"], ends),
        }

    def all_finished(self, variables):
        return tf.reduce_all(variables["finished"])

    def finalize(self, variables, tokens, steps, alignment_of):
        lengths = variables["lengths"][:, tf.newaxis]
        alignment = None
        if alignment_of is not None:
            rows = tf.range(tf.shape(lengths)[0])[:, tf.newaxis]
            alignment = alignment_of(rows, lengths)
        return common.package_outputs(
            tokens=tokens[:, tf.newaxis], lengths=lengths,
            scores=variables["scores"][:, tf.newaxis], alignment=alignment, steps=steps)


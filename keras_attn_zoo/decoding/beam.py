"""Beam search: the :class:`BeamSearch` strategy of the shared loop (``loop.py``).

Design (the Tensor2Tensor / fairseq family): each sentence keeps two sets of
K hypotheses.

* **alive**: unfinished hypotheses, flattened with the batch to ``[B*K, ...]``
  (row ``b * K + k``); they carry the model state, which is reordered with one
  ``tf.gather`` per leaf per step.
* **finished**: up to K hypotheses that ended with EOS, ``[B, K, ...]``, kept
  sorted by length-penalised score. Once in, a hypothesis is frozen: its
  tokens, length and score never change; slots after its EOS hold PAD.

One step: every alive hypothesis proposes all V tokens (raw score = sum of
log-probs). Of the top 2K candidates of a sentence, those ending in EOS *and
ranked in the top K* enter the finished set (normalised by the length
penalty, competing with what is already there); the best K not ending in EOS
become the new alive set (2K candidates always hold at least K of those, as
each alive hypothesis has a single EOS candidate). Taking EOS only from the
top K is what makes beam size 1 with length penalty 0 identical to greedy
search.

Scores: ``sum(log p(y_t)) / lp(|Y|)``, ``lp(n) = ((5 + n) / 6) ** alpha``,
``|Y|`` = number of generated tokens *including* EOS (``length + 1``).

Stopping: a sentence is finished when none of its alive hypotheses can still
beat the worst of its K finished ones, or when it reaches its max length
(there every alive hypothesis is forced to EOS). An alive hypothesis can at
best keep its current sum (log-probs are <= 0) while the penalty grows, so
its best reachable score is ``sum / max(lp(current + 1), lp(limit + 1))``;
the test is therefore exact: stopping early returns the same hypotheses as
decoding to the max length would. Finished sentences are frozen (their alive
set is emptied), so each sentence of a batch gets exactly the translation it
would get alone, and the loop ends when every sentence is finished.
"""

import tensorflow as tf

from keras_attn_zoo.decoding import common
from keras_attn_zoo.decoding.loop import SearchStrategy
from keras_attn_zoo.decoding.loop import decode
from keras_attn_zoo.decoding.loop import sentence_limits
from keras_attn_zoo.decoding.processors import with_ngram_blocking


def beam_search(model, source_ids, *, beam_size=common.DEFAULT_BEAM_SIZE,
                length_penalty=common.DEFAULT_LENGTH_PENALTY,
                max_length_a=2.0, max_length_b=10, num_return=1,
                logits_processor=None, no_repeat_ngram_size=0,
                length_normalization="gnmt"):
    """Returns the ``num_return`` best hypotheses of each sentence.

    Usable eagerly, inside ``tf.function`` (with or without autograph) and with
    dynamic batch size and source length.

    Args:
        model: object implementing the step protocol (see ``common``).
        source_ids: int32 ``[B, S]``, 0 = padding.
        beam_size: K, Python int or scalar int32 tensor.
        length_penalty: GNMT alpha, Python float or scalar tensor (0 = off).
        length_normalization: ``"gnmt"`` (default: scores are divided by
            ``((5 + n) / 6) ** length_penalty``) or ``"average"`` (divided by
            ``n``, the mean log-prob per token, as the eager translator's
            reference code ranks; ``length_penalty`` is then unused); ``n``
            counts the generated tokens with EOS. A Python string.
        max_length_a: Python number or scalar tensor, ``a`` of the length
            limit; sentence ``i`` emits at most ``ceil(a * source_length_i + b)`` tokens
            (excluding EOS; source_length counts non-pad tokens), after which
            EOS is forced with the model's own EOS log-prob. For a model with
            a fixed number of decoder positions (``model.max_decode_length``
            not None) the limit is capped at that
            number minus one (see ``common.max_target_lengths``).
        max_length_b: ``b`` of that limit, Python number or scalar tensor.
        num_return: N <= K, hypotheses returned per sentence: a Python int or
            a scalar int32 tensor (an exported signature's call-time input).
        logits_processor: optional ``fn(log_probs, step, tokens_so_far, state)
            -> log_probs``. ``log_probs`` float32 ``[B*K, V]`` are the
            log-softmax of this step's logits (row ``b * K + k`` is beam k of
            sentence b), ``step`` the scalar int32 index of the token being
            chosen, ``tokens_so_far`` int32 ``[B*K, num_steps]`` the tokens
            already chosen (0 from ``step`` on) and ``state`` the state
            ``decode_step`` just returned. Return the modified log-probs; set
            an entry to -inf (or any value <= -1e9) to ban a token. Keep
            entries <= 0: the early stop assumes scores never grow. PAD and BOS
            are always banned after it, and at a sentence's max length only
            EOS is allowed whatever it returns.
        no_repeat_ngram_size: n > 0 bans tokens that would repeat an n-gram
            of the hypothesis (``processors.no_repeat_ngram_processor``,
            applied after ``logits_processor``); 0 = off. Python int or
            scalar int32 tensor.

    Returns:
        dict: ``ids`` int32 ``[B, N, T]``, generated tokens, no BOS, no EOS,
            0-padded, T the longest returned length; ``lengths`` int32
            ``[B, N]``, tokens per hypothesis excluding EOS; ``scores``
            float32 ``[B, N]``, length-penalised, best first (-1e9 marks an
            empty slot: fewer than N hypotheses could be formed, e.g. when a
            processor bans nearly everything); ``steps`` int32 scalar,
            ``decode_step`` calls made; ``alignment`` float32 ``[B, N, T, S]``
            if the state has ``"attention"``, row t the attention of the step
            that produced ``ids[..., t]``.
    """
    if isinstance(beam_size, int) and isinstance(num_return, int) and num_return > beam_size:
        raise ValueError(f"num_return={num_return} exceeds beam_size={beam_size}")
    return decode(model, source_ids,
                  BeamSearch(beam_size, length_penalty, num_return, length_normalization),
                  max_lengths=sentence_limits(model, source_ids, max_length_a, max_length_b),
                  logits_processor=with_ngram_blocking(logits_processor,
                                                       no_repeat_ngram_size))


class BeamSearch(SearchStrategy):
    """K alive and K finished hypotheses per sentence (the module docstring).

    The loop's rows are the alive hypotheses, ``[B*K]`` (row ``b * K + k``);
    each step picks the rows the new alive set continues (``parent_rows``).
    The finished set lives in the strategy's variables, ``[B, K, ...]``.

    Args:
        beam_size: hypotheses kept per sentence, as in :func:`beam_search`.
        length_penalty: GNMT's alpha, as in :func:`beam_search`.
        num_return: the n-best size, as in :func:`beam_search`.
        length_normalization: how a finished hypothesis is ranked, as in
            :func:`beam_search`.
    """

    reorders_rows = True

    def __init__(self, beam_size, length_penalty, num_return, length_normalization):
        self.num_return = tf.convert_to_tensor(num_return, tf.int32)
        beam = tf.convert_to_tensor(beam_size, tf.int32)
        self.normalizer = common.length_normalizer(
            length_normalization, tf.convert_to_tensor(length_penalty, tf.float32))
        checks = [
            tf.debugging.assert_greater_equal(
                beam, tf.maximum(self.num_return, 1),
                message="beam_size must be >= num_return and >= 1"),
            tf.debugging.assert_positive(self.num_return,
                                         message="num_return must be >= 1"),
        ]
        with tf.control_dependencies(checks):
            self.beam = tf.identity(beam)
        self.rows_per_sentence = self.beam

    def begin(self, batch_size, num_steps, max_lengths):
        beam = self.beam
        self.batch_size = batch_size
        self.max_lengths = max_lengths
        # Flat row of beam 0 of each sentence, to turn per-sentence beam
        # indices into [B*K] rows.
        self.sentence_offset = (tf.range(batch_size) * beam)[:, tf.newaxis]
        # Only beam 0 is live at the start, so the K beams don't duplicate.
        first_beam = tf.equal(tf.range(beam), 0)[tf.newaxis, :]
        return {
            "alive_scores": tf.where(first_beam, tf.zeros([batch_size, beam]),
                                     common.NEG_INF),
            "finished_scores": tf.fill([batch_size, beam], common.NEG_INF),
            "finished_tokens": tf.zeros([batch_size, beam, num_steps], tf.int32),
            "finished_lengths": tf.zeros([batch_size, beam], tf.int32),
            # The flat alive row each finished hypothesis ended from (its EOS
            # step is its length): where its alignment is read back from.
            "finished_end_rows": tf.zeros([batch_size, beam], tf.int32),
            "done": tf.zeros([batch_size], tf.bool),
        }

    def step(self, step, log_probs, tokens, variables):
        beam, batch_size = self.beam, self.batch_size
        vocab_size = tf.shape(log_probs)[1]

        # [B, K*V] candidates; anything built on a banned token or a dead
        # beam is pinned to exactly NEG_INF.
        candidates = variables["alive_scores"][:, :, tf.newaxis] + tf.reshape(
            log_probs, [batch_size, beam, vocab_size])
        candidates = tf.reshape(candidates, [batch_size, beam * vocab_size])
        candidates = tf.where(candidates > common.VALID_THRESHOLD, candidates,
                              common.NEG_INF)
        num_candidates = tf.minimum(2 * beam, beam * vocab_size)
        top_scores, top_index = tf.math.top_k(candidates, k=num_candidates)
        top_rows = top_index // vocab_size + self.sentence_offset
        top_tokens = top_index % vocab_size
        top_valid = top_scores > common.VALID_THRESHOLD
        top_is_eos = tf.equal(top_tokens, common.EOS_ID)

        # New alive set: best K candidates not ending in EOS.
        alive_rank = tf.where(tf.logical_and(top_valid, tf.logical_not(top_is_eos)),
                              top_scores, common.NEG_INF)
        alive_scores, picked = tf.math.top_k(alive_rank, k=beam)
        parent_rows = tf.reshape(tf.gather(top_rows, picked, batch_dims=1), [-1])
        next_tokens = tf.reshape(tf.gather(top_tokens, picked, batch_dims=1), [-1])

        # Finished set: EOS candidates from the top K join the K finished
        # hypotheses; the best K of the union stay (ties keep the older one).
        eos_rows = top_rows[:, :beam]
        ends_now = tf.logical_and(top_valid, top_is_eos)[:, :beam]
        eos_scores = tf.where(
            ends_now, top_scores[:, :beam] / self.normalizer(step + 1), common.NEG_INF)
        finished_keys = ["finished_scores", "finished_tokens", "finished_lengths",
                         "finished_end_rows"]
        old_finished = {key: variables[key] for key in finished_keys}

        def merge_finished():
            flat_eos_rows = tf.reshape(eos_rows, [-1])

            def by_sentence(flat):
                return tf.reshape(flat, tf.concat(
                    [[batch_size, beam], tf.shape(flat)[1:]], axis=0))

            # Parents' tokens before this step: 0 from `step` on, so the EOS
            # slot and everything after it is already PAD.
            new = {
                "finished_scores": eos_scores,
                "finished_tokens": by_sentence(tf.gather(tokens, flat_eos_rows)),
                "finished_lengths": tf.fill([batch_size, beam], step),
                "finished_end_rows": by_sentence(flat_eos_rows),
            }
            union = {key: tf.concat([old_finished[key], new[key]], axis=1)
                     for key in finished_keys}
            _, kept = tf.math.top_k(union["finished_scores"], k=beam)
            return {key: tf.gather(value, kept, batch_dims=1)
                    for key, value in union.items()}

        finished = tf.cond(tf.reduce_any(ends_now), merge_finished,
                           lambda: old_finished)

        # Done when the best reachable score of any alive hypothesis cannot
        # beat the worst finished one (an empty slot counts as NEG_INF).
        best_alive = tf.reduce_max(alive_scores, axis=1)
        reachable = tf.maximum(
            best_alive / self.normalizer(step + 2),
            best_alive / self.normalizer(self.max_lengths + 1))
        reachable = tf.where(best_alive > common.VALID_THRESHOLD, reachable,
                             common.NEG_INF)
        worst_finished = tf.reduce_min(finished["finished_scores"], axis=1)
        done = tf.logical_or(variables["done"], reachable <= worst_finished)
        return next_tokens, parent_rows, {
            **finished,
            # Freeze finished sentences: no alive hypothesis, no new candidates.
            "alive_scores": tf.where(done[:, tf.newaxis], common.NEG_INF, alive_scores),
            "done": done,
        }

    def all_finished(self, variables):
        return tf.reduce_all(variables["done"])

    def finalize(self, variables, tokens, steps, alignment_of):
        del tokens  # the alive rows; the answer is the finished set
        num_return = self.num_return
        scores = variables["finished_scores"][:, :num_return]
        lengths = tf.where(scores > common.VALID_THRESHOLD,
                           variables["finished_lengths"][:, :num_return], 0)
        alignment = None
        if alignment_of is not None:
            alignment = alignment_of(variables["finished_end_rows"][:, :num_return],
                                     variables["finished_lengths"][:, :num_return])
        return common.package_outputs(
            tokens=variables["finished_tokens"][:, :num_return], lengths=lengths,
            scores=scores, alignment=alignment, steps=steps)

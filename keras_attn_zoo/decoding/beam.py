"""Beam search with ``tf.while_loop`` (no autograph needed).

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
from keras_attn_zoo.decoding.processors import with_ngram_blocking


def beam_search(model, source_ids, *, beam_size=4, length_penalty=0.6,
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
    num_return = tf.convert_to_tensor(num_return, tf.int32)
    logits_processor = with_ngram_blocking(logits_processor, no_repeat_ngram_size)
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    beam = tf.convert_to_tensor(beam_size, tf.int32)
    alpha = tf.convert_to_tensor(length_penalty, tf.float32)
    normalizer = common.length_normalizer(length_normalization, alpha)
    checks = [
        tf.debugging.assert_greater_equal(
            beam, tf.maximum(num_return, 1),
            message="beam_size must be >= num_return and >= 1"),
        tf.debugging.assert_positive(num_return, message="num_return must be >= 1"),
    ]
    with tf.control_dependencies(checks):
        beam = tf.identity(beam)

    batch_size = tf.shape(source_ids)[0]
    rows = batch_size * beam
    max_lengths = common.max_target_lengths(
        source_ids, max_length_a, max_length_b, model.max_decode_length)
    row_max_lengths = tf.repeat(max_lengths, beam)
    num_steps = common.num_decode_steps(max_lengths)
    # Flat row of beam 0 of each sentence, to turn per-sentence beam indices
    # into [B*K] rows.
    sentence_offset = (tf.range(batch_size) * beam)[:, tf.newaxis]

    state = model.initial_state(model.encode(source_ids), num_steps)
    # Tile once: beams of a sentence are contiguous rows.
    state = common.map_batch_leaves(lambda leaf: tf.repeat(leaf, beam, axis=0), state)
    track_attention = isinstance(state, dict) and "attention" in state

    # Only beam 0 is live at the start, so the K beams don't duplicate.
    first_beam = tf.equal(tf.range(beam), 0)[tf.newaxis, :]
    carry = {
        "step": tf.constant(0, tf.int32),
        "last_token": tf.fill([rows], common.BOS_ID),
        "alive_scores": tf.where(first_beam, tf.zeros([batch_size, beam]), common.NEG_INF),
        "alive_tokens": tf.zeros([rows, num_steps], tf.int32),
        "finished_scores": tf.fill([batch_size, beam], common.NEG_INF),
        "finished_tokens": tf.zeros([batch_size, beam, num_steps], tf.int32),
        "finished_lengths": tf.zeros([batch_size, beam], tf.int32),
        "done": tf.zeros([batch_size], tf.bool),
        "state": state,
    }
    if track_attention:
        # Each step's attention rows and the beams' parent rows, written once
        # and never reordered; a hypothesis' alignment is read back along its
        # ancestry at the end (``_backtrack_alignment``). Reordering a
        # ``[rows, max_len, S]`` buffer every step would cost O(max_len * S)
        # per step instead of O(S).
        carry["attention_steps"] = tf.TensorArray(
            tf.float32, size=num_steps, element_shape=tf.TensorShape([None, None]))
        carry["parent_steps"] = tf.TensorArray(
            tf.int32, size=num_steps, element_shape=tf.TensorShape([None]))
        # The flat alive row each finished hypothesis ended from (its EOS step
        # is its length).
        carry["finished_end_rows"] = tf.zeros([batch_size, beam], tf.int32)

    invariants = common.loop_shape_invariants(carry)

    def keep_going(carry):
        return tf.logical_and(tf.logical_not(tf.reduce_all(carry["done"])),
                              carry["step"] < num_steps)

    def body(carry):
        step = carry["step"]
        logits, new_state = model.decode_step(carry["last_token"], step, carry["state"])
        log_probs = common.selection_log_probs(
            logits, step, carry["alive_tokens"], new_state, row_max_lengths,
            logits_processor)
        vocab_size = tf.shape(log_probs)[1]

        # [B, K*V] candidates; anything built on a banned token or a dead
        # beam is pinned to exactly NEG_INF.
        candidates = carry["alive_scores"][:, :, tf.newaxis] + tf.reshape(
            log_probs, [batch_size, beam, vocab_size])
        candidates = tf.reshape(candidates, [batch_size, beam * vocab_size])
        candidates = tf.where(candidates > common.VALID_THRESHOLD, candidates,
                              common.NEG_INF)
        num_candidates = tf.minimum(2 * beam, beam * vocab_size)
        top_scores, top_index = tf.math.top_k(candidates, k=num_candidates)
        top_rows = top_index // vocab_size + sentence_offset
        top_tokens = top_index % vocab_size
        top_valid = top_scores > common.VALID_THRESHOLD
        top_is_eos = tf.equal(top_tokens, common.EOS_ID)

        # New alive set: best K candidates not ending in EOS.
        alive_rank = tf.where(tf.logical_and(top_valid, tf.logical_not(top_is_eos)),
                              top_scores, common.NEG_INF)
        alive_scores, picked = tf.math.top_k(alive_rank, k=beam)
        parent_rows = tf.reshape(tf.gather(top_rows, picked, batch_dims=1), [-1])
        next_tokens = tf.reshape(tf.gather(top_tokens, picked, batch_dims=1), [-1])

        def reorder(leaf):
            return tf.gather(leaf, parent_rows)

        new_carry = {
            "step": step + 1,
            "last_token": next_tokens,
            "alive_tokens": common.write_column(
                reorder(carry["alive_tokens"]), step, next_tokens),
            "state": common.map_batch_leaves(reorder, new_state),
        }
        if track_attention:
            # Row r of step `step` belongs to the hypothesis in row r before
            # this step's reordering; parent_rows maps the new rows onto them.
            new_carry["attention_steps"] = carry["attention_steps"].write(
                step, tf.cast(new_state["attention"], tf.float32))
            new_carry["parent_steps"] = carry["parent_steps"].write(step, parent_rows)

        # Finished set: EOS candidates from the top K join the K finished
        # hypotheses; the best K of the union stay (ties keep the older one).
        eos_rows = top_rows[:, :beam]
        ends_now = tf.logical_and(top_valid, top_is_eos)[:, :beam]
        eos_scores = tf.where(
            ends_now, top_scores[:, :beam] / normalizer(step + 1),
            common.NEG_INF)
        finished_keys = ["finished_scores", "finished_tokens", "finished_lengths"]
        if track_attention:
            finished_keys.append("finished_end_rows")
        old_finished = {key: carry[key] for key in finished_keys}

        def merge_finished():
            flat_eos_rows = tf.reshape(eos_rows, [-1])

            def by_sentence(flat):
                return tf.reshape(flat, tf.concat(
                    [[batch_size, beam], tf.shape(flat)[1:]], axis=0))

            # Parents' tokens before this step: 0 from `step` on, so the EOS
            # slot and everything after it is already PAD.
            new = {
                "finished_scores": eos_scores,
                "finished_tokens": by_sentence(tf.gather(carry["alive_tokens"], flat_eos_rows)),
                "finished_lengths": tf.fill([batch_size, beam], step),
            }
            if track_attention:
                new["finished_end_rows"] = by_sentence(flat_eos_rows)
            union = {key: tf.concat([old_finished[key], new[key]], axis=1)
                     for key in finished_keys}
            _, kept = tf.math.top_k(union["finished_scores"], k=beam)
            return {key: tf.gather(value, kept, batch_dims=1)
                    for key, value in union.items()}

        finished = tf.cond(tf.reduce_any(ends_now), merge_finished,
                           lambda: old_finished)
        new_carry.update(finished)

        # Done when the best reachable score of any alive hypothesis cannot
        # beat the worst finished one (an empty slot counts as NEG_INF).
        best_alive = tf.reduce_max(alive_scores, axis=1)
        reachable = tf.maximum(
            best_alive / normalizer(step + 2),
            best_alive / normalizer(max_lengths + 1))
        reachable = tf.where(best_alive > common.VALID_THRESHOLD, reachable,
                             common.NEG_INF)
        worst_finished = tf.reduce_min(finished["finished_scores"], axis=1)
        done = tf.logical_or(carry["done"], reachable <= worst_finished)
        # Freeze finished sentences: no alive hypothesis, no new candidates.
        new_carry["alive_scores"] = tf.where(done[:, tf.newaxis], common.NEG_INF,
                                             alive_scores)
        new_carry["done"] = done
        return (common.keep_static_shapes(new_carry, invariants),)

    (carry,) = tf.while_loop(keep_going, body, (carry,), shape_invariants=(invariants,))

    scores = carry["finished_scores"][:, :num_return]
    lengths = tf.where(scores > common.VALID_THRESHOLD,
                       carry["finished_lengths"][:, :num_return], 0)
    alignment = None
    if track_attention:
        alignment = _alignment_or_empty(
            carry["attention_steps"], carry["parent_steps"], carry["step"],
            carry["finished_end_rows"][:, :num_return],
            carry["finished_lengths"][:, :num_return], tf.shape(state["attention"])[1])
    return common.package_outputs(
        tokens=carry["finished_tokens"][:, :num_return],
        lengths=lengths,
        scores=scores,
        alignment=alignment,
        steps=carry["step"],
    )


def _backtrack_alignment(attention_steps, parent_steps, steps_done, end_rows, end_steps):
    """``[B, N, steps_done, S]`` alignments of finished hypotheses.

    A hypothesis that ended (EOS) at step ``e`` from flat row ``r_e`` has, at
    step ``t < e``, the row ``r_t = parents[t][r_{t+1}]``; its alignment row
    ``t`` is ``attention[t][r_t]`` for ``t <= e`` and 0 after. One reverse scan
    over the steps, O(steps * B * N * S) once per search.
    """
    times = tf.range(steps_done)
    attention = attention_steps.gather(times)  # [T, rows, S]
    parents = parent_steps.gather(times)  # [T, rows]

    def back_one_step(row_after, t):
        row = tf.where(t < end_steps, tf.gather(parents[t], row_after), end_rows)
        rows_attention = tf.gather(attention[t], row)  # [B, N, S]
        active = (t <= end_steps)[..., tf.newaxis]
        return row, tf.where(active, rows_attention, tf.zeros_like(rows_attention))

    def scan_step(carried, t):
        return back_one_step(carried[0], t)

    initial = (end_rows, tf.zeros(tf.concat(
        [tf.shape(end_rows), tf.shape(attention)[2:]], axis=0), tf.float32))
    _, reversed_rows = tf.scan(scan_step, tf.reverse(times, [0]), initializer=initial)
    return tf.transpose(tf.reverse(reversed_rows, [0]), [1, 2, 0, 3])


def _alignment_or_empty(attention_steps, parent_steps, steps_done, end_rows, end_steps,
                        source_length):
    """``_backtrack_alignment``, or an empty time axis when no step ran (empty batch)."""
    return tf.cond(
        steps_done > 0,
        lambda: _backtrack_alignment(attention_steps, parent_steps, steps_done,
                                     end_rows, end_steps),
        lambda: tf.zeros(tf.concat([tf.shape(end_rows), [0, source_length]], 0)))


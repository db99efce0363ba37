"""The one decode loop: a ``tf.while_loop`` over the step protocol, driven by a search.

Modelled on OpenNMT-tf's ``dynamic_decode`` and its ``DecodingStrategy``: the
loop is written once and a *search strategy* object says what differs between
greedy search, sampling, beam search and forced scoring.

The loop owns what every search shares:

* encoding the source and the model state, its caches sized for the batch's
  longest limit (``common.num_decode_steps``), tiled once when a strategy
  keeps several rows per sentence and reordered with the rows it picks;
* the per-sentence max length and the EOS forced at it, the banned PAD/BOS and
  the logits processor (``common.selection_log_probs``);
* the tokens each row has chosen so far (what logits processors read);
* the attention record and the alignment read back along each hypothesis'
  ancestry;
* the shape invariants (a self-attention cache grows along its time axis) and
  the stop test (every sentence finished, or the steps spent).

A strategy (:class:`SearchStrategy`) owns its own variables (scores, lengths,
finished sets) and four things: how many rows a sentence gets, how a step's
log-probs become the next tokens (and which row each new row continues), when
every sentence is finished, and what the search returns.

Runs eagerly, inside ``tf.function`` (autograph on or off) and in exported
graphs with dynamic batch size, source length and beam size: every branch is
an explicit ``tf.cond`` / ``tf.while_loop``.
"""

import tensorflow as tf

from keras_attn_zoo.decoding import common


class SearchStrategy:
    """What one search adds to the shared loop (see the module docstring).

    A strategy is built per call (inside the caller's graph), so tensors it
    makes in ``__init__`` or ``begin`` belong to that graph and its step may
    close over them, as loop invariants.

    Attributes:
        rows_per_sentence: Python int or scalar int32 tensor: rows of the loop
            per sentence (beam search: K; the state is tiled to ``B * K`` rows,
            beams of a sentence contiguous). Python 1: no tiling.
        reorders_rows: whether ``step`` returns ``parent_rows`` (then the loop
            gathers the model state and the chosen tokens by them, and records
            them to read alignments back along the ancestry).
        records_alignment: whether the loop records the model's attention for
            ``finalize``'s ``alignment_of`` (forced scoring returns none).
    """

    rows_per_sentence = 1
    reorders_rows = False
    records_alignment = True

    def begin(self, batch_size, num_steps, max_lengths):
        """The strategy's initial loop variables (a dict of tensors of fixed shape).

        Args:
            batch_size: scalar int32, sentences.
            num_steps: scalar int32, the most ``decode_step`` calls the loop makes
                (the chosen-tokens buffer has this many columns).
            max_lengths: int32 ``[B]``, each sentence's limit (excluding EOS).
        """
        raise NotImplementedError

    def step(self, step, log_probs, tokens, variables):
        """Chooses this step's tokens.

        Args:
            step: scalar int32, 0-based index of the token being chosen.
            log_probs: float32 ``[R, V]`` from ``common.selection_log_probs``.
            tokens: int32 ``[R, num_steps]``, the tokens each row chose before
                ``step`` (0 from ``step`` on), before any reordering.
            variables: the strategy's loop variables.

        Returns:
            ``(next_tokens, parent_rows, variables)``: ``next_tokens`` int32
            ``[R]`` (fed to the next ``decode_step`` and written into column
            ``step`` of the chosen tokens; PAD for a finished row),
            ``parent_rows`` int32 ``[R]`` (the row each new row continues; None
            unless ``reorders_rows``) and the new variables.
        """
        raise NotImplementedError

    def all_finished(self, variables):
        """Scalar bool: every sentence is finished (the loop stops)."""
        raise NotImplementedError

    def finalize(self, variables, tokens, steps, alignment_of):
        """The search's result.

        Args:
            variables: the strategy's variables after the loop.
            tokens: int32 ``[R, num_steps]``, every row's chosen tokens (after the
                last reordering).
            steps: scalar int32, ``decode_step`` calls made.
            alignment_of: ``(end_rows [B, N], end_steps [B, N]) -> float32
                [B, N, steps, S]`` (the attention of each step along the
                ancestry of the hypothesis that ended in row ``end_rows`` at
                step ``end_steps``; zero after it), or None when the state has
                no ``"attention"``.
        """
        raise NotImplementedError


def sentence_limits(model, source_ids, max_length_a, max_length_b):
    """Each sentence's limit ``ceil(a * source_length + b)``, capped by the model's
    positions (``common.max_target_lengths``): the searches' ``max_lengths``."""
    return common.max_target_lengths(source_ids, max_length_a, max_length_b,
                                     model.max_decode_length)


def decode(model, source_ids, strategy, *, max_lengths, logits_processor=None,
           num_steps=None):
    """Runs ``strategy`` over ``model``'s step protocol; returns its ``finalize``.

    Args:
        model: object implementing the step protocol (``common``).
        source_ids: int32 ``[B, S]``, 0 = padding.
        strategy: a :class:`SearchStrategy`.
        max_lengths: int32 ``[B]``, each sentence's limit excluding EOS
            (``common.max_target_lengths``); at it only EOS may be chosen.
        logits_processor: optional ``fn(log_probs, step, tokens_so_far, state)``
            (``beam_search`` documents it).
        num_steps: the most steps and the caches' size; default
            ``common.num_decode_steps(max_lengths)`` (the longest limit plus
            the EOS step). Forced scoring sets it to its targets' length.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch_size = tf.shape(source_ids)[0]
    if num_steps is None:
        num_steps = common.num_decode_steps(max_lengths)
    per_sentence = strategy.rows_per_sentence
    tiled = not (isinstance(per_sentence, int) and per_sentence == 1)
    if tiled:  # the rows of a sentence are contiguous
        # One index vector gathered by every leaf: a tf.repeat per leaf made
        # ~10 ops each (a tenth of a tiny Transformer's beam-search graph).
        sentence_of_row = tf.repeat(tf.range(batch_size), per_sentence)
    row_max_lengths = tf.gather(max_lengths, sentence_of_row) if tiled else max_lengths
    rows = tf.shape(row_max_lengths)[0]

    state = model.initial_state(model.encode(source_ids), num_steps)
    if tiled:  # tiled once
        state = common.map_batch_leaves(lambda leaf: tf.gather(leaf, sentence_of_row), state)
    track_attention = (strategy.records_alignment and isinstance(state, dict)
                       and "attention" in state)

    carry = {
        "step": tf.constant(0, tf.int32),
        "last_token": tf.fill([rows], common.BOS_ID),
        "tokens": tf.zeros([rows, num_steps], tf.int32),
        "search": strategy.begin(batch_size, num_steps, max_lengths),
        "state": state,
    }
    if track_attention:
        # Each step's attention rows (and, for a reordering search, the rows'
        # parents) are written once and never reordered; a hypothesis'
        # alignment is read back along its ancestry at the end. Reordering a
        # [rows, max_len, S] buffer every step would cost O(max_len * S) per
        # step instead of O(S).
        carry["attention_steps"] = tf.TensorArray(
            tf.float32, size=num_steps, element_shape=tf.TensorShape([None, None]))
        if strategy.reorders_rows:
            carry["parent_steps"] = tf.TensorArray(
                tf.int32, size=num_steps, element_shape=tf.TensorShape([None]))
    invariants = common.loop_shape_invariants(carry)

    def keep_going(carry):
        return tf.logical_and(
            tf.logical_not(strategy.all_finished(carry["search"])),
            carry["step"] < num_steps)

    def body(carry):
        step = carry["step"]
        logits, new_state = model.decode_step(carry["last_token"], step, carry["state"])
        log_probs = common.selection_log_probs(
            logits, step, carry["tokens"], new_state, row_max_lengths, logits_processor)
        next_tokens, parent_rows, search = strategy.step(
            step, log_probs, carry["tokens"], carry["search"])
        tokens = carry["tokens"]
        new_carry = {"step": step + 1, "last_token": next_tokens, "search": search}
        if track_attention:
            # Row r of this step's attention belongs to the hypothesis in row r
            # before the reordering; parent_rows maps the new rows onto them.
            new_carry["attention_steps"] = carry["attention_steps"].write(
                step, tf.cast(new_state["attention"], tf.float32))
            if strategy.reorders_rows:
                new_carry["parent_steps"] = carry["parent_steps"].write(step, parent_rows)
        if strategy.reorders_rows:
            def reorder(leaf):
                return tf.gather(leaf, parent_rows)

            tokens = reorder(tokens)
            new_state = common.map_batch_leaves(reorder, new_state)
        new_carry["tokens"] = common.write_column(tokens, step, next_tokens)
        new_carry["state"] = new_state
        return (common.keep_static_shapes(new_carry, invariants),)

    (carry,) = tf.while_loop(keep_going, body, (carry,), shape_invariants=(invariants,))

    alignment_of = None
    if track_attention:
        source_length = tf.shape(state["attention"])[1]

        def alignment_of(end_rows, end_steps):
            return _alignment_or_empty(
                carry["attention_steps"], carry.get("parent_steps"), carry["step"],
                end_rows, end_steps, source_length)

    return strategy.finalize(carry["search"], carry["tokens"], carry["step"], alignment_of)


def _backtrack_alignment(attention_steps, parent_steps, steps_done, end_rows, end_steps):
    """``[B, N, steps_done, S]`` alignments of the hypotheses ending in ``end_rows``.

    A hypothesis that ended (EOS) at step ``e`` from row ``r_e`` has, at step
    ``t < e``, the row ``r_t = parents[t][r_{t+1}]`` (``r_t = r_e`` when the
    search never reorders, ``parent_steps`` None); its alignment row ``t`` is
    ``attention[t][r_t]`` for ``t <= e`` and 0 after. One reverse scan over
    the steps, O(steps * B * N * S) once per search.
    """
    times = tf.range(steps_done)
    attention = attention_steps.gather(times)  # [T, rows, S]
    if parent_steps is None:
        rows_attention = tf.gather(attention, end_rows, axis=1)  # [T, B, N, S]
        active = (times[:, tf.newaxis, tf.newaxis] <= end_steps)[..., tf.newaxis]
        rows_attention = tf.where(active, rows_attention, tf.zeros_like(rows_attention))
        return tf.transpose(rows_attention, [1, 2, 0, 3])
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

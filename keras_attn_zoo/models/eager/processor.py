"""The eager translator's decoding rules, as a logits processor for the zoo's searches.

The eager model decodes with the shared ``beam_search`` / ``greedy_search``
plus :func:`eager_logits_processor`, which applies the rules of Press & Smith
(2018) at each step ``t`` of a hypothesis (``n`` = the position of its source
EOS, ``P`` = start pads, ``k`` = ε limit, ``N`` = source padding injection):

* ``t < P``: only the start token (forced, scored 0: not the model's choice);
  it is banned afterwards;
* at most ``k`` ε tokens per hypothesis (start tokens do not count): once ``k``
  are emitted ε's probability is zero;
* EOS is banned before the source EOS is read (``t < max(n, P)``); at
  ``t >= n`` its log-probability is that of reading the source EOS now
  (``state["eos_log_prob"]``, see ``EagerLSTMTranslator.decode_step``), while
  every other token is scored by the step that read an injected source pad;
* source padding injection: at most ``N`` source pads are injected, so at
  ``t >= max(n + N, P)`` only EOS is left (``N = 0``: the output is exactly as
  long as the source, as in the paper without SPI);
* how a hypothesis ends while pads are injected (``injection_end``):
  ``"reference"`` (the default) is the reference code's SPI: the N pads are
  read, EOS is scored as the pad-reading step predicts it (the model may still
  end early), and the source EOS is read only after them; ``N`` then sets the
  output length, which is why the paper tunes it on the dev set.
  ``"choose"`` (the zoo's earlier default) scores EOS at every step ``t >= n``
  with the log-prob of reading the source EOS now. Training puts the target
  EOS exactly where the source EOS is read, so that log-prob is near 0 and
  beats every word: hypotheses end at the first allowed step and ``N`` barely
  changes the length (issue 32: a 300-step small model's dev length ratio
  was 0.645-0.651 for every N from 0 to 10);
* the source-pad token is never a target token.

Defaults: the values of the paper's published decoding command (beam 5,
ε limit 3, SPI 4, start pads 5); the paper tuned them on the development set.
The reference ``generate.py`` defaults (beam 10, ε limit 9, SPI 3, start pads
3) are options.

:func:`strip_eager_tokens` removes start, ε and source-pad tokens from the
output. The search drivers (``eager_translate``, ``EagerStreamer``) are in
``keras_attn_zoo.decoding.eager_processor``.
"""

import numpy as np

from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID, PAD_ID
from keras_attn_zoo.models.eager.special_ids import DEFAULT_START_PADS

# The searches' floor for banned tokens (decoding.common.NEG_INF; models may not
# import decoding).
NEG_INF = -1e9

# `decoding.common.LENGTH_NORMALIZATIONS` (models may not import decoding).
LENGTH_NORMALIZATIONS = ("gnmt", "average")

# `injection_end` values (see the module docstring).
INJECTION_ENDS = ("choose", "reference")
# The defaults: the reference code's decoding (issue 32; module docstring).
DEFAULT_INJECTION_END = "reference"
DEFAULT_LENGTH_NORMALIZATION = "average"

DEFAULT_EPSILON_LIMIT = 3
DEFAULT_SOURCE_PADDING_INJECTION = 4
PAPER_BEAM_SIZE = 5  # the paper's decoding command; the zoo's default search has beam 4


def apply_eager_rules(log_probs, step, epsilon_count, source_end, eos_log_prob, *,
                      start_id, epsilon_id, source_pad_id,
                      start_pads=DEFAULT_START_PADS, epsilon_limit=DEFAULT_EPSILON_LIMIT,
                      source_padding_injection=DEFAULT_SOURCE_PADDING_INJECTION,
                      injection_end=DEFAULT_INJECTION_END):
    """The rules of the module docstring on float32 log-probs ``[R, V]``.

    Args:
        log_probs: float32 ``[R, V]`` (log-softmax of the step's logits).
        step: scalar int32, the index of the token being chosen.
        epsilon_count: int32 ``[R]``, ε emitted so far per row.
        source_end: int32 ``[R]``, position of each row's source EOS.
        eos_log_prob: float32 ``[R]``, log-prob of EOS when reading the source EOS.
    """
    import tensorflow as tf  # here: the builders read this module's defaults on any backend

    neg = tf.constant(NEG_INF, tf.float32)
    log_probs = tf.convert_to_tensor(log_probs, tf.float32)
    step = tf.cast(step, tf.int32)
    vocab = tf.range(tf.shape(log_probs)[-1])[tf.newaxis, :]
    is_start = tf.equal(vocab, start_id)
    is_eos = tf.equal(vocab, EOS_ID)
    source_end = tf.cast(source_end, tf.int32)[:, tf.newaxis]
    earliest_end = tf.maximum(source_end, start_pads)
    latest_end = tf.maximum(source_end + source_padding_injection, start_pads)
    source_eos = tf.cast(eos_log_prob, tf.float32)[:, tf.newaxis]
    if injection_end == "reference":
        # The pads are read first: EOS as this step predicts it, the source
        # EOS's log-prob only once no pad is left.
        eos_score = tf.where(step >= latest_end, source_eos, log_probs[:, EOS_ID:EOS_ID + 1])
    elif injection_end == "choose":
        eos_score = source_eos
    else:
        raise ValueError(f"injection_end must be one of {INJECTION_ENDS}, got {injection_end!r}.")
    scores = tf.where(is_eos, eos_score, log_probs)

    banned = tf.logical_or(is_start, tf.equal(vocab, source_pad_id))
    too_many = tf.greater_equal(tf.cast(epsilon_count, tf.int32), epsilon_limit)[:, tf.newaxis]
    banned = tf.logical_or(banned, tf.logical_and(tf.equal(vocab, epsilon_id), too_many))
    banned = tf.logical_or(banned, tf.logical_and(is_eos, step < earliest_end))
    only_eos = step >= latest_end
    banned = tf.logical_or(banned, tf.logical_and(only_eos, tf.logical_not(is_eos)))
    scores = tf.where(banned, neg, scores)

    forced_start = tf.where(is_start, 0.0, neg)
    return tf.where(step < start_pads, forced_start, scores)


def eager_logits_processor(start_id, epsilon_id, source_pad_id, *,
                           start_pads=DEFAULT_START_PADS,
                           epsilon_limit=DEFAULT_EPSILON_LIMIT,
                           source_padding_injection=DEFAULT_SOURCE_PADDING_INJECTION,
                           injection_end=DEFAULT_INJECTION_END):
    """A ``logits_processor`` for ``beam_search`` / ``greedy_search`` (eager model only).

    It reads ``state["source_end"]`` and ``state["eos_log_prob"]`` from
    ``EagerLSTMTranslator.decode_step`` and counts ε in ``tokens_so_far``.

    Args:
        start_id: the model's start token id.
        epsilon_id: the model's ε id.
        source_pad_id: the model's source pad id.
        start_pads: P, start tokens forced first (must match the training data).
        epsilon_limit: k, most ε per hypothesis.
        source_padding_injection: N, most source pads injected after the source
            (an int, or an int32 scalar tensor or ``tf.Variable`` read at run time).
        injection_end: ``"choose"`` or ``"reference"`` (module docstring).

    Returns:
        ``fn(log_probs, step, tokens_so_far, state) -> log_probs``.
    """
    for name, value in (("start_pads", start_pads), ("epsilon_limit", epsilon_limit),
                        ("source_padding_injection", source_padding_injection)):
        # A tensor (a tf.Variable swept by the dev choice) is read at run time.
        if isinstance(value, int) and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}.")
    if injection_end not in INJECTION_ENDS:
        raise ValueError(f"injection_end must be one of {INJECTION_ENDS}, got {injection_end!r}.")

    def processor(log_probs, step, tokens_so_far, state):
        import tensorflow as tf  # as in apply_eager_rules

        epsilon_count = tf.reduce_sum(
            tf.cast(tf.equal(tokens_so_far, epsilon_id), tf.int32), axis=1)
        return apply_eager_rules(
            log_probs, step, epsilon_count, state["source_end"], state["eos_log_prob"],
            start_id=start_id, epsilon_id=epsilon_id, source_pad_id=source_pad_id,
            start_pads=start_pads, epsilon_limit=epsilon_limit,
            source_padding_injection=source_padding_injection,
            injection_end=injection_end)

    return processor


def eager_processor_for(model, **options):
    """:func:`eager_logits_processor` with the model's special ids, start pads
    and decoding options (``options`` override them)."""
    start_id, epsilon_id, source_pad_id = model.special_ids
    for name in ("start_pads", "epsilon_limit", "source_padding_injection", "injection_end"):
        if name in model.zoo_config:  # configs saved before issue 32 lack the last three
            options.setdefault(name, model.zoo_config[name])
    return eager_logits_processor(start_id, epsilon_id, source_pad_id, **options)


def strip_eager_tokens(ids, special_ids):
    """Removes start, ε and source-pad tokens (and PAD/BOS) and stops at EOS.

    Args:
        ids: one sequence of ids (list, array or tensor) or a batch of them
            (2-D, or the ``[B, N, T]`` ``ids`` of a search result).
        special_ids: ``EagerSpecialIds`` (a model's ``special_ids``) or a
            ``(start, ε, source pad)`` triple.

    Returns:
        A list of ints, or (for batches) nested lists of the same shape minus the time axis.
    """
    removed = set(special_ids) | {PAD_ID, BOS_ID}
    array = np.asarray(ids)
    if array.ndim > 1:
        return [strip_eager_tokens(row, special_ids) for row in array]
    kept = []
    for token in array.tolist():
        if token == EOS_ID:
            break
        if token not in removed:
            kept.append(int(token))
    return kept

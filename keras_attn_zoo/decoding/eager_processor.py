"""The eager translator's search drivers: batch translation and streaming.

The decoding rules themselves (the logits processor, its defaults and
``strip_eager_tokens``) are in ``keras_attn_zoo.models.eager.processor``;
here they drive the zoo's ``beam_search`` / ``greedy_search``.
:class:`EagerStreamer` translates a source that arrives token by token.
"""

import numpy as np
import tensorflow as tf

from keras_attn_zoo.decoding import common
from keras_attn_zoo.decoding.beam import beam_search
from keras_attn_zoo.decoding.greedy import greedy_search
from keras_attn_zoo.decoding.greedy import most_probable_token
from keras_attn_zoo.models.eager.processor import PAPER_BEAM_SIZE
from keras_attn_zoo.models.eager.processor import DEFAULT_EPSILON_LIMIT
from keras_attn_zoo.models.eager.processor import DEFAULT_INJECTION_END
from keras_attn_zoo.models.eager.processor import DEFAULT_SOURCE_PADDING_INJECTION
from keras_attn_zoo.models.eager.processor import apply_eager_rules
from keras_attn_zoo.models.eager.processor import eager_processor_for
from keras_attn_zoo.models.eager.processor import strip_eager_tokens


def eager_translate(model, source_ids, *, beam_size=PAPER_BEAM_SIZE,
                    length_penalty=common.DEFAULT_LENGTH_PENALTY,
                    max_length_a=2.0, max_length_b=10, length_normalization=None,
                    **options):
    """Translates ``source_ids`` (int32 ``[B, S]``, ending with EOS) with the eager rules.

    ``beam_size=1`` runs ``greedy_search``. ``options`` go to
    :func:`eager_logits_processor` (default: the model's decoding options);
    ``length_normalization`` None takes the model's. Returns one stripped id
    list per sentence.
    """
    processor = eager_processor_for(model, **options)
    if beam_size == 1:
        result = greedy_search(model, source_ids, max_length_a=max_length_a,
                               max_length_b=max_length_b, logits_processor=processor)
    else:
        result = beam_search(model, source_ids, beam_size=beam_size,
                             length_penalty=length_penalty, max_length_a=max_length_a,
                             max_length_b=max_length_b, logits_processor=processor,
                             length_normalization=(model.length_normalization
                                                   if length_normalization is None
                                                   else length_normalization))
    return [row[0] for row in strip_eager_tokens(result["ids"].numpy(), model.special_ids)]


class EagerStreamer:
    """Greedy streaming translation: source tokens in, committed target tokens out.

    Each source token is read as soon as it arrives: the model takes one step
    and the target token of that step is final (greedy), so ``feed`` returns
    the translation written so far (start, ε and source-pad tokens removed).
    ``finish`` (or feeding ``EOS_ID``) reads the end of the source, injects
    source pads until the model ends the sentence (at most
    ``source_padding_injection``) and returns the rest. Then the streamer is
    ready for the next sentence (state reset; ``carry_state=True`` keeps the
    LSTM state across sentences, as in aligned-batching training).

    Memory is constant however long the input: the streamer holds the LSTM
    states, the last target token and three counters, never the source or the
    output. For a whole sentence ending with EOS its output equals
    ``greedy_search`` with ``eager_processor_for(model, ...)`` on that
    sentence, stripped (the same rules, steps and max length).

    Why not the shared decode loop (``loop.decode``): that loop runs a whole
    search in one ``tf.while_loop`` over a source it holds in full, while here
    the source arrives token by token and each target token must be returned
    before the next source token exists. So the streamer runs one step of
    greedy search per ``tf.function`` call, with the loop's own pieces: the
    same ``common.selection_log_probs`` (max length, forced EOS, banned ids)
    and greedy's choice (``greedy.most_probable_token``); only the iteration
    is Python's.

    Args:
        model: an ``EagerLSTMTranslator``.
        start_pads: as for the processor (None: the model's).
        epsilon_limit: as for the processor (None: the model's).
        source_padding_injection: as for the processor (None: the model's).
        max_length_a: ``a`` of ``greedy_search``'s length limit
            ``ceil(a * (source tokens + EOS) + b)``; the limit only acts after
            the source has ended when ``max_length_a >= 1``.
        max_length_b: ``b`` of that limit.
        carry_state: keep the LSTM state from one sentence to the next.

    Example:
    >>> streamer = EagerStreamer(model)
    >>> words = streamer.feed([57, 12]) + streamer.feed([99]) + streamer.finish()
    """

    def __init__(self, model, *, start_pads=None, epsilon_limit=None,
                 source_padding_injection=None, max_length_a=2.0, max_length_b=10,
                 carry_state=False):
        self.model = model
        self.start_id, self.epsilon_id, self.source_pad_id = model.special_ids

        def model_default(name, value, default):
            return model.zoo_config.get(name, default) if value is None else value

        self.rules = dict(
            start_id=self.start_id, epsilon_id=self.epsilon_id,
            source_pad_id=self.source_pad_id,
            start_pads=model_default("start_pads", start_pads, None),
            epsilon_limit=model_default("epsilon_limit", epsilon_limit,
                                        DEFAULT_EPSILON_LIMIT),
            source_padding_injection=model_default(
                "source_padding_injection", source_padding_injection,
                DEFAULT_SOURCE_PADDING_INJECTION),
            injection_end=model_default("injection_end", None, DEFAULT_INJECTION_END))
        self.max_length_a = max_length_a
        self.max_length_b = max_length_b
        self.carry_state = carry_state
        self._step_fn = tf.function(self._greedy_step, reduce_retracing=True)
        self._states = None
        self.reset()

    def reset(self):
        """Starts a new sentence (keeps the LSTM state if ``carry_state``)."""
        if self._states is None or not self.carry_state:
            self._states = [[tf.convert_to_tensor(t) for t in pair]
                            for pair in self.model.zero_states(1)]
        self._position = 0
        self._previous = common.BOS_ID
        self._epsilons = 0
        self._finished = False

    def _greedy_step(self, source_token, previous, states, step, epsilon_count, source_end,
                     max_length, ending):
        """One greedy step: returns ``(token, new_states)``."""
        logits, new_states = self.model.step_with_source(
            tf.reshape(source_token, [1]), tf.reshape(previous, [1]), states)
        if ending:
            eos_logits, _ = self.model.step_with_source(
                tf.fill([1], common.EOS_ID), tf.reshape(previous, [1]), states)
            eos_log_prob = tf.nn.log_softmax(tf.cast(eos_logits, tf.float32))[:, common.EOS_ID]
        else:
            eos_log_prob = tf.zeros([1])

        def processor(log_probs, step_, tokens_so_far, state):
            del tokens_so_far, state
            return apply_eager_rules(log_probs, step_, tf.reshape(epsilon_count, [1]),
                                     tf.reshape(source_end, [1]), eos_log_prob,
                                     **self.rules)

        log_probs = common.selection_log_probs(
            logits, step, tf.zeros([1, 0], tf.int32), None,
            tf.reshape(max_length, [1]), processor)
        return most_probable_token(log_probs, step)[0], new_states

    def _advance(self, source_token, source_end, max_length, ending):
        token, self._states = self._step_fn(
            tf.constant(source_token, tf.int32), tf.constant(self._previous, tf.int32),
            self._states, tf.constant(self._position, tf.int32),
            tf.constant(self._epsilons, tf.int32), tf.constant(source_end, tf.int32),
            tf.constant(max_length, tf.int32), ending)
        token = int(token)
        self._position += 1
        self._previous = token
        if token == self.epsilon_id:
            self._epsilons += 1
        return token

    def _commit(self, token):
        if token in (self.start_id, self.epsilon_id, self.source_pad_id, common.EOS_ID,
                     common.PAD_ID, common.BOS_ID):
            return []
        return [token]

    def feed(self, source_ids):
        """Reads source tokens; returns the target tokens committed meanwhile.

        An ``EOS_ID`` among them ends the sentence (as :meth:`finish`); the
        tokens after it start the next one. ``PAD_ID`` tokens are skipped.
        """
        output = []
        for token in np.asarray(source_ids, np.int64).reshape(-1).tolist():
            if token == common.EOS_ID:
                output.extend(self.finish())
            elif token != common.PAD_ID:
                # The source has not ended: any end position after this step
                # gives the same decision, and the length limit cannot act.
                output.extend(self._commit(self._advance(
                    token, self._position + 1, np.iinfo(np.int32).max, False)))
        return output

    def finish(self):
        """Reads the source EOS and decodes to the target EOS; returns the last tokens."""
        source_end = self._position
        limit = int(np.ceil(self.max_length_a * (source_end + 1) + self.max_length_b
                            - common.CEIL_TOLERANCE))
        output = []
        while True:
            token = self._advance(self.source_pad_id, source_end, max(limit, 0), True)
            if token == common.EOS_ID:
                break
            output.extend(self._commit(token))
        self.reset()
        return output

    def translate(self, source_ids):
        """A whole sentence (without or with a final EOS): its stripped translation."""
        source_ids = [t for t in np.asarray(source_ids).reshape(-1).tolist()]
        if source_ids and source_ids[-1] == common.EOS_ID:
            source_ids = source_ids[:-1]
        return self.feed(source_ids) + self.finish()

    def memory_footprint(self):
        """Numbers held by the streamer: the LSTM states plus four scalars (constant)."""
        return sum(int(np.prod(t.shape)) for pair in self._states for t in pair) + 4

"""Choosing the eager translator's source padding injection on the dev set.

Here, in `evaluation/`, because it decodes through the exported search
(`Translator`) and scores with `evaluation`: `decoding/` ranks below both.
"""

import tensorflow as tf

from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.models.eager.processor import PAPER_BEAM_SIZE
from keras_attn_zoo.models.eager.processor import eager_processor_for
from keras_attn_zoo.evaluation.scores import corpus_scores
from keras_attn_zoo.evaluation.scores import check_valid_metric
from keras_attn_zoo.evaluation.scores import ranking_key
from keras_attn_zoo.inference.translator import Translator

# SPI values `choose_source_padding_injection` tries by default: none up to
# twice the zoo's default start pads (with P start pads a hypothesis holds at
# most n + N - P word pieces, so N < P caps every output below the source).
SOURCE_PADDING_INJECTION_CANDIDATES = tuple(range(0, 11))


def choose_source_padding_injection(translator, dev_pairs, *,
                                    candidates=SOURCE_PADDING_INJECTION_CANDIDATES,
                                    beam_size=PAPER_BEAM_SIZE,
                                    length_penalty=DEFAULT_LENGTH_PENALTY, metric="bleu"):
    """Picks the source padding injection N with the best dev `metric`, as the paper
    does ("the padding limit, source padding injection value, and beam size
    ... are the ones that perform best on the development set"), and sets it
    on the translator's model (``set_decoding``), so that evaluation and export
    use it. `metric` is the run's `valid_metric` ("bleu", or "chrf" where greedy BLEU
    is too low to rank by); the other one breaks ties.

    Each candidate decodes ``dev_pairs`` through ``translator`` (the run's one
    inference object). The sweep traces its search once: the rules read N from
    a ``tf.Variable`` set to each candidate in turn (``Translator.retrace``'s
    ``logits_processor``); then the translator is retraced for the model's
    rules with the chosen N, which evaluation and export use. Ties go to the
    smaller N.

    Args:
        translator: a ``Translator`` of an ``EagerLSTMTranslator``.
        dev_pairs: ``(source, reference)`` texts.
        candidates: the N values tried.
        beam_size: the search's beam.
        length_penalty: the search's length penalty.
        metric: what ranks the candidates, "bleu" or "chrf".

    Returns:
        ``{"chosen": N, "metric": metric, "by_value": {N: {"bleu", "chrf",
        "length_ratio"}}}``,
        ``length_ratio`` being hypothesis words over reference words
        (whitespace-split).
    """
    if not dev_pairs:
        raise ValueError("choose_source_padding_injection needs development pairs.")
    check_valid_metric(metric)  # before any decoding
    model = translator.model
    candidates = sorted(set(int(n) for n in candidates))
    if not candidates or candidates[0] < 0:
        raise ValueError(f"source padding injection candidates must be >= 0, got "
                         f"{candidates}.")
    sources = [source for source, _ in dev_pairs]
    references = [reference for _, reference in dev_pairs]
    reference_words = max(1, sum(len(r.split()) for r in references))
    by_value = {}
    injection = tf.Variable(candidates[0], dtype=tf.int32, trainable=False)
    translator.retrace(logits_processor=eager_processor_for(
        model, source_padding_injection=injection))
    try:
        for value in candidates:
            injection.assign(value)
            hypotheses = translator.translate_texts(sources, beam_size=beam_size,
                                                    length_penalty=length_penalty)
            scores = corpus_scores(hypotheses, references)
            by_value[value] = {
                "bleu": scores["bleu"], "chrf": scores["chrf"],
                "length_ratio": round(sum(len(h.split()) for h in hypotheses)
                                      / reference_words, 4)}
    except BaseException:
        translator.retrace()  # back to the model's own rules, unchanged
        raise
    chosen = max(candidates, key=lambda n: (*ranking_key(by_value[n], metric), -n))
    model.set_decoding(source_padding_injection=chosen)
    translator.retrace()
    return {"chosen": chosen, "metric": metric, "by_value": by_value}

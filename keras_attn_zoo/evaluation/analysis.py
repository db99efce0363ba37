"""The attention and translation analyses of the papers, as pure functions.

Everything here works on NumPy arrays, Python lists and strings (sacreBLEU for
the scores); nothing runs a model. `recipes/analyze.py` and the training
callbacks feed it.

* Attention entropy (GMM paper, Table 6): `entropy`, `mean_row_entropy`.
  Natural logarithm (nats): a uniform distribution over n keys has entropy
  `log n`, a one-hot one 0. Each attention row is renormalised to sum to 1
  first (the approximately normalised Gaussian mixture and the hard-coded
  Gaussian patterns do not sum exactly to 1).
* Jensen-Shannon divergence between layers (RAN paper, Figure 7):
  `js_divergence`, `layer_js_matrix`. Natural logarithm, so values lie in
  `[0, log 2 ~ 0.693]`; symmetric; 0 for identical distributions.
* Alignment quality (GMM paper, Table 7; Och and Ney 2003): gold alignments in
  Pharaoh format (`i-j` sure, `i?j` possible; i source word, j target word,
  0-based) read by `read_gold_alignments`; the model's alignment is the argmax
  source word of each target word (`argmax_links`); `alignment_scores` gives
  precision `|A & P| / |A|`, recall `|A & S| / |S|` and
  `AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)`, with the sure links counted
  as possible too (S within P), summed over the corpus before dividing.
* Words from SentencePiece pieces (`word_ids`, `aggregate_to_words`): a
  piece starting with "▁" (U+2581) begins a word, every other piece continues
  the word before it. Piece attention becomes word attention by summing over
  the pieces of a source word (the probability mass the word receives) and
  averaging over the pieces of a target word (each target piece is one
  attention distribution; the word's is their mean), so word rows still sum
  to 1 over the source words.
* Sentence-length buckets (`length_buckets`), BLEU and chrF per bucket
  (`scores_by_bucket`, GMM paper Figure 7) and corpus n-gram precision for n
  = 1..4 (`ngram_precisions`, GMM paper Figure 6; sacreBLEU's modified
  precisions, in percent).
"""

import math

import numpy as np

from keras_attn_zoo.data.alignments import Alignment
from keras_attn_zoo.data.alignments import read_alignments

WORD_START = "\u2581"
DEFAULT_BLEU_BOUNDARIES = (10, 20, 30, 40, 50)  # 6 buckets, as the GMM paper's Figure 7
DEFAULT_ENTROPY_BOUNDARIES = (20, 40)  # the GMM paper's Table 6: short, mid, long


# ---- entropy and Jensen-Shannon divergence --------------------------------------------


def _normalize(p, axis=-1):
    p = np.asarray(p, dtype=np.float64)
    p = np.where(np.isfinite(p) & (p > 0), p, 0.0)
    total = p.sum(axis=axis, keepdims=True)
    return np.divide(p, total, out=np.zeros_like(p), where=total > 0)


def _xlogy(x, y):
    """x * log(y) with 0 log 0 = 0."""
    return np.where(x > 0, x * np.log(np.where(x > 0, y, 1.0)), 0.0)


def entropy(p, axis=-1):
    """Shannon entropy in nats of distributions along `axis` (renormalised first).

    Negative or non-finite entries count as 0; an all-zero row has entropy 0.

    >>> float(entropy(np.full(4, 0.25)))  # log 4
    1.3862943611198906
    """
    p = _normalize(p, axis)
    return np.maximum(-np.sum(_xlogy(p, p), axis=axis), 0.0)


def js_divergence(p, q, axis=-1):
    """Jensen-Shannon divergence in nats, `(KL(p||m) + KL(q||m)) / 2`, `m = (p+q)/2`.

    Both inputs are renormalised along `axis`; the result is symmetric, 0 for
    identical distributions and at most `log 2`.
    """
    p, q = _normalize(p, axis), _normalize(q, axis)
    m = 0.5 * (p + q)
    kl_pm = np.sum(_xlogy(p, p) - _xlogy(p, m), axis=axis)
    kl_qm = np.sum(_xlogy(q, q) - _xlogy(q, m), axis=axis)
    return np.maximum(0.5 * (kl_pm + kl_qm), 0.0)


def mean_row_entropy(weights, num_rows, num_keys=None):
    """Mean entropy of the first `num_rows` query rows of one sentence's attention.

    Args:
        weights: `[..., T, S]` (e.g. `[L, h, T, S]`: layers and heads of one
            sentence).
        num_rows: real query rows (target pieces, or source tokens for
            encoder self-attention).
        num_keys: real keys (default: all `S`); padded keys are dropped.

    Returns:
        `[...]` mean over the rows (NaN where the weights are NaN, e.g. the
        mixture of a decoder layer without one).
    """
    weights = np.asarray(weights, dtype=np.float64)
    weights = weights[..., :num_rows, :num_keys]
    nan = np.isnan(weights).any(axis=(-1, -2))
    values = entropy(weights, axis=-1).mean(axis=-1) if num_rows else np.zeros(nan.shape)
    return np.where(nan, np.nan, values)


def layer_js_matrix(weights, num_rows, num_keys=None):
    """JS divergence between every pair of layers for one sentence.

    Heads are averaged first (one distribution per layer and query row), then
    the divergence is averaged over the `num_rows` real rows.

    Args:
        weights: `[L, h, T, S]`.
        num_rows: as in `mean_row_entropy`.
        num_keys: as in `mean_row_entropy`.

    Returns:
        `[L, L]` symmetric, zero diagonal.
    """
    weights = np.asarray(weights, dtype=np.float64)[..., :num_rows, :num_keys]
    per_layer = _normalize(weights, -1).mean(axis=1)  # [L, T, S]
    layers = per_layer.shape[0]
    matrix = np.zeros((layers, layers))
    if not num_rows:
        return matrix
    for a in range(layers):
        for b in range(a + 1, layers):
            value = js_divergence(per_layer[a], per_layer[b]).mean()
            matrix[a, b] = matrix[b, a] = value
    return matrix


def weighted_mean(values, weights, axis=0):
    """Mean of `values` along `axis` weighted by `weights` (NaN-safe; NaN if empty)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    shape = [1] * values.ndim
    shape[axis] = -1
    weights = weights.reshape(shape) * np.ones_like(values)
    valid = ~np.isnan(values)
    total = np.sum(np.where(valid, weights, 0.0), axis=axis)
    summed = np.sum(np.where(valid, values * weights, 0.0), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, summed / np.where(total > 0, total, 1.0), np.nan)


# ---- pieces and words -----------------------------------------------------------------


def word_ids(pieces):
    """The word index of each SentencePiece piece ("▁" starts a word).

    A first piece without "▁" still opens word 0.

    >>> word_ids(["▁Gu", "ten", "▁Morgen", "▁."])
    [0, 0, 1, 2]
    """
    ids, current = [], -1
    for index, piece in enumerate(pieces):
        if piece.startswith(WORD_START) or index == 0:
            current += 1
        ids.append(current)
    return ids


def aggregate_to_words(weights, source_pieces, target_pieces):
    """Piece attention `[T, S]` -> word attention `[target words, source words]`.

    Source pieces of one word are summed (the mass the word receives), target
    pieces of one word averaged. `weights` may be larger than the piece lists
    (EOS column, padding): only the top-left `[len(target), len(source)]`
    block is used.
    """
    weights = np.asarray(weights, dtype=np.float64)
    weights = weights[: len(target_pieces), : len(source_pieces)]
    source_words = word_ids(source_pieces)
    target_words = word_ids(target_pieces)
    num_source = (source_words[-1] + 1) if source_words else 0
    num_target = (target_words[-1] + 1) if target_words else 0
    summed = np.zeros((weights.shape[0], num_source))
    np.add.at(summed.T, source_words, weights.T)
    result = np.zeros((num_target, num_source))
    counts = np.zeros(num_target)
    np.add.at(result, target_words, summed)
    np.add.at(counts, target_words, 1.0)
    return result / np.maximum(counts, 1.0)[:, None]


def argmax_links(word_weights):
    """`{(source i, target j)}`: each target word aligned to its argmax source word."""
    word_weights = np.asarray(word_weights)
    if word_weights.size == 0:
        return set()
    best = np.argmax(word_weights, axis=1)
    return {(int(i), int(j)) for j, i in enumerate(best)}


# ---- gold alignments and AER ----------------------------------------------------------


def read_gold_alignments(path_or_lines, pairs=None):
    """Gold links per sentence pair (`data.alignments.read_alignments`)."""
    return read_alignments(path_or_lines, pairs)


def alignment_counts(predicted, gold):
    """Counts `|A|, |S|, |A & S|, |A & P|` of one sentence (add them over a corpus)."""
    predicted = set(predicted)
    possible = gold.possible | gold.sure
    return np.array([len(predicted), len(gold.sure), len(predicted & gold.sure),
                     len(predicted & possible)], dtype=np.int64)


def alignment_scores(predicted, gold):
    """AER, precision and recall of predicted links against gold alignments.

    Args:
        predicted: a set of `(i, j)` links, or a list of them (one per sentence).
        gold: an `Alignment` (`data.alignments`), or a list of them (same length).

    Returns:
        `{"aer", "precision", "recall"}` as fractions in [0, 1] (corpus-level:
        counts summed over sentences first), plus the counts `predicted`,
        `sure`, `predicted_and_sure`, `predicted_and_possible`. Precision is
        NaN with no predicted links, recall with no sure links.
    """
    if isinstance(gold, Alignment):
        predicted, gold = [predicted], [gold]
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments but {len(gold)} gold ones.")
    counts = np.zeros(4, np.int64)
    for links, reference in zip(predicted, gold):
        counts += alignment_counts(links, reference)
    n_a, n_s, a_s, a_p = (int(c) for c in counts)
    return {
        "aer": 1.0 - (a_s + a_p) / (n_a + n_s) if n_a + n_s else math.nan,
        "precision": a_p / n_a if n_a else math.nan,
        "recall": a_s / n_s if n_s else math.nan,
        "predicted": n_a,
        "sure": n_s,
        "predicted_and_sure": a_s,
        "predicted_and_possible": a_p,
    }


# ---- length buckets, BLEU/chrF by bucket, n-gram precision ---------------------------


def bucket_label(low, high):
    """`"<=10"`, `"11-20"`, `">50"` for the integer lengths in `(low, high]`."""
    if low is None:
        return f"<={high}"
    if high is None:
        return f">{low}"
    return f"{low + 1}-{high}"


def length_buckets(lengths, boundaries=DEFAULT_BLEU_BOUNDARIES):
    """Partitions sentence indices by length: `(-inf, b0], (b0, b1], ..., (b_last, inf)`.

    Args:
        lengths: one int per sentence (e.g. source words).
        boundaries: increasing upper bounds of all but the last bucket.

    Returns:
        A list of `{"label", "low", "high", "indices"}` (`low`/`high` None for
        the open ends); every index is in exactly one bucket, empty buckets
        are kept so tables line up.
    """
    boundaries = [int(b) for b in boundaries]
    if any(b2 <= b1 for b1, b2 in zip(boundaries, boundaries[1:])):
        raise ValueError(f"Bucket boundaries must increase, got {boundaries}.")
    edges = [None] + boundaries + [None]
    buckets = [{"label": bucket_label(low, high), "low": low, "high": high, "indices": []}
               for low, high in zip(edges, edges[1:])]
    for index, length in enumerate(lengths):
        position = int(np.searchsorted(boundaries, int(length), side="left"))
        buckets[position]["indices"].append(index)
    return buckets


def scores_by_bucket(hypotheses, references, buckets):
    """sacreBLEU BLEU and chrF of each bucket (None for an empty bucket)."""
    from keras_attn_zoo.evaluation.scores import corpus_scores

    rows = []
    for bucket in buckets:
        indices = bucket["indices"]
        row = {"bucket": bucket["label"], "sentences": len(indices), "bleu": None,
               "chrf": None}
        if indices:
            scores = corpus_scores([hypotheses[i] for i in indices],
                                   [references[i] for i in indices])
            row.update(bleu=scores["bleu"], chrf=scores["chrf"])
        rows.append(row)
    return rows


def ngram_precisions(hypotheses, references, max_order=4):
    """Corpus modified n-gram precisions (percent) for n = 1..max_order.

    sacreBLEU's (13a tokenisation, clipped counts), i.e. the `p_n` inside BLEU.
    """
    import sacrebleu

    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    bleu = sacrebleu.metrics.BLEU(max_ngram_order=max_order)
    score = bleu.corpus_score(hypotheses, [references])
    return [round(float(p), 2) for p in score.precisions]

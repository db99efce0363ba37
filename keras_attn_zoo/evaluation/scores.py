"""Corpus-level sacreBLEU and chrF on detokenised text."""

import time

import sacrebleu


def corpus_scores(hypotheses, references):
    """BLEU and chrF of `hypotheses` against one reference each.

    Both are sacreBLEU's defaults (13a tokenisation, chrF with n=6), computed
    on plain detokenised text, so the numbers are comparable with papers that
    report sacreBLEU. The signatures say exactly what was computed.

    Returns:
        dict with `bleu`, `chrf`, `length_ratio` (hypothesis over reference
        13a words, as in BLEU's brevity penalty), `sacrebleu_signature`,
        `chrf_signature`.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references."
        )
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "length_ratio": round(bleu_score.sys_len / max(bleu_score.ref_len, 1), 4),
        "sacrebleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def search_grid(translator, pairs, beam_sizes, length_penalties, log=None):
    """BLEU, chrF and length ratio of `translator`'s search on `pairs` at each beam
    size and length penalty: one row per setting, each with its `seconds` (a
    setting's first call includes its tracing). Greedy search (beam 1), and every
    beam of a model that ranks hypotheses without the GNMT penalty (the eager
    translator's average log-prob), get one row, the penalty 0.0 and unused.
    Settings are chosen on the valid split with it; `log(row)` sees each row as
    it is scored."""
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    penalized = getattr(translator.model, "length_normalization", "gnmt") == "gnmt"
    rows = []
    for beam in beam_sizes:
        for penalty in (length_penalties if beam > 1 and penalized else [0.0]):
            started = time.monotonic()
            hypotheses = translator.translate_texts(sources, beam_size=beam,
                                                    length_penalty=penalty)
            seconds = time.monotonic() - started
            scores = corpus_scores(hypotheses, references)
            row = {"beam_size": beam, "length_penalty": penalty,
                   **{key: scores[key] for key in ("bleu", "chrf", "length_ratio")},
                   "seconds": round(seconds, 1)}
            rows.append(row)
            if log is not None:
                log(row)
    return rows


VALID_METRICS = ("bleu", "chrf")


def check_valid_metric(metric):
    """`metric` if it can rank a valid-split choice, else a ValueError naming it."""
    if metric not in VALID_METRICS:
        raise ValueError(f"metric must be one of {VALID_METRICS}, got {metric!r}.")
    return metric


def ranking_key(scores, metric="bleu"):
    """What ranks a valid-split choice: `scores[metric]` ("bleu" or "chrf", the
    run's `valid_metric`), the other metric breaking ties."""
    check_valid_metric(metric)
    return tuple(scores[name] for name in sorted(VALID_METRICS, key=lambda m: m != metric))


def best_setting(rows, metric="bleu"):
    """The row of `search_grid` with the best `metric` (the other breaks ties)."""
    return max(rows, key=lambda row: ranking_key(row, metric))

"""Corpus-level sacreBLEU and chrF on detokenised text."""

import sacrebleu


def corpus_scores(hypotheses, references):
    """BLEU and chrF of `hypotheses` against one reference each.

    Both are sacreBLEU's defaults (13a tokenisation, chrF with n=6), computed
    on plain detokenised text, so the numbers are comparable with papers that
    report sacreBLEU. The signatures say exactly what was computed.

    Returns:
        dict with `bleu`, `chrf`, `sacrebleu_signature`, `chrf_signature`.
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
        "sacrebleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }

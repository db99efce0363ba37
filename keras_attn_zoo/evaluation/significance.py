"""Comparing two models on the same test sentences: seeds, paired bootstrap, verdicts.

A paper's claim ("RAN-D >= Transformer in BLEU") is checked per seed with
sacreBLEU's paired bootstrap resampling (Koehn, 2004): both systems' outputs
on the same sentences, resampled together 1,000 times; the p-value is the share
of resamples where the difference does not have the sign observed. Over seeds
the verdict is by majority, so one lucky seed decides nothing.
"""

import math
import statistics

ALPHA = 0.05
CONFIRMED = "confirmed"
NOT_CONFIRMED = "not confirmed"
INCONCLUSIVE = "inconclusive at this scale"


def paired_bootstrap(baseline, systems, references, n_samples=1000):
    """sacreBLEU's paired bootstrap of each system against `baseline`.

    Args:
        baseline: list of hypothesis strings (e.g. the Transformer's).
        systems: `{name: hypotheses}`, each aligned with `references`.
        references: list of reference strings.
        n_samples: bootstrap resamples (sacreBLEU's default: 1,000; seed 12345).

    Returns:
        `{name: {"bleu", "bleu_p_value", "bleu_ci", "chrf", "chrf_p_value",
        "chrf_ci"}}` with the baseline under `"baseline"` (its p-values None);
        `*_ci` is the half width of the 95% interval of the resampled means.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.metrics import CHRF
    from sacrebleu.significance import PairedTest

    for name, hypotheses in [("baseline", baseline), *systems.items()]:
        if len(hypotheses) != len(references):
            raise ValueError(f"{name} has {len(hypotheses)} hypotheses for "
                             f"{len(references)} references.")
    named = [("baseline", list(baseline))] + [(name, list(h)) for name, h in systems.items()]
    test = PairedTest(named, {"bleu": BLEU(), "chrf": CHRF()}, [list(references)],
                      test_type="bs", n_samples=n_samples)
    _, scores = test()
    metric_keys = [key for key in scores if key != "System"]
    result = {}
    for index, name in enumerate(scores["System"]):
        row = {}
        for key, metric in zip(metric_keys, ("bleu", "chrf")):
            score = scores[key][index]
            row[metric] = float(score.score)
            row[f"{metric}_p_value"] = None if score.p_value is None else float(score.p_value)
            row[f"{metric}_ci"] = float(score.ci)
        result[name] = row
    return result


def mean_and_std(values):
    """`(mean, sample standard deviation)`; the deviation is None for one value."""
    values = [float(value) for value in values]
    if not values:
        raise ValueError("mean_and_std needs at least one value.")
    spread = statistics.stdev(values) if len(values) > 1 else None
    return statistics.fmean(values), spread


def compare_verdict(differences, p_values, alpha=ALPHA, margin=0.0):
    """The verdict on "system >= baseline - margin" from paired seeds.

    Args:
        differences: per seed, system score minus baseline score.
        p_values: per seed, the paired bootstrap p-value of that difference.
        margin: how far below the baseline still counts as "competitive"
            (0: the claim is "at least as good").

    Returns:
        "confirmed" when most seeds are significantly better, or (with a
        margin) no seed is significantly worse and the mean difference is
        within the margin; "not confirmed" when most seeds are significantly
        worse by more than the margin; else "inconclusive at this scale".
    """
    if len(differences) != len(p_values) or not differences:
        raise ValueError("compare_verdict needs one p-value per difference.")
    majority = len(differences) // 2 + 1
    better = sum(d > 0 and p < alpha for d, p in zip(differences, p_values))
    worse = sum(d < -margin and p < alpha for d, p in zip(differences, p_values))
    significantly_worse = sum(d < 0 and p < alpha for d, p in zip(differences, p_values))
    mean = statistics.fmean(differences)
    if better >= majority:
        return CONFIRMED
    if margin > 0 and mean >= -margin and significantly_worse < majority and worse == 0:
        return CONFIRMED
    if worse >= majority:
        return NOT_CONFIRMED
    return INCONCLUSIVE


def ratio_verdict(ratios, claimed, tolerance=0.1):
    """Verdict on a claimed speed ratio (e.g. 1.236x) from measured ratios.

    "confirmed" when the mean ratio reaches `claimed * (1 - tolerance)`,
    "not confirmed" when it stays at or below 1 (no speed-up), else inconclusive.
    """
    mean = statistics.fmean(float(r) for r in ratios)
    if math.isnan(mean):
        return INCONCLUSIVE
    if mean >= claimed * (1 - tolerance):
        return CONFIRMED
    if mean <= 1.0:
        return NOT_CONFIRMED
    return INCONCLUSIVE

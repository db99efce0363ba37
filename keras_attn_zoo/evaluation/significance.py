"""Comparing two models on the same test sentences: seeds, paired bootstrap, verdicts.

Three tests, each named for what it computes:

* `paired_bootstrap`: sacreBLEU's `PairedTest(test_type="bs")`, per seed. Both
  systems' outputs on the same sentences are resampled together 1,000 times
  (seed 12345). Its p-value is *two-sided on the absolute difference*: with
  `d = |score(system) - score(baseline)|` and `d*_k` the same on resample k,
  `p = (#{k: d*_k - mean(d*) > d} + 1) / (n + 1)`. It does not look at the
  sign, so a verdict reads the sign from the difference itself; and a small p
  can sit beside a percentile interval of the signed difference that
  contains 0 (the centred absolute differences are a different statistic).
* `bootstrap_difference`: Koehn's (2004) one-sided paired bootstrap of the
  *signed* difference, one seed: `delta = score(system) - score(baseline)`,
  its 95% percentile interval over the resamples, and
  `p = (#{k: delta*_k <= 0} + 1) / (n + 1)`, the evidence that the system is
  better (for "worse", swap the systems).
* `seed_sign_flip_test`: training variance. The per-seed differences of two
  models trained with the same seeds, tested with the exact one-sided
  sign-flip permutation test of their mean (under the null each difference is
  as likely positive as negative). With n seeds its smallest p is `1 / 2^n`:
  3 seeds can never reach 0.05 (0.125), 5 seeds can (0.031).

Several claims tested together are corrected with `holm_bonferroni`.
The majority verdict over seeds (`compare_verdict`) is kept for the
leaderboard's per-seed reports.
"""

import itertools
import math
import statistics

import numpy as np

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


# ---- the signed difference, training variance, many claims -----------------------------------


def _sentence_statistics(metric, hypotheses, references):
    """Per-sentence sufficient statistics of a sacreBLEU metric, `[N, K]` float64."""
    return np.array(metric._extract_corpus_statistics(list(hypotheses), [list(references)]),
                    dtype=np.float64)


def bootstrap_difference(baseline, system, references, metric="bleu", n_samples=1000,
                         seed=12345):
    """Koehn's paired bootstrap of `score(system) - score(baseline)` on one seed.

    Args:
        baseline: the baseline's hypotheses, aligned with `references`.
        system: the compared system's hypotheses, aligned with `references`.
        metric: "bleu" or "chrf" (sacreBLEU's defaults, as `scores.corpus_scores`).
        n_samples: resamples of the sentences (both systems resampled together).
        seed: the resampling's seed (sacreBLEU's default, 12345).

    Returns:
        `{"delta", "interval": (low, high), "p_better"}`: the observed
        difference, its 95% percentile interval over the resamples, and the
        one-sided p-value of "the system is better", `(#{delta* <= 0} + 1) / (n + 1)`.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.metrics import CHRF

    if not len(baseline) == len(system) == len(references):
        raise ValueError(f"{len(baseline)} baseline and {len(system)} system hypotheses "
                         f"for {len(references)} references.")
    scorer = {"bleu": BLEU, "chrf": CHRF}[metric]()
    ours = _sentence_statistics(scorer, system, references)
    theirs = _sentence_statistics(scorer, baseline, references)

    def score(statistics_sum):
        return scorer._compute_score_from_stats(list(statistics_sum)).score

    delta = score(ours.sum(0)) - score(theirs.sum(0))
    rows = np.random.default_rng(seed).integers(0, len(references),
                                                (n_samples, len(references)))
    deltas = np.array([score(ours[r].sum(0)) - score(theirs[r].sum(0)) for r in rows])
    low, high = np.percentile(deltas, [2.5, 97.5])
    p_better = (np.sum(deltas <= 0) + 1) / (n_samples + 1)
    return {"delta": float(delta), "interval": (float(low), float(high)),
            "p_better": float(p_better)}


def seed_sign_flip_test(differences):
    """Exact one-sided p-value that the mean of per-seed `differences` is above 0.

    The differences are of two models trained with the same seeds (system
    minus baseline). Under the null hypothesis each difference is as likely
    to have either sign; the p-value is the share of the `2^n` sign
    assignments whose mean is at least the observed one (the observed
    assignment included, so it is never 0).
    """
    values = np.asarray([float(d) for d in differences])
    if values.size == 0:
        raise ValueError("seed_sign_flip_test needs at least one difference.")
    if values.size > 20:
        raise ValueError(f"{values.size} seeds: 2^n sign flips is too many; use fewer.")
    observed = values.mean()
    flips = np.array(list(itertools.product((1.0, -1.0), repeat=values.size)))
    means = (flips * np.abs(values)).mean(axis=1)
    return float(np.mean(means >= observed - 1e-12))


def holm_bonferroni(p_values):
    """Holm's step-down adjusted p-values, in the input's order.

    Rejecting every hypothesis whose adjusted p-value is below alpha keeps the
    family-wise error rate at alpha over all of them (Holm, 1979).
    """
    p = [float(value) for value in p_values]
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [0.0] * len(p), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return adjusted

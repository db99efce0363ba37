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

* `seed_t_test`: training variance, the test the verdicts use. The one-sided
  paired t-test over seeds of the per-seed differences (system minus
  baseline, both trained with the same seed): `t = (mean(d) + margin) /
  (sd(d) / sqrt(n))` on `n - 1` degrees of freedom, one p-value for "the
  mean difference is above -margin" and one for "below". Unlike the
  sign-flip test it can decide on 3 seeds that agree closely; it assumes the
  seed-to-seed spread is roughly normal.

How a BLEU verdict against a baseline is reached (`paired_seed_verdict`, the
leaderboard's table and claims): each seed counts for the claim when its
difference points the claim's way and its per-seed bootstrap p-value,
Holm-adjusted over all the per-seed tests of the table, is below `ALPHA`;
against when it points the other way with the same significance; else
neither. The majority of seeds decides, and a decided verdict also needs the
seed-level t-test in its direction, Holm-adjusted over the verdicts decided
together (`holm_gate`), below `ALPHA`. A verdict on which the seeds split
(not every seed counted its way) needs `MIN_SEEDS_SPLIT` (5) seeds. (The
tables before issue 33 took the majority of significant seeds alone, without
Holm or a seed-level test.)
"""

import itertools
import math
import statistics

import numpy as np

ALPHA = 0.05
CONFIRMED = "confirmed"
NOT_CONFIRMED = "not confirmed"
INCONCLUSIVE = "inconclusive at this scale"
# A claim whose models stopped at the training cap before converging: the
# claims are about trained models, so nothing was tested (issue 33).
UNTESTED = "untested: not converged"
# Seeds a verdict needs when its seeds split (some seed did not count its way).
MIN_SEEDS_SPLIT = 5


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


def seed_t_test(differences, margin=0.0):
    """`(p_above, p_below)`: one-sided paired t-tests over seeds of `mean(differences)`
    against `-margin` (above: the system is at least `margin` below the baseline
    at worst; margin 0: better). Differences are system minus baseline, one per
    seed, the two models trained with the same seeds. One seed (no spread): both
    None. Identical differences (no spread): 0 or 1 by their sign, 1 for both
    at exactly `-margin`."""
    from scipy import stats

    values = np.asarray([float(d) for d in differences], dtype=np.float64) + margin
    if values.size < 2:
        return None, None
    if np.allclose(values, values[0], rtol=0.0, atol=1e-12):
        shift = float(values[0])
        return (0.0 if shift > 0 else 1.0), (0.0 if shift < 0 else 1.0)
    above = stats.ttest_1samp(values, 0.0, alternative="greater").pvalue
    below = stats.ttest_1samp(values, 0.0, alternative="less").pvalue
    return float(above), float(below)


def paired_seed_verdict(differences, p_values, direction=1, margin=0.0, alpha=ALPHA):
    """The per-seed half of a BLEU verdict: outcomes, majority and the seed-level test.

    Args:
        differences: per seed, system minus baseline.
        p_values: per seed, the bootstrap p-value of that difference (already
            Holm-adjusted over the table's per-seed tests where it is one of many).
        direction: 1 for the claim "system better" (or, with `margin`, "at
            most `margin` below"), -1 for "system below the baseline".
        margin: "competitive": a seed counts against only when it is
            significantly below by more than `margin`.

    Returns:
        `{"verdict", "outcomes", "p_for", "p_against", "split"}`: the majority
        verdict over the seeds' outcomes (True for, False against, None
        neither), the seed-level t-test p-values for and against the claim,
        and whether the seeds split. `holm_gate` then adds the seed test's
        condition and the seed count of a split.
    """
    if len(differences) != len(p_values) or not differences:
        raise ValueError("paired_seed_verdict needs one p-value per difference.")
    claimed = [direction * float(d) for d in differences]
    outcomes = []
    for value, p in zip(claimed, p_values):
        significant = p is not None and p < alpha
        if value < -margin and significant:
            outcomes.append(False)
        elif (value > 0 and significant) or (margin > 0 and value >= -margin
                                              and not (value < 0 and significant)):
            outcomes.append(True)
        else:
            outcomes.append(None)
    majority = len(outcomes) // 2 + 1
    verdict = (CONFIRMED if sum(o is True for o in outcomes) >= majority else
               NOT_CONFIRMED if sum(o is False for o in outcomes) >= majority else INCONCLUSIVE)
    p_for, p_against = seed_t_test(claimed, margin)
    wanted = {CONFIRMED: True, NOT_CONFIRMED: False}.get(verdict)
    split = wanted is not None and any(o is not wanted for o in outcomes)
    return {"verdict": verdict, "outcomes": outcomes, "p_for": p_for,
            "p_against": p_against, "split": split}


def holm_gate(decisions, alpha=ALPHA):
    """Applies the seed-level conditions to several verdicts decided together.

    `decisions`: dicts with "verdict", "p_for", "p_against", "split" and
    "seeds" (as `paired_seed_verdict` gives, plus the seed count). The p-value
    of each one's direction (for a confirmed verdict "p_for", a not confirmed
    one "p_against", an undecided one the smaller) is Holm-adjusted over all of
    them. A decided verdict stays only when its adjusted p is below `alpha`
    and, where its seeds split, it rests on `MIN_SEEDS_SPLIT` seeds.

    Returns:
        Per decision `{"verdict", "provisional", "seed_p", "seed_p_holm",
        "reason"}`: `provisional` is the verdict a decision had before it was
        made inconclusive (None when it stands), `reason` says why.
    """
    chosen = []
    for decision in decisions:
        verdict, p_for, p_against = (decision["verdict"], decision["p_for"],
                                     decision["p_against"])
        p = (p_for if verdict == CONFIRMED else p_against if verdict == NOT_CONFIRMED
             else min((v for v in (p_for, p_against) if v is not None), default=None))
        chosen.append(p)
    tested = [k for k, p in enumerate(chosen) if p is not None]
    adjusted = dict(zip(tested, holm_bonferroni([chosen[k] for k in tested])))
    results = []
    for k, decision in enumerate(decisions):
        verdict, reason = decision["verdict"], None
        p, p_holm = chosen[k], adjusted.get(k)
        if verdict in (CONFIRMED, NOT_CONFIRMED):
            if p_holm is None:
                reason = "one seed: no seed-level test"
            elif p_holm >= alpha:
                reason = (f"the seed-level test (one-sided paired t over "
                          f"{decision['seeds']} seeds, p {p:.3f}, Holm-adjusted over "
                          f"{len(tested)} verdicts {p_holm:.3f}) is not below {alpha}")
            elif decision["split"] and decision["seeds"] < MIN_SEEDS_SPLIT:
                reason = (f"its seeds split: {decision['seeds']} of the {MIN_SEEDS_SPLIT} "
                          f"seeds such a verdict needs")
        results.append({"verdict": INCONCLUSIVE if reason else verdict,
                        "provisional": verdict if reason else None,
                        "seed_p": p, "seed_p_holm": p_holm, "reason": reason})
    return results


def holm_adjusted_bootstrap(cells, key="versus_transformer"):
    """Copies of `cells` whose `key` entry gains ``"bleu_p_holm"``: the per-seed
    bootstrap p-values Holm-adjusted over every such test among the cells."""
    cells = [dict(cell) for cell in cells]
    tested = [cell for cell in cells
              if (cell.get(key) or {}).get("bleu_p_value") is not None]
    adjusted = holm_bonferroni([cell[key]["bleu_p_value"] for cell in tested])
    for cell, p in zip(tested, adjusted):
        cell[key] = {**cell[key], "bleu_p_holm": p}
    return cells


def longest_share(lengths, share=0.1):
    """Indices of the longest `share` of the sentences by `lengths`: every sentence
    at least as long as the `ceil(share * n)`-th longest (ties kept together, so
    the set may hold a few more). Returns `(indices, shortest length in it)`."""
    lengths = [int(length) for length in lengths]
    if not lengths or not 0 < share <= 1:
        raise ValueError(f"longest_share needs sentences and 0 < share <= 1, got "
                         f"{len(lengths)} and {share}.")
    count = math.ceil(share * len(lengths))
    threshold = sorted(lengths, reverse=True)[count - 1]
    return [k for k, length in enumerate(lengths) if length >= threshold], threshold


def subset_comparison(baseline, system, references, indices, n_samples=1000, seed=12345):
    """BLEU of both systems on the sentences `indices` and the signed paired bootstrap
    (`bootstrap_difference`) each way: ``{"sentences", "bleu", "baseline_bleu",
    "bleu_difference", "interval", "p_better", "p_worse"}``."""
    pick = [list(baseline[k] for k in indices), list(system[k] for k in indices),
            list(references[k] for k in indices)]
    better = bootstrap_difference(*pick, n_samples=n_samples, seed=seed)
    worse = bootstrap_difference(pick[1], pick[0], pick[2], n_samples=n_samples, seed=seed)
    from sacrebleu.metrics import BLEU

    return {"sentences": len(indices),
            "bleu": round(BLEU().corpus_score(pick[1], [pick[2]]).score, 2),
            "baseline_bleu": round(BLEU().corpus_score(pick[0], [pick[2]]).score, 2),
            "bleu_difference": round(better["delta"], 2),
            "interval": [round(v, 2) for v in better["interval"]],
            "p_better": better["p_better"], "p_worse": worse["p_better"]}

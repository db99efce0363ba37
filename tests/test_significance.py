"""Seeds, paired bootstrap and verdicts of the leaderboard's claims."""

import numpy as np
import pytest

from keras_attn_zoo.evaluation.significance import CONFIRMED
from keras_attn_zoo.evaluation.significance import INCONCLUSIVE
from keras_attn_zoo.evaluation.significance import NOT_CONFIRMED
from keras_attn_zoo.evaluation.significance import paired_seed_verdict
from keras_attn_zoo.evaluation.significance import mean_and_std
from keras_attn_zoo.evaluation.significance import paired_bootstrap
from keras_attn_zoo.evaluation.significance import ratio_verdict

REFERENCES = ["the cat sat on the mat", "a dog runs in the park", "hello world",
              "this is a test", "we go home now", "the house is red"] * 15


def test_paired_bootstrap_finds_a_clearly_better_system_and_not_an_identical_one():
    worse = [" ".join(r.split()[:-1]) for r in REFERENCES]
    result = paired_bootstrap(worse, {"perfect": REFERENCES, "same": worse}, REFERENCES,
                              n_samples=200)
    assert result["baseline"]["bleu_p_value"] is None
    assert result["perfect"]["bleu"] == pytest.approx(100.0)
    assert result["perfect"]["bleu_p_value"] < 0.05
    assert result["perfect"]["chrf"] > result["baseline"]["chrf"]
    # An identical system has no difference, so no verdict can call it better.
    same = result["same"]["bleu"] - result["baseline"]["bleu"]
    assert same == pytest.approx(0.0)
    assert paired_seed_verdict([same], [result["same"]["bleu_p_value"]])[
        "verdict"] == INCONCLUSIVE
    with pytest.raises(ValueError, match="has 2 hypotheses for 90 references"):
        paired_bootstrap(worse, {"short": ["a", "b"]}, REFERENCES)


def test_mean_and_std_over_seeds():
    assert mean_and_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert mean_and_std([4.0]) == (4.0, None)


def test_verdicts_follow_the_majority_of_significant_seeds():
    def verdict(*arguments, **options):
        return paired_seed_verdict(*arguments, **options)["verdict"]

    assert verdict([1.0, 0.8, 0.9], [0.01, 0.02, 0.2]) == CONFIRMED
    assert verdict([-1.0, -0.8, 0.1], [0.01, 0.01, 0.6]) == NOT_CONFIRMED
    assert verdict([0.3, -0.2, 0.1], [0.3, 0.4, 0.5]) == INCONCLUSIVE
    # "Below the baseline" (direction -1): the same seeds, the other claim.
    assert verdict([-1.0, -0.8, 0.1], [0.01, 0.01, 0.6], direction=-1) == CONFIRMED
    # "Competitive": within the margin and never significantly worse by more.
    assert verdict([-0.2, -0.1, 0.05], [0.3, 0.4, 0.5], margin=0.5) == CONFIRMED
    assert verdict([-2.0, -1.5, -1.8], [0.01, 0.01, 0.01], margin=0.5) == NOT_CONFIRMED
    assert ratio_verdict([1.20, 1.25], claimed=1.236) == CONFIRMED
    assert ratio_verdict([0.97, 1.0], claimed=1.236) == NOT_CONFIRMED
    assert ratio_verdict([1.05, 1.08], claimed=1.236) == INCONCLUSIVE


# ---- the signed difference, seeds, many claims: on constructed systems -------------------


def degraded(references, rate, generator):
    """Each word of each reference dropped with probability `rate`."""
    return [" ".join(w for w in r.split() if generator.random() >= rate) for r in references]


def test_an_identical_system_is_never_better_at_any_level():
    from keras_attn_zoo.evaluation.significance import bootstrap_difference
    from keras_attn_zoo.evaluation.significance import seed_sign_flip_test

    worse = [" ".join(r.split()[:-1]) for r in REFERENCES]
    same = bootstrap_difference(worse, list(worse), REFERENCES, n_samples=200)
    assert same["delta"] == 0.0 and same["interval"] == (0.0, 0.0)
    assert same["p_better"] == 1.0
    assert seed_sign_flip_test([0.0, 0.0, 0.0, 0.0, 0.0]) == 1.0


def test_the_bootstrap_keeps_its_level_and_finds_a_known_margin_at_the_stated_power(
        tiny_parallel_corpus):
    """20 constructed comparisons each: two systems that drop words at the same
    rate (the null: at most 10% called better at alpha 0.05, about 5% expected)
    and a system that drops 15% of the words against one that drops 30% (a
    margin of about 20 BLEU on 120 sentences: found at least 80% of the time)."""
    from keras_attn_zoo.evaluation.significance import bootstrap_difference

    references = [t for _, t in tiny_parallel_corpus[:120]]
    found = {"null": 0, "margin": 0}
    for draw in range(20):
        generator = np.random.default_rng(draw)
        baseline = degraded(references, 0.3, generator)
        for case, rate in (("null", 0.3), ("margin", 0.15)):
            result = bootstrap_difference(baseline, degraded(references, rate, generator),
                                          references, n_samples=300, seed=draw)
            low, high = result["interval"]
            assert low <= result["delta"] <= high
            found[case] += result["p_better"] < 0.05
    assert found["null"] <= 2
    assert found["margin"] >= 16


def test_the_seed_test_needs_five_seeds_to_decide_and_holm_corrects_many_claims():
    from keras_attn_zoo.evaluation.significance import holm_bonferroni
    from keras_attn_zoo.evaluation.significance import seed_sign_flip_test

    # Three seeds, all better: the exact test cannot go below 1/8.
    assert seed_sign_flip_test([0.5, 0.7, 0.4]) == pytest.approx(1 / 8)
    # Five: 1/32 when all are better; one seed worse by more than the others'
    # gains makes it 1 - (sign patterns at least as good) / 32.
    assert seed_sign_flip_test([0.5, 0.7, 0.4, 0.6, 0.3]) == pytest.approx(1 / 32)
    assert seed_sign_flip_test([0.5, 0.7, 0.4, 0.6, -0.3]) == pytest.approx(2 / 32)
    assert seed_sign_flip_test([-0.5, -0.7, -0.4, -0.6, -0.3]) == 1.0
    # Holm: sorted p-values times (m - rank), made monotone; the order is kept.
    assert holm_bonferroni([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm_bonferroni([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="at least one"):
        seed_sign_flip_test([])


def test_the_seed_level_t_test_keeps_its_level_and_finds_a_known_margin():
    """40 constructed tables of 5 seeds each: per-seed differences drawn around 0
    (the null: at most 4 of 40 called better at alpha 0.05, about 2 expected), and
    around +1.0 BLEU with a seed spread of 0.5 (found at least 36 of 40 times;
    the t-test's power there is about 0.97)."""
    from keras_attn_zoo.evaluation.significance import paired_seed_verdict
    from keras_attn_zoo.evaluation.significance import seed_t_test

    generator = np.random.default_rng(7)
    called = {"null": 0, "margin": 0}
    for _ in range(40):
        for case, mean in (("null", 0.0), ("margin", 1.0)):
            p_for, p_against = seed_t_test(generator.normal(mean, 0.5, size=5))
            assert p_for + p_against == pytest.approx(1.0)
            called[case] += p_for < 0.05
    assert called["null"] <= 4 and called["margin"] >= 36
    # An identical system: no spread, no difference; never better, never worse.
    assert seed_t_test([0.0] * 5) == (1.0, 1.0)
    same = paired_seed_verdict([0.0] * 5, [1.0] * 5)
    assert same["verdict"] == INCONCLUSIVE and same["outcomes"] == [None] * 5
    assert seed_t_test([0.4]) == (None, None)  # one seed: no seed-level test


def test_holm_gate_withholds_verdicts_the_seed_test_or_a_split_does_not_carry():
    from keras_attn_zoo.evaluation.significance import holm_gate

    def decision(verdict, p_for, split=False, seeds=3):
        return {"verdict": verdict, "p_for": p_for, "p_against": 1 - p_for,
                "split": split, "seeds": seeds}

    results = holm_gate([decision(CONFIRMED, 0.01), decision(CONFIRMED, 0.03),
                         decision(CONFIRMED, 0.001, split=True),
                         decision(CONFIRMED, 0.001, split=True, seeds=5)])
    # Holm over 4: 0.01 x 2 = 0.02 stays; 0.03 x 1 but monotone: max(0.02, 0.03) = 0.03.
    assert [r["verdict"] for r in results] == [CONFIRMED, CONFIRMED, INCONCLUSIVE, CONFIRMED]
    assert results[2]["provisional"] == CONFIRMED and "split" in results[2]["reason"]
    assert results[0]["seed_p_holm"] == pytest.approx(0.02)
    alone = holm_gate([decision(CONFIRMED, 0.03)] + [decision(INCONCLUSIVE, 0.5)] * 3)
    assert alone[0]["verdict"] == INCONCLUSIVE  # 0.03 x 4 = 0.12
    assert "Holm-adjusted over 4 verdicts 0.120" in alone[0]["reason"]

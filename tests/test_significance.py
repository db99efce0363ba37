"""Seeds, paired bootstrap and verdicts of the leaderboard's claims."""

import pytest

from keras_attn_zoo.evaluation.significance import CONFIRMED
from keras_attn_zoo.evaluation.significance import INCONCLUSIVE
from keras_attn_zoo.evaluation.significance import NOT_CONFIRMED
from keras_attn_zoo.evaluation.significance import compare_verdict
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
    assert compare_verdict([same], [result["same"]["bleu_p_value"]]) == INCONCLUSIVE
    with pytest.raises(ValueError, match="has 2 hypotheses for 90 references"):
        paired_bootstrap(worse, {"short": ["a", "b"]}, REFERENCES)


def test_mean_and_std_over_seeds():
    assert mean_and_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert mean_and_std([4.0]) == (4.0, None)


def test_verdicts_follow_the_majority_of_significant_seeds():
    assert compare_verdict([1.0, 0.8, 0.9], [0.01, 0.02, 0.2]) == CONFIRMED
    assert compare_verdict([-1.0, -0.8, 0.1], [0.01, 0.01, 0.6]) == NOT_CONFIRMED
    assert compare_verdict([0.3, -0.2, 0.1], [0.3, 0.4, 0.5]) == INCONCLUSIVE
    # "Competitive": within the margin and never significantly worse by more.
    assert compare_verdict([-0.2, -0.1, 0.05], [0.3, 0.4, 0.5], margin=0.5) == CONFIRMED
    assert compare_verdict([-2.0, -1.5, -1.8], [0.01, 0.01, 0.01], margin=0.5) == NOT_CONFIRMED
    assert ratio_verdict([1.20, 1.25], claimed=1.236) == CONFIRMED
    assert ratio_verdict([0.97, 1.0], claimed=1.236) == NOT_CONFIRMED
    assert ratio_verdict([1.05, 1.08], claimed=1.236) == INCONCLUSIVE

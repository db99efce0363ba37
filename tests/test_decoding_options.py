"""n-gram blocking, sampling and forced-decoding scores over the step protocol."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.decoding import (
    EOS_ID,
    NEG_INF,
    beam_search,
    greedy_search,
    no_repeat_ngram_processor,
    sample_search,
    score_targets,
)
from keras_attn_zoo.decoding.greedy import filter_top_k_top_p
from tests.test_decoding import A, B, C, BigramModel, RandomTableModel, SOURCES, padded
from tests.test_decoding import hypotheses

# After A the model almost always repeats A: "A A A A ..." until the limit.
STUTTER = {
    2: {A: 0.9, B: 0.1},
    A: {A: 0.9, B: 0.05, EOS_ID: 0.05},
    B: {A: 0.5, B: 0.3, C: 0.1, EOS_ID: 0.1},
    C: {A: 0.4, B: 0.3, C: 0.2, EOS_ID: 0.1},
}


def ngrams(tokens, n):
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


# ---- n-gram blocking --------------------------------------------------------------


def test_processor_bans_exactly_the_followers_of_the_repeated_prefix():
    # Emitted so far: A B C A B (step 5 chooses the 6th token); n = 3: the
    # prefix "A B" occurred before, followed by C, so C is banned, nothing else.
    tokens = tf.constant([[A, B, C, A, B, 0, 0]], tf.int32)
    log_probs = tf.zeros([1, 8])
    out = no_repeat_ngram_processor(3)(log_probs, tf.constant(5), tokens, None).numpy()
    assert out[0, C] == NEG_INF and (np.delete(out[0], C) == 0).all()
    # n = 1: every token emitted so far is banned.
    out = no_repeat_ngram_processor(1)(log_probs, tf.constant(5), tokens, None).numpy()
    assert sorted(np.flatnonzero(out[0] == NEG_INF)) == [A, B, C]
    # n = 0 is off; too early for a complete n-gram: nothing banned.
    assert (no_repeat_ngram_processor(0)(log_probs, tf.constant(5), tokens, None).numpy() == 0).all()
    assert (no_repeat_ngram_processor(3)(log_probs, tf.constant(2), tokens, None).numpy() == 0).all()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_searches_never_repeat_an_ngram_of_a_model_forced_to_repeat(n):
    model = BigramModel(STUTTER)
    source = padded([[4] * 12 + [EOS_ID]])
    unblocked = greedy_search(model, source, max_length_a=1.0, max_length_b=0)
    stutter = unblocked["ids"].numpy()[0, 0].tolist()
    assert stutter[:4] == [A, A, A, A]  # without blocking the model loops
    for result in (
        greedy_search(model, source, max_length_a=1.0, max_length_b=0, no_repeat_ngram_size=n),
        beam_search(model, source, beam_size=3, num_return=3, max_length_a=1.0, max_length_b=0,
                    no_repeat_ngram_size=n),
    ):
        for sentence in hypotheses(result):
            for tokens, score in sentence:
                if score > NEG_INF / 2:
                    grams = ngrams(list(tokens), n)
                    assert len(grams) == len(set(grams)), (n, tokens)


def test_blocking_size_can_be_a_tensor_of_a_traced_search():
    model = RandomTableModel(seed=5)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def search(source, n):
        return beam_search(model, source, beam_size=2, max_length_a=2.0, max_length_b=4,
                           no_repeat_ngram_size=n)

    source = padded(SOURCES)
    plain = beam_search(model, source, beam_size=2, max_length_a=2.0, max_length_b=4)
    np.testing.assert_array_equal(search(source, tf.constant(0))["ids"].numpy(),
                                  plain["ids"].numpy())
    for sentence in hypotheses(search(source, tf.constant(2))):
        grams = ngrams(list(sentence[0][0]), 2)
        assert len(grams) == len(set(grams))


# ---- sampling ---------------------------------------------------------------------


def test_top_k_and_top_p_filters():
    logits = tf.math.log(tf.constant([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda k, p: (filter_top_k_top_p(logits, tf.constant(k), tf.constant(p)).numpy()
                         > NEG_INF / 2)[0].tolist()
    assert kept(0, 1.0) == [True, True, True, True]
    assert kept(2, 1.0) == [True, True, False, False]
    assert kept(0, 0.5) == [True, False, False, False]  # 0.5 reached by the first
    assert kept(0, 0.6) == [True, True, False, False]
    assert kept(0, 1e-6) == [True, False, False, False]  # the best always stays
    assert kept(3, 0.6) == [True, True, False, False]


def test_sampling_is_reproducible_and_varies_with_the_seed():
    model = RandomTableModel(seed=2)
    source = padded(SOURCES)
    runs = [sample_search(model, source, seed=seed, max_length_a=1.0, max_length_b=4)
            for seed in (7, 7, 8, 9, 10)]
    np.testing.assert_array_equal(runs[0]["ids"].numpy(), runs[1]["ids"].numpy())
    np.testing.assert_allclose(runs[0]["scores"].numpy(), runs[1]["scores"].numpy())
    outputs = {tuple(map(tuple, np.asarray(hypotheses(run), dtype=object)[:, 0, 0]))
               for run in runs}
    assert len(outputs) > 1  # fixed seeds, so this is deterministic


def test_sampling_from_one_token_is_greedy():
    model = RandomTableModel(seed=3)
    source = padded(SOURCES)
    greedy = greedy_search(model, source, max_length_a=1.0, max_length_b=4)
    for options in (dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)):
        sampled = sample_search(model, source, seed=1, max_length_a=1.0, max_length_b=4,
                                **options)
        np.testing.assert_array_equal(sampled["ids"].numpy(), greedy["ids"].numpy())
        np.testing.assert_allclose(sampled["scores"].numpy(), greedy["scores"].numpy(),
                                   atol=1e-5)


def test_bad_sampling_options_are_named():
    model = RandomTableModel(seed=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="temperature"):
        sample_search(model, padded(SOURCES), temperature=0.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="top_p"):
        sample_search(model, padded(SOURCES), top_p=1.5)


# ---- scoring ----------------------------------------------------------------------


def check_scores_of_beam_search(model, source, num_return):
    """Every returned hypothesis, rescored, has the score the search reported
    (length penalty 0, so the reported score is the sum of log-probs)."""
    result = beam_search(model, source, beam_size=num_return + 1, num_return=num_return,
                         length_penalty=0.0, max_length_a=1.0, max_length_b=4)
    for n in range(num_return):
        scored = score_targets(model, source, result["ids"][:, n])
        np.testing.assert_allclose(scored["total"].numpy(), result["scores"].numpy()[:, n],
                                   atol=1e-4)
        np.testing.assert_array_equal(scored["lengths"].numpy(), result["lengths"].numpy()[:, n])


def test_score_of_the_searchs_own_output_is_the_score_it_reported():
    model = RandomTableModel(seed=7, eos_shift=0.5)
    source = padded(SOURCES)
    check_scores_of_beam_search(model, source, num_return=3)
    greedy = greedy_search(model, source, max_length_a=1.0, max_length_b=4)
    np.testing.assert_allclose(score_targets(model, source, greedy["ids"][:, 0])["total"].numpy(),
                               greedy["scores"].numpy()[:, 0], atol=1e-4)


def test_token_scores_are_the_models_log_probs_and_stop_after_eos():
    model = BigramModel(STUTTER)
    source = padded([[4, EOS_ID], [4, 5, EOS_ID]])
    scored = score_targets(model, source, tf.constant([[A, B, C], [A, 0, 0]]))
    expected = np.log([[0.9, 0.05, 0.1, 0.1], [0.9, 0.05, 1.0, 1.0]])
    expected[1, 2:] = 0.0
    np.testing.assert_allclose(scored["token_log_probs"].numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(scored["total"].numpy(), expected.sum(1), atol=1e-5)


def test_score_of_a_zoo_model_matches_its_beam_search():
    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.training.seeding import seed_everything

    seed_everything(0)
    model = transformer(40, preset="tiny")
    source = tf.constant([[5, 9, 11, 3, 0], [7, 8, 3, 0, 0]], tf.int32)
    check_scores_of_beam_search(model, source, num_return=2)


def test_the_default_search_is_written_once():
    """Every translation the zoo makes by default searches with the one beam and
    length penalty of `decoding` (`DEFAULT_BEAM_SIZE`, `DEFAULT_LENGTH_PENALTY`)."""
    import inspect

    from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
    from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
    from keras_attn_zoo.decoding import beam_search
    from keras_attn_zoo.inference import Translator
    from keras_attn_zoo.training.callbacks import DevTranslationMonitor
    from keras_attn_zoo.training.callbacks import default_callbacks
    from keras_attn_zoo.training.callbacks import text_translator
    from keras_attn_zoo.training.early_stopping import EarlyStopping
    from keras_attn_zoo.workflow import RunConfig
    from tests.conftest import load_recipe

    for function in (beam_search, Translator.__init__, DevTranslationMonitor.__init__,
                     default_callbacks, text_translator, RunConfig):
        parameters = inspect.signature(function).parameters
        assert parameters["beam_size"].default == DEFAULT_BEAM_SIZE, function
        assert parameters["length_penalty"].default == DEFAULT_LENGTH_PENALTY, function
    # Early stopping searches greedily by default, with the same length penalty.
    stopping = inspect.signature(EarlyStopping.__init__).parameters
    assert stopping["length_penalty"].default == DEFAULT_LENGTH_PENALTY
    config = load_recipe("train_wmt").parse_args([])
    assert (config.beam_size, config.length_penalty) == (DEFAULT_BEAM_SIZE,
                                                          DEFAULT_LENGTH_PENALTY)

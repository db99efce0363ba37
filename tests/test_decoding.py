"""Tests for keras_attn_zoo.decoding with small hand-built step-protocol models.

The toy models below are complete implementations of the decoding protocol
(encode / initial_state / decode_step) whose probabilities are known, so
expected searches and scores can be worked out by hand.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.decoding import (
    BOS_ID,
    EOS_ID,
    NEG_INF,
    PAD_ID,
    beam_search,
    greedy_search,
    length_penalty,
    max_target_lengths,
)

A, B, C = 4, 5, 6  # word ids of the hand-written bigram models


def gnmt_penalty(num_tokens, alpha):
    return ((5.0 + num_tokens) / 6.0) ** alpha


class BigramModel(tf.Module):
    """Next-token distribution depends only on the previous token.

    ``transitions`` maps a previous token to ``{next_token: probability}``;
    tokens not listed get probability 0 (logit -inf).
    """

    max_decode_length = None  # the contract's hook the searches read: no limit

    def __init__(self, transitions, vocab_size=8):
        super().__init__()
        table = np.zeros((vocab_size, vocab_size), np.float32)
        for previous, row in transitions.items():
            for token, probability in row.items():
                table[previous, token] = probability
        with np.errstate(divide="ignore"):
            self.log_table = tf.constant(np.log(table), tf.float32)

    def encode(self, source_ids):
        return {"source_ids": source_ids}

    def initial_state(self, memory, max_length):
        return {"source_ids": memory["source_ids"]}

    def decode_step(self, token, step, state):
        return tf.gather(self.log_table, token), state


# Greedy takes A (0.6) and can then only end with p(EOS | A) = 0.4: 0.24.
# The best sequence is B EOS: 0.4 * 0.9 = 0.36.
TRAP = {
    BOS_ID: {A: 0.6, B: 0.4},
    A: {EOS_ID: 0.4, A: 0.3, B: 0.3},
    B: {EOS_ID: 0.9, A: 0.05, B: 0.05},
}

# Beam 2: after step 1, "B EOS" (0.36) is finished while "A C" (0.5225) and
# "B A" (0.045) go on; after step 2 "A C EOS" (0.496375) finishes and no
# alive hypothesis can beat 0.36 any more, so the search stops after 3 steps.
FROZEN = {
    BOS_ID: {A: 0.55, B: 0.45},
    A: {C: 0.95, EOS_ID: 0.05},
    B: {EOS_ID: 0.8, A: 0.1, C: 0.1},
    C: {EOS_ID: 0.95, C: 0.05},
}


class RandomTableModel(tf.Module):
    """Random but fixed logits that depend on the whole history and the source.

    logits = table[step, previous token] + history term (from the sum of the
    tokens in a fixed-size cache, so the cache must follow the beams) +
    source term (first source token and source length). The attention is
    one-hot at ``fed_token % source_length`` so alignments can be checked
    against the tokens; it never points at padding.
    """

    max_decode_length = None

    def __init__(self, seed=0, vocab_size=10, eos_shift=0.0, table_steps=64):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.vocab_size = vocab_size
        self.table_steps = table_steps
        self.step_table = tf.constant(
            1.5 * rng.normal(size=(table_steps, vocab_size, vocab_size)), tf.float32)
        self.history_table = tf.constant(rng.normal(size=(7, vocab_size)), tf.float32)
        self.source_table = tf.constant(rng.normal(size=(vocab_size, vocab_size)), tf.float32)
        self.eos_shift = tf.constant(
            np.eye(vocab_size)[EOS_ID] * eos_shift, tf.float32)

    def encode(self, source_ids):
        return {"source_ids": source_ids}

    def initial_state(self, memory, max_length):
        source_ids = memory["source_ids"]
        source_length = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)
        source_bias = (tf.gather(self.source_table, source_ids[:, 0] % self.vocab_size)
                       + 0.2 * tf.cast(source_length, tf.float32)[:, None])
        batch_size = tf.shape(source_ids)[0]
        return {
            "source_bias": source_bias,
            "source_length": source_length,
            "cache": tf.zeros([batch_size, max_length], tf.int32),
            "attention": tf.zeros(tf.shape(source_ids), tf.float32),
        }

    def decode_step(self, token, step, state):
        cache = state["cache"]
        cache = cache + tf.one_hot(step, tf.shape(cache)[1], dtype=tf.int32)[None] * token[:, None]
        history = tf.reduce_sum(cache, axis=1) % 7
        logits = (tf.gather(self.step_table[tf.minimum(step, self.table_steps - 1)], token)
                  + tf.gather(self.history_table, history)
                  + state["source_bias"] + self.eos_shift)
        attention = tf.one_hot(token % state["source_length"],
                               tf.shape(state["attention"])[1], dtype=tf.float32)
        new_state = dict(state, cache=cache, attention=attention)
        return logits, new_state


def padded(sentences):
    width = max(len(s) for s in sentences)
    return tf.constant([list(s) + [PAD_ID] * (width - len(s)) for s in sentences], tf.int32)


SOURCES = [[7, 4, 5, EOS_ID], [9, 8, 7, 6, 5, 4, 8, EOS_ID], [6, 5, EOS_ID]]


def hypotheses(result):
    """[[(tokens tuple, score), ...] per sentence] from a search result."""
    ids = result["ids"].numpy()
    lengths = result["lengths"].numpy()
    scores = result["scores"].numpy()
    return [[(tuple(ids[b, n, :lengths[b, n]]), float(scores[b, n]))
             for n in range(ids.shape[1])] for b in range(ids.shape[0])]


def test_length_penalty_and_max_lengths():
    assert length_penalty(2, 0.6).numpy() == pytest.approx(gnmt_penalty(2, 0.6))
    assert length_penalty(7, 0.0).numpy() == pytest.approx(1.0)
    source = padded([[5] * 5, [5] * 3])
    np.testing.assert_array_equal(max_target_lengths(source, 1.2, 0), [6, 4])
    np.testing.assert_array_equal(
        max_target_lengths(source, tf.constant(1.2), tf.constant(0.0)), [6, 4])
    np.testing.assert_array_equal(max_target_lengths(source, 2.0, 10), [20, 16])


def test_beam_finds_best_sequence_greedy_misses():
    model = BigramModel(TRAP)
    source = padded([[7, 7, EOS_ID]])

    greedy = greedy_search(model, source)
    assert hypotheses(greedy) == [[((A,), pytest.approx(math.log(0.24), abs=1e-5))]]
    assert greedy["ids"].shape == (1, 1, 1)

    beam = beam_search(model, source, beam_size=2, length_penalty=0.6)
    expected = math.log(0.4 * 0.9) / gnmt_penalty(2, 0.6)  # B + EOS = 2 tokens
    assert hypotheses(beam) == [[((B,), pytest.approx(expected, abs=1e-5))]]
    assert beam["ids"].dtype == tf.int32 and beam["scores"].dtype == tf.float32

    # Without length penalty both EOS hypotheses finish at step 1 and the
    # alive ones (A A, A B: 0.18) cannot beat 0.24, so the search stops there.
    # (With alpha = 0.6 the bound allows for a growing penalty: one more step.)
    beam = beam_search(model, source, beam_size=2, length_penalty=0.0, num_return=2)
    assert hypotheses(beam) == [[((B,), pytest.approx(math.log(0.36), abs=1e-5)),
                                 ((A,), pytest.approx(math.log(0.24), abs=1e-5))]]
    assert int(beam["steps"]) == 2


def test_finished_hypotheses_are_frozen_and_search_stops_early():
    model = BigramModel(FROZEN)
    source = padded([[7, 7, EOS_ID]])  # max length 2 * 3 + 10 = 16
    result = beam_search(model, source, beam_size=2, length_penalty=0.6, num_return=2)

    best = math.log(0.55 * 0.95 * 0.95) / gnmt_penalty(3, 0.6)
    # "B EOS" ended at step 1; the two later steps added nothing to it.
    frozen = math.log(0.45 * 0.8) / gnmt_penalty(2, 0.6)
    assert hypotheses(result) == [[((A, C), pytest.approx(best, abs=1e-5)),
                                   ((B,), pytest.approx(frozen, abs=1e-5))]]
    np.testing.assert_array_equal(result["ids"].numpy(), [[[A, C], [B, PAD_ID]]])
    np.testing.assert_array_equal(result["lengths"].numpy(), [[2, 1]])
    assert int(result["steps"]) == 3

    greedy = greedy_search(model, source)
    assert int(greedy["steps"]) == 3
    assert greedy["scores"].numpy()[0, 0] == pytest.approx(
        math.log(0.55 * 0.95 * 0.95), abs=1e-5)


def test_beam_size_one_equals_greedy():
    for seed in range(3):
        model = RandomTableModel(seed=seed)
        source = padded(SOURCES)
        greedy = greedy_search(model, source, max_length_a=1.0, max_length_b=4)
        beam = beam_search(model, source, beam_size=1, length_penalty=0.0,
                           max_length_a=1.0, max_length_b=4)
        np.testing.assert_array_equal(beam["ids"].numpy(), greedy["ids"].numpy())
        np.testing.assert_array_equal(beam["lengths"].numpy(), greedy["lengths"].numpy())
        np.testing.assert_allclose(beam["scores"].numpy(), greedy["scores"].numpy(), atol=1e-5)
        np.testing.assert_allclose(beam["alignment"].numpy(), greedy["alignment"].numpy(),
                                   atol=1e-6)


def test_beam_score_at_least_greedy_without_length_penalty():
    for seed in range(3):
        model = RandomTableModel(seed=seed)
        source = padded(SOURCES)
        greedy = greedy_search(model, source, max_length_a=1.0, max_length_b=4)
        beam = beam_search(model, source, beam_size=4, length_penalty=0.0,
                           max_length_a=1.0, max_length_b=4)
        assert np.all(beam["scores"].numpy() >= greedy["scores"].numpy() - 1e-5)


def test_max_length_is_per_sentence():
    # EOS is (almost) never chosen, so every sentence runs to its own limit.
    model = RandomTableModel(seed=1, eos_shift=-30.0)
    source = padded([[5, 6, EOS_ID], [5, 6, 7, 8, 9, 4, 5, EOS_ID]])
    expected_lengths = [[1 * 3 + 1], [1 * 8 + 1]]
    greedy = greedy_search(model, source, max_length_a=1, max_length_b=1)
    beam = beam_search(model, source, beam_size=3, max_length_a=1, max_length_b=1)
    for result in (greedy, beam):
        np.testing.assert_array_equal(result["lengths"].numpy(), expected_lengths)
        assert result["ids"].shape[2] == 9
        assert not np.any(result["ids"].numpy() == EOS_ID)
        assert int(result["steps"]) == 10  # 9 tokens + the forced EOS
    # The short sentence's forced EOS was at step 4; its tokens stop there.
    assert np.all(beam["ids"].numpy()[0, :, 4:] == PAD_ID)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_batch_translates_each_sentence_as_alone(search):
    model = RandomTableModel(seed=2, eos_shift=1.0)

    def run(source):
        if search == "greedy":
            return greedy_search(model, source, max_length_a=1.5, max_length_b=3)
        return beam_search(model, source, beam_size=3, num_return=2, length_penalty=0.6,
                           max_length_a=1.5, max_length_b=3)

    batch = run(padded(SOURCES))
    for index, sentence in enumerate(SOURCES):
        alone = run(padded([sentence]))
        assert hypotheses(batch)[index] == [
            (tokens, pytest.approx(score, abs=1e-5)) for tokens, score in hypotheses(alone)[0]]
        width = alone["ids"].shape[2]
        np.testing.assert_array_equal(batch["ids"].numpy()[index, :, :width],
                                      alone["ids"].numpy()[0])
        np.testing.assert_allclose(
            batch["alignment"].numpy()[index, :, :width, :len(sentence)],
            alone["alignment"].numpy()[0], atol=1e-6)


def test_n_best_are_distinct_and_sorted():
    model = RandomTableModel(seed=3)
    result = beam_search(model, padded(SOURCES), beam_size=4, num_return=3,
                         max_length_a=1.0, max_length_b=4)
    assert result["scores"].shape == (3, 3)
    for sentence in hypotheses(result):
        assert len({tokens for tokens, _ in sentence}) == 3
        scores = [score for _, score in sentence]
        assert scores == sorted(scores, reverse=True)
        assert scores[-1] > NEG_INF / 2


def rescore(model, source_ids, tokens, alpha):
    """Teacher-forced score of ``tokens`` + EOS for one sentence, length-penalised."""
    state = model.initial_state(model.encode(source_ids), tf.constant(len(tokens) + 1))
    total = 0.0
    for step, (fed, target) in enumerate(zip([BOS_ID] + list(tokens), list(tokens) + [EOS_ID])):
        logits, state = model.decode_step(tf.constant([fed]), tf.constant(step), state)
        total += float(tf.nn.log_softmax(logits)[0, target])
    return total / gnmt_penalty(len(tokens) + 1, alpha)


def test_scores_match_teacher_forced_rescoring():
    # The toy's logits depend on a cache of all fed tokens, so a state that
    # did not follow its beam would give scores the sequence does not have.
    model = RandomTableModel(seed=7, eos_shift=0.5)
    result = beam_search(model, padded(SOURCES), beam_size=4, num_return=3,
                         length_penalty=0.6, max_length_a=1.0, max_length_b=4)
    assert int(tf.reduce_max(result["lengths"])) >= 3
    for index, sentence in enumerate(hypotheses(result)):
        for tokens, score in sentence:
            assert score == pytest.approx(
                rescore(model, padded([SOURCES[index]]), tokens, 0.6), abs=1e-5)


def test_num_return_cannot_exceed_beam_size():
    with pytest.raises(ValueError):
        beam_search(RandomTableModel(), padded(SOURCES), beam_size=2, num_return=3)


def test_logits_processor_bans_a_token():
    model = RandomTableModel(seed=4)
    source = padded(SOURCES)
    kwargs = dict(max_length_a=1.0, max_length_b=4)
    plain = beam_search(model, source, beam_size=3, num_return=3, **kwargs)
    tokens, counts = np.unique(plain["ids"].numpy(), return_counts=True)
    counts[tokens == PAD_ID] = 0
    banned = int(tokens[np.argmax(counts)])  # the most used word
    seen_shapes = []

    def ban(log_probs, step, tokens_so_far, state):
        seen_shapes.append((tuple(log_probs.shape), tuple(tokens_so_far.shape), int(step)))
        column = tf.equal(tf.range(tf.shape(log_probs)[1]), banned)[None, :]
        return tf.where(column, -np.inf, log_probs)

    beam = beam_search(model, source, beam_size=3, num_return=3, logits_processor=ban, **kwargs)
    greedy = greedy_search(model, source, logits_processor=ban, **kwargs)
    for result in (beam, greedy):
        assert not np.any(result["ids"].numpy() == banned)
        assert np.all(np.isfinite(result["scores"].numpy()))
        assert np.all(result["scores"].numpy() > NEG_INF / 2)
    # Beam: rows are batch x beam; tokens_so_far holds the whole step buffer.
    num_steps = 1 * 8 + 4 + 1
    assert seen_shapes[0] == ((9, 10), (9, num_steps), 0)
    assert [step for _, _, step in seen_shapes[:3]] == [0, 1, 2]


def expected_alignment(ids, lengths, source_lengths, width):
    """One-hot of the fed token (BOS, then the previous output) mod source length."""
    batch, num_return, steps = ids.shape
    alignment = np.zeros((batch, num_return, steps, width), np.float32)
    for b in range(batch):
        for n in range(num_return):
            fed = [BOS_ID] + list(ids[b, n, :lengths[b, n]])
            for t in range(lengths[b, n]):
                alignment[b, n, t, fed[t] % source_lengths[b]] = 1.0
    return alignment


def test_alignment_follows_the_beams():
    model = RandomTableModel(seed=5)
    source = padded(SOURCES)
    source_lengths = [len(s) for s in SOURCES]
    result = beam_search(model, source, beam_size=3, num_return=3,
                         max_length_a=1.0, max_length_b=4)
    ids, lengths = result["ids"].numpy(), result["lengths"].numpy()
    assert result["alignment"].shape == ids.shape + (source.shape[1],)
    np.testing.assert_array_equal(
        result["alignment"].numpy(),
        expected_alignment(ids, lengths, source_lengths, source.shape[1]))

    greedy = greedy_search(model, source, max_length_a=1.0, max_length_b=4)
    np.testing.assert_array_equal(
        greedy["alignment"].numpy(),
        expected_alignment(greedy["ids"].numpy(), greedy["lengths"].numpy(),
                           source_lengths, source.shape[1]))


def test_no_alignment_without_attention_state():
    result = beam_search(BigramModel(TRAP), padded([[7, EOS_ID]]), beam_size=2)
    assert set(result) == {"ids", "lengths", "scores", "steps"}


def test_dynamic_shapes_and_beam_size_in_tf_function():
    model = RandomTableModel(seed=6)

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32),
        tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32),
        tf.TensorSpec([], tf.float32)])
    def translate(source_ids, beam_size, alpha, max_length_a, max_length_b):
        return beam_search(model, source_ids, beam_size=beam_size, length_penalty=alpha,
                           max_length_a=max_length_a, max_length_b=max_length_b,
                           num_return=2)

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def translate_greedy(source_ids):
        return greedy_search(model, source_ids, max_length_a=1.0, max_length_b=4)

    for sources, beam_size in ((SOURCES, 3), (SOURCES[:2], 2), (SOURCES[2:], 4)):
        source = padded(sources)
        graph = translate(source, tf.constant(beam_size), tf.constant(0.6),
                          tf.constant(1.0), tf.constant(4.0))
        eager = beam_search(model, source, beam_size=beam_size, length_penalty=0.6,
                            max_length_a=1.0, max_length_b=4, num_return=2)
        for key in ("ids", "lengths", "steps"):
            np.testing.assert_array_equal(graph[key].numpy(), eager[key].numpy())
        np.testing.assert_allclose(graph["scores"].numpy(), eager["scores"].numpy(), atol=1e-5)
        np.testing.assert_allclose(graph["alignment"].numpy(), eager["alignment"].numpy(),
                                   atol=1e-6)

        greedy_graph = translate_greedy(source)
        greedy_eager = greedy_search(model, source, max_length_a=1.0, max_length_b=4)
        np.testing.assert_array_equal(greedy_graph["ids"].numpy(), greedy_eager["ids"].numpy())
    # One trace each serves every batch size, source length and beam size.
    assert len(translate._list_all_concrete_functions()) == 1
    assert len(translate_greedy._list_all_concrete_functions()) == 1

    with pytest.raises(tf.errors.InvalidArgumentError):
        translate(padded(SOURCES), tf.constant(1), tf.constant(0.6),
                  tf.constant(1.0), tf.constant(4.0))

"""`recipes/recipe_screen.py`: the GPU screen's batches, noise and stopping rule.

The screen's training runs on a JAX machine; here, its data side must give the
CPU recipe's pairs (every pair once per epoch, the grid's rows per batch,
labels the decoder input shifted) in few shapes, and its post-hoc stopping rule
must stop where `EarlyStopping` would.
"""

import numpy as np

from keras_attn_zoo.data.pipeline import bucket_layout
from keras_attn_zoo.training.early_stopping import truncate_at_convergence
from tests.conftest import load_recipe

SCREEN = load_recipe("recipe_screen")


def _pairs(count=400, seed=0):
    rng = np.random.default_rng(seed)
    sources = [rng.integers(4, 50, rng.integers(1, 90)).astype(np.int32) for _ in range(count)]
    targets = [rng.integers(4, 50, rng.integers(1, 90)).astype(np.int32) for _ in range(count)]
    return sources, targets


def test_an_epoch_holds_every_pair_once_in_few_shapes():
    sources, targets = _pairs()
    buckets = bucket_layout(128, 1500, fixed_shapes=True)
    seen, shapes = [], set()
    for source, decoder_input, labels in SCREEN.epoch_batches(
            sources, targets, buckets, np.random.default_rng(1)):
        shapes.add(source.shape)
        assert source.shape == decoder_input.shape == labels.shape
        real = labels[:, 0] != 0
        longest = 0
        for row in np.flatnonzero(real):
            target_length = int(np.sum(labels[row] != 0)) - 1
            source_length = int(np.sum(source[row] != 0)) - 1
            # labels = target + EOS; decoder input = BOS + target; source + EOS
            assert labels[row, target_length] == SCREEN.EOS_ID
            assert source[row, source_length] == SCREEN.EOS_ID
            assert decoder_input[row, 0] == SCREEN.BOS_ID
            np.testing.assert_array_equal(decoder_input[row, 1:target_length + 1],
                                          labels[row, :target_length])
            match = [i for i in range(len(sources))
                     if len(sources[i]) == source_length and len(targets[i]) == target_length
                     and np.array_equal(sources[i], source[row, :source_length])
                     and np.array_equal(targets[i], labels[row, :target_length])]
            seen.extend(match[:1])
            longest = max(longest, source_length + 1, target_length + 1)
        # the grid's batch size for the bucket of the batch's longest pair (at most)
        bucket = int(np.searchsorted(buckets[0], longest, side="right"))
        assert real.sum() <= buckets[1][bucket]
        assert not labels[~real].any() and not source[~real].any()
    assert sorted(seen) == list(range(len(sources)))
    assert {length for _, length in shapes} <= set(SCREEN.SHAPE_LENGTHS)
    assert len({rows for rows, _ in shapes}) == 1


def test_word_dropout_keeps_special_ids_and_padding():
    ids = np.array([[3, 2, 5, 6, 7, 0, 0], [9, 10, 11, 12, 1, 3, 0]], np.int32)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(SCREEN.drop_words(ids, 0.0, rng), ids)
    dropped = SCREEN.drop_words(ids, 1.0, rng)
    special = ids < SCREEN.FIRST_WORD_ID
    np.testing.assert_array_equal(dropped[special], ids[special])
    assert (dropped[~special] == SCREEN.UNK_ID).all()
    half = SCREEN.drop_words(np.full((200, 50), 7, np.int32), 0.1, rng)
    assert 0.07 < np.mean(half == SCREEN.UNK_ID) < 0.13


def test_valid_batches_cover_the_split_in_order_of_length():
    sources, _ = _pairs(450, seed=2)
    covered = []
    for rows, source, target_length in SCREEN._valid_batches(sources):
        assert source.shape[1] in SCREEN.SHAPE_LENGTHS
        assert target_length in SCREEN.SHAPE_LENGTHS
        for row, index in enumerate(rows):
            n = len(sources[index])
            np.testing.assert_array_equal(source[row, :n], sources[index])
            assert source[row, n] == SCREEN.EOS_ID
            # room for the exported search's limit, 2 * length + 10, and EOS
            assert target_length >= min(128, 2 * n + 11)
        covered.extend(rows)
    assert sorted(covered) == list(range(len(sources)))


def test_truncating_a_capped_curve_gives_the_early_stopped_run():
    scores = [1.0, 2.0, 3.0, 2.5, 2.9, 2.8, 2.7, 5.0, 6.0]
    curve = [{"step": 500 * (i + 1), "bleu": b} for i, b in enumerate(scores)]
    stopped, converged = truncate_at_convergence(curve, "bleu", patience=4)
    assert converged and [e["step"] for e in stopped][-1] == 3500  # 4 without beating 3.0
    assert max(e["bleu"] for e in stopped) == 3.0  # the later 5.0 is never seen
    rising, converged = truncate_at_convergence(curve, "bleu", patience=0)
    assert not converged and rising == curve
    # an improvement smaller than min_improvement counts against patience
    small = [{"step": s, "bleu": 3.0 + 0.01 * s / 500} for s in range(500, 3500, 500)]
    assert truncate_at_convergence(small, "bleu", 4, min_improvement=0.05)[1]
    # A floor delays the stop: the run trains on to step 4,000 and sees the 5.0
    # and the 6.0; a floor the stop is already past changes nothing.
    floored, converged = truncate_at_convergence(curve, "bleu", 4, min_steps=4000)
    assert not converged and floored == curve
    assert truncate_at_convergence(curve, "bleu", 4, min_steps=3500) == (stopped, True)

"""The low-resource recipe's pieces do what they say: word dropout, checkpoint averaging."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.data.noise import with_word_dropout
from keras_attn_zoo.data.noise import word_dropout
from keras_attn_zoo.data.vocabulary import UNK_ID


def batch_ids():
    rng = np.random.default_rng(0)
    ids = rng.integers(4, 60, size=(16, 40)).astype("int32")
    ids[:, 0] = 2           # BOS
    ids[:, 30] = 3          # EOS
    ids[:, 31:] = 0         # padding
    return ids


def test_word_dropout_rate_zero_changes_nothing_and_rate_one_drops_every_word():
    ids = batch_ids()
    seed = tf.constant([1, 2], tf.int32)
    np.testing.assert_array_equal(word_dropout(ids, 0.0, seed).numpy(), ids)
    dropped = word_dropout(ids, 1.0, seed).numpy()
    words = ids >= 4
    assert (dropped[words] == UNK_ID).all()
    np.testing.assert_array_equal(dropped[~words], ids[~words])  # BOS, EOS, PAD kept


def test_word_dropout_rate_is_the_share_of_dropped_words_and_seeded():
    ids = np.tile(batch_ids(), (8, 1))  # 3,840 words
    seed = tf.constant([7, 0], tf.int32)
    dropped = word_dropout(ids, 0.25, seed).numpy()
    share = (dropped[ids >= 4] == UNK_ID).mean()
    assert 0.22 < share < 0.28, share   # 3 standard deviations: 0.021
    np.testing.assert_array_equal(word_dropout(ids, 0.25, seed).numpy(), dropped)
    with pytest.raises(ValueError, match="word dropout rate must be in"):
        word_dropout(ids, 1.5, seed)


def test_with_word_dropout_leaves_labels_and_replays_after_a_restart():
    ids = batch_ids()
    dataset = tf.data.Dataset.from_tensors(
        ({"source_ids": ids, "target_ids": ids}, ids)).repeat(3)
    first = list(with_word_dropout(dataset, 0.5, seed=3))
    again = list(with_word_dropout(dataset, 0.5, seed=3))
    for (features, labels), (features_again, _) in zip(first, again):
        np.testing.assert_array_equal(labels.numpy(), ids)
        np.testing.assert_array_equal(features["source_ids"].numpy(),
                                      features_again["source_ids"].numpy())
        # Source and decoder input draw independently.
        assert (features["source_ids"].numpy() != features["target_ids"].numpy()).any()
    assert (first[0][0]["source_ids"].numpy() != first[1][0]["source_ids"].numpy()).any()


def test_averaging_two_checkpoints_gives_the_mean_of_their_weights(tmp_path):
    import keras

    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.training.averaging import average_checkpoints
    from keras_attn_zoo.training.averaging import latest_checkpoints

    model = transformer(40, preset="tiny")
    checkpoint = tf.train.Checkpoint(model=model)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=3)
    snapshots = []
    for number in range(3):
        for variable in model.trainable_weights:
            variable.assign(keras.random.normal(variable.shape, seed=number))
        snapshots.append([np.asarray(v.numpy(), np.float64) for v in model.weights])
        manager.save(checkpoint_number=number)
    paths = latest_checkpoints(tmp_path, 2)
    assert [path.rsplit("-", 1)[1] for path in paths] == ["1", "2"]
    assert average_checkpoints(model, paths) == 2
    for variable, older, newer in zip(model.weights, snapshots[1], snapshots[2]):
        np.testing.assert_allclose(variable.numpy(), (older + newer) / 2, atol=1e-6)
    with pytest.raises(ValueError, match="No checkpoint at"):
        average_checkpoints(model, [str(tmp_path / "ckpt-9")])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints(model, [])

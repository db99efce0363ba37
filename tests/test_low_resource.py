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


def test_averaging_refuses_a_checkpoint_of_another_architecture_and_changes_nothing(tmp_path):
    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.training.averaging import average_checkpoints

    written = transformer(40, preset="tiny", num_encoder_layers=2, num_decoder_layers=2)
    path = tf.train.Checkpoint(model=written).write(str(tmp_path / "two-layers"))
    deeper = transformer(40, preset="tiny", num_encoder_layers=3, num_decoder_layers=3)
    before = [v.numpy().copy() for v in deeper.weights]
    with pytest.raises(ValueError, match="does not hold every weight"):
        average_checkpoints(deeper, [path, path])
    for variable, value in zip(deeper.weights, before):
        np.testing.assert_array_equal(variable.numpy(), value)


# ---- activation dropout and decoder LayerDrop in the builders ------------------------------


def tiny_inputs(vocabulary_size=40, batch=3, source_length=7, target_length=6):
    rng = np.random.default_rng(1)
    source = rng.integers(4, vocabulary_size, size=(batch, source_length)).astype("int32")
    target = rng.integers(4, vocabulary_size, size=(batch, target_length)).astype("int32")
    source[0, 5:] = 0
    target[:, 0] = 2
    return {"source_ids": source, "target_ids": target}


def same_weights(model, other):
    assert [w.path for w in model.weights] == [w.path for w in other.weights]
    for weight, other_weight in zip(model.weights, other.weights):
        np.testing.assert_array_equal(np.asarray(weight.numpy()),
                                      np.asarray(other_weight.numpy()))


@pytest.mark.parametrize("builder", ["transformer", "gmm_transformer", "ran_transformer",
                                     "hard_coded_transformer", "synthesizer_transformer"])
def test_dropout_options_reach_every_seq2seq_transformer_builder(builder):
    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.models import parse_model_options

    options = parse_model_options(
        "activation_dropout=0.1;attention_dropout=0.1;decoder_layer_drop=0.2")
    model = build_model(builder, 40, preset="tiny", max_length=16, **options)
    assert model.zoo_config["activation_dropout"] == 0.1
    assert model.zoo_config["decoder_layer_drop"] == 0.2
    blocks = model.encoder_blocks + model.decoder_blocks
    assert all(block.feed_forward._dropout_layer.rate == 0.1 for block in blocks)
    assert [drop.rate for drop in model.decoder_layer_drops] == [0.2, 0.2]
    # The option survives a config round trip (.keras files).
    clone = type(model).from_config(model.get_config())
    assert clone.zoo_config["decoder_layer_drop"] == 0.2


def test_activation_dropout_without_feed_forward_networks_is_refused():
    from keras_attn_zoo.models import Seq2SeqTransformer
    from keras_attn_zoo.models import TRANSFORMER_PRESETS
    from keras_attn_zoo.models import weighted_transformer

    # Blocks whose slots all replace their FFN (the branched kind) have none to drop
    # in; the Weighted builder routes it to the branch FFNs (tests/test_weighted.py).
    with pytest.raises(ValueError, match="activation_dropout=0.1 acts on the blocks'"):
        Seq2SeqTransformer(40, **TRANSFORMER_PRESETS["tiny"], activation_dropout=0.1,
                           encoder_self_attention="branched_weighted",
                           cross_attention="branched_weighted")
    assert weighted_transformer(40, preset="tiny", activation_dropout=0.1) is not None


def test_activation_dropout_drops_activations_in_training_only():
    import keras

    from keras_attn_zoo.models import transformer

    keras.utils.set_random_seed(0)
    plain = transformer(40, preset="tiny")
    keras.utils.set_random_seed(0)
    dropped = transformer(40, preset="tiny", activation_dropout=0.5)
    dropped.set_weights(plain.get_weights())
    inputs = tiny_inputs()
    np.testing.assert_allclose(dropped(inputs, training=False), plain(inputs, training=False),
                               atol=1e-6)
    # tiny has no other dropout: only the FFN activations change the training pass.
    np.testing.assert_allclose(plain(inputs, training=True), plain(inputs, training=False),
                               atol=1e-6)
    assert not np.allclose(dropped(inputs, training=True), plain(inputs, training=True),
                           atol=1e-4)


def test_decoder_layer_drop_zero_is_the_model_without_it():
    import keras

    from keras_attn_zoo.models import transformer

    inputs = tiny_inputs()
    keras.utils.set_random_seed(3)
    plain = transformer(40, preset="tiny")
    keras.utils.set_random_seed(3)
    zero = transformer(40, preset="tiny", decoder_layer_drop=0.0)
    same_weights(plain, zero)
    assert zero.decoder_layer_drops == []
    for training in (False, True):
        np.testing.assert_array_equal(np.asarray(zero(inputs, training=training)),
                                      np.asarray(plain(inputs, training=training)))


def block_free_logits(model, inputs):
    """The decoder with every block skipped: embedding, final norm, logits."""
    y = model.embedding(inputs["target_ids"], training=True)
    if model.decoder_final_norm is not None:
        y = model.decoder_final_norm(y)
    return np.asarray(model.embedding.logits(y))


@pytest.mark.parametrize("options", [{}, {"norm_first": True}])
def test_decoder_layer_drop_one_skips_every_block_in_training_only(options):
    import keras

    from keras_attn_zoo.models import transformer

    inputs = tiny_inputs()
    keras.utils.set_random_seed(4)
    plain = transformer(40, preset="tiny", **options)
    keras.utils.set_random_seed(4)
    dropped = transformer(40, preset="tiny", decoder_layer_drop=1.0, **options)
    dropped.set_weights(plain.get_weights())  # same weights; seed states aside
    np.testing.assert_allclose(np.asarray(dropped(inputs, training=True)),
                               block_free_logits(dropped, inputs), atol=1e-5)
    assert not np.allclose(np.asarray(plain(inputs, training=True)),
                           block_free_logits(dropped, inputs), atol=1e-3)
    if options:  # graph mode and XLA: the same skip (compiled once, for time)
        compiled = tf.function(lambda x: dropped(x, training=True), jit_compile=True)
        np.testing.assert_allclose(np.asarray(compiled(inputs)),
                                   block_free_logits(dropped, inputs), atol=1e-5)
    # Inference ignores the rate, and so does step-by-step decoding.
    np.testing.assert_allclose(np.asarray(dropped(inputs, training=False)),
                               np.asarray(plain(inputs, training=False)), atol=1e-6)
    memory_a = dropped.encode(inputs["source_ids"])
    memory_b = plain.encode(inputs["source_ids"])
    state_a = dropped.initial_state(memory_a, 6)
    state_b = plain.initial_state(memory_b, 6)
    for step in range(3):
        token = inputs["target_ids"][:, step]
        logits_a, state_a = dropped.decode_step(token, step, state_a)
        logits_b, state_b = plain.decode_step(token, step, state_b)
        np.testing.assert_allclose(np.asarray(logits_a), np.asarray(logits_b), atol=1e-5)


def test_decoder_layer_drop_draws_once_per_batch_and_block():
    import keras

    from keras_attn_zoo.models import ran_transformer

    # RAN-ALL: the recurrent matrices pass a skipped block unchanged.
    keras.utils.set_random_seed(5)
    model = ran_transformer(40, preset="tiny", max_length=16, apply_to="all",
                            ran_dropout=0.0, decoder_layer_drop=0.5)
    inputs = tiny_inputs()
    outputs = {np.asarray(model(inputs, training=True)).round(4).tobytes()
               for _ in range(12)}
    # Two blocks, each kept or skipped for the whole batch: at most four
    # different passes, and more than one in 12 draws (all equal: p = 2^-22).
    assert 2 <= len(outputs) <= 4

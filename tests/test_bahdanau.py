"""Bahdanau attention and RNNsearch: attention, padding, caching, saving, search,
scheduled sampling, maxout, long inputs, the alignment plot and a short training run."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo.data.vocabulary import BOS_ID
from keras_attn_zoo.data.vocabulary import EOS_ID
from keras_attn_zoo.decoding import beam_search
from keras_attn_zoo.layers.bahdanau_attention import BahdanauAttention
from keras_attn_zoo.layers.maxout import Maxout
from keras_attn_zoo.models.bahdanau_rnn import BAHDANAU_PRESETS
from keras_attn_zoo.models.bahdanau_rnn import BahdanauRNN
from keras_attn_zoo.models.bahdanau_rnn import TeacherForcingSchedule
from keras_attn_zoo.models.bahdanau_rnn import bahdanau_rnn
from keras_attn_zoo.models.bahdanau_rnn import teacher_forcing_probability
from keras_attn_zoo.training.seeding import seed_everything
from keras_attn_zoo.optimizers import Adam
from tests import model_checks

VOCAB = 60


@pytest.fixture(scope="module")
def batch():
    return model_checks.random_batch(VOCAB)


@pytest.fixture(scope="module")
def model():
    return bahdanau_rnn(VOCAB, preset="tiny", seed=1)


@pytest.fixture(scope="module")
def variant():
    """The other choices: dense output, shared embeddings, weight-normalised
    attention, scheduled sampling, dropout."""
    return bahdanau_rnn(
        VOCAB, preset="tiny", output="dense", share_embeddings=True,
        normalize_attention=True, teacher_forcing_ratio=0.5, dropout=0.1, seed=2)


def no_eos_first(log_probs, step, tokens_so_far, state):
    """Bans EOS at step 0, so an untrained model's output is never empty
    (whether it would end at once depends on its random initial weights)."""
    is_eos = tf.equal(tf.range(tf.shape(log_probs)[-1]), EOS_ID)[tf.newaxis, :]
    return tf.where(tf.logical_and(is_eos, step == 0), -1e9, log_probs)


@pytest.fixture(scope="module")
def search(model):
    """One traced beam search, shared by the tests (dynamic batch and length)."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([], tf.float32),
                                  tf.TensorSpec([], tf.float32)])
    def run(source_ids, max_length_a, max_length_b):
        return beam_search(model, source_ids, beam_size=3, max_length_a=max_length_a,
                           max_length_b=max_length_b, logits_processor=no_eos_first)

    return run


def assert_rows_are_distributions(weights, mask):
    """`weights` [..., S] sum to 1 over real positions and are 0 on padding."""
    weights = np.asarray(weights)
    mask = np.broadcast_to(np.asarray(mask, bool), weights.shape)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[~mask] == 0.0)
    assert np.all(weights >= 0.0)


# ---- the attention layer ---------------------------------------------------------


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "weight_norm"])
def test_attention_weights_are_distributions_over_real_positions(normalize):
    layer = BahdanauAttention(8, normalize=normalize)
    memory = np.random.default_rng(0).normal(size=(3, 6, 10)).astype("float32")
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5], bool)
    query = np.random.default_rng(1).normal(size=(3, 5)).astype("float32")
    context, weights = layer(query, memory, memory_mask=mask)
    assert context.shape == (3, 10) and weights.shape == (3, 6)
    assert weights.dtype == "float32"
    assert_rows_are_distributions(weights, mask)
    np.testing.assert_allclose(
        context, np.einsum("bs,bsd->bd", np.asarray(weights), memory), atol=1e-5)
    # Precomputed keys give the same result; several queries at once too.
    keys = layer.precompute_keys(memory)
    _, cached = layer(query, memory, memory_mask=mask, keys=keys)
    np.testing.assert_allclose(cached, weights, atol=1e-6)
    queries = np.stack([query, -query], axis=1)  # [B, 2, d]
    contexts, many = layer(queries, memory, memory_mask=mask, keys=keys)
    assert contexts.shape == (3, 2, 10) and many.shape == (3, 2, 6)
    np.testing.assert_allclose(many[:, 0], weights, atol=1e-6)
    assert_rows_are_distributions(many, mask[:, None, :])
    expected = {"query_projection/kernel", "key_projection/kernel", "score_vector"}
    if normalize:
        expected |= {"score_gain", "score_bias"}
    assert {w.path.split("/", 1)[1] for w in layer.weights} == expected


def test_attention_is_finite_in_float16_and_round_trips():
    layer = BahdanauAttention(4, normalize=True, dtype="mixed_float16")
    memory = np.random.default_rng(0).normal(size=(2, 5, 6)).astype("float32") * 100
    mask = np.array([[1] * 5, [1, 1, 0, 0, 0]], bool)
    context, weights = layer(np.ones((2, 3), "float32"), memory, memory_mask=mask)
    assert weights.dtype == "float32" and context.dtype == "float16"
    assert np.isfinite(np.asarray(context)).all()
    assert_rows_are_distributions(weights, mask)
    restored = BahdanauAttention.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()


# ---- the model -------------------------------------------------------------------


def test_output_is_float32_logits(model, batch):
    out = np.asarray(model(batch))
    assert out.shape == batch["target_ids"].shape + (VOCAB,)
    assert out.dtype == np.float32 and np.isfinite(out).all()


@pytest.mark.parametrize("which", ["model", "variant"])
def test_model_behaviour_checks(which, request, batch):
    """Causality, padding invariance and cached decoding == the teacher-forced pass."""
    built = request.getfixturevalue(which)
    model_checks.check_causality(built, batch)
    model_checks.check_padding_invariance(built, batch)
    model_checks.check_cached_decoding(built, batch)


def test_encoder_backward_direction_starts_at_the_real_last_token(model, batch):
    """A padded sentence is encoded exactly as when it is alone and unpadded."""
    source = batch["source_ids"]
    memory = np.asarray(model.encode(source)["memory"])
    for row in range(source.shape[0]):
        length = int((source[row] != 0).sum())
        alone = np.asarray(model.encode(source[row:row + 1, :length])["memory"])[0]
        np.testing.assert_allclose(memory[row, :length], alone, atol=1e-5)
    assert np.isfinite(memory).all()


def test_teacher_forced_attention_maps(model, batch):
    """One layer, one head; row i is the alignment decode_step gives at position i."""
    source, target = batch["source_ids"], batch["target_ids"]
    maps = model.attention_maps(source, target)
    assert set(maps) == {"cross"}
    cross = maps["cross"]
    assert cross.dtype == np.float32
    assert cross.shape == (1, source.shape[0], 1, target.shape[1], source.shape[1])
    weights = cross[0, :, 0]
    assert_rows_are_distributions(weights, (source != 0)[:, None, :])
    state = model.initial_state(model.encode(source), target.shape[1])
    for position in range(target.shape[1]):
        _, state = model.decode_step(target[:, position], position, state)
        np.testing.assert_allclose(
            np.asarray(state["attention"]), weights[:, position], atol=1e-5)


@pytest.mark.parametrize("which", ["model", "variant"])
def test_keras_file_round_trip(which, request, batch, tmp_path):
    built = request.getfixturevalue(which)
    restored = model_checks.check_keras_round_trip(built, batch, tmp_path / "m.keras")
    assert isinstance(restored, BahdanauRNN)
    assert restored.get_config() == built.get_config()
    assert restored.teacher_forcing_ratio == built.teacher_forcing_ratio


def test_beam_search_alignment_rows_sum_to_one(search, batch):
    source = batch["source_ids"]
    result = search(source, tf.constant(1.0), tf.constant(4.0))
    alignment = result["alignment"].numpy()  # [B, N, T, S]
    lengths = result["lengths"].numpy()
    assert alignment.shape[:2] == lengths.shape and alignment.shape[-1] == source.shape[1]
    for b in range(source.shape[0]):
        for n in range(lengths.shape[1]):
            rows = alignment[b, n, : lengths[b, n]]
            assert rows.shape[0] > 0
            assert_rows_are_distributions(rows, (source[b] != 0)[None, :])


def test_a_source_of_3000_tokens_translates(search):
    """No length limit: 3,000 source tokens encode, attend and decode."""
    source = np.random.default_rng(3).integers(4, VOCAB, (1, 3000)).astype("int32")
    result = search(source, tf.constant(0.0), tf.constant(3.0))
    assert 1 <= int(result["lengths"][0, 0]) <= 3
    assert np.isfinite(result["scores"].numpy()).all()
    rows = result["alignment"].numpy()[0, 0, : int(result["lengths"][0, 0])]
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-4)


def test_maxout_takes_the_max_of_adjacent_pairs():
    layer = Maxout(3)
    x = np.array([[[1.0, 3.0, 5.0, -1.0, -2.0, -7.0]]], "float32")
    np.testing.assert_array_equal(layer(x), [[[3.0, 5.0, -2.0]]])
    assert layer.compute_output_shape((None, 4, 6)) == (None, 4, 3)
    with pytest.raises(ValueError, match="6 input features"):
        layer(np.ones((1, 4), "float32"))


def test_output_layers(model, variant):
    """maxout: readout of 2l units pooled to l before the projection; dense: one layer."""
    tiny = BAHDANAU_PRESETS["tiny"]
    h, e, l = tiny["hidden_dim"], tiny["embedding_dim"], tiny["maxout_dim"]
    decoder = model.decoder
    assert decoder.readout_dense.kernel.shape == (3 * h + e, 2 * l)
    assert decoder.projection.kernel.shape == (l, VOCAB)
    assert variant.decoder.readout_dense is None
    assert variant.decoder.projection.kernel.shape == (3 * h + e, VOCAB)
    assert variant.source_embedding is variant.decoder.embedding
    assert model.source_embedding is not model.decoder.embedding


def parameter_formula(vocab, preset, share_embeddings=False):
    p = {"attention_dim": None, **BAHDANAU_PRESETS[preset]}
    e, h, a, l = p["embedding_dim"], p["hidden_dim"], p["attention_dim"], p["maxout_dim"]
    embeddings = (1 if share_embeddings else 2) * vocab * e
    encoder = 2 * 3 * (e * h + h * h + h)  # GRU, reset_after=False
    attention = h * a + 2 * h * a + a
    initial = h * h + h
    decoder = 3 * ((e + 2 * h) * h + h * h + h)
    readout_in = 3 * h + e
    if p["output"] == "maxout":
        output = readout_in * 2 * l + 2 * l + l * vocab + vocab
    else:
        output = readout_in * vocab + vocab
    return embeddings + encoder + attention + initial + decoder + output


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_preset_parameter_counts_follow_the_formula(preset):
    assert bahdanau_rnn(8000, preset=preset).count_params() == parameter_formula(8000, preset)


def test_shared_embeddings_are_counted_once():
    shared = bahdanau_rnn(8000, preset="tiny", share_embeddings=True)
    assert shared.count_params() == parameter_formula(8000, "tiny", share_embeddings=True)
    assert len(shared.weights) == len({id(w) for w in shared.weights})


# ---- scheduled sampling ------------------------------------------------------------


def test_scheduled_sampling_only_changes_training_calls(batch):
    model = bahdanau_rnn(VOCAB, preset="tiny", teacher_forcing_ratio=0.5, seed=4)
    teacher_forced = np.asarray(model(batch, training=False))
    model.set_teacher_forcing_ratio(1.0)
    np.testing.assert_allclose(model(batch, training=True), teacher_forced, atol=1e-5)
    # p = 0: every position after the first reads the previous argmax, i.e. the
    # training pass equals greedy decoding from the same BOS.
    model.set_teacher_forcing_ratio(0.0)
    sampled = np.asarray(model(batch, training=True))
    state = model.initial_state(model.encode(batch["source_ids"]))
    token, steps = batch["target_ids"][:, 0], []
    for t in range(batch["target_ids"].shape[1]):
        logits, state = model.decode_step(token, t, state)
        steps.append(np.asarray(logits))
        token = steps[-1].argmax(-1).astype("int32")
    np.testing.assert_allclose(sampled, np.stack(steps, axis=1), atol=1e-4)
    np.testing.assert_allclose(model(batch, training=False), teacher_forced, atol=1e-6)


def test_teacher_forcing_schedules():
    linear = {"schedule": "linear", "final": 0.5, "steps": 100}
    assert teacher_forcing_probability(0, 1.0, linear) == 1.0
    assert teacher_forcing_probability(50, 1.0, linear) == pytest.approx(0.75)
    assert teacher_forcing_probability(500, 1.0, linear) == 0.5
    for schedule in ("exponential", "inverse_sigmoid"):
        decay = dict(linear, schedule=schedule)
        values = [teacher_forcing_probability(s, 1.0, decay) for s in (0, 50, 100, 10**6)]
        assert values == sorted(values, reverse=True)
        assert values[0] > 0.99 and values[-1] == pytest.approx(0.5)
    assert teacher_forcing_probability(10, 0.8) == 0.8
    assert bahdanau_rnn(VOCAB, preset="tiny").teacher_forcing_ratio == 1.0


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="preset"):
        bahdanau_rnn(100, preset="huge")
    with pytest.raises(TypeError, match="hiden_dim"):
        bahdanau_rnn(100, preset="tiny", hiden_dim=3)
    with pytest.raises(ValueError, match="output"):
        bahdanau_rnn(100, preset="tiny", output="softmax")
    with pytest.raises(ValueError, match="probability"):
        bahdanau_rnn(100, preset="tiny", teacher_forcing_ratio=1.5)
    with pytest.raises(ValueError, match="schedule"):
        bahdanau_rnn(100, preset="tiny", teacher_forcing_decay={
            "schedule": "cosine", "final": 0.5, "steps": 10})
    with pytest.raises(ValueError, match="without scheduled sampling"):
        bahdanau_rnn(100, preset="tiny").set_teacher_forcing_ratio(0.5)
    with pytest.raises(ValueError, match="max_length is 5"):
        bahdanau_rnn(100, preset="tiny", max_length=5).check_length(6)


# ---- the alignment plot --------------------------------------------------------------


def test_plot_alignment_writes_a_png(model, batch, tmp_path):
    pytest.importorskip("matplotlib")
    from keras_attn_zoo.evaluation.plots import plot_alignment

    weights = model.attention_maps(batch["source_ids"], batch["target_ids"])["cross"][0, :, 0]
    source = ["Der", "Hund", "sieht", "den", "Ball", "ß", "</s>"]
    target = ["<s>", "the", "dog", "sees", "the", "ball"]
    path = plot_alignment(weights[0], source, target, tmp_path / "plots" / "a.png",
                          title="alignment")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="cannot label"):
        plot_alignment(weights[0], source + ["extra"], target, tmp_path / "b.png")


# ---- training ------------------------------------------------------------------------------


def test_short_training_run_lowers_the_loss(tiny_parallel_corpus, tiny_tokenizer):
    """A few dozen steps with scheduled sampling decaying p from 1.0 to 0.5."""
    from keras_attn_zoo.data import make_dataset
    from keras_attn_zoo.training import Trainer

    vocabulary = int(tiny_tokenizer.vocabulary_size())
    model = bahdanau_rnn(vocabulary, preset="tiny", seed=5, teacher_forcing_decay={
        "schedule": "linear", "final": 0.5, "steps": 20})
    dataset, stats = make_dataset(tiny_parallel_corpus, tiny_tokenizer,
                                  batch_tokens=256, max_length=32, seed=0)
    # One fixed batch shape: the training step is traced once, not twice.
    width = stats.max_length
    dataset = dataset.unbatch().padded_batch(
        16, padded_shapes=({"source_ids": [width], "target_ids": [width]}, [width]),
        drop_remainder=True).repeat()
    losses = []

    class Record:
        def on_step_end(self, trainer, step, logs):
            losses.append(logs["loss"])

    trainer = Trainer(model, Adam(1e-2), label_smoothing=0.0,
                      checkpoint_every=0, callbacks=[TeacherForcingSchedule(), Record()])
    trainer.train(lambda epoch: dataset, max_steps=25, verbose=0)
    assert len(losses) == 25 and np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:3])
    assert model.teacher_forcing_ratio == pytest.approx(0.5)


def test_attention_learns_to_align_a_reversal():
    """The attention is wired to help: on "reverse the source" the decoder can
    only emit the right token by attending to its mirror position, so after
    training, α_i's argmax must be source position L-1-i.

    Trained epoch by epoch until the alignment holds, at most 6 epochs: how
    soon it forms moves with the batch order and the kernels' rounding (with
    fit's unseeded shuffle one suite run had 0.77 after 3 epochs, where four
    seeds alone had 0.97-1.0), so the test asks that it forms, not when. The
    pairs are already random, so fit does not shuffle: the run is the same
    every time (measured: 0.356, 1.0 after epochs 1 and 2)."""
    rng = np.random.default_rng(0)
    seed_everything(0)  # not keras.utils.set_random_seed: it clears loaded tokenizers

    def reversal_pairs(count):
        source, target_in, target_out = (np.zeros((count, 9), "int32") for _ in range(3))
        lengths = rng.integers(4, 9, count)
        for b, length in enumerate(lengths):
            reversed_tokens = rng.integers(4, 30, length)[::-1]
            source[b, :length], source[b, length] = reversed_tokens[::-1], EOS_ID
            target_in[b, 0], target_in[b, 1:length + 1] = BOS_ID, reversed_tokens
            target_out[b, :length], target_out[b, length] = reversed_tokens, EOS_ID
        return source, target_in, target_out, lengths

    source, target_in, target_out, _ = reversal_pairs(4000)
    held_out, held_out_in, _, lengths = reversal_pairs(200)
    model = bahdanau_rnn(30, preset="tiny", seed=1)
    model.compile(Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0))

    def mirror_hits():
        weights = model.attention_maps(held_out, held_out_in)["cross"][0, :, 0]  # [B, T, S]
        return np.mean([int(np.argmax(weights[b, i]) == length - 1 - i)
                        for b, length in enumerate(lengths) for i in range(length)])

    history = []
    for _ in range(6):
        model.fit({"source_ids": source, "target_ids": target_in}, target_out,
                  batch_size=64, epochs=1, shuffle=False, verbose=0)
        history.append(mirror_hits())
        if history[-1] >= 0.95:
            break
    assert history[-1] >= 0.95, history

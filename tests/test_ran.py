"""Recurrent Attention (RAN): the recurrence, masking, decoding, limits, sizes."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.decoding import beam_search
from keras_attn_zoo.decoding import greedy_search
from keras_attn_zoo.decoding.common import max_target_lengths
from keras_attn_zoo.layers.recurrent_attention import RecurrentAttention
from keras_attn_zoo.layers.recurrent_attention_matrices import RecurrentAttentionMatrices
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.ran_transformer import ran_transformer
from keras_attn_zoo.models.seq2seq_transformer import DECODER_SELF
from keras_attn_zoo.models.transformer import transformer
from keras_attn_zoo.training.seeding import seed_everything
from keras_attn_zoo.optimizers import Adam
from tests import model_checks

VOCAB = 60
MAX_LENGTH = 32


# ---- models -------------------------------------------------------------------


@pytest.fixture(scope="module", params=["encoder", "decoder", "all"])
def model(request):
    seed_everything(1)
    return ran_transformer(VOCAB, preset="tiny", apply_to=request.param,
                           max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def batch():
    return model_checks.random_batch(VOCAB)


class TestModelContract(model_checks.ModelContractWithBeamSearch):
    """Causality, padding, cached decoding, `.keras` round trip, beam search."""


@pytest.mark.parametrize("apply_to", ["encoder", "decoder", "all"])
def test_short_training_lowers_the_loss(apply_to, tiny_parallel_corpus, tiny_tokenizer):
    seed_everything(0)
    model = ran_transformer(zoo_data.vocabulary_size(tiny_tokenizer), preset="tiny",
                            apply_to=apply_to, max_length=MAX_LENGTH)
    model_checks.check_training_lowers_the_loss(model, tiny_parallel_corpus, tiny_tokenizer)


# ---- the recurrence and the attention weights -------------------------------------


def _numpy_layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def test_matrices_follow_the_paper_recurrence():
    stack = RecurrentAttentionMatrices(num_heads=2, max_length=6, num_layers=3)
    outputs = stack(np.zeros((1, 6), "int32"))
    a = stack.initial_matrices.numpy()
    w, b = stack.transition_kernel.numpy(), stack.transition_bias.numpy()
    norm = stack.transition_norm
    for output in outputs:
        a = a + _numpy_layer_norm(np.tanh(a @ w + b), norm.gamma.numpy(),
                                  norm.beta.numpy(), norm.epsilon)
        np.testing.assert_allclose(output["attention_matrix"], a, atol=1e-5)


def test_ffn_transition_is_a_residual_relu_ffn():
    stack = RecurrentAttentionMatrices(num_heads=2, max_length=5, num_layers=2,
                                       transition="ffn")
    outputs = stack(np.zeros((1, 5), "int32"))
    inner, outer = stack.transition_inner, stack.transition_outer
    a = stack.initial_matrices.numpy()
    for output in outputs:
        hidden = np.maximum(a @ inner.kernel.numpy() + inner.bias.numpy(), 0)
        a = a + hidden @ outer.kernel.numpy() + outer.bias.numpy()
        np.testing.assert_allclose(output["attention_matrix"], a, atol=1e-4)
    assert stack.count_params() == 2 * 25 + 8 * 25 + 5 * 5
    with pytest.raises(ValueError, match="transition"):
        RecurrentAttentionMatrices(num_heads=2, max_length=5, num_layers=2,
                                   transition="gru")


def test_slices_are_the_top_left_of_the_full_matrices():
    stack = RecurrentAttentionMatrices(num_heads=2, max_length=8, num_layers=2)
    full = stack.full_matrices()
    for output, matrices in zip(stack(np.zeros((3, 5), "int32")), full):
        np.testing.assert_allclose(output["attention_matrix"], matrices[:, :5, :5],
                                   atol=1e-6)


def test_rows_sum_to_one_over_real_keys_and_ignore_masked_keys():
    stack = RecurrentAttentionMatrices(num_heads=2, max_length=8, num_layers=1)
    layer = RecurrentAttention(num_heads=2, key_dim=4)
    x = keras.random.normal((2, 5, 8), seed=0)
    real = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    matrix = stack(np.zeros((2, 5), "int32"))[0]["attention_matrix"]
    for causal in (False, True):
        _, weights = layer(x, context_mask=real, causal=causal, return_attention=True,
                           attention_matrix=matrix)
        weights = np.asarray(weights)
        assert weights.dtype == np.float32 and weights.shape == (2, 2, 5, 5)
        visible = real[:, None, None, :] & (
            np.tril(np.ones((5, 5), bool)) if causal else True)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
        assert np.all(weights[~np.broadcast_to(visible, weights.shape)] < 1e-6)
        # Every sentence gets the same pattern: softmax of A_1 over its visible keys.
        expected = np.where(visible, np.asarray(matrix)[None], -np.inf)
        expected = np.exp(expected - expected.max(-1, keepdims=True))
        np.testing.assert_allclose(weights, expected / expected.sum(-1, keepdims=True),
                                   atol=1e-5)


def test_attention_dropout_defaults_to_the_papers_0_2():
    model = ran_transformer(VOCAB, preset="tiny", apply_to="all", max_length=8)
    ran_layers = [block.self_attention for block in model.encoder_blocks + model.decoder_blocks]
    assert all(isinstance(layer, RecurrentAttention) for layer in ran_layers)
    assert all(layer.dropout == 0.2 for layer in ran_layers)
    assert all(block.cross_attention.dropout == 0.0 for block in model.decoder_blocks)


def test_inference_matrices_equal_the_training_ones(batch):
    model = ran_transformer(VOCAB, preset="tiny", apply_to="decoder", max_length=16)
    state = model.initial_state(model.encode(batch["source_ids"]), 12)
    shared = state["shared"][DECODER_SELF]
    trained = model.stack_layers[DECODER_SELF](batch["target_ids"])
    length = batch["target_ids"].shape[1]
    assert len(shared) == len(trained) == 2
    for inference, training in zip(shared, trained):
        inference = np.asarray(inference["attention_matrix"])
        assert inference.shape == (2, 12, 12)
        np.testing.assert_allclose(inference[:, :length, :length],
                                   training["attention_matrix"], atol=1e-6)


@pytest.mark.parametrize("apply_to", ["encoder", "decoder", "all"])
def test_each_layer_of_the_functional_graph_attends_with_its_own_matrix(apply_to, batch):
    """Block l of a stack gets A_l in `model(...)` (what fit trains), not A_L.

    Each RecurrentAttention layer records the matrix it is called with; the
    real computation runs unchanged.
    """
    model = ran_transformer(VOCAB, preset="tiny", apply_to=apply_to, max_length=16,
                            num_encoder_layers=3, num_decoder_layers=3)
    received = {}
    for blocks in (model.encoder_blocks, model.decoder_blocks):
        for block in blocks:
            layer = block.self_attention
            if isinstance(layer, RecurrentAttention):
                original = layer._pattern

                def record(*args, _layer=layer, _original=original, **kwargs):
                    received[_layer.name] = kwargs["attention_matrix"]
                    return _original(*args, **kwargs)

                layer._pattern = record
    model(batch, training=False)
    for slot, stack in model.stack_layers.items():
        blocks = model.encoder_blocks if "encoder" in slot else model.decoder_blocks
        full = [np.asarray(m) for m in stack.full_matrices()]
        assert len(full) == len(blocks) == 3
        for index, block in enumerate(blocks):
            got = np.asarray(received[block.self_attention.name])
            length = got.shape[-1]
            np.testing.assert_allclose(got, full[index][:, :length, :length], atol=1e-6,
                                       err_msg=f"{slot} block {index} got another matrix")
        # And the layers' matrices really differ, so the check above can tell.
        assert np.abs(full[0] - full[-1]).max() > 1e-3


def test_fixed_initial_matrices_are_not_trained(batch):
    model = ran_transformer(VOCAB, preset="tiny", apply_to="all", max_length=16,
                            trainable_initial=False)
    trainable = ran_transformer(VOCAB, preset="tiny", apply_to="all", max_length=16)
    h, n = 2, 16
    assert (sum(int(np.prod(w.shape)) for w in trainable.trainable_weights)
            - sum(int(np.prod(w.shape)) for w in model.trainable_weights)) == 2 * h * n * n
    stack = model.stack_layers[DECODER_SELF]
    before = stack.initial_matrices.numpy()
    optimizer = Adam(1e-2)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(batch, training=True) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights),
                                  model.trainable_weights))
    np.testing.assert_array_equal(stack.initial_matrices.numpy(), before)


# ---- sizes ------------------------------------------------------------------------


@functools.lru_cache
def transformer_parameters(preset):
    return transformer(VOCAB, preset=preset).count_params()


@pytest.mark.parametrize("preset, apply_to", [
    ("tiny", "encoder"), ("tiny", "decoder"), ("tiny", "all"), ("small", "all")])
def test_parameter_count_follows_the_formula(preset, apply_to):
    """Transformer - (q, k projections of each RAN layer) + per stack h n^2 + n^2 + 3n."""
    p = TRANSFORMER_PRESETS[preset]
    d, h, n = p["model_dim"], p["num_heads"], 64
    stacks = {"encoder": ["num_encoder_layers"], "decoder": ["num_decoder_layers"],
              "all": ["num_encoder_layers", "num_decoder_layers"]}[apply_to]
    ran_layers = sum(p[key] for key in stacks)
    formula = (transformer_parameters(preset)
               - ran_layers * 2 * (d * d + d)
               + len(stacks) * (h * n * n + n * n + n + 2 * n))
    model = ran_transformer(VOCAB, preset=preset, apply_to=apply_to, max_length=n)
    assert model.count_params() == formula


def test_ran_e_base_is_smaller_than_transformer_base():
    assert (ran_transformer(8000, preset="base", apply_to="encoder").count_params()
            < transformer(8000, preset="base").count_params())


# ---- limits -----------------------------------------------------------------------


def _too_long(length, max_length):
    return {"source_ids": np.full((2, length), 5, "int32"),
            "target_ids": np.full((2, min(length, max_length)), 5, "int32")}


def test_too_long_input_is_a_clear_error_eagerly():
    model = ran_transformer(VOCAB, preset="tiny", apply_to="all", max_length=8)
    with pytest.raises(ValueError, match=r"length 10 but max_length is 8"):
        model(_too_long(10, 8))
    with pytest.raises(ValueError, match="max_length"):
        model.encode(np.full((1, 9), 5, "int32"))


def test_too_long_input_is_a_clear_error_in_a_graph():
    model = ran_transformer(VOCAB, preset="tiny", apply_to="encoder", max_length=8)
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[{"source_ids": spec, "target_ids": spec}])
    def forward(inputs):
        return model(inputs)

    assert forward(_too_long(8, 8)).shape == (2, 8, VOCAB)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)length\] \[10\].*max_length is 8"):
        forward(_too_long(10, 8))


def test_decoding_is_capped_at_max_length():
    """ceil(a*S+b) beyond n: EOS is forced at position n - 1, caches stay n long."""
    model = ran_transformer(VOCAB, preset="tiny", apply_to="decoder", max_length=8)
    source = np.full((2, 6), 7, "int32")
    np.testing.assert_array_equal(max_target_lengths(source, 2.0, 10, 8), [7, 7])
    for search in (beam_search, greedy_search):
        result = search(model, source, max_length_a=2.0, max_length_b=10)
        assert int(result["steps"]) <= 8
        assert (np.asarray(result["lengths"]) <= 7).all()
        assert np.isfinite(np.asarray(result["scores"])).all()
    traced = tf.function(lambda ids: beam_search(model, ids)["lengths"],
                         input_signature=[tf.TensorSpec([None, None], tf.int32)])
    assert (np.asarray(traced(source)) <= 7).all()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="apply_to"):
        ran_transformer(VOCAB, preset="tiny", apply_to="cross")
    with pytest.raises(TypeError, match="apply_to"):
        ran_transformer(VOCAB, preset="tiny", decoder_self_attention="multi_head")
    with pytest.raises(TypeError, match="transitio"):
        ran_transformer(VOCAB, preset="tiny",
                        attention_options={"recurrent": {"transitio": "ffn"}})
    with pytest.raises(ValueError, match="max_length"):
        ran_transformer(VOCAB, preset="tiny", max_length=None)

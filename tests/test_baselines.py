"""The RAN paper's baselines: hard-coded Gaussian attention and the Random Synthesizer."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.layers.hard_coded_gaussian_attention import (
    HardCodedGaussianAttention,
)
from keras_attn_zoo.layers.random_synthesizer_attention import (
    RandomSynthesizerAttention,
)
from keras_attn_zoo.models.baselines import hard_coded_transformer
from keras_attn_zoo.models.baselines import synthesizer_transformer
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.models.transformer import transformer
from keras_attn_zoo.training.seeding import seed_everything
from tests import model_checks
from tests.test_ran import MAX_LENGTH

VOCAB = 60
BUILDERS = {
    "hard_coded": hard_coded_transformer,
    "synthesizer": synthesizer_transformer,
}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def model(request):
    seed_everything(2)
    return BUILDERS[request.param](VOCAB, preset="tiny", max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def batch():
    return model_checks.random_batch(VOCAB)


class TestModelContract(model_checks.ModelContractWithBeamSearch):
    """Causality, padding, cached decoding, `.keras` round trip, beam search."""


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_short_training_lowers_the_loss(name, tiny_parallel_corpus, tiny_tokenizer):
    seed_everything(0)
    model = BUILDERS[name](zoo_data.vocabulary_size(tiny_tokenizer), preset="tiny",
                           max_length=MAX_LENGTH)
    model_checks.check_training_lowers_the_loss(model, tiny_parallel_corpus, tiny_tokenizer)


def test_both_self_attentions_are_replaced():
    hc = hard_coded_transformer(VOCAB, preset="tiny", max_length=8)
    syn = synthesizer_transformer(VOCAB, preset="tiny", max_length=8)
    for model, layer_type in ((hc, HardCodedGaussianAttention),
                              (syn, RandomSynthesizerAttention)):
        blocks = model.encoder_blocks + model.decoder_blocks
        assert all(isinstance(b.self_attention, layer_type) for b in blocks)
        assert not any(isinstance(b.cross_attention, layer_type)
                       for b in model.decoder_blocks)
    # Every layer has the same fixed pattern (2 heads at tiny).
    assert [b.self_attention.head_offsets() for b in hc.encoder_blocks] == [[-1, 1]] * 2
    assert [b.self_attention.head_offsets() for b in hc.decoder_blocks] == [[-1, 0]] * 2


# ---- hard-coded Gaussian attention --------------------------------------------------


def gaussian(distance, sigma=1.0):
    return np.exp(-(distance**2) / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))


def test_hard_coded_weights_are_the_unnormalised_gaussian_with_masked_keys_zero():
    layer = HardCodedGaussianAttention(num_heads=2, key_dim=4, offsets=(-1, 0))
    x = keras.random.normal((2, 6, 8), seed=0)
    real = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], bool)
    _, weights = layer(x, context_mask=real, causal=True, return_attention=True)
    weights = np.asarray(weights)
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    for head, offset in enumerate((-1, 0)):
        expected = gaussian(j - i - offset) * (j <= i) * real[:, None, :]
        np.testing.assert_allclose(weights[:, head], expected, atol=1e-6)
    # Not renormalised: the decoder's first row keeps only N(0; -1, 1) or N(0; 0, 1).
    np.testing.assert_allclose(weights[0, :, 0, 0], gaussian(np.array([1.0, 0.0])),
                               atol=1e-6)
    renormalised = HardCodedGaussianAttention(num_heads=2, key_dim=4, offsets=(-1, 0),
                                              renormalize=True)
    _, weights = renormalised(x, context_mask=real, causal=True, return_attention=True)
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-6)


def test_hard_coded_encoder_heads_alternate_minus_one_plus_one():
    layer = HardCodedGaussianAttention(num_heads=4, key_dim=2)
    assert layer.head_offsets() == [-1, 1, -1, 1]
    _, weights = layer(keras.random.normal((1, 7, 8), seed=1), return_attention=True)
    peaks = np.asarray(weights)[0, :, 3].argmax(-1)
    np.testing.assert_array_equal(peaks, [2, 4, 2, 4])


def test_hard_coded_attention_has_only_value_and_output_projections():
    d = 32
    layer = HardCodedGaussianAttention(num_heads=2, key_dim=d // 2)
    layer.build((None, None, d))
    assert layer.count_params() == 2 * (d * d + d)
    # Works for any length: there is no table.
    assert layer(keras.random.normal((1, 300, d), seed=2)).shape == (1, 300, d)


# ---- random synthesizer -------------------------------------------------------------


def test_synthesizer_rows_are_the_softmax_of_its_logits_over_visible_keys():
    layer = RandomSynthesizerAttention(num_heads=2, key_dim=4, max_length=8)
    x = keras.random.normal((2, 5, 8), seed=0)
    real = np.array([[1] * 5, [1, 1, 1, 0, 0]], bool)
    _, weights = layer(x, context_mask=real, causal=True, return_attention=True)
    weights = np.asarray(weights)
    visible = real[:, None, None, :] & np.tril(np.ones((5, 5), bool))
    logits = np.where(visible, layer.logits.numpy()[None, :, :5, :5], -np.inf)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(weights, expected / expected.sum(-1, keepdims=True),
                               atol=1e-6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)


def test_synthesizer_parameter_count():
    """Per layer h n^2 logits + value and output projections, no transition."""
    p = TRANSFORMER_PRESETS["tiny"]
    d, h, n = p["model_dim"], p["num_heads"], 16
    layers = p["num_encoder_layers"] + p["num_decoder_layers"]
    formula = (transformer(VOCAB, preset="tiny").count_params()
               - layers * 2 * (d * d + d) + layers * h * n * n)
    assert synthesizer_transformer(VOCAB, preset="tiny",
                                   max_length=n).count_params() == formula


def test_synthesizer_too_long_input_is_a_clear_error():
    model = synthesizer_transformer(VOCAB, preset="tiny", max_length=8)
    inputs = {"source_ids": np.full((1, 9), 5, "int32"),
              "target_ids": np.full((1, 4), 5, "int32")}
    with pytest.raises(ValueError, match="length 9 but max_length is 8"):
        model(inputs)
    spec = tf.TensorSpec([None, None], tf.int32)
    forward = tf.function(model.__call__,
                          input_signature=[{"source_ids": spec, "target_ids": spec}])
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length is 8"):
        forward(inputs)
    with pytest.raises(ValueError, match="max_length"):
        synthesizer_transformer(VOCAB, preset="tiny", max_length=None)

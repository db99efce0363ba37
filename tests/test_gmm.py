"""Gaussian-mixture cross-attention (Zhang & Feng, 2021): the layer and gmm_transformer."""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.decoding import beam_search
from keras_attn_zoo.layers.gaussian_mixture_cross_attention import (
    GaussianMixtureCrossAttention,
)
from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
from keras_attn_zoo.models.gmm_transformer import gmm_transformer
from keras_attn_zoo.models.transformer import transformer
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.optimizers import Adam
from tests import model_checks

VOCAB = 60
VARIANTS = ["approximate", "strict", "none"]
HEADS, KEY_DIM, WIDTH, K = 2, 8, 16, 4


def ffn_parameters(key_dim, components):
    """Eqs. 7-9 and 14: three `d_k -> d_k -> K` FFNs and one `d_k -> d_k -> 1` gate."""
    one = key_dim * key_dim + key_dim + key_dim * components + components
    gate = key_dim * key_dim + key_dim + key_dim + 1
    return 3 * one + gate


def make_layer(normalization="approximate", **kwargs):
    layer = GaussianMixtureCrossAttention(HEADS, KEY_DIM, normalization=normalization, **kwargs)
    layer.build((None, None, WIDTH), (None, None, WIDTH))
    return layer


def layer_inputs(lengths, source_length=None, target_length=5, seed=0):
    rng = np.random.default_rng(seed)
    source_length = source_length or max(lengths)
    query = rng.normal(size=(len(lengths), target_length, WIDTH)).astype("float32")
    context = rng.normal(size=(len(lengths), source_length, WIDTH)).astype("float32")
    mask = np.arange(source_length)[None, :] < np.asarray(lengths)[:, None]
    return query, context, mask


def components_of(layer, query, context, mask):
    _, parts = layer(query, context, context_mask=mask, return_components=True)
    return {name: np.asarray(value) for name, value in parts.items()}


def set_ffn(layer, name, bias, kernel_scale=1.0):
    """Scales the FFN's output kernel and sets its output bias (a K-vector or scalar)."""
    output = getattr(layer, f"{name}_output")
    output.kernel.assign(np.asarray(output.kernel) * kernel_scale)
    output.bias.assign(np.broadcast_to(np.asarray(bias, "float32"), output.bias.shape))


def logit(p):
    return math.log(p / (1.0 - p))


# ---- the layer ---------------------------------------------------------------------


@pytest.mark.parametrize("normalization", VARIANTS)
def test_shapes_gate_and_fusion(normalization):
    """Gate in (0, 1); gamma = (1 - g) alpha + g beta; alpha sums to one."""
    layer = make_layer(normalization)
    query, context, mask = layer_inputs([7, 4, 1])
    output, weights = layer(query, context, context_mask=mask, return_attention=True)
    assert output.shape == (3, 5, WIDTH)
    assert weights.shape == (3, HEADS, 5, 7) and weights.dtype == "float32"
    parts = components_of(layer, query, context, mask)
    assert parts["gate"].shape == (3, HEADS, 5)
    for name in ("omega", "mu", "sigma"):
        assert parts[name].shape == (3, HEADS, 5, K)
    assert ((parts["gate"] > 0) & (parts["gate"] < 1)).all()
    gate = parts["gate"][..., None]
    expected = (1 - gate) * parts["dot_product"] + gate * parts["mixture"]
    np.testing.assert_allclose(parts["fused"], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(parts["fused"], np.asarray(weights), atol=1e-7)
    np.testing.assert_allclose(parts["dot_product"].sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("normalization", ["approximate", "strict"])
def test_mixture_weights_sum_to_one_and_parameters_stay_in_range(normalization):
    layer = make_layer(normalization)
    lengths = np.array([9, 5, 2])
    query, context, mask = layer_inputs(lengths)
    # Push mu_hat and sigma_hat far out too, so the bounds of Eq. 12 bite.
    set_ffn(layer, "mu", [-5.0, -1.0, 1.0, 5.0])
    set_ffn(layer, "sigma", [-5.0, 0.0, 2.0, 5.0])
    parts = components_of(layer, query, context, mask)
    np.testing.assert_allclose(parts["omega"].sum(-1), 1.0, atol=1e-6)
    assert (parts["omega"] > 0).all()
    length = lengths[:, None, None, None].astype("float32")
    mu, sigma = parts["mu"], parts["sigma"]
    assert ((mu > 0) & (mu < length)).all(), "mu must lie inside (0, J)"
    assert (sigma >= layer.min_sigma).all() and (sigma > 0).all()
    if normalization == "approximate":
        # Eq. 12: the 3-sigma interval lies within [0, J] unless sigma is floored.
        floored = sigma <= layer.min_sigma * (1 + 1e-6)
        assert floored.any() and not floored.all()
        assert (sigma <= np.maximum(length / 6, layer.min_sigma) + 1e-6).all()
        tolerance = 1e-4 * length
        assert ((mu - 3 * sigma >= -tolerance) | floored).all()
        assert ((mu + 3 * sigma <= length + tolerance) | floored).all()
    else:
        # Strict normalisation: beta is a distribution over the real positions.
        np.testing.assert_allclose(parts["mixture"].sum(-1), 1.0, atol=1e-5)


def test_coverage_is_at_least_90_percent_when_sigma_is_at_least_half():
    """The paper's guarantee for approximate normalisation, and its limit.

    sigma >= 0.5 is forced through the FFN output biases (their kernels set
    to 0, so every query predicts the same mixture): sigma_hat = 3 makes
    `J/6 sigmoid(sigma_hat)` >= 0.5 for J >= 4, and the mu biases put the
    means at 1.5, 2.0 (between two cells), J/2 and J - 1.5, where Eq. 12's
    `mu/3`, `(J-mu)/3` bounds give sigma = 0.5 exactly for the outer ones.
    Then each Gaussian's 3-sigma interval lies within [0, J] and the sum over
    unit-spaced cell centres is within ~2% of the integral (midpoint rule), so
    beta sums to more than 0.9 over the real source. With sigma at the floor
    (0.1) and mu on a cell boundary the samples miss the peak: coverage ~0.
    """
    lengths = [12, 8, 6]
    query, context, mask = layer_inputs(lengths, source_length=15)
    for source_length in lengths:
        layer = make_layer("approximate")
        means = np.array([1.5, 2.0, source_length / 2, source_length - 1.5])
        set_ffn(layer, "mu", [logit(m / source_length) for m in means], kernel_scale=0.0)
        set_ffn(layer, "sigma", 3.0, kernel_scale=0.0)
        row = lengths.index(source_length)
        parts = components_of(layer, query[row:row + 1], context[row:row + 1],
                              mask[row:row + 1])
        np.testing.assert_allclose(parts["mu"][0, 0, 0], means, rtol=1e-5)
        assert (parts["sigma"] >= 0.5 - 1e-6).all()
        assert parts["sigma"].min() < 0.5 + 1e-5  # the boundary case is tested
        coverage = parts["mixture"].sum(-1)
        assert (coverage >= 0.9).all(), coverage.min()
        assert (parts["mixture"][..., source_length:] == 0).all()

    # Below sigma ~ 0.3 the guarantee is gone: sigma floored, mu = J / 2 = 6.0
    # (a cell boundary for the centres 5.5 and 6.5).
    layer = make_layer("approximate")
    set_ffn(layer, "mu", 0.0, kernel_scale=0.0)
    set_ffn(layer, "sigma", -20.0, kernel_scale=0.0)
    parts = components_of(layer, query[:1], context[:1], mask[:1])
    np.testing.assert_allclose(parts["sigma"], layer.min_sigma, rtol=1e-6)
    assert parts["mixture"].sum(-1).max() < 0.01


@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")
@pytest.mark.parametrize("normalization", VARIANTS)
@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_single_token_source_is_finite(normalization, policy):
    """J = 1 drives Eq. 12's bounds to sigma <= 1/6 (to 0 at extreme mu): floored, no NaN."""
    layer = GaussianMixtureCrossAttention(
        HEADS, KEY_DIM, normalization=normalization, dtype=policy
    )
    layer.build((None, None, WIDTH), (None, None, WIDTH))
    query, context, mask = layer_inputs([1, 1], source_length=3)
    set_ffn(layer, "mu", [-30.0, -0.5, 0.5, 30.0])  # mu at 0, inside, at J
    set_ffn(layer, "sigma", [-30.0, 0.0, 0.0, 30.0])
    for m in (mask, mask[:, :1]):
        c = context[:, : m.shape[1]]
        output, parts = layer(query, c, context_mask=m, return_components=True)
        assert np.isfinite(np.asarray(output, "float32")).all()
        for name, value in parts.items():
            assert np.isfinite(np.asarray(value)).all(), name
        assert (np.asarray(parts["fused"])[..., 1:] == 0).all()
    if policy == "float32":  # gradients too
        variables = layer.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(query, context, context_mask=mask) ** 2)
        gradients = tape.gradient(loss, variables)
        assert all(np.isfinite(g.numpy()).all() for g in gradients if g is not None)


@pytest.mark.parametrize("normalization", VARIANTS)
def test_padded_source_positions_change_nothing_and_get_zero_weight(normalization):
    layer = make_layer(normalization)
    query, context, mask = layer_inputs([6, 3, 5])
    reference, ref_parts = layer(query, context, context_mask=mask, return_components=True)
    rng = np.random.default_rng(1)
    padded_context = np.concatenate([context, rng.normal(size=(3, 4, WIDTH))], 1)
    padded_context = padded_context.astype("float32")
    padded_mask = np.pad(mask, [[0, 0], [0, 4]])
    # The padded positions of the reference hold garbage too: scramble them.
    padded_context[~padded_mask] = rng.normal(size=padded_context[~padded_mask].shape)
    output, parts = layer(query, padded_context, context_mask=padded_mask,
                          return_components=True)
    np.testing.assert_allclose(np.asarray(output), np.asarray(reference), atol=1e-5)
    for name in ("dot_product", "mixture", "fused"):
        weights = np.asarray(parts[name])
        assert (weights[np.broadcast_to(~padded_mask[:, None, None, :], weights.shape)] == 0).all()
        np.testing.assert_allclose(weights[..., :6], np.asarray(ref_parts[name]), atol=1e-6)


def test_synthesis_network_means_never_move_backwards():
    """`"none"`: mu_i = mu_{i-1} + exp(mu_hat_i), in teacher forcing and in steps."""
    layer = make_layer("none")
    query, context, mask = layer_inputs([7, 4], target_length=6)
    parts = components_of(layer, query, context, mask)
    steps = np.diff(parts["mu"], axis=2)
    assert (steps > 0).all()
    assert (parts["mu"][:, :, 0] > 0).all()  # mu_{-1} = 0
    # Step decoding carries mu in the cache and gives the same weights.
    cache = layer.initial_cache(2, 6, context)
    assert tuple(cache["previous_mu"].shape) == (2, HEADS, K)
    for t in range(6):
        _, cache, weights = layer.step(query[:, t:t + 1], t, cache, context_mask=mask)
        np.testing.assert_allclose(np.asarray(cache["previous_mu"]),
                                   parts["mu"][:, :, t], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(weights)[:, :, 0],
                                   parts["fused"][:, :, t], rtol=1e-4, atol=1e-6)


def test_layer_config_round_trip_and_bad_arguments():
    layer = make_layer("strict", num_components=3, min_sigma=0.2, position_offset=0.0)
    clone = GaussianMixtureCrossAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    # 3 (d_k^2 + d_k + d_k K + K) + (d_k^2 + 2 d_k + 1) on top of the four projections.
    assert layer.count_params() == 4 * (WIDTH * WIDTH + WIDTH) + ffn_parameters(KEY_DIM, 3)
    with pytest.raises(ValueError, match="normalization"):
        GaussianMixtureCrossAttention(2, 8, normalization="exact")
    with pytest.raises(ValueError, match="cross-attention only"):
        layer(np.zeros((1, 2, WIDTH), "float32"))


# ---- the model ---------------------------------------------------------------------


@pytest.fixture(scope="module", params=VARIANTS)
def model(request):
    return gmm_transformer(VOCAB, preset="tiny", normalization=request.param,
                           num_decoder_layers=2)


@pytest.fixture(scope="module")
def batch():
    return model_checks.random_batch(VOCAB)


class TestModelContract(model_checks.ModelContract):
    """Causality, padding, cached decoding and a `.keras` round trip that
    keeps the GMM cross-attention and its normalisation."""

    keras_file = "gmm.keras"

    def check_restored(self, model, restored):
        layer = restored.decoder_blocks[0].cross_attention
        assert isinstance(layer, GaussianMixtureCrossAttention)
        assert layer.normalization == model.zoo_config["attention_options"][
            "gaussian_mixture"]["normalization"]


def test_beam_search_runs(model, batch):
    result = beam_search(model, batch["source_ids"], beam_size=2, max_length_b=4)
    assert result["ids"].shape[:2] == (3, 1)
    assert np.isfinite(result["scores"].numpy()).all()
    alignment = result["alignment"].numpy()
    assert np.isfinite(alignment).all()
    assert (alignment[..., batch["source_ids"].shape[1] - 1:][1:] == 0).all()  # padding


@pytest.mark.parametrize("normalization", VARIANTS)
def test_short_training_lowers_the_loss(normalization, tiny_parallel_corpus, tiny_tokenizer):
    model = gmm_transformer(zoo_data.vocabulary_size(tiny_tokenizer), preset="tiny",
                            normalization=normalization)
    dataset, _ = zoo_data.make_dataset(tiny_parallel_corpus, tiny_tokenizer,
                                       batch_tokens=600, max_length=32, seed=0)
    # One fixed batch shape: the train step is traced once instead of twice.
    dataset = dataset.unbatch().padded_batch(
        16, padded_shapes=({"source_ids": [32], "target_ids": [32]}, [32]),
        drop_remainder=True,
    )
    trainer = Trainer(model, Adam(3e-3))
    losses = []

    class Record:
        def on_step_end(self, trainer, step, logs):
            losses.append(logs["loss"])

    trainer.callbacks.append(Record())
    trainer.train(lambda epoch: dataset, max_steps=15, verbose=0)
    assert np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses


def test_base_adds_about_0_1m_parameters():
    """Paper Table 2: Transformer-base 63.1M -> 63.2M.

    Eqs. 7-9 and 14 with d_q = d_k = 64, K = 4, FFNs shared by the 8 heads:
    3 (64*64 + 64 + 64*4 + 4) + (64*64 + 64 + 64 + 1) = 17,485 per decoder
    layer, 104,910 for 6 layers: inside the paper's +0.1M (rounded) range.
    (The baseline is `transformer(32000, preset="base")`'s count by formula,
    which tests/test_transformer.py checks; building a second 60M-parameter
    model costs ~6 s on the test machine.)
    """
    difference = (gmm_transformer(32000, preset="base").count_params()
                  - model_checks.transformer_parameters(32000, "base"))
    assert difference == 6 * ffn_parameters(64, 4) == 104_910
    assert 80_000 <= difference <= 130_000
    tiny = transformer(VOCAB, preset="tiny")
    assert tiny.count_params() == model_checks.transformer_parameters(VOCAB, "tiny")


def test_gmm_layers_only_change_the_chosen_layers(batch):
    """`gmm_layers=[1]`: blocks 0 and 2 keep dot-product attention, and with
    block 1's gate closed (g = 0) the model equals the Transformer with the
    same weights."""
    kwargs = dict(preset="tiny", num_decoder_layers=3)
    gmm = gmm_transformer(VOCAB, gmm_layers=[1], **kwargs)
    plain = transformer(VOCAB, **kwargs)
    kinds = [type(block.cross_attention) for block in gmm.decoder_blocks]
    assert kinds == [MultiHeadAttention, GaussianMixtureCrossAttention, MultiHeadAttention]
    assert gmm.count_params() - plain.count_params() == ffn_parameters(16, 4)
    assert gmm_transformer(VOCAB, gmm_layers=[-1], **kwargs).zoo_config[
        "attention_options"]["gaussian_mixture"]["gmm_layers"] == [2]

    gmm_weights = {v.path: v for v in gmm.weights}
    for variable in plain.weights:
        variable.assign(gmm_weights[variable.path])
    assert not np.allclose(model_checks.logits(gmm, batch), model_checks.logits(plain, batch))
    gmm.decoder_blocks[1].cross_attention.gate_output.bias.assign([-1e4])
    np.testing.assert_allclose(model_checks.logits(gmm, batch),
                               model_checks.logits(plain, batch), atol=1e-5)


def test_bad_builder_arguments_are_named():
    with pytest.raises(ValueError, match="normalization"):
        gmm_transformer(VOCAB, preset="tiny", normalization="softmax")
    with pytest.raises(ValueError, match="out of range"):
        gmm_transformer(VOCAB, preset="tiny", gmm_layers=[3])
    with pytest.raises(TypeError, match="cross_attention"):
        gmm_transformer(VOCAB, preset="tiny", cross_attention="multi_head")

"""The Transformer baseline: causality, padding, caching, saving, presets."""

import numpy as np
import pytest

from keras_attn_zoo.models import transformer
from tests import model_checks

VOCAB = 60


@pytest.fixture(scope="module", params=[False, True], ids=["post_norm", "pre_norm"])
def model(request):
    return transformer(VOCAB, preset="tiny", norm_first=request.param)


@pytest.fixture(scope="module")
def batch():
    return model_checks.random_batch(VOCAB)


def test_output_is_float32_logits(model, batch):
    out = np.asarray(model(batch))
    assert out.shape == batch["target_ids"].shape + (VOCAB,)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()


def test_decoder_is_causal(model, batch):
    model_checks.check_causality(model, batch)


def test_padding_does_not_change_real_tokens(model, batch):
    model_checks.check_padding_invariance(model, batch)


def test_cached_decoding_equals_full_pass(model, batch):
    model_checks.check_cached_decoding(model, batch)


def test_keras_file_round_trip(model, batch, tmp_path):
    restored = model_checks.check_keras_round_trip(model, batch, tmp_path / "m.keras")
    assert restored.get_config() == model.get_config()


def test_output_embedding_is_tied_and_tracked(batch):
    """The output layer reads the live embedding weight, not a frozen copy."""
    model = transformer(VOCAB, preset="tiny")
    before = np.asarray(model(batch))
    weight = model.embedding.embeddings
    weight.assign(weight.numpy() * 2.0)
    after = np.asarray(model(batch))
    assert not np.allclose(before, after)
    assert len(model.trainable_weights) == len({id(w) for w in model.trainable_weights})


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_preset_parameter_counts_follow_the_formula(preset):
    """Shared embeddings + per-layer attention, FFN and layer norms."""
    from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS

    p = TRANSFORMER_PRESETS[preset]
    d, f = p["model_dim"], p["intermediate_dim"]
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    encoder_layer = attention + ffn + 2 * 2 * d
    decoder_layer = 2 * attention + ffn + 3 * 2 * d
    formula = (
        8000 * d
        + p["num_encoder_layers"] * encoder_layer
        + p["num_decoder_layers"] * decoder_layer
    )
    assert transformer(8000, preset=preset).count_params() == formula


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="preset"):
        transformer(100, preset="huge")
    with pytest.raises(TypeError, match="num_layerz"):
        transformer(100, preset="tiny", num_layerz=3)
    with pytest.raises(ValueError, match="divisible"):
        transformer(100, preset="tiny", num_heads=3)

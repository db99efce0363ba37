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


class TestModelContract(model_checks.ModelContract):
    """Causality, padding, cached decoding and `.keras` round trip."""


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
    formula = model_checks.transformer_parameters(8000, preset)
    assert transformer(8000, preset=preset).count_params() == formula


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="preset"):
        transformer(100, preset="huge")
    with pytest.raises(TypeError, match="num_layerz"):
        transformer(100, preset="tiny", num_layerz=3)
    with pytest.raises(ValueError, match="divisible"):
        transformer(100, preset="tiny", num_heads=3)


def test_model_options_parse_json_values_and_name_bad_items():
    from keras_attn_zoo.models import parse_model_options

    assert parse_model_options("norm_first=true; num_heads=8;apply_to=all") == {
        "norm_first": True, "num_heads": 8, "apply_to": "all"}
    assert parse_model_options("") == {}
    with pytest.raises(ValueError, match="'norm_first' is not key=value"):
        parse_model_options("norm_first")

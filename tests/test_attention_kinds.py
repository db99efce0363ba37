"""Adding an attention kind is a layer, one registration and a model: a toy kind.

The toy attends uniformly over the keys it may see (unpadded, and causally
allowed in the decoder): a fixed pattern of zeros, softmaxed over the mask.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn_zoo.evaluation import flops
from keras_attn_zoo.evaluation.attention import attention_maps
from keras_attn_zoo.layers.fixed_pattern_attention import FixedPatternAttention
from keras_attn_zoo.models import Seq2SeqTransformer
from keras_attn_zoo.models import register_attention_kind
from keras_attn_zoo.models.attention_kinds import attention_kind
from keras_attn_zoo.models.attention_kinds import kind_options
from tests import model_checks

VOCAB = 64
KIND = "toy_uniform"


@keras.saving.register_keras_serializable(package="keras_attn_zoo_tests")
class UniformAttention(FixedPatternAttention):
    """Every visible key gets the same weight (zero logits, masked softmax)."""

    def _pattern(self, query_start, query_length, key_length):
        return ops.zeros((self.num_heads, query_length, key_length))


register_attention_kind(
    KIND,
    lambda slot, index, config: UniformAttention(
        config["num_heads"], config["model_dim"] // config["num_heads"],
        name=f"{slot}_uniform_attention_{index}"),
    fixed_pattern=True,  # no scores: value and output projections only
)


def build(vocabulary_size=VOCAB, **overrides):
    arguments = dict(model_dim=32, intermediate_dim=64, num_heads=2,
                     num_encoder_layers=2, num_decoder_layers=2, dropout=0.0,
                     encoder_self_attention=KIND, decoder_self_attention=KIND,
                     cross_attention=KIND)
    return Seq2SeqTransformer(vocabulary_size, **{**arguments, **overrides})


@pytest.fixture(scope="module")
def model():
    return build()


@pytest.fixture(scope="module")
def batch():
    return model_checks.random_batch(VOCAB)


def test_training_lowers_the_loss(tiny_parallel_corpus, tiny_tokenizer):
    model = build(vocabulary_size=tiny_tokenizer.vocabulary_size())
    model_checks.check_training_lowers_the_loss(model, tiny_parallel_corpus,
                                                tiny_tokenizer)


def test_cached_step_decoding_equals_the_full_pass(model, batch):
    model_checks.check_cached_decoding(model, batch)


def test_keras_file_round_trip(model, batch, tmp_path):
    restored = model_checks.check_keras_round_trip(model, batch, tmp_path / "toy.keras")
    assert isinstance(restored.decoder_blocks[1].cross_attention, UniformAttention)


def test_attention_maps_are_uniform_over_the_visible_keys(model, batch):
    maps = attention_maps(model, batch["source_ids"], batch["target_ids"])
    assert sorted(maps) == ["cross", "decoder_self", "encoder_self"]
    source_real = batch["source_ids"] != 0
    cross = maps["cross"]  # [L, B, h, T, S]
    assert cross.shape == (2, 3, 2, 6, 7)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-6)
    expected = source_real / source_real.sum(-1, keepdims=True)  # [B, S]
    np.testing.assert_allclose(cross, np.broadcast_to(expected[None, :, None, None],
                                                      cross.shape), atol=1e-6)
    decoder = maps["decoder_self"][0, 0, 0]  # first sentence: no padding
    np.testing.assert_allclose(decoder, np.tril(np.ones((6, 6))) /
                               np.arange(1, 7)[:, None], atol=1e-6)
    np.testing.assert_allclose(maps["encoder_self"].sum(-1), 1.0, atol=1e-6)


def test_the_flop_counter_counts_it():
    config = build().zoo_config
    plain = dict(config, encoder_self_attention="multi_head",
                 decoder_self_attention="multi_head", cross_attention="multi_head")
    toy = flops.forward_flops(config, 1, 7, 6)
    # A fixed pattern drops the query and key projections and the scores.
    assert 0 < toy["total"] < flops.forward_flops(plain, 1, 7, 6)["total"]
    d = 32
    per_query = 2 * (2 * d * d) + 2 * d * 7  # value, output and the sum over 7 keys
    assert toy["encoder"] == 2 * 7 * (per_query + 2 * 2 * d * 64)


def test_records_fill_options_and_refuse_misplaced_ones():
    assert attention_kind(KIND).uses_feed_forward
    config = {"attention_options": {"gaussian_mixture": {"num_components": 2}},
              "cross_attention": "gaussian_mixture"}
    assert kind_options(config, "gaussian_mixture")["normalization"] == "approximate"
    # One layout for every builder: options nest under the kind's name.
    from keras_attn_zoo.models import gmm_transformer

    gmm = gmm_transformer(VOCAB, preset="tiny", num_components=2)
    assert gmm.zoo_config["attention_options"]["gaussian_mixture"]["num_components"] == 2
    with pytest.raises(ValueError, match="num_components"):
        build(attention_options={"num_components": 2})
    with pytest.raises(ValueError, match="cross-attention only"):
        build(encoder_self_attention="gaussian_mixture")

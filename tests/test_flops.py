"""The FLOP counter (keras_attn_zoo.evaluation.flops) against hand counts and XLA."""

import pytest

from keras_attn_zoo.evaluation import flops

# One encoder and one decoder layer: d = 4, FFN 8, 2 heads, vocabulary 10;
# one sentence pair of S = 3 source and T = 2 target tokens.
TOY = dict(vocabulary_size=10, model_dim=4, intermediate_dim=8, num_heads=2,
           num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
           encoder_self_attention="multi_head", decoder_self_attention="multi_head",
           cross_attention="multi_head", attention_options={}, max_length=None)


def test_one_layer_transformer_matches_a_hand_count():
    # Per source token, encoder self-attention: Q, K, V, O projections
    # 4 * (2*4*4) = 128; scores q.k over 3 keys 2*3*4 = 24 and the weighted sum
    # 2*3*4 = 24 (all heads together); FFN 2*4*8 + 2*8*4 = 128.  -> 304
    encoder = 3 * (128 + 24 + 24 + 128)
    # Per target token, decoder self-attention over 2 keys: 128 + 2*(2*2*4) = 160;
    # cross-attention Q and O 2 * 32 = 64 plus scores and sum over 3 keys 48 -> 112;
    # FFN 128. Cross-attention K and V per source token: 2 * 32 = 64.
    decoder = 2 * (160 + 112 + 128) + 3 * 64
    output = 2 * (2 * 4 * 10)  # tied output layer, per target token
    assert (encoder, decoder, output) == (912, 992, 160)

    counted = flops.forward_flops(TOY, batch_size=1, source_length=3, target_length=2)
    assert counted["encoder"] == encoder
    assert counted["decoder"] == decoder
    assert counted["output"] == output
    assert counted["total"] == 2064

    training = flops.training_flops(TOY, 1, 3, 2)
    assert training["total"] == 3 * 2064  # backward = 2 x forward
    assert training["per_target_token"] == 3 * 2064 / 2
    # The batch scales everything linearly.
    assert flops.forward_flops(TOY, 5, 3, 2)["total"] == 5 * 2064


def test_decoding_counts_one_step_per_token_with_growing_caches():
    # Encoder as above (912), cross K/V of the 3 source tokens once (192), then
    # T + 1 = 3 steps (2 tokens + EOS), step t attending over t + 1 cached keys:
    # self-attention 128 + 2*2*(t+1)*4, cross 112, FFN 128, output 80.
    steps = sum(128 + 16 * (t + 1) + 112 + 128 for t in range(3))
    expected = 912 + 192 + steps + 3 * 80
    assert flops.decoding_flops(TOY, source_length=3, target_length=2)["total"] == expected
    # A beam multiplies everything but the encoder and the cross K/V projections.
    beam = flops.decoding_flops(TOY, 3, 2, beam_size=4)["total"]
    assert beam == 912 + 192 + 4 * (steps + 3 * 80)


def test_branch_ffns_follow_the_builders_width_rule():
    # TOY with encoder self and cross branched: M = 2 branch FFNs of width f_b
    # cost 2 * 4 d f_b per query token: 128 at the default f_b = f / M = 4,
    # 256 with "full" (f_b = f = 8), on 3 encoder + 2 cross query tokens.
    weighted = dict(TOY, encoder_self_attention="branched_weighted",
                    cross_attention="branched_weighted")

    def total(**options):
        config = dict(weighted, attention_options=options)
        return flops.forward_flops(config, 1, 3, 2)["total"]

    default = total()
    assert total(branch_intermediate_dim="split") == default
    assert total(branch_intermediate_dim=None) == default
    assert total(branch_intermediate_dim="full") - default == 5 * (256 - 128)
    assert total(branch_intermediate_dim=6) - default == 5 * 2 * 4 * 4 * (6 - 4)
    with pytest.raises(ValueError, match="branch_intermediate_dim"):
        total(branch_intermediate_dim="half")


def test_mfu():
    assert flops.mfu(100e9, 2.0, 100e9) == pytest.approx(0.5)


@pytest.mark.parametrize("builder,kwargs", [
    ("transformer", {}),
    ("ran_transformer", {"apply_to": "all", "max_length": 16}),
    ("weighted_transformer", {}),
])
def test_counter_matches_xla_and_the_tf_profiler_on_tiny_models(builder, kwargs):
    import tensorflow as tf

    from keras_attn_zoo.models import build_model

    model = build_model(builder, 50, preset="tiny", **kwargs)
    source = tf.constant([[5, 6, 7, 8, 3]] * 2, tf.int32)
    target = tf.constant([[2, 7, 8, 9]] * 2, tf.int32)

    def forward(source_ids, target_ids):
        return model({"source_ids": source_ids, "target_ids": target_ids},
                     training=False)

    counted = flops.forward_flops(model, 2, 5, 4)["total"]
    assert flops.xla_forward_flops(forward, source, target) == counted
    if builder != "weighted_transformer":  # its branch sums are einsums: not profiled
        assert flops.profiler_matmul_flops(forward, source, target) == counted


def test_hlo_parser_on_a_known_dot():
    hlo = """
    %p0 = f32[2,3,5]{2,1,0} parameter(0)
    %p1 = f32[5,7]{1,0} parameter(1)
    ROOT %dot.1 = f32[2,3,7]{2,1,0} dot(%p0, %p1), lhs_contracting_dims={2}, rhs_contracting_dims={0}
    """
    assert flops.hlo_dot_flops(hlo) == 2 * 2 * 3 * 7 * 5


def test_unknown_config_is_a_clear_error():
    with pytest.raises(ValueError, match="No FLOP model"):
        flops.forward_flops({"units": 3}, 1, 1, 1)

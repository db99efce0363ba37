"""Every published zoo model decodes what it trains, at 2 + 2 layers.

The per-model test files run the whole model contract on their option
variants; this file makes sure no builder is left out of the core check.
"""

import pytest

from keras_attn_zoo.decoding.consistency import step_decoding_divergence
from keras_attn_zoo.models import MODEL_BUILDERS
from keras_attn_zoo.models import MODEL_VARIANTS
from keras_attn_zoo.models import build_model
from keras_attn_zoo.training.seeding import seed_everything
from tests import model_checks

VOCAB = 60
FIXED_LENGTH = {"ran_transformer", "hard_coded_transformer", "synthesizer_transformer"}


def test_every_builder_has_a_published_variant():
    assert {builder for builder, _ in MODEL_VARIANTS.values()} == set(MODEL_BUILDERS)


@pytest.mark.parametrize("label", sorted(MODEL_VARIANTS))
def test_teacher_forced_pass_equals_step_decoding(label):
    builder, options = MODEL_VARIANTS[label]
    if builder in FIXED_LENGTH:
        options = {**options, "max_length": 32}
    seed_everything(3)
    model = build_model(builder, VOCAB, preset="tiny", **options)
    if builder != "bahdanau_rnn":  # RNNsearch: one GRU each side, as published
        assert min(model_checks.stack_depths(model)) >= 2
    # Equal source and target lengths (the eager model needs them), ids below
    # the eager model's three special ids.
    batch = model_checks.random_batch(VOCAB - 3, batch=3, source_length=7,
                                      target_length=7, seed=4)
    divergence = step_decoding_divergence(model, batch["source_ids"], batch["target_ids"])
    assert divergence < model_checks.STEP_ATOL, f"{label}: {divergence}"

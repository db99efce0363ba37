"""Behaviour checks every zoo model must pass, shared by the model test files.

Each takes a built model with the zoo's inputs `{"source_ids", "target_ids"}`
and raises an AssertionError naming what broke.
"""

import numpy as np

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.decoding import beam_search
from keras_attn_zoo.decoding.consistency import step_decoding_divergence
from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.optimizers import Adam

ATOL = 1e-4
# The teacher-forced pass and step decoding run the same float32 ops on
# differently shaped tensors: they agree to rounding, far below 1e-5.
STEP_ATOL = 1e-5


def random_batch(vocabulary_size, batch=3, source_length=7, target_length=6, seed=0):
    """Random ids in [4, vocab) with ragged real lengths and 0-padding."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocabulary_size, (batch, source_length)).astype("int32")
    target = rng.integers(4, vocabulary_size, (batch, target_length)).astype("int32")
    target[:, 0] = 2  # BOS
    for row in range(1, batch):  # every row but the first is shorter
        source[row, source_length - row:] = 0
        target[row, target_length - row:] = 0
    return {"source_ids": source, "target_ids": target}


def logits(model, batch):
    return np.asarray(model(batch, training=False))


def check_causality(model, batch):
    """Changing target tokens after position t leaves logits at <= t unchanged."""
    reference = logits(model, batch)
    length = batch["target_ids"].shape[1]
    for t in range(1, length - 1):
        changed = {k: v.copy() for k, v in batch.items()}
        changed["target_ids"][:, t + 1:] = (changed["target_ids"][:, t + 1:] + 1) % 50 + 4
        out = logits(model, changed)
        np.testing.assert_allclose(
            out[:, : t + 1], reference[:, : t + 1], atol=ATOL,
            err_msg=f"logits at positions <= {t} changed with later tokens",
        )


def check_padding_invariance(model, batch, extra=3):
    """Extra padding on source and target does not change real positions."""
    reference = logits(model, batch)
    padded = {k: np.pad(v, [[0, 0], [0, extra]]) for k, v in batch.items()}
    out = logits(model, padded)
    real = batch["target_ids"] != 0
    np.testing.assert_allclose(
        out[:, : reference.shape[1]][real], reference[real], atol=ATOL,
        err_msg="padding changed the logits of real tokens",
    )


def check_keras_round_trip(model, batch, path):
    """A `.keras` file reloads to a model with the same outputs."""
    import keras

    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(
        logits(restored, batch), logits(model, batch), atol=1e-6,
        err_msg=".keras round trip changed the outputs",
    )
    return restored


def check_cached_decoding(model, batch, atol=STEP_ATOL):
    """Step-by-step decoding with caches equals the teacher-forced pass."""
    diff = step_decoding_divergence(model, batch["source_ids"], batch["target_ids"])
    assert diff < atol, f"cached decoding differs from the full pass by {diff}"


def stack_depths(model):
    """`(encoder layers, decoder layers)` of a zoo model."""
    config = model.zoo_config
    if "num_encoder_layers" in config:
        return config["num_encoder_layers"], config["num_decoder_layers"]
    # The eager translator's single stack of LSTMs is its encoder and decoder.
    return config["num_layers"], config["num_layers"]


def check_beam_search(model, batch):
    """Beam search runs eagerly and returns finite scores and sane lengths."""
    result = beam_search(model, batch["source_ids"], beam_size=3, max_length_a=1.0,
                         max_length_b=3)
    scores = np.asarray(result["scores"])
    assert scores.shape == (batch["source_ids"].shape[0], 1)
    assert np.isfinite(scores).all() and (scores > -1e8).all(), scores
    assert (np.asarray(result["lengths"]) <= batch["source_ids"].shape[1] + 3).all()


def check_training_lowers_the_loss(model, corpus, tokenizer, steps=20, max_length=32):
    """A short run on a batch of the tiny corpus lowers the training loss clearly.

    One batch, repeated: a single traced step keeps the test fast.
    """
    dataset, _ = zoo_data.make_dataset(corpus, tokenizer, batch_tokens=600,
                                       max_length=max_length, seed=0)
    dataset = dataset.take(1).cache().repeat()
    trainer = Trainer(model, Adam(3e-3), label_smoothing=0.0,
                      checkpoint_every=0)
    losses = []

    class Record:
        def on_step_end(self, trainer, step, logs):
            losses.append(logs["loss"])

    trainer.callbacks.append(Record())
    trainer.train(lambda epoch: dataset, max_steps=steps, verbose=0)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses


def transformer_parameters(vocabulary_size, preset):
    """`transformer(vocabulary_size, preset=preset)`'s exact parameter count.

    Shared embeddings + per-layer attention, FFN and layer norms, plus one
    final layer norm per stack when the preset is pre-norm (checked against
    the model by tests/test_transformer.py).
    """
    p = TRANSFORMER_PRESETS[preset]
    d, f = p["model_dim"], p["intermediate_dim"]
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    encoder_layer = attention + ffn + 2 * 2 * d
    decoder_layer = 2 * attention + ffn + 3 * 2 * d
    final_norms = 2 * 2 * d if p.get("norm_first") else 0
    return (vocabulary_size * d + p["num_encoder_layers"] * encoder_layer
            + p["num_decoder_layers"] * decoder_layer + final_norms)


class ModelContract:
    """The model contract as pytest tests, for a model's test module to inherit.

    The module defines `model` (parametrised over its variants) and `batch`
    fixtures and a `Test...(model_checks.ModelContract)` class; each check
    above then runs as its own test for every variant. `keras_file` names the
    saved file; override `check_restored` for model-specific checks on the
    reloaded model (its config is always compared).
    """

    keras_file = "m.keras"

    def test_every_stack_has_at_least_two_layers(self, model):
        # One layer hides wiring bugs between layers (issue 14: every RAN
        # block was given the last layer's matrix).
        assert min(stack_depths(model)) >= 2, stack_depths(model)

    def test_decoder_is_causal(self, model, batch):
        check_causality(model, batch)

    def test_padding_does_not_change_real_tokens(self, model, batch):
        check_padding_invariance(model, batch)

    def test_cached_decoding_equals_full_pass(self, model, batch):
        check_cached_decoding(model, batch)

    def test_keras_file_round_trip(self, model, batch, tmp_path):
        restored = check_keras_round_trip(model, batch, tmp_path / self.keras_file)
        assert restored.get_config() == model.get_config()
        self.check_restored(model, restored)

    def check_restored(self, model, restored):
        """Hook: further checks of a reloaded `.keras` model."""


class ModelContractWithBeamSearch(ModelContract):
    """`ModelContract` plus `check_beam_search`."""

    def test_beam_search_returns_finite_scores(self, model, batch):
        check_beam_search(model, batch)

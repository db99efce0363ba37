"""Model sizes shared by every Transformer-family builder.

`base` and `big` are Vaswani et al.'s, post-norm as in the paper. `small` is the
CPU preset, for runs of minutes on two cores: 2 + 2 pre-norm layers
(`norm_first=True`). In 10-minute runs on the Ding sentences (same load, 500
test sentences, beam 4) the post-norm 3 + 3 model at learning rate 1e-3 reached
BLEU 0.11 / chrF 7.92, pre-norm 3 + 3 at 2e-3 0.42 / 10.08 and pre-norm 2 + 2 at
2e-3 1.13 / 11.65 (docs/measurements.md). `tiny` (2 + 2 layers) exists for tests.
"""

import inspect

TRANSFORMER_PRESETS = {
    # Two layers per stack: one layer would hide wiring bugs between layers.
    "tiny": dict(model_dim=32, intermediate_dim=64, num_heads=2,
                 num_encoder_layers=2, num_decoder_layers=2, dropout=0.0),
    "small": dict(model_dim=256, intermediate_dim=1024, num_heads=4,
                  num_encoder_layers=2, num_decoder_layers=2, dropout=0.1,
                  norm_first=True),
    "base": dict(model_dim=512, intermediate_dim=2048, num_heads=8,
                 num_encoder_layers=6, num_decoder_layers=6, dropout=0.1),
    "big": dict(model_dim=1024, intermediate_dim=4096, num_heads=16,
                num_encoder_layers=6, num_decoder_layers=6, dropout=0.3),
}


def resolve_preset(presets, preset, overrides, valid_keys):
    """Merges `overrides` into `presets[preset]`, naming any unknown key or preset."""
    if preset not in presets:
        raise ValueError(
            f"Unknown preset {preset!r}; choose one of {sorted(presets)}."
        )
    unknown = sorted(set(overrides) - set(valid_keys))
    if unknown:
        raise TypeError(
            f"Unknown argument(s) {unknown}; valid ones are {sorted(valid_keys)}."
        )
    return {**presets[preset], **overrides}


def constructor_arguments(model_class, fixed=()):
    """Keyword arguments a builder of `model_class` accepts: `__init__`'s, less `fixed`.

    `vocabulary_size` is positional in every builder and `**kwargs` is Keras's;
    `name` is accepted. `fixed`: arguments the builder sets itself (the slot a
    mechanism fills), so an override cannot contradict the model's name.
    """
    parameters = inspect.signature(model_class.__init__).parameters.values()
    names = {parameter.name for parameter in parameters
             if parameter.kind is parameter.POSITIONAL_OR_KEYWORD}
    return frozenset((names - {"self", "vocabulary_size"} | {"name"}) - set(fixed))

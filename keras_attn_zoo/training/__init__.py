"""Losses, schedules, strategy selection and the training loop.

The names below are imported on first use (PEP 562): the loss and the
schedule are `keras.ops` code that runs on any Keras backend, so a JAX machine
without TensorFlow (`recipes/recipe_screen.py`) can use them; the `Trainer`,
the callbacks and the strategies import TensorFlow when first used.
"""

import importlib

# public name -> the submodule that defines it
_EXPORTS = {
    "default_callbacks": "callbacks",
    "LabelSmoothedCrossEntropy": "losses",
    "token_loss_sum": "losses",
    "InverseSquareRootSchedule": "schedules",
    "seed_everything": "seeding",
    "select_strategy": "strategy",
    "Trainer": "trainer",
    "TrainingSummary": "trainer",
    "BranchWeightAdam": "simplex",
    "BranchWeightHistory": "simplex",
    "SimplexProjection": "simplex",
    "port_branch_weight_schedule": "simplex",
    "project_onto_simplex": "simplex",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    # Only for names not yet bound here; the attribute is bound on first use.
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

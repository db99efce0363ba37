"""The Weighted Transformer's κ/α optimiser: the public port's learning-rate warm-up.

A public port of the Weighted Transformer (Ahmed et al., 2017) warms κ and α
up over 400 steps instead of the 4000 of the other weights. This module holds

* `BranchWeightSchedule` and `port_branch_weight_schedule`: that schedule,
  matched to the main inverse-square-root one;
* `BranchWeightLearningRate`, an optimiser mixin giving κ/α their own
  learning rate, and `BranchWeightAdam`;
* the model option `attention_options["branch_weight_warmup_steps"]` (e.g.
  `recipes/train_wmt.py --model weighted_transformer --model-options
  'branch_weight_warmup_steps=400'`): `check_branch_weight_warmup` validates
  it and `with_branch_weight_warmup` turns the run's Adam into a
  `BranchWeightAdam`, through the `"branched_weighted"` kind's
  `wrap_optimizer` hook (`models.weighted_transformer`).

The κ/α variables are recognised by `layers.branched_weighted_attention.
is_branch_weight`; the projection that keeps them on the simplex is a
constraint of the layer (`layers.simplex_projection`).
"""

import keras
from keras import ops

from keras_attn_zoo.layers.branched_weighted_attention import is_branch_weight
from keras_attn_zoo.optimizers import Adam
from keras_attn_zoo.optimizers import FusedAdamUpdate
from keras_attn_zoo.optimizers import MovingAverageWarmup


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BranchWeightSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`constant * min(step * warmup^-1.5, step^-0.5)` with its own warm-up.

    Vaswani et al.'s schedule (`constant = d^-0.5` there); with the same
    constant as the main schedule and a shorter warm-up it reaches a higher
    peak sooner and then coincides with the main schedule. This is the public
    port's κ/α schedule (warm-up 400 instead of 4000).

    Args:
        constant: the schedule's scale (after warm-up `lr = constant /
            sqrt(step)`).
        warmup_steps: warm-up length (port: 400).
    """

    def __init__(self, constant, warmup_steps=400):
        self.constant = constant
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32") + 1.0, 1.0)
        warmup = float(self.warmup_steps)
        return self.constant * ops.minimum(step * warmup**-1.5, ops.rsqrt(step))

    def get_config(self):
        return {"constant": self.constant, "warmup_steps": self.warmup_steps}


def port_branch_weight_schedule(schedule, warmup_steps=400):
    """The port's κ/α schedule matching a main inverse-square-root schedule.

    Args:
        schedule: the main `InverseSquareRootSchedule` (peak `p` at warm-up
            `W`, i.e. `lr = p sqrt(W) min(step W^-1.5, step^-0.5)`), or a
            float: a constant main rate, for which κ/α warm up linearly to it
            over `warmup_steps` and then decay like `1/sqrt(step)`.
        warmup_steps: κ/α warm-up (port: 400).

    Returns:
        A `BranchWeightSchedule` with the same constant and the short warm-up.
    """
    if isinstance(schedule, (int, float)):
        return BranchWeightSchedule(float(schedule) * warmup_steps**0.5, warmup_steps)
    if hasattr(schedule, "peak_learning_rate") and hasattr(schedule, "warmup_steps"):
        constant = schedule.peak_learning_rate * schedule.warmup_steps**0.5
        return BranchWeightSchedule(constant, warmup_steps)
    raise TypeError(
        "port_branch_weight_schedule needs an InverseSquareRootSchedule or a "
        f"float, got {type(schedule).__name__}; pass your own schedule as "
        "branch_weight_learning_rate instead."
    )


class BranchWeightLearningRate:
    """Optimiser mixin: κ/α variables get their own learning rate.

    Mix it in before a Keras optimiser class (`class MyAdam(
    BranchWeightLearningRate, keras.optimizers.Adam)`); `BranchWeightAdam` is
    the Adam one. The κ/α variables are recognised by the flag the layer sets
    on them (`is_branch_weight`) when the optimiser is built. It works by
    overriding `update_step(gradient, variable, learning_rate)`, which Keras'
    TensorFlow optimiser calls per variable (also under `tf.distribute`).

    Args:
        branch_weight_learning_rate: float or `LearningRateSchedule` for κ/α;
            `None` uses the main rate (no special warm-up).
        **kwargs: the base optimiser's arguments.
    """

    def __init__(self, *args, branch_weight_learning_rate=None, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(branch_weight_learning_rate, dict):
            branch_weight_learning_rate = keras.optimizers.schedules.deserialize(
                branch_weight_learning_rate
            )
        self.branch_weight_learning_rate = branch_weight_learning_rate
        self._branch_weight_keys = set()

    def build(self, var_list):
        super().build(var_list)
        self._branch_weight_keys = {
            self._var_key(v) for v in var_list if is_branch_weight(v)
        }

    def _branch_learning_rate(self):
        rate = self.branch_weight_learning_rate
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return rate(self.iterations)
        return rate

    def update_step(self, gradient, variable, learning_rate):
        if (
            self.branch_weight_learning_rate is not None
            and self._var_key(variable) in self._branch_weight_keys
        ):
            learning_rate = self._branch_learning_rate()
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        rate = self.branch_weight_learning_rate
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            rate = keras.optimizers.schedules.serialize(rate)
        config["branch_weight_learning_rate"] = rate
        return config


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BranchWeightAdam(MovingAverageWarmup, BranchWeightLearningRate, FusedAdamUpdate,
                       keras.optimizers.Adam):
    """Adam with a separate learning rate for the Weighted Transformer's κ/α.

    Example (the port's recipe: main warm-up 4000, κ/α warm-up 400):
    >>> main = InverseSquareRootSchedule(7e-4, warmup_steps=4000)
    >>> optimizer = BranchWeightAdam(
    ...     main, beta_2=0.98, epsilon=1e-9,
    ...     branch_weight_learning_rate=port_branch_weight_schedule(main, 400))
    """


# The model option (under `attention_options["branched_weighted"]`).
BRANCH_WEIGHT_WARMUP = "branch_weight_warmup_steps"


def check_branch_weight_warmup(warmup_steps):
    """Refuses a κ/α warm-up that is not an int >= 1, naming the option."""
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
        raise ValueError(
            f"attention_options[{BRANCH_WEIGHT_WARMUP!r}] must be an int >= 1 (the "
            f"port: 400), got {warmup_steps!r}.")


def with_branch_weight_warmup(optimizer, warmup_steps):
    """A `BranchWeightAdam` equal to `optimizer` but with the port's κ/α warm-up.

    κ/α get `port_branch_weight_schedule(main, warmup_steps)`, the main schedule
    with its warm-up shortened to `warmup_steps`; every other weight keeps
    `optimizer`'s rate. Call it before training: the new optimiser starts
    without state.

    Args:
        optimizer: an unbuilt `Adam` (this module's or Keras') whose learning rate is an
            `InverseSquareRootSchedule` or a float.
        warmup_steps: the κ/α warm-up (port: 400).
    """
    if type(optimizer) not in (Adam, keras.optimizers.Adam):
        raise TypeError(
            f"attention_options[{BRANCH_WEIGHT_WARMUP!r}] replaces an Adam optimiser "
            f"by BranchWeightAdam; got {type(optimizer).__name__}.")
    config = optimizer.get_config()
    main = config["learning_rate"]
    if isinstance(main, dict):
        main = keras.optimizers.schedules.deserialize(main)
    config["learning_rate"] = main
    config["branch_weight_learning_rate"] = port_branch_weight_schedule(main, warmup_steps)
    return BranchWeightAdam.from_config(config)

"""Keeping the Weighted Transformer's κ and α on the probability simplex.

The Weighted Transformer (Ahmed et al., 2017) requires its concatenation
weights κ and addition weights α to be non-negative and to sum to 1 in every
layer. The published description keeps them there by projecting the raw
parameters onto the simplex after each optimiser update. This module holds

* `project_onto_simplex`: the Euclidean projection (Duchi et al., 2008), in
  `keras.ops`, over the last axis;
* `SimplexProjection`: a `keras.constraints.Constraint` running it. Keras 3
  optimisers apply `variable.constraint` right after every update
  (`BaseOptimizer.apply`: `_backend_apply_gradients`, then
  `variable.assign(variable.constraint(variable))` for each variable), so the
  projection happens after each step of `model.fit`, of the zoo's `Trainer`
  (which calls `optimizer.apply_gradients`) and of any custom loop that does;
  it is also applied inside `LossScaleOptimizer`, which delegates to its inner
  optimiser's `apply`;
* the optional κ/α learning-rate warm-up of a public port (400 steps instead
  of the 4000 of the other weights): `BranchWeightLearningRate`, an optimiser
  mixin giving κ/α their own learning rate, `BranchWeightAdam`, and
  `port_branch_weight_schedule`. As a model option it is
  `attention_options["branch_weight_warmup_steps"]` (e.g. `recipes/
  train_wmt.py --model weighted_transformer --model-options
  'branch_weight_warmup_steps=400'`), which the `"branched_weighted"` kind's
  `wrap_optimizer` hook turns into a `BranchWeightAdam` with
  `with_branch_weight_warmup`;
* `MovingAverageWarmup`, an optimiser mixin whose weight EMA (Keras'
  `use_ema`) warms up, and `Adam`, the Adam the recipes train with;
* (`keras_attn_zoo.training.simplex.BranchWeightHistory`, a callback recording
  κ/α for plots, lives with the trainer.)

Low level: imports only Keras, so the layers (the constraint) and the models
(`wrap_optimizer`) can use it.

Edge case: the projection sets every coordinate below the threshold θ to
exactly 0, and a zero weight stops gradients:

* α_i = 0: FFN_i and everything upstream in branch i (its κ_i, W_i^O, query,
  key and value projections) get no gradient. α_i's own gradient is
  `<dL/d output, FFN_i(...)>`, generally non-zero, so α_i can come back.
* κ_i = 0: branch i's W_i^O and query/key/value projections get no
  gradient, and FFN_i sees the input 0. κ_i's own gradient then flows only
  through FFN_i's hidden units whose bias is positive (ReLU'(0) = 0): with
  the zero-initialised biases of a fresh layer none are, so a κ_i driven to
  0 early can stay at 0 for good.

Set `min_weight > 0` (the layer's `min_branch_weight`) to project onto
`{w >= min_weight, sum w = 1}` instead, which keeps every branch trainable
(not in the paper); the softmax parameterisation never reaches 0.
"""

import keras
from keras import ops


def project_onto_simplex(values, radius=1.0, min_weight=0.0):
    """Euclidean projection of each vector (last axis) onto the simplex.

    Returns `argmin_w ||w - v||_2` subject to `w_i >= min_weight` and
    `sum_i w_i = radius` (Duchi, Shalev-Shwartz, Singer and Chandra, 2008,
    Algorithm 1). With `u` = `v` sorted descending, `rho` is the largest `j`
    with `u_j - (sum_{r<=j} u_r - radius) / j > 0`, `theta = (sum_{r<=rho}
    u_r - radius) / rho` and `w = max(v - theta, 0)`. A floor `m` is handled
    by projecting `v - m` onto the simplex of radius `radius - n m` and adding
    `m` back. Ties are fine: the result does not depend on their order.

    Args:
        values: float tensor `[..., n]` with a static last dimension.
        radius: the sum of each projected vector (> 0).
        min_weight: lower bound of every coordinate; needs
            `n * min_weight < radius`.

    Returns:
        A tensor of the same shape and dtype as `values` (computed in float32).
    """
    dtype = keras.backend.standardize_dtype(getattr(values, "dtype", "float32"))
    v = ops.cast(values, "float32")
    size = v.shape[-1]
    if size is None:
        raise ValueError("project_onto_simplex needs a static last dimension.")
    budget = float(radius) - size * float(min_weight)
    if budget <= 0.0:
        raise ValueError(
            f"min_weight={min_weight} is too large for {size} weights summing to "
            f"{radius}: it needs {size} * min_weight < {radius}."
        )
    v = v - float(min_weight)
    descending = ops.flip(ops.sort(v, axis=-1), axis=-1)
    excess = ops.cumsum(descending, axis=-1) - budget
    index = ops.arange(1, size + 1, dtype="float32")
    positive = descending - excess / index > 0
    # The condition holds for j <= rho and fails after; take the largest j
    # where it holds so that rounding in near-ties cannot shorten rho.
    # j = 1 always holds since budget > 0, so rho >= 1.
    rho = ops.max(ops.where(positive, index, ops.zeros_like(index)), axis=-1,
                  keepdims=True)
    rho_index = ops.cast(rho, "int32") - 1
    theta = ops.take_along_axis(excess, rho_index, axis=-1) / rho
    projected = ops.maximum(v - theta, 0.0) + float(min_weight)
    return ops.cast(projected, dtype)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class SimplexProjection(keras.constraints.Constraint):
    """Constraint projecting a weight (its last axis) onto the simplex.

    Put it on a weight with `add_weight(..., constraint=SimplexProjection())`;
    Keras optimisers apply it after every update.

    Args:
        min_weight: lower bound of every coordinate (0: the plain simplex, as
            in the paper; see the module docstring for why a floor can help).

    Example:
    >>> keras.ops.convert_to_numpy(SimplexProjection()(keras.ops.array([2.0, 0.0])))
    array([1., 0.], dtype=float32)
    """

    def __init__(self, min_weight=0.0):
        self.min_weight = min_weight

    def __call__(self, w):
        return project_onto_simplex(w, min_weight=self.min_weight)

    def get_config(self):
        return {"min_weight": self.min_weight}


def is_branch_weight(variable):
    """`True` for the κ/α variables of `BranchedWeightedAttention` layers."""
    return bool(getattr(variable, "_zoo_branch_weight", False))


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


class MovingAverageWarmup:
    """Optimiser mixin: the weights' moving average (`use_ema`) warms up.

    Keras' `use_ema` updates `average = m * average + (1 - m) * weight` with
    the constant momentum `m = ema_momentum` from the second step on, so the
    first step's weights - nearly the random initialisation - keep the share
    `m ** (T - 1)` of the average after `T` steps: 13.5% after 2,000 steps at
    0.999, which ruins the average of a short run (the recipe table measured
    valid BLEU 3.96 against 5.72 without it). Here the momentum warms up as in
    `tf.train.ExponentialMovingAverage` with `num_updates` (and Marian's
    exponential smoothing): `m_t = min(ema_momentum, (1 + t) / (10 + t))` at
    step `t` (0-based), 0 at the first step as in Keras. The weights of step
    `s` then keep about `(s / T) ** 9` of their share, so a short run averages
    roughly its last tenth of steps and a long one reaches `ema_momentum`
    after about `10 / (1 - ema_momentum)` steps.

    Mix it in before a Keras optimiser class; it overrides Keras'
    `_update_model_variables_moving_average` (keras 3.15;
    `tests/test_low_resource.py` checks the average step by step, so a
    Keras that stops calling it fails there, not silently).
    """

    def _update_model_variables_moving_average(self, trainable_variables):
        if not self.use_ema:
            return
        step = ops.cast(self.iterations, "float32")
        warm = (1.0 + step) / (10.0 + step)
        momentum = ops.where(ops.equal(step, 0.0), 0.0,
                             ops.minimum(float(self.ema_momentum), warm))
        for variable, average in zip(trainable_variables,
                                     self._model_variables_moving_average):
            if average is not None:
                m = ops.cast(momentum, variable.dtype)
                average.assign(m * average + (1.0 - m) * variable)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class Adam(MovingAverageWarmup, keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose `use_ema` average warms up (`MovingAverageWarmup`)."""


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class BranchWeightAdam(MovingAverageWarmup, BranchWeightLearningRate, keras.optimizers.Adam):
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

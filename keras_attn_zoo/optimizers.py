"""The recipes' optimiser: Adam whose moving average of the weights warms up.

* `MovingAverageWarmup`, an optimiser mixin whose weight EMA (Keras'
  `use_ema`) warms up, and `Adam`, the Adam the recipes train with;
* `InverseSquareRootSchedule`, their learning-rate schedule (here, at a low
  rank, so that evaluation's κ/α null can replay it), and
  `PlateauHalvingSchedule`, the eager translator paper's: constant, halved
  when the valid score stops improving.

Low level: imports only Keras, so the models (the Weighted Transformer's κ/α
optimiser, `models.weighted_optimizer`, builds on it) can use it.
"""

import keras
from keras import ops


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


class FusedAdamUpdate:
    """Optimiser mixin: on TensorFlow, Adam's update is one fused kernel per variable.

    Keras 3's `Adam.update_step` writes the update as about 25 ops per
    variable (the bias corrections recomputed for each one), which is what
    tf.keras 2 did in one `ResourceApplyAdam` kernel. Tracing those ops took
    about half of a training run's first step, paid by every run and test
    (`benchmarks/step_settings.py`, slow machine kind: the first call 4.50 s
    with Keras' update, 2.51 s with this one for the tiny Transformer; 8.82
    and 4.59 s for the small one), and each op is dispatched at every step
    (the small Transformer's steps: 1.045x the tokens/s). Here the bias
    corrections are computed once per step and dtype, and each variable is
    updated by TensorFlow's `ResourceApplyAdam`, whose CPU and GPU kernels
    compute Keras' formula: `m += (g - m)(1 - β1)`, `v += (g² - v)(1 - β2)`,
    `w -= α m / (√v + ε)` with `α = lr √(1 - β2ᵗ) / (1 - β1ᵗ)`.

    The optimiser's variables, its checkpoints and its config are Keras'.
    On other backends, and with `amsgrad`, Keras' own update runs.
    `tests/test_optimizers.py` checks it against `keras.optimizers.Adam`.
    Mix it in before `keras.optimizers.Adam`.
    """

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if keras.backend.backend() != "tensorflow":
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        self._fused_constants = {}  # per dtype, shared by this step's variables
        try:
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._fused_constants = None

    def _fused_constants_for(self, gradient, variable):
        """The kernel's step constants for `variable`, or `None` for Keras' own update."""
        constants = getattr(self, "_fused_constants", None)
        if constants is None or self.amsgrad:
            return None
        import tensorflow as tf  # the TensorFlow backend's step only

        # Keras squares a sparse gradient's slices before summing repeated
        # rows (an embedding's); that update stays Keras' own, unfused.
        if isinstance(gradient, tf.IndexedSlices):
            return None
        dtype = variable.dtype
        if dtype not in constants:
            step = tf.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
            constants[dtype] = dict(
                beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
                beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype))
        return constants[dtype]

    def update_step(self, gradient, variable, learning_rate):
        constants = self._fused_constants_for(gradient, variable)
        if constants is None:
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        index = self._get_variable_index(variable)
        # Under tf.distribute's update the handles are this device's components.
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            lr=tf.cast(learning_rate, variable.dtype),
            grad=tf.cast(gradient, variable.dtype),
            use_locking=False, use_nesterov=False, **constants)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class Adam(MovingAverageWarmup, FusedAdamUpdate, keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose `use_ema` average warms up (`MovingAverageWarmup`)."""


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class InverseSquareRootSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak_learning_rate`, then decay as `1/sqrt(step)`.

    `lr(step) = peak * min(step / warmup, sqrt(warmup / step))`, which is the
    Transformer paper's `d^-0.5 * min(step^-0.5, step * warmup^-1.5)` with the
    constant written as the peak rate (easier to tune across model sizes).

    Args:
        peak_learning_rate: rate reached at the end of warm-up.
        warmup_steps: warm-up length (paper: 4000).
    """

    def __init__(self, peak_learning_rate=1e-3, warmup_steps=4000):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32") + 1.0, 1.0)
        warmup = float(self.warmup_steps)
        factor = ops.minimum(step / warmup, ops.sqrt(warmup / step))
        return self.peak_learning_rate * factor

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
        }


class PlateauHalvingSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak_learning_rate`, then constant, times `factor` for
    every valid evaluation that did not improve on the best before it.

    The eager translator paper's SGD (Press & Smith, 2018: start at 20, halve
    the rate when the validation score does not improve). The count lives in
    `halvings`, a variable that early stopping sets from its evaluations
    (`training.early_stopping`), so a resumed run recovers it from its saved
    early-stopping state rather than from a checkpoint.

    Args:
        peak_learning_rate: rate after warm-up, before any halving.
        warmup_steps: linear warm-up length (0: none).
        factor: the rate's multiplier per evaluation without a gain (0.5; 1.0
            keeps the rate constant after warm-up: the "constant" schedule).
    """

    def __init__(self, peak_learning_rate=1.0, warmup_steps=0, factor=0.5):
        if not 0.0 < factor <= 1.0:
            raise ValueError(f"factor must be in (0, 1], got {factor}.")
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.factor = factor
        self.halvings = keras.Variable(0.0, dtype="float32", trainable=False,
                                       name="learning_rate_halvings")

    def set_halvings(self, count):
        """The number of evaluations without a gain so far."""
        self.halvings.assign(float(count))

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = ops.minimum(step / float(max(self.warmup_steps, 1)), 1.0)
        return (self.peak_learning_rate * warmup
                * ops.power(ops.convert_to_tensor(self.factor, "float32"), self.halvings))

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate,
                "warmup_steps": self.warmup_steps, "factor": self.factor}


def plateau_schedule(optimizer):
    """The `PlateauHalvingSchedule` an optimizer (or the one it wraps) follows, or None."""
    while optimizer is not None:
        schedule = getattr(optimizer, "_learning_rate", None)
        if isinstance(schedule, PlateauHalvingSchedule):
            return schedule
        optimizer = getattr(optimizer, "inner_optimizer", None)
    return None

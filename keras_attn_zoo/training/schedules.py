"""Learning-rate schedules."""

import keras
from keras import ops


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

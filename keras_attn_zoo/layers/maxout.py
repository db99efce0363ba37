"""Maxout (Goodfellow et al., 2013): the readout nonlinearity of RNNsearch."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class Maxout(keras.layers.Layer):
    """Maxout over adjacent groups: `[..., units * pool_size] -> [..., units]`.

    Output unit k is the maximum of inputs `k * pool_size ... (k + 1) *
    pool_size - 1` (with pool_size 2: `max(x_{2k}, x_{2k+1})`, the paper's
    `t_{i,k} = max(t̃_{i,2k-1}, t̃_{i,2k})` in 0-based indices).

    Args:
        units: number of output units `l`.
        pool_size: inputs per output unit (paper: 2).

    Call arguments:
        inputs: `[..., units * pool_size]` (a clear error otherwise).

    Examples:
        >>> keras.ops.convert_to_numpy(Maxout(2)(keras.ops.array([[1.0, 3.0, 5.0, -1.0]])))
        array([[3., 5.]], dtype=float32)

    References:
        Goodfellow et al., "Maxout Networks", ICML 2013.
    """

    def __init__(self, units, pool_size=2, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.pool_size = pool_size

    def _check_width(self, width):
        if width is not None and width != self.units * self.pool_size:
            raise ValueError(
                f"Maxout({self.units}, pool_size={self.pool_size}) needs "
                f"{self.units * self.pool_size} input features, got {width}."
            )

    def build(self, input_shape):
        self._check_width(input_shape[-1])
        self.built = True

    def call(self, inputs):
        self._check_width(inputs.shape[-1])  # every call: build runs only once
        shape = ops.shape(inputs)
        grouped = ops.reshape(inputs, (*shape[:-1], self.units, self.pool_size))
        return ops.max(grouped, axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "pool_size": self.pool_size})
        return config

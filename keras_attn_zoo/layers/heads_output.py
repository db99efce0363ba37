"""`HeadsOutput`: concatenated attention heads back to the model width."""

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import flat_dense
from keras_attn_zoo.layers.attention_utils import leading_dims


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class HeadsOutput(keras.layers.Layer):
    """`[B, T, h, k] -> [B, T, d]`: concatenated heads times one `(h k) x d` matrix.

    The counterpart of `HeadsProjection` (same reasons for a 2-D kernel).

    Args:
        output_dim: `d`.
        use_bias: add a bias.

    Call arguments:
        inputs: `[..., h, k]` attended heads.

    Examples:
        >>> output = HeadsOutput(output_dim=16)
        >>> tuple(output(keras.ops.ones((3, 5, 2, 4))).shape)
        (3, 5, 16)

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (the output
        projection `Concat(head_1, ..., head_h) W^O`).
    """

    def __init__(self, output_dim, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.output_dim = output_dim
        self.use_bias = use_bias

    def build(self, input_shape):
        width = input_shape[-2] * input_shape[-1]
        self.kernel = self.add_weight(
            name="kernel", shape=(width, self.output_dim),
            initializer="glorot_uniform")
        self.bias = (self.add_weight(name="bias", shape=(self.output_dim,),
                                     initializer="zeros")
                     if self.use_bias else None)
        self.built = True

    def call(self, inputs):
        merged = ops.reshape(
            inputs, leading_dims(inputs, len(inputs.shape) - 2) + (self.kernel.shape[0],))
        return flat_dense(merged, self.kernel, self.bias)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-2]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update({"output_dim": self.output_dim, "use_bias": self.use_bias})
        return config

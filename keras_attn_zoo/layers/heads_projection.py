"""`HeadsProjection`: model width to attention heads with one flat matrix."""

import keras

from keras_attn_zoo.layers.attention_utils import flat_dense


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class HeadsProjection(keras.layers.Layer):
    """`[B, T, d] -> [B, T, h, k]`: one `d x (h k)` matrix, split into heads.

    Why not `EinsumDense("btd,dhk->bthk")`: Keras counts a 3-D kernel's first
    axis into both Glorot fans, which makes the initial weights about 6x too
    small at `d=256, h=4` (attention starts uniform and stays so for hundreds of
    steps), and with static shapes the TensorFlow backend lowers that einsum to
    a broadcasting batched matmul whose kernel gradient is slow. A flat 2-D
    matmul has the textbook `Glorot(d, h k)` initialisation and is one GEMM.

    Args:
        num_heads: `h`.
        key_dim: `k`, the size of each head.
        use_bias: add a bias.

    Call arguments:
        inputs: `[..., d]` in any float dtype (computed in the layer's compute
            dtype).

    Examples:
        >>> projection = HeadsProjection(num_heads=2, key_dim=4)
        >>> tuple(projection(keras.ops.ones((3, 5, 16))).shape)
        (3, 5, 2, 4)

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (the
        per-head projections `Q W_i^Q`, here one matrix for all `i`). Glorot
        and Bengio, "Understanding the difficulty of training deep
        feedforward neural networks", AISTATS 2010.
    """

    def __init__(self, num_heads, key_dim, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.use_bias = use_bias

    def build(self, input_shape):
        width = self.num_heads * self.key_dim
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], width),
            initializer="glorot_uniform")
        self.bias = (self.add_weight(name="bias", shape=(width,), initializer="zeros")
                     if self.use_bias else None)
        self.built = True

    def call(self, inputs):
        return flat_dense(inputs, self.kernel, self.bias, (self.num_heads, self.key_dim))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_heads, self.key_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "key_dim": self.key_dim,
                       "use_bias": self.use_bias})
        return config

"""`SoftmaxOfUniform`: the random start of the Weighted Transformer's κ and α
(`layers.branched_weighted_attention`), an initializer in its own file so that
each layer file holds one public class."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class SoftmaxOfUniform(keras.initializers.Initializer):
    """`softmax(u)`, `u ~ U[0, 1)`, over the last axis: the port's random κ/α.

    Used as the κ/α values under the projection (a point of the simplex); the
    softmax parameterisation draws the logits `u` themselves from
    `keras.initializers.RandomUniform(0, 1)`, so both start from the same
    distribution of weights.
    """

    def __init__(self, seed=None):
        self.seed = seed
        self._uniform = keras.initializers.RandomUniform(0.0, 1.0, seed=seed)

    def __call__(self, shape, dtype=None):
        return ops.softmax(self._uniform(shape, dtype="float32"), axis=-1)

    def get_config(self):
        return {"seed": self.seed}

"""`LayerDrop`: skips a whole block while training (structured dropout)."""

import keras


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class LayerDrop(keras.layers.Layer):
    """Skips a whole block during training with probability `rate` (LayerDrop).

    Fan, Grave and Joulin (2019), "Reducing Transformer Depth on Demand with
    Structured Dropout": called as `layer_drop(block_input, block_output)`, it
    returns `block_input` (the block is the identity) with probability `rate`
    and `block_output` otherwise, one draw per call, i.e. per batch, shared
    by every sequence of the batch. At inference (`training` not true) it
    returns `block_output`. The draw is a scalar `keras.random.uniform` from
    the layer's `SeedGenerator` and the choice a `where`, so the layer works
    in graph mode and under XLA (`jit_compile=True`); the skipped block is
    still computed (its gradient is then zero).

    Args:
        rate: probability in `[0, 1]` of skipping the block.
        seed: seed of the layer's `SeedGenerator` (None: drawn from Keras'
            global seed, which `keras.utils.set_random_seed` fixes).

    Call arguments:
        block_input: the block's input.
        block_output: the block's output, shaped like its input (checked in
            `build`).
        training: Python bool; only while training is a block skipped.

    Examples:
        >>> drop = LayerDrop(rate=1.0)
        >>> x, y = keras.ops.zeros((2, 3)), keras.ops.ones((2, 3))
        >>> float(keras.ops.sum(drop(x, y, training=True))), float(keras.ops.sum(drop(x, y)))
        (0.0, 6.0)

    References:
        Fan, Grave and Joulin, "Reducing Transformer Depth on Demand with
        Structured Dropout", ICLR 2020.
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        rate = float(rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"LayerDrop rate must be in [0, 1], got {rate}.")
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, block_input_shape, block_output_shape):
        # A skipped block passes its input on: it must fit where the output goes.
        known = [(a, b) for a, b in zip(block_input_shape, block_output_shape)
                 if a is not None and b is not None]
        if (len(block_input_shape) != len(block_output_shape)
                or any(a != b for a, b in known)):
            raise ValueError(
                "LayerDrop needs a block whose output is shaped like its input; got "
                f"input {tuple(block_input_shape)} and output {tuple(block_output_shape)}.")
        self.built = True

    def call(self, block_input, block_output, training=None):
        if not training or self.rate == 0.0:
            return block_output
        draw = keras.random.uniform((), seed=self.seed_generator)
        return keras.ops.where(draw < self.rate, block_input, block_output)

    def compute_output_shape(self, block_input_shape, block_output_shape):
        return block_output_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config

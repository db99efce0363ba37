"""Recording the Weighted Transformer's κ and α while training.

The simplex projection lives with the layer (`keras_attn_zoo.layers.
simplex_projection`) and the κ/α optimiser with the model (`keras_attn_zoo.
models.weighted_optimizer`); re-exported here for old import paths.
"""

import keras

from keras_attn_zoo.layers.simplex_projection import SimplexProjection  # noqa: F401
from keras_attn_zoo.layers.simplex_projection import project_onto_simplex  # noqa: F401
from keras_attn_zoo.models.weighted_optimizer import BranchWeightAdam  # noqa: F401
from keras_attn_zoo.models.weighted_optimizer import port_branch_weight_schedule  # noqa: F401


class BranchWeightHistory(keras.callbacks.Callback):
    """Records κ and α of every branched layer while training.

    Works with `model.fit` (`on_train_batch_end`) and with the zoo's `Trainer`
    (`on_step_end`). `history` is a list of `(step, weights)` where `weights`
    is `weighted_branch_weights(model)`.

    Args:
        every: record every `every` optimiser steps.
    """

    def __init__(self, every=100):
        super().__init__()
        self.every = every
        self.history = []

    def _record(self, model, step):
        from keras_attn_zoo.models.weighted_transformer import weighted_branch_weights

        if step % self.every == 0:
            self.history.append((step, weighted_branch_weights(model)))

    def on_step_end(self, trainer, step, logs):
        self._record(trainer.model, step)

    def on_train_batch_end(self, batch, logs=None):
        self._record(self.model, int(self.model.optimizer.iterations.numpy()))

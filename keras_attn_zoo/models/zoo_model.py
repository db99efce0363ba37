"""What the zoo's functional models share: config, length limit, training hooks.

A zoo model keeps its constructor arguments in `zoo_config`; that dict is its
Keras config (plus `name`), so `from_config` simply calls the constructor.
Models with an optional `max_length` in `zoo_config` get `check_length`.

Constructor arguments that act during training (a schedule of a model
variable, a learning rate of its own for some weights) are applied through two
hooks that every training loop calls, so `keras_attn_zoo.workflow` needs no
model names: `training_callbacks()` and `wrap_optimizer(optimizer)`.
"""

import keras
import numpy as np


class ZooModel(keras.Model):
    """Base of the zoo's models built as functional `keras.Model` subclasses.

    A subclass builds its functional graph in `__init__`, calls
    `super().__init__(inputs=..., outputs=..., **kwargs)` and then stores its
    constructor arguments as `self.zoo_config`.

    `check_length(length, what)` raises a `ValueError` naming the length and
    `zoo_config["max_length"]` (absent or `None`: no limit), followed by the
    class's `length_advice`.
    """

    length_advice = "raise max_length when building the model."

    def check_length(self, length, what="sequence"):
        """Raises a clear error when `length` exceeds `max_length` (None: no limit)."""
        limit = self.zoo_config.get("max_length")
        if limit is not None and length > limit:
            raise ValueError(
                f"The {what} has {length} tokens but this model's max_length is "
                f"{limit}; {self.length_advice}"
            )

    def stepwise_positions(self, source_ids, target_ids):
        """Bool `[B, T]`: where `decode_step` must equal the teacher-forced pass.

        Every real (non-0) target position; a model whose step decoding follows
        other rules at some positions (the eager translator after its source
        ends) narrows this. `decoding.consistency` and the tests use it.
        """
        del source_ids
        return np.asarray(target_ids) != 0

    def training_callbacks(self):
        """Callbacks that this model's own arguments need while it trains.

        Each works with `keras_attn_zoo.training.Trainer` (`on_step_end`) and
        with `model.fit`. Default: none.
        """
        return []

    def wrap_optimizer(self, optimizer):
        """The optimizer to train this model with, given the run's optimizer.

        Called inside the strategy scope, before any loss-scale wrapping.
        Default: `optimizer` unchanged.
        """
        return optimizer

    def get_config(self):
        config = dict(self.zoo_config)
        config["name"] = self.name
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

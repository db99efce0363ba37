"""What the zoo's functional models share: their config and their length limit.

A zoo model keeps its constructor arguments in `zoo_config`; that dict is its
Keras config (plus `name`), so `from_config` simply calls the constructor.
Models with an optional `max_length` in `zoo_config` get `check_length`.
"""

import keras


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

    def get_config(self):
        config = dict(self.zoo_config)
        config["name"] = self.name
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

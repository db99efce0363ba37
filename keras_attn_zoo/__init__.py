"""keras-attn-zoo: attention mechanisms for neural machine translation in Keras 3."""

__version__ = "0.1.0"

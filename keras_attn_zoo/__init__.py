"""keras-attn-zoo: attention mechanisms for neural machine translation in Keras 3.

The public subpackages are attributes of the package, as in keras-hub::

    import keras_attn_zoo
    model = keras_attn_zoo.models.ran_transformer(8000, preset="tiny")

They are imported on first access (PEP 562), so ``import keras_attn_zoo`` alone
stays cheap: it does not import TensorFlow, and ``python -m
keras_attn_zoo.data.ding`` or the ``keras-attn-zoo`` command line pay only for
what they use.
"""

import importlib

__version__ = "0.1.0"

# Type checkers and IDEs treat any name TYPE_CHECKING as true; defining it here
# rather than importing it saves importing `typing` (several ms) at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:  # the subpackages for static analysis; at run time on first use
    from keras_attn_zoo import data
    from keras_attn_zoo import decoding
    from keras_attn_zoo import evaluation
    from keras_attn_zoo import export
    from keras_attn_zoo import inference
    from keras_attn_zoo import layers
    from keras_attn_zoo import models
    from keras_attn_zoo import training

_SUBPACKAGES = frozenset(
    {"data", "decoding", "evaluation", "export", "inference", "layers", "models",
     "training"}
)

__all__ = ["__version__", *sorted(_SUBPACKAGES)]


def __getattr__(name):
    # Called only for names not (yet) in the module's namespace. Importing a
    # submodule also binds it here as an attribute, so later look-ups never come
    # back to this function. import_module returns a subpackage that is still
    # initialising from sys.modules, so access during an import does not recurse.
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

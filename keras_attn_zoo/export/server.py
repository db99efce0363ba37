"""The HTTP server's former single module: its public names, now in the
`keras_attn_zoo.export.serving` package (see its docstring for the endpoints).

    keras-attn-zoo serve --model saved_models/NAME --port 8501
"""

from keras_attn_zoo.export.serving import DEFAULT_LIMITS
from keras_attn_zoo.export.serving import BadRequest
from keras_attn_zoo.export.serving import Handler
from keras_attn_zoo.export.serving import Metrics
from keras_attn_zoo.export.serving import ModelRunner
from keras_attn_zoo.export.serving import merge_results
from keras_attn_zoo.export.serving import parse_texts
from keras_attn_zoo.export.serving import serve

__all__ = ["DEFAULT_LIMITS", "BadRequest", "Handler", "Metrics", "ModelRunner",
           "merge_results", "parse_texts", "serve"]

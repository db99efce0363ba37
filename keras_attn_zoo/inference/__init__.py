"""The run's inference object: `Translator`, text in and translations out in one TF graph.

Ranked between the searches (`decoding/`) and everything that translates
(`evaluation/`, `export/`, `training/`'s dev monitors, `workflow.py`): a run
builds one `Translator` and passes it down, and the trainer's callbacks can
take it without importing the exporter. `keras_attn_zoo.export` re-exports it.
"""

from keras_attn_zoo.inference.translator import DEFAULT_MAX_INPUT_LENGTH
from keras_attn_zoo.inference.translator import Translator

__all__ = ["DEFAULT_MAX_INPUT_LENGTH", "Translator"]

"""Export and serving: the TF Serving SavedModel layout written by `export_saved_model`
(it saves a ready `Translator`); `export_ctranslate2` and `CTranslate2Translator` for
fast CPU inference (`ctranslate2_export.py`).

`Translator` itself lives in `keras_attn_zoo.inference` (ranked below the
trainer, which takes the run's translator); it is re-exported here. See
`saved_model.py` for the directory layout, versioning and the model card.
"""

from keras_attn_zoo.export.ctranslate2_export import CTranslate2Translator
from keras_attn_zoo.export.ctranslate2_export import export_ctranslate2
from keras_attn_zoo.export.ctranslate2_export import export_ctranslate2_from_run
from keras_attn_zoo.export.saved_model import MODEL_CARD_FILE
from keras_attn_zoo.export.saved_model import SIGNATURE_NAMES
from keras_attn_zoo.export.saved_model import VOCABULARY_FILE
from keras_attn_zoo.export.saved_model import build_model_card
from keras_attn_zoo.export.saved_model import existing_versions
from keras_attn_zoo.export.saved_model import export_saved_model
from keras_attn_zoo.export.saved_model import latest_version
from keras_attn_zoo.inference.translator import DEFAULT_MAX_INPUT_LENGTH
from keras_attn_zoo.inference.translator import Translator

__all__ = [
    "DEFAULT_MAX_INPUT_LENGTH",
    "MODEL_CARD_FILE",
    "SIGNATURE_NAMES",
    "VOCABULARY_FILE",
    "CTranslate2Translator",
    "Translator",
    "build_model_card",
    "existing_versions",
    "export_ctranslate2",
    "export_ctranslate2_from_run",
    "export_saved_model",
    "latest_version",
]

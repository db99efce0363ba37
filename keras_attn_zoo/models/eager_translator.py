from keras_attn_zoo.models.eager.model import EagerLSTMTranslator, eager_translator  # noqa: F401  (old path: models/__init__, layers/__init__)
from keras_attn_zoo.layers.eager_embedding import EagerEmbedding  # noqa: F401  (old path: layers/__init__)

"""The eager translator family (Press & Smith, 2018) in one place.

* `model`: `EagerLSTMTranslator` and its builder `eager_translator`, with the
  carried training state the `Trainer` uses for aligned batching;
* `special_ids`: the three appended symbols (`EagerSpecialIds`);
* `preprocessing`: ε preprocessing (eager feasibility, alignments) and the
  per-sentence and aligned-stream datasets;
* `processor`: the decoding rules as a logits processor;
* `training`: how a recipe run prepares and batches the eager training pairs
  (`EagerLSTMTranslator.training_data`).

The embedding is the public layer `keras_attn_zoo.layers.eager_embedding`;
the search drivers (`eager_translate`, `EagerStreamer`) are in
`keras_attn_zoo.decoding.eager_processor`.
"""

from keras_attn_zoo.models.eager.model import EagerLSTMTranslator
from keras_attn_zoo.models.eager.model import eager_translator
from keras_attn_zoo.models.eager.special_ids import DEFAULT_START_PADS
from keras_attn_zoo.models.eager.special_ids import EagerSpecialIds
from keras_attn_zoo.models.eager.special_ids import eager_special_ids
from keras_attn_zoo.models.eager.special_ids import eager_vocabulary_size

"""The eager translator's three extra symbols, in one shape: `EagerSpecialIds`.

They are appended after the SentencePiece vocabulary (ids ``0..3`` are
PAD/UNK/BOS/EOS): start padding, ε ("write nothing yet") and source padding.
"""

from typing import NamedTuple

# Best of the paper's Table 2 on three of four directions; its decoding command uses 5.
DEFAULT_START_PADS = 5
NUM_EAGER_SPECIAL_IDS = 3


class EagerSpecialIds(NamedTuple):
    """Ids of the eager model's extra symbols."""

    start_id: int
    epsilon_id: int
    source_pad_id: int

    @classmethod
    def for_model_vocabulary(cls, vocabulary_size: int) -> "EagerSpecialIds":
        """The default ids of a model of ``vocabulary_size``: its last three ids."""
        return cls(vocabulary_size - 3, vocabulary_size - 2, vocabulary_size - 1)


def eager_vocabulary_size(sentencepiece_size: int) -> int:
    """The eager model's vocabulary: the SentencePiece ids plus start, ε and source pad."""
    return int(sentencepiece_size) + NUM_EAGER_SPECIAL_IDS


def eager_special_ids(sentencepiece_size: int) -> EagerSpecialIds:
    """``(start, ε, source pad) = (sp_size, sp_size + 1, sp_size + 2)``."""
    return EagerSpecialIds.for_model_vocabulary(eager_vocabulary_size(sentencepiece_size))

"""Search over the step protocol of the zoo's models: greedy, beam, sampling, scoring.

All four are strategies of one decode loop (``loop.decode``, a
``tf.while_loop``), so they run eagerly, inside ``tf.function`` (autograph on
or off) and in exported graphs with dynamic batch size, source length and
beam size. See ``loop.py`` for what the loop and a strategy each own,
``beam.py`` for the beam algorithm and ``common.py`` for the protocol and the
special ids.
"""

from keras_attn_zoo.decoding.beam import beam_search
from keras_attn_zoo.decoding.common import (
    BOS_ID,
    DEFAULT_BEAM_SIZE,
    DEFAULT_LENGTH_PENALTY,
    EOS_ID,
    NEG_INF,
    PAD_ID,
    length_penalty,
    max_target_lengths,
)
from keras_attn_zoo.decoding.greedy import greedy_search
from keras_attn_zoo.decoding.greedy import sample_search
from keras_attn_zoo.decoding.processors import chain_processors
from keras_attn_zoo.decoding.processors import no_repeat_ngram_processor
from keras_attn_zoo.decoding.scoring import score_targets

__all__ = [
    "BOS_ID",
    "DEFAULT_BEAM_SIZE",
    "DEFAULT_LENGTH_PENALTY",
    "EOS_ID",
    "NEG_INF",
    "PAD_ID",
    "beam_search",
    "chain_processors",
    "greedy_search",
    "length_penalty",
    "max_target_lengths",
    "no_repeat_ngram_processor",
    "sample_search",
    "score_targets",
]

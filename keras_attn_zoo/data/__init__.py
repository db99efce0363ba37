"""Corpora, vocabulary and the tf.data pipeline.

Names are imported lazily, so ``keras_attn_zoo.data.ding`` (and ``python -m
keras_attn_zoo.data.ding``) works without importing TensorFlow.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load on first use
    from keras_attn_zoo.data.ding import (
        DEFAULT_DING_PATH,
        ding_corpus,
        ding_statistics,
        ensure_ding_file,
        is_sentence_pair,
        parse_ding_line,
    )
    from keras_attn_zoo.data.parallel import ParallelFiles, open_parallel_files, read_parallel_files
    from keras_attn_zoo.data.pipeline import (
        PipelineStats,
        bucket_layout,
        count_target_tokens,
        data_shard_policy,
        make_dataset,
        pipeline_stats,
        training_stream,
        without_autotune_thread,
    )
    from keras_attn_zoo.data.vocabulary import (
        BOS_ID,
        EOS_ID,
        PAD_ID,
        UNK_ID,
        load_tokenizer,
        reservoir_sample,
        sentencepiece_proto,
        train_sentencepiece,
        vocabulary_size,
    )
    from keras_attn_zoo.data.wmt import (
        DataSpec,
        TfdsTranslation,
        load_pairs,
        load_tfds_translation,
        open_tfds_translation,
        parse_data_spec,
    )

_EXPORTS = {
    # ding
    "DEFAULT_DING_PATH": "ding",
    "ensure_ding_file": "ding",
    "parse_ding_line": "ding",
    "is_sentence_pair": "ding",
    "ding_corpus": "ding",
    "ding_statistics": "ding",
    # parallel text files
    "read_parallel_files": "parallel",
    "open_parallel_files": "parallel",
    "ParallelFiles": "parallel",
    # TFDS / data specs
    "load_tfds_translation": "wmt",
    "open_tfds_translation": "wmt",
    "TfdsTranslation": "wmt",
    "DataSpec": "wmt",
    "parse_data_spec": "wmt",
    "load_pairs": "wmt",
    # vocabulary
    "PAD_ID": "vocabulary",
    "UNK_ID": "vocabulary",
    "BOS_ID": "vocabulary",
    "EOS_ID": "vocabulary",
    "train_sentencepiece": "vocabulary",
    "reservoir_sample": "vocabulary",
    "load_tokenizer": "vocabulary",
    "vocabulary_size": "vocabulary",
    "sentencepiece_proto": "vocabulary",
    # pipeline
    "PipelineStats": "pipeline",
    "make_dataset": "pipeline",
    "pipeline_stats": "pipeline",
    "training_stream": "pipeline",
    "data_shard_policy": "pipeline",
    "without_autotune_thread": "pipeline",
    "bucket_layout": "pipeline",
    "count_target_tokens": "pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

"""WMT (and any other translation data set) through TensorFlow Datasets, and data specs.

A *data spec* is the short string a recipe takes on its command line to name a corpus:

=============================  ==========================================================
``ding``                       Ding example sentences (same as ``ding:sentences``)
``ding:sentences``             Ding example sentences (~18k pairs)
``ding:phrases``               Ding words and phrases
``ding:all``                   both
``tfds:wmt14_translate/de-en`` any TFDS data set with a ``Translation`` feature
=============================  ==========================================================
"""

from __future__ import annotations

import dataclasses
import os

from keras_attn_zoo.data import ding
from keras_attn_zoo.data.parallel import StreamedPairs

_TFDS_INSTALL_HINT = 'pip install "keras-attn-zoo[wmt]"'
# Our split names follow the Ding corpus; TFDS translation sets call the dev set "validation".
_TFDS_SPLIT_ALIASES = {"valid": "validation", "dev": "validation"}


def _import_tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            "Loading TFDS translation data sets needs tensorflow-datasets: "
            f"{_TFDS_INSTALL_HINT}"
        ) from error
    return tfds


def _language_pair(direction: str) -> tuple[str, str]:
    languages = direction.split("-")
    if len(languages) != 2 or not all(languages):
        raise ValueError(
            f"Unknown direction={direction!r}; expected 'source-target' language codes "
            "such as 'de-en'."
        )
    return languages[0], languages[1]


def _translation_feature_name(features) -> str:
    """The key of the ``Translation`` feature; TFDS WMT sets have only that feature."""
    from tensorflow_datasets.core.features import Translation

    if isinstance(features, Translation):
        return ""
    for key, feature in features.items():
        if isinstance(feature, Translation):
            return key
    raise ValueError(f"The data set has no tfds.features.Translation feature: {features}")


@dataclasses.dataclass(frozen=True)
class TfdsTranslation(StreamedPairs):
    """One split of a TFDS translation data set as a streaming source of ``(source, target)``.

    Made by :func:`open_tfds_translation`. ``tf.data`` reads the prepared TFRecord files
    (:meth:`text_dataset`, :meth:`text_chunks_dataset`, in the stored order); nothing is held
    in memory. ``len()`` is the split's number of examples (TFDS' metadata); iterating yields
    them as text.

    Attributes:
        name, split, direction, data_dir, max_examples: as :func:`load_tfds_translation`'s.
        feature_name: the key of the ``Translation`` feature ("" when it is the only feature).
        examples: the number of examples read.
        file_count: the split's TFRecord files (the unit of FILE auto-sharding).
    """

    name: str
    split: str
    direction: str
    data_dir: str | None
    max_examples: int | None
    feature_name: str
    examples: int
    file_count: int

    def __len__(self) -> int:
        return self.examples

    def text_chunks_dataset(self, chunk_size: int = 1024):
        """The examples in chunks: ``tf.string`` ``[n]`` sources and targets, in stored order."""
        tfds = _import_tfds()
        source_language, target_language = _language_pair(self.direction)
        dataset = tfds.builder(self.name, data_dir=self.data_dir).as_dataset(
            split=self.split, shuffle_files=False)
        if self.max_examples is not None:
            dataset = dataset.take(self.max_examples)

        def sides(example):
            translation = example[self.feature_name] if self.feature_name else example
            return translation[source_language], translation[target_language]

        return dataset.map(sides).batch(chunk_size)


def open_tfds_translation(
    name: str = "wmt14_translate/de-en",
    split: str = "train",
    direction: str = "de-en",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
) -> TfdsTranslation:
    """A TFDS translation split as a streaming source (see :func:`load_tfds_translation`).

    The data set is downloaded and prepared on first use; nothing else is read here.
    """
    tfds = _import_tfds()
    source_language, target_language = _language_pair(direction)
    data_dir = None if data_dir is None else os.fspath(data_dir)
    builder = tfds.builder(name, data_dir=data_dir)
    builder.download_and_prepare()

    feature_name = _translation_feature_name(builder.info.features)
    translation_feature = (
        builder.info.features[feature_name] if feature_name else builder.info.features
    )
    available_languages = tuple(translation_feature.languages)
    for language in (source_language, target_language):
        if language not in available_languages:
            raise ValueError(
                f"Data set {name!r} has no language {language!r} (direction={direction!r}); "
                f"it has {available_languages}."
            )
    split = _TFDS_SPLIT_ALIASES.get(split, split)
    split_info = builder.info.splits[split]
    examples = split_info.num_examples
    if max_examples is not None:
        examples = min(examples, max_examples)
    return TfdsTranslation(name=name, split=split, direction=direction, data_dir=data_dir,
                           max_examples=max_examples, feature_name=feature_name,
                           examples=examples, file_count=split_info.num_shards)


def load_tfds_translation(
    name: str = "wmt14_translate/de-en",
    split: str = "train",
    direction: str = "de-en",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
) -> list[tuple[str, str]]:
    """Loads ``(source, target)`` text pairs of a TFDS translation data set into memory.

    The data set is downloaded and prepared on first use (WMT14 de-en is several GB; pass
    ``data_dir`` to choose where). Examples are read from its ``Translation`` feature by the
    language codes of ``direction``, so ``direction="en-de"`` swaps the sides of a "de-en" set.
    For a training split, :func:`open_tfds_translation` streams the same pairs instead.

    Args:
        name: a TFDS name, with config, e.g. "wmt14_translate/de-en".
        split: a TFDS split ("train", "validation", "test", or slices like "train[:1%]");
            "valid" is accepted for "validation".
        direction: "source-target" language codes, e.g. "de-en".
        data_dir: the TFDS data directory (default: TFDS' own, ``~/tensorflow_datasets``).
        max_examples: read at most this many examples (in the stored order).

    Raises:
        ImportError: if tensorflow-datasets is not installed.
        ValueError: if the data set lacks one of the two languages.
    """
    return list(open_tfds_translation(name, split, direction, data_dir, max_examples))


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """A parsed data spec.

    Attributes:
        corpus: "ding" or "tfds".
        kind: for Ding, "sentences", "phrases" or "all"; ``None`` for TFDS.
        name: for TFDS, the data set name with config (e.g. "wmt14_translate/de-en").
    """

    corpus: str
    kind: str | None = None
    name: str | None = None

    def __str__(self) -> str:
        if self.corpus == "ding":
            return f"ding:{self.kind}"
        return f"tfds:{self.name}"


def parse_data_spec(spec: str) -> DataSpec:
    """Parses ``ding``, ``ding:KIND`` or ``tfds:NAME`` (see the module docstring).

    Raises:
        ValueError: naming the spec when it is not understood.
    """
    corpus, separator, argument = spec.strip().partition(":")
    corpus = corpus.lower()
    if corpus == "ding":
        kind = argument if separator else "sentences"
        if kind not in ding.KINDS:
            raise ValueError(
                f"Unknown Ding kind in data spec {spec!r}; expected one of "
                + ", ".join(f"ding:{choice}" for choice in ding.KINDS)
            )
        return DataSpec(corpus="ding", kind=kind)
    if corpus == "tfds":
        if not argument:
            raise ValueError(
                f"Data spec {spec!r} names no TFDS data set; e.g. tfds:wmt14_translate/de-en"
            )
        return DataSpec(corpus="tfds", name=argument)
    raise ValueError(
        f"Unknown data spec {spec!r}; expected 'ding', 'ding:sentences', 'ding:phrases', "
        "'ding:all' or 'tfds:NAME' (e.g. tfds:wmt14_translate/de-en)."
    )


def load_pairs(
    spec: str | DataSpec,
    split: str = "train",
    direction: str = "de-en",
    *,
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
) -> list[tuple[str, str]]:
    """Loads the ``(source, target)`` pairs a data spec names.

    ``split`` is "train", "valid" or "test" for both corpora; ``data_dir`` is the Ding file for
    Ding and the TFDS data directory for TFDS.
    """
    if isinstance(spec, str):
        spec = parse_data_spec(spec)
    if spec.corpus == "ding":
        pairs = ding.ding_corpus(split=split, kind=spec.kind, direction=direction, path=data_dir)
        return pairs if max_examples is None else pairs[:max_examples]
    return load_tfds_translation(
        spec.name, split=split, direction=direction, data_dir=data_dir, max_examples=max_examples
    )

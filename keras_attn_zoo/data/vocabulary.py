"""One joint SentencePiece vocabulary for source and target, and its in-graph tokenizer.

Special ids are fixed for the whole zoo (models, decoding and export rely on them):

    PAD_ID = 0   padding; every pipeline pads with 0
    UNK_ID = 1   unknown piece
    BOS_ID = 2   start of a target sentence (first decoder input)
    EOS_ID = 3   end of a sentence (last source token and last label)

The tokenizer is ``keras_hub.tokenizers.SentencePieceTokenizer``, which wraps
``tensorflow_text.SentencepieceTokenizer``: it runs inside ``tf.data`` and ``tf.function`` and is
a trackable Keras layer, so an exported SavedModel carries the vocabulary with it.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import pathlib
import random
from typing import Iterable, Iterator, Sequence

from keras_attn_zoo.files import write_atomically

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"

_EXPECTED_SPECIAL_PIECES = {
    PAD_ID: PAD_PIECE,
    UNK_ID: UNK_PIECE,
    BOS_ID: BOS_PIECE,
    EOS_ID: EOS_PIECE,
}
DEFAULT_MAX_SENTENCES = 2_000_000
_SAMPLE_CHUNK_SIZE = 8192


def _texts(items: Iterable) -> Iterator[str]:
    """Strings of ``items``, where an item may also be a (source, target) pair or a tuple."""
    for item in items:
        for text in (item,) if isinstance(item, (str, bytes)) else item:
            yield text.decode("utf-8") if isinstance(text, bytes) else text


def _chunked(items: Iterable, chunk_size: int = 4096) -> Iterator[list]:
    iterator = iter(items)
    return iter(lambda: list(itertools.islice(iterator, chunk_size)), [])


def reservoir_sample_chunks(chunks: Iterable[Sequence], size: int, seed: int = 0) -> list:
    """:func:`reservoir_sample` of the items of a stream of chunks (lists or arrays).

    Which positions of the stream enter the sample depends only on ``seed``, so an item that
    is passed over is never touched: a chunk costs Python work only for the items it gives
    to the sample (and the first ``size`` items).
    """
    if size < 1:
        raise ValueError(f"The sample size must be at least 1, got {size}.")
    generator = random.Random(seed)

    def log_uniform():  # log of a uniform number in (0, 1]
        return math.log(1.0 - generator.random())

    def gap(weight):  # items passed over before the next one enters the sample
        return math.floor(log_uniform() / math.log(1.0 - weight)) if weight < 1.0 else 0

    sample = []
    weight = math.exp(log_uniform() / size)
    next_index = size + gap(weight)
    offset = 0  # stream position of the chunk's first item
    for chunk in chunks:
        if len(sample) < size:
            sample.extend(chunk[: size - len(sample)])
        while next_index < offset + len(chunk):
            sample[generator.randrange(size)] = chunk[next_index - offset]
            weight *= math.exp(log_uniform() / size)
            next_index += 1 + gap(weight)
        offset += len(chunk)
    return sample


def reservoir_sample(items: Iterable, size: int, seed: int = 0) -> list:
    """A uniform random sample of ``size`` items of a stream, read in one pass, in O(size) memory.

    Li's Algorithm L (1994): after the first ``size`` items, it draws how many items to pass
    over before the next one enters the sample (at a random slot), so an item that is passed
    over costs nothing but being read. The sample depends only on ``seed`` and the stream;
    with ``size`` or fewer items it is all of them, in order.
    """
    return reservoir_sample_chunks(_chunked(items), size, seed)


def _text_chunks(texts) -> Iterator[Sequence]:
    """Chunks of the texts of ``texts`` (strings or pairs, both sides, in order); a streaming
    source (``data.open_parallel_files``) is read through ``tf.data`` in chunks, as bytes."""
    if not hasattr(texts, "numpy_chunks"):
        yield from _chunked(_texts(texts))
        return
    import numpy as np

    for sources, targets in texts.numpy_chunks(_SAMPLE_CHUNK_SIZE):
        yield np.stack([sources, targets], axis=1).reshape(-1)  # source, target, source, ...


def train_sentencepiece(
    texts: Iterable,
    output_path: str | os.PathLike,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    max_sentences: int = DEFAULT_MAX_SENTENCES,
    *,
    byte_fallback: bool = False,
    seed: int = 0,
) -> pathlib.Path:
    """Trains ONE joint SentencePiece model on source and target texts and saves it.

    A joint vocabulary lets the model share embeddings between encoder, decoder and softmax and
    copy names and numbers from source to target.

    Args:
        texts: strings, or ``(source, target)`` pairs (both sides are used); any iterable.
        output_path: the ``.model`` file to write. It is written to a temporary file and renamed,
            so a crash never leaves a half-written model.
        vocab_size: the requested size. The limit is soft (``hard_vocab_limit=False``) so that
            tiny corpora, as in tests, give a smaller vocabulary instead of an error.
        model_type: "unigram", "bpe", "char" or "word".
        character_coverage: 1.0 keeps every character of the corpus (right for German/English;
            use ~0.9995 for languages with very large alphabets).
        max_sentences: at most this many texts are used, a sample drawn in one pass over
            ``texts`` (:func:`reservoir_sample` with ``seed``), so ``texts`` may be a
            stream of any length; big files (``data.open_parallel_files(...)``) are sampled
            without a pass over them (``ParallelFiles.sample_texts``).
        byte_fallback: represent unseen characters as UTF-8 bytes instead of ``<unk>`` (adds 256
            pieces, so only sensible for vocabularies of a few thousand or more).
        seed: for the sampling of ``max_sentences``.

    Returns:
        ``output_path`` as a ``pathlib.Path``.

    Raises:
        ValueError: if ``texts`` has no non-empty text.
    """
    import sentencepiece

    # Sampled before the whitespace is normalised: a text that turns out empty is left out, so
    # the sample may hold slightly fewer than max_sentences texts.
    if hasattr(texts, "sample_texts"):  # big files: a sample read without a pass over them
        sampled = texts.sample_texts(max_sentences, seed=seed)
    else:
        sampled = reservoir_sample_chunks(_text_chunks(texts), max_sentences, seed=seed)
    sampled = _texts(sampled)
    # SentencePiece reads one sentence per item; inner newlines would be odd pieces.
    sentences = [normalised for normalised in (" ".join(text.split()) for text in sampled)
                 if normalised]
    if not sentences:
        raise ValueError(
            "Cannot train a SentencePiece model on an empty corpus: `texts` contains no "
            "non-empty text."
        )

    model_bytes = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model_bytes,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        hard_vocab_limit=False,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        pad_piece=PAD_PIECE,
        unk_piece=UNK_PIECE,
        bos_piece=BOS_PIECE,
        eos_piece=EOS_PIECE,
        byte_fallback=byte_fallback,
        # Sentences were already sampled; stop SentencePiece from sampling or skipping again.
        input_sentence_size=0,
        max_sentence_length=1 << 16,
        num_threads=max(os.cpu_count() or 1, 1),
        minloglevel=2,
    )

    output_path = pathlib.Path(output_path)
    write_atomically(output_path, model_bytes.getvalue())
    return output_path


def _check_special_pieces(tokenizer, source: str) -> None:
    vocabulary = tokenizer.get_vocabulary()
    for token_id, piece in _EXPECTED_SPECIAL_PIECES.items():
        if token_id >= len(vocabulary) or vocabulary[token_id] != piece:
            found = vocabulary[:4]
            raise ValueError(
                f"SentencePiece model {source} does not use the zoo's special ids "
                f"(expected {list(_EXPECTED_SPECIAL_PIECES.values())} at ids 0..3, found "
                f"{found}). Train it with keras_attn_zoo.data.train_sentencepiece."
            )


def load_tokenizer(path_or_proto: str | os.PathLike | bytes):
    """Loads a SentencePiece model as a ``keras_hub.tokenizers.SentencePieceTokenizer``.

    The tokenizer gives int32 ids and adds no BOS/EOS itself (:func:`make_dataset` adds them).
    ``detokenize`` gives plain text (pieces joined, "▁" turned back into spaces); the control
    ids PAD, BOS and EOS decode to nothing, UNK to " ⁇ ".

    It always runs the tensorflow-text implementation, but keras-hub converts results of EAGER
    calls for convenience:

    ====================  ===================================  =============================
    call                  inside tf.function / tf.data         eager
    ====================  ===================================  =============================
    ``tok(batch)``        ``tf.RaggedTensor`` int32 [B, None]  list of lists of int
    ``tok(string)``       int32 vector                         int32 ``tf.Tensor`` vector
    ``detokenize(ids)``   ``tf.string`` [B] (UTF-8 bytes)      list of ``str`` (or ``str``)
    ====================  ===================================  =============================

    The layer is built and trackable: ``keras.export.ExportArchive.track(tokenizer)`` or an
    attribute of a ``tf.Module`` puts the SentencePiece model into a SavedModel.

    Args:
        path_or_proto: a ``.model`` file or its bytes.

    Raises:
        ValueError: if the model does not use PAD/UNK/BOS/EOS = 0/1/2/3.
    """
    import keras_hub

    if isinstance(path_or_proto, bytes):
        proto, source = path_or_proto, "<bytes>"
    else:
        source = os.fspath(path_or_proto)
        proto = pathlib.Path(source).read_bytes()
    tokenizer_options = dict(proto=proto, dtype="int32", add_bos=False, add_eos=False)
    try:
        tokenizer = keras_hub.tokenizers.SentencePieceTokenizer(
            **tokenizer_options, _allow_python_workflow=False
        )
    except (TypeError, ValueError):
        # keras-hub versions before the pure-Python path lack this option and always use TF.
        tokenizer = keras_hub.tokenizers.SentencePieceTokenizer(**tokenizer_options)
    _check_special_pieces(tokenizer, source)
    # The tokenizer has no weights, but keras.export.ExportArchive.track() refuses unbuilt layers.
    tokenizer.build(None)
    return tokenizer


def vocabulary_size(tokenizer) -> int:
    """The number of ids of ``tokenizer`` (the size of the model's embedding and softmax)."""
    return int(tokenizer.vocabulary_size())


def sentencepiece_proto(tokenizer) -> bytes:
    """The serialized SentencePiece model of a tokenizer from :func:`load_tokenizer`."""
    return bytes(tokenizer.proto)


def sentencepiece_processor(source):
    """A `sentencepiece.SentencePieceProcessor` for host-side (Python) work.

    `source`: a tokenizer from :func:`load_tokenizer`, a `.model` path, the
    model's bytes, or a processor (returned as it is). The one place the zoo
    builds a processor, for the callbacks, the exporters, the benchmarks and the tests.
    """
    import sentencepiece

    if isinstance(source, sentencepiece.SentencePieceProcessor):
        return source
    if isinstance(source, bytes):
        proto = source
    elif isinstance(source, (str, os.PathLike)):
        proto = pathlib.Path(source).read_bytes()
    else:
        proto = sentencepiece_proto(source)
    return sentencepiece.SentencePieceProcessor(model_proto=proto)

"""Line-aligned parallel text files (one sentence per line, line n of one translates line n of
the other), the format of most public corpora and of sacreBLEU test sets.

Two ways to use them:

* :func:`read_parallel_files` reads a pair of files into a list of ``(source, target)`` pairs:
  for valid and test sets, which are small;
* :func:`open_parallel_files` returns :class:`ParallelFiles` without reading them, which
  ``tf.data`` reads in chunks of lines (:meth:`ParallelFiles.text_chunks_dataset`): training
  sets of any size, never held in memory. The stream itself checks what a pass over the files
  used to check before training (equal line counts: an error naming both files when one ends
  first; valid UTF-8: an error naming the file and line), so the first batch comes after a
  few chunks, not after a pass over the corpus.

Both clean a line the same way, in Python here and in-graph in the ``tf.data`` reader: a
UTF-8 byte-order mark at its start is removed and surrounding ASCII whitespace (what
``tf.strings.strip`` strips: space, tab, CR, LF, VT, FF) is stripped; a pair where either side
is then empty is left out and counted, because it teaches a model to translate something into
nothing.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import os
import pathlib
import random
from typing import Iterator, Sequence

_BYTE_ORDER_MARK = "\ufeff".encode("utf-8")
_READ_BLOCK = 1 << 20
# The vocabulary's sample of big files: runs of this many lines after random offsets.
_SAMPLE_RUN_LINES = 16
# Files with at most this many times the sample's texts are sampled in one full pass.
_WHOLE_PASS_FACTOR = 4
# Lines per reduce call when the stream counts a file for its mismatch message.
_COUNT_BATCH_LINES = 1 << 16


def _clean_line(raw_line: bytes) -> bytes:
    """A line without its byte-order mark and surrounding ASCII whitespace (line end included)."""
    return raw_line.removeprefix(_BYTE_ORDER_MARK).strip()


def _decoded(line: bytes, path: pathlib.Path, line_number: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}:{line_number}: invalid UTF-8 at byte {error.start} of the line "
            f"({line[error.start:error.start + 4]!r})"
        ) from error


def read_parallel_files(
    source_path: str | os.PathLike, target_path: str | os.PathLike
) -> tuple[list[tuple[str, str]], int]:
    """Reads two line-aligned files into ``(source, target)`` pairs (for small files).

    Returns:
        ``(pairs, dropped)`` where ``dropped`` is the number of pairs left out as empty.

    Raises:
        ValueError: if the files have different numbers of lines (naming both files and both
            counts) or a file is not valid UTF-8 (naming the file and line).
    """
    len(open_parallel_files(source_path, target_path))  # the checks, before any pair is kept
    pairs, dropped = [], 0
    with open(source_path, "rb") as source_file, open(target_path, "rb") as target_file:
        for source_line, target_line in zip(source_file, target_file):
            source_line, target_line = _clean_line(source_line), _clean_line(target_line)
            if source_line and target_line:
                pairs.append((source_line.decode("utf-8"), target_line.decode("utf-8")))
            else:
                dropped += 1
    return pairs, dropped


def _as_paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[pathlib.Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [pathlib.Path(paths)]
    return [pathlib.Path(path) for path in paths]


def _scan_file(path: pathlib.Path) -> int:
    """The lines of a file (a last line without a line end counts), its UTF-8 checked, read in
    blocks at the speed of C: no per-line work, constant memory.

    Raises:
        ValueError: at the first invalid UTF-8 byte, naming the file and line.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, last_byte = 0, b"\n"
    with open(path, "rb") as binary_file:
        for block in iter(lambda: binary_file.read(_READ_BLOCK), b""):
            pending = decoder.getstate()[0]  # a sequence the last block cut, if any
            try:
                decoder.decode(block)
            except UnicodeDecodeError as error:
                # Find the line with the bad byte the slow way, in this block's lines.
                for offset, raw_line in enumerate((pending + block).split(b"\n")):
                    _decoded(raw_line, path, lines + offset + 1)
                raise ValueError(f"{path}: invalid UTF-8 after line {lines}") from error
            lines += block.count(b"\n")
            last_byte = block[-1:]
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}:{lines + 1}: the file ends inside a UTF-8 sequence") \
                from error
    return lines + (last_byte != b"\n")


class StreamedPairs:
    """What the streaming sources of ``(source, target)`` pairs share (files, TFDS).

    A subclass defines ``text_chunks_dataset(chunk_size)`` (a ``tf.data.Dataset`` of
    ``tf.string`` ``[n]`` sources and targets) and ``__len__``.
    """

    def text_dataset(self):
        """The pairs one by one: scalar ``tf.string`` ``(source, target)``, in stored order."""
        return self.text_chunks_dataset().unbatch()

    def numpy_chunks(self, chunk_size: int = 4096):
        """The chunks as NumPy arrays of bytes, read without tf.data's autotune thread (whose
        wait made the end of each read last up to a minute: ``data.without_autotune_thread``)."""
        from keras_attn_zoo.data.pipeline import without_autotune_thread

        return without_autotune_thread(self.text_chunks_dataset(chunk_size)).as_numpy_iterator()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for sources, targets in self.numpy_chunks():
            for source, target in zip(sources, targets):
                yield source.decode("utf-8"), target.decode("utf-8")


def _line_count_error(source_path, source_lines, target_path, target_lines) -> str:
    return ("Parallel files have different numbers of lines: "
            f"{source_path} has {source_lines}, {target_path} has {target_lines}.")


@dataclasses.dataclass(frozen=True)
class ParallelFiles(StreamedPairs):
    """Training pairs that stay on disk: one or more pairs of line-aligned files.

    Made by :func:`open_parallel_files`, which reads nothing. :meth:`text_chunks_dataset` and
    :meth:`text_dataset` are the pairs as ``tf.data`` reads them (checking the files as it
    goes); iterating yields them as ``(source, target)`` text through the same reader (for a
    model that needs its pairs in memory). ``len()`` is the number of lines (pairs with an
    empty side among them: the streams leave those out, and ``data.pipeline_stats`` counts
    them), counted in a pass over the files on first use (``data.pipeline_stats``, after
    training), never before training.

    Attributes:
        file_pairs: ``(source, target)`` paths, in reading order.
    """

    file_pairs: tuple[tuple[str, str], ...]

    @functools.cached_property
    def lines(self) -> int:
        """Lines in each side's files together, counted in one pass in blocks (about 1 s per GB).

        Raises:
            ValueError: if a pair of files has different numbers of lines (naming both files
                and both counts) or a file is not valid UTF-8 (naming the file and line).
        """
        lines = 0
        for source_path, target_path in self.file_pairs:
            source_lines = _scan_file(pathlib.Path(source_path))
            target_lines = _scan_file(pathlib.Path(target_path))
            if source_lines != target_lines:
                raise ValueError(_line_count_error(source_path, source_lines, target_path,
                                                   target_lines))
            lines += source_lines
        return lines

    def __len__(self) -> int:
        return self.lines

    @property
    def file_count(self) -> int:
        """Files per side: the unit ``tf.data``'s FILE auto-sharding deals to workers."""
        return len(self.file_pairs)

    def text_chunks_dataset(self, chunk_size: int = 4096):
        """A ``tf.data.Dataset`` of chunks of pairs: ``tf.string`` ``[n]`` sources and targets.

        ``TextLineDataset`` reads each side in chunks of ``chunk_size`` lines (lines stream
        from disk; nothing is held), the two sides' chunks are zipped, and each chunk is
        cleaned as :func:`read_parallel_files` cleans lines, without the pairs with an empty
        side. Several file pairs are read one after another from a dataset of their names, so
        ``tf.distribute``'s FILE auto-sharding can give each worker its own files.

        The stream checks the files as it reads them (``tf.errors.InvalidArgumentError``,
        whose message names the problem): a file that ends before the other of its pair stops
        it with both files' line counts (the mismatch is found when the shorter file ends:
        the pairs before it have been read by then), and a line that is not valid UTF-8 with
        the file and line number.
        """
        import tensorflow as tf

        no_more_lines = tf.data.Dataset.from_tensors(tf.constant([], tf.string)).repeat()

        def side_chunks(path):
            # After its last line a side gives empty chunks, so zip() sees where it ended.
            return tf.data.TextLineDataset(path).batch(chunk_size).concatenate(no_more_lines)

        def line_count(path):  # for the error message only
            # Counted in batches: a reduce function called per line took ~30 us a line
            # (10-20 s to report a 150,000-line mismatch, against 1 s to stream it).
            return tf.data.TextLineDataset(path).batch(_COUNT_BATCH_LINES).reduce(
                tf.constant(0, tf.int64), lambda count, lines: count + tf.size(lines, tf.int64))

        def check_utf8(lines, path, first_line):
            valid = tf.equal(tf.strings.unicode_transcode(
                lines, "UTF-8", "UTF-8", errors="replace"), lines)
            # The first False (one past the chunk when all are valid, and for an empty chunk).
            first_invalid = first_line + tf.argmin(
                tf.cast(tf.concat([valid, [False]], 0), tf.int64), output_type=tf.int64)
            message = tf.strings.join([path, ":", tf.strings.as_string(first_invalid),
                                       ": invalid UTF-8 (the line is not valid UTF-8 text)"])
            return tf.debugging.Assert(tf.reduce_all(valid), [message])

        def check_chunk(index, sources, targets, source_path, target_path):
            first_line = index * chunk_size + 1

            def mismatch_message():
                return tf.strings.join([
                    "Parallel files have different numbers of lines: ", source_path, " has ",
                    tf.strings.as_string(line_count(source_path)), ", ", target_path, " has ",
                    tf.strings.as_string(line_count(target_path)), "."])

            aligned = tf.equal(tf.size(sources), tf.size(targets))
            message = tf.cond(aligned, lambda: tf.constant(""), mismatch_message)
            checks = [tf.debugging.Assert(aligned, [message]),
                      check_utf8(sources, source_path, first_line),
                      check_utf8(targets, target_path, first_line)]
            with tf.control_dependencies(checks):
                return tf.identity(sources), tf.identity(targets)

        def read_pair(source_path, target_path):
            chunks = tf.data.Dataset.zip(side_chunks(source_path), side_chunks(target_path))
            chunks = chunks.take_while(lambda sources, targets:
                                       tf.size(sources) + tf.size(targets) > 0)
            return chunks.enumerate().map(
                lambda index, chunk: check_chunk(index, *chunk, source_path, target_path))

        def clean(lines):
            return tf.strings.strip(tf.strings.regex_replace(lines, "^\ufeff", ""))

        def clean_chunk(sources, targets):
            sources, targets = clean(sources), clean(targets)
            full = tf.logical_and(tf.strings.length(sources) > 0,
                                  tf.strings.length(targets) > 0)
            return tf.boolean_mask(sources, full), tf.boolean_mask(targets, full)

        sources, targets = zip(*self.file_pairs)
        names = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        return names.flat_map(read_pair).map(clean_chunk, num_parallel_calls=tf.data.AUTOTUNE)

    def sample_texts(self, size: int, seed: int = 0) -> list[str]:
        """About ``size`` texts of both sides for a vocabulary, seeded, reading only the sample.

        Files that hold at most ``4 * size`` texts (judged by the bytes per line of their first
        MiB) are read whole: the sample is ``vocabulary.reservoir_sample`` of their pairs, as
        for the same pairs in a list. Bigger ones are not read through: each side's bytes are
        cut into ``size / 2 / 16`` equal strata, and each stratum gives the (up to) 16 lines
        that start after a seeded random offset in it. Every part of the corpus is
        represented by its share of the bytes (a corpus sorted by origin gives each origin its
        share), in about a second for any corpus size; the sides are sampled apart, which a
        joint vocabulary does not mind, and a line a little more often the longer the line
        before it is (the offset falls into that one).

        Raises:
            ValueError: if a sampled line is not valid UTF-8 (naming the file and byte offset).
        """
        from keras_attn_zoo.data.vocabulary import _text_chunks, reservoir_sample_chunks

        if 2 * self._estimated_lines() <= _WHOLE_PASS_FACTOR * size:
            return reservoir_sample_chunks(_text_chunks(self), size, seed=seed)
        generator = random.Random(seed)
        sources, targets = zip(*self.file_pairs)
        return (_sample_runs(sources, size - size // 2, generator)
                + _sample_runs(targets, size // 2, generator))

    def _estimated_lines(self) -> float:
        """The lines of the source files, from the bytes per line of their first MiB."""
        paths = [source for source, _ in self.file_pairs]
        total = sum(os.path.getsize(path) for path in paths)
        with open(paths[0], "rb") as first_file:
            block = first_file.read(_READ_BLOCK)
        if len(block) == total:
            return block.count(b"\n") + (not block.endswith(b"\n"))
        return total * max(block.count(b"\n"), 1) / max(len(block), 1)


def _sample_runs(paths, count, generator) -> list[str]:
    """``count`` lines of the files ``paths`` (one byte space), in runs after random offsets
    (see :meth:`ParallelFiles.sample_texts`): cleaned, empty ones left out."""
    sizes = [os.path.getsize(path) for path in paths]
    starts = [sum(sizes[:index]) for index in range(len(sizes))]  # of each file, in the space
    total = sum(sizes)
    strata = max(1, -(-count // _SAMPLE_RUN_LINES))
    texts = []
    for stratum in range(strata):
        stratum_start, stratum_end = stratum * total // strata, (stratum + 1) * total // strata
        offset = generator.randrange(stratum_start, max(stratum_end, stratum_start + 1))
        texts.extend(_lines_starting_in(paths, starts, sizes, offset, stratum_end))
    return texts[:count]


def _lines_starting_in(paths, starts, sizes, offset, end) -> list[str]:
    """Up to ``_SAMPLE_RUN_LINES`` non-empty cleaned lines that start in ``[offset, end)``."""
    texts = []
    index = max(i for i, start in enumerate(starts) if start <= offset)
    position = offset - starts[index]
    while index < len(paths) and len(texts) < _SAMPLE_RUN_LINES:
        with open(paths[index], "rb") as file:
            if position > 0:  # to the start of the next line (one starting at `position` too)
                file.seek(position - 1)
                file.readline()
            while len(texts) < _SAMPLE_RUN_LINES and starts[index] + file.tell() < end:
                line_start = file.tell()
                raw_line = file.readline()
                if not raw_line:
                    break
                line = _clean_line(raw_line)
                if line:
                    try:
                        texts.append(line.decode("utf-8"))
                    except UnicodeDecodeError as error:
                        raise ValueError(
                            f"{paths[index]}: invalid UTF-8 in the line at byte {line_start} "
                            f"({line[error.start:error.start + 4]!r})") from error
        index, position = index + 1, 0
        if index < len(paths) and starts[index] >= end:
            break
    return texts


def open_parallel_files(
    source_paths: str | os.PathLike | Sequence[str | os.PathLike],
    target_paths: str | os.PathLike | Sequence[str | os.PathLike],
) -> ParallelFiles:
    """One or more pairs of line-aligned files as a streaming source, reading nothing.

    ``source_paths[i]`` and ``target_paths[i]`` are one pair of files (a single path each for
    one pair). The stream checks the files as it reads them (see
    :meth:`ParallelFiles.text_chunks_dataset`); ``len()`` counts and checks them in a pass.

    Raises:
        ValueError: if the numbers of files differ.
        FileNotFoundError: naming a file that does not exist.
    """
    sources, targets = _as_paths(source_paths), _as_paths(target_paths)
    if len(sources) != len(targets) or not sources:
        raise ValueError(
            f"Parallel files come in pairs: {len(sources)} source file(s) "
            f"({', '.join(map(str, sources))}) and {len(targets)} target file(s) "
            f"({', '.join(map(str, targets))})."
        )
    for path in sources + targets:
        if not path.is_file():
            raise FileNotFoundError(f"No such parallel text file: {path}")
    return ParallelFiles(
        tuple((str(source), str(target)) for source, target in zip(sources, targets)))

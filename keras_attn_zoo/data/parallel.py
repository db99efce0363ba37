"""Line-aligned parallel text files (one sentence per line, line n of one translates line n of
the other), the format of most public corpora and of sacreBLEU test sets.

Two ways to use them:

* :func:`read_parallel_files` reads a pair of files into a list of ``(source, target)`` pairs:
  for valid and test sets, which are small;
* :func:`open_parallel_files` checks one or more pairs of files in one pass in blocks (equal
  line counts, valid UTF-8) and returns :class:`ParallelFiles`, which ``tf.data`` reads line
  by line (:meth:`ParallelFiles.text_dataset`): training sets of any size, never held in
  memory.

Both clean a line the same way, in Python here and in-graph in the ``tf.data`` reader: a
UTF-8 byte-order mark at its start is removed and surrounding ASCII whitespace (what
``tf.strings.strip`` strips: space, tab, CR, LF, VT, FF) is stripped; a pair where either side
is then empty is left out and counted, because it teaches a model to translate something into
nothing.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import pathlib
from typing import Iterator, Sequence

_BYTE_ORDER_MARK = "\ufeff".encode("utf-8")
_READ_BLOCK = 1 << 20


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
    open_parallel_files(source_path, target_path)  # the checks, before any pair is kept
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


@dataclasses.dataclass(frozen=True)
class ParallelFiles(StreamedPairs):
    """Training pairs that stay on disk: one or more pairs of line-aligned files.

    Made by :func:`open_parallel_files`, which has checked them. ``len()`` is the number of
    lines (pairs with an empty side among them: the streams leave those out, and
    ``data.pipeline_stats`` counts them). :meth:`text_chunks_dataset` and
    :meth:`text_dataset` are the pairs as ``tf.data`` reads them; iterating yields them as
    ``(source, target)`` text through the same reader (for a model that needs its pairs in
    memory).

    Attributes:
        file_pairs: ``(source, target)`` paths, in reading order.
        lines: lines in each side's files together.
    """

    file_pairs: tuple[tuple[str, str], ...]
    lines: int

    def __len__(self) -> int:
        return self.lines

    @property
    def file_count(self) -> int:
        """Files per side: the unit ``tf.data``'s FILE auto-sharding deals to workers."""
        return len(self.file_pairs)

    def text_chunks_dataset(self, chunk_size: int = 4096):
        """A ``tf.data.Dataset`` of chunks of pairs: ``tf.string`` ``[n]`` sources and targets.

        ``TextLineDataset`` reads each side (lines stream from disk; nothing is held), the two
        are zipped line by line and batched, and each chunk is cleaned as
        :func:`read_parallel_files` cleans lines, without the pairs with an empty side.
        Several file pairs are read one after another from a dataset of their names, so
        ``tf.distribute``'s FILE auto-sharding can give each worker its own files.
        """
        import tensorflow as tf

        def read_pair(source_path, target_path):
            return tf.data.Dataset.zip(tf.data.TextLineDataset(source_path),
                                       tf.data.TextLineDataset(target_path))

        def clean(lines):
            return tf.strings.strip(tf.strings.regex_replace(lines, "^\ufeff", ""))

        def clean_chunk(sources, targets):
            sources, targets = clean(sources), clean(targets)
            full = tf.logical_and(tf.strings.length(sources) > 0,
                                  tf.strings.length(targets) > 0)
            return tf.boolean_mask(sources, full), tf.boolean_mask(targets, full)

        sources, targets = zip(*self.file_pairs)
        names = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        return (names.flat_map(read_pair).batch(chunk_size)
                .map(clean_chunk, num_parallel_calls=tf.data.AUTOTUNE))


def open_parallel_files(
    source_paths: str | os.PathLike | Sequence[str | os.PathLike],
    target_paths: str | os.PathLike | Sequence[str | os.PathLike],
) -> ParallelFiles:
    """Checks one or more pairs of line-aligned files, loading nothing.

    ``source_paths[i]`` and ``target_paths[i]`` are one pair of files (a single path each for
    one pair). Each file is read once in blocks, in constant memory (about 1 s per GB): its
    lines are counted and its UTF-8 checked, and the two files of a pair must have as many
    lines.

    Raises:
        ValueError: if the numbers of files differ, a pair of files has different numbers of
            lines (naming both files and both counts), or a file is not valid UTF-8 (naming
            the file and line).
    """
    sources, targets = _as_paths(source_paths), _as_paths(target_paths)
    if len(sources) != len(targets) or not sources:
        raise ValueError(
            f"Parallel files come in pairs: {len(sources)} source file(s) "
            f"({', '.join(map(str, sources))}) and {len(targets)} target file(s) "
            f"({', '.join(map(str, targets))})."
        )
    lines = 0
    for source_path, target_path in zip(sources, targets):
        source_lines, target_lines = _scan_file(source_path), _scan_file(target_path)
        if source_lines != target_lines:
            raise ValueError(
                "Parallel files have different numbers of lines: "
                f"{source_path} has {source_lines}, {target_path} has {target_lines}."
            )
        lines += source_lines
    return ParallelFiles(
        tuple((str(source), str(target)) for source, target in zip(sources, targets)), lines)

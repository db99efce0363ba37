"""Line-aligned parallel text files (one sentence per line, line n of one translates line n of
the other), the format of most public corpora and of sacreBLEU test sets."""

from __future__ import annotations

import os
import pathlib


def _read_lines_strict(path: pathlib.Path) -> list[str]:
    """Reads UTF-8 lines without line terminators; a bad byte raises with file and line number."""
    lines = []
    with open(path, "rb") as binary_file:
        for line_number, raw_line in enumerate(binary_file, start=1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}:{line_number}: invalid UTF-8 at byte {error.start} of the line "
                    f"({raw_line[error.start:error.start + 4]!r})"
                ) from error
            if line_number == 1:
                # A byte-order mark is an encoding artefact, not part of the first sentence.
                line = line.removeprefix("\ufeff")
            lines.append(line.rstrip("\r\n"))
    return lines


def read_parallel_files(
    source_path: str | os.PathLike, target_path: str | os.PathLike
) -> tuple[list[tuple[str, str]], int]:
    """Reads two line-aligned files into ``(source, target)`` pairs.

    Surrounding whitespace is stripped from each side. Pairs where either side is empty or only
    whitespace are dropped, because they teach a model to translate something into nothing.

    Returns:
        ``(pairs, dropped)`` where ``dropped`` is the number of pairs left out as empty.

    Raises:
        ValueError: if the files have different numbers of lines (naming both files and both
            counts) or a file is not valid UTF-8 (naming the file and line).
    """
    source_path = pathlib.Path(source_path)
    target_path = pathlib.Path(target_path)
    source_lines = _read_lines_strict(source_path)
    target_lines = _read_lines_strict(target_path)
    if len(source_lines) != len(target_lines):
        raise ValueError(
            "Parallel files have different numbers of lines: "
            f"{source_path} has {len(source_lines)}, {target_path} has {len(target_lines)}."
        )
    pairs = []
    dropped = 0
    for source_line, target_line in zip(source_lines, target_lines):
        source_text = source_line.strip()
        target_text = target_line.strip()
        if not source_text or not target_text:
            dropped += 1
            continue
        pairs.append((source_text, target_text))
    return pairs, dropped

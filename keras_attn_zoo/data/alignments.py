"""Word alignments in Pharaoh format: the one reader and writer of the zoo.

One line per sentence pair, links `i-j` (sure) or `i?j` (possible), `i` the
0-based source word and `j` the 0-based target word. eflomal and fast_align
write sure links only; gold sets (such as the RWTH German-English one) mark
both. The eager translator's ε preprocessing reads any aligner's links, the
alignment-error-rate analysis reads gold links.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Iterable, Sequence


@dataclasses.dataclass
class Alignment:
    """One sentence pair's links: `links` in file order, `sure` within `possible`."""

    links: list
    sure: set
    possible: set


def _words(text) -> int:
    return len(text.split()) if isinstance(text, str) else len(list(text))


def parse_pharaoh_line(line: str, source_length: int | None = None,
                       target_length: int | None = None, where: str = "") -> Alignment:
    """Parses `"0-0 1?2 ..."` into an `Alignment`.

    Sure links are also possible links. With lengths, an index outside
    `[0, length)` is an error.

    Raises:
        ValueError: for a malformed link or an index outside the sentence;
            the message starts with `where` (e.g. "gold.txt line 3: ").
    """
    links, sure, possible = [], set(), set()
    for item in line.split():
        separator = "-" if "-" in item else ("?" if "?" in item else None)
        parts = item.split(separator) if separator else []
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            raise ValueError(
                f"{where}{item!r} is not a Pharaoh link: expected 'i-j' (sure) or "
                "'i?j' (possible) with 0-based word indices.")
        link = (int(parts[0]), int(parts[1]))
        check_links([link], source_length, target_length, where, item)
        links.append(link)
        possible.add(link)
        if separator == "-":
            sure.add(link)
    return Alignment(links, sure, possible)


def check_links(links, source_length=None, target_length=None, where="", item=None):
    """Raises a `ValueError` naming the first link outside the sentence pair."""
    for i, j in links:
        name = item or f"{i}-{j}"
        if source_length is not None and not 0 <= i < source_length:
            raise ValueError(
                f"{where}link {name} is outside the sentence pair: source word {i} "
                f"does not exist, the source has {source_length} words "
                f"(valid i: 0..{source_length - 1}).")
        if target_length is not None and not 0 <= j < target_length:
            raise ValueError(
                f"{where}link {name} is outside the sentence pair: target word {j} "
                f"does not exist, the target has {target_length} words "
                f"(valid j: 0..{target_length - 1}).")


def read_alignments(path_or_lines, pairs: Sequence | None = None) -> list[Alignment]:
    """Reads one `Alignment` per line of a file path or an iterable of lines.

    Args:
        path_or_lines: a file path or an iterable of lines.
        pairs: optional `(source, target)` per line (whitespace-tokenized
            strings or token lists) to check the line count and every link.

    Raises:
        ValueError: naming the file and the 1-based line: a line count that
            differs from the number of pairs, a malformed link, or a link
            outside its sentence pair.
    """
    if isinstance(path_or_lines, (str, os.PathLike)):
        name = str(path_or_lines)
        lines = pathlib.Path(path_or_lines).read_text(encoding="utf-8").splitlines()
    else:
        name = "alignments"
        lines = [line.rstrip("\r\n") for line in path_or_lines]
    if pairs is not None and len(lines) != len(pairs):
        first_bad = min(len(lines), len(pairs)) + 1
        problem = (f"line {first_bad} has no sentence pair" if len(lines) > len(pairs)
                   else f"line {first_bad} (for sentence pair {first_bad}) is missing")
        raise ValueError(
            f"{name} has {len(lines)} lines but the data has {len(pairs)} sentence pairs "
            f"({problem}); give one alignment line per sentence pair.")
    alignments = []
    for number, line in enumerate(lines, start=1):
        lengths = (None, None)
        if pairs is not None:
            source, target = pairs[number - 1]
            lengths = (_words(source), _words(target))
        alignments.append(
            parse_pharaoh_line(line, *lengths, where=f"{name} line {number}: "))
    return alignments


def write_pharaoh(alignments: Iterable[Iterable[tuple[int, int]]], path) -> None:
    """Writes links as Pharaoh `i-j` lines (read back by `read_alignments`)."""
    with open(path, "w", encoding="utf-8") as handle:
        for links in alignments:
            handle.write(" ".join(f"{i}-{j}" for i, j in links) + "\n")

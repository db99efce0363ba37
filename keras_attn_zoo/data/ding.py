"""The Ding German-English dictionary as a small parallel corpus.

The Ding dictionary (Frank Richter, TU Chemnitz, GPL-2+) ships as one text file with lines

    German :: English

where both sides are split into sub-entries by `` | `` (the n-th German sub-entry translates the
n-th English one) and each sub-entry lists alternatives separated by ``;``. Many entries end in
example sentences ("Er reißt sich kein Bein aus. :: He isn't straining himself."); these make a
clean corpus of about 18,000 short sentence pairs, which is enough to train and compare small
attention models on a CPU. The remaining ~200,000 sub-entries are words and phrases.

The file is not redistributed with this package. ``make corpus`` installs it (apt where it can,
else the upstream download; ``scripts/install_ding_corpus.py``), :func:`ensure_ding_file` finds it
and :func:`ding_corpus` returns deterministic train/valid/test splits.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
import sys
import unicodedata
from typing import Iterable

from keras_attn_zoo.files import write_atomically

DEFAULT_DING_PATH = "/usr/share/trans/de-en"
DING_ENV_VAR = "KERAS_ATTN_ZOO_DING"
DING_DOWNLOAD_URL = "https://ftp.tu-chemnitz.de/pub/Local/urz/ding/de-en/de-en.txt.gz"
DING_APT_PACKAGE = "trans-de-en"
# The set-up step that installs the file (`make corpus` runs it); this module only reads.
INSTALL_COMMAND = "python scripts/install_ding_corpus.py"

SPLITS = ("train", "valid", "test")
KINDS = ("sentences", "phrases", "all")
DIRECTIONS = ("de-en", "en-de")

# Split buckets out of 100: hashing the German side (not the line) keeps every German sentence in
# exactly one split no matter how often or where it occurs in the file.
_TEST_BUCKETS = 7
_VALID_BUCKETS = 7
_SPLIT_BUCKET_COUNT = 100

_MIN_SENTENCE_WORDS = 4

# Annotations to remove: {f} {pl} {vt}, [Br.] [ugs.], <search keywords>, and abbreviations such
# as "/Abs./" that stand alone between spaces (so "er/sie/es" and "and/or" are kept).
_ANNOTATION_PATTERN = re.compile(
    r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>|(?<!\S)/[^\s/]+/(?!\S)"
)
_ANNOTATION_START_PATTERN = re.compile(r"[{\[</]")
_OPENING_BRACKET_PATTERN = re.compile(r"[(\[{<]")
_WHITESPACE_PATTERN = re.compile(r"\s+")
# "pedalling [Br.]/pedaling [Am.]" leaves "pedalling /pedaling" once annotations are gone.
_SPACE_BEFORE_SLASH_PATTERN = re.compile(r"(?<=\S) /(?=\S)")
_SPACE_BEFORE_PUNCTUATION_PATTERN = re.compile(r"\s+(?=[.,;:!?](?:\s|$))")
_OPENING_BRACKETS = "([{<"
_CLOSING_BRACKETS = ")]}>"
_SENTENCE_END_CHARACTERS = ".?!"
# Quotes and brackets that may follow the final punctuation of a sentence.
_TRAILING_CLOSERS = "\"'“”„»«‘’)"
# Phrases such as "to do sth." or "jdm. etw. geben" end in a dot without being sentences.
_ABBREVIATIONS_THAT_END_PHRASES = frozenset(
    {
        "sth.", "sb.", "sb.'s", "sb.’s", "etw.", "jdn.", "jdm.", "jds.", "jd.",
        "etc.", "usw.", "u.", "o.", "bzw.", "z.", "B.", "vgl.", "ca.",
    }
)


# --------------------------------------------------------------------------------------------
# Locating the file
# --------------------------------------------------------------------------------------------


def ding_cache_dir() -> pathlib.Path:
    """Where downloads go: ``$XDG_CACHE_HOME/keras_attn_zoo``, else ``~/.cache/keras_attn_zoo``."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache_home) / "keras_attn_zoo"


def ding_cache_path() -> pathlib.Path:
    """Where ``make corpus`` stores a downloaded, decompressed copy (searched after the Debian path)."""
    return ding_cache_dir() / "de-en.txt"


def _how_to_get_ding_message() -> str:
    return (
        "The Ding German-English dictionary was not found. Install it with `make corpus`\n"
        f"(which runs {INSTALL_COMMAND}), or yourself in one of these ways:\n"
        f"  * Debian/Ubuntu: sudo apt-get install {DING_APT_PACKAGE}   "
        f"(installs {DEFAULT_DING_PATH})\n"
        f"  * download {DING_DOWNLOAD_URL}, gunzip it and set {DING_ENV_VAR}=/path/to/de-en.txt\n"
        f"  * or place the decompressed file at {ding_cache_path()}"
    )


def ensure_ding_file(path: str | os.PathLike | None = None) -> pathlib.Path:
    """Returns the path of the Ding ``de-en`` dictionary; only looks, never installs.

    The search order is: ``path`` (or the ``KERAS_ATTN_ZOO_DING`` environment variable), the
    Debian location ``/usr/share/trans/de-en``, then a copy in ``~/.cache/keras_attn_zoo``
    (where ``make corpus`` puts the upstream download when it cannot use apt).

    Args:
        path: an explicit file. When given (or set through the environment variable) it must
            exist; there is no silent fallback to another copy.

    Raises:
        FileNotFoundError: saying to run ``make corpus`` (or how to get the file by hand).
    """
    explicit_path = path if path is not None else os.environ.get(DING_ENV_VAR)
    if explicit_path:
        explicit_path = pathlib.Path(explicit_path).expanduser()
        if explicit_path.is_file():
            return explicit_path
        origin = "path" if path is not None else f"${DING_ENV_VAR}"
        raise FileNotFoundError(
            f"Ding dictionary given by {origin} does not exist: {explicit_path}\n"
            + _how_to_get_ding_message()
        )
    for candidate in (pathlib.Path(DEFAULT_DING_PATH), ding_cache_path()):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(_how_to_get_ding_message())


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def _strip_annotations(text: str) -> str:
    """Removes {..} [..] <..> and /abbreviation/ annotations and tidies whitespace."""
    # Most pieces need only the whitespace step; the regular expressions dominate parsing time.
    may_have_annotation = _ANNOTATION_START_PATTERN.search(text) is not None
    if may_have_annotation:
        text = _ANNOTATION_PATTERN.sub(" ", text)
    text = " ".join(text.split())
    if may_have_annotation:
        text = _SPACE_BEFORE_SLASH_PATTERN.sub("/", text)
        text = _SPACE_BEFORE_PUNCTUATION_PATTERN.sub("", text)
    return text


def _split_top_level(text: str, separator: str) -> list[str]:
    """Splits on ``separator`` outside any (), [], {} or <> brackets."""
    if separator not in text:
        return [text]
    if not _OPENING_BRACKET_PATTERN.search(text):
        return text.split(separator)
    pieces = []
    depth = 0
    piece_start = 0
    for index, character in enumerate(text):
        if character in _OPENING_BRACKETS:
            depth += 1
        elif character in _CLOSING_BRACKETS:
            depth = max(depth - 1, 0)
        elif character == separator and depth == 0:
            pieces.append(text[piece_start:index])
            piece_start = index + 1
    pieces.append(text[piece_start:])
    if depth != 0:
        # An unbalanced bracket (e.g. "x < y") would hide every separator after it.
        return text.split(separator)
    return pieces


def _ends_like_sentence(text: str) -> bool:
    stripped = text.rstrip(_TRAILING_CLOSERS)
    return stripped[-1:] in _SENTENCE_END_CHARACTERS if stripped else False


def _join_clauses_of_one_sentence(alternatives: list[str]) -> list[str]:
    """Re-joins pieces split at a ``;`` that is punctuation inside one sentence.

    In "You'll have to knock; our doorbell doesn't work." the semicolon joins two clauses. Such a
    semicolon follows a clause of two or more words that does not end a sentence, and is followed
    by a lower-case word; alternatives ("Stillgestanden!; Habt Acht!") look different.
    """
    whole = ";".join(alternatives)
    if len(alternatives) < 2 or not _ends_like_sentence(_strip_annotations(whole)):
        return alternatives
    joined = [alternatives[0]]
    for piece in alternatives[1:]:
        previous_clean = _strip_annotations(joined[-1])
        piece_clean = _strip_annotations(piece)
        is_inner_clause = (
            previous_clean[:1].isupper()
            and len(previous_clean.split()) >= 2
            and not _ends_like_sentence(previous_clean)
            and piece_clean[:1].islower()
        )
        if is_inner_clause:
            joined[-1] = joined[-1] + ";" + piece
        else:
            joined.append(piece)
    return joined


def _first_alternative(sub_entry: str) -> str:
    if ";" not in sub_entry:  # the common case: one alternative
        return _strip_annotations(sub_entry)
    alternatives = _join_clauses_of_one_sentence(_split_top_level(sub_entry, ";"))
    for alternative in alternatives:
        cleaned = _strip_annotations(alternative)
        if cleaned:
            return cleaned
    return ""


def _parse_line_or_none(line: str) -> list[tuple[str, str]] | None:
    """Parses one line; ``None`` means malformed (skipped), ``[]`` means nothing to keep."""
    if not line.strip() or line.startswith("#"):
        return []
    sides = line.split("::")
    if len(sides) != 2:
        return None
    # Split on the bare "|" so that an empty first sub-entry ("::  | x") still counts as one.
    german_sub_entries = sides[0].split("|")
    english_sub_entries = sides[1].split("|")
    if len(german_sub_entries) != len(english_sub_entries):
        return None
    pairs = []
    for german_sub_entry, english_sub_entry in zip(german_sub_entries, english_sub_entries):
        german = _first_alternative(german_sub_entry)
        english = _first_alternative(english_sub_entry)
        if german and english:
            pairs.append((german, english))
    return pairs


def parse_ding_line(line: str) -> list[tuple[str, str]]:
    """Parses one dictionary line into ``(german, english)`` pairs, one per sub-entry.

    * Sub-entries separated by `` | `` are paired by position. A line whose two sides have
      different numbers of sub-entries, or that lacks exactly one `` :: ``, is skipped (returns
      ``[]``; :func:`ding_statistics` counts such lines).
    * Of the ``;``-separated alternatives only the FIRST is kept on each side. Both sides list
      their most common form first, and the n-th alternatives do not correspond to each other,
      so pairing first with first is the one choice that is reliably a translation. Only a
      ``;`` outside brackets separates alternatives (``{prp; +Akk.}`` does not), and a ``;``
      between two clauses of one sentence is kept inside the sentence.
    * Annotations ``{..}``, ``[..]``, ``<..>`` and abbreviations like ``/Abs./`` are removed;
      text in round brackets is kept. Whitespace is collapsed.
    * Comment lines (``#``) and blank lines give ``[]``.
    """
    return _parse_line_or_none(line) or []


def is_sentence_pair(german: str, english: str) -> bool:
    """Whether a pair is an example sentence rather than a word or phrase.

    Both sides must end in ``.``, ``?`` or ``!`` (optionally followed by closing quotes) and have
    at least four words; the English side must start like a sentence (not "to do sth."), and
    neither side may end in an abbreviation such as "sth." or "etw.".
    """
    for text in (german, english):
        words = text.split()
        if len(words) < _MIN_SENTENCE_WORDS or not _ends_like_sentence(text):
            return False
        if words[-1].rstrip(_TRAILING_CLOSERS) in _ABBREVIATIONS_THAT_END_PHRASES:
            return False
    first_character = english.lstrip("\"'“„»«‘¡¿(")[:1]
    return first_character.isupper() or first_character.isdigit()


def normalize_for_split(german: str) -> str:
    """The key that decides a pair's split: NFC, case-folded, whitespace collapsed."""
    text = unicodedata.normalize("NFC", german).casefold()
    return _WHITESPACE_PATTERN.sub(" ", text).strip()


def split_of(german: str) -> str:
    """The split ("train", "valid" or "test") a German text belongs to; stable across runs."""
    digest = hashlib.md5(normalize_for_split(german).encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % _SPLIT_BUCKET_COUNT
    if bucket < _TEST_BUCKETS:
        return "test"
    if bucket < _TEST_BUCKETS + _VALID_BUCKETS:
        return "valid"
    return "train"


@dataclasses.dataclass(frozen=True)
class _ParsedDing:
    """Every distinct pair of the file with its kind and split, in file order."""

    pairs: tuple[tuple[str, str], ...]
    is_sentence: tuple[bool, ...]
    splits: tuple[str, ...]
    lines_read: int
    lines_skipped: int


def _parse_lines(lines: Iterable[str]) -> _ParsedDing:
    seen_pairs = set()
    pairs, is_sentence, splits = [], [], []
    lines_read = lines_skipped = 0
    split_by_german: dict[str, str] = {}
    for line in lines:
        if line.startswith("#") or not line.strip():
            continue
        lines_read += 1
        line_pairs = _parse_line_or_none(line)
        if line_pairs is None:
            lines_skipped += 1
            continue
        for pair in line_pairs:
            # The same example sentence appears under several head words; keep one copy.
            if pair in seen_pairs:
                continue
            seen_pairs.add(pair)
            german = pair[0]
            split = split_by_german.get(german)
            if split is None:
                split = split_by_german[german] = split_of(german)
            pairs.append(pair)
            is_sentence.append(is_sentence_pair(*pair))
            splits.append(split)
    return _ParsedDing(tuple(pairs), tuple(is_sentence), tuple(splits), lines_read, lines_skipped)


# Parsing the real file takes 9-20 s on a 2-core machine, and every run and test
# process needs it; reading the parsed pairs back from JSON takes under a second.
# Smaller files (the tests' own dictionaries) are parsed each time, and only the
# newest parses are kept, so the cache does not grow.
_DISK_CACHE_MIN_BYTES = 1_000_000
_DISK_CACHE_KEEP = 2
_SPLIT_LETTERS = {"train": "t", "valid": "v", "test": "e"}


def _disk_cache_path(path: str, modified_ns: int, size: int) -> pathlib.Path:
    """The parse's cache file: keyed by the file (path, modification time, size) and
    by this module's source, so a change to the parsing rules parses again."""
    key = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    key.update(f"\0{path}\0{modified_ns}\0{size}".encode("utf-8"))
    return ding_cache_dir() / f"parsed-{key.hexdigest()[:24]}.json"


def _read_parse(cache_path: pathlib.Path) -> _ParsedDing | None:
    try:
        stored = json.loads(cache_path.read_text(encoding="utf-8"))
        splits = {letter: split for split, letter in _SPLIT_LETTERS.items()}
        parsed = _ParsedDing(tuple(tuple(pair) for pair in stored["pairs"]),
                             tuple(flag == "1" for flag in stored["is_sentence"]),
                             tuple(splits[letter] for letter in stored["splits"]),
                             stored["lines_read"], stored["lines_skipped"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, or unreadable: parse the file again
    if not len(parsed.pairs) == len(parsed.is_sentence) == len(parsed.splits):
        return None
    return parsed


def _write_parse(cache_path: pathlib.Path, parsed: _ParsedDing) -> None:
    """Writes the parse under a temporary name and renames it; a cache that cannot be
    written (a read-only home) is skipped, not an error."""
    stored = {"pairs": parsed.pairs,
              "is_sentence": "".join("1" if flag else "0" for flag in parsed.is_sentence),
              "splits": "".join(_SPLIT_LETTERS[split] for split in parsed.splits),
              "lines_read": parsed.lines_read, "lines_skipped": parsed.lines_skipped}
    try:
        write_atomically(cache_path, json.dumps(stored, ensure_ascii=False))
        older = sorted(cache_path.parent.glob("parsed-*.json"),
                       key=lambda entry: entry.stat().st_mtime, reverse=True)
        for stale in older[_DISK_CACHE_KEEP:]:
            stale.unlink(missing_ok=True)
    except OSError:
        pass


@functools.lru_cache(maxsize=4)
def _parse_file_cached(path: str, modified_ns: int, size: int) -> _ParsedDing:
    """The parsed file, from the disk cache when it holds this file's parse."""
    cache_path = _disk_cache_path(path, modified_ns, size)
    on_disk = size >= _DISK_CACHE_MIN_BYTES
    parsed = _read_parse(cache_path) if on_disk else None
    if parsed is None:
        with open(path, encoding="utf-8", errors="replace") as dictionary_file:
            parsed = _parse_lines(dictionary_file)
        if on_disk:
            _write_parse(cache_path, parsed)
    return parsed


def _parse_file(path: str | os.PathLike | None) -> _ParsedDing:
    resolved = ensure_ding_file(path).resolve()
    status = resolved.stat()
    return _parse_file_cached(str(resolved), status.st_mtime_ns, status.st_size)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"Unknown {name}={value!r}; expected one of {', '.join(choices)}.")


def ding_corpus(
    split: str = "train",
    kind: str = "sentences",
    direction: str = "de-en",
    path: str | os.PathLike | None = None,
) -> list[tuple[str, str]]:
    """Returns ``(source, target)`` pairs of the Ding dictionary.

    Args:
        split: "train", "valid" or "test". About 7% of distinct German texts go to test and 7% to
            valid, chosen by an MD5 hash of the normalised German side, so the split does not
            depend on the order of the file and no German text is in two splits.
        kind: "sentences" (example sentences, about 18,000 in total), "phrases" (every other
            sub-entry, about 200,000) or "all".
        direction: "de-en" gives (German, English) pairs, "en-de" (English, German).
        path: the dictionary file; see :func:`ensure_ding_file` for the default search.

    The parsed file is cached in this process (keyed by path, modification time and size)
    and, for a file of 1 MB or more, in ``~/.cache/keras_attn_zoo/parsed-*.json``.
    Identical pairs are returned once, in file order.
    """
    _check_choice("split", split, SPLITS)
    _check_choice("kind", kind, KINDS)
    _check_choice("direction", direction, DIRECTIONS)
    parsed = _parse_file(path)
    wanted_sentence = {"sentences": (True,), "phrases": (False,), "all": (True, False)}[kind]
    selected = [
        pair
        for pair, is_sentence, pair_split in zip(parsed.pairs, parsed.is_sentence, parsed.splits)
        if pair_split == split and is_sentence in wanted_sentence
    ]
    if direction == "en-de":
        return [(english, german) for german, english in selected]
    return selected


def ding_statistics(path: str | os.PathLike | None = None) -> dict:
    """Counts of the parsed dictionary.

    Returns:
        ``{"path": str, "lines": int, "lines_skipped": int, "pairs": int,
        "counts": {split: {"sentences": n, "phrases": n, "all": n}}}``.
    """
    resolved = ensure_ding_file(path)
    parsed = _parse_file(resolved)
    counts = {split: {"sentences": 0, "phrases": 0, "all": 0} for split in SPLITS}
    for is_sentence, split in zip(parsed.is_sentence, parsed.splits):
        counts[split]["sentences" if is_sentence else "phrases"] += 1
        counts[split]["all"] += 1
    return {
        "path": str(resolved),
        "lines": parsed.lines_read,
        "lines_skipped": parsed.lines_skipped,
        "pairs": len(parsed.pairs),
        "counts": counts,
    }


def main(argv: list[str] | None = None, locate=ensure_ding_file) -> int:
    """``python -m keras_attn_zoo.data.ding [PATH]``: print the file's path and counts.

    ``locate(path_or_None)`` finds the file (the set-up script passes its installer).
    """
    argv = sys.argv[1:] if argv is None else argv
    try:
        path = locate(argv[0] if argv else None)
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    statistics = ding_statistics(path)
    print(f"Ding dictionary: {statistics['path']}")
    print(
        f"lines: {statistics['lines']}  skipped (malformed): {statistics['lines_skipped']}  "
        f"distinct pairs: {statistics['pairs']}"
    )
    print(f"{'split':<8}{'sentences':>12}{'phrases':>12}{'all':>12}")
    for split, split_counts in statistics["counts"].items():
        print(
            f"{split:<8}{split_counts['sentences']:>12}{split_counts['phrases']:>12}"
            f"{split_counts['all']:>12}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

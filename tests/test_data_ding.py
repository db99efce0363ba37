"""Tests of the Ding dictionary parser and corpus splits (keras_attn_zoo.data.ding)."""

import gzip
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

from keras_attn_zoo.data import ding

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPOSITORY / "scripts" / "install_ding_corpus.py"


def load_install_script():
    """The set-up script (not part of the package) as a module."""
    spec = importlib.util.spec_from_file_location("install_ding_corpus", INSTALL_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# Hand-written lines in the Ding format (not taken from the dictionary).
SMALL_DICTIONARY = """\
# Version :: test 2024-01-01
# Copyright (c) :: hand-written test lines
Haus {n} | Häuser {pl} :: house | houses
Katze {f}; Mieze {f} [ugs.] :: cat; pussy [coll.]
Boot {n} /Bt./ <Bot> (kleines Schiff) :: boat (small ship) [naut.]
in Bezug auf etw. {prp; +Akk.}; bezüglich etw. :: regarding sth.; concerning sth.
kaputt {adj} | Das Auto ist jetzt kaputt. :: broken | The car is broken now.
Er kam, er sah und siegte. :: He came; he saw and he won.
Wie spät ist es?; Wie viel Uhr ist es? :: What time is it?; What's the time? [Br.]
Fehler {m} | Fehler {pl} | fehlerhaft :: error | errors
kein Trenner hier
"""


def write_dictionary(directory: pathlib.Path, text: str, name: str = "de-en.txt") -> pathlib.Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def synthetic_sentence_lines(count: int) -> list[str]:
    """Lines with one sentence pair each, plus head words, in the Ding format."""
    lines = []
    for number in range(count):
        lines.append(
            f"Wort{number} {{n}} | Hier steht der Satz Nummer {number}. :: "
            f"word{number} | Here is the sentence number {number}."
        )
    # The same German sentence under two head words with different translations.
    lines.append(
        "Gleich {adj} | Das ist immer derselbe Satz. :: same | This is always the same sentence."
    )
    lines.append(
        "selbig {adj} | Das ist immer derselbe Satz. :: very same | It is always the same sentence."
    )
    return lines


# ---------------------------------------------------------------------------------------------
# parse_ding_line
# ---------------------------------------------------------------------------------------------


def test_sub_entries_are_paired_by_position_and_annotations_removed():
    assert ding.parse_ding_line("Haus {n} | Häuser {pl} :: house | houses") == [
        ("Haus", "house"),
        ("Häuser", "houses"),
    ]


def test_first_alternative_is_kept_and_brackets_do_not_split():
    assert ding.parse_ding_line("Katze {f}; Mieze {f} [ugs.] :: cat; pussy [coll.]") == [
        ("Katze", "cat")
    ]
    # The ";" inside {prp; +Akk.} is not an alternative separator.
    assert ding.parse_ding_line(
        "in Bezug auf etw. {prp; +Akk.}; bezüglich etw. :: regarding sth.; concerning sth."
    ) == [("in Bezug auf etw.", "regarding sth.")]


def test_round_brackets_are_kept_other_annotations_removed():
    line = "Boot {n} /Bt./ <Bot> (kleines Schiff) :: boat (small ship) [naut.]"
    assert ding.parse_ding_line(line) == [("Boot (kleines Schiff)", "boat (small ship)")]


def test_semicolon_inside_a_sentence_is_not_an_alternative():
    assert ding.parse_ding_line("Er kam, er sah und siegte. :: He came; he saw and he won.") == [
        ("Er kam, er sah und siegte.", "He came; he saw and he won.")
    ]
    # Between two sentences it separates alternatives.
    assert ding.parse_ding_line(
        "Wie spät ist es?; Wie viel Uhr ist es? :: What time is it?; What's the time? [Br.]"
    ) == [("Wie spät ist es?", "What time is it?")]


def test_mismatched_sub_entries_and_malformed_lines_are_skipped():
    assert ding.parse_ding_line("Fehler {m} | Fehler {pl} | fehlerhaft :: error | errors") == []
    assert ding.parse_ding_line("kein Trenner hier") == []
    assert ding.parse_ding_line("# Version :: test") == []
    assert ding.parse_ding_line("") == []


def test_empty_sub_entry_is_dropped_without_losing_the_pairing():
    assert ding.parse_ding_line(" | eins {num} | zwei {num} ::  | one | two") == [
        ("eins", "one"),
        ("zwei", "two"),
    ]


def test_whitespace_is_collapsed():
    assert ding.parse_ding_line("ein   großes \t Haus {n} :: a  big   house") == [
        ("ein großes Haus", "a big house")
    ]


@pytest.mark.parametrize(
    "german, english, expected",
    [
        ("Das Auto ist jetzt kaputt.", "The car is broken now.", True),
        ("Wie spät ist es?", "What time is it?", True),
        ("Das Auto ist kaputt.", "Broken.", False),  # too short on one side
        ("jdm. etw. aus der Hand nehmen", "to take sth. from sb.", False),
        ("etw. in die Tat umsetzen etw.", "to put sth. into practice sth.", False),
    ],
)
def test_is_sentence_pair(german, english, expected):
    assert ding.is_sentence_pair(german, english) is expected


# ---------------------------------------------------------------------------------------------
# ding_corpus on small written files
# ---------------------------------------------------------------------------------------------


def test_corpus_kinds_and_directions(tmp_path):
    path = write_dictionary(tmp_path, SMALL_DICTIONARY)
    every_pair = {
        pair
        for split in ding.SPLITS
        for pair in ding.ding_corpus(split, kind="all", path=path)
    }
    sentences = {
        pair for split in ding.SPLITS for pair in ding.ding_corpus(split, "sentences", path=path)
    }
    phrases = {
        pair for split in ding.SPLITS for pair in ding.ding_corpus(split, "phrases", path=path)
    }
    assert sentences == {
        ("Das Auto ist jetzt kaputt.", "The car is broken now."),
        ("Er kam, er sah und siegte.", "He came; he saw and he won."),
        ("Wie spät ist es?", "What time is it?"),
    }
    assert ("Haus", "house") in phrases and ("kaputt", "broken") in phrases
    assert sentences | phrases == every_pair and not sentences & phrases

    reversed_pairs = {
        pair for split in ding.SPLITS for pair in ding.ding_corpus(split, "all", "en-de", path=path)
    }
    assert reversed_pairs == {(english, german) for german, english in every_pair}


def test_statistics_count_skipped_lines(tmp_path):
    path = write_dictionary(tmp_path, SMALL_DICTIONARY)
    statistics = ding.ding_statistics(path)
    assert statistics["lines"] == 9  # comment lines are not counted
    assert statistics["lines_skipped"] == 2  # mismatched sub-entries, no " :: "
    total = sum(counts["all"] for counts in statistics["counts"].values())
    assert total == statistics["pairs"] == 9


def test_splits_do_not_depend_on_line_order_and_are_disjoint(tmp_path):
    lines = synthetic_sentence_lines(600)
    original = write_dictionary(tmp_path, "\n".join(lines) + "\n", "original.txt")
    random.Random(1).shuffle(lines)
    shuffled = write_dictionary(tmp_path, "\n".join(lines) + "\n", "shuffled.txt")

    splits = {}
    for split in ding.SPLITS:
        from_original = ding.ding_corpus(split, "sentences", path=original)
        from_shuffled = ding.ding_corpus(split, "sentences", path=shuffled)
        assert sorted(from_original) == sorted(from_shuffled)
        splits[split] = {german for german, _ in from_original}

    assert not splits["train"] & splits["valid"]
    assert not splits["train"] & splits["test"]
    assert not splits["valid"] & splits["test"]
    # Both translations of the repeated German sentence land in the same split.
    repeated = "Das ist immer derselbe Satz."
    holding_split = [split for split, germans in splits.items() if repeated in germans]
    assert len(holding_split) == 1
    same_split_pairs = ding.ding_corpus(holding_split[0], path=original)
    assert len([pair for pair in same_split_pairs if pair[0] == repeated]) == 2
    # Roughly 7% / 7% / 86% of 601 sentences.
    assert 15 <= len(splits["test"]) <= 70 and 15 <= len(splits["valid"]) <= 70


def test_bad_arguments_name_the_value(tmp_path):
    path = write_dictionary(tmp_path, SMALL_DICTIONARY)
    with pytest.raises(ValueError, match="'training'"):
        ding.ding_corpus("training", path=path)
    with pytest.raises(ValueError, match="'words'"):
        ding.ding_corpus("train", kind="words", path=path)
    with pytest.raises(ValueError, match="'de-fr'"):
        ding.ding_corpus("train", direction="de-fr", path=path)


def test_cache_notices_a_changed_file(tmp_path):
    path = write_dictionary(tmp_path, "Haus {n} :: house\n")
    first = {p for s in ding.SPLITS for p in ding.ding_corpus(s, "all", path=path)}
    path.write_text("Haus {n} :: house\nBaum {m} :: tree\n", encoding="utf-8")
    second = {p for s in ding.SPLITS for p in ding.ding_corpus(s, "all", path=path)}
    assert first == {("Haus", "house")}
    assert second == {("Haus", "house"), ("Baum", "tree")}


def test_a_large_file_is_parsed_once_and_read_back_from_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = write_dictionary(tmp_path, "\n".join(synthetic_sentence_lines(20000)) + "\n")
    assert path.stat().st_size >= ding._DISK_CACHE_MIN_BYTES
    parsed = ding._parse_file(path)
    [cached] = (tmp_path / "cache" / "keras_attn_zoo").glob("parsed-*.json")

    def parse_in_a_fresh_process_cache():
        ding._parse_file_cached.cache_clear()
        return ding._parse_file(path)

    # Read back: the same pairs, kinds and splits, without parsing the lines.
    monkeypatch.setattr(ding, "_parse_lines", None)
    assert parse_in_a_fresh_process_cache() == parsed
    # A damaged cache file is parsed again (and rewritten), not trusted.
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached.write_text('{"pairs": [["a", "b"]], "is_sentence": "10"', encoding="utf-8")
    assert parse_in_a_fresh_process_cache() == parsed
    assert ding._read_parse(cached) == parsed
    # A changed file gets its own entry; only the newest two are kept.
    for extra in range(3):
        with path.open("a", encoding="utf-8") as dictionary_file:
            dictionary_file.write(f"Extra{extra} {{n}} :: extra{extra}\n")
        assert ("Extra%d" % extra, "extra%d" % extra) in parse_in_a_fresh_process_cache().pairs
    assert len(list((tmp_path / "cache" / "keras_attn_zoo").glob("parsed-*.json"))) == 2
    # Small files (the tests' dictionaries) are not cached on disk.
    small = write_dictionary(tmp_path, SMALL_DICTIONARY, name="small.txt")
    ding._parse_file(small)
    assert len(list((tmp_path / "cache" / "keras_attn_zoo").glob("parsed-*.json"))) == 2


def test_main_prints_path_and_counts(tmp_path, capsys):
    path = write_dictionary(tmp_path, SMALL_DICTIONARY)
    assert ding.main([str(path)]) == 0
    output = capsys.readouterr().out
    assert str(path) in output and "sentences" in output and "train" in output


# ---------------------------------------------------------------------------------------------
# ensure_ding_file
# ---------------------------------------------------------------------------------------------


def test_explicit_path_and_environment_variable(tmp_path, monkeypatch):
    path = write_dictionary(tmp_path, SMALL_DICTIONARY)
    assert ding.ensure_ding_file(path) == path
    monkeypatch.setenv(ding.DING_ENV_VAR, str(path))
    assert ding.ensure_ding_file() == path


def test_missing_explicit_path_raises_with_instructions(tmp_path):
    with pytest.raises(FileNotFoundError) as raised:
        ding.ensure_ding_file(tmp_path / "absent.txt")
    message = str(raised.value)
    assert "absent.txt" in message
    assert "make corpus" in message and ding.INSTALL_COMMAND in message
    assert "apt-get install trans-de-en" in message
    assert ding.DING_DOWNLOAD_URL in message and ding.DING_ENV_VAR in message


def test_cached_copy_is_used_when_the_default_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv(ding.DING_ENV_VAR, raising=False)
    monkeypatch.setattr(ding, "DEFAULT_DING_PATH", str(tmp_path / "not-installed"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="make corpus"):
        ding.ensure_ding_file()
    cached = ding.ding_cache_path()
    cached.parent.mkdir(parents=True)
    cached.write_text(SMALL_DICTIONARY, encoding="utf-8")
    assert ding.ensure_ding_file() == cached


def fake_upstream(tmp_path, monkeypatch):
    """No dictionary installed or cached; the upstream URL is a local gzip (no network)."""
    compressed = tmp_path / "upstream" / "de-en.txt.gz"
    compressed.parent.mkdir()
    with gzip.open(compressed, "wt", encoding="utf-8") as upstream_file:
        upstream_file.write(SMALL_DICTIONARY)
    monkeypatch.delenv(ding.DING_ENV_VAR, raising=False)
    monkeypatch.setattr(ding, "DEFAULT_DING_PATH", str(tmp_path / "not-installed"))
    monkeypatch.setattr(ding, "DING_DOWNLOAD_URL", compressed.as_uri())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_reading_never_installs_or_downloads(tmp_path, monkeypatch):
    # Even with a reachable upstream copy, the reader only looks and says how to install.
    fake_upstream(tmp_path, monkeypatch)
    with pytest.raises(FileNotFoundError, match="make corpus"):
        ding.ding_corpus("train")
    assert not (tmp_path / "cache").exists()


def test_make_corpus_runs_the_install_script():
    commands = subprocess.run(
        ["make", "-n", "-B", "corpus"], cwd=REPOSITORY, capture_output=True, text=True, check=True
    ).stdout
    assert f"python {INSTALL_SCRIPT.relative_to(REPOSITORY)}" in commands
    assert ding.INSTALL_COMMAND.endswith(str(INSTALL_SCRIPT.relative_to(REPOSITORY)))


# ---------------------------------------------------------------------------------------------
# The real dictionary
# ---------------------------------------------------------------------------------------------

real_dictionary = pytest.mark.skipif(
    not pathlib.Path(ding.DEFAULT_DING_PATH).is_file(),
    reason=f"Ding dictionary not installed at {ding.DEFAULT_DING_PATH} "
    "(apt-get install trans-de-en)",
)


@real_dictionary
def test_real_corpus_sizes_and_disjoint_splits():
    path = ding.DEFAULT_DING_PATH
    sentences = {split: ding.ding_corpus(split, "sentences", path=path) for split in ding.SPLITS}
    total_sentences = sum(len(pairs) for pairs in sentences.values())
    assert 15_000 <= total_sentences <= 25_000
    assert len(sentences["test"]) >= 1000 and len(sentences["valid"]) >= 1000

    germans = {split: {german for german, _ in pairs} for split, pairs in sentences.items()}
    assert not germans["train"] & germans["valid"]
    assert not germans["train"] & germans["test"]
    assert not germans["valid"] & germans["test"]

    for german, english in sentences["test"][:200]:
        for text in (german, english):
            assert text == text.strip() and "  " not in text
            assert not any(character in text for character in "{}[]<>")


@real_dictionary
def test_real_corpus_phrases():
    statistics = ding.ding_statistics(ding.DEFAULT_DING_PATH)
    total_phrases = sum(counts["phrases"] for counts in statistics["counts"].values())
    assert total_phrases > 150_000
    assert statistics["lines_skipped"] < 100


def _committed_strings(path: pathlib.Path):
    """The text of a committed file that could quote the corpus: every string of a JSON
    file except the model outputs of its example lists (a translation may repeat a
    training sentence it learned by heart), the whole text of any other text file."""
    if path.suffix in {".png", ".npz", ".gz", ".model", ".keras"}:
        return  # images, arrays, tokenizer models, the leaderboard's stored translations
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".json":
        yield text
        return

    def walk(value, example_list=False):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, example_list=key.endswith("examples"))
        elif isinstance(value, list):
            for item in value:
                if example_list and isinstance(item, dict):  # only its corpus keys
                    yield from (item[key] for key in ("source", "reference") if key in item)
                else:
                    yield from walk(item)

    yield from walk(json.loads(text))


def test_no_committed_file_quotes_the_corpus():
    # The corpus is GPL-2+ and installed by `make corpus`, never committed: no tracked
    # file (results, docs, code) holds a Ding example sentence of 30 characters or more.
    try:
        path = ding.ensure_ding_file()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPOSITORY, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    width = 30
    by_prefix = {}
    for split in ding.SPLITS:
        for pair in ding.ding_corpus(split, "sentences", path=path):
            for sentence in pair:
                if len(sentence) >= width:
                    by_prefix.setdefault(sentence[:width], set()).add(sentence)
    assert len(by_prefix) > 10_000
    quoted = {}
    for name in filter(None, listed.stdout.decode().split("\0")):
        for text in _committed_strings(REPOSITORY / name):
            for start in range(len(text) - width + 1):
                for sentence in by_prefix.get(text[start:start + width], ()):
                    if text.startswith(sentence, start):
                        quoted.setdefault(name, []).append(sentence)
    assert not quoted, f"committed files quote the Ding corpus: {quoted}"


# ---------------------------------------------------------------------------------------------
# The set-up script (make corpus)
# ---------------------------------------------------------------------------------------------


def test_install_script_downloads_into_the_cache_the_reader_searches(tmp_path, monkeypatch):
    fake_upstream(tmp_path, monkeypatch)
    install = load_install_script()

    path = install.install_ding_corpus(allow_install=False)
    assert path == ding.ding_cache_path() == ding.ensure_ding_file()
    assert path.read_text(encoding="utf-8") == SMALL_DICTIONARY
    assert [entry.name for entry in path.parent.iterdir()] == ["de-en.txt"]  # no temp files left


def test_install_script_keeps_an_existing_file(tmp_path):
    # What `make corpus` runs, in a fresh interpreter: a found file is used as it is.
    path = write_dictionary(tmp_path, SMALL_DICTIONARY)
    environment = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    environment[ding.DING_ENV_VAR] = str(path)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPOSITORY), environment.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, str(INSTALL_SCRIPT)], env=environment,
                            capture_output=True, text=True, check=True)
    assert f"Ding dictionary: {path}" in result.stdout and "sentences" in result.stdout
    assert not (tmp_path / "cache").exists()


def test_failed_download_explains_how_to_get_the_file(tmp_path, monkeypatch, capsys):
    fake_upstream(tmp_path, monkeypatch)
    monkeypatch.setattr(ding, "DING_DOWNLOAD_URL", (tmp_path / "missing.gz").as_uri())
    install = load_install_script()
    with pytest.raises(FileNotFoundError, match="apt-get install trans-de-en") as raised:
        install.install_ding_corpus(allow_install=False)
    assert "download from" in str(raised.value)
    assert not any((tmp_path / "cache" / "keras_attn_zoo").iterdir())

"""Tests of parallel text files, TFDS translation loading and data specs."""

import pytest

from keras_attn_zoo.data import parallel, wmt

# ---------------------------------------------------------------------------------------------
# read_parallel_files
# ---------------------------------------------------------------------------------------------


def write_lines(path, lines, encoding="utf-8"):
    path.write_bytes("".join(line + "\n" for line in lines).encode(encoding))
    return path


def test_pairs_are_read_and_stripped(tmp_path):
    source = write_lines(tmp_path / "train.de", ["Guten Morgen.", "  Wie geht's?  ", "Straße"])
    target = write_lines(tmp_path / "train.en", ["Good morning.", "How are you?", "street"])
    pairs, dropped = parallel.read_parallel_files(source, target)
    assert pairs == [
        ("Guten Morgen.", "Good morning."),
        ("Wie geht's?", "How are you?"),
        ("Straße", "street"),
    ]
    assert dropped == 0


def test_empty_sides_are_dropped_and_counted(tmp_path):
    source = write_lines(tmp_path / "a.de", ["Eins.", "", "Drei.", "   ", "Fünf."])
    target = write_lines(tmp_path / "a.en", ["One.", "Two.", "\t", "Four.", "Five."])
    pairs, dropped = parallel.read_parallel_files(source, target)
    assert pairs == [("Eins.", "One."), ("Fünf.", "Five.")]
    assert dropped == 3


def test_windows_line_endings_and_byte_order_mark(tmp_path):
    source = tmp_path / "b.de"
    target = tmp_path / "b.en"
    source.write_bytes("\ufeffHallo.\r\nTschüss.\r\n".encode("utf-8"))
    target.write_bytes(b"Hello.\r\nBye.\r\n")
    pairs, _ = parallel.read_parallel_files(source, target)
    assert pairs == [("Hallo.", "Hello."), ("Tschüss.", "Bye.")]


def test_mismatched_line_counts_name_files_and_counts(tmp_path):
    source = write_lines(tmp_path / "c.de", ["Eins.", "Zwei.", "Drei."])
    target = write_lines(tmp_path / "c.en", ["One.", "Two."])
    with pytest.raises(ValueError) as raised:
        parallel.read_parallel_files(source, target)
    message = str(raised.value)
    assert "c.de" in message and "c.en" in message
    assert "3" in message and "2" in message


def test_undecodable_bytes_name_file_and_line(tmp_path):
    source = write_lines(tmp_path / "d.de", ["Eins.", "Zwei."])
    target = tmp_path / "d.en"
    target.write_bytes(b"One.\nTw\xff\xfeo.\n")
    with pytest.raises(ValueError, match=r"d\.en:2"):
        parallel.read_parallel_files(source, target)


# ---------------------------------------------------------------------------------------------
# data specs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("ding", wmt.DataSpec(corpus="ding", kind="sentences")),
        ("ding:sentences", wmt.DataSpec(corpus="ding", kind="sentences")),
        ("ding:all", wmt.DataSpec(corpus="ding", kind="all")),
        ("ding:phrases", wmt.DataSpec(corpus="ding", kind="phrases")),
        ("tfds:wmt14_translate/de-en", wmt.DataSpec(corpus="tfds", name="wmt14_translate/de-en")),
    ],
)
def test_parse_data_spec(spec, expected):
    assert wmt.parse_data_spec(spec) == expected


@pytest.mark.parametrize("spec", ["wmt14", "ding:words", "tfds:", ""])
def test_parse_data_spec_rejects_unknown_specs(spec):
    with pytest.raises(ValueError, match="(?i)data spec"):
        wmt.parse_data_spec(spec)


# ---------------------------------------------------------------------------------------------
# TFDS: a tiny translation data set prepared into tmp_path, read through the real tfds API
# ---------------------------------------------------------------------------------------------

TINY_EXAMPLES = {
    "train": [
        ("Guten Morgen.", "Good morning."),
        ("Das Haus ist groß.", "The house is big."),
        ("Wo ist der Bahnhof?", "Where is the station?"),
        ("Ich trinke Kaffee.", "I drink coffee."),
        ("Die Straße ist nass.", "The street is wet."),
    ],
    "validation": [("Danke schön.", "Thank you very much."), ("Bis morgen.", "See you tomorrow.")],
}


@pytest.fixture(scope="module")
def tiny_tfds_name():
    """Registers (once per process) a tiny TFDS translation builder and returns its name."""
    tfds = pytest.importorskip("tensorflow_datasets")
    name = "keras_attn_zoo_test_tiny_translation"
    if name in tfds.list_builders(with_community_datasets=False):
        return name

    class KerasAttnZooTestTinyTranslation(tfds.core.GeneratorBasedBuilder):
        """Five German-English training pairs and two validation pairs."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {"translation": tfds.features.Translation(languages=("de", "en"))}
                ),
            )

        def _split_generators(self, dl_manager):
            del dl_manager  # nothing to download
            return {split: self._generate_examples(split) for split in TINY_EXAMPLES}

        def _generate_examples(self, split):
            for index, (german, english) in enumerate(TINY_EXAMPLES[split]):
                yield f"{split}-{index}", {"translation": {"de": german, "en": english}}

    assert KerasAttnZooTestTinyTranslation.name == name
    return name


def test_load_tfds_translation_reads_both_directions(tiny_tfds_name, tmp_path):
    train = wmt.load_tfds_translation(tiny_tfds_name, "train", "de-en", data_dir=tmp_path)
    assert sorted(train) == sorted(TINY_EXAMPLES["train"])

    reversed_pairs = wmt.load_tfds_translation(tiny_tfds_name, "valid", "en-de", data_dir=tmp_path)
    assert sorted(reversed_pairs) == sorted((en, de) for de, en in TINY_EXAMPLES["validation"])

    first_two = wmt.load_tfds_translation(
        tiny_tfds_name, "train", data_dir=tmp_path, max_examples=2
    )
    assert len(first_two) == 2 and set(first_two) <= set(TINY_EXAMPLES["train"])

    from_spec = wmt.load_pairs(f"tfds:{tiny_tfds_name}", "train", data_dir=tmp_path)
    assert sorted(from_spec) == sorted(train)


def test_a_tfds_training_split_streams_the_same_pairs(tiny_tfds_name, tmp_path,
                                                     tiny_tokenizer):
    from keras_attn_zoo.data import pipeline

    stream = wmt.open_tfds_translation(tiny_tfds_name, "train", "en-de", data_dir=tmp_path)
    in_memory = wmt.load_tfds_translation(tiny_tfds_name, "train", "en-de", data_dir=tmp_path)
    assert len(stream) == len(in_memory) == len(TINY_EXAMPLES["train"])
    assert list(stream) == in_memory  # the stored order (TFDS' own, not the generator's)
    assert sorted(in_memory) == sorted((en, de) for de, en in TINY_EXAMPLES["train"])
    stats = pipeline.pipeline_stats(stream, tiny_tokenizer, batch_tokens=160, max_length=40)
    assert (stats.total, stats.dropped_empty) == (len(in_memory), 0)
    batches = list(pipeline.training_stream(stream, tiny_tokenizer, batch_tokens=160,
                                            max_length=40))
    assert sum(int(labels.shape[0]) for _, labels in batches) == stats.kept


def test_load_tfds_translation_rejects_missing_language(tiny_tfds_name, tmp_path):
    with pytest.raises(ValueError, match="'fr'"):
        wmt.load_tfds_translation(tiny_tfds_name, "train", "de-fr", data_dir=tmp_path)

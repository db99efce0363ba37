"""Training data that streams from disk (issue 35): parallel files read by tf.data, counted in
one pass, shuffled in a bounded buffer, resumed mid-epoch, sharded by file; the vocabulary's
one-pass reservoir sample."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.data import parallel, pipeline, vocabulary
from keras_attn_zoo.models import transformer
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.optimizers import Adam

BATCH_TOKENS = 160
MAX_LENGTH = 40
OPTIONS = dict(batch_tokens=BATCH_TOKENS, max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def corpus_on_disk(tmp_path_factory, tiny_parallel_corpus):
    """The tiny corpus in two pairs of files, with the dirt of real corpora.

    Returns ``(file_pairs, kept, empty_count, long_count)``: ``kept`` are the pairs every
    epoch must hold, cleaned.
    """
    directory = tmp_path_factory.mktemp("streaming")
    pairs = list(tiny_parallel_corpus[:120])
    long_pairs = [(" ".join([german] * 8), english) for german, english in pairs[:3]]
    empty_lines = [("", "Nothing on the left."), ("Nichts rechts.", "   ")]
    halves = [pairs[:60] + long_pairs[:1] + empty_lines[:1], pairs[60:] + long_pairs[1:]
              + empty_lines[1:]]
    file_pairs = []
    for index, half in enumerate(halves):
        source, target = directory / f"part{index}.de", directory / f"part{index}.en"
        # A byte-order mark, Windows line ends and padding: cleaned as read_parallel_files does.
        source.write_bytes(("\ufeff" + "".join(f"  {s}\r\n" for s, _ in half)).encode())
        target.write_bytes("".join(f"{t}\t\n" for _, t in half).encode())
        file_pairs.append((source, target))
    return file_pairs, pairs, len(empty_lines), len(long_pairs)


def open_files(file_pairs):
    return zoo_data.open_parallel_files([s for s, _ in file_pairs], [t for _, t in file_pairs])


def epoch_pairs(batches, tokenizer):
    """The (source, target) texts of a list of batches, detokenized."""
    seen = []
    for features, labels in batches:
        sources = tokenizer.detokenize(tf.constant(features["source_ids"]))
        targets = tokenizer.detokenize(tf.constant(labels))
        seen.extend(zip(sources, targets))
    return seen


def test_stream_yields_every_pair_once_per_epoch(corpus_on_disk, tiny_tokenizer):
    file_pairs, kept, empty_count, long_count = corpus_on_disk
    files = open_files(file_pairs)
    assert files.lines == len(kept) + empty_count + long_count
    assert list(files)[:2] == kept[:2]  # cleaned: no mark, padding or CR

    stats = pipeline.pipeline_stats(files, tiny_tokenizer, **OPTIONS)
    assert (stats.dropped_empty, stats.dropped_too_long, stats.kept) == (
        empty_count, long_count, len(kept))
    # The same counts as the in-memory path over the same pairs.
    in_memory = pipeline.pipeline_stats(list(files), tiny_tokenizer, **OPTIONS)
    assert (in_memory.kept, in_memory.target_tokens) == (stats.kept, stats.target_tokens)

    orders = []
    for epoch in range(2):
        # A buffer smaller than the corpus: the bounded shuffle of a big one.
        stream = pipeline.training_stream(files, tiny_tokenizer, seed=epoch,
                                          shuffle_buffer_size=16, **OPTIONS)
        batches = list(stream.as_numpy_iterator())
        seen = epoch_pairs(batches, tiny_tokenizer)
        assert collections.Counter(seen) == collections.Counter(kept), f"epoch {epoch}"
        assert sum(int(pipeline.count_target_tokens(labels)) for _, labels in batches) \
            == stats.target_tokens
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled per epoch


def test_a_resumed_epoch_neither_repeats_nor_skips_a_pair(corpus_on_disk, tiny_tokenizer):
    file_pairs, kept, _, _ = corpus_on_disk
    files = open_files(file_pairs)

    def make_stream(epoch):
        # Built anew for each call, as a restarted process builds it.
        return pipeline.training_stream(files, tiny_tokenizer, seed=3 + epoch,
                                        shuffle_buffer_size=16, **OPTIONS)

    whole_epoch = list(make_stream(1).as_numpy_iterator())
    trained = 4  # killed after four batches of epoch 1; the checkpoint says so
    model = transformer(zoo_data.vocabulary_size(tiny_tokenizer), preset="tiny")
    trainer = Trainer(model, Adam(1e-3))
    trainer.epoch.assign(1)
    trainer.batches_in_epoch.assign(trained)
    resumed = list(trainer.epoch_dataset(make_stream, 1).as_numpy_iterator())

    assert len(resumed) == len(whole_epoch) - trained > 0
    for (features, labels), (want_features, want_labels) in zip(resumed, whole_epoch[trained:]):
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(features["source_ids"], want_features["source_ids"])
    seen = epoch_pairs(whole_epoch[:trained] + resumed, tiny_tokenizer)
    assert collections.Counter(seen) == collections.Counter(kept)


def stream_error(files, chunk_size=4096):
    """The message of the error the files' stream stops with."""
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        for _ in files.text_chunks_dataset(chunk_size).as_numpy_iterator():
            pass
    return str(raised.value)


def test_mismatched_line_counts_name_both_files_as_the_stream_goes(tmp_path):
    good_source, good_target = tmp_path / "a.de", tmp_path / "a.en"
    good_source.write_text("Eins.\nZwei.\n", encoding="utf-8")
    good_target.write_text("One.\nTwo.", encoding="utf-8")  # no final line end: 2 lines too
    source, target = tmp_path / "big.de", tmp_path / "big.en"
    # Beyond one read block (1 MiB), so the counts come from more than one block.
    source.write_text("Ein Satz.\n" * 150_001, encoding="utf-8")
    target.write_text("A sentence.\n" * 150_000, encoding="utf-8")
    files = zoo_data.open_parallel_files([good_source, source], [good_target, target])
    # Opening reads nothing; the stream finds the mismatch where big.en ends (mid-chunk).
    message = stream_error(files)
    assert "big.de has 150001" in message and "big.en has 150000" in message
    with pytest.raises(ValueError, match="big.de has 150001, .*big.en has 150000"):
        len(files)  # the counting pass says the same
    # A source that ends at a chunk's end, its target one line later.
    (tmp_path / "c.de").write_text("Satz.\n" * 8, encoding="utf-8")
    (tmp_path / "c.en").write_text("Sentence.\n" * 9, encoding="utf-8")
    message = stream_error(zoo_data.open_parallel_files(tmp_path / "c.de", tmp_path / "c.en"),
                           chunk_size=4)
    assert "c.de has 8" in message and "c.en has 9" in message
    with pytest.raises(ValueError, match="in pairs"):
        zoo_data.open_parallel_files([good_source, source], [good_target])
    with pytest.raises(FileNotFoundError, match="missing.en"):
        zoo_data.open_parallel_files(source, tmp_path / "missing.en")


def test_invalid_utf8_names_the_line_beyond_the_first_block(tmp_path):
    source, target = tmp_path / "u.de", tmp_path / "u.en"
    source.write_bytes("Straße.\n".encode() * 200_000 + b"Stra\xdfe.\n")
    target.write_bytes(b"Street.\n" * 200_001)
    files = zoo_data.open_parallel_files(source, target)
    assert "u.de:200001: invalid UTF-8" in stream_error(files)
    with pytest.raises(ValueError, match=r"u\.de:200001: invalid UTF-8"):
        len(files)


def test_reservoir_sample_is_seeded_uniform_and_chunking_blind():
    items = list(range(1000))
    sample = vocabulary.reservoir_sample(items, 50, seed=4)
    assert len(set(sample)) == 50 and set(sample) <= set(items)
    assert vocabulary.reservoir_sample(iter(items), 50, seed=4) == sample
    assert vocabulary.reservoir_sample(items, 50, seed=5) != sample
    # The positions that enter the sample depend on the seed only, not on how the stream
    # is cut into chunks (files are read in chunks of 8,192, lists of 4,096).
    for size in (1, 7, 999, 4096):
        chunks = [items[start:start + size] for start in range(0, len(items), size)]
        assert vocabulary.reservoir_sample_chunks(chunks, 50, seed=4) == sample
    assert vocabulary.reservoir_sample(items[:30], 50, seed=4) == items[:30]
    # Uniform: over 2,000 seeds every item of 20 is drawn about 2000 * 5 / 20 = 500 times.
    counts = collections.Counter()
    for seed in range(2000):
        counts.update(vocabulary.reservoir_sample(range(20), 5, seed=seed))
    chi_square = sum((count - 500) ** 2 / 500 for count in counts.values())
    assert len(counts) == 20 and chi_square < 45  # 99.9th percentile, 19 dof: 43.8


def test_vocabulary_from_files_equals_vocabulary_from_their_pairs(corpus_on_disk, tmp_path):
    file_pairs, _, _, _ = corpus_on_disk
    files = open_files(file_pairs)
    options = dict(vocab_size=80, max_sentences=90, seed=2)  # a sample: 90 of 246 texts
    from_files = vocabulary.train_sentencepiece(files, tmp_path / "files.model", **options)
    from_list = vocabulary.train_sentencepiece(list(files), tmp_path / "list.model", **options)
    assert from_files.read_bytes() == from_list.read_bytes()


def test_shard_policy_is_file_with_a_file_per_worker_else_data(corpus_on_disk, tiny_tokenizer,
                                                               monkeypatch):
    policy = tf.data.experimental.AutoShardPolicy
    assert pipeline.data_shard_policy(file_count=0, worker_count=1) == policy.DATA
    assert pipeline.data_shard_policy(file_count=1, worker_count=1) == policy.DATA
    assert pipeline.data_shard_policy(file_count=2, worker_count=2) == policy.FILE
    assert pipeline.data_shard_policy(file_count=2, worker_count=3) == policy.DATA

    file_pairs, kept, _, _ = corpus_on_disk
    files = open_files(file_pairs)

    def stream_policy(data):
        stream = pipeline.training_stream(data, tiny_tokenizer, **OPTIONS)
        return stream.options().experimental_distribute.auto_shard_policy

    assert stream_policy(files) == policy.FILE
    assert stream_policy(open_files(file_pairs[:1])) == policy.DATA
    assert stream_policy(list(files)) == policy.DATA
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:2", "c:3"]}}')
    assert pipeline.worker_count() == 3 and stream_policy(files) == policy.DATA

    # What FILE sharding gives two workers (TensorFlow's own rewrite, as a multi-worker
    # strategy applies it): each its own file pair, together every pair once.
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

    halves = []
    for worker in range(2):
        sharded = _AutoShardDataset(files.text_dataset(), 2, worker)
        halves.append([(s.decode(), t.decode()) for s, t in sharded.as_numpy_iterator()])
    assert halves[0] and halves[1] and not set(halves[0]) & set(halves[1])
    assert collections.Counter(halves[0] + halves[1]) == collections.Counter(
        list(files))


def test_vocabulary_sample_of_big_files_is_seeded_spread_and_reads_real_lines(tmp_path):
    # Two file pairs of unequal size, with the dirt of real corpora (a mark, padding, CR,
    # empty lines): a sample of 200 texts of 4,000 lines is drawn without a pass over them.
    lines = 4000
    sources = [f"Satz {index}." if index % 97 else "" for index in range(lines)]
    targets = [f"Sentence {index}." for index in range(lines)]
    paths = []
    for part, (start, stop) in enumerate(((0, 1300), (1300, lines))):
        source, target = tmp_path / f"p{part}.de", tmp_path / f"p{part}.en"
        source.write_bytes(("\ufeff" * (part == 0) + "".join(
            f"  {text}\r\n" for text in sources[start:stop])).encode())
        target.write_bytes("".join(f"{text}\n" for text in targets[start:stop]).encode())
        paths.append((source, target))
    files = open_files(paths)

    sample = files.sample_texts(200, seed=1)
    assert sample == files.sample_texts(200, seed=1) != files.sample_texts(200, seed=2)
    german = [text for text in sample if text.startswith("Satz")]
    english = [text for text in sample if text.startswith("Sentence")]
    assert len(german) + len(english) == len(sample) and len(english) == 100
    assert 90 <= len(german) <= 100  # empty lines left out
    assert set(german) <= set(sources) and set(english) <= set(targets)
    assert len(set(german)) == len(german) and len(set(english)) == len(english)
    # Runs of lines from strata spread over the whole corpus, both files of a side: the first
    # and the last stratum (by bytes; a line of the corpus is 1/4000 of it) among them.
    strata = -(-100 // parallel._SAMPLE_RUN_LINES)
    for texts in (german, english):
        numbers = sorted(int(text.split()[1].rstrip(".")) for text in texts)
        runs = 1 + sum(after - before > 2 for before, after in zip(numbers, numbers[1:]))
        assert runs == strata, numbers
        assert numbers[0] < lines / strata and numbers[-1] > lines * (strata - 1) / strata

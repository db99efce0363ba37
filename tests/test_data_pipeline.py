"""Tests of the SentencePiece vocabulary and the tf.data pipeline."""

import io

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_attn_zoo.data import pipeline, vocabulary
from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID

ROUND_TRIP_TEXTS = [
    "Der Hund sieht den Ball.",
    "Die Ärztin grüßt das Mädchen im Garten!",
    "The teacher paints the flower every morning?",
    "Der Bäcker mag den Käse sehr gern.",
]

# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------


def test_special_ids_and_vocabulary_size(tiny_tokenizer, tiny_sentencepiece_model):
    assert tiny_sentencepiece_model.is_file()
    assert tiny_tokenizer.get_vocabulary()[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert 20 < vocabulary.vocabulary_size(tiny_tokenizer) <= 150
    assert vocabulary.sentencepiece_proto(tiny_tokenizer) == tiny_sentencepiece_model.read_bytes()


def test_empty_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="empty corpus"):
        vocabulary.train_sentencepiece(["", "   ", ("", "")], tmp_path / "empty.model")
    assert not (tmp_path / "empty.model").exists()


def test_model_with_other_special_ids_is_rejected(tmp_path, tiny_parallel_corpus):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(  # SentencePiece defaults: unk=0, bos=1, eos=2
        sentence_iterator=iter([german for german, _ in tiny_parallel_corpus]),
        model_writer=model,
        vocab_size=60,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="special ids"):
        vocabulary.load_tokenizer(model.getvalue())


def test_detokenize_inverts_tokenize(tiny_tokenizer):
    # Eagerly keras-hub returns Python lists and strings.
    for text in ROUND_TRIP_TEXTS:
        ids = tiny_tokenizer(text)
        assert ids.dtype == tf.int32
        assert tiny_tokenizer.detokenize(ids) == text
        assert "▁" not in tiny_tokenizer.detokenize(ids)

    @tf.function
    def round_trip(texts):
        return tiny_tokenizer.detokenize(tiny_tokenizer(texts))

    decoded = [text.decode("utf-8") for text in round_trip(tf.constant(ROUND_TRIP_TEXTS)).numpy()]
    assert decoded == ROUND_TRIP_TEXTS


def test_detokenize_skips_control_ids(tiny_tokenizer):
    ids = list(tiny_tokenizer(ROUND_TRIP_TEXTS[0]).numpy())
    with_specials = tf.constant([[BOS_ID] + ids + [EOS_ID, PAD_ID, PAD_ID]], tf.int32)
    assert tiny_tokenizer.detokenize(with_specials) == [ROUND_TRIP_TEXTS[0]]


def test_tokenizer_survives_a_saved_model(tiny_tokenizer, tmp_path):
    class RoundTrip(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, texts):
            return self.tokenizer.detokenize(self.tokenizer(texts))

    tf.saved_model.save(RoundTrip(tiny_tokenizer), str(tmp_path / "round_trip"))
    restored = tf.saved_model.load(str(tmp_path / "round_trip"))
    decoded = restored(tf.constant(ROUND_TRIP_TEXTS[:2])).numpy()
    assert [text.decode("utf-8") for text in decoded] == ROUND_TRIP_TEXTS[:2]


# ---------------------------------------------------------------------------------------------
# Pipeline
# ---------------------------------------------------------------------------------------------


def collect_batches(dataset):
    return [
        (features["source_ids"].numpy(), features["target_ids"].numpy(), labels.numpy())
        for features, labels in dataset
    ]


def real_length(row):
    """Length of a row up to (excluding) its padding."""
    nonzero = np.flatnonzero(row != PAD_ID)
    return int(nonzero[-1]) + 1 if nonzero.size else 0


@pytest.fixture(scope="module")
def corpus_with_long_pairs(tiny_parallel_corpus):
    long_pairs = [
        (" ".join([german] * 8), english) for german, english in tiny_parallel_corpus[:3]
    ] + [(german, " ".join([english] * 8)) for german, english in tiny_parallel_corpus[3:5]]
    return list(tiny_parallel_corpus) + long_pairs, len(long_pairs)


BATCH_TOKENS = 160
MAX_LENGTH = 40


def test_batches_have_the_promised_layout(tiny_tokenizer, corpus_with_long_pairs):
    pairs, long_count = corpus_with_long_pairs
    dataset, stats = pipeline.make_dataset(
        pairs, tiny_tokenizer, batch_tokens=BATCH_TOKENS, max_length=MAX_LENGTH, seed=3
    )
    assert stats.total == len(pairs)
    assert stats.dropped_too_long == long_count
    assert stats.kept == len(pairs) - long_count

    batches = collect_batches(dataset)
    assert sum(source.shape[0] for source, _, _ in batches) == stats.kept
    assert len({source.shape[0] for source, _, _ in batches}) > 1  # buckets differ in size
    label_tokens = 0
    for source, target_ids, labels in batches:
        assert source.dtype == target_ids.dtype == labels.dtype == np.int32
        assert target_ids.shape == labels.shape
        batch_size = source.shape[0]
        # The token budget holds for the padded batch.
        assert batch_size * max(source.shape[1], target_ids.shape[1]) <= BATCH_TOKENS
        # Padded to the batch's own longest sequence, not beyond.
        assert max(real_length(row) for row in source) == source.shape[1]
        assert max(real_length(row) for row in labels) == labels.shape[1]
        for source_row, target_row, label_row in zip(source, target_ids, labels):
            source_length = real_length(source_row)
            assert source_row[source_length - 1] == EOS_ID
            assert EOS_ID not in source_row[: source_length - 1]
            assert not source_row[source_length:].any()

            label_length = real_length(label_row)
            assert target_row[0] == BOS_ID
            assert label_row[label_length - 1] == EOS_ID
            assert EOS_ID not in label_row[: label_length - 1]
            # labels are the decoder inputs shifted left by one.
            np.testing.assert_array_equal(target_row[1:label_length], label_row[: label_length - 1])
            assert not target_row[label_length:].any() and not label_row[label_length:].any()
            assert max(source_length, label_length) <= MAX_LENGTH
        label_tokens += int(pipeline.count_target_tokens(labels))
    assert label_tokens == stats.target_tokens


def test_every_kept_pair_appears_once_and_long_pairs_never(tiny_tokenizer, corpus_with_long_pairs):
    pairs, long_count = corpus_with_long_pairs
    dataset, _ = pipeline.make_dataset(
        pairs, tiny_tokenizer, batch_tokens=BATCH_TOKENS, max_length=MAX_LENGTH
    )
    seen = []
    for source, _, labels in collect_batches(dataset):
        sources = tiny_tokenizer.detokenize(tf.constant(source))
        targets = tiny_tokenizer.detokenize(tf.constant(labels))
        seen.extend(zip(sources, targets))
    assert sorted(seen) == sorted(pairs[: len(pairs) - long_count])


def test_shuffling_is_seeded(tiny_tokenizer, tiny_parallel_corpus):
    def first_batch(seed):
        dataset, _ = pipeline.make_dataset(
            tiny_parallel_corpus, tiny_tokenizer, batch_tokens=BATCH_TOKENS, seed=seed
        )
        return collect_batches(dataset.take(1))[0][0]

    np.testing.assert_array_equal(first_batch(7), first_batch(7))
    unshuffled, _ = pipeline.make_dataset(
        tiny_parallel_corpus, tiny_tokenizer, batch_tokens=BATCH_TOKENS, shuffle=False
    )
    assert collect_batches(unshuffled.take(1))[0][0].shape[0] > 0


def test_repeat_and_drop_remainder(tiny_tokenizer, tiny_parallel_corpus):
    dataset, stats = pipeline.make_dataset(
        tiny_parallel_corpus,
        tiny_tokenizer,
        batch_tokens=BATCH_TOKENS,
        repeat=True,
        drop_remainder=True,
    )
    batches = collect_batches(dataset.take(40))
    assert sum(source.shape[0] for source, _, _ in batches) > stats.kept  # more than one epoch
    assert {source.shape[0] for source, _, _ in batches} <= set(stats.bucket_batch_sizes)


@pytest.mark.parametrize("max_length, batch_tokens", [(8, 8), (40, 160), (128, 4096), (256, 300)])
def test_bucket_layout_keeps_the_budget(max_length, batch_tokens):
    boundaries, batch_sizes = pipeline.bucket_layout(max_length, batch_tokens)
    assert boundaries == sorted(set(boundaries)) and boundaries[-1] == max_length + 1
    assert len(batch_sizes) == len(boundaries) + 1
    for boundary, batch_size in zip(boundaries, batch_sizes):
        assert batch_size >= 1 and batch_size * (boundary - 1) <= batch_tokens


def test_budget_smaller_than_max_length_is_rejected(tiny_tokenizer, tiny_parallel_corpus):
    with pytest.raises(ValueError, match="batch_tokens"):
        pipeline.make_dataset(tiny_parallel_corpus, tiny_tokenizer, batch_tokens=64, max_length=128)


def test_empty_input_gives_an_empty_dataset(tiny_tokenizer):
    dataset, stats = pipeline.make_dataset([], tiny_tokenizer)
    assert stats.kept == stats.total == stats.dropped_too_long == 0
    assert collect_batches(dataset) == []

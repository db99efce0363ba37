"""Synthetic inputs shared by the decoding benchmarks: text, a SentencePiece model
trained on it, and random source ids.

Random pseudo-words with a Zipf-like frequency stand in for a corpus: what the
benchmarks measure is the search and the model's arithmetic, not translations.
"""

from __future__ import annotations

import pathlib
import random
import string

from keras_attn_zoo.data.vocabulary import sentencepiece_processor
from keras_attn_zoo.data.vocabulary import train_sentencepiece

EOS_ID = 3


def synthetic_corpus(num_words, num_sentences, words_per_sentence, seed=0):
    """Random pseudo-words with a Zipf-like frequency, as sentences."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase)
                     for _ in range(rng.randint(2, 9))) for _ in range(num_words)]
    weights = [1.0 / (rank + 1) for rank in range(num_words)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(
        max(1, words_per_sentence // 2), words_per_sentence * 2)))
        for _ in range(num_sentences)], words, weights


def benchmark_sentences(args, count, words=None, weights=None, seed=1):
    if args.sentences:
        lines = [line.strip() for line in
                 pathlib.Path(args.sentences).read_text(encoding="utf-8").splitlines()]
        lines = [line for line in lines if line] or ["."]
        return [lines[i % len(lines)] for i in range(count)]
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, weights, k=args.source_words))
            for _ in range(count)]


def vocabulary_words(proto):
    """Words to build sentences from, for a trained export: its whole-word pieces."""
    processor = sentencepiece_processor(proto)
    words = [processor.id_to_piece(i)[1:] for i in range(4, processor.get_piece_size())
             if processor.id_to_piece(i).startswith("\u2581")
             and len(processor.id_to_piece(i)) > 1]
    return words or ["a"], [1.0] * max(len(words), 1)


def benchmark_vocabulary(args, workdir):
    """A SentencePiece model trained on the synthetic corpus (made once per run)."""
    path = workdir / "vocab.model"
    if not path.exists():
        corpus, _, _ = synthetic_corpus(max(50, args.vocab_size),
                                        400 if args.smoke else 40_000,
                                        args.source_words)
        train_sentencepiece(corpus, path, vocab_size=args.vocab_size)
    return path


def zoo_source_ids(batch, source_tokens, vocab_size, seed=2):
    """Random piece ids ``[batch, source_tokens]``, the last one EOS (3)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab_size - 3, size=[batch, source_tokens]).astype("int32")
    ids[:, -1] = EOS_ID
    return ids

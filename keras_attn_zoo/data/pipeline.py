"""The tf.data training pipeline: tokenize in-graph, filter by length, bucket, batch by tokens.

The pairs come from memory (a list, as the Ding corpus and the valid and test splits are) or
stream from disk (``data.open_parallel_files``, ``data.wmt.TfdsTranslation``): nothing in the
pipeline grows with the corpus (a shuffle buffer of at most 200,000 pairs, chunks of 1,024
pairs, the buckets' batches), so a WMT-size corpus trains in the memory of a small one.
:func:`pipeline_stats` counts an epoch in one streaming pass; :func:`training_stream` is an
epoch's batches; :func:`make_dataset` is both.

Each element is ``(features, labels)`` with

    features["source_ids"]  int32[B, S]  source pieces + [EOS]
    features["target_ids"]  int32[B, T]  [BOS] + target pieces     (decoder input)
    labels                  int32[B, T]  target pieces + [EOS]     (= target_ids shifted left)

padded with ``PAD_ID = 0`` to the longest sequence of the batch. Batches are formed from
sequences of similar length and hold at most ``batch_tokens`` padded tokens on either side:
``B * max(S, T) <= batch_tokens``.

With ``fixed_shapes=True`` (for an XLA-compiled training step, which compiles once per
shape) every batch of a bucket has the same shape ``[B, L]`` on both sides: ``L`` is the
bucket's upper length, on a coarser grid (multiples of 4 up to 32, then a quarter of the
power of two below), and a bucket's last, short batch is filled up to ``B`` rows with
copies of its own rows whose labels are all padding. The copies add no loss, no gradient
and no token to any count, and every pair still appears exactly once per epoch.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID, PAD_ID

# Strings are tokenized in chunks: one tensorflow-text call per chunk is far cheaper than one per
# sentence.
_TOKENIZE_CHUNK_SIZE = 1024
_MAX_SHUFFLE_BUFFER = 200_000

# Bucket widths grow by ~10%, so padding wastes at most ~10% of a batch.
_SMALLEST_BUCKET_LENGTH = 8
_BUCKET_GROWTH = 1.1
_SMALLEST_BUCKET_STEP = 2
# Fixed shapes: fewer, coarser buckets (each shape costs one XLA compilation).
_FIXED_SHAPE_MIN_STEP = 4


def without_autotune_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` with tf.data's autotuning (and its optimisation thread) switched off.

    Autotuning runs one optimisation thread per iterator, which sleeps up to 60 s
    between rounds; deleting the iterator waits for that thread to wake. A training
    loop makes a new iterator every epoch, so each epoch end stalled training for
    0-60 s with the CPU idle (about a quarter of a 2,000-step Ding run on 2 cores).
    Without it, ``AUTOTUNE`` maps run min(16, CPU count) calls at once and
    ``prefetch(AUTOTUNE)`` keeps its own buffer tuning; the elements are the same.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


@dataclasses.dataclass(frozen=True)
class PipelineStats:
    """What :func:`make_dataset` did with the pairs it was given.

    Attributes:
        total: number of pairs given.
        kept: pairs in the data set (one epoch).
        dropped_too_long: pairs left out because source + EOS or BOS + target had more than
            ``max_length`` tokens.
        max_length: the length limit, counting the special token.
        batch_tokens: the token budget of a batch.
        source_tokens: tokens of the kept sources, EOS included.
        target_tokens: tokens of the kept labels, EOS included (what the loss is averaged over).
        longest_source: longest kept source, EOS included (0 if nothing is kept).
        longest_target: longest kept target, BOS included (0 if nothing is kept).
        bucket_boundaries: ``bucket_by_sequence_length`` boundaries (lengths ``< b`` per bucket).
        bucket_batch_sizes: batch size per bucket (one more entry than boundaries).
        dropped_empty: pairs a streaming source left out before counting, because a side is
            empty (``total`` does not count them).
    """

    total: int
    kept: int
    dropped_too_long: int
    max_length: int
    batch_tokens: int
    source_tokens: int
    target_tokens: int
    longest_source: int
    longest_target: int
    bucket_boundaries: tuple[int, ...]
    bucket_batch_sizes: tuple[int, ...]
    dropped_empty: int = 0

    @property
    def dropped_fraction(self) -> float:
        return self.dropped_too_long / self.total if self.total else 0.0


def _next_upper_length(upper_length: int, fixed_shapes: bool) -> int:
    if fixed_shapes:
        # 8, 12, ..., 32, 40, 48, 56, 64, 80, ...: at most ~25% padding, few shapes.
        step = max(_FIXED_SHAPE_MIN_STEP, 2 ** (upper_length.bit_length() - 3))
        return upper_length + step
    return max(upper_length + _SMALLEST_BUCKET_STEP, int(upper_length * _BUCKET_GROWTH))


def bucket_layout(
    max_length: int, batch_tokens: int, fixed_shapes: bool = False
) -> tuple[list[int], list[int]]:
    """Bucket boundaries and per-bucket batch sizes that keep every batch within the budget.

    Bucket ``i`` holds lengths in ``[boundaries[i-1], boundaries[i])``, so its longest sequence
    is ``boundaries[i] - 1`` and ``batch_size = batch_tokens // (boundaries[i] - 1)`` keeps
    ``batch_size * padded_length <= batch_tokens`` whatever the batch pads to. The last boundary
    is ``max_length + 1``: longer sequences were filtered out, so the final bucket stays empty.
    ``fixed_shapes`` selects the coarser grid of fixed-shape batches (see the module doc).
    """
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}.")
    if batch_tokens < max_length:
        raise ValueError(
            f"batch_tokens={batch_tokens} is smaller than max_length={max_length}: a sequence of "
            "the maximum length would not fit into one batch."
        )
    boundaries = []
    upper_length = min(_SMALLEST_BUCKET_LENGTH, max_length)
    while upper_length < max_length:
        boundaries.append(upper_length + 1)
        upper_length = _next_upper_length(upper_length, fixed_shapes)
    boundaries.append(max_length + 1)
    batch_sizes = [max(1, batch_tokens // (boundary - 1)) for boundary in boundaries]
    # The bucket beyond the last boundary is never used; give it the smallest size.
    batch_sizes.append(batch_sizes[-1])
    return boundaries, batch_sizes


def text_chunks_dataset(data, chunk_size: int = _TOKENIZE_CHUNK_SIZE) -> tf.data.Dataset:
    """Chunks of ``data``'s pairs: ``tf.string`` ``[n]`` sources and targets, in its order.

    ``data`` is a sequence of ``(source, target)`` texts (held in memory, as the Ding corpus and
    the valid and test splits are) or a streaming source (``data.parallel.StreamedPairs``:
    ``ParallelFiles``, ``data.wmt.TfdsTranslation``), read from disk as the pipeline runs (a
    source may leave pairs out, e.g. those with an empty side).
    """
    if hasattr(data, "text_chunks_dataset"):
        return data.text_chunks_dataset(chunk_size)
    return text_pairs_dataset(data).batch(chunk_size)


def text_pairs_dataset(data) -> tf.data.Dataset:
    """``data``'s pairs one by one, scalar ``tf.string`` ``(source, target)`` (see
    :func:`text_chunks_dataset`)."""
    if hasattr(data, "text_dataset"):
        return data.text_dataset()
    sources = tf.constant([source for source, _ in data], dtype=tf.string, shape=[len(data)])
    targets = tf.constant([target for _, target in data], dtype=tf.string, shape=[len(data)])
    return tf.data.Dataset.from_tensor_slices((sources, targets))


def data_shard_policy(file_count: int, worker_count: int):
    """The ``tf.data`` auto-shard policy for ``file_count`` files read by ``worker_count`` workers.

    FILE (each worker reads only its own files, ``file_count / worker_count`` of the reading
    and tokenizing) needs at least one file per worker, else TensorFlow stops with an error;
    with fewer files (one file, or pairs held in memory: ``file_count`` 0) DATA: every worker
    reads and tokenizes everything and keeps every ``worker_count``-th batch.
    """
    policy = tf.data.experimental.AutoShardPolicy
    return policy.FILE if file_count >= max(2, worker_count) else policy.DATA


def worker_count() -> int:
    """Workers that read training data: the chief and worker tasks of ``TF_CONFIG`` (1 without)."""
    import json
    import os

    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    return max(1, sum(len(cluster.get(task, ())) for task in ("chief", "worker")))


def _token_lengths_dataset(data, tokenizer) -> tf.data.Dataset:
    """Chunks of ``(source, target)`` numbers of pieces (without special tokens) of ``data``."""

    def lengths_of_chunk(sources, targets):
        return tokenizer(sources).row_lengths(), tokenizer(targets).row_lengths()

    return text_chunks_dataset(data).map(lengths_of_chunk, num_parallel_calls=tf.data.AUTOTUNE)


def pipeline_stats(
    data, tokenizer, *, batch_tokens: int = 4096, max_length: int = 128,
    fixed_shapes: bool = False,
) -> PipelineStats:
    """What one epoch of :func:`training_stream` holds, counted in one streaming pass.

    Tokenizes every pair once, in chunks, and keeps only running sums: memory does not grow
    with the corpus. Costs about as much as an epoch's tokenization; a caller that builds an
    epoch's stream many times (``ZooModel.training_data``) counts once.
    """
    boundaries, batch_sizes = bucket_layout(max_length, batch_tokens, fixed_shapes)
    total = kept = source_tokens = target_tokens = longest_source = longest_target = 0
    chunks = without_autotune_thread(_token_lengths_dataset(data, tokenizer))
    for source_lengths, target_lengths in chunks.as_numpy_iterator():
        source_lengths = source_lengths + 1  # EOS
        target_lengths = target_lengths + 1  # BOS for target_ids, EOS for labels
        fits = (source_lengths <= max_length) & (target_lengths <= max_length)
        total += len(fits)
        kept += int(fits.sum())
        source_tokens += int(source_lengths[fits].sum())
        target_tokens += int(target_lengths[fits].sum())
        longest_source = max(longest_source, int(source_lengths[fits].max(initial=0)))
        longest_target = max(longest_target, int(target_lengths[fits].max(initial=0)))
    return PipelineStats(
        total=total,
        kept=kept,
        dropped_too_long=total - kept,
        max_length=max_length,
        batch_tokens=batch_tokens,
        source_tokens=source_tokens,
        target_tokens=target_tokens,
        longest_source=longest_source,
        longest_target=longest_target,
        bucket_boundaries=tuple(boundaries),
        bucket_batch_sizes=tuple(batch_sizes),
        dropped_empty=len(data) - total,
    )


def ragged_rows(dense, lengths):
    """The first ``lengths[i]`` entries of each row ``dense[i]``, as a ragged tensor.

    ``RaggedTensor.from_tensor(dense, lengths=...)`` gives the same with ~50
    graph ops to this ~20 (it validates what the callers' lengths guarantee:
    ``lengths <= dense``'s width), and every op is paid for in tracing.
    """
    kept = tf.where(tf.sequence_mask(lengths, tf.shape(dense, out_type=lengths.dtype)[1]))
    return tf.RaggedTensor.from_row_lengths(tf.gather_nd(dense, kept), lengths,
                                            validate=False)


def eos_after_pieces(pieces, num_pieces):
    """int [B, S] 0-padded pieces + [B] piece counts -> [B, S + 1], EOS after each row's
    pieces (written into the padding: a ragged concat made ~110 graph ops of these ~6)."""
    padded = tf.pad(pieces, [[0, 0], [0, 1]], constant_values=PAD_ID)
    positions = tf.range(tf.shape(padded, out_type=num_pieces.dtype)[1])
    return tf.where(positions[tf.newaxis, :] == num_pieces[:, tf.newaxis], EOS_ID, padded)


def _pairs_with_special_tokens(source_pieces, target_pieces, max_length):
    """(features, labels) rows of a tokenized chunk: ``pieces + EOS`` as the source,
    ``BOS + pieces`` as the target input, ``pieces + EOS`` as the labels, keeping
    the pairs whose source + EOS and BOS + target fit ``max_length``.

    On dense rows: ragged boolean masks and concats made ~580 graph ops of the
    ~100 here, traced for every dataset a run makes.
    """
    source_lengths, target_lengths = source_pieces.row_lengths(), target_pieces.row_lengths()
    kept = tf.where(tf.logical_and(source_lengths + 1 <= max_length,
                                   target_lengths + 1 <= max_length))[:, 0]
    source = tf.gather(source_pieces.to_tensor(default_value=PAD_ID), kept)
    target = tf.gather(target_pieces.to_tensor(default_value=PAD_ID), kept)
    source_lengths = tf.gather(source_lengths, kept) + 1
    target_lengths = tf.gather(target_lengths, kept) + 1

    def then_eos(pieces, lengths):
        return ragged_rows(eos_after_pieces(pieces, lengths - 1), lengths)

    bos_then = tf.pad(target, [[0, 0], [1, 0]], constant_values=BOS_ID)
    features = {"source_ids": then_eos(source, source_lengths),
                "target_ids": ragged_rows(bos_then, target_lengths)}
    return features, then_eos(target, target_lengths)


def _as_dense_rows(features, labels):
    return features, labels


def _fill_rows(boundaries: list[int], batch_sizes: list[int]):
    """A map that fills a bucket's short batch up to the bucket's batch size.

    The filling rows repeat the batch's own rows (so every computation on them is one the
    model already does on real data) with all-padding labels (so they add no loss).
    """
    lengths = tf.constant([boundary - 1 for boundary in boundaries], tf.int32)
    sizes = tf.constant(batch_sizes[: len(boundaries)], tf.int32)

    def fill(features, labels):
        length = tf.shape(labels)[1]
        rows = tf.shape(labels)[0]
        full = tf.gather(sizes, tf.argmax(tf.cast(tf.equal(lengths, length), tf.int32)))
        source_rows = tf.range(full) % rows
        features = {key: tf.gather(value, source_rows) for key, value in features.items()}
        real = tf.range(full) < rows
        labels = tf.where(real[:, None], tf.gather(labels, source_rows), PAD_ID)
        return features, labels

    return fill


def training_stream(
    data,
    tokenizer,
    *,
    batch_tokens: int = 4096,
    max_length: int = 128,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = False,
    drop_remainder: bool = False,
    shuffle_buffer_size: int | None = None,
    fixed_shapes: bool = False,
) -> tf.data.Dataset:
    """The batches of :func:`make_dataset` as one stream, without its counting pass.

    Args:
        data: ``(source, target)`` texts, or a streaming source (:func:`text_chunks_dataset`).
        tokenizer: from :func:`keras_attn_zoo.data.load_tokenizer` (special ids 0..3).
        batch_tokens: upper bound of ``batch_size * max(padded source, padded target length)``.
        max_length: pairs whose source + EOS or BOS + target exceed this are dropped (counted by
            :func:`pipeline_stats`); never truncated, since a truncated target teaches the
            model to stop mid-sentence.
        shuffle: shuffle pairs (seeded, reshuffled each epoch) before bucketing.
        seed: the shuffle seed.
        repeat: repeat forever (for ``model.fit`` with ``steps_per_epoch``).
        drop_remainder: drop each bucket's last, incomplete batch (for fixed shapes per bucket).
        shuffle_buffer_size: default: all pairs, at most 200,000 (a bounded buffer: a bigger
            corpus is shuffled within a window of that many pairs).
        fixed_shapes: one shape ``[B, L]`` per bucket on both sides, on the coarser grid,
            short batches filled with label-free copies (see the module doc); for an
            XLA-compiled training step.

    Pairs flow through ``tf.data`` and nothing grows with the corpus: read (from memory or,
    for a streaming source, line by line from disk), shuffled in a bounded buffer, tokenized in
    chunks, filtered by length in-graph, bucketed and batched. The stream is deterministic
    for a given ``seed`` (seeded shuffle, ordered maps), so a resumed run that skips the
    batches it has trained on continues with the very next one (``Trainer.epoch_dataset``).
    Its auto-shard policy is :func:`data_shard_policy`'s.
    """
    boundaries, batch_sizes = bucket_layout(max_length, batch_tokens, fixed_shapes)
    dataset = text_pairs_dataset(data)
    if shuffle:
        # Today's corpora fit the buffer whole (a full shuffle); bigger ones shuffle within it.
        # A streamed corpus is not counted first: its buffer is the largest (a smaller corpus
        # fills it partly, which shuffles it whole too).
        streamed = hasattr(data, "text_chunks_dataset")
        buffer_size = shuffle_buffer_size or (
            _MAX_SHUFFLE_BUFFER if streamed else max(1, min(len(data), _MAX_SHUFFLE_BUFFER)))
        dataset = dataset.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()

    def tokenize_chunk(source_texts, target_texts):
        return _pairs_with_special_tokens(tokenizer(source_texts), tokenizer(target_texts),
                                          max_length)

    dataset = (
        dataset.batch(_TOKENIZE_CHUNK_SIZE)
        .map(tokenize_chunk, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        # unbatch() types rows as rank-0 ragged tensors, which padded_batch rejects; passing them
        # through a map turns them into the plain 1-D tensors they are.
        .map(_as_dense_rows, num_parallel_calls=tf.data.AUTOTUNE)
    )

    def longest_side(features, labels):
        del labels  # as long as target_ids
        return tf.maximum(
            tf.shape(features["source_ids"])[0], tf.shape(features["target_ids"])[0]
        )

    dataset = dataset.bucket_by_sequence_length(
        element_length_func=longest_side,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=({"source_ids": [None], "target_ids": [None]}, [None]),
        padding_values=(
            {
                "source_ids": tf.constant(PAD_ID, tf.int32),
                "target_ids": tf.constant(PAD_ID, tf.int32),
            },
            tf.constant(PAD_ID, tf.int32),
        ),
        pad_to_bucket_boundary=fixed_shapes,
        drop_remainder=drop_remainder,
    )
    if fixed_shapes:
        dataset = dataset.map(_fill_rows(boundaries, batch_sizes),
                              num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = data_shard_policy(
        getattr(data, "file_count", 0), worker_count())
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)


def make_dataset(data, tokenizer, **options) -> tuple[tf.data.Dataset, PipelineStats]:
    """Builds the training (or evaluation) ``tf.data.Dataset`` of ``(source, target)`` pairs.

    Args:
        data: ``(source, target)`` texts, or a streaming source such as
            ``data.open_parallel_files(...)`` (see :func:`text_chunks_dataset`).
        tokenizer: from :func:`keras_attn_zoo.data.load_tokenizer` (special ids 0..3).
        **options: :func:`training_stream`'s.

    Returns:
        ``(dataset, stats)``: :func:`training_stream`'s dataset and :func:`pipeline_stats`'s
        counts (one streaming pass over the pairs). Elements are
        ``({"source_ids", "target_ids"}, labels)``, all int32, padded with 0 to the batch's own
        longest sequence (``fixed_shapes``: to its bucket's length).
    """
    dataset = training_stream(data, tokenizer, **options)
    counted = {key: options[key] for key in ("batch_tokens", "max_length", "fixed_shapes")
               if key in options}
    return dataset, pipeline_stats(data, tokenizer, **counted)


def count_target_tokens(labels) -> tf.Tensor:
    """The number of real (non-padding) label tokens in a batch, as int32."""
    return tf.reduce_sum(tf.cast(tf.not_equal(labels, PAD_ID), tf.int32))

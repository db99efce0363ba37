"""How a recipe run prepares and batches the eager translator's training pairs.

`EagerLSTMTranslator.training_data` (the `ZooModel` hook) calls
`eager_training_data`: the pairs are tokenized, word-aligned with eflomal
(links cached under `<work_dir>/alignments`) and made eager feasible; they are
then batched per sentence, or (aligned batching, the paper's) cut into one
aligned stream that the `Trainer` walks with the LSTM state carried. Both are
reshuffled every epoch from the run seed and the epoch: the aligned stream
used to keep Ding's file order, where neighbours share head-words ("Abend"
x3, "litter" x3 in the first 12 pairs), which the carried state can exploit
in training but never sees in decoding (issue 32); the reference shuffles
before it concatenates.
"""

from keras_attn_zoo.data.vocabulary import vocabulary_size
from keras_attn_zoo.models.eager import preprocessing
from keras_attn_zoo.models.eager.special_ids import eager_special_ids
from keras_attn_zoo.models.zoo_model import TrainingData

# AWD-LSTM's gradient clipping, used by the paper's aligned-stream training.
ALIGNED_CLIP_NORM = 0.25


def checked_special_ids(model, sentencepiece_size):
    """The model's special ids, refused if they are real pieces.

    The recipe's eager vocabulary is the SentencePiece pieces plus three
    appended ids; ``start_id``/``epsilon_id``/``source_pad_id`` options may
    permute those three but not take a piece's id (its text would be read as
    a special token in training and stripped from every translation).
    """
    appended = set(eager_special_ids(sentencepiece_size))
    taken = {name: value for name, value in model.special_ids._asdict().items()
             if value not in appended}
    if taken:
        raise ValueError(
            f"--model-options {taken}: in this recipe the eager special ids must be "
            f"the three ids after the {sentencepiece_size} SentencePiece pieces, "
            f"{sorted(appended)}; lower ids are pieces of the vocabulary.")
    return model.special_ids


def aligned_columns(id_pairs, batch_tokens):
    """Columns of the aligned stream: ``batch_tokens // bptt`` (at most the corpus tokens)."""
    total = sum(len(target) for _, target in id_pairs)
    return max(1, min(batch_tokens // preprocessing.DEFAULT_BPTT, total))


def eager_training_data(model, pairs, tokenizer, *, batch_tokens, max_length, seed,
                        work_dir, aligned_batching=False, fixed_shapes=False):
    """Eager-feasible training data (see the module docstring) as `TrainingData`.

    The targets start with the model's ``start_pads`` start tokens and use its
    special ids, the ones its decoding rules expect. Pairs whose eager length
    (start pads, ε, source pads and EOS included) exceeds ``max_length`` are
    dropped. Per-sentence batches hold ``batch_tokens`` divided by the mean
    eager length sentences; the aligned stream has ``aligned_columns``
    columns, windows of ``DEFAULT_BPTT`` steps and gradient clipping 0.25.
    With ``fixed_shapes`` per-sentence batches pad to a multiple of 8 steps
    (the aligned stream's windows have one shape already).
    """
    cache_dir = work_dir / "alignments"
    special_ids = checked_special_ids(model, vocabulary_size(tokenizer))
    id_pairs, epsilon = preprocessing.make_eager_id_pairs(
        pairs, tokenizer, aligner="eflomal", cache_dir=cache_dir,
        start_pads=model.zoo_config["start_pads"], special_ids=special_ids)
    kept = [pair for pair in id_pairs if len(pair[0]) <= max_length]
    if not kept:
        raise ValueError(f"No eager training pair has at most --max-length="
                         f"{max_length} steps.")
    info = {
        "epsilon_proportion": round(epsilon["proportion"], 4),
        # The share at other numbers of start pads: it falls as they grow,
        # and Table 1 does not say how many it had (make_eager_id_pairs).
        "epsilon_proportion_by_start_pads": {
            str(pads): round(share, 4)
            for pads, share in epsilon["proportion_by_start_pads"].items()},
        "epsilon_statistics": epsilon,
        "alignments": f"eflomal (cached in {cache_dir})",
    }
    print(f"eager data: {len(kept)} pairs kept, {len(id_pairs) - len(kept)} dropped as "
          f"longer than {max_length} steps; epsilon proportion "
          f"{epsilon['proportion']:.2%} ({epsilon['epsilons']} of {epsilon['tokens']} "
          f"target tokens); eflomal links cached in {cache_dir}")
    dropped = len(id_pairs) - len(kept)
    if aligned_batching:
        columns = aligned_columns(kept, batch_tokens)
        info.update(eager_batching="aligned", eager_stream_columns=columns)

        def make_stream(epoch):
            # A fresh pair order per epoch, a function of (seed, epoch) only:
            # the Trainer's mid-epoch resume rebuilds it and skips the windows
            # already trained on.
            return preprocessing.make_aligned_stream_dataset(
                kept, columns, preprocessing.DEFAULT_BPTT, shuffle_seed=(seed, epoch))

        return TrainingData(make_stream, dropped, info, carry_state=True,
                            clip_norm=ALIGNED_CLIP_NORM)
    mean_length = sum(len(source) for source, _ in kept) / len(kept)
    batch_size = max(1, int(batch_tokens // max(mean_length, 1.0)))
    info.update(eager_batching="per-sentence", eager_batch_sentences=batch_size)

    def make_batches(epoch):
        return preprocessing.make_eager_dataset(kept, batch_size, seed=seed + epoch,
                                                length_multiple=8 if fixed_shapes else 1)

    return TrainingData(make_batches, dropped, info)

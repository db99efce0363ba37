"""Does an eager model read its source? Teacher-forced loss, true against shuffled source.

A model that under-fits and a model that ignores its source (a defect: the
source misaligned with the targets, a stream that lets the carried state
stand in for it) both translate badly; they differ here. On eager-feasible
development pairs the probe computes the teacher-forced cross-entropy on the
*word* labels (not start tokens, ε, source pads or EOS: those the target
side alone predicts well) twice: with each pair's own source, and with the
source of another pair (a fixed derangement), cut or filled with source-pad
tokens to the pair's length, EOS kept last. The gap, shuffled minus true, is
what the source is worth to the model: near 0 means it translates from the
target prefix alone. Call it at several checkpoints (`SourceUseProbe` does so
during training) to tell "not trained enough yet" (the gap grows) from "not
using the source" (it stays near 0).
"""

import pathlib
import time

import numpy as np

from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID, PAD_ID
from keras_attn_zoo.files import read_json_lines
from keras_attn_zoo.files import write_json_lines


def shuffled_sources(id_pairs, special_ids, seed=0):
    """Each pair's source replaced by another pair's words, same length, EOS last."""
    count = len(id_pairs)
    if count < 2:
        raise ValueError("The source-use probe needs at least 2 pairs.")
    rng = np.random.default_rng(seed)
    # A derangement: a random order shifted by one, so no pair keeps its own.
    order = rng.permutation(count)
    donor = np.empty(count, int)
    donor[order] = np.roll(order, 1)
    not_words = {special_ids.source_pad_id, EOS_ID, PAD_ID}
    result = []
    for (source, target), other in zip(id_pairs, donor):
        words = [t for t in id_pairs[other][0] if t not in not_words]
        body = (words + [special_ids.source_pad_id] * len(source))[:len(source) - 1]
        result.append((np.asarray(body + [EOS_ID], np.int32), target))
    return result


def _word_label_loss(model, id_pairs, batch_size):
    """Summed cross-entropy and count over the word labels of `id_pairs`."""
    special = set(model.special_ids) | {PAD_ID, BOS_ID, EOS_ID}
    total, words = 0.0, 0
    for start in range(0, len(id_pairs), batch_size):
        chunk = id_pairs[start:start + batch_size]
        width = max(len(target) for _, target in chunk)
        source = np.zeros((len(chunk), width), np.int32)
        previous = np.zeros((len(chunk), width), np.int32)
        labels = np.zeros((len(chunk), width), np.int32)
        for row, (src, tgt) in enumerate(chunk):
            source[row, :len(src)] = src
            labels[row, :len(tgt)] = tgt
            previous[row, :len(tgt)] = np.concatenate([[BOS_ID], tgt[:-1]])
        logits = np.asarray(model({"source_ids": source, "target_ids": previous},
                                  training=False), np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        is_word = ~np.isin(labels, list(special))
        total -= float(picked[is_word].sum())
        words += int(is_word.sum())
    return total, words


def source_use_probe(model, id_pairs, *, batch_size=64, seed=0):
    """Teacher-forced word-label loss with the true and with a shuffled source.

    Args:
        model: an ``EagerLSTMTranslator``.
        id_pairs: eager-feasible ``(source_ids, target_ids)`` (development
            pairs from ``make_eager_id_pairs`` with the model's start pads).
        batch_size: pairs per forward pass.
        seed: the derangement's seed (the same at every checkpoint).

    Returns:
        ``{"true_source_loss", "shuffled_source_loss", "gap", "word_labels"}``
        (mean nats per word label; ``gap`` = shuffled - true).
    """
    id_pairs = list(id_pairs)
    true_total, words = _word_label_loss(model, id_pairs, batch_size)
    if words == 0:
        raise ValueError("The probe's pairs have no word labels.")
    shuffled_total, _ = _word_label_loss(
        model, shuffled_sources(id_pairs, model.special_ids, seed), batch_size)
    true_loss, shuffled_loss = true_total / words, shuffled_total / words
    return {"true_source_loss": round(true_loss, 4),
            "shuffled_source_loss": round(shuffled_loss, 4),
            "gap": round(shuffled_loss - true_loss, 4), "word_labels": words}


class SourceUseProbe:
    """`Trainer` callback: `source_use_probe` every `every` steps, into `history`.

    `history` is a list of `{"step", ...probe result, "seconds"}`. With `path`
    every point is also written to that JSON-lines file, which outlives the
    process: a run resumed from a checkpoint trains the steps after it again,
    so a new point replaces the file's points from its step on. Runs on the
    chief only.
    """

    def __init__(self, id_pairs, every=500, batch_size=64, seed=0, path=None):
        self.id_pairs = list(id_pairs)
        self.every = every
        self.batch_size = batch_size
        self.seed = seed
        self.path = None if path is None else pathlib.Path(path)
        self.history = []

    def on_step_end(self, trainer, step, logs):
        del logs
        if step % self.every or not getattr(trainer, "is_chief", True):
            return
        started = time.monotonic()
        result = source_use_probe(trainer.model, self.id_pairs,
                                  batch_size=self.batch_size, seed=self.seed)
        point = {"step": int(step), **result,
                 "seconds": round(time.monotonic() - started, 2)}
        self.history.append(point)
        if self.path is not None:
            kept = [p for p in read_json_lines(self.path) if p["step"] < step]
            write_json_lines(self.path, kept + [point])

"""Word dropout: the input noise of low-resource NMT recipes.

Sennrich & Zhang (2019, "Revisiting Low-Resource Neural Machine Translation")
drop whole words of the model's inputs during training; here a dropped token
becomes UNK (`UNK_ID`), the form Sennrich, Haddow & Birch (2016) used for
target words. Only the inputs change (the source and the decoder input), never
the labels, so the model still learns to predict every reference token.

The noise is stateless: batch `i` of a run with seed `s` always drops the same
tokens, so a resumed run sees the batches it would have seen.
"""

import tensorflow as tf

from keras_attn_zoo.data.vocabulary import EOS_ID
from keras_attn_zoo.data.vocabulary import UNK_ID

# PAD, UNK, BOS and EOS (ids 0..3) are never dropped.
_FIRST_WORD_ID = EOS_ID + 1


def word_dropout(ids, rate, seed):
    """Replaces each real token of `ids` by UNK with probability `rate`.

    Args:
        ids: int32 `[B, T]`.
        rate: float in `[0, 1]`; 0 returns `ids` unchanged.
        seed: int `[2]`, the stateless seed (`tf.random.stateless_uniform`).

    Returns:
        int32 `[B, T]`: special ids and padding kept, every other token kept
        or replaced by `UNK_ID`.
    """
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"word dropout rate must be in [0, 1], got {rate}.")
    ids = tf.convert_to_tensor(ids, tf.int32)
    if rate == 0.0:
        return ids
    draw = tf.random.stateless_uniform(tf.shape(ids), seed=seed)
    dropped = tf.logical_and(ids >= _FIRST_WORD_ID, draw < rate)
    return tf.where(dropped, tf.constant(UNK_ID, tf.int32), ids)


def with_word_dropout(dataset, rate, seed=0, keys=("source_ids", "target_ids"), epoch=0):
    """`(features, labels)` batches with `word_dropout` on `features[key]` for `keys`.

    Batch `i` of epoch `e` uses the stateless seeds `(seed, e)` folded in with
    `2i` and `2i + 1` (source and decoder input draw independently, and every
    epoch draws anew). Labels are untouched. Apply it before any `skip`, so a
    resumed epoch replays the noise of the batches it keeps.
    """
    if float(rate) == 0.0:
        return dataset
    base = tf.constant([int(seed), int(epoch)], tf.int64)

    def drop(index, batch):
        features, labels = batch
        features = dict(features)
        for offset, key in enumerate(keys):
            stream = tf.cast(2 * index + offset, tf.int64)
            features[key] = word_dropout(
                features[key], rate, tf.random.experimental.stateless_fold_in(base, stream))
        return features, labels

    return dataset.enumerate().map(drop, num_parallel_calls=tf.data.AUTOTUNE)

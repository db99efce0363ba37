"""Label-smoothed cross-entropy that ignores padding."""

import keras
from keras import ops

from keras_attn_zoo.data.vocabulary import PAD_ID


def token_loss_sum(labels, logits, label_smoothing=0.1, padding_id=PAD_ID):
    """Sum of label-smoothed token losses and the number of real tokens.

    Returning a sum and a count (not a mean) lets a distributed step divide by
    the *global* token count, so N replicas compute exactly the loss and
    gradient of one device on the same global batch.

    Smoothing spreads `label_smoothing` uniformly over the whole vocabulary
    (Szegedy et al. 2016; the Transformer paper's choice).

    Computed from the logits without materialising log-probabilities (see
    `token_losses`). `logits` may hold any number of positions, e.g. only the
    real target tokens gathered from a batch (`Trainer`): the mask then
    removes nothing.

    Returns:
        `(loss_sum, token_count, correct_count)`, float32 scalars.
    """
    # One name scope: profiles (benchmarks/step_profile.py) find the loss's ops.
    with keras.name_scope("token_loss"):
        labels = ops.cast(labels, "int32")
        losses, correct = token_losses(labels, logits, label_smoothing)
        mask = ops.cast(ops.not_equal(labels, padding_id), "float32")
        return (
            ops.sum(losses * mask),
            ops.sum(mask),
            ops.sum(correct * mask),
        )


def real_token_loss_sum(labels, hidden, project, label_smoothing=0.1,
                        padding_id=PAD_ID):
    """`token_loss_sum(labels, project(hidden))`, projecting only real tokens.

    Gathers the rows of `hidden` `[B, T, d]` whose label is not `padding_id`
    and projects those alone (`project`: `[N, d] -> [N, V]` logits), so the
    output projection, its gradient and the loss do no work on padding (on
    the Ding batches of `benchmarks/train_throughput.py`, padded to 24 tokens,
    35% of the positions). TensorFlow only (the `Trainer`'s step).

    Returns:
        `(loss_sum, token_count, correct_count)` as `token_loss_sum`.
    """
    import tensorflow as tf

    labels = tf.cast(labels, tf.int32)
    positions = tf.where(tf.not_equal(labels, padding_id))
    logits = project(tf.gather_nd(hidden, positions))
    return token_loss_sum(tf.gather_nd(labels, positions), logits, label_smoothing,
                          padding_id)


def token_losses(labels, logits, label_smoothing=0.1):
    """Per-position label-smoothed losses and 1.0 where the argmax is the label.

    The loss of a position with logits `z` over `V` words and label `y` is
    `(1 - e) (lse(z) - z_y) + e (lse(z) - mean(z))` (the mean of
    `-log_softmax` is `lse - mean(z)`), with `e = label_smoothing`; both
    outputs are float32 and shaped like `labels`.

    On TensorFlow one softmax and an analytic gradient (`_tensorflow_token_losses`);
    on other backends the fused sparse cross-entropy plus `logsumexp` and
    `mean` (`_generic_token_losses`). Both compute the same values.
    """
    logits = ops.cast(logits, "float32")
    labels = ops.cast(labels, "int32")
    if keras.backend.backend() == "tensorflow":
        return _tensorflow_token_losses(labels, logits, label_smoothing)
    return _generic_token_losses(labels, logits, label_smoothing)


def _generic_token_losses(labels, logits, label_smoothing):
    """`token_losses` in `keras.ops`: the fused sparse softmax cross-entropy for
    the likelihood, the smoothing term as `logsumexp - mean` (no scatter into a
    dense `[tokens, vocabulary]` tensor in its gradient)."""
    nll = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    smooth = ops.logsumexp(logits, axis=-1) - ops.mean(logits, axis=-1)
    losses = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    correct = ops.cast(ops.equal(ops.argmax(logits, axis=-1), labels), "float32")
    return losses, correct


def _tensorflow_token_losses(labels, logits, label_smoothing):
    """`token_losses` with one `tf.nn.softmax` and a hand-written gradient.

    The gradient with respect to the logits is `p - (1 - e) onehot(y) - e / V`
    (`p` the softmax), computed from the forward pass's `p`. `lse` comes from
    the same softmax at the argmax position, `lse = z_max - log p_max`
    (`p_max >= 1 / V`, so it never underflows), and the argmax also gives the
    accuracy. On the small Transformer's loss (5,200 positions, 8,000 words;
    2 cores) forward and backward took 65 ms against 300-340 ms for
    `_generic_token_losses` (Keras' sparse cross-entropy, `logsumexp`,
    `mean` and `argmax` with its negative-zero fix are each several passes
    over the `[tokens, vocabulary]` logits; oneDNN's softmax is one kernel).
    """
    import tensorflow as tf

    shape = tf.shape(labels)
    vocabulary = tf.shape(logits)[-1]
    # One row per position: the gathers and the scatter below index [rows, words].
    labels = tf.reshape(labels, [-1])
    rows = tf.range(tf.shape(labels)[0])
    flat_logits = tf.reshape(logits, [-1, vocabulary])
    best = tf.math.argmax(flat_logits, axis=-1, output_type=tf.int32)
    correct = tf.cast(tf.equal(best, labels), tf.float32)

    @tf.custom_gradient
    def smoothed_cross_entropy(z):
        probabilities = tf.nn.softmax(z)
        log_partition = (tf.gather(z, best, batch_dims=1)
                         - tf.math.log(tf.gather(probabilities, best, batch_dims=1)))
        losses = (log_partition
                  - (1.0 - label_smoothing) * tf.gather(z, labels, batch_dims=1)
                  - label_smoothing * tf.reduce_mean(z, axis=-1))

        def gradient(upstream):
            uniform = label_smoothing / tf.cast(vocabulary, tf.float32)
            grad = (probabilities - uniform) * upstream[:, None]
            # (1 - e) upstream off at each label: a scatter, no dense one-hot.
            return tf.tensor_scatter_nd_sub(grad, tf.stack([rows, labels], axis=1),
                                            (1.0 - label_smoothing) * upstream)

        return losses, gradient

    losses = smoothed_cross_entropy(flat_logits)
    return tf.reshape(losses, shape), tf.reshape(correct, shape)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean label-smoothed cross-entropy over real (non-padding) tokens.

    For `model.compile(loss=...)`; the zoo's own training loop uses
    `token_loss_sum` directly to normalise by the global token count.

    Args:
        label_smoothing: mass spread over the vocabulary (paper: 0.1).
        padding_id: label id that is ignored.
    """

    def __init__(self, label_smoothing=0.1, padding_id=PAD_ID,
                 name="label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, reduction=None, **kwargs)
        self.label_smoothing = label_smoothing
        self.padding_id = padding_id

    def call(self, y_true, y_pred):
        total, count, _ = token_loss_sum(
            y_true, y_pred, self.label_smoothing, self.padding_id
        )
        return total / ops.maximum(count, 1.0)

    def get_config(self):
        return {
            "name": self.name,
            "label_smoothing": self.label_smoothing,
            "padding_id": self.padding_id,
        }

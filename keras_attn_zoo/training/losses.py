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

    Computed from the logits without materialising log-probabilities: the
    negative log-likelihood by the fused sparse softmax cross-entropy, the
    smoothing term as `logsumexp(logits) - mean(logits)` (the mean of
    `-log_softmax`); its gradient needs no scatter into a dense
    `[tokens, vocabulary]` tensor, as a gather from `log_softmax` does. In the
    recipe's loop the two ran at the same speed (0.957x and 1.003x in two
    alternating runs, `benchmarks/training_loop.py`): the time went to the
    allocator's page faults (see `keras_attn_zoo.runtime`).

    Returns:
        `(loss_sum, token_count, correct_count)`, float32 scalars.
    """
    # One name scope: profiles (benchmarks/step_profile.py) find the loss's ops.
    with keras.name_scope("token_loss"):
        logits = ops.cast(logits, "float32")
        labels = ops.cast(labels, "int32")
        nll = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        smooth = ops.logsumexp(logits, axis=-1) - ops.mean(logits, axis=-1)
        losses = (1.0 - label_smoothing) * nll + label_smoothing * smooth
        mask = ops.cast(ops.not_equal(labels, padding_id), "float32")
        correct = ops.cast(ops.equal(ops.argmax(logits, axis=-1), labels), "float32")
        return (
            ops.sum(losses * mask),
            ops.sum(mask),
            ops.sum(correct * mask),
        )


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

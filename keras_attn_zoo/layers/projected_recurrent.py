"""Keras' GRU and LSTM with the input projection taken out of the time loop.

Keras 3 runs a GRU or LSTM on a CPU (no cuDNN) as a loop over the cell: every
time step multiplies that step's input by the input kernel `W`, and slices the
recurrent kernel `U` into its gate blocks. Both are loop-invariant work:

* `x_t W + b` for all t is one `[B*T, d] x [d, gates]` matmul before the loop, and
  its gradients (`dW`, `dx`) become one matmul each after the backward loop,
  instead of T small ones (tens of rows each) inside it;
* the gradient of a slice of a variable is a full-size `StridedSliceGrad` per
  step (a `[hidden, 3 hidden]` zero tensor filled and summed for every step
  and slice); slicing once before the loop leaves one.

`layers.ProjectedGRU` and `layers.ProjectedLSTM` are `keras.layers.GRU` /
`keras.layers.LSTM` with the same weights, config and arguments; only their
loop differs, and the math is the cells' (float results differ by summation
order only). They fall back to Keras' own loop where it does something else:
cell dropout or recurrent dropout in training (per-step masks), and where Keras
may use cuDNN (a visible GPU with the TensorFlow backend, or `use_cudnn=True`).
This module holds what the two share.

Measured (issue 36, `benchmarks/rnn_throughput.py`): see docs/speed.md's
"RNN training speed".
"""

import keras
from keras import ops
# Private on purpose: Keras exports no public form of the loop its RNN layers'
# `inner_loop` runs (`backend.rnn`), and a replaced `inner_loop` must run it too.
from keras.src import backend as keras_backend


def cudnn_possible(layer):
    """True where Keras' own `inner_loop` may take its cuDNN kernel."""
    if layer.use_cudnn is True:
        return True
    if layer.use_cudnn is False or keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def uses_cell_dropout(cell, training):
    """Whether the cell drops inputs or states in this call (training with a rate in (0, 1))."""
    return bool(training) and (0.0 < cell.dropout < 1.0 or 0.0 < cell.recurrent_dropout < 1.0)


def time_major(tensor):
    """`[B, T, ...]` as `[T, B, ...]`."""
    return ops.transpose(tensor, (1, 0) + tuple(range(2, len(tensor.shape))))


def run_projected(layer, step, projected, initial_state, mask):
    """`keras_backend.rnn` over time-major input projections `[T, B, gates]`.

    Called as `RNN.inner_loop` calls it, except time-major: the inputs were
    transposed before their projection (`d` features, not `gates`), and the
    outputs are transposed back here.
    """
    if keras.tree.is_nested(mask):
        mask = mask[0]
    if mask is not None:
        mask = time_major(mask)
    last, outputs, states = keras_backend.rnn(
        step, projected, initial_state, go_backwards=layer.go_backwards, mask=mask,
        unroll=layer.unroll, input_length=projected.shape[0], time_major=True,
        zero_output_for_mask=layer.zero_output_for_mask,
        return_all_outputs=layer.return_sequences)
    return last, time_major(outputs), states

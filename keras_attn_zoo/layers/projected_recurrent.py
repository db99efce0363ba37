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

`ProjectedGRU` and `ProjectedLSTM` are `keras.layers.GRU` / `keras.layers.LSTM`
with the same weights, config and arguments; only their loop differs, and the
math is the cells' (float results differ by summation order only). They fall
back to Keras' own loop where it does something else: cell dropout or
recurrent dropout in training (per-step masks), and where Keras may use cuDNN
(a visible GPU with the TensorFlow backend, or `use_cudnn=True`).
"""

import keras
from keras import ops
from keras.src import backend as keras_backend
from keras.src import tree


def _cudnn_possible(layer):
    """True where Keras' own `inner_loop` may take its cuDNN kernel."""
    if layer.use_cudnn is True:
        return True
    if layer.use_cudnn is False or keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def _uses_cell_dropout(cell, training):
    return bool(training) and (0.0 < cell.dropout < 1.0 or 0.0 < cell.recurrent_dropout < 1.0)


def _time_major(tensor):
    return ops.transpose(tensor, (1, 0) + tuple(range(2, len(tensor.shape))))


def _run_projected(layer, step, projected, initial_state, mask):
    """`keras_backend.rnn` over time-major input projections `[T, B, gates]`.

    Called as `RNN.inner_loop` calls it, except time-major: the inputs were
    transposed before their projection (`d` features, not `gates`), and the
    outputs are transposed back here.
    """
    if tree.is_nested(mask):
        mask = mask[0]
    if mask is not None:
        mask = _time_major(mask)
    last, outputs, states = keras_backend.rnn(
        step, projected, initial_state, go_backwards=layer.go_backwards, mask=mask,
        unroll=layer.unroll, input_length=projected.shape[0], time_major=True,
        zero_output_for_mask=layer.zero_output_for_mask,
        return_all_outputs=layer.return_sequences)
    return last, _time_major(outputs), states


def gru_update(cell, projected_input, hidden, recurrent_projection, candidate_kernel):
    """One GRU step of `cell`'s math from precomputed projections.

    Args:
        cell: the `keras.layers.GRUCell` whose activations and variant
            (`reset_after`) apply.
        projected_input: `x W + b_input`, `[B, 3 units]` (z, r, h blocks).
        hidden: `h_{t-1}`, `[B, units]`.
        recurrent_projection: `h_{t-1} U_zr` (`reset_after=False`: `[B, 2 units]`)
            or `h_{t-1} U + b_recurrent` (`reset_after=True`: `[B, 3 units]`).
        candidate_kernel: `U_h` (`[units, units]`), used only without `reset_after`.

    Returns:
        `h_t`, `[B, units]`.
    """
    units = cell.units
    x_z = projected_input[:, :units]
    x_r = projected_input[:, units:2 * units]
    x_h = projected_input[:, 2 * units:]
    z = cell.recurrent_activation(x_z + recurrent_projection[:, :units])
    r = cell.recurrent_activation(x_r + recurrent_projection[:, units:2 * units])
    if cell.reset_after:
        recurrent_h = r * recurrent_projection[:, 2 * units:]
    else:
        recurrent_h = ops.matmul(r * hidden, candidate_kernel)
    candidate = cell.activation(x_h + recurrent_h)
    return z * hidden + (1 - z) * candidate


def gru_biases(cell):
    """`(input bias [3 units] or None, recurrent bias [3 units] or None)` of a GRUCell."""
    if not cell.use_bias:
        return None, None
    if not cell.reset_after:
        return cell.bias, None
    return cell.bias[0], cell.bias[1]


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class ProjectedGRU(keras.layers.GRU):
    """`keras.layers.GRU` with `x W + b` computed for all steps before the loop.

    Same arguments, weights and results as `keras.layers.GRU` (see the module
    docstring for when it uses Keras' own loop instead).
    """

    def inner_loop(self, sequences, initial_state, mask, training=False):
        cell = self.cell
        if _uses_cell_dropout(cell, training) or _cudnn_possible(self):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        if tree.is_nested(initial_state):
            initial_state = initial_state[0]
        units = cell.units
        input_bias, recurrent_bias = gru_biases(cell)
        projected = ops.matmul(_time_major(sequences), cell.kernel)
        if input_bias is not None:
            projected = projected + input_bias
        if cell.reset_after:
            recurrent_kernel, candidate_kernel = cell.recurrent_kernel, None
        else:
            recurrent_kernel = cell.recurrent_kernel[:, :2 * units]
            candidate_kernel = cell.recurrent_kernel[:, 2 * units:]

        def step(projected_input, states):
            hidden = states[0]
            recurrent = ops.matmul(hidden, recurrent_kernel)
            if recurrent_bias is not None:
                recurrent = recurrent + recurrent_bias
            hidden = gru_update(cell, projected_input, hidden, recurrent, candidate_kernel)
            return hidden, [hidden]

        return _run_projected(self, step, projected, [initial_state], mask)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class ProjectedLSTM(keras.layers.LSTM):
    """`keras.layers.LSTM` with `x W + b` computed for all steps before the loop.

    Same arguments, weights and results as `keras.layers.LSTM` (see the module
    docstring for when it uses Keras' own loop instead).
    """

    def inner_loop(self, sequences, initial_state, mask, training=False):
        cell = self.cell
        if _uses_cell_dropout(cell, training) or _cudnn_possible(self):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        projected = ops.matmul(_time_major(sequences), cell.kernel)
        if cell.use_bias:
            projected = projected + cell.bias
        recurrent_kernel = cell.recurrent_kernel
        units = cell.units

        def step(projected_input, states):
            hidden, carry = states
            gates = projected_input + ops.matmul(hidden, recurrent_kernel)
            # The cell's gate order and activations: input, forget, cell, output.
            input_gate = cell.recurrent_activation(gates[:, :units])
            forget_gate = cell.recurrent_activation(gates[:, units:2 * units])
            carry = forget_gate * carry + input_gate * cell.activation(
                gates[:, 2 * units:3 * units])
            hidden = cell.recurrent_activation(gates[:, 3 * units:]) * cell.activation(carry)
            return hidden, [hidden, carry]

        return _run_projected(self, step, projected, list(initial_state), mask)

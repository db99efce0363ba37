"""`keras.layers.LSTM` with the input projection out of the time loop (see
`layers.projected_recurrent`), and on TensorFlow a hand-written backward loop.

`lstm_sequence` runs the recurrence `z_t = p_t + h_{t-1} U`,
`i, f, g, o = σ(z_i), σ(z_f), tanh(z_g), σ(z_o)`, `c_t = f c_{t-1} + i g`,
`h_t = o tanh(c_t)` (Keras' gate order and its default activations) over the
input projections `p_t = x_t W + b` of all steps, keeping each step's gate
activations and cell state. Its gradient is a second loop written from those
equations, backwards in time:

    dh = dh_t(from above) + dz_{t+1} U^T,   dc = dc_{t+1} f_{t+1} + dh o (1 - tanh²(c_t))
    dz_t = [dc g i (1 - i), dc c_{t-1} f (1 - f), dc i (1 - g²), dh tanh(c_t) o (1 - o)]

and, after the loop, `dU = [h_0 .. h_{T-1}]^T [dz_1 .. dz_T]` as one matmul of
all `B * T` rows: autodiff's backward loop adds `h_{t-1}^T dz_t` to `dU` at
every step (a `[units, 4 units]` product over only `B` rows), and pops and
accumulates every intermediate it saved. Same values as autodiff up to
summation order (`tests/test_projected_recurrent.py`).
"""

import keras
from keras import ops

from keras_attn_zoo.layers.projected_recurrent import cudnn_possible
from keras_attn_zoo.layers.projected_recurrent import run_projected
from keras_attn_zoo.layers.projected_recurrent import time_major
from keras_attn_zoo.layers.projected_recurrent import uses_cell_dropout


def lstm_sequence(projected, hidden, carry, recurrent_kernel):
    """The LSTM over time-major input projections, with a hand-written gradient.

    TensorFlow only; sigmoid gates and tanh cell activation (Keras' defaults).

    Args:
        projected: `x_t W + b` of every step, `[T, B, 4 units]` (i, f, c, o blocks).
        hidden: `h_0`, `[B, units]`.
        carry: `c_0`, `[B, units]`.
        recurrent_kernel: `U`, `[units, 4 units]`.

    Returns:
        `(outputs [T, B, units], h_T, c_T)`.
    """
    import tensorflow as tf

    # The backward loop's ops are named `<this scope>/hand_written_gradient/...`
    # (profiles, `benchmarks/rnn_throughput.py`, count them as the backward pass).
    gradient_scope = tf.get_current_name_scope()
    gradient_scope = (gradient_scope + "/" if gradient_scope else "") + "hand_written_gradient/"

    @tf.custom_gradient
    def run(projected, hidden, carry, kernel):
        steps = tf.shape(projected)[0]
        dtype = projected.dtype
        # Static element shapes: the layers after this one need the feature width.
        step_shape, state_shape = projected.shape[1:], hidden.shape
        inputs = tf.TensorArray(dtype, size=steps, element_shape=step_shape).unstack(projected)
        # Index 0 holds h_0 / c_0, index t + 1 the state after step t.
        hiddens = tf.TensorArray(dtype, size=steps + 1, clear_after_read=False,
                                 element_shape=state_shape)
        carries = tf.TensorArray(dtype, size=steps + 1, clear_after_read=False,
                                 element_shape=state_shape)
        gates = tf.TensorArray(dtype, size=steps, clear_after_read=False,
                               element_shape=step_shape)

        def forward(t, h, c, hiddens, carries, gates):
            z = inputs.read(t) + tf.matmul(h, kernel)
            z_input, z_forget, z_cell, z_output = tf.split(z, 4, axis=-1)
            i, f = tf.sigmoid(z_input), tf.sigmoid(z_forget)
            g, o = tf.tanh(z_cell), tf.sigmoid(z_output)
            c = f * c + i * g
            h = o * tf.tanh(c)
            return (t + 1, h, c, hiddens.write(t + 1, h), carries.write(t + 1, c),
                    gates.write(t, tf.concat([i, f, g, o], axis=-1)))

        _, last_hidden, last_carry, hiddens, carries, gates = tf.while_loop(
            lambda t, *_: t < steps, forward,
            (tf.constant(0), hidden, carry, hiddens.write(0, hidden),
             carries.write(0, carry), gates))
        all_hiddens = hiddens.stack()  # [T + 1, B, units]
        outputs = all_hiddens[1:]
        outputs.set_shape(projected.shape[:1].concatenate(hidden.shape))

        def scoped_gradient(d_outputs, d_last_hidden, d_last_carry):
            zeros = tf.zeros_like(hidden)
            d_outputs = tf.zeros_like(outputs) if d_outputs is None else d_outputs
            d_hidden = zeros if d_last_hidden is None else d_last_hidden
            d_carry = zeros if d_last_carry is None else d_last_carry
            d_outputs = tf.TensorArray(dtype, size=steps, element_shape=state_shape).unstack(
                d_outputs)
            d_gates = tf.TensorArray(dtype, size=steps, element_shape=step_shape)

            def backward(t, d_hidden, d_carry, d_gates):
                i, f, g, o = tf.split(gates.read(t), 4, axis=-1)
                tanh_carry = tf.tanh(carries.read(t + 1))
                d_hidden = d_hidden + d_outputs.read(t)
                d_carry = d_carry + d_hidden * o * (1 - tanh_carry * tanh_carry)
                d_z = tf.concat([d_carry * g * i * (1 - i),
                                 d_carry * carries.read(t) * f * (1 - f),
                                 d_carry * i * (1 - g * g),
                                 d_hidden * tanh_carry * o * (1 - o)], axis=-1)
                return (t - 1, tf.matmul(d_z, kernel, transpose_b=True), d_carry * f,
                        d_gates.write(t, d_z))

            _, d_hidden, d_carry, d_gates = tf.while_loop(
                lambda t, *_: t >= 0, backward,
                (steps - 1, d_hidden, d_carry, d_gates))
            d_projected = d_gates.stack()  # [T, B, 4 units]
            units = tf.shape(hidden)[-1]
            d_kernel = tf.matmul(tf.reshape(all_hiddens[:-1], [-1, units]),
                                 tf.reshape(d_projected, [-1, 4 * units]), transpose_a=True)
            return d_projected, d_hidden, d_carry, d_kernel

        def gradient(*upstream):
            with tf.name_scope(gradient_scope):
                return scoped_gradient(*upstream)

        return (outputs, last_hidden, last_carry), gradient

    return run(projected, hidden, carry, recurrent_kernel)


def hand_written_gradient_applies(layer, mask):
    """Whether `lstm_sequence` computes what Keras' loop would for `layer`."""
    cell = layer.cell
    return (keras.backend.backend() == "tensorflow" and mask is None
            and not layer.go_backwards and not layer.unroll
            and cell.activation is keras.activations.tanh
            and cell.recurrent_activation is keras.activations.sigmoid)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class LSTM(keras.layers.LSTM):
    """`keras.layers.LSTM` with `x W + b` computed for all steps before the loop.

    Exported as `layers.ProjectedLSTM`. The class itself is named `LSTM` because
    a `.keras` file addresses the layers of a model's layer list by their class
    name in snake case: the eager translator's files saved with
    `keras.layers.LSTM` (`layers/lstm`, `layers/lstm_1`) load into this class
    only under that name.

    Same arguments, weights and results as `keras.layers.LSTM` (see
    `layers.projected_recurrent` for when it uses Keras' own loop instead).

    Call arguments:
        as `layers.projected_gru.GRU`.

    Examples:
        >>> outputs, hidden, carry = ProjectedLSTM(4, return_sequences=True, return_state=True)(
        ...     np.ones((2, 3, 5), "float32"))
        >>> tuple(outputs.shape), tuple(carry.shape)
        ((2, 3, 4), (2, 4))
    """

    def inner_loop(self, sequences, initial_state, mask, training=False):
        cell = self.cell
        if uses_cell_dropout(cell, training) or cudnn_possible(self):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        projected = ops.matmul(time_major(sequences), cell.kernel)
        if cell.use_bias:
            projected = projected + cell.bias
        recurrent_kernel = cell.recurrent_kernel
        if hand_written_gradient_applies(self, mask):
            hidden, carry = initial_state
            outputs, hidden, carry = lstm_sequence(
                projected, ops.cast(hidden, projected.dtype), ops.cast(carry, projected.dtype),
                ops.cast(recurrent_kernel, projected.dtype))
            return hidden, time_major(outputs), [hidden, carry]

        def step(projected_input, states):
            hidden, carry = states
            gates = projected_input + ops.matmul(hidden, recurrent_kernel)
            # The cell's gate order and activations: input, forget, cell, output
            # (`split`, not slices: see `layers.projected_gru.gru_update`).
            z_input, z_forget, z_cell, z_output = ops.split(gates, 4, axis=-1)
            carry = (cell.recurrent_activation(z_forget) * carry
                     + cell.recurrent_activation(z_input) * cell.activation(z_cell))
            hidden = cell.recurrent_activation(z_output) * cell.activation(carry)
            return hidden, [hidden, carry]

        return run_projected(self, step, projected, list(initial_state), mask)


ProjectedLSTM = LSTM

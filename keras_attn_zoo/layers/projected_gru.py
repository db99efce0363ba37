"""`keras.layers.GRU` with the input projection out of the time loop (see
`layers.projected_recurrent`), and the GRU step both it and RNNsearch's decoder run.

On TensorFlow, for the paper's GRU (`reset_after=False`, sigmoid gates, tanh
candidate), `gru_sequence` runs the recurrence with a hand-written backward
loop, as `layers.projected_lstm.lstm_sequence` does for the LSTM: with
`z = σ(p_z + h U_z)`, `r = σ(p_r + h U_r)`, `n = tanh(p_h + (r h) U_h)`,
`h' = z h + (1 - z) n` (and `h_t = h'` where the mask is set, `h_{t-1}`
elsewhere), the loop backwards in time computes

    dz = dh' (h - n) z (1 - z),   dn = dh' (1 - z) (1 - n²),   d(r h) = dn U_h^T,
    dr = d(r h) h r (1 - r),      dh = dh' z + d(r h) r + [dz, dr] U_zr^T

and the kernels' gradients `dU_zr = Σ h^T [dz, dr]`, `dU_h = Σ (r h)^T dn`
are one matmul each over all `B * T` rows after the loop.
"""

import keras
from keras import ops

from keras_attn_zoo.layers.projected_recurrent import cudnn_possible
from keras_attn_zoo.layers.projected_recurrent import run_projected
from keras_attn_zoo.layers.projected_recurrent import time_major
from keras_attn_zoo.layers.projected_recurrent import uses_cell_dropout


def gru_sequence(projected, hidden, recurrent_kernel, candidate_kernel, mask=None,
                 zero_output_for_mask=True):
    """The paper's GRU over time-major input projections, with a hand-written gradient.

    TensorFlow only; `reset_after=False`, sigmoid gates, tanh candidate.

    Args:
        projected: `x_t W + b` of every step in the order they are run,
            `[T, B, 3 units]` (z, r, h blocks).
        hidden: `h_0`, `[B, units]`.
        recurrent_kernel: `U_zr`, `[units, 2 units]`.
        candidate_kernel: `U_h`, `[units, units]`.
        mask: None or boolean `[T, B]` in the same order: where False the
            state is carried over and the output is zero (Keras'
            `zero_output_for_mask=True`; False is accepted only without a mask).

    Returns:
        `(outputs [T, B, units], h_T)`.
    """
    import tensorflow as tf

    if mask is not None and not zero_output_for_mask:
        raise ValueError("gru_sequence with a mask gives zero outputs at masked steps.")
    dtype = projected.dtype
    steps = tf.shape(projected)[0]
    if mask is None:
        mask = tf.ones(tf.shape(projected)[:2], dtype)
    mask = tf.cast(mask, dtype)[:, :, None]  # [T, B, 1]

    # The backward loop's ops are named `<this scope>/hand_written_gradient/...`
    # (profiles, `benchmarks/rnn_throughput.py`, count them as the backward pass).
    gradient_scope = tf.get_current_name_scope()
    gradient_scope = (gradient_scope + "/" if gradient_scope else "") + "hand_written_gradient/"

    @tf.custom_gradient
    def run(projected, hidden, recurrent_kernel, candidate_kernel):
        step_shape, state_shape = projected.shape[1:], hidden.shape
        inputs = tf.TensorArray(dtype, size=steps, element_shape=step_shape).unstack(projected)
        masks = tf.TensorArray(dtype, size=steps, clear_after_read=False).unstack(mask)

        def array(size):
            return tf.TensorArray(dtype, size=size, clear_after_read=False,
                                  element_shape=state_shape)

        def forward(t, h, hiddens, outputs, updates, resets, candidates):
            x_z, x_r, x_h = tf.split(inputs.read(t), 3, axis=-1)
            recurrent_z, recurrent_r = tf.split(tf.matmul(h, recurrent_kernel), 2, axis=-1)
            z, r = tf.sigmoid(x_z + recurrent_z), tf.sigmoid(x_r + recurrent_r)
            n = tf.tanh(x_h + tf.matmul(r * h, candidate_kernel))
            m = masks.read(t)
            output = m * (z * h + (1 - z) * n)
            h = output + (1 - m) * h
            return (t + 1, h, hiddens.write(t + 1, h), outputs.write(t, output),
                    updates.write(t, z), resets.write(t, r), candidates.write(t, n))

        _, last, hiddens, outputs, updates, resets, candidates = tf.while_loop(
            lambda t, *_: t < steps, forward,
            (tf.constant(0), hidden, array(steps + 1).write(0, hidden), array(steps),
             array(steps), array(steps), array(steps)))
        all_outputs = outputs.stack()
        all_outputs.set_shape(projected.shape[:1].concatenate(state_shape))

        def scoped_gradient(d_outputs, d_last):
            d_hidden = tf.zeros_like(hidden) if d_last is None else d_last
            if d_outputs is None:
                d_outputs = tf.zeros_like(all_outputs)
            d_outputs = tf.TensorArray(dtype, size=steps, element_shape=state_shape).unstack(
                d_outputs)
            d_projections = tf.TensorArray(dtype, size=steps, element_shape=step_shape)
            d_candidate_rows = tf.TensorArray(dtype, size=steps, element_shape=state_shape)
            reset_hiddens = tf.TensorArray(dtype, size=steps, element_shape=state_shape)

            def backward(t, d_hidden, d_projections, d_candidate_rows, reset_hiddens):
                m = masks.read(t)
                h, z, r, n = hiddens.read(t), updates.read(t), resets.read(t), candidates.read(t)
                d_new = m * (d_hidden + d_outputs.read(t))  # d h'
                d_z = d_new * (h - n) * z * (1 - z)
                d_n = d_new * (1 - z) * (1 - n * n)
                d_reset_hidden = tf.matmul(d_n, candidate_kernel, transpose_b=True)
                d_r = d_reset_hidden * h * r * (1 - r)
                d_zr = tf.concat([d_z, d_r], axis=-1)
                d_previous = ((1 - m) * d_hidden + d_new * z + d_reset_hidden * r
                              + tf.matmul(d_zr, recurrent_kernel, transpose_b=True))
                return (t - 1, d_previous,
                        d_projections.write(t, tf.concat([d_zr, d_n], axis=-1)),
                        d_candidate_rows.write(t, d_n), reset_hiddens.write(t, r * h))

            _, d_hidden, d_projections, d_candidate_rows, reset_hiddens = tf.while_loop(
                lambda t, *_: t >= 0, backward,
                (steps - 1, d_hidden, d_projections, d_candidate_rows, reset_hiddens))
            units = tf.shape(hidden)[-1]
            d_projected = d_projections.stack()  # [T, B, 3 units]
            previous = tf.reshape(hiddens.stack()[:-1], [-1, units])
            d_recurrent = tf.matmul(previous, tf.reshape(d_projected[..., :2 * units],
                                                         [-1, 2 * units]), transpose_a=True)
            d_candidate = tf.matmul(tf.reshape(reset_hiddens.stack(), [-1, units]),
                                    tf.reshape(d_candidate_rows.stack(), [-1, units]),
                                    transpose_a=True)
            return d_projected, d_hidden, d_recurrent, d_candidate

        def gradient(*upstream):
            with tf.name_scope(gradient_scope):
                return scoped_gradient(*upstream)

        return (all_outputs, last), gradient

    return run(projected, hidden, recurrent_kernel, candidate_kernel)


def hand_written_gradient_applies(layer, mask):
    """Whether `gru_sequence` computes what Keras' loop would for `layer`."""
    cell = layer.cell
    return (keras.backend.backend() == "tensorflow" and not cell.reset_after
            and not layer.unroll and (mask is None or layer.zero_output_for_mask)
            and cell.activation is keras.activations.tanh
            and cell.recurrent_activation is keras.activations.sigmoid)


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
    # `split`, not slices: the gradient of a split is one concatenation, that
    # of each slice a full-width tensor of zeros (summed afterwards) per step.
    x_z, x_r, x_h = ops.split(projected_input, 3, axis=-1)
    recurrent = ops.split(recurrent_projection, 3 if cell.reset_after else 2, axis=-1)
    z = cell.recurrent_activation(x_z + recurrent[0])
    r = cell.recurrent_activation(x_r + recurrent[1])
    if cell.reset_after:
        recurrent_h = r * recurrent[2]
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
class GRU(keras.layers.GRU):
    """`keras.layers.GRU` with `x W + b` computed for all steps before the loop.

    Exported as `layers.ProjectedGRU`, named `GRU` for the reason
    `layers.projected_lstm.LSTM` gives: files saved with `keras.layers.GRU`
    load into it (RNNsearch's encoder GRUs are addressed by attribute inside
    `Bidirectional` and would load either way).

    Same arguments, weights and results as `keras.layers.GRU` (see
    `layers.projected_recurrent` for when it uses Keras' own loop instead).

    Call arguments:
        sequences: `[B, T, features]`.
        initial_state: the state to start from; None: zeros.
        mask: boolean `[B, T]`, False for steps to skip.
        training: Python bool, enables dropout (which runs Keras' own loop).

    Examples:
        >>> layer = ProjectedGRU(4, return_sequences=True)
        >>> tuple(layer(np.ones((2, 3, 5), "float32")).shape)
        (2, 3, 4)
    """

    def inner_loop(self, sequences, initial_state, mask, training=False):
        cell = self.cell
        if uses_cell_dropout(cell, training) or cudnn_possible(self):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        if keras.tree.is_nested(initial_state):
            initial_state = initial_state[0]
        units = cell.units
        input_bias, recurrent_bias = gru_biases(cell)
        projected = ops.matmul(time_major(sequences), cell.kernel)
        if input_bias is not None:
            projected = projected + input_bias
        if cell.reset_after:
            recurrent_kernel, candidate_kernel = cell.recurrent_kernel, None
        else:
            recurrent_kernel = cell.recurrent_kernel[:, :2 * units]
            candidate_kernel = cell.recurrent_kernel[:, 2 * units:]

        if hand_written_gradient_applies(self, mask):
            if keras.tree.is_nested(mask):
                mask = mask[0]
            if mask is not None:
                mask = time_major(mask)
            if self.go_backwards:
                projected = ops.flip(projected, axis=0)
                mask = None if mask is None else ops.flip(mask, axis=0)
            outputs, hidden = gru_sequence(
                projected, ops.cast(initial_state, projected.dtype),
                ops.cast(recurrent_kernel, projected.dtype),
                ops.cast(candidate_kernel, projected.dtype), mask=mask)
            # Keras' loop leaves the output of the last step it ran (zero where masked).
            return outputs[-1], time_major(outputs), [hidden]

        def step(projected_input, states):
            hidden = states[0]
            recurrent = ops.matmul(hidden, recurrent_kernel)
            if recurrent_bias is not None:
                recurrent = recurrent + recurrent_bias
            hidden = gru_update(cell, projected_input, hidden, recurrent, candidate_kernel)
            return hidden, [hidden]

        return run_projected(self, step, projected, [initial_state], mask)


ProjectedGRU = GRU

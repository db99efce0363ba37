"""`keras.layers.GRU` with the input projection out of the time loop (see
`layers.projected_recurrent`), and the GRU step both it and RNNsearch's decoder run."""

import keras
from keras import ops

from keras_attn_zoo.layers.projected_recurrent import cudnn_possible
from keras_attn_zoo.layers.projected_recurrent import run_projected
from keras_attn_zoo.layers.projected_recurrent import time_major
from keras_attn_zoo.layers.projected_recurrent import uses_cell_dropout


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

        def step(projected_input, states):
            hidden = states[0]
            recurrent = ops.matmul(hidden, recurrent_kernel)
            if recurrent_bias is not None:
                recurrent = recurrent + recurrent_bias
            hidden = gru_update(cell, projected_input, hidden, recurrent, candidate_kernel)
            return hidden, [hidden]

        return run_projected(self, step, projected, [initial_state], mask)


ProjectedGRU = GRU

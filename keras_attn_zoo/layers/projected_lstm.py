"""`keras.layers.LSTM` with the input projection out of the time loop (see
`layers.projected_recurrent`)."""

import keras
from keras import ops

from keras_attn_zoo.layers.projected_recurrent import cudnn_possible
from keras_attn_zoo.layers.projected_recurrent import run_projected
from keras_attn_zoo.layers.projected_recurrent import time_major
from keras_attn_zoo.layers.projected_recurrent import uses_cell_dropout


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

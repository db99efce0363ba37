"""Keeping the Weighted Transformer's κ and α on the probability simplex.

The Weighted Transformer (Ahmed et al., 2017) requires its concatenation
weights κ and addition weights α to be non-negative and to sum to 1 in every
layer. The published description keeps them there by projecting the raw
parameters onto the simplex after each optimiser update. This module holds

* `project_onto_simplex`: the Euclidean projection (Duchi et al., 2008), in
  `keras.ops`, over the last axis;
* `SimplexProjection`: a `keras.constraints.Constraint` running it. Keras 3
  optimisers apply `variable.constraint` right after every update
  (`BaseOptimizer.apply`: `_backend_apply_gradients`, then
  `variable.assign(variable.constraint(variable))` for each variable), so the
  projection happens after each step of `model.fit`, of the zoo's `Trainer`
  (which calls `optimizer.apply_gradients`) and of any custom loop that does;
  it is also applied inside `LossScaleOptimizer`, which delegates to its inner
  optimiser's `apply`.

The κ/α learning-rate warm-up of a public port lives with the model
(`keras_attn_zoo.models.weighted_optimizer`).

Edge case: the projection sets every coordinate below the threshold θ to
exactly 0, and a zero weight stops gradients:

* α_i = 0: FFN_i and everything upstream in branch i (its κ_i, W_i^O, query,
  key and value projections) get no gradient. α_i's own gradient is
  `<dL/d output, FFN_i(...)>`, generally non-zero, so α_i can come back.
* κ_i = 0: branch i's W_i^O and query/key/value projections get no
  gradient, and FFN_i sees the input 0. κ_i's own gradient then flows only
  through FFN_i's hidden units whose bias is positive (ReLU'(0) = 0): with
  the zero-initialised biases of a fresh layer none are, so a κ_i driven to
  0 early can stay at 0 for good.

Set `min_weight > 0` (the layer's `min_branch_weight`) to project onto
`{w >= min_weight, sum w = 1}` instead, which keeps every branch trainable
(not in the paper); the softmax parameterisation never reaches 0.
"""

import keras
from keras import ops


def project_onto_simplex(values, radius=1.0, min_weight=0.0):
    """Euclidean projection of each vector (last axis) onto the simplex.

    Returns `argmin_w ||w - v||_2` subject to `w_i >= min_weight` and
    `sum_i w_i = radius` (Duchi, Shalev-Shwartz, Singer and Chandra, 2008,
    Algorithm 1). With `u` = `v` sorted descending, `rho` is the largest `j`
    with `u_j - (sum_{r<=j} u_r - radius) / j > 0`, `theta = (sum_{r<=rho}
    u_r - radius) / rho` and `w = max(v - theta, 0)`. A floor `m` is handled
    by projecting `v - m` onto the simplex of radius `radius - n m` and adding
    `m` back. Ties are fine: the result does not depend on their order.

    Args:
        values: float tensor `[..., n]` with a static last dimension.
        radius: the sum of each projected vector (> 0).
        min_weight: lower bound of every coordinate; needs
            `n * min_weight < radius`.

    Returns:
        A tensor of the same shape and dtype as `values` (computed in float32).
    """
    dtype = keras.backend.standardize_dtype(getattr(values, "dtype", "float32"))
    v = ops.cast(values, "float32")
    size = v.shape[-1]
    if size is None:
        raise ValueError("project_onto_simplex needs a static last dimension.")
    budget = float(radius) - size * float(min_weight)
    if budget <= 0.0:
        raise ValueError(
            f"min_weight={min_weight} is too large for {size} weights summing to "
            f"{radius}: it needs {size} * min_weight < {radius}."
        )
    v = v - float(min_weight)
    descending = ops.flip(ops.sort(v, axis=-1), axis=-1)
    excess = ops.cumsum(descending, axis=-1) - budget
    index = ops.arange(1, size + 1, dtype="float32")
    positive = descending - excess / index > 0
    # The condition holds for j <= rho and fails after; take the largest j
    # where it holds so that rounding in near-ties cannot shorten rho.
    # j = 1 always holds since budget > 0, so rho >= 1.
    rho = ops.max(ops.where(positive, index, ops.zeros_like(index)), axis=-1,
                  keepdims=True)
    rho_index = ops.cast(rho, "int32") - 1
    theta = ops.take_along_axis(excess, rho_index, axis=-1) / rho
    projected = ops.maximum(v - theta, 0.0) + float(min_weight)
    return ops.cast(projected, dtype)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class SimplexProjection(keras.constraints.Constraint):
    """Constraint projecting a weight (its last axis) onto the simplex.

    Put it on a weight with `add_weight(..., constraint=SimplexProjection())`;
    Keras optimisers apply it after every update.

    Args:
        min_weight: lower bound of every coordinate (0: the plain simplex, as
            in the paper; see the module docstring for why a floor can help).

    Examples:
        >>> keras.ops.convert_to_numpy(SimplexProjection()(keras.ops.array([2.0, 0.0])))
        array([1., 0.], dtype=float32)
    """

    def __init__(self, min_weight=0.0):
        self.min_weight = min_weight

    def __call__(self, w):
        return project_onto_simplex(w, min_weight=self.min_weight)

    def get_config(self):
        return {"min_weight": self.min_weight}

"""Does a model decode what it trains? The teacher-forced pass against step decoding.

`fit`, the `Trainer`, rescoring and the analyses run a model's functional graph
(all target positions at once); beam and greedy search run `encode`,
`initial_state` and `decode_step` one position at a time. Both must compute the
same function, or the search decodes a model that was never trained. This
module measures the gap; the model contract tests assert it is below 1e-5.
"""

import numpy as np


def step_decoding_divergence(model, source_ids, target_ids):
    """Max |logit difference| of the teacher-forced pass and cached step decoding.

    Feeds `target_ids` (decoder inputs, BOS first, 0-padded) to `decode_step`
    one position at a time and compares each step's logits with the functional
    model's logits `model({"source_ids", "target_ids"}, training=False)` at the
    positions `model.stepwise_positions(source_ids, target_ids)` marks (real
    target tokens; for the eager translator only while the source is read).

    Args:
        model: a zoo model (the step protocol and the functional graph).
        source_ids: int32 `[B, S]`.
        target_ids: int32 `[B, T]`.

    Returns:
        A Python float, 0.0 when no position is compared.
    """
    source_ids = np.asarray(source_ids, "int32")
    target_ids = np.asarray(target_ids, "int32")
    full = np.asarray(
        model({"source_ids": source_ids, "target_ids": target_ids}, training=False)
    )
    state = model.initial_state(model.encode(source_ids), target_ids.shape[1])
    steps = []
    for t in range(target_ids.shape[1]):
        logits, state = model.decode_step(target_ids[:, t], t, state)
        steps.append(np.asarray(logits))
    stepped = np.stack(steps, axis=1)
    compared = np.asarray(model.stepwise_positions(source_ids, target_ids), bool)
    if not compared.any():
        return 0.0
    return float(np.abs(stepped[compared] - full[compared]).max())

"""The Weighted Transformer paper's claims (Ahmed et al., 2017) and the κ/α probe.

Thresholds and where they come from:

* Weighted Transformer, "converges 15-40% faster": on the dev curves (BLEU
  against steps, both models, same seed) the steps at which each first
  reaches the Transformer's best dev BLEU (linear interpolation between
  evaluations). A seed is for when the Weighted Transformer needs at most
  `FASTER_STEPS_RATIO` (0.85, the paper's lower end, 15% fewer) of the
  Transformer's steps; against when it needs as many or more, or never gets
  there.
* The forms of issue 32 (`forms_table`): the builder's default is the form
  with the best mean valid BLEU over `MIN_SEEDS` or more converged seeds,
  chosen on the valid split only; the test columns are shown, not used.
* κ and α away from uniform: total-variation distance from uniform,
  `0.5 * sum |w_i - 1/M|` (0 to `1 - 1/M`), averaged over the branched
  layers, against a null (`noise_null`): the same Adam, schedule, steps and
  simplex projection driven by gradients that prefer no branch. Adam moves
  every weight by about the learning rate per step, so a fixed threshold
  (0.05 before issue 33) is passed by noise alone. A seed is for when both
  κ's and α's distance are above the null (p < 0.05), against when neither
  is. The paper (Figure 3) shows the weights moving apart without a number.
* The forms table's κ/α columns. A random start (the port's, softmax of
  U[0, 1) logits) is already away from uniform (0.103 on average at M = 4),
  so a random-start form's distance is shown beside its expected value at
  the start (`random_start_distance`), not read as movement; and the
  distance between κ and α themselves (`0.5 * sum |κ_i - α_i|`, layer
  mean) shows whether the two are tied (about 0 from a uniform start, where
  their gradients are equal) or move apart.
"""

import functools

import numpy as np

from keras_attn_zoo.evaluation.claims.checks import at_least_transformer
from keras_attn_zoo.evaluation.claims.engine import MIN_SEEDS
from keras_attn_zoo.evaluation.claims.engine import NotMeasured
from keras_attn_zoo.evaluation.claims.engine import converged
from keras_attn_zoo.evaluation.claims.engine import majority_verdict
from keras_attn_zoo.evaluation.claims.engine import rounded
from keras_attn_zoo.evaluation.claims.engine import spread
from keras_attn_zoo.evaluation.claims.engine import value_at
from keras_attn_zoo.evaluation.significance import ALPHA
from keras_attn_zoo.evaluation.significance import mean_and_std

WEIGHTED_PAPER = "Weighted Transformer (Ahmed et al., 2017)"
FASTER_STEPS_RATIO = 0.85
NULL_REPLICATES = 200


def total_variation_from_uniform(weights):
    """`0.5 * sum_i |w_i - 1/M|`: 0 for uniform weights, `1 - 1/M` for one-hot."""
    weights = np.asarray(weights, dtype=np.float64)
    return float(0.5 * np.abs(weights - 1.0 / weights.size).sum())


@functools.lru_cache(maxsize=None)
def random_start_distance(branches, draws=20000):
    """The expected total-variation distance from uniform of a κ or α at the port's
    random start (softmax of U[0, 1) logits over `branches`), by a seeded draw."""
    logits = np.random.default_rng(0).random((draws, branches))
    weights = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return float(np.mean(0.5 * np.abs(weights - 1.0 / branches).sum(axis=1)))


def branch_weights(model):
    """κ and α of every branched layer of `model` with their total-variation distances from
    uniform.
    """
    from keras_attn_zoo.models.weighted_transformer import weighted_branch_weights

    rows = []
    for name, weights in weighted_branch_weights(model).items():
        rows.append({"layer": name, "kappa": weights["kappa"], "alpha": weights["alpha"],
                     "kappa_tv_from_uniform": total_variation_from_uniform(weights["kappa"]),
                     "alpha_tv_from_uniform": total_variation_from_uniform(weights["alpha"])})
    return rows


def probe(context):
    """``{"branch_weights"}`` for a Weighted Transformer (`branch_weights`); `{}` else."""
    rows = branch_weights(context.model)
    return {"branch_weights": rows} if rows else {}


def steps_to_reach(curve, target):
    """First (interpolated) step at which the dev BLEU reaches `target`; None: never."""
    points = sorted((float(p["step"]), float(p["bleu"])) for p in curve
                    if p.get("step") is not None and p.get("bleu") is not None)
    previous = None
    for step, bleu in points:
        if bleu >= target:
            if previous is None or bleu == previous[1]:
                return step
            fraction = (target - previous[1]) / (bleu - previous[1])
            return previous[0] + fraction * (step - previous[0])
        previous = (step, bleu)
    return None


def steps_check(cells):
    """The steps the Weighted Transformer takes to reach the Transformer's best BLEU, against the
    Transformer's.
    """
    paired = cells.paired("weighted", ["learning_curve"])
    rows, outcomes = [], []
    for seed, cell, base in paired:
        best = max((float(p["bleu"]) for p in base["learning_curve"]
                    if p.get("bleu") is not None), default=None)
        if best is None or best <= 0:
            outcomes.append(None)
            rows.append({"seed": seed, "target_bleu": best, "transformer_steps": None,
                         "weighted_steps": None, "ratio": None})
            continue
        base_steps = steps_to_reach(base["learning_curve"], best)
        own_steps = steps_to_reach(cell["learning_curve"], best)
        ratio = None if own_steps is None else own_steps / max(base_steps, 1.0)
        outcomes.append(False if ratio is None or ratio >= 1.0 else
                        True if ratio <= FASTER_STEPS_RATIO else None)
        rows.append({"seed": seed, "target_bleu": round(best, 4),
                     "transformer_steps": round(base_steps, 1),
                     "weighted_steps": None if own_steps is None else round(own_steps, 1),
                     "ratio": None if ratio is None else round(ratio, 4)})
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    never = sum(r["weighted_steps"] is None and r["transformer_steps"] is not None
                for r in rows)
    measurement = ("Dev BLEU against steps, same seed: steps the Weighted Transformer needs "
                   "to reach the Transformer's best dev BLEU, over the steps the "
                   "Transformer needs: " + (spread(ratios) if ratios else "none")
                   + f"; never reached on {never} of {len(rows)} seeds (paper: 15-40% "
                   f"faster; a seed counts at <= {FASTER_STEPS_RATIO}).")
    return measurement, {"per_seed": rows, "outcomes": outcomes}, majority_verdict(outcomes)


@functools.lru_cache(maxsize=32)
def noise_null(branches, layers, steps, learning_rate, warmup_steps,
               replicates=NULL_REPLICATES, seed=0):
    """The null of "κ/α moved away from uniform": their total-variation distance from
    uniform (mean over `layers`) after `steps` updates of the recipe's Adam (beta
    0.9/0.98, epsilon 1e-9, the inverse-square-root schedule with this peak and
    warm-up, the simplex projection after each step) from uniform weights, driven by
    gradients that carry no preference among the branches (i.i.d. normal noise).
    Adam moves every weight by about the learning rate per step whatever the
    gradient's size, so pure noise already moves κ/α; `replicates` draws of that
    movement, sorted."""
    import tensorflow as tf

    from keras_attn_zoo.layers.simplex_projection import project_onto_simplex
    from keras_attn_zoo.optimizers import InverseSquareRootSchedule

    schedule = InverseSquareRootSchedule(learning_rate, warmup_steps)
    shape = (replicates * layers, branches)

    @tf.function
    def simulate():  # one traced loop: thousands of tiny steps, no Python per step
        weights = tf.fill(shape, tf.constant(1.0 / branches, tf.float64))
        first = second = tf.zeros(shape, tf.float64)
        for step in tf.range(1, steps + 1):
            gradient = tf.random.stateless_normal(shape, [seed, step], dtype=tf.float64)
            first = 0.9 * first + 0.1 * gradient
            second = 0.98 * second + 0.02 * gradient ** 2
            t = tf.cast(step, tf.float64)
            rate = (tf.cast(schedule(step - 1), tf.float64) * tf.sqrt(1 - 0.98 ** t)
                    / (1 - 0.9 ** t))
            weights = project_onto_simplex(weights - rate * first / (tf.sqrt(second) + 1e-9))
        return weights

    weights = simulate().numpy()
    distances = 0.5 * np.abs(weights - 1.0 / branches).sum(axis=1)
    return np.sort(distances.reshape(replicates, layers).mean(axis=1))


def null_p_value(null, observed):
    """`(#{null >= observed} + 1) / (n + 1)`."""
    return float((np.sum(np.asarray(null) >= observed) + 1) / (len(null) + 1))


def branches_check(cells):
    """The Weighted Transformer's κ and α moved away from uniform."""
    rows = cells.seeds("weighted", "probes.branch_weights")
    kappas, alphas, outcomes, p_values, nulls = [], [], [], [], []
    for _, cell in rows:
        layers = cell["probes"]["branch_weights"]
        kappa = float(np.mean([layer["kappa_tv_from_uniform"] for layer in layers]))
        alpha = float(np.mean([layer["alpha_tv_from_uniform"] for layer in layers]))
        kappas.append(kappa)
        alphas.append(alpha)
        config = cell.get("config") or {}
        if not all(config.get(k) for k in ("learning_rate", "warmup_steps")):
            raise NotMeasured("a Weighted Transformer cell without its learning rate and "
                              "warm-up (config): no null to test κ/α against")
        null = noise_null(len(layers[0]["kappa"]), len(layers),
                          int(cell.get("best_step") or cell["steps"]),
                          float(config["learning_rate"]), int(config["warmup_steps"]))
        nulls.append(float(np.percentile(null, 95)))
        p = [null_p_value(null, kappa), null_p_value(null, alpha)]
        p_values.append(p)
        moved = [value < ALPHA for value in p]
        outcomes.append(True if all(moved) else False if not any(moved) else None)
    measurement = (f"Total-variation distance from uniform, mean over the branched layers: "
                   f"κ {spread(kappas, 3)}, α {spread(alphas, 3)} (0 uniform, 1 - 1/M "
                   f"one-hot). Null: the same Adam, schedule, steps and simplex projection "
                   f"driven by gradients with no preference among branches (i.i.d. noise, "
                   f"{NULL_REPLICATES} draws), 95th percentile {spread(nulls, 3)}; a seed "
                   f"counts when both κ's and α's distance are above the null (p < {ALPHA}).")
    numbers = {"seeds": [s for s, _ in rows], "kappa_tv": rounded(kappas),
               "alpha_tv": rounded(alphas), "null_95th_percentile": rounded(nulls),
               "p_kappa_alpha": [rounded(p) for p in p_values], "outcomes": outcomes}
    return measurement, numbers, majority_verdict(outcomes)


WEIGHTED_BUILDER = "weighted_transformer"


def forms_table(cells):
    """The Weighted Transformer's forms side by side (issue 32): every leaderboard
    model built by `weighted_transformer` ("weighted" is the paper's form), with its
    valid and test BLEU, its BLEU against the Transformer of the same seed and how far
    κ and α moved, its training loss against the paper form's on the same batches
    (`same_batch_loss_difference`); and the form its cells choose as the builder's default.

    Returns ``{"rows": [...], "chosen": model or None, "reason": str}``; no rows
    where fewer than two forms have cells.
    """
    from keras_attn_zoo.models import LEADERBOARD_MODELS

    by_model = {}
    for cell in cells:
        if cell.get("builder") == WEIGHTED_BUILDER and cell.get("status", "ok") == "ok":
            by_model.setdefault(cell["model"], []).append(cell)
    if len(by_model) < 2:
        return {"rows": [], "chosen": None, "reason": "fewer than two forms have cells"}
    paper = {c["seed"]: c for c in by_model.get("weighted", [])}
    rows, ready = [], {}
    for model, own in by_model.items():
        own = sorted(own, key=lambda c: c["seed"])
        done = [c for c in own if converged(c)]
        probed = [layers for c in own
                  for layers in [(c.get("probes") or {}).get("branch_weights")] if layers]
        tv = [float(np.mean([layer[f"{name}_tv_from_uniform"] for layer in layers]))
              for layers in probed for name in ("kappa", "alpha")]
        gap = [float(np.mean([0.5 * np.abs(np.subtract(layer["kappa"], layer["alpha"])).sum()
                              for layer in layers])) for layers in probed]
        random_start = (LEADERBOARD_MODELS.get(model, (None, {}))[1]
                        .get("weight_initialization") == "random")
        rows.append({
            "model": model, "model_options": form_options(model),
            "seeds": [c["seed"] for c in own], "converged_seeds": [c["seed"] for c in done],
            "valid_bleu": rounded([c.get("best_valid_bleu") for c in own]),
            "test_bleu": rounded([c.get("bleu") for c in own]),
            "bleu_vs_transformer": rounded([value_at(c, "versus_transformer.bleu_difference")
                                            for c in own]),
            "kappa_alpha_tv": round(float(np.mean(tv)), 4) if tv else None,
            "kappa_alpha_tv_at_start": (
                round(random_start_distance(len(probed[0][0]["kappa"])), 4)
                if random_start and probed else 0.0 if probed else None),
            "kappa_minus_alpha": round(float(np.mean(gap)), 4) if gap else None,
            "training_loss_vs_paper": rounded(
                [same_batch_loss_difference(c, paper[c["seed"]])
                 for c in own if model != "weighted" and c["seed"] in paper])})
        scores = [c["best_valid_bleu"] for c in done if c.get("best_valid_bleu") is not None]
        if len(scores) >= MIN_SEEDS:
            ready[model] = float(np.mean(scores))
    if len(ready) < len(rows):
        waiting = [row["model"] for row in rows if row["model"] not in ready]
        return {"rows": rows, "chosen": None,
                "reason": f"not chosen yet: {', '.join(waiting)} lack {MIN_SEEDS} converged "
                          f"seeds"}
    chosen = max(ready, key=ready.get)
    return {"rows": rows, "chosen": chosen,
            "reason": f"the best mean valid BLEU over converged seeds ({ready[chosen]:.2f})"}


# Cells that saw the same batches have losses that rise and fall together batch by
# batch (0.99 between the Weighted forms' seed-0 cells; 0.003 with one shifted by
# a log point): below this correlation the batches are not the same.
SAME_BATCHES_MIN_CORRELATION = 0.5


def same_batch_loss_difference(cell, reference):
    """The mean of `cell`'s logged training loss minus `reference`'s over the steps
    both logged in the second half of the shorter run (`training_loss_logged`).
    Cells of one seed and recipe train on the same batches, so the difference is
    paired, batch by batch. None without both records, or when the two losses do
    not move together (correlation below `SAME_BATCHES_MIN_CORRELATION`): then the
    batches differ and the difference would not be paired."""
    mine, theirs = ({step: loss for step, loss in c.get("training_loss_logged") or []}
                    for c in (cell, reference))
    if not mine or not theirs:
        return None
    half = min(max(mine), max(theirs)) / 2
    steps = sorted(step for step in set(mine) & set(theirs) if step > half)
    if len(steps) < 3:
        return None
    ours, others = np.array([mine[s] for s in steps]), np.array([theirs[s] for s in steps])
    if np.corrcoef(ours, others)[0, 1] < SAME_BATCHES_MIN_CORRELATION:
        return None
    return float(np.mean(ours - others))


def form_options(model):
    """The builder options that make `model` its form (`models.LEADERBOARD_MODELS`),
    without the recipe's, which every form shares; "" for the paper's."""
    from keras_attn_zoo.models import LEADERBOARD_MODELS
    from keras_attn_zoo.models import format_model_options

    return format_model_options(LEADERBOARD_MODELS.get(model, (None, {}))[1])


def shown_distance(distance, at_start):
    """A κ/α distance with its value at the start: "0.0574 (0.1028)"; "-" without one."""
    if distance is None:
        return "-"
    return f"{distance} ({at_start})" if at_start is not None else str(distance)


def forms_markdown(forms):
    """`forms_table`'s rows as a markdown table with the choice below; '' without rows."""
    if not forms["rows"]:
        return ""

    def listed(values, signed=False, digits=2):  # mean ± sample deviation over seeds
        values = [v for v in values if v is not None]
        if not values:
            return "-"
        mean, std = mean_and_std(values)
        text = f"{mean:{'+' if signed else ''}.{digits}f}"
        return text if std is None else f"{text} ± {std:.{digits}f}"

    lines = ["| form | options | seeds (converged) | valid BLEU | test BLEU | "
             "Δ BLEU vs Transformer | κ/α distance from uniform (at the start) | "
             "κ − α distance | training loss − the paper form's (same batches) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in forms["rows"]:
        lines.append(
            f"| {row['model']} | `{row['model_options'] or '(the paper)'}` | "
            f"{len(row['seeds'])} ({len(row['converged_seeds'])}) | "
            f"{listed(row['valid_bleu'])} | {listed(row['test_bleu'])} | "
            f"{listed(row['bleu_vs_transformer'], signed=True)} | "
            f"{shown_distance(row['kappa_alpha_tv'], row.get('kappa_alpha_tv_at_start'))} | "
            f"{'-' if row.get('kappa_minus_alpha') is None else row['kappa_minus_alpha']} | "
            f"{listed(row['training_loss_vs_paper'], signed=True, digits=3)} |")
    choice = (f"The builder's default: **{forms['chosen']}**, {forms['reason']}."
              if forms["chosen"] else f"The builder's default: {forms['reason']}.")
    return ("\n".join(lines) + "\n\n" + choice + " Chosen on the valid split (each cell's "
            "best checkpoint, greedy, every valid sentence); the test columns are shown, "
            "not used. The training loss column: the mean difference to the paper form "
            "of the same seed over the batches both runs logged (one every `log_every` "
            "steps, the second half of the shorter run); the same seed gives every "
            "form the same batches, so it is paired (shown where the two runs' losses "
            f"correlate batch by batch at {SAME_BATCHES_MIN_CORRELATION} or more): above "
            "0, the form fits the training data less well. The κ/α distance from "
            "uniform is the layer mean of κ's and α's, beside its value at the start (0 "
            "from a uniform start; the expected value from the port's random one); "
            "κ − α is their distance from each other (about 0: tied).\n")


CLAIMS = [
    (WEIGHTED_PAPER, "Better BLEU than the Transformer (paper: +0.5 En-De, +0.4 En-Fr)",
     at_least_transformer("weighted")),
    (WEIGHTED_PAPER, "Reaches the Transformer's BLEU in fewer steps (paper: converges "
                     "15-40% faster)", steps_check),
    (WEIGHTED_PAPER, "κ and α move away from uniform (Figure 3)", branches_check),
]

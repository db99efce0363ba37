"""The verdict engine: the leaderboard's cells by model and seed, the majority
rule, the seeds a verdict needs, and the table of verdicts.

A claim is `(paper, claim, check)`; `check(cells)` takes a `Cells` and returns
`(measurement, numbers, verdict)` or raises `NotMeasured`. The papers' modules
(`ran`, `gmm`, `weighted`, `bahdanau`, `eager`) hold their claims; `checks` the
checks several of them share.
"""

from keras_attn_zoo.evaluation import report
from keras_attn_zoo.evaluation.significance import CONFIRMED
from keras_attn_zoo.evaluation.significance import INCONCLUSIVE
from keras_attn_zoo.evaluation.significance import NOT_CONFIRMED
from keras_attn_zoo.evaluation.significance import mean_and_std

# The leaderboard's model keys are `models.MODEL_VARIANTS` names; every claim
# against "the Transformer" means this one.
BASELINE = "transformer"
# A verdict needs this many seeds; fewer leave it inconclusive (provisional).
MIN_SEEDS = 3


class NotMeasured(Exception):
    """A claim's cells or fields are missing; the message says what."""


def majority_verdict(outcomes):
    """Verdict from per-seed outcomes: True (for), False (against), None (neither).

    The majority rule of `significance.compare_verdict` for measures that
    have no bootstrap p-value: confirmed when most seeds are for, not
    confirmed when most are against, else inconclusive.
    """
    outcomes = list(outcomes)
    if not outcomes:
        return INCONCLUSIVE
    majority = len(outcomes) // 2 + 1
    if sum(outcome is True for outcome in outcomes) >= majority:
        return CONFIRMED
    if sum(outcome is False for outcome in outcomes) >= majority:
        return NOT_CONFIRMED
    return INCONCLUSIVE


def value_at(cell, path):
    """The value at the dotted `path` of a cell (`"probes.aer"`); None where any part is missing.

    """
    value = cell
    for key in path.split("."):
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return value


def display_name(key):
    """The name a verdict gives the leaderboard's model `key`."""
    return {"transformer": "Transformer", "weighted": "Weighted Transformer"}.get(key, key)


def spread(values, digits=2, signed=False, unit=""):
    """`"+0.40 ± 0.20 (3 seeds)"`: mean and sample deviation over seeds."""
    mean, std = mean_and_std(values)
    sign = "+" if signed else ""
    text = f"{mean:{sign}.{digits}f}{unit}"
    if std is not None:
        text += f" ± {std:.{digits}f}{unit}"
    count = len(values)
    return f"{text} ({count} seed{'s' if count != 1 else ''})"


def rounded(values, digits=4):
    """`values` rounded to `digits`, None kept."""
    return [None if value is None else round(float(value), digits) for value in values]


class Cells:
    """The leaderboard's cells by model and seed (status "ok" only)."""

    def __init__(self, cells):
        self.by_model = {}
        for cell in cells:
            if cell.get("status", "ok") != "ok" or cell.get("model") is None:
                continue
            self.by_model.setdefault(cell["model"], {})[cell.get("seed", 0)] = cell

    def seeds(self, model, *paths):
        """`[(seed, cell)]` of `model` whose every path is measured."""
        cells = self.by_model.get(model)
        if not cells:
            raise NotMeasured(f"no finished {display_name(model)} cell")
        found = [(seed, cell) for seed, cell in sorted(cells.items())
                 if all(value_at(cell, path) is not None for path in paths)]
        if not found:
            raise NotMeasured(f"no {display_name(model)} cell has {', '.join(paths)}")
        return found

    def paired(self, model, paths, baseline=BASELINE, baseline_paths=None):
        """`[(seed, cell, baseline cell)]`, seeds paired by number."""
        baseline_paths = paths if baseline_paths is None else baseline_paths
        own = dict(self.seeds(model, *paths))
        other = dict(self.seeds(baseline, *baseline_paths))
        seeds = sorted(set(own) & set(other))
        if not seeds:
            raise NotMeasured(f"no seed with both a {display_name(model)} and a "
                              f"{display_name(baseline)} cell measuring {', '.join(paths)}")
        return [(seed, own[seed], other[seed]) for seed in seeds]


def claim_verdicts(cells, claims):
    """One verdict per claim of `claims` (`[(paper, claim, check)]`) from the cells.

    Args:
        cells: one dict per (model, seed) as the leaderboard writes them (see
            the package docstring for the fields read; missing fields make the
            claims that need them "not measured"). Cells whose ``"status"``
            is not "ok" are left out.
        claims: `[(paper, claim, check)]`, in the order of the rows.

    Returns:
        `[{"paper", "claim", "measurement", "numbers", "verdict"}]` in the
        order of `claims`; verdict is `significance.CONFIRMED`,
        `NOT_CONFIRMED` or `INCONCLUSIVE`.
    """
    table = Cells(cells)
    rows = []
    for paper, claim, check in claims:
        try:
            measurement, numbers, verdict = check(table)
        except NotMeasured as missing:
            measurement, numbers, verdict = f"not measured: {missing}", {}, INCONCLUSIVE
        row = {"paper": paper, "claim": claim, "measurement": measurement,
               "numbers": numbers, "verdict": verdict}
        seeds = seeds_measured(numbers)
        final, provisional = verdict_on_seeds(verdict, seeds)
        if provisional is not None:
            row.update(verdict=final, provisional=provisional, measurement=(
                f"{measurement} Provisional: {provisional} on {seeds} of the {MIN_SEEDS} "
                f"seeds a verdict needs."))
        rows.append(row)
    return rows


def verdict_on_seeds(verdict, seeds):
    """`(verdict, provisional)`: a decided verdict from fewer than `MIN_SEEDS` seeds
    becomes inconclusive, the decided one kept as provisional (else None). `seeds`
    None: the count is unknown, the verdict stands."""
    if seeds is None or seeds >= MIN_SEEDS or verdict == INCONCLUSIVE:
        return verdict, None
    return INCONCLUSIVE, verdict


def seeds_measured(numbers):
    """How many seeds a claim's numbers come from (a claim pooled over models, like
    the RAN patterns, counts its distinct seeds too), or None where they do not say."""
    if "seeds" in numbers:
        return len(set(numbers["seeds"]))
    for key in ("per_seed", "cells"):
        if key in numbers:
            return len({entry["seed"] for entry in numbers[key]})
    return None


def verdicts_markdown(verdicts):
    """A Markdown table: paper | claim | measurement | verdict."""
    return report.table(
        ["paper", "claim", "measurement", "verdict"],
        [[str(row[key]).replace("|", "\\|").replace("\n", " ")
          for key in ("paper", "claim", "measurement", "verdict")] for row in verdicts])

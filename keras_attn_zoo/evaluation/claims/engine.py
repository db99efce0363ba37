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
from keras_attn_zoo.evaluation.significance import MIN_SEEDS_SPLIT
from keras_attn_zoo.evaluation.significance import NOT_CONFIRMED
from keras_attn_zoo.evaluation.significance import UNTESTED
from keras_attn_zoo.evaluation.significance import holm_adjusted_bootstrap
from keras_attn_zoo.evaluation.significance import holm_gate
from keras_attn_zoo.evaluation.significance import mean_and_std

# The leaderboard's model keys are `models.LEADERBOARD_MODELS` names; every claim
# against "the Transformer" means this one.
BASELINE = "transformer"
# A verdict needs this many seeds; fewer leave it inconclusive (provisional).
MIN_SEEDS = 3


class NotMeasured(Exception):
    """A claim's cells or fields are missing; the message says what."""


def majority_verdict(outcomes):
    """Verdict from per-seed outcomes: True (for), False (against), None (neither).

    The majority rule of `significance.paired_seed_verdict` for measures that
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

    def __init__(self, cells, data_properties=None):
        # Measurements of the data, not of a model (the ε share by start pads).
        self.data_properties = data_properties or {}
        self.by_model = {}
        self.touched = set()  # the models a check read: the convergence gate's
        for cell in cells:
            if cell.get("status", "ok") != "ok" or cell.get("model") is None:
                continue
            self.by_model.setdefault(cell["model"], {})[cell.get("seed", 0)] = cell

    def reads(self, model):
        """Notes that a check's result depends on `model`'s cells (the convergence
        gate checks them) without reading them here."""
        self.touched.add(model)

    def seeds(self, model, *paths):
        """`[(seed, cell)]` of `model` whose every path is measured."""
        self.reads(model)
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


def converged(cell):
    """Whether a cell's training stopped by early stopping on the valid split. A cell
    stopped at the cap (steps or wall time), or trained for a fixed number of steps
    (the tables before issue 33, without ``"stop_reason"``), did not converge."""
    return cell.get("stop_reason") == "converged"


def stop_label(cell):
    """Why a cell's training ended, in words."""
    reason = cell.get("stop_reason")
    if reason is None:
        return "fixed steps"  # the tables before early stopping
    return {"converged": "converged", "max_steps": "step cap",
            "time_budget": "wall-time cap"}.get(reason, reason)


def data_property(check):
    """Marks a check that reads a property of the data, not of a trained model: the
    convergence gate does not apply to it."""
    check.data_property = True
    return check


def _run(check, cells, data_properties=None):
    table = Cells(cells, data_properties)
    try:
        measurement, numbers, verdict = check(table)
    except NotMeasured as missing:
        measurement, numbers, verdict = f"not measured: {missing}", {}, INCONCLUSIVE
    return table, measurement, numbers, verdict


def _listing(stopped):
    models = {}
    for model, seed, label in stopped:
        models.setdefault((model, label), []).append(str(seed))
    return "; ".join(f"{display_name(model)} seed{'s' if len(seeds) > 1 else ''} "
                     f"{', '.join(seeds)} ({label})" for (model, label), seeds in models.items())


def _gated(check, cells, data_properties=None):
    """`(measurement, numbers, verdict, at_cap)` of one claim under the convergence
    gate: the claim is decided on converged cells only; where they are too few and
    some of the cells it reads stopped before converging, it is `UNTESTED` and the
    verdict those cells would give is `at_cap`."""
    table, measurement, numbers, verdict = _run(check, cells, data_properties)
    if getattr(check, "data_property", False):
        return measurement, numbers, verdict, None
    stopped = [(model, seed, stop_label(cell)) for model in sorted(table.touched)
               for seed, cell in sorted(table.by_model.get(model, {}).items())
               if not converged(cell)]
    if not stopped:
        return measurement, numbers, verdict, None
    _, kept_measurement, kept_numbers, kept_verdict = _run(
        check, [cell for cell in cells if converged(cell)], data_properties)
    seeds = seeds_measured(kept_numbers)
    if not kept_measurement.startswith("not measured") and (seeds or 0) >= MIN_SEEDS:
        return (f"{kept_measurement} Left out, not converged: {_listing(stopped)}.",
                kept_numbers, kept_verdict, None)
    numbers = {**numbers, "not_converged": [
        {"model": model, "seed": seed, "stopped": label} for model, seed, label in stopped]}
    return (f"Not converged: {_listing(stopped)}; at the cap: {measurement}", numbers,
            UNTESTED, verdict)


def claim_verdicts(cells, claims, data_properties=None):
    """One verdict per claim of `claims` (`[(paper, claim, check)]`) from the cells.

    Args:
        cells: one dict per (model, seed) as the leaderboard writes them (see
            the package docstring for the fields read; missing fields make the
            claims that need them "not measured"). Cells whose ``"status"``
            is not "ok" are left out.
        claims: `[(paper, claim, check)]`, in the order of the rows.
        data_properties: measurements of the data the checks may read
            (`Cells.data_properties`).

    The rules, in order: the convergence gate (`_gated`: a claim about trained
    models is decided on converged cells, else `UNTESTED`); `MIN_SEEDS` seeds;
    BLEU claims (numbers with ``"seed_test"``) through `significance.holm_gate`
    over the claims table (seed-level t-test, Holm; 5 seeds where the seeds
    split), the other claims' split seeds (``"outcomes"``) need
    `MIN_SEEDS_SPLIT` seeds too. The per-seed bootstrap p-values are
    Holm-adjusted over every per-seed test of the cells first.

    Returns:
        `[{"paper", "claim", "measurement", "numbers", "verdict"}]` in the
        order of `claims` (plus ``"provisional"`` or ``"at_cap"`` where a
        verdict was withheld); verdict is `significance.CONFIRMED`,
        `NOT_CONFIRMED`, `INCONCLUSIVE` or `UNTESTED`.
    """
    cells = holm_adjusted_bootstrap(
        [cell for cell in cells if cell.get("status", "ok") == "ok"])
    rows = []
    for paper, claim, check in claims:
        measurement, numbers, verdict, at_cap = _gated(check, cells, data_properties)
        row = {"paper": paper, "claim": claim, "measurement": measurement,
               "numbers": numbers, "verdict": verdict}
        if at_cap is not None:
            row["at_cap"] = at_cap
        rows.append(row)
    _seed_rules(rows)
    return rows


def _withhold(row, provisional, reason):
    """Makes a decided verdict inconclusive; the measurement says what it was and why."""
    row.update(verdict=INCONCLUSIVE, provisional=provisional,
               measurement=f"{row['measurement']} Provisional: {provisional} {reason}.")


def _seed_rules(rows):
    """`MIN_SEEDS`, the seed-level test with Holm over the BLEU claims, and
    `MIN_SEEDS_SPLIT` for the other claims whose seeds split. An untested claim's
    verdict at the cap goes through the same rules (on a stand-in row), so that
    what it says it would be is what the rules would make of it."""
    subjects = []
    for row in rows:
        if row["verdict"] != UNTESTED:
            subjects.append(row)
        else:
            row["_shadow"] = {"verdict": row["at_cap"], "numbers": row["numbers"],
                              "measurement": ""}
            subjects.append(row["_shadow"])
    tested = []
    for row in subjects:
        seeds = seeds_measured(row["numbers"])
        final, provisional = verdict_on_seeds(row["verdict"], seeds)
        if provisional is not None:
            _withhold(row, provisional, f"on {seeds} of the {MIN_SEEDS} seeds a verdict "
                                        f"needs")
            continue
        if "seed_test" in row["numbers"]:
            tested.append(row)
            continue
        outcomes = row["numbers"].get("outcomes")
        wanted = {CONFIRMED: True, NOT_CONFIRMED: False}.get(row["verdict"])
        if (outcomes and wanted is not None and any(o is not wanted for o in outcomes)
                and len(outcomes) < MIN_SEEDS_SPLIT):
            _withhold(row, row["verdict"], f"on {len(outcomes)} split seeds; a verdict on "
                                           f"split seeds needs {MIN_SEEDS_SPLIT}")
    gated = holm_gate([{**row["numbers"]["seed_test"], "verdict": row["verdict"],
                        "seeds": seeds_measured(row["numbers"])} for row in tested])
    for row, result in zip(tested, gated):
        row["numbers"]["seed_test"] = {**row["numbers"]["seed_test"],
                                       "p_holm": result["seed_p_holm"]}
        if result["reason"]:
            _withhold(row, result["provisional"], f"withheld: {result['reason']}")
    for row in rows:
        shadow = row.pop("_shadow", None)
        if shadow is not None:
            row["at_cap"] = shadow["verdict"]
            if shadow.get("provisional"):
                row["at_cap_provisional"] = shadow["provisional"]
                row["measurement"] += shadow["measurement"]


def shown_verdict(row):
    """The verdict as the table shows it: an untested claim says what its cells at
    the cap would give."""
    if row["verdict"] != UNTESTED or "at_cap" not in row:
        return row["verdict"]
    provisional = row.get("at_cap_provisional")
    at_cap = row["at_cap"] + (f", provisional: {provisional}" if provisional else "")
    return f"{row['verdict']} (at the cap: {at_cap})"


def verdict_on_seeds(verdict, seeds):
    """`(verdict, provisional)`: a decided verdict from fewer than `MIN_SEEDS` seeds
    becomes inconclusive, the decided one kept as provisional (else None). `seeds`
    None: the count is unknown, the verdict stands."""
    if seeds is None or seeds >= MIN_SEEDS or verdict in (INCONCLUSIVE, UNTESTED):
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
        [[str(value).replace("|", "\\|").replace("\n", " ")
          for value in (row["paper"], row["claim"], row["measurement"], shown_verdict(row))]
         for row in verdicts])

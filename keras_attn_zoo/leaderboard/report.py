"""The leaderboard's report, written from its cell files alone.

The paired tests against the Transformer of the same seed are added to the cells
that lack them (sacreBLEU's paired bootstrap; for GMM also on the longest tenth
of the test split), then the table, the claims' verdicts and the plots
(`evaluation.leaderboard`) are written to `leaderboard.md` / `.json` in the
results directory, and on request into a markdown page between its markers
(docs/leaderboard.md).
"""

import json
import os
import pathlib

from keras_attn_zoo.leaderboard.cells import load_cells
from keras_attn_zoo.leaderboard.cells import read_hypotheses
from keras_attn_zoo.leaderboard.cells import references_digest
from keras_attn_zoo.leaderboard.cells import store_cell
from keras_attn_zoo.leaderboard.timing import load_speed_records

# The models whose claims read BLEU on the longest sentences (GMM, Figure 7).
LONGEST_DECILE_MODELS = ("GMM",)


def test_pairs_of(board, cell):
    """The test `(source, reference)` pairs of a cell's run, as the cell translated them."""
    from keras_attn_zoo.workflow import load_corpus

    test = load_corpus(board.config_of(cell["model"], cell["seed"])).test
    return list(test[:cell.get("test_pairs", len(test))])


def _comparable(cells, models=None, entry="versus_transformer"):
    """`(cell, baseline)` of the cells (of `models`; None: all but the baseline) that
    lack `entry` and share their test references with the Transformer of their seed."""
    from keras_attn_zoo.evaluation.claims.engine import BASELINE

    baselines = {c["seed"]: c for c in cells if c["model"] == BASELINE}
    for cell in cells:
        baseline = baselines.get(cell["seed"])
        if (cell["model"] == BASELINE or (models is not None and cell["model"] not in models)
                or baseline is None or entry in cell
                or cell.get("test_references") != baseline.get("test_references")):
            continue
        yield cell, baseline


def add_paired_tests(board, cells, references=None):
    """Adds `versus_transformer` (paired bootstrap, same seed) to the cells lacking it.

    The references are the test split's, loaded once when a test is due; a cell whose
    references differ from the Transformer's (another test set) is left without.
    """
    from keras_attn_zoo.evaluation.significance import paired_bootstrap

    for cell, baseline in _comparable(cells):
        if references is None:
            references = [t for _, t in test_pairs_of(board, cell)]
        if references_digest(references) != cell["test_references"]:
            continue
        result = paired_bootstrap(read_hypotheses(baseline["_dir"]),
                                  {cell["model"]: read_hypotheses(cell["_dir"])}, references)
        system, base = result[cell["model"]], result["baseline"]
        cell["versus_transformer"] = {
            "bleu_difference": round(system["bleu"] - base["bleu"], 2),
            "bleu_p_value": system["bleu_p_value"],
            "chrf_difference": round(system["chrf"] - base["chrf"], 2),
            "chrf_p_value": system["chrf_p_value"],
            "method": "sacreBLEU paired bootstrap, 1000 resamples, seed 12345"}
        store_cell(cell)
    return references


def add_longest_decile(board, cells, pairs=None):
    """Adds `longest_decile_versus_transformer` to the cells of
    `LONGEST_DECILE_MODELS` lacking it: BLEU of the cell and the Transformer of the
    same seed on the longest tenth of the test split by source words
    (`significance.longest_share`), with the signed paired bootstrap each way
    (`significance.subset_comparison`). Returns the test pairs (loaded once)."""
    from keras_attn_zoo.evaluation.significance import longest_share
    from keras_attn_zoo.evaluation.significance import subset_comparison

    for cell, baseline in _comparable(cells, LONGEST_DECILE_MODELS,
                                      "longest_decile_versus_transformer"):
        pairs = test_pairs_of(board, cell) if pairs is None else pairs
        references = [t for _, t in pairs]
        if references_digest(references) != cell["test_references"]:
            continue
        indices, shortest = longest_share([len(s.split()) for s, _ in pairs])
        cell["longest_decile_versus_transformer"] = {
            **subset_comparison(read_hypotheses(baseline["_dir"]),
                                read_hypotheses(cell["_dir"]), references, indices),
            "min_source_words": shortest,
            "method": "longest tenth of the test split by source words; Koehn's signed "
                      "paired bootstrap, 1000 resamples, seed 12345"}
        store_cell(cell)
    return pairs


def shown_path(board, path):
    """`path` as the report names it: relative to the repository when it lies inside."""
    if board.repo is not None:
        try:
            return pathlib.Path(path).resolve().relative_to(board.repo)
        except ValueError:
            pass
    return pathlib.Path(path)


def data_properties(board, cells):
    """What the claims read besides the cells: the seeds' decoding timings
    (`timing.time_seeds`' files) and the ε share of the data
    (`board.epsilon_share_file`, when the cells trained on its data and vocabulary
    size)."""
    properties = {"speed": load_speed_records(board.results_dir)}
    eager = [c for c in cells if c["model"] == "eager"]
    share_file = board.epsilon_share_file
    if eager and share_file is not None and share_file.exists():
        record = json.loads(share_file.read_text(encoding="utf-8"))
        config = eager[0].get("config") or {}
        if (config.get("data") == record["data"].split(":")[0]
                and config.get("vocab_size") == record["vocab_size"]):
            properties["epsilon_share"] = {
                **record, "source": shown_path(board, share_file).as_posix()}
    return properties


def write_report(board, cells=None):
    """leaderboard.md / .json and the plots in the results directory, from the cell
    files (`cells`: those already loaded). Returns the parts of the markdown
    section: `(rows, verdicts, forms, runs, settings, machines, files)`."""
    from keras_attn_zoo.evaluation import claims
    from keras_attn_zoo.evaluation.claims.weighted import forms_table
    from keras_attn_zoo.evaluation.leaderboard import aggregate
    from keras_attn_zoo.evaluation.leaderboard import budget_evidence
    from keras_attn_zoo.evaluation.leaderboard import cell_runs
    from keras_attn_zoo.evaluation.leaderboard import machines_of
    from keras_attn_zoo.evaluation.leaderboard import probe_images
    from keras_attn_zoo.evaluation.leaderboard import section_markdown
    from keras_attn_zoo.evaluation.leaderboard import settings_of
    from keras_attn_zoo.evaluation.leaderboard import write_plots
    from keras_attn_zoo.leaderboard.cells import write_json
    from keras_attn_zoo.models import LEADERBOARD_MODELS
    from keras_attn_zoo.files import write_atomically

    cells = load_cells(board.results_dir) if cells is None else cells
    if not cells:
        raise SystemExit(f"no finished cell in {board.results_dir}.")
    add_paired_tests(board, cells)
    add_longest_decile(board, cells)
    properties = data_properties(board, cells)
    order = [m for m in LEADERBOARD_MODELS if any(c["model"] == m for c in cells)]
    rows = aggregate(cells, order, properties["speed"])
    stored = [{k: v for k, v in c.items() if k != "_dir"} for c in cells]
    verdicts = claims.claim_verdicts(stored, properties)
    forms = forms_table(stored)
    runs = cell_runs(stored, LEADERBOARD_MODELS)
    files = write_plots(board.results_dir, cells, rows)
    settings, machines = settings_of(cells), machines_of(cells)
    settings["budget_evidence"] = budget_evidence(stored)
    files.update(probe_images(cells))
    text = section_markdown(rows, verdicts, forms, runs, settings, machines, files,
                            shown_path(board, board.results_dir), pathlib.Path("."))
    write_json(board.results_dir / "leaderboard.json",
               {"settings": settings, "machines": machines, "rows": rows,
                "verdicts": verdicts, "weighted_forms": forms, "cell_runs": runs,
                "files": files})
    write_atomically(board.results_dir / "leaderboard.md", "# Leaderboard\n\n" + text)
    return rows, verdicts, forms, runs, settings, machines, files


def rewrite_page(board, page, parts):
    """Rewrites a markdown page (docs/leaderboard.md) between the generated section's
    markers with the report's section (`parts`: what `write_report` returned), its
    images linked relative to the page."""
    from keras_attn_zoo.evaluation.leaderboard import replace_section
    from keras_attn_zoo.evaluation.leaderboard import section_markdown
    from keras_attn_zoo.files import write_atomically

    page = pathlib.Path(page).resolve()
    images = pathlib.Path(os.path.relpath(board.results_dir.resolve(), page.parent))
    text = section_markdown(*parts, shown_path(board, board.results_dir), images)
    try:
        updated = replace_section(page.read_text(encoding="utf-8"), text, page)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    write_atomically(page, updated)

"""Each seed paper's claims, measured on the leaderboard's trained models, with a verdict.

Two parts, and one module per paper:

* `probe_model(model, tokenizer, pairs, out_dir, ...)`: the measurements that
  need ONE trained model (its attention, its branch weights, its RAN
  matrices), as a JSON-serialisable dict the leaderboard stores in the cell's
  ``"probes"``. Only what applies to the model is measured; the rest is
  absent, and ``"unavailable"`` says why where a reader would expect it.
* `claim_verdicts(cells)`: one row per paper claim from the leaderboard's cell
  dicts (one per model and seed), each with what was measured, the raw
  numbers and a verdict (`significance.CONFIRMED`, `NOT_CONFIRMED` or
  `INCONCLUSIVE`); `verdicts_markdown(rows)` prints them as a table.

Model keys: a cell's ``"model"`` is its `models.LEADERBOARD_MODELS` name
(transformer, RAN-E, RAN-D, RAN-ALL, GMM, weighted, HC-SA, Syn-R, RNNsearch,
eager, and the Weighted Transformer's forms weighted-gain, ...; the paper's
claims read "weighted", `weighted.forms_table` compares the forms); the RAN
variants are one builder, `ran_transformer`, with ``apply_to="encoder" |
"decoder" | "all"``.

How verdicts are reached (`engine.claim_verdicts` applies them in this order):

* The convergence gate: a claim about trained models is decided on the cells
  that converged (early stopping on the valid split, ``"stop_reason":
  "converged"``); where too few did and its cells (or the Transformer's it
  is compared with) stopped at a cap or trained for fixed steps, it is
  `significance.UNTESTED`, "untested: not converged", with the verdict at the
  cap (``"at_cap"``) kept beside it. The ε share, a property of the data,
  is exempt (`engine.data_property`).
* BLEU against the Transformer: the cell's ``"versus_transformer"`` (same
  seed, sacreBLEU's paired bootstrap), its p-values Holm-adjusted over every
  per-seed test of the table, through `significance.paired_seed_verdict`
  (majority of significant seeds) and `significance.holm_gate` (the one-sided
  paired t-test over seeds, Holm-adjusted over the claims table).
* Speed ratios: `significance.ratio_verdict`, from the seeds' joint timings
  (`--time-seeds`) where they exist.
* Measures without a bootstrap (entropy, gates, κ/α against its null, AER,
  the RAN patterns, steps to a BLEU, the longest tenth's BLEU): each seed
  counts for the claim, against it or neither (a dead band around "no
  difference", given per claim in its paper's module), and
  `majority_verdict` decides: confirmed when most seeds are for, not
  confirmed when most are against, else inconclusive.
* A claim whose cells or fields are missing: inconclusive, with the
  measurement "not measured: <what is missing>".
* Seeds: a claim measured on fewer than `MIN_SEEDS` (3) seeds (the RAN
  patterns, pooled over the three RAN models, count their distinct seeds
  too), or one whose seeds split (not every seed counted its way) on fewer
  than `significance.MIN_SEEDS_SPLIT` (5): inconclusive, the verdict those
  seeds would give kept as provisional (``"provisional"`` in the row and a
  sentence in the measurement).

Thresholds and where they come from: in each paper's module (`ran`, `gmm`,
`weighted`, `bahdanau`, `eager`; `checks.AER_MARGIN` for the alignment
claims), beside the claims that use them; `papers.PAPERS` lists the papers.
`engine` holds the verdict rules, `probes` the measurements of one model
(each paper's `probe` adds its own).
"""

from keras_attn_zoo.evaluation.claims import engine
from keras_attn_zoo.evaluation.claims.engine import MIN_SEEDS
from keras_attn_zoo.evaluation.claims.engine import NotMeasured
from keras_attn_zoo.evaluation.claims.engine import majority_verdict
from keras_attn_zoo.evaluation.claims.engine import verdict_on_seeds
from keras_attn_zoo.evaluation.claims.engine import verdicts_markdown
from keras_attn_zoo.evaluation.claims.papers import PAPERS
from keras_attn_zoo.evaluation.claims.probes import align_test_with_eflomal
from keras_attn_zoo.evaluation.claims.probes import probe_model

# Every claim, in the table's order: paper by paper (`papers.PAPERS`).
CLAIMS = [claim for paper in PAPERS for claim in paper.CLAIMS]


def claim_verdicts(cells, data_properties=None):
    """One verdict per paper claim of `CLAIMS` from the leaderboard's cells
    (`engine.claim_verdicts`)."""
    return engine.claim_verdicts(cells, CLAIMS, data_properties)


__all__ = ["CLAIMS", "MIN_SEEDS", "NotMeasured", "align_test_with_eflomal",
           "claim_verdicts", "majority_verdict", "probe_model", "verdict_on_seeds",
           "verdicts_markdown"]

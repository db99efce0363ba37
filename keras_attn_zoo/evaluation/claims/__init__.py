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

Model keys: a cell's ``"model"`` is its `models.MODEL_VARIANTS` name
(transformer, RAN-E, RAN-D, RAN-ALL, GMM, weighted, HC-SA, Syn-R, RNNsearch,
eager); the RAN variants are one builder, `ran_transformer`, with
``apply_to="encoder" | "decoder" | "all"``.

How verdicts are reached:

* BLEU against the Transformer: the cell's ``"versus_transformer"`` (same
  seed, sacreBLEU's paired bootstrap) through `significance.compare_verdict`,
  a majority of significant seeds.
* Speed ratios: `significance.ratio_verdict`.
* Measures without a bootstrap (entropy, gates, κ/α, AER, the RAN patterns,
  steps to a BLEU): each seed counts for the claim, against it or neither
  (a dead band around "no difference", given per claim in its paper's module), and
  `majority_verdict` decides like `compare_verdict` does: confirmed when most
  seeds are for, not confirmed when most are against, else inconclusive.
* A claim whose cells or fields are missing: inconclusive, with the
  measurement "not measured: <what is missing>".
* A claim measured on fewer than `MIN_SEEDS` (3) seeds (the RAN patterns, pooled
  over the three RAN models, count their distinct seeds too): inconclusive; the verdict those
  seeds would give is kept as provisional (``"provisional"`` in the row and a
  sentence in the measurement), so a partly filled table says where it is
  heading without deciding on one lucky seed.

Thresholds and where they come from: in each paper's module (`ran`, `gmm`,
`weighted`, `bahdanau`, `eager`; `checks.AER_MARGIN` for the alignment
claims), beside the claims that use them. `engine` holds the verdict rules,
`probes` the measurements of one model.
"""

from keras_attn_zoo.evaluation.claims import bahdanau
from keras_attn_zoo.evaluation.claims import eager
from keras_attn_zoo.evaluation.claims import engine
from keras_attn_zoo.evaluation.claims import gmm
from keras_attn_zoo.evaluation.claims import ran
from keras_attn_zoo.evaluation.claims import weighted
from keras_attn_zoo.evaluation.claims.engine import MIN_SEEDS
from keras_attn_zoo.evaluation.claims.engine import NotMeasured
from keras_attn_zoo.evaluation.claims.engine import majority_verdict
from keras_attn_zoo.evaluation.claims.engine import verdict_on_seeds
from keras_attn_zoo.evaluation.claims.engine import verdicts_markdown
from keras_attn_zoo.evaluation.claims.probes import align_test_with_eflomal
from keras_attn_zoo.evaluation.claims.probes import probe_model
from keras_attn_zoo.evaluation.claims.ran import attention_pattern
from keras_attn_zoo.evaluation.claims.weighted import total_variation_from_uniform

# Every claim, in the table's order: paper by paper.
CLAIMS = ran.CLAIMS + gmm.CLAIMS + weighted.CLAIMS + bahdanau.CLAIMS + eager.CLAIMS


def claim_verdicts(cells, data_properties=None):
    """One verdict per paper claim of `CLAIMS` from the leaderboard's cells
    (`engine.claim_verdicts`)."""
    return engine.claim_verdicts(cells, CLAIMS, data_properties)


__all__ = ["CLAIMS", "MIN_SEEDS", "NotMeasured", "align_test_with_eflomal",
           "attention_pattern", "claim_verdicts", "majority_verdict", "probe_model",
           "total_variation_from_uniform", "verdict_on_seeds", "verdicts_markdown"]

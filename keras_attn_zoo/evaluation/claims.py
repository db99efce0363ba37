"""Each seed paper's claims, measured on the leaderboard's trained models, with a verdict.

Two parts:

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
  (a dead band around "no difference", given per claim below), and
  `majority_verdict` decides like `compare_verdict` does: confirmed when most
  seeds are for, not confirmed when most are against, else inconclusive.
* A claim whose cells or fields are missing: inconclusive, with the
  measurement "not measured: <what is missing>".
* A claim measured on fewer than `MIN_SEEDS` (3) seeds (the RAN patterns, pooled
  over the three RAN models, count their distinct seeds too): inconclusive; the verdict those
  seeds would give is kept as provisional (``"provisional"`` in the row and a
  sentence in the measurement), so a partly filled table says where it is
  heading without deciding on one lucky seed.

Thresholds (module constants) and where they come from:

* `COMPETITIVE_MARGIN_BLEU` = 0.5 BLEU, "competitive" (RAN-E, RAN-ALL): the
  RAN paper states no margin; its RAN variants sit within about +-0.5 BLEU of
  the Transformer (average gains +0.13 RAN-E, +0.48 RAN-D, +0.16 RAN-ALL,
  Table 1), so 0.5 BLEU below the Transformer (mean over seeds, no seed
  significantly worse by more) is the widest gap still in that range.
* `RAN_SPEEDUP` = 1.236: "RAN-ALL speedups the decoding by up to 23.6 % with
  a batch size of 100" (RAN paper, Figure 3); `ratio_verdict`'s default 10%
  tolerance, so >= 1.11x is confirmed, <= 1x not.
* RAN patterns (Figure 6: "in the encoder, RAN focuses their attention on a
  local neighborhood around each position"; in the decoder "except attending
  local windows to the current position, the weights ... are most
  concentrated in the first token"): per matrix (layer, head) the mass within
  the band |i - j| <= `RAN_BAND` (2), plus the first key in the decoder,
  normalised per row and averaged over rows, against the same mass of a
  uniform matrix of the same size and mask. `lift = (mass - uniform) / (1 -
  uniform)` (0: uniform, 1: all mass on the pattern); a matrix looks like the
  paper's when `lift >= RAN_PATTERN_LIFT` (0.25, a quarter of the mass that
  uniform attention spreads outside the pattern pulled onto it: a choice of
  ours, the paper shows figures only), a model when most matrices of every
  RAN stack do.
* GMM entropy (Table 6: 1.86 nats total against 2.67 for the baseline, -30%):
  a seed is for when the fused cross-attention entropy is at least
  `ENTROPY_MIN_REDUCTION` (5%) below the same-seed Transformer's, against when
  it is not below at all.
* GMM long sentences (Figure 7: +1.36, +1.06 and +4.14 BLEU on (30,40],
  (40,50] and >50 source words): the longest bucket with sentences; a seed
  is for at >= +`LONG_BUCKET_MARGIN_BLEU` (0.5), against at <= -0.5; a bucket
  of fewer than `LONG_BUCKET_MIN_SENTENCES` (20) sentences decides nothing.
* GMM gate (Figure 5). The issue's "lower layers lean on the Gaussian part"
  is the opposite of the paper, which says "the bottom layers (L1, L2) in the
  decoder emphasize on dot-product attention ..., the middle layers (L3, L4)
  emphasize on Gaussian mixture attention", which "occupies a larger
  proportion in higher layers". In `GaussianMixtureCrossAttention`
  `gamma = (1 - g) alpha + g beta`: g is the Gaussian mixture's share. The
  claim checked is the paper's: a seed is for when the lowest decoder layer's
  mean gate is below 0.5 AND below the mean of the layers above; against when
  neither holds.
* Weighted Transformer, "converges 15-40% faster": on the dev curves (BLEU
  against steps, both models, same seed) the steps at which each first
  reaches the Transformer's best dev BLEU (linear interpolation between
  evaluations). A seed is for when the Weighted Transformer needs at most
  `FASTER_STEPS_RATIO` (0.85, the paper's lower end, 15% fewer) of the
  Transformer's steps; against when it needs as many or more, or never gets
  there.
* κ and α away from uniform: total-variation distance from uniform,
  `0.5 * sum |w_i - 1/M|` (0 to `1 - 1/M`), averaged over the branched
  layers. A seed is for when both κ's and α's are >= `BRANCH_TV_THRESHOLD`
  (0.05: e.g. 0.30/0.25/0.25/0.20 at M = 4), against when both are below.
  The paper (Figure 3) shows the weights moving apart without a number.
* RNNsearch alignment: the seed study only shows heat maps ("the introduced
  Attention mechanism is able to learn the alignment"). AER of the argmax
  attention links (words) against eflomal's links on the test sentences,
  compared with a trivial monotone alignment of the same sentences (target
  word j to source word floor(j S / T)): a seed is for when the attention's
  AER is at least `AER_MARGIN` (0.05) lower than the monotone one, against
  when it is not lower at all.
* GMM alignment (Table 7: AER 48.21 against 53.79): the same attention AER,
  penultimate layer, heads averaged, as in the paper; for at >= `AER_MARGIN`
  below the Transformer's, against when not below.
* Eager BLEU gap: the paper's Table 2 gives 22.59 against 23.01 on DE->EN
  (1.8% below) and 17.97 against 18.89 on EN->DE (4.9% below); its text says
  "at most 4.8% worse" on "the harder DE -> EN and EN -> DE tasks", so the
  issue's "at most 4.8% below on De-En" is the bound of the German pair, not
  of DE->EN alone. `EAGER_MAX_GAP` = 0.048 is used; a seed is for when the
  eager model's BLEU is at most 4.8% below the reference's. The paper's
  reference model is an OpenNMT RNNsearch (2 + 2 LSTM layers, "a similar
  number of parameters"), so the zoo's `bahdanau_rnn` is the paper's
  comparison; the Transformer (the issue's) is given as a second row.
* Eager speed: "approximately three times the amount of source tokens per
  second as the OpenNMT reference model": `ratio_verdict(ratios, 3.0,
  tolerance=EAGER_SPEED_TOLERANCE)` (0.2: >= 2.4x confirmed), source tokens
  per second at the leaderboard's decoding batch, against RNNsearch and the
  Transformer.
* ε share (Table 1: 23%, 14%, 23%, 20% for FR->EN, EN->FR, DE->EN, EN->DE,
  start pads and length-equalising ε not counted, as
  `epsilon_statistics` counts): confirmed inside `EPSILON_SHARE_RANGE` (14% to
  23%), not confirmed outside. The share depends on the start pads (each
  one lets every link move a step later without ε): on Ding 3.93% with 5,
  17.9% with 0 (issue 32). Table 1 does not say with how many pads it
  counted (its caption leaves "initial padding tokens" out of the count; the
  seed's add_epsilon.py inserts 3), so the verdict is read at the cell's
  start pads and the measurement also gives the share at 0, 3 and 5 pads
  where the cell has them (`epsilon_share_by_start_pads`). It is a property of the data and the aligner,
  the same for every seed. The row also counts the seeds trained the paper's
  way (`config.aligned_batching`: one aligned stream, state carried).
* HC-SA, Syn-R: the RAN paper reports that both "significantly decrease the
  performance over TransF"; the claim "below the Transformer in BLEU" goes
  through `compare_verdict` with the Transformer as the system.
"""

import math
import pathlib

import numpy as np

from keras_attn_zoo.evaluation import analysis
from keras_attn_zoo.evaluation import report
from keras_attn_zoo.evaluation.significance import ALPHA
from keras_attn_zoo.evaluation.significance import CONFIRMED
from keras_attn_zoo.evaluation.significance import INCONCLUSIVE
from keras_attn_zoo.evaluation.significance import NOT_CONFIRMED
from keras_attn_zoo.evaluation.significance import compare_verdict
from keras_attn_zoo.evaluation.significance import mean_and_std
from keras_attn_zoo.evaluation.significance import ratio_verdict

# The leaderboard's model keys -> their names in `models.MODEL_VARIANTS` (builder and
# options: the RAN variants are `ran_transformer` with apply_to encoder/decoder/all).
BASELINE = "transformer"
RAN_KEYS = ("RAN-E", "RAN-D", "RAN-ALL")

MIN_SEEDS = 3
COMPETITIVE_MARGIN_BLEU = 0.5
RAN_SPEEDUP = 1.236
RAN_BAND = 2
RAN_PATTERN_LIFT = 0.25
ENTROPY_MIN_REDUCTION = 0.05
LONG_BUCKET_MARGIN_BLEU = 0.5
LONG_BUCKET_MIN_SENTENCES = 20
GATE_MIDPOINT = 0.5
FASTER_STEPS_RATIO = 0.85
BRANCH_TV_THRESHOLD = 0.05
AER_MARGIN = 0.05
EAGER_MAX_GAP = 0.048
EAGER_SPEEDUP = 3.0
EAGER_SPEED_TOLERANCE = 0.2
EPSILON_SHARE_RANGE = (0.14, 0.23)
HEATMAP_EXAMPLES = 3

RAN_PAPER = "RAN (Zeng et al., 2021)"
GMM_PAPER = "GMM cross-attention (Zhang & Feng, 2021)"
WEIGHTED_PAPER = "Weighted Transformer (Ahmed et al., 2017)"
BAHDANAU_PAPER = "RNNsearch (Bahdanau et al., 2015; seed study)"
EAGER_PAPER = "Eager translation (Press & Smith, 2018)"
HC_SA_PAPER = "HC-SA (You et al., 2020), in the RAN paper"
SYN_R_PAPER = "Syn-R (Tay et al., 2020), in the RAN paper"


# ---- probes of one trained model ------------------------------------------------------


def total_variation_from_uniform(weights):
    """`0.5 * sum_i |w_i - 1/M|`: 0 for uniform weights, `1 - 1/M` for one-hot."""
    weights = np.asarray(weights, dtype=np.float64)
    return float(0.5 * np.abs(weights - 1.0 / weights.size).sum())


def attention_pattern(weights, causal=False, band=RAN_BAND):
    """How local one `[n, n]` attention matrix is, against a uniform one.

    Each row is renormalised; every mass is the row's share summed over the
    cells named, averaged over rows: ``diagonal`` (j = i), ``band``
    (|i - j| <= `band`), ``first_token`` (j = 0) and ``pattern`` (the
    paper's Figure 6 pattern: the band in the encoder, band or first key in
    the (causal) decoder). ``uniform_*`` are the same for a uniform matrix of
    the same size and mask (causal: row i spreads over keys 0..i), and
    ``lift = (pattern - uniform_pattern) / (1 - uniform_pattern)``.

    Returns:
        A dict of floats plus ``looks_like_paper`` (`lift >= RAN_PATTERN_LIFT`).
    """
    weights = np.asarray(weights, dtype=np.float64)
    size = weights.shape[0]
    if weights.ndim != 2 or weights.shape[1] != size:
        raise ValueError(f"attention_pattern needs a square matrix, got {weights.shape}.")
    mask = np.tril(np.ones((size, size))) if causal else np.ones((size, size))
    weights = np.where(mask > 0, np.clip(np.nan_to_num(weights), 0.0, None), 0.0)
    totals = weights.sum(axis=-1, keepdims=True)
    weights = np.divide(weights, totals, out=np.zeros_like(weights), where=totals > 0)
    uniform = mask / mask.sum(axis=-1, keepdims=True)
    rows, columns = np.indices((size, size))
    cells = {"diagonal": rows == columns, "band": np.abs(rows - columns) <= band,
             "first_token": columns == 0}
    cells["pattern"] = cells["band"] | cells["first_token"] if causal else cells["band"]
    result = {"size": size, "causal": bool(causal)}
    for name, where in cells.items():
        result[name] = float((weights * where).sum(axis=-1).mean())
        result[f"uniform_{name}"] = float((uniform * where).sum(axis=-1).mean())
    base = result["uniform_pattern"]
    result["lift"] = (result["pattern"] - base) / (1.0 - base) if base < 1.0 else 0.0
    result["looks_like_paper"] = bool(result["lift"] >= RAN_PATTERN_LIFT)
    return result


def align_test_with_eflomal(train_pairs, test_pairs, cache_dir):
    """eflomal links of the test pairs, aligned together with the training pairs.

    eflomal is unsupervised: aligning the test sentences alone would give it
    too little statistics, so train and test are aligned in one run (cached
    by `models.eager.preprocessing.align_with_eflomal`) and the test pairs'
    links returned. Words are the whitespace-split words of the texts (what
    `analysis` and `report.alignment_quality` expect); the links are the
    forward (source -> target) model's, one source word per target word at
    most, like the attention's argmax links.

    Returns:
        One list of `(source word, target word)` links per test pair.
    """
    from keras_attn_zoo.models.eager.preprocessing import align_with_eflomal

    train_pairs, test_pairs = list(train_pairs), list(test_pairs)
    links = align_with_eflomal(train_pairs + test_pairs, cache_dir)
    return links[len(train_pairs):]


def _gold(item, pair):
    """An `Alignment` from a Pharaoh line, an `Alignment` or `(i, j)` links."""
    from keras_attn_zoo.data.alignments import Alignment
    from keras_attn_zoo.data.alignments import check_links
    from keras_attn_zoo.data.alignments import parse_pharaoh_line

    source, target = (len(text.split()) for text in pair)
    if isinstance(item, Alignment):
        return item
    if isinstance(item, str):
        return parse_pharaoh_line(item, source, target)
    links = [(int(i), int(j)) for i, j in item]
    check_links(links, source, target)
    return Alignment(links, set(links), set(links))


def _gate_per_layer(model, pairs, make_batch, batch_size):
    """Mean GMM gate g (the Gaussian mixture's share) per decoder layer, real rows only."""
    from keras_attn_zoo.evaluation.attention import attention_maps

    sums = counts = None
    for start in range(0, len(pairs), batch_size):
        source, target, _, target_pieces = make_batch(pairs[start:start + batch_size])
        gate = attention_maps(model, source, target)["gmm_gate"]  # [L, B, h, T]
        if sums is None:
            sums, counts = np.zeros(gate.shape[0]), 0
        for row, pieces in enumerate(target_pieces):
            values = gate[:, row, :, :len(pieces)].astype(np.float64)
            sums += values.reshape(values.shape[0], -1).sum(axis=1)
            counts += values[0].size
    return report.round_nested(sums / max(counts, 1))


def _branch_weights(model):
    from keras_attn_zoo.models.weighted_transformer import weighted_branch_weights

    rows = []
    for name, weights in weighted_branch_weights(model).items():
        rows.append({"layer": name, "kappa": weights["kappa"], "alpha": weights["alpha"],
                     "kappa_tv_from_uniform": total_variation_from_uniform(weights["kappa"]),
                     "alpha_tv_from_uniform": total_variation_from_uniform(weights["alpha"])})
    return rows


def _ran_patterns(model, stats, out_dir, files):
    """Pattern numbers of every RAN matrix and one grid of heat maps per slot."""
    from keras_attn_zoo.evaluation.attention import ran_matrices
    from keras_attn_zoo.evaluation.plots import plot_attention_grid

    # The size a typical probed sentence sees: the median source (+EOS) and
    # decoder (BOS + pieces) lengths, the larger of the two.
    source = np.median([len(pieces[0]) for pieces in stats["pieces"]])
    target = np.median([len(pieces[1]) + 1 for pieces in stats["pieces"]])
    size = max(int(round(max(source, target))), 2)
    matrices = ran_matrices(model, size)
    entries, summary = [], {}
    for slot, weights in matrices.items():  # [L, h, n, n]
        causal = slot == "decoder_self"
        looks = []
        for layer in range(weights.shape[0]):
            for head in range(weights.shape[1]):
                numbers = attention_pattern(weights[layer, head], causal=causal)
                entries.append({"slot": slot, "layer": layer, "head": head,
                                **{k: (round(v, 4) if isinstance(v, float) else v)
                                   for k, v in numbers.items()}})
                looks.append(numbers["looks_like_paper"])
        name = f"ran/{slot}.png"
        plot_attention_grid(weights, out_dir / name,
                            title=f"RAN {slot}: learned matrices at {weights.shape[-1]} "
                                  "tokens (rows layers, columns heads)")
        files.append(name)
        summary[slot] = {"matrices": len(looks),
                         "share_like_paper": round(float(np.mean(looks)), 4)}
    return {"size": size, "band": RAN_BAND, "lift_threshold": RAN_PATTERN_LIFT,
            "matrices": entries, "per_slot": summary}


def _alignment(stats, pairs, links, layer):
    """`report.alignment_quality` plus the AER of a monotone alignment of the same sentences."""
    from keras_attn_zoo.models.eager.preprocessing import monotone_links

    gold = [_gold(item, pair) for item, pair in zip(links, pairs)]
    quality = report.alignment_quality(stats, pairs, gold, layer)
    skipped = {number - 1 for number in quality["skipped_lines"]}
    kept = [k for k in range(len(pairs)) if k not in skipped]
    if kept:
        diagonal = [set(monotone_links(len(pairs[k][0].split()), len(pairs[k][1].split())))
                    for k in kept]
        scores = analysis.alignment_scores(diagonal, [gold[k] for k in kept])
        quality["monotone_aer"] = None if math.isnan(scores["aer"]) else round(scores["aer"], 4)
    return quality


def probe_model(model, tokenizer, pairs, out_dir, *, model_name, make_batch,
                max_pairs=200, source_links=None, batch_size=32):
    """What the claims need from one trained model, as a JSON-serialisable dict.

    Teacher forced on the references of the first `max_pairs` test pairs
    (those the model accepts; `report.fitting_pairs`), padding excluded.

    Args:
        model: a trained zoo model.
        tokenizer: its SentencePiece tokenizer (or a processor or `.model` path).
        pairs: `(source, reference)` test texts.
        out_dir: where the images go (created); paths in ``"files"`` are
            relative to it.
        model_name: the leaderboard's key, recorded in the result.
        make_batch: `pairs -> (source_ids, target_ids, source_pieces,
            target_pieces)`, i.e. `functools.partial(
            training.callbacks.teacher_forcing_batch, processor)` (passed in
            because evaluation ranks below training).
        max_pairs: how many pairs to probe.
        source_links: eflomal's (or any) word links of `pairs`, one entry per
            pair: a Pharaoh line, an `Alignment` or a list of `(i, j)`
            (`align_test_with_eflomal`); None: no AER.
        batch_size: sentences per teacher-forced pass.

    Returns:
        ``{"model", "pairs_probed", "pairs_skipped_too_long", "files",
        "unavailable"}`` and, where they apply:

        * every attention model: ``"cross_attention_entropy"`` (nats, per
          decoder layer, heads and real rows averaged; the fused weights for
          GMM), ``"cross_attention_entropy_mean"``,
          ``"cross_attention_entropy_by_length"`` (source words: <= 20,
          21-40, > 40, the GMM paper's Table 6), ``"entropy_per_layer"``
          (every slot: encoder/decoder self, GMM's dot-product and mixture
          parts);
        * with `source_links`: ``"aer"`` (`report.alignment_quality` of the
          penultimate decoder layer, the last for one layer, heads averaged,
          plus ``"monotone_aer"``, the AER of a monotone alignment of the same
          sentences);
        * GMM: ``"gmm_gate_per_layer"``, the mean gate g per decoder layer,
          g being the Gaussian mixture's weight (`gamma = (1 - g) alpha + g
          beta`); None for a layer without a mixture;
        * Weighted Transformer: ``"branch_weights"``, per branched layer κ, α
          and their total-variation distances from uniform;
        * RAN: ``"ran_matrix_patterns"`` (`attention_pattern` of every layer
          and head of each RAN stack at the probed sentences' median length,
          and per slot the share of matrices that look like the paper's) and
          one grid of heat maps per slot, ``ran/<slot>.png`` (rows layers,
          columns heads);
        * RNNsearch: heat maps of its attention on the first three pairs under
          ``heatmaps/``.
    """
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.evaluation.attention import has_attention
    from keras_attn_zoo.evaluation.plots import plot_alignment
    from keras_attn_zoo.models.bahdanau_rnn import BahdanauRNN

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = list(pairs)[:max_pairs]
    links = None if source_links is None else list(source_links)[:max_pairs]
    if links is not None and len(links) != len(pairs):
        raise ValueError(f"{len(links)} source links for {len(pairs)} pairs: give one "
                         "alignment per pair.")
    files, unavailable = [], {}
    result = {"model": model_name, "pairs_probed": 0, "pairs_skipped_too_long": 0,
              "files": files, "unavailable": unavailable}
    if not has_attention(model):
        reason = (f"{type(model).__name__} has no attention weights: it reads the source "
                  "and writes the target at the same time.")
        for name in ("cross_attention_entropy", "aer", "heat maps"):
            unavailable[name] = reason
        return result
    processor = sentencepiece_processor(tokenizer)
    limit = model.max_decode_length
    kept = report.fitting_pairs(processor, pairs, limit, limit)
    result["pairs_skipped_too_long"] = len(pairs) - len(kept)
    pairs = [pairs[k] for k in kept]
    links = None if links is None else [links[k] for k in kept]
    result["pairs_probed"] = len(pairs)
    if not pairs:
        unavailable["attention"] = (f"no test pair fits the model's max_length {limit}.")
        return result

    stats = report.attention_statistics(model, pairs, make_batch, batch_size)
    buckets = analysis.length_buckets([len(source.split()) for source, _ in pairs],
                                      analysis.DEFAULT_ENTROPY_BOUNDARIES)
    summary = report.summarise_attention(stats, buckets)
    result["cross_attention_entropy"] = summary["per_layer"]["cross"]
    result["cross_attention_entropy_mean"] = summary["all"]["cross"]
    result["cross_attention_entropy_by_length"] = summary["by_length"]["cross"]
    result["entropy_per_layer"] = summary["per_layer"]
    layers = stats["cross"][0].shape[0]
    alignment_layer = layers - 2 if layers >= 2 else layers - 1

    if links is not None:
        result["aer"] = _alignment(stats, pairs, links, alignment_layer)
    else:
        unavailable["aer"] = ("no source links given (eflomal's links of the test "
                              "sentences: align_test_with_eflomal).")
    if "cross_mixture" in stats["entropy"]:
        result["gmm_gate_per_layer"] = _gate_per_layer(model, pairs, make_batch,
                                                       batch_size)
    branches = _branch_weights(model)
    if branches:
        result["branch_weights"] = branches
    patterns = _ran_patterns(model, stats, out_dir, files)
    if patterns["matrices"]:
        result["ran_matrix_patterns"] = patterns
    if isinstance(model, BahdanauRNN):
        for k in range(min(HEATMAP_EXAMPLES, len(pairs))):
            source_pieces, target_pieces = stats["pieces"][k]
            name = f"heatmaps/sentence_{k}.png"
            plot_alignment(stats["cross"][k][alignment_layer].mean(axis=0), source_pieces,
                           target_pieces, out_dir / name,
                           title="RNNsearch attention, forced to the reference")
            files.append(name)
    return result


# ---- verdicts over seeds ------------------------------------------------------------------


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


def _value(cell, path):
    value = cell
    for key in path.split("."):
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return value


def _name(key):
    return {"transformer": "Transformer", "weighted": "Weighted Transformer"}.get(key, key)


def _spread(values, digits=2, signed=False, unit=""):
    """`"+0.40 ± 0.20 (3 seeds)"`: mean and sample deviation over seeds."""
    mean, std = mean_and_std(values)
    sign = "+" if signed else ""
    text = f"{mean:{sign}.{digits}f}{unit}"
    if std is not None:
        text += f" ± {std:.{digits}f}{unit}"
    count = len(values)
    return f"{text} ({count} seed{'s' if count != 1 else ''})"


def _rounded(values, digits=4):
    return [None if value is None else round(float(value), digits) for value in values]


class _Cells:
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
            raise NotMeasured(f"no finished {_name(model)} cell")
        found = [(seed, cell) for seed, cell in sorted(cells.items())
                 if all(_value(cell, path) is not None for path in paths)]
        if not found:
            raise NotMeasured(f"no {_name(model)} cell has {', '.join(paths)}")
        return found

    def paired(self, model, paths, baseline=BASELINE, baseline_paths=None):
        """`[(seed, cell, baseline cell)]`, seeds paired by number."""
        baseline_paths = paths if baseline_paths is None else baseline_paths
        own = dict(self.seeds(model, *paths))
        other = dict(self.seeds(baseline, *baseline_paths))
        seeds = sorted(set(own) & set(other))
        if not seeds:
            raise NotMeasured(f"no seed with both a {_name(model)} and a "
                              f"{_name(baseline)} cell measuring {', '.join(paths)}")
        return [(seed, own[seed], other[seed]) for seed in seeds]


def _versus(cells, model):
    rows = cells.seeds(model, "versus_transformer.bleu_difference",
                       "versus_transformer.bleu_p_value")
    seeds = [seed for seed, _ in rows]
    differences = [float(_value(c, "versus_transformer.bleu_difference")) for _, c in rows]
    p_values = [float(_value(c, "versus_transformer.bleu_p_value")) for _, c in rows]
    return seeds, differences, p_values


def _bleu_sentence(model, differences, p_values):
    better = sum(d > 0 and p < ALPHA for d, p in zip(differences, p_values))
    worse = sum(d < 0 and p < ALPHA for d, p in zip(differences, p_values))
    return (f"BLEU {_name(model)} minus Transformer (same seed, paired bootstrap): "
            f"{_spread(differences, signed=True)}; significantly better (p < {ALPHA}) on "
            f"{better}, significantly worse on {worse} of {len(differences)} seeds.")


def _bleu_numbers(seeds, differences, p_values):
    return {"seeds": seeds, "bleu_difference": _rounded(differences),
            "bleu_p_value": _rounded(p_values)}


def _at_least_transformer(model):
    def check(cells):
        seeds, differences, p_values = _versus(cells, model)
        return (_bleu_sentence(model, differences, p_values),
                _bleu_numbers(seeds, differences, p_values),
                compare_verdict(differences, p_values))
    return check


def _below_transformer(model):
    def check(cells):
        seeds, differences, p_values = _versus(cells, model)
        # The claim "Transformer > model": the Transformer is the system.
        verdict = compare_verdict([-d for d in differences], p_values)
        return (_bleu_sentence(model, differences, p_values),
                _bleu_numbers(seeds, differences, p_values), verdict)
    return check


def _competitive_with_fewer_parameters(model):
    def check(cells):
        seeds, differences, p_values = _versus(cells, model)
        bleu = compare_verdict(differences, p_values, margin=COMPETITIVE_MARGIN_BLEU)
        paired = cells.paired(model, ["params"])
        own = [int(c["params"]) for _, c, _ in paired]
        base = [int(b["params"]) for _, _, b in paired]
        fewer = all(a < b for a, b in zip(own, base))
        if not fewer or bleu == NOT_CONFIRMED:
            verdict = NOT_CONFIRMED
        else:
            verdict = bleu
        measurement = (_bleu_sentence(model, differences, p_values)
                       + f" Competitive: mean at most {COMPETITIVE_MARGIN_BLEU} BLEU below, "
                       f"no seed significantly worse by more (BLEU verdict: {bleu}). "
                       f"Parameters {own[0]:,} against the Transformer's {base[0]:,} "
                       f"({own[0] / base[0]:.3f}x): {'fewer' if fewer else 'not fewer'}.")
        numbers = {**_bleu_numbers(seeds, differences, p_values), "bleu_verdict": bleu,
                   "params": own, "transformer_params": base,
                   "margin_bleu": COMPETITIVE_MARGIN_BLEU}
        return measurement, numbers, verdict
    return check


def _speed_ratio(model, key, claimed, tolerance, what, reference=BASELINE):
    def check(cells):
        paired = cells.paired(model, [key], baseline=reference)
        # Timed in the cell's process, round by round with the reference (the
        # leaderboard's `decode_versus`): the machine's load cancels out. Else the
        # two cells' own timings, which may have run under different loads.
        same_run = [_value(c, f"decode_versus.{reference}.ratio") for _, c, _ in paired]
        same_process = all(r is not None for r in same_run)
        if same_process:
            ratios, how = [float(r) for r in same_run], "timed in one process, round by round"
        else:
            ratios = [float(c[key]) / float(b[key]) for _, c, b in paired]
            how = "timed in separate cells, whose machine load may differ"
        own = [float(c[key]) for _, c, _ in paired]
        base = [float(b[key]) for _, _, b in paired]
        batch = paired[0][1].get("decode_batch")
        at = f" at batch {batch}" if batch else ""
        measurement = (f"{what} of {_name(model)} / {_name(reference)}{at} (same seed, "
                       f"{how}): {_spread(ratios, unit='x')} ({_name(model)} "
                       f"{_spread(own, 1)}, {_name(reference)} {_spread(base, 1)}); claimed "
                       f"{claimed}x, confirmed from {claimed * (1 - tolerance):.2f}x.")
        # Timed after the cell ran (leaderboard --retime-decoding), maybe against a
        # retrained peer: say how far both models still translate as their cells did.
        retimed = [(s, _value(c, f"decode_versus.{reference}.retimed"))
                   for s, c, _ in paired]
        retimed = [(s, r) for s, r in retimed if r is not None and same_process]
        if retimed:
            measurement += (
                f" Seed {', '.join(str(s) for s, _ in retimed)} timed after its cells "
                f"(leaderboard --retime-decoding); share of the timed batch each model "
                f"translates as its cell did (below 100%: retrained, not the model its "
                f"cell scored): " + "; ".join(
                    f"{_name(model)} {r['agreement_with_cell']:.0%}, {_name(reference)} "
                    f"{r['peer_agreement_with_cell']:.0%}" for _, r in retimed) + ".")
        numbers = {"seeds": [s for s, _, _ in paired], "ratio": _rounded(ratios),
                   "same_process": same_process, "retimed_seeds": [s for s, _ in retimed],
                   key: own, f"{reference}_{key}": base, "claimed": claimed,
                   "tolerance": tolerance}
        return measurement, numbers, ratio_verdict(ratios, claimed, tolerance)
    return check


def _ran_patterns_check(cells):
    rows = []
    for key in RAN_KEYS:
        try:
            rows += [(key, seed, cell) for seed, cell in
                     cells.seeds(key, "probes.ran_matrix_patterns")]
        except NotMeasured:
            continue
    if not rows:
        raise NotMeasured("no RAN cell (RAN-E, RAN-D, RAN-ALL) has "
                          "probes.ran_matrix_patterns")
    outcomes, shares, lifts = [], {}, {}
    for key, seed, cell in rows:
        patterns = cell["probes"]["ran_matrix_patterns"]
        per_slot = patterns["per_slot"]
        outcomes.append(all(s["share_like_paper"] >= 0.5 for s in per_slot.values()))
        for slot, values in per_slot.items():
            shares.setdefault(f"{key}/{slot}", []).append(values["share_like_paper"])
        for entry in patterns["matrices"]:
            lifts.setdefault(f"{key}/{entry['slot']}", []).append(entry["lift"])
    parts = [f"{_name(name.split('/')[0])} {name.split('/')[1]}: mean lift "
             f"{np.mean(lifts[name]):.2f}, share of matrices like the paper "
             f"{_spread(values)}" for name, values in shares.items()]
    measurement = (f"Per RAN matrix (layer, head) the row-averaged mass within "
                   f"|i-j| <= {RAN_BAND} (decoder: or on the first token) against a uniform "
                   f"matrix, lift = (mass - uniform) / (1 - uniform), like the paper's "
                   f"Figure 6 when lift >= {RAN_PATTERN_LIFT}; a model when most matrices of "
                   f"each RAN stack are. " + "; ".join(parts) + f". Models like the paper: "
                   f"{sum(outcomes)} of {len(outcomes)} cells.")
    numbers = {"cells": [{"model": key, "seed": seed, "like_paper": outcome}
                         for (key, seed, _), outcome in zip(rows, outcomes)],
               "share_like_paper": shares,
               "mean_lift": {name: round(float(np.mean(v)), 4) for name, v in lifts.items()}}
    return measurement, numbers, majority_verdict(outcomes)


def _gmm_entropy(cells):
    key = "probes.cross_attention_entropy_mean"
    paired = cells.paired("GMM", [key])
    own = [float(_value(c, key)) for _, c, _ in paired]
    base = [float(_value(b, key)) for _, _, b in paired]
    reductions = [(b - a) / b if b > 0 else 0.0 for a, b in zip(own, base)]
    outcomes = [True if r >= ENTROPY_MIN_REDUCTION else False if r <= 0 else None
                for r in reductions]
    measurement = (f"Mean cross-attention entropy (nats, teacher forced on the test "
                   f"references, all decoder layers): GMM {_spread(own)}, Transformer "
                   f"{_spread(base)}; reduction {_spread([100 * r for r in reductions], 1, unit='%')}"
                   f" (paper, Table 6: 1.86 against 2.67, -30%); a seed counts at >= "
                   f"{100 * ENTROPY_MIN_REDUCTION:.0f}% lower.")
    numbers = {"seeds": [s for s, _, _ in paired], "gmm_entropy": _rounded(own),
               "transformer_entropy": _rounded(base), "reduction": _rounded(reductions)}
    return measurement, numbers, majority_verdict(outcomes)


def _longest_bucket(cell):
    for bucket in reversed(cell["bleu_by_source_length"]):
        if bucket.get("sentences") and bucket.get("bleu") is not None:
            return bucket
    return None


def _gmm_long(cells):
    key = "bleu_by_source_length"
    paired = cells.paired("GMM", [key])
    rows = []
    for seed, cell, base in paired:
        reference = _longest_bucket(base)
        if reference is None:
            continue
        own = next((b for b in cell[key] if b.get("bucket") == reference["bucket"]), None)
        if own is None or own.get("bleu") is None:
            continue
        rows.append((seed, reference["bucket"], int(reference["sentences"]),
                     float(own["bleu"]) - float(reference["bleu"])))
    if not rows:
        raise NotMeasured("no seed with BLEU on the longest source-length bucket for "
                          "both GMM and the Transformer")
    outcomes = []
    for _, _, count, difference in rows:
        if count < LONG_BUCKET_MIN_SENTENCES:
            outcomes.append(None)
        elif difference >= LONG_BUCKET_MARGIN_BLEU:
            outcomes.append(True)
        elif difference <= -LONG_BUCKET_MARGIN_BLEU:
            outcomes.append(False)
        else:
            outcomes.append(None)
    differences = [r[3] for r in rows]
    measurement = (f"BLEU GMM minus Transformer on the longest source-length bucket "
                   f"('{rows[0][1]}' words, {rows[0][2]} sentences): "
                   f"{_spread(differences, signed=True)} (paper, Figure 7: +4.14 above 50 "
                   f"words); a seed counts at +-{LONG_BUCKET_MARGIN_BLEU} BLEU with at least "
                   f"{LONG_BUCKET_MIN_SENTENCES} sentences.")
    numbers = {"seeds": [r[0] for r in rows], "bucket": [r[1] for r in rows],
               "sentences": [r[2] for r in rows], "bleu_difference": _rounded(differences)}
    return measurement, numbers, majority_verdict(outcomes)


def _gmm_gate(cells):
    rows = cells.seeds("GMM", "probes.gmm_gate_per_layer")
    outcomes, bottoms, uppers, per_layer = [], [], [], []
    for _, cell in rows:
        gates = cell["probes"]["gmm_gate_per_layer"]
        values = [g for g in gates if g is not None]
        if len(values) < 2 or gates[0] is None:
            outcomes.append(None)
            continue
        bottom, upper = float(gates[0]), float(np.mean(values[1:]))
        leans_on_dot_product = bottom < GATE_MIDPOINT
        rises = bottom < upper
        outcomes.append(True if leans_on_dot_product and rises else
                        False if not leans_on_dot_product and not rises else None)
        bottoms.append(bottom)
        uppers.append(upper)
        per_layer.append(gates)
    if not bottoms:
        raise NotMeasured("no GMM cell has gates in its lowest and a higher decoder layer")
    measurement = (f"Mean gate g (the Gaussian mixture's share) in the lowest decoder layer "
                   f"{_spread(bottoms, 3)}, in the layers above {_spread(uppers, 3)}. Paper "
                   f"(Figure 5): the bottom layers emphasise dot-product attention (g < "
                   f"{GATE_MIDPOINT}), the Gaussian share is larger higher up.")
    numbers = {"seeds": [s for s, _ in rows], "gate_per_layer": per_layer,
               "lowest_layer": _rounded(bottoms), "layers_above": _rounded(uppers)}
    return measurement, numbers, majority_verdict(outcomes)


def _lower_aer(model, baseline_key, what):
    """AER of `model` below `baseline_key` ("transformer" or the monotone alignment)."""
    def check(cells):
        key = "probes.aer.aer"
        if baseline_key == "monotone":
            rows = [(s, c, c) for s, c in cells.seeds(model, key, "probes.aer.monotone_aer")]
            base_key = "probes.aer.monotone_aer"
        else:
            rows = cells.paired(model, [key], baseline=baseline_key)
            base_key = key
        own = [float(_value(c, key)) for _, c, _ in rows]
        base = [float(_value(b, base_key)) for _, _, b in rows]
        outcomes = [True if b - a >= AER_MARGIN else False if a >= b else None
                    for a, b in zip(own, base)]
        sentences = [_value(c, "probes.aer.sentences") for _, c, _ in rows]
        measurement = (f"AER of {_name(model)}'s attention (argmax word links, teacher "
                       f"forced) against eflomal's links on {sentences[0]} test sentences: "
                       f"{_spread(own, 3)}; {what}: {_spread(base, 3)}; a seed counts at >= "
                       f"{AER_MARGIN} lower.")
        numbers = {"seeds": [s for s, _, _ in rows], "aer": _rounded(own),
                   "reference_aer": _rounded(base), "sentences": sentences}
        return measurement, numbers, majority_verdict(outcomes)
    return check


def _steps_to_reach(curve, target):
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


def _weighted_steps(cells):
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
        base_steps = _steps_to_reach(base["learning_curve"], best)
        own_steps = _steps_to_reach(cell["learning_curve"], best)
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
                   "Transformer needs: " + (_spread(ratios) if ratios else "none")
                   + f"; never reached on {never} of {len(rows)} seeds (paper: 15-40% "
                   f"faster; a seed counts at <= {FASTER_STEPS_RATIO}).")
    return measurement, {"per_seed": rows}, majority_verdict(outcomes)


def _weighted_branches(cells):
    rows = cells.seeds("weighted", "probes.branch_weights")
    kappas, alphas, outcomes = [], [], []
    for _, cell in rows:
        layers = cell["probes"]["branch_weights"]
        kappa = float(np.mean([layer["kappa_tv_from_uniform"] for layer in layers]))
        alpha = float(np.mean([layer["alpha_tv_from_uniform"] for layer in layers]))
        kappas.append(kappa)
        alphas.append(alpha)
        moved = [kappa >= BRANCH_TV_THRESHOLD, alpha >= BRANCH_TV_THRESHOLD]
        outcomes.append(True if all(moved) else False if not any(moved) else None)
    measurement = (f"Total-variation distance from uniform, mean over the branched layers: "
                   f"κ {_spread(kappas, 3)}, α {_spread(alphas, 3)} (0 uniform, "
                   f"1 - 1/M one-hot); a seed counts when both are >= "
                   f"{BRANCH_TV_THRESHOLD}.")
    numbers = {"seeds": [s for s, _ in rows], "kappa_tv": _rounded(kappas),
               "alpha_tv": _rounded(alphas)}
    return measurement, numbers, majority_verdict(outcomes)


def _eager_gap(reference):
    def check(cells):
        paired = cells.paired("eager", ["bleu"], baseline=reference)
        own = [float(c["bleu"]) for _, c, _ in paired]
        base = [float(b["bleu"]) for _, _, b in paired]
        gaps = [(b - a) / b if b > 0 else None for a, b in zip(own, base)]
        outcomes = [None if g is None else g <= EAGER_MAX_GAP for g in gaps]
        params = [(c.get("params"), b.get("params")) for _, c, b in paired]
        size = ""
        if all(p and q for p, q in params):
            size = (f"; parameters {params[0][0]:,} against {params[0][1]:,} "
                    f"({params[0][0] / params[0][1]:.2f}x)")
        shown = [100 * g for g in gaps if g is not None]
        measurement = (f"BLEU eager {_spread(own)}, {_name(reference)} {_spread(base)}; "
                       f"eager below by " + (_spread(shown, 1, unit="%") if shown else "n/a")
                       + f"{size} (paper: at most {100 * EAGER_MAX_GAP}% below on the German "
                       f"pair, its reference an RNNsearch of similar size).")
        numbers = {"seeds": [s for s, _, _ in paired], "eager_bleu": _rounded(own),
                   f"{reference}_bleu": _rounded(base), "relative_gap": _rounded(gaps),
                   "params": [p for p, _ in params],
                   f"{reference}_params": [q for _, q in params]}
        return measurement, numbers, majority_verdict(outcomes)
    return check


def _eager_epsilon(cells):
    rows = cells.seeds("eager", "eager.epsilon_share")
    shares = [float(_value(c, "eager.epsilon_share")) for _, c in rows]
    low, high = EPSILON_SHARE_RANGE
    mean, _ = mean_and_std(shares)
    verdict = CONFIRMED if low <= mean <= high else NOT_CONFIRMED
    # The paper trains on one aligned stream with the LSTM state carried across
    # windows; say on how many seeds the cells did, since the share is read there.
    aligned = sum(bool(_value(c, "config.aligned_batching")) for _, c in rows)
    by_pads = [(c.get("eager") or {}).get("epsilon_share_by_start_pads") for _, c in rows]
    by_pads = next((b for b in by_pads if b), None)  # a property of the data: one suffices
    other = ("" if not by_pads else " By start pads: " + ", ".join(
        f"{p}: {100 * float(v):.1f}%" for p, v in sorted(by_pads.items(), key=lambda kv: int(kv[0])))
        + " (Table 1 does not say how many pads it had).")
    measurement = (f"Share of ε in the eager training targets (start pads and trailing ε "
                   f"not counted): {_spread([100 * s for s in shares], 1, unit='%')} (paper, Table 1: "
                   f"14-23%, DE->EN 23%).{other} Trained the paper's way (aligned batching, LSTM "
                   f"state carried across windows) on {aligned} of {len(rows)} seeds.")
    numbers = {"seeds": [s for s, _ in rows], "epsilon_share": _rounded(shares),
               "aligned_batching_seeds": aligned, "paper_range": list(EPSILON_SHARE_RANGE)}
    if by_pads:
        numbers["epsilon_share_by_start_pads"] = by_pads
    return measurement, numbers, verdict


CLAIMS = [
    (RAN_PAPER, "RAN-D >= Transformer in BLEU (paper: +0.48 BLEU on average over 10 tasks)",
     _at_least_transformer("RAN-D")),
    (RAN_PAPER, "RAN-E is competitive with the Transformer with fewer parameters (paper: "
                "+0.13 BLEU on average)", _competitive_with_fewer_parameters("RAN-E")),
    (RAN_PAPER, "RAN-ALL is competitive with the Transformer with fewer parameters (paper: "
                "+0.16 BLEU on average)", _competitive_with_fewer_parameters("RAN-ALL")),
    (RAN_PAPER, "RAN-ALL decodes faster than the Transformer (paper: up to 1.236x, 23.6%, "
                "at batch 100)",
     _speed_ratio("RAN-ALL", "decode_sentences_per_second", RAN_SPEEDUP, 0.1,
                  "Decoding sentences/s")),
    (RAN_PAPER, "The learned attention matrices show the paper's patterns (Figure 6: local "
                "in the encoder, local plus first token in the decoder)", _ran_patterns_check),
    (HC_SA_PAPER, "Hard-coded Gaussian self-attention is below the Transformer in BLEU "
                  "(RAN paper: 'significantly decrease the performance')",
     _below_transformer("HC-SA")),
    (SYN_R_PAPER, "The Random Synthesizer is below the Transformer in BLEU (RAN paper: "
                  "'significantly decrease the performance')",
     _below_transformer("Syn-R")),
    (GMM_PAPER, "Better BLEU than the Transformer (paper: +0.75, WMT14 En-De base)",
     _at_least_transformer("GMM")),
    (GMM_PAPER, "Lower cross-attention entropy than dot-product attention (Table 6)",
     _gmm_entropy),
    (GMM_PAPER, "Better BLEU on the longest source sentences (Figure 7: +4.14 above 50 "
                "words)", _gmm_long),
    (GMM_PAPER, "Bottom decoder layers lean on dot-product attention, higher layers give "
                "the Gaussian mixture a larger share (Figure 5)", _gmm_gate),
    (GMM_PAPER, "Lower alignment error rate than the Transformer (Table 7: 48.21 against "
                "53.79)", _lower_aer("GMM", BASELINE, "Transformer")),
    (WEIGHTED_PAPER, "Better BLEU than the Transformer (paper: +0.5 En-De, +0.4 En-Fr)",
     _at_least_transformer("weighted")),
    (WEIGHTED_PAPER, "Reaches the Transformer's BLEU in fewer steps (paper: converges "
                     "15-40% faster)", _weighted_steps),
    (WEIGHTED_PAPER, "κ and α move away from uniform (Figure 3)", _weighted_branches),
    (BAHDANAU_PAPER, "The attention learns the word alignment (AER against eflomal, below "
                     "a monotone alignment)",
     _lower_aer("RNNsearch", "monotone", "monotone alignment of the same sentences")),
    (EAGER_PAPER, "BLEU at most 4.8% below an attention model of similar size (the "
                  "paper's RNNsearch reference)", _eager_gap("RNNsearch")),
    (EAGER_PAPER, "BLEU at most 4.8% below the Transformer", _eager_gap(BASELINE)),
    (EAGER_PAPER, "About 3x the source tokens per second of the attention model (the "
                  "paper's RNNsearch reference)",
     _speed_ratio("eager", "decode_source_tokens_per_second", EAGER_SPEEDUP,
                  EAGER_SPEED_TOLERANCE, "Decoding source tokens/s", "RNNsearch")),
    (EAGER_PAPER, "About 3x the source tokens per second of the Transformer",
     _speed_ratio("eager", "decode_source_tokens_per_second", EAGER_SPEEDUP,
                  EAGER_SPEED_TOLERANCE, "Decoding source tokens/s")),
    (EAGER_PAPER, "ε share of the eager-feasible targets like the paper's (Table 1: "
                  "14-23%)", _eager_epsilon),
]


def claim_verdicts(cells):
    """One verdict per paper claim from the leaderboard's cells.

    Args:
        cells: one dict per (model, seed) as the leaderboard writes them (see
            the module docstring for the fields read; missing fields make the
            claims that need them "not measured"). Cells whose ``"status"``
            is not "ok" are left out.

    Returns:
        `[{"paper", "claim", "measurement", "numbers", "verdict"}]` in the
        order of `CLAIMS`; verdict is `significance.CONFIRMED`,
        `NOT_CONFIRMED` or `INCONCLUSIVE`.
    """
    table = _Cells(cells)
    rows = []
    for paper, claim, check in CLAIMS:
        try:
            measurement, numbers, verdict = check(table)
        except NotMeasured as missing:
            measurement, numbers, verdict = f"not measured: {missing}", {}, INCONCLUSIVE
        row = {"paper": paper, "claim": claim, "measurement": measurement,
               "numbers": numbers, "verdict": verdict}
        seeds = _seeds_measured(numbers)
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


def _seeds_measured(numbers):
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

"""The report of `recipes/analyze.py`: attention statistics and the Markdown writer.

Statistics gather per-sentence values from a model's teacher-forced attention
(`keras_attn_zoo.evaluation.attention.attention_maps`) and reduce them with the
pure functions of `keras_attn_zoo.evaluation.analysis`; `write_markdown` turns
the report dict (the one saved as `report.json`) into `report.md`. The figures
are drawn by `keras_attn_zoo.evaluation.plots`.
"""

import math

import numpy as np

from keras_attn_zoo.evaluation import analysis
from keras_attn_zoo.evaluation.attention import attention_maps

SLOT_TITLES = {
    "cross": "cross-attention",
    "cross_dot_product": "cross-attention, dot-product part (GMM 'DP')",
    "cross_mixture": "cross-attention, Gaussian mixture part (GMM 'GMA')",
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention",
}
ENTROPY_SLOTS = ("cross", "cross_dot_product", "cross_mixture", "encoder_self",
                 "decoder_self")
JS_SLOTS = ("encoder_self", "decoder_self", "cross")


def _no_progress(iterable, total, description):
    del total, description
    return iterable


# ---- inputs ------------------------------------------------------------------------------


def fitting_pairs(processor, pairs, source_limit, target_limit=None):
    """Indices of the pairs a model accepts: source pieces + EOS <= `source_limit`,
    target pieces + BOS <= `target_limit` (the teacher-forced pass); None: no limit.

    No source limit keeps every pair (a model without one reads any length).
    """
    if source_limit is None:
        return list(range(len(pairs)))
    kept = []
    for index, (source, target) in enumerate(pairs):
        if len(processor.encode_as_ids(source)) + 1 > source_limit:
            continue
        if target_limit is not None and len(processor.encode_as_ids(target)) + 1 > target_limit:
            continue
        kept.append(index)
    return kept


def read_sentence_pairs(path):
    """`(source, target or None)` per non-empty line of 'source' or 'source<TAB>target'."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            source, _, target = line.partition("\t")
            rows.append((source.strip(), target.strip() or None))
    if not rows:
        raise ValueError(f"{path} has no sentences.")
    return rows


# ---- the teacher-forced attention pass ----------------------------------------------------


def attention_statistics(model, pairs, make_batch, batch_size, progress=_no_progress):
    """Per-sentence entropy [L, h] and JS [L, L] per slot, plus the cross maps.

    Args:
        model: a zoo model with attention (`attention_maps` gives its weights).
        pairs: `(source, reference)` texts, teacher forced on the reference.
        make_batch: `pairs -> (source_ids, target_ids, source_pieces,
            target_pieces)`, e.g. `training.callbacks.teacher_forcing_batch`
            bound to the model's SentencePiece processor.
        progress: `(iterable, total, description) -> iterable` (a progress bar).
    """
    count = len(pairs)
    entropy, rows, js = {}, {}, {}
    cross = [None] * count  # [L, h, n, m+1] per sentence
    pieces = [None] * count
    order = sorted(range(count), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    batches = [order[i:i + batch_size] for i in range(0, count, batch_size)]
    for batch in progress(batches, len(batches), "attention"):
        source, target, source_pieces, target_pieces = make_batch(
            [pairs[i] for i in batch])
        maps = attention_maps(model, source, target)
        for row, index in enumerate(batch):
            n, m = len(target_pieces[row]), len(source_pieces[row])  # m includes EOS
            pieces[index] = (source_pieces[row], target_pieces[row])
            shapes = {"cross": (n, m), "cross_dot_product": (n, m),
                      "cross_mixture": (n, m), "encoder_self": (m, m),
                      "decoder_self": (n, n)}
            for slot, (num_rows, num_keys) in shapes.items():
                if slot not in maps:
                    continue
                weights = maps[slot][:, row]
                entropy.setdefault(slot, np.full((count,) + weights.shape[:2], np.nan))
                rows.setdefault(slot, np.zeros(count))
                entropy[slot][index] = analysis.mean_row_entropy(weights, num_rows, num_keys)
                rows[slot][index] = num_rows
                if slot in JS_SLOTS:
                    js.setdefault(slot, np.zeros((count,) + (weights.shape[0],) * 2))
                    js[slot][index] = analysis.layer_js_matrix(weights, num_rows, num_keys)
            cross[index] = maps["cross"][:, row, :, :n, :m]
    return {"entropy": entropy, "rows": rows, "js": js, "cross": cross, "pieces": pieces}


def summarise_attention(stats, buckets):
    """Entropy per layer and head, per layer, overall and by length; JS per slot."""
    weighted_mean = analysis.weighted_mean
    result = {"per_layer_head": {}, "per_layer": {}, "all": {}, "by_length": {},
              "js_divergence": {}}
    for slot in ENTROPY_SLOTS:
        if slot not in stats["entropy"]:
            continue
        values, weights = stats["entropy"][slot], stats["rows"][slot]
        per_head = weighted_mean(values, weights)  # [L, h]
        if np.isnan(per_head).all():
            continue
        result["per_layer_head"][slot] = round_nested(per_head)
        result["per_layer"][slot] = round_nested(nanmean(per_head, axis=1))
        overall = nanmean(values, axis=(1, 2))  # [N] all layers/heads per sentence
        result["all"][slot] = round_nested(weighted_mean(overall, weights))
        result["by_length"][slot] = [
            {"bucket": b["label"], "sentences": len(b["indices"]),
             "entropy": round_nested(weighted_mean(overall[b["indices"]], weights[b["indices"]]))
             if b["indices"] else None}
            for b in buckets]
    for slot in JS_SLOTS:
        if slot in stats["js"]:
            result["js_divergence"][slot] = round_nested(
                weighted_mean(stats["js"][slot], stats["rows"][slot]))
    return result


def nanmean(values, axis):
    """`np.nanmean` that is NaN (without a warning) where everything is NaN."""
    values = np.asarray(values, dtype=np.float64)
    valid = ~np.isnan(values)
    count = valid.sum(axis=axis)
    total = np.where(valid, values, 0.0).sum(axis=axis)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def round_nested(value, digits=4):
    """A number or nested array as nested lists rounded to `digits`; NaN becomes None."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        return None if math.isnan(float(array)) else round(float(array), digits)
    return [round_nested(v, digits) for v in array]


# ---- alignment ------------------------------------------------------------------------------


def alignment_quality(stats, pairs, gold, layer):
    """AER, precision and recall of `layer`'s head-averaged cross-attention."""
    predicted, references, skipped = [], [], []
    for index, (source, target) in enumerate(pairs):
        source_pieces, target_pieces = stats["pieces"][index]
        source_pieces = source_pieces[:-1]  # drop EOS: words only
        if (len(set(analysis.word_ids(source_pieces))) != len(source.split())
                or len(set(analysis.word_ids(target_pieces))) != len(target.split())):
            skipped.append(index + 1)
            continue
        weights = stats["cross"][index][layer].mean(axis=0)  # heads averaged: [n, m+1]
        words = analysis.aggregate_to_words(weights, source_pieces, target_pieces)
        predicted.append(analysis.argmax_links(words))
        references.append(gold[index])
    scores = analysis.alignment_scores(predicted, references) if predicted else {}
    return {
        **{k: (None if isinstance(v, float) and math.isnan(v) else
               (round(v, 4) if isinstance(v, float) else v)) for k, v in scores.items()},
        "layer": layer,
        "sentences": len(predicted),
        "skipped_lines": skipped,
        "skipped_reason": "SentencePiece word count differs from the whitespace word "
                          "count of the text" if skipped else None,
    }


def translation_report(translations, references, bleu_buckets):
    """Corpus BLEU/chrF, the same by source-length bucket, and n-gram precisions."""
    from keras_attn_zoo.evaluation.scores import corpus_scores

    return {
        "scores": corpus_scores(translations, references),
        "bleu_by_length": analysis.scores_by_bucket(translations, references, bleu_buckets),
        "ngram_precision": {"model": analysis.ngram_precisions(translations, references)},
    }


def add_comparison(report, name, translations, references, bleu_buckets):
    """Adds a second model's scores and the n-gram precision gap (GMM paper Figure 6)."""
    other = translation_report(translations, references, bleu_buckets)
    ngram = report["ngram_precision"]
    ngram["compare"] = other["ngram_precision"]["model"]
    ngram["difference"] = [round(a - b, 2) for a, b in zip(ngram["model"],
                                                            ngram["compare"])]
    ngram["compare_model"] = name
    report["compare"] = {"model": name, "scores": other["scores"],
                         "bleu_by_length": other["bleu_by_length"]}


def attention_report(model, pairs, make_batch, batch_size, buckets, gold=None,
                     alignment_layer=None, progress=_no_progress):
    """Every attention analysis of a model that has attention weights.

    Returns `{"attention", "entropy_all", "entropy_by_length", "alignment",
    "layers"}`; `alignment` (AER against `gold`, one link set per pair) is None
    without gold links. `alignment_layer` None: the penultimate decoder layer,
    as in the GMM paper (the last for a one-layer decoder).

    Raises:
        ValueError: `alignment_layer` is not a decoder layer.
    """
    stats = attention_statistics(model, pairs, make_batch, batch_size, progress)
    summary = summarise_attention(stats, buckets)
    layers = stats["cross"][0].shape[0]
    alignment = None
    if gold is not None:
        layer = alignment_layer
        if layer is None:
            layer = layers - 2 if layers >= 2 else layers - 1
        if not -layers <= layer < layers:
            raise ValueError(f"--alignment-layer {layer} is out of range for "
                             f"{layers} decoder layers.")
        alignment = alignment_quality(stats, pairs, gold, layer % layers)
    return {"attention": {k: summary[k] for k in ("per_layer_head", "per_layer",
                                                  "js_divergence")},
            "entropy_all": summary["all"], "entropy_by_length": summary["by_length"],
            "alignment": alignment, "layers": layers}


def exported_alignment_entropy(exported, buckets):
    """Entropy of a SavedModel's exported alignments: `(overall, by_length)`.

    `exported`: per sentence `{"weights": [T, S], ...}` or None (one layer,
    heads averaged, on the model's own translation); every real output row
    counts once.
    """
    values = np.array([analysis.mean_row_entropy(a["weights"], a["weights"].shape[0])
                       if a is not None and a["weights"].size else np.nan
                       for a in exported])
    counts = np.array([a["weights"].shape[0] if a is not None else 0 for a in exported])
    overall = round_nested(analysis.weighted_mean(values, counts))
    by_length = [
        {"bucket": b["label"], "sentences": len(b["indices"]),
         "entropy": round_nested(analysis.weighted_mean(values[b["indices"]],
                                                        counts[b["indices"]]))
         if b["indices"] else None} for b in buckets]
    return overall, by_length


# ---- the Markdown report ------------------------------------------------------------------


def table(header, rows):
    """A Markdown table; None prints as n/a."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join("n/a" if v is None else str(v) for v in row) + " |")
    return "\n".join(lines)


def write_markdown(report, path):
    """`report.md` from the report dict (the content of `report.json`)."""
    r = report
    lines = [f"# Analysis of `{r['model']['path']}`", ""]
    lines += [f"- model input: {r['model']['input']} ({r['model']['class']})",
              f"- data: {r['data']['description']}: {r['data']['sentences']} sentence pairs "
              f"analysed" + (f", {r['data']['skipped_too_long']} skipped as longer than the "
                             "model accepts" if r['data']['skipped_too_long'] else ""),
              f"- search: beam {r['search']['beam_size']}, length penalty "
              f"{r['search']['length_penalty']}",
              f"- BLEU {r['scores']['bleu']}, chrF {r['scores']['chrf']} "
              f"(`{r['scores']['sacrebleu_signature']}`)", ""]
    if r["unavailable"]:
        lines += ["## What this input cannot give", ""]
        lines += [f"- **{name}**: {reason}" for name, reason in r["unavailable"].items()]
        lines += [""]
    lines += ["## BLEU and chrF by source length (words)", "",
              "Buckets of source length in whitespace words (GMM paper Figure 7).", ""]
    header = ["bucket", "sentences", "BLEU", "chrF"]
    rows = [[b["bucket"], b["sentences"], b["bleu"], b["chrf"]] for b in r["bleu_by_length"]]
    if r.get("compare"):
        header += ["compare BLEU", "compare chrF"]
        for row, other in zip(rows, r["compare"]["bleu_by_length"]):
            row += [other["bleu"], other["chrf"]]
    lines += [table(header, rows), "", "![](bleu_by_length.png)", ""]
    ngram = r["ngram_precision"]
    lines += ["## n-gram precision", "",
              "sacreBLEU's corpus modified n-gram precisions (percent).", ""]
    header = ["n", "model"] + (["compare", "difference"] if ngram.get("compare") else [])
    rows = []
    for n in range(len(ngram["model"])):
        row = [n + 1, ngram["model"][n]]
        if ngram.get("compare"):
            row += [ngram["compare"][n], ngram["difference"][n]]
        rows.append(row)
    lines += [table(header, rows), ""]
    if ngram.get("compare"):
        lines += [f"compare model: `{ngram['compare_model']}`", ""]
    lines += ["![](ngram_precision.png)", ""]
    attention = r.get("attention")
    if attention:
        lines += ["## Attention entropy per layer and head (nats)", "",
                  "Mean over every real query row (teacher forced on the references) of "
                  "the entropy of its attention over the real keys; rows renormalised.", ""]
        for slot, values in attention["per_layer_head"].items():
            heads = len(values[0])
            lines += [f"**{SLOT_TITLES.get(slot, slot)}**", "",
                      table(["layer"] + [f"head {h}" for h in range(heads)] + ["mean"],
                             [[layer] + row + [attention["per_layer"][slot][layer]]
                              for layer, row in enumerate(values)]), ""]
        lines += ["![](entropy_per_layer_head.png)", ""]
    if r.get("entropy_by_length"):
        lines += ["## Attention entropy by source length (GMM paper Table 6)", "",
                  "Mean over all layers, heads and real rows of the sentences in each "
                  "bucket of source words" + (
                      " (the exported alignment: its one layer, heads averaged, rows of "
                      "the model's own translation)." if any(
                          name.startswith("exported") for name in r["entropy_by_length"])
                      else "."), ""]
        series = r["entropy_by_length"]
        any_rows = next(iter(series.values()))
        header = ["attention", "all"] + [b["bucket"] for b in any_rows]
        lines += [table(header, [[name, r["entropy_all"].get(name)]
                                  + [b["entropy"] for b in rows]
                                  for name, rows in series.items()]), "",
                  "![](entropy_by_length.png)", ""]
    if attention and attention["js_divergence"]:
        lines += ["## Jensen-Shannon divergence between layers (RAN paper Figure 7)", "",
                  "Heads averaged per layer, JS (nats, at most ln 2 = 0.693) per query row, "
                  "averaged over rows and sentences.", ""]
        for slot, matrix in attention["js_divergence"].items():
            lines += [f"**{SLOT_TITLES.get(slot, slot)}**", "",
                      table(["layer"] + [str(i) for i in range(len(matrix))],
                             [[i] + row for i, row in enumerate(matrix)]), ""]
        lines += ["![](js_divergence.png)", ""]
    if r.get("alignment"):
        a = r["alignment"]
        lines += ["## Alignment quality (GMM paper Table 7)", "",
                  table(["AER", "precision", "recall", "layer", "sentences"],
                         [[a.get("aer"), a.get("precision"), a.get("recall"), a["layer"],
                           a["sentences"]]]), "",
                  f"Gold: `{a['gold']}`. The model is forced to produce the reference; "
                  f"decoder layer {a['layer']}'s cross-attention, heads averaged, is turned "
                  "into word attention and each target word is aligned to its argmax source "
                  "word. AER = 1 - (|A&S| + |A&P|) / (|A| + |S|), precision |A&P|/|A|, "
                  "recall |A&S|/|S| (fractions)."]
        if a["skipped_lines"]:
            lines += [f"Skipped lines ({a['skipped_reason']}): {a['skipped_lines']}"]
        lines += [""]
    if r["heatmaps"]:
        lines += ["## Heat maps", ""]
        for item in r["heatmaps"]:
            lines += [f"`{item['source']}` -> `{item['target']}` (layer {item['layer']})", "",
                      f"![]({item['file']})", ""]
    lines += ["## Method notes", ""] + [f"- {note}" for note in r["notes"]] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


NOTES = [
    "Entropy and JS divergence use natural logarithms. Each attention row is renormalised "
    "over the real keys first (the approximate Gaussian mixture and hard-coded Gaussian "
    "patterns do not sum exactly to 1).",
    "Teacher forcing: the decoder reads BOS and the reference pieces; row t is the "
    "attention used to predict reference piece t (the row beam search reports for output "
    "piece t). Cross-attention keys are the source pieces and the source EOS.",
    "Words from pieces: a SentencePiece piece starting with '\u2581' begins a word. Source "
    "word attention is the SUM over the word's pieces (the mass the word receives, source "
    "EOS dropped); target word attention is the MEAN over the word's pieces' rows. Gold "
    "word indices refer to whitespace-separated words of the source and reference lines; "
    "a sentence whose piece-word count differs is skipped for AER and listed.",
    "Length buckets count whitespace words of the source sentence; every sentence falls "
    "in exactly one bucket.",
    "BLEU/chrF: sacreBLEU defaults on detokenised text; n-gram precisions are sacreBLEU's "
    "modified precisions p_1..p_4.",
]

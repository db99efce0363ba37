#!/usr/bin/env python
"""Seeing inside a trained model: attention entropy, JS divergence, AER, BLEU by length.

    python recipes/analyze.py --model saved_models/NAME --out analysis/NAME
    python recipes/analyze.py --model saved_models/NAME/1/model.keras --out analysis/NAME \
        --gold-alignments gold.txt --data files --src test.de --ref test.en
    python recipes/analyze.py --model saved_models/GMM --compare saved_models/BASE --out DIR

Writes to --out: ``report.md`` (tables, plots, method notes), ``report.json`` (the same
numbers) and PNG plots: ``bleu_by_length.png``, ``ngram_precision.png``,
``entropy_per_layer_head.png``, ``entropy_by_length.png``, ``js_divergence.png`` and
``heatmaps/*.png`` (each only when its analysis is possible; report.json["files"] lists
what was written, report.json["unavailable"] says why the others are not).

What each input gives:

* ``--model saved_models/NAME`` (a TF Serving base directory or one version directory):
  translations from the exported graph, so BLEU/chrF by source length, n-gram precision
  (with --compare) and heat maps of the exported alignment. The SavedModel's alignment
  is the head-averaged cross-attention of ONE decoder layer, on the model's OWN
  translation: per-layer/per-head entropy, JS divergence between layers and AER (which
  needs the attention while the model is forced to produce the reference) need the Keras
  model. If ``model.keras`` lies in the version directory (or the base directory), it is
  loaded too and everything is computed.
* ``--model path/model.keras``: every analysis; the vocabulary is ``vocab.model`` or
  ``assets/vocab.model`` beside it, or --vocab. Translations use the same beam search
  as the export (`keras_attn_zoo.export.Translator`).
* A model without attention (the eager translator) gets the BLEU-by-length and n-gram
  analyses; the report says plainly that it has no attention weights to analyse.
"""

import argparse
import json
import math
import pathlib
import sys
import time

import numpy as np

KERAS_MODEL_FILE = "model.keras"
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True,
                   help="saved_models/NAME (SavedModel base or version directory) or a "
                        ".keras file")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--data", default="ding", choices=("ding", "files"),
                   help="ding: the Ding sentences of --split; files: --src and --ref")
    p.add_argument("--split", default="test", help="Ding split (test | valid)")
    p.add_argument("--src", help="source file, one sentence per line (--data files)")
    p.add_argument("--ref", help="reference file, line-aligned with --src (--data files)")
    p.add_argument("--direction",
                   help="de-en or en-de for Ding (default: the model card's, else de-en)")
    p.add_argument("--limit", type=int, help="analyse the first N sentence pairs only")
    p.add_argument("--vocab", help="SentencePiece model for a .keras input")
    p.add_argument("--keras-model",
                   help="a .keras file to use beside a SavedModel (default: model.keras "
                        "in its version or base directory, if there)")
    p.add_argument("--compare", help="a second model (same forms as --model) for the "
                                     "n-gram precision and BLEU-by-length comparison")
    p.add_argument("--gold-alignments",
                   help="Pharaoh file (i-j sure, i?j possible; 0-based source-target word "
                        "indices), one line per sentence pair of the data")
    p.add_argument("--alignment-layer", type=int,
                   help="decoder layer whose head-averaged cross-attention gives the "
                        "alignment (default: the penultimate, as in the GMM paper; the "
                        "last for one-layer models)")
    p.add_argument("--sentences",
                   help="file of sentences to draw as heat maps: 'source' or "
                        "'source<TAB>target' per line (default: the first "
                        "--num-heatmaps pairs of the data)")
    p.add_argument("--num-heatmaps", type=int, default=3)
    p.add_argument("--bleu-buckets", default="10,20,30,40,50",
                   help="source-length bucket bounds in words for BLEU/chrF")
    p.add_argument("--entropy-buckets", default="20,40",
                   help="source-length bucket bounds in words for entropy (Table 6)")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.data == "files" and (args.src is None or args.ref is None):
        p.error("--data files needs --src and --ref.")
    return args


def _bounds(text):
    return [int(v) for v in text.split(",") if v.strip()]


def _progress(iterable, total, description, enabled):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=description, unit="batch", file=sys.stderr)


# ---- models -------------------------------------------------------------------------------


class AnalysisModel:
    """A model to analyse: translations (+ exported alignment) and/or a Keras model."""

    def __init__(self, path, vocab=None, keras_model=None, beam_size=4, length_penalty=0.6):
        import tensorflow as tf

        from keras_attn_zoo.data.vocabulary import sentencepiece_processor

        self.path = pathlib.Path(path)
        self.beam_size = beam_size
        self.length_penalty = length_penalty
        self.card = {}
        self.saved = None
        self.keras = None
        self.max_input_length = None
        keras_path = pathlib.Path(keras_model) if keras_model else None
        for given in (keras_path, self.path if self.path.suffix == ".keras" else None):
            if given is not None and not given.is_file():
                raise SystemExit(f"error: no Keras model file {given}.")
        if self.path.suffix == ".keras":
            keras_path = self.path
            vocab_path = self._vocab_beside(self.path, vocab)
        else:
            import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

            from keras_attn_zoo.export import latest_version

            version = latest_version(self.path)
            self.version_dir = version
            self.saved = tf.saved_model.load(str(version))
            vocab_path = pathlib.Path(vocab) if vocab else version / "assets" / "vocab.model"
            card_path = version / "model_card.json"
            if card_path.is_file():
                self.card = json.loads(card_path.read_text(encoding="utf-8"))
            self.max_input_length = self.card.get("max_input_length")
            if keras_path is None:
                for candidate in (version / KERAS_MODEL_FILE, self.path / KERAS_MODEL_FILE):
                    if candidate.is_file():
                        keras_path = candidate
                        break
        self.vocab_path = vocab_path
        self.processor = sentencepiece_processor(str(vocab_path))
        self.keras_path = keras_path
        if keras_path is not None:
            import keras

            import keras_attn_zoo.models  # noqa: F401  (registers the zoo's classes)

            self.keras = keras.saving.load_model(str(keras_path), compile=False)
            limit = getattr(self.keras, "zoo_config", {}).get("max_length")
            if limit is not None:
                self.max_input_length = min(self.max_input_length or limit, limit)
        self._translator = None

    @staticmethod
    def _vocab_beside(path, vocab):
        if vocab:
            return pathlib.Path(vocab)
        for candidate in (path.parent / "vocab.model", path.parent / "assets" / "vocab.model"):
            if candidate.is_file():
                return candidate
        raise SystemExit(
            f"No vocabulary for {path}: expected vocab.model or assets/vocab.model beside "
            "it; pass --vocab FILE.")

    @property
    def kind(self):
        if self.saved is not None and self.keras is not None:
            return "SavedModel + .keras"
        return "SavedModel" if self.saved is not None else ".keras"

    @property
    def has_attention(self):
        from keras_attn_zoo.evaluation.attention import has_attention

        return self.keras is not None and has_attention(self.keras)

    def _translate_function(self):
        """`texts -> dict` with translation, alignment, length, source_pieces."""
        import tensorflow as tf

        options = dict(beam_size=tf.constant(self.beam_size),
                       length_penalty=tf.constant(self.length_penalty),
                       max_length_a=tf.constant(2.0), max_length_b=tf.constant(10.0))
        if self.saved is not None:
            signature = self.saved.signatures["translate_with_options"]
            return lambda texts: signature(text=tf.constant(texts), **options)
        if hasattr(self.keras, "special_ids"):  # the eager translator: text only
            from keras_attn_zoo.training.callbacks import text_translator

            translate = text_translator(self.keras, str(self.vocab_path), self.beam_size,
                                        self.length_penalty)
            return lambda texts: {"translation": [t.encode() for t in translate(texts)]}
        from keras_attn_zoo.export import Translator

        translator = Translator(self.keras, str(self.vocab_path), beam_size=self.beam_size,
                                length_penalty=self.length_penalty)
        self.max_input_length = translator.max_input_length
        return lambda texts: translator.translate_with_options(
            tf.constant(texts), *options.values())

    def translate(self, texts, batch_size=32, progress=True, description="translate"):
        """Translations (str) and, per sentence, the exported alignment or None.

        The alignment is `{"weights": [T, S], "source_pieces", "target_pieces"}`
        (T output pieces, S source pieces + EOS), as the SavedModel returns it.
        """
        if self._translator is None:
            self._translator = self._translate_function()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        translations = [""] * len(texts)
        alignments = [None] * len(texts)
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        for batch in _progress(batches, len(batches), description, progress):
            result = self._translator([texts[i] for i in batch])
            outputs = _numpy(result["translation"])
            for row, index in enumerate(batch):
                translations[index] = bytes(outputs[row]).decode("utf-8", errors="replace")
            if "alignment" not in result:
                continue
            weights = _numpy(result["alignment"])
            lengths = _numpy(result["length"])
            sources = _numpy(result["source_pieces"])
            targets = _numpy(result["target_pieces"])
            for row, index in enumerate(batch):
                source_pieces = [p.decode("utf-8", "replace") for p in sources[row] if p]
                length = int(lengths[row])
                alignments[index] = {
                    "weights": weights[row, :length, :len(source_pieces)],
                    "source_pieces": source_pieces,
                    "target_pieces": [p.decode("utf-8", "replace")
                                      for p in targets[row][:length]],
                }
        return translations, alignments

    def pieces(self, text):
        return self.processor.encode_as_pieces(text)


def peek_model_card(path):
    """The model card of a SavedModel path ({} for a .keras file or none found)."""
    path = pathlib.Path(path)
    if path.suffix == ".keras":
        return {}
    from keras_attn_zoo.export import latest_version

    try:
        card = latest_version(path) / "model_card.json"
    except FileNotFoundError as error:
        raise SystemExit(f"error: {error}") from error
    return json.loads(card.read_text(encoding="utf-8")) if card.is_file() else {}


def _numpy(value):
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def _fits(model, pairs):
    """Indices of pairs whose source (+EOS) and target (+BOS) the model accepts."""
    limit = model.max_input_length
    if limit is None:
        return list(range(len(pairs)))
    keras_limit = getattr(model.keras, "zoo_config", {}).get("max_length") if model.keras \
        else None
    kept = []
    for index, (source, target) in enumerate(pairs):
        if len(model.processor.encode_as_ids(source)) + 1 > limit:
            continue
        if keras_limit is not None and len(model.processor.encode_as_ids(target)) + 1 > keras_limit:
            continue
        kept.append(index)
    return kept


# ---- data ---------------------------------------------------------------------------------


def load_data(args, card):
    if args.data == "files":
        from keras_attn_zoo.data import read_parallel_files

        pairs, dropped = read_parallel_files(args.src, args.ref)
        description = f"files {args.src} / {args.ref}"
        if dropped:
            description += f" ({dropped} empty pairs dropped)"
    else:
        from keras_attn_zoo.data import load_pairs

        direction = args.direction or card.get("direction") or "de-en"
        pairs = load_pairs("ding:sentences", args.split, direction)
        description = f"Ding sentences, {args.split} split, {direction}"
    if args.limit is not None:
        pairs = pairs[:args.limit]
        description += f", first {len(pairs)} pairs"
    return pairs, description


def read_heatmap_sentences(path):
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            source, _, target = line.partition("\t")
            rows.append((source.strip(), target.strip() or None))
    if not rows:
        raise SystemExit(f"{path} has no sentences.")
    return rows


# ---- the teacher-forced attention pass ----------------------------------------------------


def attention_statistics(model, pairs, batch_size, progress):
    """Per-sentence entropy [L, h] and JS [L, L] per slot, plus the cross maps."""
    from keras_attn_zoo.evaluation import analysis
    from keras_attn_zoo.evaluation.attention import attention_maps
    from keras_attn_zoo.training.callbacks import teacher_forcing_batch

    count = len(pairs)
    entropy, rows, js = {}, {}, {}
    cross = [None] * count  # [L, h, n, m+1] per sentence
    pieces = [None] * count
    order = sorted(range(count), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    batches = [order[i:i + batch_size] for i in range(0, count, batch_size)]
    for batch in _progress(batches, len(batches), "attention", progress):
        source, target, source_pieces, target_pieces = teacher_forcing_batch(
            model.processor, [pairs[i] for i in batch])
        maps = attention_maps(model.keras, source, target)
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
    from keras_attn_zoo.evaluation.analysis import weighted_mean

    result = {"per_layer_head": {}, "per_layer": {}, "all": {}, "by_length": {},
              "js_divergence": {}}
    for slot in ENTROPY_SLOTS:
        if slot not in stats["entropy"]:
            continue
        values, weights = stats["entropy"][slot], stats["rows"][slot]
        per_head = weighted_mean(values, weights)  # [L, h]
        if np.isnan(per_head).all():
            continue
        result["per_layer_head"][slot] = _round(per_head)
        result["per_layer"][slot] = _round(_nanmean(per_head, axis=1))
        overall = _nanmean(values, axis=(1, 2))  # [N] all layers/heads per sentence
        result["all"][slot] = _round(weighted_mean(overall, weights))
        result["by_length"][slot] = [
            {"bucket": b["label"], "sentences": len(b["indices"]),
             "entropy": _round(weighted_mean(overall[b["indices"]], weights[b["indices"]]))
             if b["indices"] else None}
            for b in buckets]
    for slot in JS_SLOTS:
        if slot in stats["js"]:
            result["js_divergence"][slot] = _round(
                weighted_mean(stats["js"][slot], stats["rows"][slot]))
    return result


def _nanmean(values, axis):
    """`np.nanmean` that is NaN (without a warning) where everything is NaN."""
    values = np.asarray(values, dtype=np.float64)
    valid = ~np.isnan(values)
    count = valid.sum(axis=axis)
    total = np.where(valid, values, 0.0).sum(axis=axis)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _round(value, digits=4):
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        return None if math.isnan(float(array)) else round(float(array), digits)
    return [_round(v, digits) for v in array]


# ---- alignment ------------------------------------------------------------------------------


def alignment_quality(stats, pairs, gold, layer):
    from keras_attn_zoo.evaluation import analysis

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


# ---- plots ---------------------------------------------------------------------------------


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path, files):
    figure.tight_layout()
    figure.savefig(path)
    files.append(path.name if path.parent.name != "heatmaps" else f"heatmaps/{path.name}")


def plot_bleu_by_length(report, out, files):
    rows = report["bleu_by_length"]
    figure = _figure(7, 3.5)
    for position, metric in enumerate(("bleu", "chrf")):
        axes = figure.add_subplot(1, 2, position + 1)
        labels = [r["bucket"] for r in rows]
        x = np.arange(len(labels))
        series = [("model", rows)]
        if report.get("compare"):
            series.append(("compare", report["compare"]["bleu_by_length"]))
        width = 0.8 / len(series)
        for k, (name, data) in enumerate(series):
            values = [r[metric] if r[metric] is not None else 0.0 for r in data]
            axes.bar(x + k * width, values, width, label=name)
        axes.set_xticks(x + width * (len(series) - 1) / 2)
        axes.set_xticklabels(labels, fontsize=8)
        axes.set_xlabel("source words")
        axes.set_title(metric.upper() if metric == "bleu" else "chrF")
        if len(series) > 1:
            axes.legend(fontsize=7)
    _save(figure, out / "bleu_by_length.png", files)


def plot_ngram(report, out, files):
    ngram = report["ngram_precision"]
    figure = _figure(6, 3.5)
    axes = figure.add_subplot(1, 1, 1)
    orders = np.arange(1, len(ngram["model"]) + 1)
    if ngram.get("difference") is not None:
        axes.bar(orders, ngram["difference"])
        axes.axhline(0.0, color="black", linewidth=0.8)
        axes.set_ylabel("precision gap (model - compare), points")
        axes.set_title("n-gram precision gap (GMM paper Figure 6)")
    else:
        axes.bar(orders, ngram["model"])
        axes.set_ylabel("precision (%)")
        axes.set_title("n-gram precision")
    axes.set_xticks(orders)
    axes.set_xlabel("n")
    _save(figure, out / "ngram_precision.png", files)


def plot_entropy(summary, out, files):
    slots = list(summary["per_layer_head"])
    figure = _figure(3.2 * len(slots), 3.2)
    for k, slot in enumerate(slots):
        values = np.asarray(summary["per_layer_head"][slot], dtype=float)
        axes = figure.add_subplot(1, len(slots), k + 1)
        image = axes.imshow(values, cmap="viridis", aspect="auto")
        for (i, j), value in np.ndenumerate(values):
            axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                      color="white")
        axes.set_xlabel("head")
        axes.set_ylabel("layer")
        axes.set_xticks(range(values.shape[1]))
        axes.set_yticks(range(values.shape[0]))
        axes.set_title(slot, fontsize=9)
        figure.colorbar(image, ax=axes, fraction=0.046)
    _save(figure, out / "entropy_per_layer_head.png", files)


def plot_entropy_by_length(series, out, files):
    figure = _figure(6, 3.5)
    axes = figure.add_subplot(1, 1, 1)
    for name, rows in series.items():
        labels = [r["bucket"] for r in rows]
        values = [np.nan if r["entropy"] is None else r["entropy"] for r in rows]
        axes.plot(labels, values, marker="o", label=name)
    axes.set_xlabel("source words")
    axes.set_ylabel("entropy (nats)")
    axes.set_title("attention entropy by source length (GMM paper Table 6)")
    axes.legend(fontsize=7)
    _save(figure, out / "entropy_by_length.png", files)


def plot_js(summary, out, files):
    slots = list(summary["js_divergence"])
    figure = _figure(3.2 * len(slots), 3.2)
    for k, slot in enumerate(slots):
        values = np.asarray(summary["js_divergence"][slot], dtype=float)
        axes = figure.add_subplot(1, len(slots), k + 1)
        image = axes.imshow(values, cmap="magma_r", vmin=0.0, vmax=math.log(2.0))
        for (i, j), value in np.ndenumerate(values):
            axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
        axes.set_xlabel("layer")
        axes.set_ylabel("layer")
        axes.set_xticks(range(values.shape[0]))
        axes.set_yticks(range(values.shape[0]))
        axes.set_title(slot, fontsize=9)
        figure.colorbar(image, ax=axes, fraction=0.046)
    _save(figure, out / "js_divergence.png", files)


def draw_heatmaps(model, args, pairs, translations, exported, out, files):
    """Heat maps of chosen sentences; returns a list of {"file", "source", "target", ...}.

    With the Keras model: every decoder layer's cross-attention (heads averaged),
    teacher forced on the given target (the reference for data sentences, the
    second column of --sentences) or else on the model's own translation.
    SavedModel only: the exported alignment of the model's own translation.
    """
    from keras_attn_zoo.evaluation.attention import attention_maps
    from keras_attn_zoo.evaluation.plots import plot_alignment
    from keras_attn_zoo.training.callbacks import teacher_forcing_batch

    directory = out / "heatmaps"
    if args.sentences:
        chosen = read_heatmap_sentences(args.sentences)
        own, own_alignments = model.translate([s for s, _ in chosen], progress=False)
    else:
        chosen = pairs[:args.num_heatmaps]
        own, own_alignments = translations, exported
    drawn = []
    for k, (source, target) in enumerate(chosen):
        if model.has_attention:
            forced = "reference" if target is not None else "own translation"
            target = target if target is not None else own[k]
            src, tgt, source_pieces, target_pieces = teacher_forcing_batch(
                model.processor, [(source, target)])
            cross = attention_maps(model.keras, src, tgt)["cross"][:, 0]  # [L, h, T, S]
            for layer in range(cross.shape[0]):
                path = directory / f"sentence_{k}_layer_{layer}.png"
                plot_alignment(cross[layer].mean(axis=0), source_pieces[0],
                               target_pieces[0], path,
                               title=f"layer {layer}, heads averaged, forced {forced}")
                files.append(f"heatmaps/{path.name}")
                drawn.append({"file": f"heatmaps/{path.name}", "source": source,
                              "target": target, "layer": layer})
            continue
        alignment = own_alignments[k] if k < len(own_alignments) else None
        if alignment is None or not np.any(alignment["weights"]):
            continue
        path = directory / f"sentence_{k}.png"
        plot_alignment(alignment["weights"], alignment["source_pieces"],
                       alignment["target_pieces"], path,
                       title="exported alignment (one layer, heads averaged), own "
                             "translation")
        files.append(f"heatmaps/{path.name}")
        drawn.append({"file": f"heatmaps/{path.name}", "source": source,
                      "target": own[k], "layer": "exported"})
    return drawn


# ---- report ---------------------------------------------------------------------------------


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join("n/a" if v is None else str(v) for v in row) + " |")
    return "\n".join(lines)


def write_markdown(report, path):
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
    lines += [_table(header, rows), "", "![](bleu_by_length.png)", ""]
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
    lines += [_table(header, rows), ""]
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
                      _table(["layer"] + [f"head {h}" for h in range(heads)] + ["mean"],
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
        lines += [_table(header, [[name, r["entropy_all"].get(name)]
                                  + [b["entropy"] for b in rows]
                                  for name, rows in series.items()]), "",
                  "![](entropy_by_length.png)", ""]
    if attention and attention["js_divergence"]:
        lines += ["## Jensen-Shannon divergence between layers (RAN paper Figure 7)", "",
                  "Heads averaged per layer, JS (nats, at most ln 2 = 0.693) per query row, "
                  "averaged over rows and sentences.", ""]
        for slot, matrix in attention["js_divergence"].items():
            lines += [f"**{SLOT_TITLES.get(slot, slot)}**", "",
                      _table(["layer"] + [str(i) for i in range(len(matrix))],
                             [[i] + row for i, row in enumerate(matrix)]), ""]
        lines += ["![](js_divergence.png)", ""]
    if r.get("alignment"):
        a = r["alignment"]
        lines += ["## Alignment quality (GMM paper Table 7)", "",
                  _table(["AER", "precision", "recall", "layer", "sentences"],
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


def run(args):
    from keras_attn_zoo.evaluation import analysis
    from keras_attn_zoo.evaluation.scores import corpus_scores

    started = time.monotonic()
    progress = not args.no_progress
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Data and gold alignments first: bad input stops before any model is loaded.
    all_pairs, description = load_data(args, peek_model_card(args.model))
    gold = None
    if args.gold_alignments:
        try:
            gold_all = analysis.read_gold_alignments(args.gold_alignments, all_pairs)
        except (ValueError, OSError) as error:
            raise SystemExit(f"error: {error}") from error
    model = AnalysisModel(args.model, vocab=args.vocab, keras_model=args.keras_model,
                          beam_size=args.beam_size, length_penalty=args.length_penalty)
    other = None
    kept = _fits(model, all_pairs)
    if args.compare:  # both models must accept every analysed sentence
        other = AnalysisModel(args.compare, beam_size=args.beam_size,
                              length_penalty=args.length_penalty)
        kept = sorted(set(kept) & set(_fits(other, all_pairs)))
    pairs = [all_pairs[i] for i in kept]
    if args.gold_alignments:
        gold = [gold_all[i] for i in kept]
    if not pairs:
        raise SystemExit("No sentence pair to analyse.")
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]

    files, unavailable, notes = [], {}, list(NOTES)
    try:
        import matplotlib  # noqa: F401

        can_plot = True
    except ImportError:
        can_plot = False
        unavailable["plots"] = "matplotlib is not installed (pip install matplotlib)."

    translations, exported = model.translate(sources, args.batch_size, progress)
    bleu_buckets = analysis.length_buckets([len(s.split()) for s in sources],
                                           _bounds(args.bleu_buckets))
    entropy_buckets = analysis.length_buckets([len(s.split()) for s in sources],
                                              _bounds(args.entropy_buckets))
    report = {
        "model": {"path": str(args.model), "input": model.kind,
                  "class": type(model.keras).__name__ if model.keras is not None
                  else model.card.get("model_class", "unknown"),
                  "keras_model": str(model.keras_path) if model.keras_path else None,
                  "vocabulary": str(model.vocab_path)},
        "data": {"description": description, "sentences": len(pairs),
                 "skipped_too_long": len(all_pairs) - len(pairs)},  # for either model
        "search": {"beam_size": args.beam_size, "length_penalty": args.length_penalty},
        "scores": corpus_scores(translations, references),
        "length_buckets": {"unit": "source words",
                           "bleu_boundaries": _bounds(args.bleu_buckets),
                           "entropy_boundaries": _bounds(args.entropy_buckets)},
        "bleu_by_length": analysis.scores_by_bucket(translations, references, bleu_buckets),
        "ngram_precision": {"model": analysis.ngram_precisions(translations, references)},
        "compare": None,
        "attention": None,
        "entropy_by_length": {},
        "entropy_all": {},
        "alignment": None,
        "heatmaps": [],
        "unavailable": unavailable,
        "notes": notes,
        "files": files,
        "examples": [{"source": s, "reference": t, "translation": h}
                     for s, t, h in list(zip(sources, references, translations))[:5]],
    }
    if other is not None:
        other_translations, _ = other.translate(sources, args.batch_size, progress,
                                                description="translate (compare)")
        ngram = report["ngram_precision"]
        ngram["compare"] = analysis.ngram_precisions(other_translations, references)
        ngram["difference"] = [round(a - b, 2) for a, b in zip(ngram["model"],
                                                                ngram["compare"])]
        ngram["compare_model"] = str(args.compare)
        report["compare"] = {
            "model": str(args.compare),
            "scores": corpus_scores(other_translations, references),
            "bleu_by_length": analysis.scores_by_bucket(other_translations, references,
                                                        bleu_buckets),
        }
    else:
        unavailable["n-gram precision gap"] = ("no --compare model: the precisions of this "
                                               "model alone are reported.")

    no_attention = None
    if model.keras is not None and not model.has_attention:
        no_attention = f"{type(model.keras).__name__} has no attention weights"
        no_attention += (" (it reads the source and writes the target in one recurrent "
                         "stack)." if hasattr(model.keras, "special_ids") else ".")
    elif model.keras is None and not any(a is not None and np.any(a["weights"])
                                         for a in exported):
        no_attention = "the SavedModel's alignment output is all zeros: the model has no " \
                       "attention weights."
    if no_attention:
        for name in ("attention entropy", "JS divergence between layers",
                     "alignment error rate", "heat maps"):
            unavailable[name] = no_attention
    elif model.keras is None:
        reason = ("a SavedModel only exports the head-averaged cross-attention of one "
                  "decoder layer on the model's own translation; pass the .keras model "
                  "(--model path/model.keras, --keras-model, or model.keras beside the "
                  "export) for this analysis.")
        unavailable["attention entropy per layer and head"] = reason
        unavailable["JS divergence between layers"] = reason
        if args.gold_alignments:
            unavailable["alignment error rate"] = (
                "AER needs the attention while the model is forced to produce the "
                "reference, which the SavedModel's signatures cannot do; " + reason)
        # What the SavedModel can give: entropy of its exported alignment by length.
        values = np.array([analysis.mean_row_entropy(a["weights"], a["weights"].shape[0])
                           if a is not None and a["weights"].size else np.nan
                           for a in exported])
        counts = np.array([a["weights"].shape[0] if a is not None else 0
                           for a in exported])
        name = "exported alignment (own translation)"
        report["entropy_all"][name] = _round(analysis.weighted_mean(values, counts))
        report["entropy_by_length"][name] = [
            {"bucket": b["label"], "sentences": len(b["indices"]),
             "entropy": _round(analysis.weighted_mean(values[b["indices"]],
                                                       counts[b["indices"]]))
             if b["indices"] else None} for b in entropy_buckets]
        notes.append("The SavedModel-only entropy is that of the exported alignment (one "
                     "layer, heads averaged, on the model's own translation), not the "
                     "per-head entropy of the paper's Table 6.")

    if model.has_attention:
        stats = attention_statistics(model, pairs, args.batch_size, progress)
        summary = summarise_attention(stats, entropy_buckets)
        report["attention"] = {k: summary[k] for k in ("per_layer_head", "per_layer",
                                                       "js_divergence")}
        report["entropy_all"].update(summary["all"])
        report["entropy_by_length"].update(summary["by_length"])
        layers = stats["cross"][0].shape[0]
        if args.gold_alignments:
            layer = args.alignment_layer
            if layer is None:
                layer = layers - 2 if layers >= 2 else layers - 1
            if not -layers <= layer < layers:
                raise SystemExit(f"--alignment-layer {layer} is out of range for "
                                 f"{layers} decoder layers.")
            layer %= layers
            report["alignment"] = {**alignment_quality(stats, pairs, gold, layer),
                                   "gold": str(args.gold_alignments)}
        else:
            unavailable["alignment error rate"] = "no --gold-alignments file given."
        if layers < 2:
            notes.append(f"The model has {layers} decoder layer(s): the JS matrices are "
                         "trivial.")

    if can_plot:
        plot_bleu_by_length(report, out, files)
        plot_ngram(report, out, files)
        if report["attention"]:
            plot_entropy(report["attention"], out, files)
            if report["attention"]["js_divergence"]:
                plot_js(report["attention"], out, files)
        if report["entropy_by_length"]:
            plot_entropy_by_length(report["entropy_by_length"], out, files)
        if not no_attention:
            report["heatmaps"] = draw_heatmaps(model, args, pairs, translations, exported,
                                               out, files)
    report["seconds"] = round(time.monotonic() - started, 1)
    files += ["report.md", "report.json"]
    write_markdown(report, out / "report.md")
    (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                                     encoding="utf-8")
    return report


def main(argv=None):
    args = parse_args(argv)
    report = run(args)
    print(f"BLEU {report['scores']['bleu']} chrF {report['scores']['chrf']} on "
          f"{report['data']['sentences']} sentences")
    for name, reason in report["unavailable"].items():
        print(f"not available: {name}: {reason}")
    print(f"wrote {len(report['files'])} files to {args.out} ({report['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

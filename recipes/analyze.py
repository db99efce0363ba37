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
import pathlib
import sys
import time

import numpy as np

from keras_attn_zoo.runtime import start_tensorflow

start_tensorflow()  # before the package imports TensorFlow: no start-up noise

from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE  # noqa: E402
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY  # noqa: E402

KERAS_MODEL_FILE = "model.keras"


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
    p.add_argument("--beam-size", type=int, default=DEFAULT_BEAM_SIZE)
    p.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY)
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

    def __init__(self, path, vocab=None, keras_model=None, beam_size=DEFAULT_BEAM_SIZE,
                 length_penalty=DEFAULT_LENGTH_PENALTY):
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
            limit = self.keras.max_decode_length
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
        from keras_attn_zoo.workflow import RunConfig
        from keras_attn_zoo.workflow import run_translator

        # The analysis' one inference object, whichever way it is called below.
        translator = run_translator(RunConfig(beam_size=self.beam_size,
                                              length_penalty=self.length_penalty),
                                    self.keras, str(self.vocab_path))
        self.max_input_length = translator.max_input_length
        if self.keras.extra_token_count:  # ids beyond the pieces (eager): text only
            return lambda texts: {"translation": [
                t.encode() for t in translator.translate_texts(list(texts), batch_size=32)]}
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

    def teacher_forcing_batch(self, pairs):
        """`(source_ids, target_ids, source_pieces, target_pieces)` of `pairs`."""
        from keras_attn_zoo.training.callbacks import teacher_forcing_batch

        return teacher_forcing_batch(self.processor, pairs)

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
    from keras_attn_zoo.evaluation.report import fitting_pairs

    return fitting_pairs(
        model.processor, pairs, model.max_input_length,
        model.keras.max_decode_length if model.keras is not None else None)


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
    from keras_attn_zoo.evaluation.report import read_sentence_pairs

    try:
        return read_sentence_pairs(path)
    except ValueError as error:
        raise SystemExit(str(error)) from error


def run(args):
    from keras_attn_zoo.evaluation import analysis
    from keras_attn_zoo.evaluation import plots
    from keras_attn_zoo.evaluation import report as reports

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

    files, unavailable, notes = [], {}, list(reports.NOTES)
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
        **reports.translation_report(translations, references, bleu_buckets),
        "length_buckets": {"unit": "source words",
                           "bleu_boundaries": _bounds(args.bleu_buckets),
                           "entropy_boundaries": _bounds(args.entropy_buckets)},
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
        reports.add_comparison(report, str(args.compare), other_translations, references,
                               bleu_buckets)
    else:
        unavailable["n-gram precision gap"] = ("no --compare model: the precisions of this "
                                               "model alone are reported.")

    no_attention = None
    if model.keras is not None and not model.has_attention:
        no_attention = f"{type(model.keras).__name__} has no attention weights."
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
        name = "exported alignment (own translation)"
        report["entropy_all"][name], report["entropy_by_length"][name] = (
            reports.exported_alignment_entropy(exported, entropy_buckets))
        notes.append("The SavedModel-only entropy is that of the exported alignment (one "
                     "layer, heads averaged, on the model's own translation), not the "
                     "per-head entropy of the paper's Table 6.")

    if model.has_attention:
        try:
            attention = reports.attention_report(
                model.keras, pairs, model.teacher_forcing_batch, args.batch_size,
                entropy_buckets, gold, args.alignment_layer,
                lambda items, total, what: _progress(items, total, what, progress))
        except ValueError as error:
            raise SystemExit(str(error)) from error
        report["attention"] = attention["attention"]
        report["entropy_all"].update(attention["entropy_all"])
        report["entropy_by_length"].update(attention["entropy_by_length"])
        if gold is not None:
            report["alignment"] = {**attention["alignment"],
                                   "gold": str(args.gold_alignments)}
        else:
            unavailable["alignment error rate"] = "no --gold-alignments file given."
        if attention["layers"] < 2:
            notes.append(f"The model has {attention['layers']} decoder layer(s): the JS "
                         "matrices are trivial.")

    if can_plot:
        plots.draw_report_figures(report, out, files)
        if not no_attention:
            if args.sentences:
                chosen = read_heatmap_sentences(args.sentences)
                own, own_alignments = model.translate([s for s, _ in chosen],
                                                      progress=False)
            else:
                chosen = pairs[:args.num_heatmaps]
                own, own_alignments = translations, exported
            report["heatmaps"] = plots.draw_heatmaps(
                chosen, own, own_alignments, out, files,
                model=model.keras if model.has_attention else None,
                make_batch=model.teacher_forcing_batch)
    report["seconds"] = round(time.monotonic() - started, 1)
    files += ["report.md", "report.json"]
    reports.write_markdown(report, out / "report.md")
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

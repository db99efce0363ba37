"""CPU decoding speed and BLEU: the TF SavedModel against CTranslate2 float32 / int8.

One trained model, one run: the SavedModel's ``translate_with_options`` and the
same weights exported with ``keras_attn_zoo.export.export_ctranslate2`` (float32
and int8), translating the same test sentences with the same threads, batch size
(default 32, sentences sorted by length) and beam size (default 4). Reported per
engine: sentences/s (median of ``--repeats`` interleaved rounds, see
``common.alternate``), sacreBLEU against the references, and the share of
translations identical to the SavedModel's. Goal of issue 17: the fastest CPU
path >= 3x the SavedModel in sentences/s at a BLEU within 0.5.

The length penalty (default 0) is given to both engines; at 0 both rank
hypotheses by the plain sum of log-probs (at other values they differ: GNMT's
``((5+n)/6)^a`` against CTranslate2's ``n^a``).

    python benchmarks/ct2_speed.py --run-dir runs/NAME --model-dir saved_models/NAME
    python benchmarks/ct2_speed.py --smoke     # tiny random model, seconds
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import common  # noqa: E402

NAME = "ct2_speed"


def parse_args(argv=None):
    from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", help="training run directory (model.keras, "
                        "vocab.model, results.json)")
    parser.add_argument("--model-dir", help="its SavedModel (base or version directory; "
                        "default: the run's results.json export_path)")
    parser.add_argument("--sentences", type=int, default=500,
                        help="first N Ding test sentences (default 500)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beam-size", type=int, default=DEFAULT_BEAM_SIZE)
    parser.add_argument("--length-penalty", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="TensorFlow intra-op threads = CTranslate2 intra_threads")
    parser.add_argument("--quantizations", default="float32,int8")
    common.add_common_arguments(parser, repeats=3, warmup=1)
    args = parser.parse_args(argv)
    if not args.smoke and not args.run_dir:
        parser.error("--run-dir is required (or --smoke)")
    return args


def _smoke_model(workdir):
    """A tiny random Transformer, its SavedModel and some synthetic test pairs."""
    from keras_attn_zoo.data.vocabulary import train_sentencepiece
    from keras_attn_zoo.export import export_saved_model
    from keras_attn_zoo.models import transformer
    from keras_attn_zoo.workflow import RunConfig
    from keras_attn_zoo.workflow import run_translator
    from tests.conftest import make_synthetic_parallel_sentences

    pairs = make_synthetic_parallel_sentences(200)
    vocab = train_sentencepiece(pairs, workdir / "vocab.model", vocab_size=120)
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor

    size = sentencepiece_processor(vocab).get_piece_size()
    model = transformer(size, preset="tiny")
    base = export_saved_model(run_translator(RunConfig(), model, str(vocab)), workdir / "saved",
                              name="smoke")
    return model, vocab, base, pairs[:12], "de-en"


def _run_model(args):
    """``(keras model, vocab path, SavedModel version dir, test pairs, direction)``."""
    import keras

    import keras_attn_zoo.models  # noqa: F401  (registers the zoo's classes)
    from keras_attn_zoo.data import ding
    from keras_attn_zoo.export import latest_version
    from keras_attn_zoo.export.ctranslate2_export import find_keras_model

    run_dir = pathlib.Path(args.run_dir)
    keras_path, vocab = find_keras_model(run_dir)
    results = {}
    if (run_dir / "results.json").is_file():
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    model_dir = pathlib.Path(args.model_dir or results["export_path"])
    if not (model_dir / "saved_model.pb").is_file():
        model_dir = latest_version(model_dir)
    direction = results.get("direction", "de-en")
    pairs = ding.ding_corpus("test", kind="sentences", direction=direction)
    model = keras.saving.load_model(str(keras_path), compile=False)
    return model, vocab, model_dir, pairs[:args.sentences], direction


def saved_model_engine(model_dir, sentences, args):
    """``translate_with_options`` on length-sorted batches, like ``Translator.translate_texts``."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    loaded = tf.saved_model.load(str(model_dir))
    signature = loaded.signatures["translate_with_options"]
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i].encode("utf-8")))
    options = dict(beam_size=tf.constant(args.beam_size, tf.int32),
                   length_penalty=tf.constant(args.length_penalty, tf.float32),
                   max_length_a=tf.constant(2.0, tf.float32),
                   max_length_b=tf.constant(10.0, tf.float32))

    def translate():
        outputs = [""] * len(sentences)
        for start in range(0, len(order), args.batch_size):
            chunk = order[start:start + args.batch_size]
            result = signature(text=tf.constant([sentences[i] for i in chunk]), **options)
            for i, text in zip(chunk, result["translation"].numpy()):
                outputs[i] = text.decode("utf-8", errors="replace")
        return outputs

    return translate


def ct2_engine(export_dir, sentences, args):
    from keras_attn_zoo.export.ctranslate2_export import CTranslate2Translator

    translator = CTranslate2Translator(export_dir, inter_threads=1,
                                       intra_threads=args.threads)
    return lambda: translator.translate_texts(
        sentences, batch_size=args.batch_size, beam_size=args.beam_size,
        length_penalty=args.length_penalty)


def main(argv=None):
    args = parse_args(argv)
    if args.smoke:
        args.sentences, args.repeats, args.warmup = 12, 1, 0
    run = common.start_run()
    import tensorflow as tf

    # Same threads for both engines (before TensorFlow starts its pools).
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import sacrebleu

    from keras_attn_zoo.export.ctranslate2_export import export_ctranslate2

    matmul = common.matmul_rate()
    with tempfile.TemporaryDirectory() as workdir:
        workdir = pathlib.Path(workdir)
        if args.smoke:
            model, vocab, model_dir, pairs, direction = _smoke_model(workdir)
        else:
            model, vocab, model_dir, pairs, direction = _run_model(args)
        sources = [source for source, _ in pairs]
        references = [target for _, target in pairs]
        engines = {"savedmodel": saved_model_engine(model_dir, sources, args)}
        sizes = {}
        for quantization in common.str_list(args.quantizations):
            export = export_ctranslate2(model, vocab, workdir / f"ct2-{quantization}",
                                        quantization=quantization)
            sizes[f"ct2-{quantization}"] = (export / "model.bin").stat().st_size
            engines[f"ct2-{quantization}"] = ct2_engine(export, sources, args)
        timings, outputs = common.alternate(engines, repeats=args.repeats,
                                            warmup=args.warmup)

    base = timings["savedmodel"].median
    rows = []
    for name, timing in timings.items():
        hypotheses = outputs[name]
        bleu = sacrebleu.corpus_bleu(hypotheses, [references])
        same = sum(a == b for a, b in zip(hypotheses, outputs["savedmodel"]))
        rows.append({
            "engine": name,
            "sentences_per_second": len(sources) / timing.median,
            "speedup": base / timing.median,
            "bleu": bleu.score,
            "same_as_savedmodel": same / len(sources),
            "model_bin_mb": sizes[name] / 2**20 if name in sizes else None,
            **timing.as_dict(),
        })
    # The fastest engine whose BLEU is within 0.5 of the SavedModel's.
    equal = [r for r in rows if abs(r["bleu"] - rows[0]["bleu"]) <= 0.5]
    best = max(equal, key=lambda r: r["speedup"])
    goal = {
        "fastest_at_equal_bleu": best["engine"],
        "speedup": best["speedup"],
        "bleu_delta": best["bleu"] - rows[0]["bleu"],
        "met": best["speedup"] >= 3.0,
    }
    columns = [("engine", "engine", ""), ("sentences_per_second", "sent/s", ".1f"),
               ("speedup", "x SavedModel", ".2f"), ("bleu", "BLEU", ".2f"),
               ("same_as_savedmodel", "same", ".2f"), ("spread", "spread", ".2f"),
               ("model_bin_mb", "model.bin MiB", ".1f")]
    common.print_table(rows, columns, title=(
        f"{len(sources)} sentences ({direction}), batch {args.batch_size}, beam "
        f"{args.beam_size}, length penalty {args.length_penalty}, {args.threads} threads; "
        f"matmul {matmul['gflops']:.0f} GFLOP/s; load {common.load_average()}"))
    print(f"goal (fastest at BLEU within 0.5 >= 3x SavedModel): {goal}")
    results = {
        "settings": {"sentences": len(sources), "direction": direction,
                     "batch_size": args.batch_size, "beam_size": args.beam_size,
                     "length_penalty": args.length_penalty, "threads": args.threads,
                     "max_length_a": 2.0, "max_length_b": 10,
                     "run_dir": args.run_dir, "model_dir": str(model_dir),
                     "repeats": args.repeats, "warmup": args.warmup},
        "matmul_rate": matmul,
        "engines": rows,
        "goal": goal,
        "examples": [{"source": s, "reference": r,
                      **{name: outputs[name][i] for name in outputs}}
                     for i, (s, r) in enumerate(zip(sources[:5], references[:5]))],
    }
    import ctranslate2

    results["machine"] = {"ctranslate2": ctranslate2.__version__}
    path = common.write_results(NAME, results, args.output_dir, smoke=args.smoke, run=run)
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    main()

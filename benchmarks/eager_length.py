#!/usr/bin/env python
"""The eager translator's output length before and after issue 32's decoding options.

Loads a trained eager model (the ``model.keras`` and ``vocab.model`` of a
``recipes/train_wmt.py`` run directory) and translates the Ding test
sentences twice with the exported search (``export.Translator``):

* before: the zoo's old defaults, GNMT length penalty 0.6 and source padding
  injection 4 (with 5 start pads an output holds at most n - 1 pieces);
* after: the reference's ranking, log-prob / (i + 1) (``length_normalization=
  "average"``), the reference's injection (``injection_end``, default
  "reference": the N pads are read before the source EOS) and the source
  padding injection chosen on the first ``--dev-sentences`` valid sentences
  by dev BLEU (``choose_source_padding_injection``).

For each it reports BLEU, chrF and the length ratio (hypothesis words over
reference words, and sacreBLEU's sys_len/ref_len), and the source-use probe
(teacher-forced word-label loss with the true and a shuffled source on the
dev pairs).

Usage:
    python benchmarks/eager_length.py --run-dir runs/eager-small-ding-de-en

Writes ``benchmarks/results/eager_length-<date>.json``.
"""

from __future__ import annotations

import argparse
import pathlib

import common


def decode(model, tokenizer, pairs, beam_size):
    import sacrebleu

    from keras_attn_zoo.evaluation.scores import corpus_scores
    from keras_attn_zoo.workflow import RunConfig
    from keras_attn_zoo.workflow import run_translator

    # GNMT 0.6: the length penalty of both settings compared (see the module docstring).
    translator = run_translator(RunConfig(beam_size=beam_size, length_penalty=0.6), model,
                                tokenizer)
    hypotheses = translator.translate_texts([s for s, _ in pairs])
    references = [t for _, t in pairs]
    scores = corpus_scores(hypotheses, references)
    bleu = sacrebleu.metrics.BLEU().corpus_score(hypotheses, [references])
    return {"bleu": scores["bleu"], "chrf": scores["chrf"],
            "length_ratio_words": round(sum(len(h.split()) for h in hypotheses)
                                        / max(1, sum(len(r.split()) for r in references)), 4),
            "sacrebleu_sys_len": bleu.sys_len, "sacrebleu_ref_len": bleu.ref_len,
            "brevity_penalty": round(bleu.bp, 4), "examples": hypotheses[:3]}


def main(argv=None):
    from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--direction", default="de-en")
    parser.add_argument("--test-sentences", type=int, default=None,
                        help="first N test sentences (default all)")
    parser.add_argument("--dev-sentences", type=int, default=200)
    parser.add_argument("--beam-size", type=int, default=DEFAULT_BEAM_SIZE)
    parser.add_argument("--candidates", type=common.int_list, default=list(range(0, 11, 2)))
    parser.add_argument("--injection-end", default="reference",
                        help="the after setting's injection_end (choose | reference)")
    parser.add_argument("--output-dir", default=str(common.RESULTS_DIR))
    args = parser.parse_args(argv)

    import keras

    from keras_attn_zoo import data as zoo_data
    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.evaluation.source_padding import choose_source_padding_injection
    from keras_attn_zoo.models.eager.preprocessing import make_eager_id_pairs
    from keras_attn_zoo.models.eager.probe import source_use_probe
    from keras_attn_zoo.workflow import RunConfig
    from keras_attn_zoo.workflow import run_translator

    run = common.start_run()
    run_dir = pathlib.Path(args.run_dir)
    model = keras.models.load_model(run_dir / "model.keras")
    tokenizer = load_tokenizer(run_dir / "vocab.model")
    test = zoo_data.load_pairs("ding:sentences", "test", args.direction)[:args.test_sentences]
    dev = zoo_data.load_pairs("ding:sentences", "valid", args.direction)[:args.dev_sentences]

    dev_ids, _ = make_eager_id_pairs(dev, tokenizer, aligner="eflomal",
                                     cache_dir=run_dir / "dev_alignments",
                                     start_pads=model.zoo_config["start_pads"],
                                     special_ids=model.special_ids)
    probe = source_use_probe(model, dev_ids)

    model.set_decoding(length_normalization="gnmt", source_padding_injection=4,
                       injection_end="choose")
    before = decode(model, tokenizer, test, args.beam_size)
    model.set_decoding(length_normalization="average", injection_end=args.injection_end)
    choice = choose_source_padding_injection(run_translator(RunConfig(), model, tokenizer),
                                             dev,
                                             candidates=args.candidates,
                                             beam_size=args.beam_size)
    after = decode(model, tokenizer, test, args.beam_size)
    results = {"run_dir": str(run_dir), "start_pads": model.zoo_config["start_pads"],
               "test_sentences": len(test), "dev_sentences": len(dev),
               "beam_size": args.beam_size,
               "before": {"length_normalization": "gnmt 0.6", "injection_end": "choose",
                          "source_padding_injection": 4, **before},
               "after": {"length_normalization": "average (log-prob / tokens)",
                         "injection_end": args.injection_end,
                         "source_padding_injection": choice["chosen"], **after},
               "spi_on_dev": choice["by_value"], "source_use_probe_dev": probe}
    path = common.write_results("eager_length", results, args.output_dir, run=run)
    print({k: {m: v for m, v in results[k].items() if m != "examples"}
           for k in ("before", "after")}, probe, path)


if __name__ == "__main__":
    main()

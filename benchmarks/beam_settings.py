"""The search settings of a trained model, chosen on the valid split.

Early stopping picks the checkpoint with greedy search; the test evaluation and
the export then search with beam 4 and the GNMT length penalty 0.6, settings
taken from the Transformer papers, not from this data. At the low-resource
cell's best checkpoint beam 4 scored below greedy on valid (6.80 against
7.33 BLEU). This script translates the whole valid split with each beam size
and length penalty of a grid and reports, per setting, BLEU, chrF, the
length ratio (hypothesis over reference words, sacreBLEU's) and the
seconds (a setting's first call includes its tracing), and the setting with the best valid BLEU. The test split is never
read.

    python benchmarks/beam_settings.py --model-file runs/recipe/CELL/model.keras \
        --vocab runs/recipe/CELL/vocab.model
    python benchmarks/beam_settings.py --run-dir runs/recipe/CELL   # the same
    python benchmarks/beam_settings.py --run-dir runs/recipe/CELL \
        --average runs/recipe/CELL/best/step-16000,runs/recipe/CELL/checkpoints/ckpt-18000

`--average` scores the mean of the given checkpoints' weights (prefixes of the
run's `best/` or `checkpoints/` files) instead of the file's weights: checkpoint
averaging measured at convergence, on valid.

Results: `benchmarks/results/beam_settings-<date>[-<tag>].json`, with the
machine's matmul rate and load average.
"""

import argparse
import json
import pathlib
import sys

import common

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from keras_attn_zoo.runtime import start_tensorflow  # noqa: E402

start_tensorflow()

import keras  # noqa: E402

from keras_attn_zoo import data as zoo_data  # noqa: E402
from keras_attn_zoo import models  # noqa: E402, F401 (registers the classes a .keras file names)
from keras_attn_zoo.data.vocabulary import load_tokenizer  # noqa: E402
from keras_attn_zoo.evaluation.scores import best_setting  # noqa: E402
from keras_attn_zoo.evaluation.scores import search_grid  # noqa: E402
from keras_attn_zoo.training.averaging import average_checkpoints  # noqa: E402
from keras_attn_zoo import workflow  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", help="a run directory holding model.keras and vocab.model")
    parser.add_argument("--model-file")
    parser.add_argument("--vocab")
    parser.add_argument("--data", default="ding:sentences")
    parser.add_argument("--direction", default="de-en")
    parser.add_argument("--beam-sizes", type=common.int_list, default=[1, 4, 8])
    parser.add_argument("--length-penalties", type=lambda text: [float(v) for v in text.split(",")],
                        default=[0.0, 0.6, 1.0, 1.5])
    parser.add_argument("--limit", type=int, help="the first N valid pairs only")
    parser.add_argument("--average", type=lambda text: text.split(","), default=[],
                        help="comma-separated checkpoint prefixes whose mean is scored")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    if args.run_dir:
        run_dir = pathlib.Path(args.run_dir)
        args.model_file = args.model_file or str(run_dir / "model.keras")
        args.vocab = args.vocab or str(run_dir / "vocab.model")
    if not (args.model_file and args.vocab):
        parser.error("give --run-dir, or --model-file and --vocab")

    run = common.start_run()
    rate = common.matmul_rate(size=1024, repeats=3, chain=4)
    model = keras.saving.load_model(args.model_file, compile=False)
    if args.average:
        average_checkpoints(model, args.average)
    translator = workflow.run_translator(workflow.RunConfig(), model,
                                         load_tokenizer(args.vocab))
    valid = zoo_data.load_pairs(args.data, "valid", args.direction)[: args.limit]
    rows = search_grid(translator, valid, args.beam_sizes, args.length_penalties,
                       log=lambda row: print(json.dumps(row), flush=True))
    best = best_setting(rows)
    print(f"best on {len(valid)} valid pairs: beam {best['beam_size']}, length penalty "
          f"{best['length_penalty']}: BLEU {best['bleu']}, chrF {best['chrf']}")
    name = "beam_settings" + (f"-{args.tag}" if args.tag else "")
    path = common.write_results(name, {
        "model_file": args.model_file, "averaged_checkpoints": args.average,
        "vocab": args.vocab, "data": args.data,
        "split": "valid", "valid_pairs": len(valid), "rows": rows, "best": best,
        "matmul_gflops": round(rate["gflops"], 1),
        "hardware_peak_gflops": rate["hardware_peak_gflops"]}, run=run)
    print(f"results: {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Peak memory and time to the first training step on big parallel files (issue 35).

Makes a synthetic parallel corpus of WMT size itself (a seeded generator: each
line joins ``--sentences-per-line`` Ding training sentences drawn at random, the
German side into ``<corpus-dir>/<lines>.de``, the English side into
``<lines>.en``; never committed) and runs the ``train_wmt.py --data files``
path through ``keras_attn_zoo.workflow`` (``prepare_data``, ``build``,
``train`` with ``--max-steps``, no monitoring, no evaluation, no export) on it,
each run in a fresh child process, for every corpus size and every contender:

* a contender is a copy of the package (``name=DIR``: ``DIR`` goes first on the
  child's ``PYTHONPATH``); e.g. ``before=/tmp/kaz-before`` (the package of the
  commit before the change, ``git archive e2713a5 keras_attn_zoo``) and
  ``after=.`` (this checkout);
* peak RSS: the child's ``ru_maxrss`` at its end (data preparation, the
  vocabulary, the model, the training steps);
* peak RSS at the end of each phase (imported, data prepared, model built),
  to see which one sets the peak;
* time to the first step: from the child's start (before TensorFlow is
  imported) to the end of training step 1, with the phases in between, in wall
  seconds and in the CPU seconds the process used (its threads together: on a
  shared machine a bound of the wall seconds it would take alone), with the
  load average at step 1;
* the seconds the count of pairs dropped as too long takes when the results
  read it after training (a streamed corpus is counted then);
* tokens/s: the ``Trainer``'s own rate over steps ``log_every + 1`` to
  ``2 * log_every`` (51-100: the first step's tracing left out), with the
  number of target tokens per step.

The machine's matmul rate and the load average go beside the figures (the
machine is shared; the contenders alternate per size).

Three other measurements replace the runs: ``--throughput STEPS`` (training
tokens/s on the same batches streamed from the files and from their pairs in a
list, alternating, per wall and per CPU second), ``--pipeline-only BATCHES``
(the input pipeline alone, files against a list) and ``--vocabulary-samples``
(SentencePiece's CPU seconds and pieces per test text for samples of a real
corpus, to choose the streamed vocabulary's sample size).

Usage:
    python benchmarks/streaming_data.py --contenders before=/tmp/kaz-before,after=.
    python benchmarks/streaming_data.py --sizes 1000000 --throughput 20  # after a run
    python benchmarks/streaming_data.py --vocabulary-samples 100000,300000
    python benchmarks/streaming_data.py --smoke   # 20,000 lines, 4 steps: it runs
"""

from __future__ import annotations

import time

_CHILD_STARTED = time.monotonic()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import common  # noqa: E402

_CHILD_MARKER = "@@streaming-child@@"
CORPUS_SEED = 35


# ---- the synthetic corpus --------------------------------------------------------------

def make_corpus(directory, lines, sentences_per_line=2, seed=CORPUS_SEED):
    """Writes ``<lines>.de`` / ``<lines>.en`` (once; a stamp file says they are whole)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    german_path, english_path = directory / f"{lines}.de", directory / f"{lines}.en"
    stamp = directory / f"{lines}.done"
    wanted = {"lines": lines, "sentences_per_line": sentences_per_line, "seed": seed}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return german_path, english_path
    from keras_attn_zoo.data import ding_corpus

    sentences = ding_corpus(split="train", kind="sentences", direction="de-en")
    generator = random.Random(seed)
    with open(german_path, "w", encoding="utf-8") as german, \
            open(english_path, "w", encoding="utf-8") as english:
        for _ in range(lines):
            drawn = [sentences[generator.randrange(len(sentences))]
                     for _ in range(sentences_per_line)]
            german.write(" ".join(de for de, _ in drawn) + "\n")
            english.write(" ".join(en for _, en in drawn) + "\n")
    stamp.write_text(json.dumps(wanted))
    return german_path, english_path


# ---- one run, in a child process -------------------------------------------------------

def cpu_seconds():
    """CPU seconds this process has used (all its threads): on a shared machine, a bound of
    what its wall seconds would be alone (equal for one busy thread, less for more)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 1)


class StepClock:
    """A monitor callback: the time (wall and CPU) of each step's end, the load average at
    step 1, and the Trainer's tok/s logs."""

    def __init__(self):
        self.step_ends = {}
        self.step_cpu = {}
        self.rates = {}
        self.load_at_first_step = None

    def on_step_end(self, trainer, step, logs):
        del trainer
        self.step_ends[step] = time.monotonic() - _CHILD_STARTED
        self.step_cpu[step] = cpu_seconds()
        if self.load_at_first_step is None:
            self.load_at_first_step = common.load_average()
        if "tok/s" in logs:
            self.rates[step] = logs["tok/s"]


class LineClock:
    """Stdout that also notes when the workflow printed its ``data:``, ``model:`` and
    ``pipeline:`` lines (the ends of the corpus check, the model build and the counting pass)."""

    PREFIXES = ("data:", "model:", "pipeline:")

    def __init__(self, stream):
        self.stream = stream
        self.times = {}

    def write(self, text):
        for prefix in self.PREFIXES:
            key = prefix.rstrip(":") + "_line"
            if text.startswith(prefix) and key not in self.times:
                self.times[key] = round(time.monotonic() - _CHILD_STARTED, 1)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def child_run(source, target, output_dir, max_steps, preset, batch_tokens, seed, count=True):
    """The workflow's data preparation, build and training; figures as a dict.

    ``count``: read the count of the pairs dropped as too long after training, as the
    workflow's results do (a pass over a streamed corpus).
    """
    lines = sys.stdout = LineClock(sys.stdout)
    from keras_attn_zoo.runtime import start_tensorflow

    start_tensorflow()
    from keras_attn_zoo import workflow
    from keras_attn_zoo.training import select_strategy

    phases = {"imported": time.monotonic() - _CHILD_STARTED}
    peaks = {"imported": common.peak_rss_mb()}
    cpu = {"imported": cpu_seconds()}
    config = workflow.RunConfig(
        data="files", train_src=str(source), train_tgt=str(target), preset=preset,
        max_steps=max_steps, batch_tokens=batch_tokens, no_monitoring=True,
        no_export=True, output_dir=str(output_dir), seed=seed, quiet=True,
        checkpoint_every=0)
    config.learning_rate, config.warmup_steps = 2e-3, 100  # the recipe's small preset
    workflow.seed_everything(config.seed)
    corpus, tokenizer = workflow.prepare_data(config)
    phases["data_prepared"] = time.monotonic() - _CHILD_STARTED
    peaks["data_prepared"] = common.peak_rss_mb()
    cpu["data_prepared"] = cpu_seconds()
    strategy = select_strategy(config.strategy)
    model, optimizer = workflow.build(config, tokenizer, strategy)
    phases["model_built"] = time.monotonic() - _CHILD_STARTED
    peaks["model_built"] = common.peak_rss_mb()
    cpu["model_built"] = cpu_seconds()
    clock = StepClock()
    summary, training_data = workflow.train(config, model, optimizer, strategy, corpus,
                                            tokenizer, monitors=[clock])
    # The count of the pairs dropped as too long, as `training_run` reads it for the
    # results (a streamed corpus is counted then, after training).
    started = time.monotonic()
    dropped_too_long = training_data.dropped_too_long if count else None
    count_seconds = time.monotonic() - started if count else None
    steady_step = max(clock.rates) if clock.rates else None
    return {
        "phases_seconds": {**{k: round(v, 1) for k, v in phases.items()}, **lines.times},
        "peak_rss_mb_by_phase_end": {k: round(v, 1) for k, v in peaks.items()},
        "cpu_seconds_by_phase_end": cpu,
        "seconds_to_first_step": round(clock.step_ends[1], 1),
        "cpu_seconds_to_first_step": clock.step_cpu[1],
        "load_average_at_first_step": clock.load_at_first_step,
        "seconds_to_last_step": round(clock.step_ends[max(clock.step_ends)], 1),
        "steps": summary.steps,
        "target_tokens": summary.target_tokens,
        "target_tokens_per_second_all_steps": round(summary.target_tokens_per_second, 1),
        "steady_tokens_per_second": (round(clock.rates[steady_step], 1)
                                     if steady_step else None),
        "steady_window_last_step": steady_step,
        "pairs_dropped_too_long": dropped_too_long,
        "seconds_to_count_after_training": count_seconds and round(count_seconds, 1),
        "peak_rss_mb": round(common.peak_rss_mb(), 1),
    }


def child_pipeline(source, target, vocabulary, batches, rounds, batch_tokens, seed):
    """The input pipeline alone: the same stream from the files and from a list in memory.

    Both go through ``data.training_stream`` (the list is what ``--data files`` gave
    ``make_dataset`` before, read by ``read_parallel_files``), so the difference is the
    reading from disk. Rounds alternate the two (A B, B A, ...); each round times the first
    batch (the shuffle buffer's filling) and then ``batches`` more, counting their target
    tokens.
    """
    from keras_attn_zoo.runtime import start_tensorflow

    start_tensorflow()
    from keras_attn_zoo import data as zoo_data

    tokenizer = zoo_data.load_tokenizer(vocabulary)
    contenders = {"files": zoo_data.open_parallel_files(source, target),
                  "list": zoo_data.read_parallel_files(source, target)[0]}
    timings = {name: {"first_batch_seconds": [], "tokens_per_second": []}
               for name in contenders}
    for round_index in range(rounds):
        names = list(contenders) if round_index % 2 == 0 else list(contenders)[::-1]
        for name in names:
            stream = zoo_data.without_autotune_thread(zoo_data.training_stream(
                contenders[name], tokenizer, batch_tokens=batch_tokens, max_length=128,
                seed=seed + round_index))
            iterator = iter(stream)
            started = time.perf_counter()
            next(iterator)
            first = time.perf_counter() - started
            tokens, started = 0, time.perf_counter()
            for _ in range(batches):
                _, labels = next(iterator)
                tokens += int(zoo_data.count_target_tokens(labels))
            timings[name]["first_batch_seconds"].append(round(first, 2))
            timings[name]["tokens_per_second"].append(
                round(tokens / (time.perf_counter() - started), 1))
            del iterator
    import statistics

    medians = {name: statistics.median(value["tokens_per_second"])
               for name, value in timings.items()}
    return {"pipeline_rounds": timings, "median_tokens_per_second": medians,
            "files_over_list": round(medians["files"] / medians["list"], 3),
            "peak_rss_mb": round(common.peak_rss_mb(), 1)}


def child_throughput(source, target, vocabulary, steps, warmup, rounds, preset,
                     batch_tokens, seed):
    """Training tokens/s on the same batches read from the files and from a list in memory.

    One model and ``Trainer`` (the workflow's, as :func:`child_run` builds them) train on
    ``model.training_data`` of each: the streamed files (``open_parallel_files``) and their
    pairs in a list (``read_parallel_files``, the in-memory path). Round ``r`` reads epoch
    ``r``'s stream of both (the same seed and buffer, so the same batches: the target tokens
    of each pair of measurements must be equal), alternating which goes first; each trains
    ``warmup`` steps (tracing) and then ``steps`` timed ones.
    """
    from keras_attn_zoo.runtime import start_tensorflow

    start_tensorflow()
    import statistics

    from keras_attn_zoo import data as zoo_data
    from keras_attn_zoo import workflow
    from keras_attn_zoo.training import Trainer, select_strategy

    tokenizer = zoo_data.load_tokenizer(vocabulary)
    config = workflow.RunConfig(data="files", train_src=str(source), train_tgt=str(target),
                                preset=preset, batch_tokens=batch_tokens, seed=seed)
    config.learning_rate, config.warmup_steps = 2e-3, 100  # as child_run
    workflow.seed_everything(config.seed)
    strategy = select_strategy(config.strategy)
    model, optimizer = workflow.build(config, tokenizer, strategy)
    trainer = Trainer(model, optimizer, strategy, label_smoothing=config.label_smoothing,
                      checkpoint_every=0, jit_compile=workflow.trainer_xla(config))
    contenders = {"files": zoo_data.open_parallel_files(source, target),
                  "list": zoo_data.read_parallel_files(source, target)[0]}
    data = {name: model.training_data(pairs, tokenizer, batch_tokens=batch_tokens,
                                      max_length=config.max_length, seed=seed, work_dir=None,
                                      fixed_shapes=trainer.jit_compile)
            for name, pairs in contenders.items()}
    timings = {name: {"tokens_per_second": [], "tokens_per_cpu_second": [],
                      "target_tokens": []} for name in contenders}
    for round_index in range(rounds):
        names = list(contenders) if round_index % 2 == 0 else list(contenders)[::-1]
        for name in names:
            dataset = zoo_data.without_autotune_thread(data[name].make_dataset(round_index))
            batches = iter(strategy.experimental_distribute_dataset(dataset))
            for _ in range(warmup):
                trainer.train_on_batch(*next(batches))
            tokens, started, cpu_started = 0, time.perf_counter(), cpu_seconds()
            for _ in range(steps):
                tokens += int(trainer.train_on_batch(*next(batches))["tokens"])
            timings[name]["tokens_per_second"].append(
                round(tokens / (time.perf_counter() - started), 1))
            timings[name]["tokens_per_cpu_second"].append(
                round(tokens / max(cpu_seconds() - cpu_started, 0.1), 1))
            timings[name]["target_tokens"].append(tokens)
            del batches
    medians = {name: statistics.median(value["tokens_per_second"])
               for name, value in timings.items()}
    cpu_medians = {name: statistics.median(value["tokens_per_cpu_second"])
                   for name, value in timings.items()}
    # Each round's own ratio: the two contenders ran back to back, so the
    # machine's drift across rounds cancels; their geometric mean is the estimate.
    paired = {key: [round(files / listed, 4) for files, listed in zip(
        timings["files"][key], timings["list"][key])]
        for key in ("tokens_per_second", "tokens_per_cpu_second")}
    return {"throughput_rounds": timings, "median_tokens_per_second": medians,
            "median_tokens_per_cpu_second": cpu_medians,
            "paired_files_over_list": paired,
            "paired_files_over_list_geometric_mean": {
                key: round(statistics.geometric_mean(values), 4)
                for key, values in paired.items()},
            "same_batches": timings["files"]["target_tokens"] == timings["list"]["target_tokens"],
            "files_over_list": round(medians["files"] / medians["list"], 3),
            "files_over_list_per_cpu_second": round(cpu_medians["files"] / cpu_medians["list"],
                                                    3),
            "peak_rss_mb": round(common.peak_rss_mb(), 1)}


def child_phases(source, target, output_dir, preset, batch_tokens, seed):
    """The workflow's steps to training step 1 one by one, wall and CPU seconds each.

    The same steps as :func:`child_run` (``prepare_data``, ``build``, ``training_data``, the
    ``Trainer``'s epoch dataset and first step), with the vocabulary's sample and its
    SentencePiece training, and the first batch and the step's tracing, timed apart.
    """
    rows = []
    clock = [time.monotonic(), cpu_seconds()]

    def phase(name):
        now, cpu = time.monotonic(), cpu_seconds()
        rows.append({"phase": name, "wall_seconds": round(now - clock[0], 1),
                     "cpu_seconds": round(cpu - clock[1], 1),
                     "load_average": common.load_average()})
        clock[:] = [now, cpu]

    from keras_attn_zoo.runtime import start_tensorflow

    start_tensorflow()
    from keras_attn_zoo import data as zoo_data
    from keras_attn_zoo import workflow
    from keras_attn_zoo.data import vocabulary
    from keras_attn_zoo.training import Trainer, select_strategy

    phase("import")
    config = workflow.RunConfig(
        data="files", train_src=str(source), train_tgt=str(target), preset=preset,
        batch_tokens=batch_tokens, no_monitoring=True, output_dir=str(output_dir),
        seed=seed, checkpoint_every=0)
    config.learning_rate, config.warmup_steps = 2e-3, 100  # as child_run
    workflow.seed_everything(config.seed)
    corpus = workflow.load_corpus(config)
    phase("open the files (before: count lines, check UTF-8)")
    size = workflow.STREAMED_VOCABULARY_SAMPLE
    if hasattr(corpus.train, "sample_texts"):
        sample = corpus.train.sample_texts(size, seed=0)
    else:
        sample = vocabulary.reservoir_sample_chunks(vocabulary._text_chunks(corpus.train),
                                                    size, seed=0)
    phase(f"vocabulary sample ({size} texts)")
    path = pathlib.Path(output_dir) / "vocab.model"
    vocabulary.train_sentencepiece(sample, path, vocab_size=config.vocab_size,
                                   max_sentences=size)
    tokenizer = zoo_data.load_tokenizer(path)
    phase("SentencePiece training, tokenizer")
    strategy = select_strategy(config.strategy)
    model, optimizer = workflow.build(config, tokenizer, strategy)
    phase("model")
    data = model.training_data(corpus.train, tokenizer, batch_tokens=batch_tokens,
                               max_length=config.max_length, seed=seed, work_dir=None,
                               fixed_shapes=workflow.trainer_xla(config))
    phase("training_data (an unshuffled first batch)")
    trainer = Trainer(model, optimizer, strategy, label_smoothing=config.label_smoothing,
                      checkpoint_every=0, jit_compile=workflow.trainer_xla(config))
    batches = iter(strategy.experimental_distribute_dataset(
        trainer.epoch_dataset(data.make_dataset, 0)))
    phase("Trainer, epoch dataset and iterator (tf.data graphs)")
    batch = next(batches)
    phase("first batch (shuffle buffer filled, tokenized, bucketed)")
    trainer.train_on_batch(*batch)
    phase("training step 1 (tracing)")
    return {"phases": rows, "cpu_seconds_to_first_step": round(sum(
        row["cpu_seconds"] for row in rows), 1), "peak_rss_mb": round(common.peak_rss_mb(), 1)}


def child_vocabulary(sizes, data_spec, vocab_size, seed):
    """SentencePiece on samples of ``sizes`` texts of a real corpus (``data_spec``'s training
    split, ``train_sentencepiece``'s reservoir sample): CPU seconds of the training and the
    pieces per text of the corpus' test split (what a smaller sample costs the vocabulary)."""
    import tempfile

    from keras_attn_zoo.data import load_pairs
    from keras_attn_zoo.data.vocabulary import (load_tokenizer, sentencepiece_processor,
                                                train_sentencepiece)

    train = load_pairs(data_spec, "train")
    test = [text for pair in load_pairs(data_spec, "test") for text in pair]
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for size in sizes:
            path = pathlib.Path(directory) / f"{size}.model"
            started, cpu_started = time.monotonic(), cpu_seconds()
            train_sentencepiece(train, path, vocab_size=vocab_size, max_sentences=size,
                                seed=seed)
            rows.append({"texts": size, "cpu_seconds": round(cpu_seconds() - cpu_started, 1),
                         "wall_seconds": round(time.monotonic() - started, 1),
                         "load_average_after": common.load_average()})
            processor = sentencepiece_processor(load_tokenizer(path))
            rows[-1]["pieces_per_test_text"] = round(
                sum(map(len, processor.encode(test))) / len(test), 4)
            print(json.dumps(rows[-1]), flush=True)
    return {"data": data_spec, "training_texts": 2 * len(train), "test_texts": len(test),
            "vocab_size": vocab_size, "samples": rows}


def run_child(code_dir, **kwargs):
    """Runs :func:`child_run` with ``code_dir`` first on the path; its dict (or the error)."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                       PYTHONPATH=os.pathsep.join([str(pathlib.Path(code_dir).resolve()),
                                                   os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, __file__, "--child", json.dumps(kwargs, default=str)]
    started = time.monotonic()
    completed = subprocess.run(command, capture_output=True, text=True, env=environment)
    wall = round(time.monotonic() - started, 1)
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith(_CHILD_MARKER):
            result = json.loads(line[len(_CHILD_MARKER):])
            result["child_wall_seconds"] = wall
            result["child_stdout_tail"] = completed.stdout.splitlines()[-6:-1]
            return result
    return {"error": common.child_error(completed.stderr),
            "returncode": completed.returncode, "child_wall_seconds": wall}


def first_size_measurement(args, contenders, measurement, **kwargs):
    """A child measurement on the first size's corpus with the first contender's code and
    the vocabulary of its earlier run (``--throughput``, ``--pipeline-only``); its row."""
    size = args.sizes[0]
    source, target = make_corpus(args.corpus_dir, size, args.sentences_per_line)
    name, code_dir = next(iter(contenders.items()))
    vocabulary = pathlib.Path(args.corpus_dir) / f"run-{name}-{size}" / "vocab.model"
    load_before = common.load_average()
    result = run_child(code_dir, source=source, target=target, vocabulary=vocabulary,
                       batch_tokens=args.batch_tokens, seed=args.seed, **kwargs)
    row = {"contender": name, "code_dir": code_dir, "lines": size, "measurement": measurement,
           "load_average_before": load_before, "load_average_after": common.load_average(),
           **result}
    print(json.dumps(row), flush=True)
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=common.int_list, default=[1_000_000, 4_500_000],
                        help="corpus sizes in lines (default 1000000,4500000)")
    parser.add_argument("--contenders", default="after=.",
                        help="name=DIR,... package copies to run (default after=.)")
    parser.add_argument("--corpus-dir", default="/tmp/kaz_streaming",
                        help="where the synthetic corpora go (default /tmp/kaz_streaming)")
    parser.add_argument("--sentences-per-line", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-tokens", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default="", help="suffix of the results file name")
    parser.add_argument("--pipeline-only", type=int, default=0, metavar="BATCHES",
                        help="instead of training: the input pipeline alone on the first "
                             "size, from the files and from a list (BATCHES batches per "
                             "round, 4 rounds), with the vocabulary of an earlier run")
    parser.add_argument("--throughput", type=int, default=0, metavar="STEPS",
                        help="instead of the runs: training tokens/s on the same batches from "
                             "the files and from a list in memory, on the first size (STEPS "
                             "timed steps per round and contender after --warmup, "
                             "--rounds rounds), with the vocabulary of an earlier run")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--phases", action="store_true",
                        help="instead of training: the steps to training step 1 timed one "
                             "by one, for every size and contender")
    parser.add_argument("--vocabulary-samples", type=common.int_list, default=[],
                        help="instead of the runs: SentencePiece's CPU seconds and pieces "
                             "per test text for samples of these many texts of "
                             "--vocabulary-data")
    parser.add_argument("--vocabulary-data", default="ding:all")
    parser.add_argument("--no-count", action="store_true",
                        help="do not read the count of pairs dropped as too long after "
                             "training (a pass over a streamed corpus)")
    parser.add_argument("--smoke", action="store_true",
                        help="20,000 lines, 4 steps of the tiny preset: a check that it runs")
    parser.add_argument("--merge", type=common.str_list, default=[],
                        help="result files of earlier runs of this script whose runs join "
                             "this one's (each run keeps its own load averages and date)")
    parser.add_argument("--output-dir", default=str(common.RESULTS_DIR))
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.max_steps, args.preset = [20_000], 4, "tiny"
    return args


def main():
    args = parse_args()
    if args.child:
        kwargs = json.loads(args.child)
        child = (child_phases if kwargs.pop("phases", False) else
                 child_vocabulary if "data_spec" in kwargs else
                 child_throughput if "warmup" in kwargs else
                 child_pipeline if "vocabulary" in kwargs else child_run)
        result = child(**kwargs)
        print(_CHILD_MARKER + json.dumps(result), flush=True)
        return

    run = common.start_run()
    contenders = dict(item.split("=", 1) for item in common.str_list(args.contenders))
    merged = []
    for path in args.merge:
        earlier = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        for row in earlier["runs"]:
            merged.append({**row, "from_results_file": str(path),
                           "run_date": earlier.get("date"),
                           "run_matmul_gflops_float32": earlier["machine"].get(
                               "matmul_gflops_float32")})
    machine = {"matmul_gflops_float32": common.matmul_rate()}
    print(f"matmul rate: {machine['matmul_gflops_float32']}", flush=True)
    rows = list(merged)
    if args.vocabulary_samples:
        name, code_dir = next(iter(contenders.items()))
        load_before = common.load_average()
        result = run_child(code_dir, sizes=args.vocabulary_samples,
                           data_spec=args.vocabulary_data, vocab_size=8000, seed=args.seed)
        rows.append({"contender": name, "code_dir": code_dir,
                     "measurement": "vocabulary sample size",
                     "load_average_before": load_before,
                     "load_average_after": common.load_average(), **result})
        print(json.dumps(rows[-1]), flush=True)
        args.sizes = []
    if args.throughput:
        rows.append(first_size_measurement(
            args, contenders, "training tokens/s, files against a list",
            steps=args.throughput, warmup=args.warmup, rounds=args.rounds,
            preset=args.preset))
        args.sizes = []
    if args.pipeline_only:
        rows.append(first_size_measurement(args, contenders, "input pipeline only",
                                           batches=args.pipeline_only, rounds=4))
        args.sizes = []
    for size in args.sizes:
        started = time.monotonic()
        source, target = make_corpus(args.corpus_dir, size, args.sentences_per_line)
        print(f"corpus {size} lines: {source} ({source.stat().st_size / 1e6:.0f} MB), "
              f"{target} ({target.stat().st_size / 1e6:.0f} MB), made or found in "
              f"{time.monotonic() - started:.0f} s", flush=True)
        names = list(contenders)
        if args.sizes.index(size) % 2:  # alternate who goes first
            names.reverse()
        for name in names:
            output_dir = pathlib.Path(args.corpus_dir) / f"run-{name}-{size}"
            subprocess.run(["rm", "-rf", str(output_dir)], check=True)
            load_before = common.load_average()
            if args.phases:
                result = run_child(contenders[name], source=source, target=target,
                                   output_dir=output_dir, preset=args.preset,
                                   batch_tokens=args.batch_tokens, seed=args.seed,
                                   phases=True)
            else:
                result = run_child(contenders[name], source=source, target=target,
                                   output_dir=output_dir, max_steps=args.max_steps,
                                   preset=args.preset, batch_tokens=args.batch_tokens,
                                   seed=args.seed, count=not args.no_count)
            row = {"contender": name, "code_dir": contenders[name], "lines": size,
                   "source_bytes": source.stat().st_size,
                   "target_bytes": target.stat().st_size,
                   "load_average_before": load_before,
                   "load_average_after": common.load_average(), **result}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "child_stdout_tail"}),
                  flush=True)
    common.print_table(rows, [
        ("contender", "code", ""), ("lines", "lines", ","),
        ("peak_rss_mb", "peak RSS MiB", ".0f"),
        ("seconds_to_first_step", "s to step 1", ".1f"),
        ("steady_tokens_per_second", "tok/s 51-100", ".0f"),
    ])
    results = {
        "settings": {k: v for k, v in vars(args).items() if k != "child"},
        "corpus": f"{args.sentences_per_line} Ding training sentences per line, "
                  f"random.Random({CORPUS_SEED})",
        "machine": machine,
        "runs": rows,
    }
    name = "streaming_data" + (f"-{args.tag}" if args.tag else "")
    path = common.write_results(name, results, args.output_dir, smoke=args.smoke, run=run)
    print(f"results: {path}")


if __name__ == "__main__":
    main()

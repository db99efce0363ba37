"""The train -> evaluate -> export workflow behind `recipes/train_wmt.py`.

Kept in the package (not in the recipe) so the leaderboard, the benchmarks and
the tests run exactly the code users run.

``--model eager_translator`` (Press & Smith, 2018) takes its own data path: the
training pairs are tokenized, word-aligned with eflomal (links cached under
``<output_dir>/alignments``) and made eager feasible (``data.eager``); the ε
share is printed and saved as ``epsilon_proportion``. It trains through the
same ``Trainer`` on per-sentence batches (``make_eager_dataset``), or with
``--eager-aligned-batching`` on the paper's aligned stream, and is evaluated and
exported through the same ``Translator`` as every model.

Model options that act during training reach the loop through the model's own
hooks (``ZooModel.training_callbacks`` and ``wrap_optimizer``), and the model's
``max_length`` caps the training pairs as ``--max-length`` does, so the
workflow needs no model names for them; options that could not act in the run
are refused before training, naming the option.
"""

import dataclasses
import json
import os
import pathlib
import time

import keras

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.data.vocabulary import load_tokenizer
from keras_attn_zoo.data.vocabulary import train_sentencepiece
from keras_attn_zoo.data.vocabulary import vocabulary_size
from keras_attn_zoo.evaluation.scores import corpus_scores
from keras_attn_zoo.models import build_model
from keras_attn_zoo.models import parse_model_options
from keras_attn_zoo.training import InverseSquareRootSchedule
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training import select_strategy
from keras_attn_zoo.training.callbacks import default_callbacks
from keras_attn_zoo.training.strategy import is_chief
from keras_attn_zoo.training.seeding import seed_everything

MIXED_PRECISION_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16",
                            "fp16": "mixed_float16"}
EAGER_MODEL = "eager_translator"


def model_options(args):
    """The builder arguments of `--model-options` (absent in older Namespaces)."""
    return parse_model_options(getattr(args, "model_options", ""))


@dataclasses.dataclass
class Corpus:
    """Train/valid/test `(source, target)` pairs and a description of them."""

    train: list
    valid: list
    test: list
    description: str
    dropped_empty: int = 0


def load_corpus(args):
    """Resolves `--data` (and the file flags) into a `Corpus`."""
    if args.data == "files":
        if args.train_src is None or args.train_tgt is None:
            raise SystemExit("--data files needs --train-src and --train-tgt.")
        splits, dropped = {}, 0
        for split in ("train", "valid", "test"):
            src, tgt = getattr(args, f"{split}_src"), getattr(args, f"{split}_tgt")
            if src is None or tgt is None:
                splits[split] = []
                continue
            splits[split], n_dropped = zoo_data.read_parallel_files(src, tgt)
            dropped += n_dropped
        return Corpus(splits["train"], splits["valid"], splits["test"],
                      f"files:{args.train_src}", dropped)
    if args.data in ("ding", "ding:all"):
        # Evaluation is always on whole sentences. "ding" trains on them too:
        # a 20-minute CPU budget sees each sentence a few times, while the
        # 320,000 dictionary phrases of "ding:all" need hours to pay off.
        kind = "sentences" if args.data == "ding" else "all"
        train = zoo_data.load_pairs(f"ding:{kind}", "train", args.direction)
        valid = zoo_data.load_pairs("ding:sentences", "valid", args.direction)
        test = zoo_data.load_pairs("ding:sentences", "test", args.direction)
        return Corpus(train, valid, test, f"ding (train: {kind}, eval: sentences)")
    spec = zoo_data.parse_data_spec(args.data)
    splits = {}
    for split in ("train", "valid", "test"):
        splits[split] = zoo_data.load_pairs(spec, split, args.direction)
    return Corpus(splits["train"], splits["valid"], splits["test"], str(spec))


def run_name(args):
    data = args.data.replace(":", "-").replace("/", "-")
    return args.name or f"{args.model}-{args.preset}-{data}-{args.direction}"


def _sentencepiece(corpus, path, vocab_size):
    if not path.exists():
        train_sentencepiece(corpus.train, path, vocab_size=vocab_size)
    return load_tokenizer(path)


def _eager_special_ids(model, sentencepiece_size):
    """The model's start, ε and source-pad ids, refused if they are real pieces.

    The recipe's eager vocabulary is the SentencePiece pieces plus three
    appended ids; ``start_id``/``epsilon_id``/``source_pad_id`` options may
    permute those three but not take a piece's id (its text would be read as
    a special token in training and stripped from every translation).
    """
    from keras_attn_zoo.data.eager import EagerSpecialIds
    from keras_attn_zoo.data.eager import eager_special_ids

    appended = set(eager_special_ids(sentencepiece_size))
    taken = {name: value for name, value in model.special_ids.items()
             if value not in appended}
    if taken:
        raise SystemExit(
            f"--model-options {taken}: in this recipe the eager special ids must be "
            f"the three ids after the {sentencepiece_size} SentencePiece pieces, "
            f"{sorted(appended)}; lower ids are pieces of the vocabulary.")
    return EagerSpecialIds(**model.special_ids)


def _eager_training_pairs(args, corpus, tokenizer, output_dir, model):
    """Eager-feasible id pairs of the training pairs, and what to report about them.

    The targets start with the model's ``start_pads`` start tokens and use its
    special ids, the ones its decoding rules expect. eflomal aligns the
    SentencePiece pieces (the links are cached under
    ``output_dir/alignments``, so a restarted run reuses them); pairs whose
    eager length (start pads, ε, source pads and EOS included) exceeds
    ``--max-length`` are dropped. A batch holds ``--batch-tokens`` divided by
    the mean eager length sentences.
    """
    from keras_attn_zoo.data.eager import make_eager_id_pairs

    cache_dir = output_dir / "alignments"
    special_ids = _eager_special_ids(model, vocabulary_size(tokenizer))
    id_pairs, epsilon = make_eager_id_pairs(
        corpus.train, tokenizer, aligner="eflomal", cache_dir=cache_dir,
        start_pads=model.zoo_config["start_pads"], special_ids=special_ids)
    kept = [pair for pair in id_pairs if len(pair[0]) <= args.max_length]
    if not kept:
        raise SystemExit(f"No eager training pair has at most --max-length="
                         f"{args.max_length} steps.")
    mean_length = sum(len(source) for source, _ in kept) / len(kept)
    batch_size = max(1, int(args.batch_tokens // max(mean_length, 1.0)))
    info = {
        "epsilon_proportion": round(epsilon["proportion"], 4),
        "epsilon_statistics": epsilon,
        "alignments": f"eflomal (cached in {cache_dir})",
    }
    if getattr(args, "eager_aligned_batching", False):
        info.update(eager_batching="aligned", eager_stream_columns=_aligned_columns(
            kept, args.batch_tokens))
    else:
        info.update(eager_batching="per-sentence", eager_batch_sentences=batch_size)
    print(f"eager data: {len(kept)} pairs kept, {len(id_pairs) - len(kept)} dropped as "
          f"longer than {args.max_length} steps; epsilon proportion "
          f"{epsilon['proportion']:.2%} ({epsilon['epsilons']} of {epsilon['tokens']} "
          f"target tokens); eflomal links cached in {cache_dir}")
    return kept, len(id_pairs) - len(kept), batch_size, info


def _aligned_columns(id_pairs, batch_tokens):
    """Columns of the aligned stream: ``batch_tokens // bptt`` (at most the corpus tokens)."""
    from keras_attn_zoo.data.eager import DEFAULT_BPTT

    total = sum(len(target) for _, target in id_pairs)
    return max(1, min(batch_tokens // DEFAULT_BPTT, total))


def _train_eager_aligned(model, optimizer, id_pairs, args, budget):
    """``--eager-aligned-batching``: the paper's aligned stream, LSTM state carried.

    Uses ``train_on_aligned_stream`` (truncated BPTT of ``DEFAULT_BPTT`` steps,
    gradient clipping 0.25) with ``--batch-tokens // bptt`` columns, one call
    per epoch, so ``--epochs``, ``--max-steps`` and the time budget (checked
    between windows) apply. Single device only, and without the ``Trainer``'s
    checkpoints, resumption and TensorBoard logs.
    """
    from keras_attn_zoo.data.eager import DEFAULT_BPTT
    from keras_attn_zoo.data.eager import make_aligned_stream_dataset
    from keras_attn_zoo.models.eager_translator import train_on_aligned_stream
    from keras_attn_zoo.training.trainer import TrainingSummary

    columns = _aligned_columns(id_pairs, args.batch_tokens)
    start = time.monotonic()
    losses, tokens, epochs_completed = [], 0, 0

    def over_time():
        return budget is not None and time.monotonic() - start >= budget

    while args.epochs is None or epochs_completed < args.epochs:
        remaining = None if args.max_steps is None else args.max_steps - len(losses)
        if (remaining is not None and remaining <= 0) or over_time():
            break
        finished = []
        stream = make_aligned_stream_dataset(id_pairs, columns, DEFAULT_BPTT)

        def windows():
            nonlocal tokens
            for inputs, labels in stream:
                if over_time():
                    return
                tokens += int(labels.shape[0] * labels.shape[1])
                yield inputs, labels
            finished.append(True)

        epoch_losses = train_on_aligned_stream(
            model, optimizer, windows(), epochs=1, max_steps=remaining,
            label_smoothing=args.label_smoothing)
        losses += epoch_losses
        if not finished or not epoch_losses:
            break
        epochs_completed += 1
    seconds = time.monotonic() - start
    return TrainingSummary(
        steps=len(losses), epochs_completed=epochs_completed, train_seconds=seconds,
        target_tokens=tokens, target_tokens_per_second=tokens / max(seconds, 1e-9),
        final_loss=losses[-1] if losses else float("nan"), resumed_from_step=0)


def training_length_limit(args, model):
    """``--max-length``, lowered to the model's own ``max_length`` if it has one.

    Longer pairs are dropped (and counted) instead of stopping the run with a
    length error (fixed-size attention tables) or training positions the
    model refuses to translate.
    """
    limit = model.zoo_config.get("max_length")
    return args.max_length if limit is None else min(args.max_length, int(limit))


def training_run(args):
    """Trains, evaluates and exports as the recipe's flags say; returns results."""
    eager = args.model == EAGER_MODEL
    if getattr(args, "eager_aligned_batching", False) and not eager:
        raise SystemExit(f"--eager-aligned-batching applies to --model {EAGER_MODEL} "
                         f"only, not {args.model}.")
    name = run_name(args)
    output_dir = pathlib.Path(args.output_dir or pathlib.Path("runs") / name)
    log_dir = pathlib.Path(args.log_dir or output_dir / "logs")
    export_base = pathlib.Path(args.export_dir or pathlib.Path("saved_models") / name)
    output_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(args.seed)
    keras.mixed_precision.set_global_policy(MIXED_PRECISION_POLICIES[args.mixed_precision])

    corpus = load_corpus(args)
    print(f"data: {corpus.description}: {len(corpus.train)} train, "
          f"{len(corpus.valid)} valid, {len(corpus.test)} test pairs"
          + (f"; {corpus.dropped_empty} empty pairs dropped" if corpus.dropped_empty else ""))
    tokenizer = _sentencepiece(corpus, output_dir / "vocab.model", args.vocab_size)
    vocab = vocabulary_size(tokenizer)

    strategy = select_strategy(args.strategy)
    chief = is_chief(strategy)
    model_vocab = vocab
    if eager:
        from keras_attn_zoo.data.eager import eager_vocabulary_size

        model_vocab = eager_vocabulary_size(vocab)  # + start, epsilon, source pad

    # The model first: its options shape the data (length limit, eager special
    # tokens) and the optimizer, and a bad option fails before any data work.
    with strategy.scope():
        model = build_model(args.model, model_vocab, preset=args.preset,
                            **model_options(args))
        optimizer = model.wrap_optimizer(keras.optimizers.Adam(
            InverseSquareRootSchedule(args.learning_rate, args.warmup_steps),
            beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=None,
        ))
        if args.mixed_precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    params = model.count_params()
    print(f"model: {args.model} preset {args.preset}, {params:,} parameters")
    model_callbacks = model.training_callbacks()
    aligned = eager and getattr(args, "eager_aligned_batching", False)
    if aligned and model_callbacks:
        raise SystemExit("--eager-aligned-batching runs no callbacks, and this "
                         f"model's options need {model_callbacks}.")

    eager_info = {}
    if eager:
        from keras_attn_zoo.data.eager import make_eager_dataset

        eager_pairs, dropped_too_long, eager_batch, eager_info = _eager_training_pairs(
            args, corpus, tokenizer, output_dir, model)

        def make_epoch_dataset(epoch):
            return make_eager_dataset(eager_pairs, eager_batch, seed=args.seed + epoch)
    else:
        max_length = training_length_limit(args, model)
        _, stats = zoo_data.make_dataset(
            corpus.train, tokenizer, batch_tokens=args.batch_tokens,
            max_length=max_length, seed=args.seed,
        )
        limit_note = "" if max_length == args.max_length else " (the model's max_length)"
        if not stats.kept:
            # Trainer would wait forever for a first batch of an empty epoch.
            raise SystemExit(f"No training pair has at most {max_length} pieces"
                             f"{limit_note} on each side.")
        print(f"pipeline: {stats.kept} pairs kept, {stats.dropped_too_long} dropped as "
              f"longer than {max_length} pieces{limit_note}; {stats.target_tokens} "
              "target tokens per epoch")
        dropped_too_long = stats.dropped_too_long

        def make_epoch_dataset(epoch):
            dataset, _ = zoo_data.make_dataset(
                corpus.train, tokenizer, batch_tokens=args.batch_tokens,
                max_length=max_length, seed=args.seed + epoch,
            )
            return dataset

    budget = None if args.time_budget_minutes is None else args.time_budget_minutes * 60
    if aligned:
        if strategy.num_replicas_in_sync > 1:
            raise SystemExit("--eager-aligned-batching trains on one device only.")
        summary = _train_eager_aligned(model, optimizer, eager_pairs, args, budget)
    else:
        monitors = [] if getattr(args, "no_monitoring", False) else default_callbacks(
            model, tokenizer, corpus.valid, every=getattr(args, "eval_every", 500),
            beam_size=args.beam_size, length_penalty=args.length_penalty)
        trainer = Trainer(
            model, optimizer, strategy,
            label_smoothing=args.label_smoothing,
            checkpoint_dir=str(output_dir / "checkpoints"),
            log_dir=str(log_dir),
            checkpoint_every=args.checkpoint_every,
            # The model's own callbacks first: monitors then see this step's state.
            callbacks=model_callbacks + monitors,
        )
        summary = trainer.train(
            make_epoch_dataset, epochs=args.epochs, max_steps=args.max_steps,
            time_budget_seconds=budget, verbose=0 if args.quiet else 1,
        )
    print(f"trained {summary.steps} steps in {summary.train_seconds:.0f} s "
          f"({summary.target_tokens_per_second:.0f} target tokens/s)")

    results = {
        "model": args.model,
        "preset": args.preset,
        "model_options": model_options(args),
        "data": corpus.description,
        "direction": args.direction,
        "params": params,
        "steps": summary.steps,
        "epochs_completed": summary.epochs_completed,
        "train_seconds": round(summary.train_seconds, 1),
        "train_target_tokens_per_second": round(summary.target_tokens_per_second, 1),
        "final_loss": summary.final_loss,
        "resumed_from_step": summary.resumed_from_step,
        "pairs_dropped_too_long": dropped_too_long,
        "log_dir": str(log_dir),
        "export_path": None,
        "results_path": str(output_dir / "results.json"),
        **eager_info,
    }
    if not chief:
        return results

    from keras_attn_zoo.export import Translator
    from keras_attn_zoo.export import export_saved_model

    test = corpus.test if args.eval_limit is None else corpus.test[: args.eval_limit]
    translator = Translator(model, tokenizer, beam_size=args.beam_size,
                            length_penalty=args.length_penalty)
    if test:
        started = time.monotonic()
        hypotheses = translator.translate_texts([s for s, _ in test])
        seconds = time.monotonic() - started
        results.update(corpus_scores(hypotheses, [t for _, t in test]))
        results.update(
            test_pairs=len(test),
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            decode_seconds=round(seconds, 1),
            decode_sentences_per_second=round(len(test) / max(seconds, 1e-9), 2),
            examples=[{"source": s, "reference": t, "translation": h}
                      for (s, t), h in list(zip(test, hypotheses))[:5]],
        )
        print(f"test: BLEU {results['bleu']} chrF {results['chrf']} on {len(test)} "
              f"sentences ({results['sacrebleu_signature']})")
    if not args.no_export:
        card = {k: results.get(k) for k in (
            "model", "preset", "model_options", "data", "direction", "bleu", "chrf",
            "sacrebleu_signature", "params")}
        path = export_saved_model(model, tokenizer, export_base, name=name, model_card=card,
                                  beam_size=args.beam_size,
                                  length_penalty=args.length_penalty)
        results["export_path"] = str(path)
    # The Keras model too: per-layer analyses (recipes/analyze.py --keras-model)
    # need every layer, the SavedModel keeps one alignment. Saved under a
    # temporary name and renamed, like the export.
    keras_path = output_dir / "model.keras"
    model.save(output_dir / "model.tmp.keras")
    os.replace(output_dir / "model.tmp.keras", keras_path)
    results["keras_model_path"] = str(keras_path)
    tmp = output_dir / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, output_dir / "results.json")
    return results

"""Command line of keras-attn-zoo (console script ``keras-attn-zoo``).

    keras-attn-zoo translate --model saved_models/NAME[/VERSION] [--beam 4]
        [--length-penalty 0.6] [--input FILE] [--output FILE] [--batch-size 32]

``translate`` reads UTF-8 lines from ``--input`` (default stdin) and writes exactly one
line per input line, in order, to ``--output`` (default stdout); an empty or
whitespace-only line gives an empty line. Each line is split into sentences
(Moses rules of the ``sentence-splitter`` package for the model's source language),
the sentences are translated as one batch and joined again, so a paragraph on one
line keeps every sentence; ``--no-split`` translates each line as one sentence. Given a model's base directory it loads the
newest version. The model is loaded with ``tf.saved_model.load`` only: any exported
zoo model works, and this package's model code is not imported.

Input policy: the whole input is read and checked before anything is translated; a
line that is not valid UTF-8 is an error naming the line number and byte offset
(exit code 2, nothing written), so a file is never half translated. (The exported
graph itself replaces invalid bytes by U+FFFD instead; the CLI is stricter because
a wrong encoding of a whole file is the usual cause.) Over-long lines (more tokens
than the model's ``max_input_length``) are also an error with exit code 2.

    keras-attn-zoo serve --model saved_models/NAME [--port 8501] [--host 127.0.0.1]

``translate --n-best N`` writes N lines per input line (``LINE ||| TEXT ||| SCORE``,
Marian's format); ``--sampling-topk/--sampling-topp/--sampling-temperature`` with
``--seed`` sample instead of searching; ``--engine ct2`` translates with a
CTranslate2 export made by ``export-ct2``.

    keras-attn-zoo score --model saved_models/NAME --source SRC --target TGT

``score`` writes, per line pair, the total log-probability of the target, a tab and
the log-probability of each target piece and of the final EOS (forced decoding).

    keras-attn-zoo export-ct2 --model runs/NAME --output ct2/NAME [--quantization int8]

``serve`` runs the HTTP server of ``keras_attn_zoo.export.serving`` (TensorFlow
Serving's REST shapes plus a ``:translate`` method and a page at ``/``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from keras_attn_zoo.runtime import start_tensorflow

EXIT_USAGE = 2


class InputError(Exception):
    """Bad input (undecodable or over-long line): exit code 2."""


def read_lines(data: bytes, source_name: str = "<stdin>") -> list[str]:
    """Splits ``data`` into lines (``\\n`` or ``\\r\\n``), decoding each as UTF-8.

    Raises:
        InputError: naming the first line that is not valid UTF-8.
    """
    if not data:
        return []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":  # the final newline ends the last line
        raw_lines.pop()
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise InputError(
                f"{source_name}: line {number} is not valid UTF-8 "
                f"(byte 0x{raw[error.start]:02x} at offset {error.start}); "
                "convert the input to UTF-8, e.g. with iconv."
            ) from None
    return lines


def resolve_model_dir(path) -> pathlib.Path:
    """A version directory, or the newest complete version under a base directory."""
    # Imported here: the input is checked before TensorFlow loads.
    from keras_attn_zoo.export.saved_model import latest_version

    return latest_version(path)


def translate_lines(signature, lines, *, inputs, batch_size=32, progress=None,
                    split_sentences=False, language="en", n_best=False):
    """Translates ``lines`` with an exported text signature, in input order.

    Args:
        signature: ``translate_with_options``, ``translate_n_best`` or ``sample``.
        inputs: the signature's inputs beyond ``text`` (tensors).
        n_best: read ``hypotheses`` / ``hypothesis_scores`` (``translate_n_best``).

    With ``split_sentences`` each line is split into sentences, the sentences are
    translated and joined again, so a paragraph keeps all its sentences (with
    ``n_best``, hypothesis k of a line joins hypothesis k of each of its
    sentences, and its score is their sum). Sentences are sorted by length so
    each batch holds similar lengths.

    Returns:
        One string per line; with ``n_best`` one list of ``(text, score)`` per line.
    """
    import tensorflow as tf

    from keras_attn_zoo.export import sentences as sentence_tools
    from keras_attn_zoo.inference.translator import model_error_message

    sentences, counts = sentence_tools.split_texts(lines, language, split_sentences)
    line_of = [line for line, count in enumerate(counts) for _ in range(count)]
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    results = [None] * len(sentences)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        text = tf.constant([sentences[i].encode("utf-8") for i in chunk], tf.string)
        try:
            result = signature(text=text, **inputs)
        except tf.errors.InvalidArgumentError as error:
            message = model_error_message(error)
            if "Input too long" in message:
                # The graph names the sentence within the batch; map it to the line.
                raise InputError(_name_long_line(message, [line_of[i] for i in chunk])
                                 ) from None
            raise
        if n_best:
            texts, scores = result["hypotheses"].numpy(), result["hypothesis_scores"].numpy()
        else:
            texts, scores = result["translation"].numpy()[:, None], result["score"].numpy()[:, None]
        for i, row_texts, row_scores in zip(chunk, texts, scores):
            # One output line per hypothesis, whatever the model emits.
            results[i] = [(" ".join(t.decode("utf-8", errors="replace").splitlines()),
                           float(score)) for t, score in zip(row_texts, row_scores)]
        if progress is not None:
            progress.update(len(chunk))
    per_line = [[(sentence_tools.join_translations([h[k][0] for h in group]),
                  sum(h[k][1] for h in group)) for k in range(len(group[0]))]
                for group in sentence_tools.regroup(results, counts)]
    return per_line if n_best else [hypotheses[0][0] for hypotheses in per_line]


def _name_long_line(message, chunk_lines):
    """The graph's "sentence K has N tokens ... max_input_length=L" -> the line."""
    import re

    match = re.search(r"sentence (\d+) has (\d+) tokens.*max_input_length=(\d+)", message)
    if not match:
        return message
    index, length, limit = (int(group) for group in match.groups())
    line = chunk_lines[index] + 1 if index < len(chunk_lines) else "?"
    return (f"line {line} is too long: a sentence of {length} tokens (pieces + EOS); "
            f"the model accepts at most max_input_length={limit}. Split it "
            f"(inputs are never truncated). The model said: {message}")


def _search_defaults(args):
    """Fills the search options left out with the zoo's defaults. Read here, after
    TensorFlow has started quietly: `keras_attn_zoo.decoding` imports it."""
    from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
    from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY

    if args.beam is None:
        args.beam = DEFAULT_BEAM_SIZE
    if args.length_penalty is None:
        args.length_penalty = DEFAULT_LENGTH_PENALTY


def _translate_command(args) -> int:
    _search_defaults(args)
    problem = _check_translate_options(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.engine == "ct2":
        if not (pathlib.Path(args.model) / "model.bin").is_file():
            print(f"error: {args.model} is not a CTranslate2 export (no model.bin); "
                  "make one with keras-attn-zoo export-ct2", file=sys.stderr)
            return EXIT_USAGE
        if args.n_best is not None or args.no_repeat_ngram_size or _sampling_options(args):
            print("error: --engine ct2 translates with beam search only (no --n-best, "
                  "--no-repeat-ngram-size or sampling here)", file=sys.stderr)
            return EXIT_USAGE
    else:
        try:
            model_dir = resolve_model_dir(args.model)
        except FileNotFoundError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE
    # Read and check the whole input before loading TensorFlow.
    if args.input is None or args.input == "-":
        data, source_name = sys.stdin.buffer.read(), "<stdin>"
    else:
        data, source_name = pathlib.Path(args.input).read_bytes(), args.input
    try:
        lines = read_lines(data, source_name)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE

    if args.engine == "ct2":
        try:
            translations = _translate_ct2(args, lines)
        except InputError as error:
            print(f"error: {source_name}: {error}", file=sys.stderr)
            return EXIT_USAGE
        write_output(translations, args.output)
        return 0

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_attn_zoo.export.saved_model import load_model_card
    from keras_attn_zoo.export.sentences import source_language

    card = load_model_card(model_dir)
    defaults = card.get("defaults", {})
    loaded = tf.saved_model.load(str(model_dir))
    limits = dict(
        max_length_a=tf.constant(args.max_length_a if args.max_length_a is not None
                                 else defaults.get("max_length_a", 2.0), tf.float32),
        max_length_b=tf.constant(args.max_length_b if args.max_length_b is not None
                                 else defaults.get("max_length_b", 10), tf.float32))
    sampling = _sampling_options(args)
    n_best = args.n_best is not None
    if sampling is not None:
        name, inputs = "sample", dict(
            temperature=tf.constant(sampling["temperature"], tf.float32),
            top_k=tf.constant(sampling["top_k"], tf.int32),
            top_p=tf.constant(sampling["top_p"], tf.float32),
            seed=tf.constant(args.seed, tf.int32), **limits)
    else:
        name = "translate_n_best" if n_best or args.no_repeat_ngram_size else \
            "translate_with_options"
        inputs = dict(beam_size=tf.constant(args.beam, tf.int32),
                      length_penalty=tf.constant(args.length_penalty, tf.float32),
                      **limits)
        if name == "translate_n_best":
            inputs.update(num_hypotheses=tf.constant(args.n_best or 1, tf.int32),
                          no_repeat_ngram_size=tf.constant(args.no_repeat_ngram_size,
                                                           tf.int32))
    if name not in loaded.signatures:
        print(f"error: {model_dir} has no {name!r} signature (exported before it "
              "existed); export the model again.", file=sys.stderr)
        return EXIT_USAGE
    progress = None
    if args.input not in (None, "-") and not args.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=None, unit="sent", file=sys.stderr,
                        desc="translate")
    try:
        translations = translate_lines(
            loaded.signatures[name], lines, inputs=inputs, batch_size=args.batch_size,
            progress=progress, split_sentences=not args.no_split,
            language=source_language(card), n_best=n_best)
    except InputError as error:
        print(f"error: {source_name}: {error}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if progress is not None:
            progress.close()
    if n_best:  # Marian's n-best format: one line per hypothesis, best first
        translations = [f"{number} ||| {text} ||| {score:.6f}"
                        for number, hypotheses in enumerate(translations)
                        for text, score in hypotheses]

    write_output(translations, args.output)
    return 0


def _sampling_options(args):
    """The sampling settings, or None when no --sampling-* flag is given."""
    if (args.sampling_topk is None and args.sampling_topp is None
            and args.sampling_temperature is None):
        return None
    return {"top_k": args.sampling_topk or 0,
            "top_p": 1.0 if args.sampling_topp is None else args.sampling_topp,
            "temperature": (1.0 if args.sampling_temperature is None
                            else args.sampling_temperature)}


def _check_translate_options(args):
    """An error message for option combinations that cannot work, or None."""
    if args.batch_size < 1:
        return "--batch-size must be >= 1"
    if args.beam < 1:
        return "--beam must be >= 1"
    if args.n_best is not None and not 1 <= args.n_best <= args.beam:
        return f"--n-best must be in [1, --beam={args.beam}]"
    sampling = _sampling_options(args)
    if sampling is not None:
        if args.n_best is not None or args.no_repeat_ngram_size:
            return "sampling draws one translation: drop --n-best / --no-repeat-ngram-size"
        if sampling["temperature"] <= 0 or not 0 < sampling["top_p"] <= 1 \
                or sampling["top_k"] < 0:
            return ("--sampling-temperature must be > 0, --sampling-topp in (0, 1] "
                    "and --sampling-topk >= 0")
    return None


def write_output(lines, output):
    """Writes ``lines`` to a file atomically (``-``/None: stdout)."""
    payload = "".join(line + "\n" for line in lines).encode("utf-8")
    if output is None or output == "-":
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
    else:
        output = pathlib.Path(output)
        temporary = output.with_name(f".{output.name}.part")
        temporary.write_bytes(payload)
        temporary.replace(output)


def _export_ct2_command(args) -> int:
    from keras_attn_zoo.export.ctranslate2_export import export_ctranslate2_from_run

    try:
        path = export_ctranslate2_from_run(args.model, args.output, args.quantization,
                                           overwrite=args.overwrite)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0


def _translate_ct2(args, lines):
    """`translate --engine ct2`: the same splitting and joining as the SavedModel path."""
    from keras_attn_zoo.export import sentences as sentence_tools
    from keras_attn_zoo.export.ctranslate2_export import CTranslate2Translator

    translator = CTranslate2Translator(args.model, intra_threads=args.threads)
    sentences, counts = sentence_tools.split_texts(
        lines, sentence_tools.source_language(translator.info), not args.no_split)
    try:
        translations = translator.translate_texts(
            sentences, batch_size=args.batch_size, beam_size=args.beam,
            length_penalty=args.length_penalty,
            max_length_a=2.0 if args.max_length_a is None else args.max_length_a,
            max_length_b=10 if args.max_length_b is None else args.max_length_b)
    except ValueError as error:  # longer than the export's position table
        raise InputError(str(error)) from None
    translations = [" ".join(t.splitlines()) for t in translations]
    return [sentence_tools.join_translations(group)
            for group in sentence_tools.regroup(translations, counts)]


def _score_command(args) -> int:
    try:
        model_dir = resolve_model_dir(args.model)
        sources = read_lines(pathlib.Path(args.source).read_bytes(), args.source)
        targets = read_lines(pathlib.Path(args.target).read_bytes(), args.target)
    except (FileNotFoundError, InputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if len(sources) != len(targets):
        print(f"error: {args.source} has {len(sources)} lines but {args.target} has "
              f"{len(targets)}; scoring needs one translation per source line.",
              file=sys.stderr)
        return EXIT_USAGE

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_attn_zoo.inference.translator import model_error_message

    loaded = tf.saved_model.load(str(model_dir))
    if "score" not in loaded.signatures:
        print(f"error: {model_dir} has no 'score' signature (an export from before it, "
              "or a model whose outputs are not plain pieces).", file=sys.stderr)
        return EXIT_USAGE
    rows = []
    for start in range(0, len(sources), args.batch_size):
        chunk = slice(start, start + args.batch_size)
        try:
            result = loaded.signatures["score"](
                text=tf.constant([s.encode("utf-8") for s in sources[chunk]]),
                target=tf.constant([t.encode("utf-8") for t in targets[chunk]]))
        except tf.errors.InvalidArgumentError as error:
            print(f"error: lines {start + 1}-{start + len(sources[chunk])}: "
                  f"{model_error_message(error)}", file=sys.stderr)
            return EXIT_USAGE
        for total, tokens, length in zip(result["log_prob"].numpy(),
                                         result["token_log_probs"].numpy(),
                                         result["length"].numpy()):
            per_token = " ".join(f"{value:.4f}" for value in tokens[:length + 1])
            rows.append(f"{total:.6f}\t{per_token}")
    write_output(rows, args.output)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `keras-attn-zoo` command's parser: `translate` and `serve`."""
    parser = argparse.ArgumentParser(
        prog="keras-attn-zoo",
        description="Attention model zoo for neural machine translation.")
    subcommands = parser.add_subparsers(dest="command", required=True,
                                        metavar="COMMAND")

    translate = subcommands.add_parser(
        "translate", help="translate lines of text with an exported model",
        description="Translate UTF-8 lines (stdin or --input); one output line per "
                    "input line, empty in -> empty out.")
    translate.add_argument("--model", required=True,
                           help="saved_models/NAME (newest version) or "
                                "saved_models/NAME/VERSION")
    translate.add_argument("--beam", type=int,
                           help="beam size (default: the zoo's, decoding.DEFAULT_BEAM_SIZE)")
    translate.add_argument("--length-penalty", type=float,
                           help="GNMT length penalty alpha (default: the zoo's, "
                                "decoding.DEFAULT_LENGTH_PENALTY)")
    translate.add_argument("--max-length-a", type=float, default=None,
                           help="output limit ceil(a * source_tokens + b); default "
                                "from the model card")
    translate.add_argument("--max-length-b", type=float, default=None)
    translate.add_argument("--input", default=None, help="input file (default stdin)")
    translate.add_argument("--output", default=None,
                           help="output file (default stdout)")
    translate.add_argument("--batch-size", type=int, default=32)
    translate.add_argument("--no-split", action="store_true",
                           help="translate each line as one sentence (default: split "
                                "a line into sentences, translate them, join them)")
    translate.add_argument("--no-progress", action="store_true",
                           help="no progress bar (shown on stderr for --input files)")
    translate.add_argument("--n-best", type=int, default=None, metavar="N",
                           help="write the N best hypotheses of each line, "
                                "'LINE ||| TEXT ||| SCORE' (Marian's format)")
    translate.add_argument("--no-repeat-ngram-size", type=int, default=0, metavar="N",
                           help="ban repeating any N-gram in a translation (0: off)")
    translate.add_argument("--sampling-topk", type=int, default=None, metavar="K",
                           help="sample each token from the K most probable (0: all)")
    translate.add_argument("--sampling-topp", type=float, default=None, metavar="P",
                           help="sample from the smallest set of probability >= P")
    translate.add_argument("--sampling-temperature", type=float, default=None,
                           metavar="T", help="divide the log-probs by T before sampling")
    translate.add_argument("--seed", type=int, default=0,
                           help="sampling seed: the same seed gives the same output")
    translate.add_argument("--engine", choices=("savedmodel", "ct2"), default="savedmodel",
                           help="savedmodel (default; --model saved_models/NAME) or ct2 "
                                "(--model: a directory written by export-ct2; its length "
                                "penalty is CTranslate2's n**alpha, not GNMT's)")
    translate.add_argument("--threads", type=int, default=0,
                           help="ct2 only: CPU threads (default: CTranslate2's choice)")
    translate.set_defaults(handler=_translate_command)

    export_ct2 = subcommands.add_parser(
        "export-ct2", help="export a trained Transformer to CTranslate2 (fast CPU)",
        description="Convert runs/NAME (model.keras + vocab.model) to a CTranslate2 "
                    "model directory for `translate --engine ct2`. Only the plain "
                    "transformer (pre- or post-norm) converts; others are refused.")
    export_ct2.add_argument("--model", required=True,
                            help="runs/NAME, a .keras file, or an export with "
                                 "model.keras beside it")
    export_ct2.add_argument("--output", required=True,
                            help="directory to create (written atomically)")
    export_ct2.add_argument("--quantization", default="int8",
                            choices=("int8", "float32", "int8_float32", "float16", "int16"),
                            help="weight type (default int8: fastest on CPU)")
    export_ct2.add_argument("--overwrite", action="store_true",
                            help="replace an existing --output directory")
    export_ct2.set_defaults(handler=_export_ct2_command)

    score = subcommands.add_parser(
        "score", help="score given translations with an exported model",
        description="Forced decoding: for each source line and its translation, "
                    "write the total log-probability, a tab, and the log-probability "
                    "of each target piece and of the final EOS.")
    score.add_argument("--model", required=True,
                       help="saved_models/NAME (newest version) or a version directory")
    score.add_argument("--source", required=True, help="source lines (UTF-8)")
    score.add_argument("--target", required=True, help="their translations, line by line")
    score.add_argument("--output", default=None, help="output file (default stdout)")
    score.add_argument("--batch-size", type=int, default=32)
    score.set_defaults(handler=_score_command)

    serve = subcommands.add_parser(
        "serve", help="serve an exported model over HTTP",
        description="TensorFlow Serving's REST API for an exported model, on "
                    "127.0.0.1 unless --host says otherwise.")
    _add_serve_arguments(serve)
    serve.set_defaults(handler=_serve_command)
    return parser


def _add_serve_arguments(parser):
    parser.add_argument("--model", required=True,
                        help="saved_models/NAME (newest version) or a version directory")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; anything but 127.0.0.1 exposes the server")
    parser.add_argument("--name", help="model name in URLs (default: the directory name)")
    parser.add_argument("--max-batch-size", type=int, help="texts per request (64)")
    parser.add_argument("--max-request-bytes", type=int, help="request body size (1 MiB)")
    parser.add_argument("--max-text-chars", type=int, help="characters per text (10,000)")
    parser.add_argument("--no-split-sentences", action="store_true",
                        help="translate each input as one sentence (default: split "
                             "into sentences, translate, join)")
    # Defaults as in keras_attn_zoo/export/serving/scheduler.py (not imported
    # here: it would load TensorFlow before the command runs).
    parser.add_argument("--batch-max-tokens", type=int, default=512,
                        help="padded source tokens per model call (sentences x the "
                             "longest), across requests (512)")
    parser.add_argument("--batch-max-sentences", type=int, default=64,
                        help="sentences per model call across requests (64)")
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0,
                        help="how long the oldest waiting request waits for others "
                             "to share its batch (5 ms)")
    parser.add_argument("--max-wait-ms", type=float, default=5000.0,
                        help="from this wait on, the oldest request has a sentence "
                             "in every model call (5000 ms)")
    parser.add_argument("--version-label", action="append", default=[],
                        metavar="LABEL", help="a TF Serving version label "
                        "(/labels/LABEL) for the served version; repeatable")


def _serve_command(args) -> int:
    from keras_attn_zoo.export import serving

    return serving.serve(args.model, port=args.port, host=args.host, name=args.name,
                         max_batch_size=args.max_batch_size,
                         max_request_bytes=args.max_request_bytes,
                         max_text_chars=args.max_text_chars,
                         labels=args.version_label,
                         split_sentences=not args.no_split_sentences,
                         batch_max_sentences=args.batch_max_sentences,
                         batch_max_tokens=args.batch_max_tokens,
                         max_wait_ms=args.max_wait_ms,
                         batch_timeout_ms=args.batch_timeout_ms)


def main(argv=None) -> int:
    """Runs the `keras-attn-zoo` command with `argv` (None: `sys.argv`); returns its exit status.

    """
    args = build_parser().parse_args(argv)
    start_tensorflow()  # TensorFlow's start-up noise would hide the command's output
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

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

``serve`` runs the HTTP server of ``keras_attn_zoo.export.server`` (TensorFlow
Serving's REST shapes plus a ``:translate`` method and a page at ``/``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

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


def load_model_card(model_dir: pathlib.Path) -> dict:
    card_path = model_dir / "model_card.json"
    if card_path.is_file():
        return json.loads(card_path.read_text(encoding="utf-8"))
    return {}


def translate_lines(signature, lines, *, beam_size, length_penalty, max_length_a,
                    max_length_b, batch_size=32, progress=None, split_sentences=False,
                    language="en"):
    """Translates ``lines`` with a ``translate_with_options`` signature, in input order.

    With ``split_sentences`` each line is split into sentences, the sentences are
    translated and joined again, so a paragraph keeps all its sentences.
    Sentences are sorted by length so each batch holds similar lengths.
    """
    import tensorflow as tf

    from keras_attn_zoo.export import sentences as sentence_tools
    from keras_attn_zoo.export.translator import model_error_message

    options = dict(
        beam_size=tf.constant(beam_size, tf.int32),
        length_penalty=tf.constant(length_penalty, tf.float32),
        max_length_a=tf.constant(max_length_a, tf.float32),
        max_length_b=tf.constant(max_length_b, tf.float32),
    )
    sentences, counts = sentence_tools.split_texts(lines, language, split_sentences)
    line_of = [line for line, count in enumerate(counts) for _ in range(count)]
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    translations = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        text = tf.constant([sentences[i].encode("utf-8") for i in chunk], tf.string)
        try:
            result = signature(text=text, **options)
        except tf.errors.InvalidArgumentError as error:
            message = model_error_message(error)
            if "Input too long" in message:
                # The graph names the sentence within the batch; map it to the line.
                raise InputError(_name_long_line(message, [line_of[i] for i in chunk])
                                 ) from None
            raise
        for i, translated in zip(chunk, result["translation"].numpy()):
            # One output line per input line, whatever the model emits.
            text_out = translated.decode("utf-8", errors="replace")
            translations[i] = " ".join(text_out.splitlines())
        if progress is not None:
            progress.update(len(chunk))
    if not split_sentences:
        return translations
    return [sentence_tools.join_translations(group)
            for group in sentence_tools.regroup(translations, counts)]


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


def _translate_command(args) -> int:
    if args.batch_size < 1:
        print("error: --batch-size must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if args.beam < 1:
        print("error: --beam must be >= 1", file=sys.stderr)
        return EXIT_USAGE
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

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_attn_zoo.export.sentences import source_language

    card = load_model_card(model_dir)
    defaults = card.get("defaults", {})
    loaded = tf.saved_model.load(str(model_dir))
    signature = loaded.signatures["translate_with_options"]
    progress = None
    if args.input not in (None, "-") and not args.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=None, unit="sent", file=sys.stderr,
                        desc="translate")
    try:
        translations = translate_lines(
            signature, lines, beam_size=args.beam,
            length_penalty=args.length_penalty,
            max_length_a=(args.max_length_a if args.max_length_a is not None
                          else defaults.get("max_length_a", 2.0)),
            max_length_b=(args.max_length_b if args.max_length_b is not None
                          else defaults.get("max_length_b", 10)),
            batch_size=args.batch_size, progress=progress,
            split_sentences=not args.no_split, language=source_language(card))
    except InputError as error:
        print(f"error: {source_name}: {error}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if progress is not None:
            progress.close()

    payload = "".join(line + "\n" for line in translations).encode("utf-8")
    if args.output is None or args.output == "-":
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
    else:
        output = pathlib.Path(args.output)
        temporary = output.with_name(f".{output.name}.part")
        temporary.write_bytes(payload)
        temporary.replace(output)
    return 0


def build_parser() -> argparse.ArgumentParser:
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
    translate.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    translate.add_argument("--length-penalty", type=float, default=0.6,
                           help="GNMT length penalty alpha (default 0.6)")
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
    translate.set_defaults(handler=_translate_command)

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
    parser.add_argument("--batch-max-sentences", type=int, default=64,
                        help="sentences per model call across requests (64)")
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0,
                        help="how long the oldest waiting request waits for others "
                             "to share its batch (5 ms)")
    parser.add_argument("--version-label", action="append", default=[],
                        metavar="LABEL", help="a TF Serving version label "
                        "(/labels/LABEL) for the served version; repeatable")


def _serve_command(args) -> int:
    from keras_attn_zoo.export import server

    return server.serve(args.model, port=args.port, host=args.host, name=args.name,
                        max_batch_size=args.max_batch_size,
                        max_request_bytes=args.max_request_bytes,
                        max_text_chars=args.max_text_chars,
                        labels=args.version_label,
                        split_sentences=not args.no_split_sentences,
                        batch_max_sentences=args.batch_max_sentences,
                        batch_timeout_ms=args.batch_timeout_ms)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

"""Request parsing and answer shaping: what a client may send, checked, and the
per-sentence results joined back into one result per text.

Every check raises `BadRequest` with a message naming the field and the
problem; the handler answers it with HTTP 400 (or the error's status).
"""

import base64
import json
from http import HTTPStatus

from keras_attn_zoo.export import sentences as sentence_tools

DEFAULT_LIMITS = dict(
    max_request_bytes=1 << 20,
    max_batch_size=64,
    max_text_chars=10_000,
    max_beam_size=16,
)
# Inputs of `translate_with_options` beside "text", in the order of a job's options.
OPTION_INPUTS = ("beam_size", "length_penalty", "max_length_a", "max_length_b")
OUTPUT_KEYS = ("translation", "score", "alignment", "length", "source_pieces",
               "target_pieces")
TRANSLATE_FIELDS = ("text", "beam_size", "length_penalty", "split_sentences",
                    "num_hypotheses")


class BadRequest(ValueError):
    """A client error: answered with HTTP 400 (or `status`) and the message."""

    def __init__(self, message, status=HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


def parse_json_body(raw):
    """A request body (bytes) -> its JSON object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"request body is not UTF-8 (byte {error.start}).")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadRequest(f"request body is not JSON: {error}.")
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object.")
    return body


def text_value(value, where):
    """A request's text: a string, `{"b64": ...}` (TF Serving's binary form) or
    `{"text": one of those}`; returns `str`."""
    if isinstance(value, dict) and set(value) == {"text"}:
        value = value["text"]
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            # Invalid UTF-8 is replaced, as the exported graph does.
            return base64.b64decode(value["b64"], validate=True).decode("utf-8", "replace")
        except ValueError:
            raise BadRequest(f'{where} is not valid base64.')
    if not isinstance(value, str):
        raise BadRequest(f"{where} is {type(value).__name__}, not a string.")
    return value


def parse_texts(values, field, limits):
    """Validates a list of texts from a request; returns `list[str]`."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise BadRequest(f'"{field}" must be a non-empty list of strings.')
    if len(values) > limits["max_batch_size"]:
        raise BadRequest(
            f'"{field}" has {len(values)} texts; the limit is {limits["max_batch_size"]} '
            "per request."
        )
    texts = []
    for index, value in enumerate(values):
        value = text_value(value, f'"{field}"[{index}]')
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(f'"{field}"[{index}] is not valid Unicode (a lone surrogate).')
        if len(value) > limits["max_text_chars"]:
            raise BadRequest(
                f'"{field}"[{index}] has {len(value)} characters; the limit is '
                f'{limits["max_text_chars"]}. Split the text into sentences.'
            )
        texts.append(value)
    return texts


def parse_option(value, name, limits):
    """One search option of a request, checked; returns it as int or float."""
    if name == "beam_size":
        if not isinstance(value, int) or isinstance(value, bool) or not (
                1 <= value <= limits["max_beam_size"]):
            raise BadRequest(
                f'"beam_size" must be an integer from 1 to {limits["max_beam_size"]}.')
        return value
    bounds = {"length_penalty": (0, 5), "max_length_a": (0, 10), "max_length_b": (0, 1000)}
    low, high = bounds[name]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
            low <= value <= high):
        raise BadRequest(f'"{name}" must be a number from {low} to {high}.')
    return float(value)


def translate_options(body, defaults, limits):
    """The search options of a `:translate` body over the model card's
    ``defaults`` (`OPTION_INPUTS` order), plus ``num_hypotheses`` when over 1."""
    options = list(defaults)
    for index, key in enumerate(("beam_size", "length_penalty")):
        if key in body:
            options[index] = parse_option(body[key], key, limits)
    if "num_hypotheses" in body:
        value = body["num_hypotheses"]
        if not isinstance(value, int) or isinstance(value, bool) or not (
                1 <= value <= options[0]):
            raise BadRequest('"num_hypotheses" must be an integer from 1 to '
                             f'the beam size ({options[0]}).')
        if value > 1:
            options.append(value)
    return tuple(options)


def split_option(body, default):
    """The request's `split_sentences` (else `default`); anything but a bool is a bad request."""
    value = body.get("split_sentences", default)
    if not isinstance(value, bool):
        raise BadRequest('"split_sentences" must be true or false.')
    return value


def pad_columns(values, fill):
    """Ragged rows -> a rectangular list (TF Serving's columnar outputs are tensors)."""
    width = max((len(v) for v in values), default=0)
    return [list(v) + [fill] * (width - len(v)) for v in values]


def columnar_outputs(results):
    """Per-text results -> TF Serving's columnar ``outputs``: every output a
    rectangular tensor (pieces padded with "", alignments with 0)."""
    outputs = {key: [r[key] for r in results] for key in OUTPUT_KEYS}
    outputs["source_pieces"] = pad_columns(outputs["source_pieces"], "")
    outputs["target_pieces"] = pad_columns(outputs["target_pieces"], "")
    rows = max((len(a) for a in outputs["alignment"]), default=0)
    columns = max((len(p) for p in outputs["source_pieces"]), default=0)
    outputs["alignment"] = [
        [list(r) + [0.0] * (columns - len(r)) for r in a]
        + [[0.0] * columns] * (rows - len(a)) for a in outputs["alignment"]]
    return outputs


def merge_results(results):
    """Results of one input's sentences -> one result: translations joined,
    scores summed, pieces concatenated, alignment block-diagonal."""
    if len(results) == 1:
        return dict(results[0], sentences=1)
    columns = sum(len(r["source_pieces"]) for r in results)
    alignment, column = [], 0
    for result in results:
        width = len(result["source_pieces"])
        for row in result["alignment"]:
            alignment.append([0.0] * column + list(row) + [0.0] * (columns - column - width))
        column += width
    return {
        "translation": sentence_tools.join_translations([r["translation"] for r in results]),
        "score": sum(r["score"] for r in results),
        "alignment": alignment,
        "length": sum(r["length"] for r in results),
        "source_pieces": [p for r in results for p in r["source_pieces"]],
        "target_pieces": [p for r in results for p in r["target_pieces"]],
        "sentences": len(results),
        # Hypothesis k of the input joins hypothesis k of each sentence.
        **({"hypotheses": [
            {"translation": sentence_tools.join_translations(
                [r["hypotheses"][k]["translation"] for r in results]),
             "score": sum(r["hypotheses"][k]["score"] for r in results)}
            for k in range(len(results[0]["hypotheses"]))]}
           if "hypotheses" in results[0] else {}),
    }

"""HTTP routing: TF Serving's REST paths (and `:translate`, the page, the
metrics) to the runner. One handler class; each request reads the model, its
name, the limits and the labels from the server it arrived on
(`serving.server.ServingHTTPServer`).
"""

import json
import pathlib
import re
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from keras_attn_zoo.export.serving.parsing import OPTION_INPUTS
from keras_attn_zoo.export.serving.parsing import OUTPUT_KEYS
from keras_attn_zoo.export.serving.parsing import TRANSLATE_FIELDS
from keras_attn_zoo.export.serving.parsing import BadRequest
from keras_attn_zoo.export.serving.parsing import columnar_outputs
from keras_attn_zoo.export.serving.parsing import parse_json_body
from keras_attn_zoo.export.serving.parsing import parse_option
from keras_attn_zoo.export.serving.parsing import parse_texts
from keras_attn_zoo.export.serving.parsing import split_option
from keras_attn_zoo.export.serving.parsing import translate_options

STATIC_PAGE = pathlib.Path(__file__).resolve().parents[1] / "static" / "index.html"
METRICS_PATH = "/monitoring/prometheus/metrics"
MAX_DRAIN_BYTES = 64 << 20
# Signatures that take text; `translate_ids` takes token ids (clients tokenize).
TEXT_SIGNATURES = ("serving_default", "translate", "translate_with_options")
# Signatures run as TF Serving runs them: the request's inputs straight into the
# signature, one call per request (no sentence splitting, no cross-request batch).
DIRECT_SIGNATURES = ("translate_n_best", "sample", "score")
PREDICT_METHOD = "tensorflow/serving/predict"
METHODS = ("predict", "classify", "regress", "translate")

MODEL_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<tail>/metadata|:[A-Za-z]+)?$")


def resolve_servable(match, verb, name, version, labels):
    """Checks the model name, version and label of a path against the served
    ``name`` and ``version`` (TF Serving's answers: 404 for an unknown model or
    version, 400 for an unknown label)."""
    requested, asked_version, label = match["name"], match["version"], match["label"]
    if requested != name:
        if verb == "status":
            raise BadRequest(f"Could not find any versions of model {requested}",
                             HTTPStatus.NOT_FOUND)
        raise BadRequest(f"Servable not found for request: Latest({requested})",
                         HTTPStatus.NOT_FOUND)
    if label is not None:
        if label not in labels:
            raise BadRequest(f"Unrecognized servable version label: {label}")
        asked_version = labels[label]
    if asked_version is not None and asked_version != version:
        if verb == "status":
            raise BadRequest(f"Could not find version {asked_version} of model {name}",
                             HTTPStatus.NOT_FOUND)
        raise BadRequest(f"Servable not found for request: Specific({name}, {asked_version})",
                         HTTPStatus.NOT_FOUND)


def checked_signature(body, signature_defs):
    """The request's `signature_name`, checked against the export."""
    signature_name = body.get("signature_name") or "serving_default"
    if signature_name not in signature_defs:
        raise BadRequest(
            f'Serving signature name: "{signature_name}" not found in signature def; '
            f"this model has {sorted(signature_defs)}.")
    if signature_name not in TEXT_SIGNATURES + DIRECT_SIGNATURES:
        raise BadRequest(
            f'signature "{signature_name}" takes token ids; this server runs the '
            f"text signatures {list(TEXT_SIGNATURES + DIRECT_SIGNATURES)}.")
    return signature_name


class Handler(BaseHTTPRequestHandler):
    """Answers one connection's requests; the model is ``self.server.runner``."""

    server_version = "keras-attn-zoo"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet by default
        pass

    @property
    def runner(self):
        return self.server.runner

    @property
    def limits(self):
        return self.server.limits

    # ---- answers ------------------------------------------------------------------

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        # Counted before the client can read the answer: a metrics request it
        # sends next (another thread) must already see this one.
        started = getattr(self, "_started", None)
        if started is not None:
            self.runner.metrics.request(self._method, status, time.monotonic() - started)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, message):
        self._send(status, {"error": message})

    def _route(self):
        """(match, verb) of a model path; verb is status, metadata or a method."""
        self._started = time.monotonic()
        self._method = "other"
        match = MODEL_PATH.match(self.path.split("?")[0])
        if not match:
            return None, None
        tail = match["tail"] or ""
        verb = {"": "status", "/metadata": "metadata"}.get(tail, tail[1:])
        self._method = verb if verb in ("status", "metadata") + METHODS else "other"
        return match, verb

    def _resolve(self, match, verb):
        resolve_servable(match, verb, self.server.model_name, self.runner.version,
                         self.server.labels)

    # ---- GET ------------------------------------------------------------------------

    def do_GET(self):
        name, runner = self.server.model_name, self.runner
        if self.path in ("/", "/index.html"):
            page = STATIC_PAGE.read_text(encoding="utf-8").replace("{{MODEL_NAME}}", name)
            return self._send(HTTPStatus.OK, page.encode("utf-8"), "text/html; charset=utf-8")
        if self.path == METRICS_PATH:
            return self._send(HTTPStatus.OK,
                              runner.metrics.render(name, runner.gauges).encode("utf-8"),
                              "text/plain; version=0.0.4; charset=utf-8")
        match, verb = self._route()
        try:
            if verb not in ("status", "metadata"):
                raise BadRequest(f"Malformed request: GET {self.path}", HTTPStatus.NOT_FOUND)
            self._resolve(match, verb)
            if verb == "status":
                status = (HTTPStatus.OK if runner.state == "AVAILABLE"
                          else HTTPStatus.SERVICE_UNAVAILABLE)
                return self._send(status, {"model_version_status": [{
                    "version": runner.version,
                    "state": runner.state,
                    "status": {"error_code": "OK" if not runner.error else "UNKNOWN",
                               "error_message": runner.error},
                }]})
            if runner.state != "AVAILABLE":
                raise BadRequest("model is loading", HTTPStatus.SERVICE_UNAVAILABLE)
            return self._send(HTTPStatus.OK, {
                "model_spec": {"name": name, "signature_name": "", "version": runner.version},
                "metadata": {"signature_def": {"signature_def": runner.signature_defs},
                             "model_card": runner.model_card},
            })
        except BadRequest as error:
            self._error(error.status, str(error))

    # ---- POST -----------------------------------------------------------------------

    def _read_json(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise BadRequest("a Content-Length header is required.",
                             HTTPStatus.LENGTH_REQUIRED)
        limit = self.limits["max_request_bytes"]
        if int(length) > limit:
            # Refuse without buffering the body, but read it off the socket (up
            # to a bound) so the client sees the answer, not a reset.
            self.close_connection = True
            remaining = min(int(length), MAX_DRAIN_BYTES)
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 16))
                if not chunk:
                    break
                remaining -= len(chunk)
            raise BadRequest(f"request body of {length} bytes is over the limit of "
                             f"{limit} bytes.", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        return parse_json_body(self.rfile.read(int(length)))

    def do_POST(self):
        try:
            match, verb = self._route()
            if verb not in METHODS:
                raise BadRequest(f"no such method: {self.path}", HTTPStatus.NOT_FOUND)
            self._resolve(match, verb)
            body = self._read_json()
            if self.runner.state != "AVAILABLE":
                raise BadRequest(f"model is {self.runner.state.lower()}",
                                 HTTPStatus.SERVICE_UNAVAILABLE)
            if verb == "translate":
                return self._translate(body)
            checked_signature(body, self.runner.signature_defs)
            if verb == "predict":
                return self._predict(body)
            # Every signature of the export is a predict signature.
            kind = "classification" if verb == "classify" else "regression"
            raise BadRequest(
                f"Expected {kind} signature method_name to be tensorflow/serving/"
                f"{verb}. Was: {PREDICT_METHOD}")
        except BadRequest as error:
            self._error(error.status, str(error))
        except Exception as error:  # never take the server down
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(error).__name__}: {error}")

    def _split(self, body):
        return split_option(body, self.server.split_sentences)

    def _predict(self, body):
        unknown = set(body) - {"instances", "inputs", "signature_name", "split_sentences"}
        if unknown or ("instances" in body) == ("inputs" in body):
            raise BadRequest(
                'a predict request has exactly one of "instances" or "inputs" '
                f"(unknown fields: {sorted(unknown)})." if unknown else
                'a predict request has exactly one of "instances" or "inputs".')
        signature_name = checked_signature(body, self.runner.signature_defs)
        if signature_name in DIRECT_SIGNATURES:
            return self._predict_direct(signature_name, body)
        inputs = ("text",) + (
            OPTION_INPUTS if signature_name == "translate_with_options" else ())
        options = dict(zip(OPTION_INPUTS, self.runner.default_options()))
        if "instances" in body:
            values = body["instances"]
            if not isinstance(values, list) or not values:
                raise BadRequest('"instances" must be a non-empty list.')
            named = [v for v in values if isinstance(v, dict) and set(v) - {"b64"}]
            for key in sorted({k for v in named for k in v} - {"text"}):
                if key not in inputs:
                    raise BadRequest(f'unknown input "{key}"; signature '
                                     f'"{signature_name}" takes {list(inputs)}.')
                if len(named) != len(values) or len(
                        {json.dumps(v.get(key)) for v in named}) != 1:
                    raise BadRequest(f'"{key}" is a scalar input: give every instance '
                                     "the same value, or use the columnar format.")
                options[key] = parse_option(named[0][key], key, self.limits)
            values = [v["text"] if isinstance(v, dict) and "text" in v else v for v in values]
            texts = parse_texts(values, "instances", self.limits)
        else:
            values = body["inputs"]
            if isinstance(values, dict):
                for key in sorted(set(values) - {"text"}):
                    if key not in inputs:
                        raise BadRequest(f'unknown input "{key}"; signature '
                                         f'"{signature_name}" takes {list(inputs)}.')
                    options[key] = parse_option(values[key], key, self.limits)
                if "text" not in values:
                    raise BadRequest('"inputs" has no "text".')
                values = values["text"]
            texts = parse_texts(values, "inputs", self.limits)
        results = self.runner.translate_texts(
            texts, tuple(options[k] for k in OPTION_INPUTS), self._split(body))
        if "instances" in body:
            return self._send(HTTPStatus.OK, {"predictions": [
                {key: r[key] for key in OUTPUT_KEYS} for r in results]})
        return self._send(HTTPStatus.OK, {"outputs": columnar_outputs(results)})

    def _predict_direct(self, name, body):
        """TF Serving's predict on a signature with several batched or scalar
        inputs: columnar `inputs` {name: value}, or row `instances`, where a
        scalar input must have the same value in every instance."""
        if "inputs" in body:
            if not isinstance(body["inputs"], dict):
                raise BadRequest(f'signature "{name}" takes named inputs: give '
                                 '"inputs" as {"name": value, ...}.')
            outputs = self.runner.run_signature(name, body["inputs"], self.limits)
            return self._send(HTTPStatus.OK, {"outputs": outputs})
        instances = body["instances"]
        if not isinstance(instances, list) or not instances or not all(
                isinstance(row, dict) for row in instances):
            raise BadRequest(f'signature "{name}" takes named inputs: give each '
                             'instance as {"name": value, ...}.')
        specs = self.runner.signature_inputs(name)
        inputs = {}
        for key in set().union(*instances):
            values = [row.get(key) for row in instances]
            if key in specs and specs[key].shape.rank == 0:
                if len({json.dumps(v) for v in values}) != 1:
                    raise BadRequest(f'"{key}" is a scalar input: give every instance '
                                     "the same value, or use the columnar format.")
                inputs[key] = values[0]
            else:
                inputs[key] = values
        outputs = self.runner.run_signature(name, inputs, self.limits)
        rows = [{key: value[i] for key, value in outputs.items()}
                for i in range(len(instances))]
        return self._send(HTTPStatus.OK, {"predictions": rows})

    def _translate(self, body):
        unknown = set(body) - set(TRANSLATE_FIELDS)
        if unknown:
            raise BadRequest(f"unknown fields {sorted(unknown)}; expected one of "
                             f"{sorted(TRANSLATE_FIELDS)}.")
        if "text" not in body:
            raise BadRequest('missing field "text" (a list of strings).')
        texts = parse_texts(body["text"], "text", self.limits)
        options = translate_options(body, self.runner.default_options(), self.limits)
        results = self.runner.translate_texts(texts, options, self._split(body))
        return self._send(HTTPStatus.OK, {
            "translations": [r["translation"] for r in results],
            "scores": [r["score"] for r in results],
            "details": results,
        })

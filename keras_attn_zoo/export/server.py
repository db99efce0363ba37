"""An HTTP translation server with TensorFlow Serving's REST shapes.

    keras-attn-zoo serve --model saved_models/NAME --port 8501

Endpoints (NAME is the model name, the export's base directory name):

* `GET /v1/models/NAME`: version status, as TF Serving answers it
  (`AVAILABLE` once loaded, `LOADING` with HTTP 503 before).
* `GET /v1/models/NAME/metadata`: signature names and the model card.
* `POST /v1/models/NAME:predict`: `{"instances": ["text", ...]}` (row format,
  also `[{"text": ...}]`) -> `{"predictions": [{"translation", "score"}]}`,
  or `{"inputs": ["text", ...]}` (columnar) -> `{"outputs": {"translation":
  [...], "score": [...]}}`. Runs the `serving_default` beam search.
* `POST /v1/models/NAME:translate`: `{"text": [...], "beam_size": 4,
  "length_penalty": 0.6}` -> translations, scores, and per sentence the
  alignment with its source and target pieces (what the page draws).
* `GET /`: a small page to try the model.

Bad requests get HTTP 400 (413 for a body over the size limit) and
`{"error": "..."}` naming the problem; the server keeps serving. Requests of
several clients that arrive within a few milliseconds with the same options are
translated as one batch. SIGTERM (or SIGINT) stops accepting connections,
finishes the requests in flight and exits 0. The server listens on 127.0.0.1
unless `--host` says otherwise.

The server needs only TensorFlow and tensorflow-text to run the model.
"""

import concurrent.futures
import json
import pathlib
import queue
import signal
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

from keras_attn_zoo.export.saved_model import latest_version

DEFAULT_LIMITS = dict(
    max_request_bytes=1 << 20,
    max_batch_size=64,
    max_text_chars=10_000,
    max_beam_size=16,
)
MAX_DRAIN_BYTES = 64 << 20
STATIC_PAGE = pathlib.Path(__file__).with_name("static") / "index.html"


class BadRequest(ValueError):
    """A client error: answered with HTTP 400 (or `status`) and the message."""

    def __init__(self, message, status=HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


class ModelRunner:
    """Loads the SavedModel in the background and runs batched translations."""

    def __init__(self, model_path, batch_window_seconds=0.005, max_batch_size=64):
        self.version_dir = latest_version(model_path)
        self.version = self.version_dir.name
        self.batch_window_seconds = batch_window_seconds
        self.max_batch_size = max_batch_size
        self.state = "LOADING"
        self.error = ""
        self.model_card = {}
        self._model = None
        self._jobs = queue.Queue()
        self._stopping = threading.Event()
        threading.Thread(target=self._load, daemon=True, name="loader").start()
        self._worker = threading.Thread(target=self._serve_jobs, daemon=True,
                                        name="batcher")
        self._worker.start()

    def _load(self):
        try:
            import tensorflow as tf
            import tensorflow_text  # noqa: F401  (registers SentencePiece ops)

            self._model = tf.saved_model.load(str(self.version_dir))
            card = self.version_dir / "model_card.json"
            if card.exists():
                self.model_card = json.loads(card.read_text())
            self.state = "AVAILABLE"
        except Exception as error:  # reported through the status endpoint
            self.state, self.error = "END", f"{type(error).__name__}: {error}"

    @property
    def signature_names(self):
        return sorted(self._model.signatures) if self._model is not None else []

    def translate(self, texts, beam_size, length_penalty):
        """Queues `texts`; returns their results once a batch ran."""
        future = concurrent.futures.Future()
        self._jobs.put((tuple(texts), int(beam_size), float(length_penalty), future))
        return future.result()

    def stop(self):
        self._stopping.set()
        self._jobs.put(None)
        self._worker.join(timeout=30)

    def _serve_jobs(self):
        while not self._stopping.is_set():
            first = self._jobs.get()
            if first is None:
                return
            batch = [first]
            size = len(first[0])
            deadline = time.monotonic() + self.batch_window_seconds
            pending = []
            while size < self.max_batch_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    job = self._jobs.get(timeout=remaining)
                except queue.Empty:
                    break
                if job is None:
                    self._stopping.set()
                    break
                same_options = job[1:3] == first[1:3]
                if same_options and size + len(job[0]) <= self.max_batch_size:
                    batch.append(job)
                    size += len(job[0])
                else:
                    pending.append(job)
            for job in pending:  # other options: next round
                self._jobs.put(job)
            self._run_batch(batch)

    def _run_batch(self, batch):
        try:
            results = self._run([t for job in batch for t in job[0]], *batch[0][1:3])
        except Exception as error:
            if len(batch) == 1:
                batch[0][3].set_exception(_client_error(error))
                return
            # One bad request must not fail the others: run each alone.
            for job in batch:
                self._run_batch([job])
            return
        offset = 0
        for texts, _, _, future in batch:
            future.set_result(results[offset: offset + len(texts)])
            offset += len(texts)

    def _run(self, texts, beam_size, length_penalty):
        import tensorflow as tf

        outputs = self._model.signatures["translate_with_options"](
            text=tf.constant(list(texts), tf.string),
            beam_size=tf.constant(beam_size, tf.int32),
            length_penalty=tf.constant(length_penalty, tf.float32),
            max_length_a=tf.constant(self.model_card.get("max_length_a", 2.0), tf.float32),
            max_length_b=tf.constant(float(self.model_card.get("max_length_b", 10)),
                                     tf.float32),
        )
        outputs = {k: v.numpy() for k, v in outputs.items()}
        results = []
        for row in range(len(texts)):
            length = int(outputs["length"][row])
            source = [p.decode("utf-8", "replace") for p in outputs["source_pieces"][row] if p]
            target = [p.decode("utf-8", "replace") for p in outputs["target_pieces"][row][:length]]
            alignment = outputs["alignment"][row][:length, : len(source)]
            results.append({
                "translation": outputs["translation"][row].decode("utf-8", "replace"),
                "score": float(outputs["score"][row]),
                "source_pieces": source,
                "target_pieces": target,
                "alignment": [[round(float(w), 4) for w in r] for r in alignment],
            })
        return results


def _client_error(error):
    """The graph's InvalidArgumentError (e.g. an input over the length limit,
    whose message names the limit) becomes a 400; anything else stays a 500."""
    import tensorflow as tf

    if isinstance(error, tf.errors.InvalidArgumentError):
        message = error.message.strip().splitlines()[0]
        return BadRequest(f"input rejected by the model: {message}")
    return error


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
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            value = value["text"]
        if not isinstance(value, str):
            raise BadRequest(f'"{field}"[{index}] is {type(value).__name__}, not a string.')
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


def make_handler(runner, name, limits):
    """A request handler class bound to one model."""
    prefix = f"/v1/models/{name}"

    class Handler(BaseHTTPRequestHandler):
        server_version = "keras-attn-zoo"
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # quiet by default
            pass

        def _send(self, status, body, content_type="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status, message):
            self._send(status, {"error": message})

        def do_GET(self):
            if self.path in ("/", "/index.html"):
                page = STATIC_PAGE.read_text(encoding="utf-8").replace("{{MODEL_NAME}}", name)
                return self._send(HTTPStatus.OK, page.encode("utf-8"), "text/html; charset=utf-8")
            if self.path == prefix:
                status = HTTPStatus.OK if runner.state == "AVAILABLE" else (
                    HTTPStatus.SERVICE_UNAVAILABLE)
                return self._send(status, {"model_version_status": [{
                    "version": runner.version,
                    "state": runner.state,
                    "status": {"error_code": "OK" if not runner.error else "UNKNOWN",
                               "error_message": runner.error},
                }]})
            if self.path == prefix + "/metadata":
                if runner.state != "AVAILABLE":
                    return self._error(HTTPStatus.SERVICE_UNAVAILABLE, "model is loading")
                return self._send(HTTPStatus.OK, {
                    "model_spec": {"name": name, "version": runner.version},
                    "metadata": {"signature_names": runner.signature_names,
                                 "model_card": runner.model_card},
                })
            self._error(HTTPStatus.NOT_FOUND, f"no such resource: {self.path}")

        def _read_json(self):
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise BadRequest("a Content-Length header is required.",
                                 HTTPStatus.LENGTH_REQUIRED)
            if int(length) > limits["max_request_bytes"]:
                # Refuse without buffering the body, but read it off the socket
                # (up to a bound) so the client sees the answer, not a reset.
                self.close_connection = True
                remaining = min(int(length), MAX_DRAIN_BYTES)
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 1 << 16))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                raise BadRequest(
                    f"request body of {length} bytes is over the limit of "
                    f"{limits['max_request_bytes']} bytes.", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            raw = self.rfile.read(int(length))
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

        def do_POST(self):
            try:
                if self.path not in (prefix + ":predict", prefix + ":translate"):
                    raise BadRequest(f"no such method: {self.path}", HTTPStatus.NOT_FOUND)
                body = self._read_json()
                if runner.state != "AVAILABLE":
                    raise BadRequest(f"model is {runner.state.lower()}",
                                     HTTPStatus.SERVICE_UNAVAILABLE)
                if self.path.endswith(":predict"):
                    return self._predict(body)
                return self._translate(body)
            except BadRequest as error:
                self._error(error.status, str(error))
            except Exception as error:  # never take the server down
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                            f"{type(error).__name__}: {error}")

        def _options(self, body):
            beam = body.get("beam_size", runner.model_card.get("beam_size", 4))
            penalty = body.get("length_penalty", runner.model_card.get("length_penalty", 0.6))
            if not isinstance(beam, int) or isinstance(beam, bool) or not (
                    1 <= beam <= limits["max_beam_size"]):
                raise BadRequest(
                    f'"beam_size" must be an integer from 1 to {limits["max_beam_size"]}.')
            if not isinstance(penalty, (int, float)) or isinstance(penalty, bool) or not (
                    0 <= penalty <= 5):
                raise BadRequest('"length_penalty" must be a number from 0 to 5.')
            return beam, float(penalty)

        def _predict(self, body):
            unknown = set(body) - {"instances", "inputs", "signature_name"}
            if unknown or ("instances" in body) == ("inputs" in body):
                raise BadRequest(
                    'a predict request has exactly one of "instances" or "inputs" '
                    f"(unknown fields: {sorted(unknown)})." if unknown else
                    'a predict request has exactly one of "instances" or "inputs".')
            field = "instances" if "instances" in body else "inputs"
            values = body[field]
            if field == "inputs" and isinstance(values, dict):
                values = values.get("text")
            texts = parse_texts(values, field, limits)
            results = runner.translate(texts, *self._options({}))
            if field == "instances":
                return self._send(HTTPStatus.OK, {"predictions": [
                    {"translation": r["translation"], "score": r["score"]} for r in results]})
            return self._send(HTTPStatus.OK, {"outputs": {
                "translation": [r["translation"] for r in results],
                "score": [r["score"] for r in results]}})

        def _translate(self, body):
            unknown = set(body) - {"text", "beam_size", "length_penalty"}
            if unknown:
                raise BadRequest(f"unknown fields {sorted(unknown)}; expected "
                                 '"text", "beam_size", "length_penalty".')
            if "text" not in body:
                raise BadRequest('missing field "text" (a list of strings).')
            texts = parse_texts(body["text"], "text", limits)
            results = runner.translate(texts, *self._options(body))
            return self._send(HTTPStatus.OK, {
                "translations": [r["translation"] for r in results],
                "scores": [r["score"] for r in results],
                "details": results,
            })

    return Handler


def serve(model, port=8501, host="127.0.0.1", name=None, ready_callback=None, **limits):
    """Runs the server until SIGTERM / SIGINT; returns 0."""
    limits = {**DEFAULT_LIMITS, **{k: v for k, v in limits.items() if v is not None}}
    model_path = pathlib.Path(model)
    base = model_path.parent if (model_path / "saved_model.pb").exists() else model_path
    name = name or base.name
    runner = ModelRunner(model_path, max_batch_size=limits["max_batch_size"])
    server = ThreadingHTTPServer((host, port), make_handler(runner, name, limits))
    server.daemon_threads = True

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"serving {name} (version {runner.version}) on http://{host}:{server.server_port}/",
          flush=True)
    if ready_callback:
        ready_callback(server)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        runner.stop()
    print("server stopped", flush=True)
    return 0


if __name__ == "__main__":
    from keras_attn_zoo.cli import main

    raise SystemExit(main(["serve", *__import__("sys").argv[1:]]))

"""The listening server: `serve` binds the port, starts the runner and serves
until SIGTERM / SIGINT."""

import pathlib
import signal
import threading
from http.server import ThreadingHTTPServer

from keras_attn_zoo.export.serving.handler import Handler
from keras_attn_zoo.export.serving.parsing import DEFAULT_LIMITS
from keras_attn_zoo.export.serving.runner import ModelRunner
from keras_attn_zoo.export.serving.scheduler import DEFAULT_MAX_BATCH_SENTENCES
from keras_attn_zoo.export.serving.scheduler import DEFAULT_MAX_BATCH_TOKENS
from keras_attn_zoo.export.serving.scheduler import DEFAULT_MAX_WAIT_SECONDS


class ServingHTTPServer(ThreadingHTTPServer):
    """A thread per connection; the handler reads the model and settings here.

    Args:
        address: ``(host, port)``.
        runner: the `ModelRunner`.
        model_name: the name in ``/v1/models/NAME`` paths.
        limits: `DEFAULT_LIMITS` keys (request bytes, texts, characters, beam).
        labels: TF Serving version labels -> the served version.
        split_sentences: the text endpoints' default.
    """

    daemon_threads = True
    # The default listen backlog of 5 drops connections of a burst of clients;
    # their SYN is retried after a second, which showed as a 1 s p99.
    request_queue_size = 128

    def __init__(self, address, runner, model_name, limits=None, labels=None,
                 split_sentences=True):
        self.runner = runner
        self.model_name = model_name
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.labels = dict(labels or {})
        self.split_sentences = split_sentences
        super().__init__(address, Handler)


def serve(model, port=8501, host="127.0.0.1", name=None, ready_callback=None,
          labels=None, split_sentences=True, batch_timeout_ms=5.0,
          batch_max_sentences=DEFAULT_MAX_BATCH_SENTENCES,
          batch_max_tokens=DEFAULT_MAX_BATCH_TOKENS,
          max_wait_ms=1000 * DEFAULT_MAX_WAIT_SECONDS, **limits):
    """Runs the server until SIGTERM / SIGINT; returns 0.

    ``batch_max_tokens`` (padded source tokens per model call),
    ``batch_max_sentences``, ``max_wait_ms`` (the wait after which a request
    goes first) and ``batch_timeout_ms`` set the scheduler (`scheduler.py`);
    ``limits`` override `DEFAULT_LIMITS` (None keeps the default).
    """
    limits = {k: v for k, v in limits.items() if v is not None}
    model_path = pathlib.Path(model)
    base = model_path.parent if (model_path / "saved_model.pb").exists() else model_path
    name = name or base.name
    runner = ModelRunner(model_path, batch_timeout_seconds=batch_timeout_ms / 1000,
                         batch_max_sentences=batch_max_sentences,
                         batch_max_tokens=batch_max_tokens,
                         max_wait_seconds=max_wait_ms / 1000)
    labels = {label: runner.version for label in (labels or ())}
    server = ServingHTTPServer((host, port), runner, name, limits, labels=labels,
                               split_sentences=split_sentences)

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

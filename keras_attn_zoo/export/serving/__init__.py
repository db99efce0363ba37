"""An HTTP translation server that answers like TensorFlow Serving's REST API.

    keras-attn-zoo serve --model saved_models/NAME --port 8501

Endpoints (NAME is the model name, the export's base directory name; every
`/v1/models/NAME` path also takes `/versions/VERSION` or `/labels/LABEL` after
the name, as TF Serving's does):

* `GET /v1/models/NAME`: version status (`AVAILABLE` once loaded, `LOADING`
  with HTTP 503 before).
* `GET /v1/models/NAME/metadata`: TF Serving's `signature_def` map (inputs and
  outputs with dtype and shape, method name) plus the `model_card`.
* `POST /v1/models/NAME:predict`: `{"instances": [...]}` (row format) ->
  `{"predictions": [{output: value}]}`, or `{"inputs": ...}` (columnar) ->
  `{"outputs": {output: [...]}}`; `"signature_name"` picks any text signature
  (default `serving_default`).
* `POST /v1/models/NAME:classify|:regress`: 400, as TF Serving answers for a
  model without classification or regression signatures.
* `POST /v1/models/NAME:translate`: `{"text": [...], "beam_size": 4,
  "length_penalty": 0.6, "num_hypotheses": 1}` -> translations, scores, and per
  text the alignment with its source and target pieces (what the page draws);
  with `"num_hypotheses": N > 1` each text's details also list its N best
  `hypotheses` (translation and score, best first).
* `GET /monitoring/prometheus/metrics`: requests by status and latency,
  sentences per request and the batches they ran in, each sentence's queue
  wait, sentences and padded tokens per model call, the queue's length and its
  oldest wait, in Prometheus' text format.
* `GET /`: a small page to try the model.

Text endpoints split each input into sentences (`sentences.py`) and queue them
for the scheduler (`scheduler.py`): model calls of a bounded number of padded
tokens (`--batch-max-tokens`), sentences of similar length together, every
waiting request getting its share of each call, so a one-sentence request rides
in the next call while a pasted document's sentences spread over several; the
results are joined per input, in order. `"split_sentences": false` in a request
(or `--no-split-sentences`) turns the splitting off.

The modules: `metrics.py` (the Prometheus page), `scheduler.py` (which
sentences run next), `runner.py` (the model and the batching thread),
`parsing.py` (what a request may hold), `handler.py` (HTTP routing) and
`server.py` (`serve`). `keras_attn_zoo.export.server` re-exports the public
names for code written against the single module it replaced.

Bad requests get HTTP 400 (413 for a body over the size limit) and
`{"error": "..."}` naming the problem; the server keeps serving. SIGTERM (or
SIGINT) stops accepting connections, finishes the requests in flight and exits
0. The server listens on 127.0.0.1 unless `--host` says otherwise.

The server needs only TensorFlow and tensorflow-text to run the model.
"""

from keras_attn_zoo.export.serving.handler import Handler
from keras_attn_zoo.export.serving.metrics import Metrics
from keras_attn_zoo.export.serving.parsing import DEFAULT_LIMITS
from keras_attn_zoo.export.serving.parsing import BadRequest
from keras_attn_zoo.export.serving.parsing import merge_results
from keras_attn_zoo.export.serving.parsing import parse_texts
from keras_attn_zoo.export.serving.runner import ModelRunner
from keras_attn_zoo.export.serving.scheduler import SentenceScheduler
from keras_attn_zoo.export.serving.server import ServingHTTPServer
from keras_attn_zoo.export.serving.server import serve

__all__ = [
    "DEFAULT_LIMITS",
    "BadRequest",
    "Handler",
    "Metrics",
    "ModelRunner",
    "SentenceScheduler",
    "ServingHTTPServer",
    "merge_results",
    "parse_texts",
    "serve",
]

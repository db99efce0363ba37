"""The server's Prometheus metrics, in Prometheus' text exposition format.

Requests by method and status, their latency, and what an operator needs to see
the scheduler at work: sentences per request, the batches a request's sentences
spread over, each sentence's wait in the queue, sentences and padded tokens per
model call, and the queue's length and oldest wait.
"""

import collections
import threading

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
REQUEST_SENTENCE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)


class Histogram:
    """Cumulative buckets, sum and count of observed values."""

    def __init__(self, name, help_text, buckets):
        self.name, self.help_text, self.buckets = name, help_text, tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value):
        """Counts one observation."""
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1
        self.sum += value
        self.count += 1

    def render(self, labels):
        """The histogram's Prometheus text lines, with `labels`."""
        lines = [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} histogram"]
        for bound, count in zip(self.buckets, self.counts):
            lines.append(f'{self.name}_bucket{{{labels},le="{bound}"}} {count}')
        lines += [f'{self.name}_bucket{{{labels},le="+Inf"}} {self.count}',
                  f"{self.name}_sum{{{labels}}} {self.sum:.6f}",
                  f"{self.name}_count{{{labels}}} {self.count}"]
        return lines


class Metrics:
    """Counters and histograms, updated from any thread; `render` gives the page.

    The gauges (queue length, oldest wait) are read when the page is rendered,
    from the ``gauges`` callable given to `render`.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.requests = collections.Counter()  # (method, code) -> count
        self.sentences = 0
        self.tokens = 0
        prefix = "keras_attn_zoo_"
        self.latency = Histogram(prefix + "request_latency_seconds",
                                 "Request latency in seconds.", LATENCY_BUCKETS)
        self.batch_size = Histogram(prefix + "batch_size", "Sentences per model call.",
                                    BATCH_BUCKETS)
        self.batch_tokens = Histogram(
            prefix + "batch_tokens",
            "Padded source tokens per model call (sentences x longest sentence).",
            TOKEN_BUCKETS)
        self.queue_wait = Histogram(
            prefix + "queue_wait_seconds",
            "Seconds a sentence waited from its request's arrival to its batch.",
            LATENCY_BUCKETS)
        self.sentences_per_request = Histogram(
            prefix + "request_sentences", "Sentences per text request (after splitting).",
            REQUEST_SENTENCE_BUCKETS)
        self.batches_per_request = Histogram(
            prefix + "request_batches", "Model calls a text request's sentences ran in.",
            REQUEST_SENTENCE_BUCKETS)

    def request(self, method, code, seconds):
        """Records one answered request: method, HTTP code and latency."""
        with self._lock:
            self.requests[(method, int(code))] += 1
            self.latency.observe(seconds)

    def batch(self, size, padded_tokens=None):
        """One model call of ``size`` sentences (``padded_tokens`` when known)."""
        with self._lock:
            self.sentences += size
            self.batch_size.observe(size)
            if padded_tokens is not None:
                self.tokens += padded_tokens
                self.batch_tokens.observe(padded_tokens)

    def queue_waits(self, seconds):
        """Records the queue waits of a request's sentences, in seconds."""
        with self._lock:
            for value in seconds:
                self.queue_wait.observe(value)

    def request_sentences(self, count):
        """Records how many sentences one request held."""
        with self._lock:
            self.sentences_per_request.observe(count)

    def request_batches(self, count):
        """Records how many batches one request's sentences went into."""
        with self._lock:
            self.batches_per_request.observe(count)

    def render(self, model_name, gauges=None):
        """The metrics page. ``gauges()`` returns ``{"queue_length": sentences,
        "oldest_wait_seconds": seconds}`` (zeros when not given)."""
        values = {"queue_length": 0, "oldest_wait_seconds": 0.0, **(gauges() if gauges else {})}
        labels = f'model_name="{model_name}"'

        def single(name, kind, help_text, value):
            return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                    f"{name}{{{labels}}} {value}"]

        with self._lock:
            lines = ["# HELP keras_attn_zoo_requests_total HTTP requests by method and status.",
                     "# TYPE keras_attn_zoo_requests_total counter"]
            for (method, code), count in sorted(self.requests.items()):
                lines.append(f'keras_attn_zoo_requests_total{{{labels},'
                             f'method="{method}",code="{code}"}} {count}')
            lines += single("keras_attn_zoo_sentences_total", "counter",
                            "Sentences run by the model.", self.sentences)
            lines += single("keras_attn_zoo_batch_tokens_total", "counter",
                            "Padded source tokens run by the model.", self.tokens)
            lines += single("keras_attn_zoo_queue_length", "gauge",
                            "Sentences waiting for a batch.", values["queue_length"])
            lines += single("keras_attn_zoo_queue_oldest_wait_seconds", "gauge",
                            "How long the oldest waiting request has waited.",
                            f'{values["oldest_wait_seconds"]:.6f}')
            for histogram in (self.latency, self.batch_size, self.batch_tokens,
                              self.queue_wait, self.sentences_per_request,
                              self.batches_per_request):
                lines += histogram.render(labels)
        return "\n".join(lines) + "\n"

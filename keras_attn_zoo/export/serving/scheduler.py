"""Which waiting sentences the model runs next: batches by a token budget.

The server splits every text into sentences and queues each request's
sentences here; one worker thread asks `SentenceScheduler.next_batch` for a
batch, runs it and hands the results back with `complete`. Nothing here knows
TensorFlow: a batch is a list of ``(request, sentence index)`` pairs.

How a batch is formed (Marian's server and CTranslate2's batch scheduling batch
by a token budget and sort by length; the fair share between requests is
start-time fair queuing, Goyal et al. 1996, with requests as flows):

* **Token budget.** A batch costs ``sentences x longest sentence`` padded
  source tokens (the model pads every row to the longest); it stays within
  ``max_batch_tokens`` and ``max_batch_sentences``. The first sentence is taken
  even when it alone is over the budget (it runs alone).
* **Fair share between requests.** Every request's k-th sentence to be
  scheduled has the tag ``max(start + k, virtual time)``, where ``start`` is
  the scheduler's virtual time when the request arrived, and the virtual time
  is the largest tag of the batch last formed (a request that fell behind gets
  no credit to catch up with). Sentences enter a batch in tag order, so a
  request that has just arrived is first in line: a one-sentence request goes
  into the next batch, and a 50-sentence request's sentences spread over
  several batches, one per round, interleaved with the other requests'.
* **Similar lengths.** A request's next sentence is the one of its waiting
  sentences closest in length to the batch's longest so far (a request's
  sentences may run in any order; `complete` puts the results back in order),
  so a batch groups sentences of similar length and short ones are not padded
  to a long one.
* **Bounded wait.** The oldest request that has waited ``max_wait_seconds``
  has a sentence (its shortest waiting one) in every batch from then on: if
  the fair share left it out, the batch's lowest-priority sentences make room
  for it. So once the oldest waiting request is ``max_wait_seconds`` old it is
  never a batch without progress: its next sentence starts at most
  ``max_wait_seconds`` + one batch in flight + ``batch_timeout_seconds`` after
  it arrived, and a request of n sentences is done at most n batches later.
  (It does not go ahead wholesale: under overload every document ages, and
  serving documents first come, first served is what this scheduler exists to
  avoid.) Before that, the fair share keeps every request moving while the
  waiting requests' next sentences fit one batch; what it cannot promise is a
  long sentence's turn beside a stream of short ones, which aging settles.
* **One option set per batch.** The model runs one beam size and length penalty
  per call: a batch holds only requests with the options of its first sentence.

Before taking a batch the worker waits up to ``batch_timeout_seconds`` after
the oldest waiting request arrived for more to join, unless the waiting
sentences already fill the budget.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import heapq
import itertools
import threading
import time


# Defaults, chosen on 2 shared CPU cores with the small Transformer (docs/serving.md,
# "Exporting and serving"): 512 padded tokens is about 40 one-line sentences.
DEFAULT_MAX_BATCH_TOKENS = 512
DEFAULT_MAX_BATCH_SENTENCES = 64
DEFAULT_MAX_WAIT_SECONDS = 5.0


class SentenceRequest:
    """One request's sentences: those waiting, and the results so far.

    ``future`` resolves to one result per sentence, in the request's order,
    once the last of its sentences ran (or to the first error).
    """

    def __init__(self, sentences, token_counts, options, sequence, start_tag, enqueued):
        self.sentences = tuple(sentences)
        self.tokens = tuple(int(count) for count in token_counts)
        self.options = options
        self.sequence = sequence  # arrival order, breaks ties
        self.start_tag = start_tag
        self.enqueued = enqueued
        self.scheduled = 0  # sentences taken into batches so far
        self.batches = 0  # batches its sentences ran in
        self.results = [None] * len(self.sentences)
        self.remaining = len(self.sentences)
        self.future = concurrent.futures.Future()
        # Waiting sentences as (tokens, index), sorted: the closest length is a bisect.
        self._waiting = sorted((count, index) for index, count in enumerate(self.tokens))

    @property
    def waiting(self):
        return len(self._waiting)

    @property
    def waiting_tokens(self):
        return sum(tokens for tokens, _ in self._waiting)

    def first_waiting(self):
        """The waiting sentence a batch built around this request starts with:
        its longest, so that the others fill in below it."""
        return len(self._waiting) - 1

    @property
    def shortest_waiting_tokens(self):
        return self._waiting[0][0]

    def closest_waiting(self, tokens, fits):
        """Position of the waiting sentence closest in length to ``tokens`` (at
        equal distance the shorter) for which ``fits(length)`` holds, or None.
        ``fits`` is monotone (a length fits, so does every shorter one), so
        only the nearest sentence on each side can be the answer."""
        middle = bisect.bisect_left(self._waiting, (tokens, -1))  # first >= tokens
        sides = [p for p in (middle - 1, middle) if 0 <= p < len(self._waiting)
                 and fits(self._waiting[p][0])]
        if not sides:
            return None
        return min(sides, key=lambda p: (abs(self._waiting[p][0] - tokens),
                                         self._waiting[p][0]))

    def take(self, position):
        """Removes waiting sentence at ``position``; returns ``(index, tokens)``."""
        tokens, index = self._waiting.pop(position)
        self.scheduled += 1
        return index, tokens

    def put_back(self, index):
        """Undoes `take` of sentence ``index`` (it waits again)."""
        bisect.insort(self._waiting, (self.tokens[index], index))
        self.scheduled -= 1

    def drop_waiting(self):
        """Forgets the request's sentences not yet batched."""
        self._waiting = []


class Batch:
    """Sentences run together: ``items`` are ``(request, sentence index)``."""

    def __init__(self, options, items, longest, formed):
        self.options = options
        self.items = items
        self.longest = longest
        self.formed = formed

    @property
    def sentences(self):
        return [request.sentences[index] for request, index in self.items]

    @property
    def padded_tokens(self):
        return len(self.items) * self.longest

    @property
    def requests(self):
        """The distinct requests in the batch, in order of first appearance."""
        return list(dict.fromkeys(request for request, _ in self.items))


class SentenceScheduler:
    """A thread-safe queue of requests' sentences that hands out batches.

    Args:
        max_batch_tokens: padded source tokens per batch (sentences x longest).
        max_batch_sentences: sentences per batch.
        max_wait_seconds: after this long waiting, the oldest request has a
            sentence in every batch (the bound on the oldest one's wait).
        batch_timeout_seconds: how long the oldest waiting request waits for
            others to join its batch.
        metrics: optional `Metrics`; told of queue waits and finished requests.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, max_batch_tokens=DEFAULT_MAX_BATCH_TOKENS,
                 max_batch_sentences=DEFAULT_MAX_BATCH_SENTENCES,
                 max_wait_seconds=DEFAULT_MAX_WAIT_SECONDS, batch_timeout_seconds=0.005,
                 metrics=None,
                 clock=time.monotonic):
        if max_batch_tokens < 1 or max_batch_sentences < 1:
            raise ValueError("max_batch_tokens and max_batch_sentences must be positive; "
                             f"got {max_batch_tokens} and {max_batch_sentences}.")
        self.max_batch_tokens = int(max_batch_tokens)
        self.max_batch_sentences = int(max_batch_sentences)
        self.max_wait_seconds = float(max_wait_seconds)
        self.batch_timeout_seconds = float(batch_timeout_seconds)
        self.metrics = metrics
        self.clock = clock
        self._requests = []  # requests with waiting sentences, in arrival order
        self._virtual_time = 0
        self._sequence = itertools.count()
        self._condition = threading.Condition()
        self._stopping = False

    # ---- the request side -----------------------------------------------------------

    def submit(self, sentences, token_counts, options):
        """Queues one request's sentences; returns its `SentenceRequest` (wait on
        ``.future``). ``token_counts[i]`` is sentence i's length in pieces."""
        if len(sentences) != len(token_counts):
            raise ValueError(f"{len(sentences)} sentences but {len(token_counts)} "
                             "token counts.")
        with self._condition:
            request = SentenceRequest(sentences, token_counts, options,
                                      next(self._sequence), self._virtual_time, self.clock())
            if not request.sentences:
                request.future.set_result([])
                return request
            self._requests.append(request)
            self._condition.notify_all()
        if self.metrics is not None:
            self.metrics.request_sentences(len(request.sentences))
        return request

    def waiting_sentences(self):
        """Sentences queued but not yet batched, over all requests."""
        with self._condition:
            return sum(request.waiting for request in self._requests)

    def oldest_wait_seconds(self):
        """How long the oldest waiting request has waited (0 when none waits)."""
        with self._condition:
            if not self._requests:
                return 0.0
            return self.clock() - min(request.enqueued for request in self._requests)

    # ---- the worker side ------------------------------------------------------------

    def next_batch(self, block=True):
        """The next batch; None when stopping (or, with ``block=False``, when
        nothing waits). Blocking, it waits for a request, then up to
        ``batch_timeout_seconds`` after the oldest arrived for more to join."""
        with self._condition:
            while block and not self._requests and not self._stopping:
                self._condition.wait()
            if not self._requests:
                return None
            deadline = min(r.enqueued for r in self._requests) + self.batch_timeout_seconds
            while block and not self._stopping:
                remaining = deadline - self.clock()
                if remaining <= 0 or self._fills_a_batch():
                    break
                self._condition.wait(remaining)
            return self._form_batch()

    def complete(self, batch, results):
        """Stores ``results`` (one per batch item, in order); resolves every
        request whose last sentence this was. Returns the requests finished."""
        finished = []
        for (request, index), result in zip(batch.items, results, strict=True):
            if request.future.done():  # failed meanwhile: its results are dropped
                continue
            request.results[index] = result
            request.remaining -= 1
            if request.remaining == 0:
                finished.append(request)
        for request in batch.requests:
            request.batches += 1
        for request in finished:
            if self.metrics is not None:
                self.metrics.request_batches(request.batches)
            request.future.set_result(request.results)
        return finished

    def fail(self, request, error):
        """Fails ``request`` with ``error``; its waiting sentences are dropped."""
        with self._condition:
            request.drop_waiting()
            if request in self._requests:
                self._requests.remove(request)
        if not request.future.done():
            request.future.set_exception(error)

    def stop(self):
        """Wakes every waiter and makes the scheduler stop handing out batches."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()

    # ---- planning (under the lock) ----------------------------------------------------

    def _fills_a_batch(self):
        sentences = sum(request.waiting for request in self._requests)
        tokens = sum(request.waiting_tokens for request in self._requests)
        return sentences >= self.max_batch_sentences or tokens >= self.max_batch_tokens

    def _priority(self, request):
        """Sort key of ``request``'s next sentence: its fair-share tag; at equal
        tags the request with fewer sentences waiting first, so that a short
        request, not a document, sets the batch's length."""
        # No credit for having fallen behind (its sentences did not fit beside
        # shorter ones): a request's tag is never below the virtual time, as a
        # flow becoming active in start-time fair queuing. Otherwise a document
        # whose long sentences lagged would take whole batches to catch up
        # while one-sentence requests wait.
        tag = max(request.start_tag + request.scheduled, self._virtual_time)
        return (tag, request.waiting, request.sequence)

    def _form_batch(self):
        now = self.clock()
        aged = [r for r in self._requests if now - r.enqueued >= self.max_wait_seconds]
        oldest = aged[0] if aged else None  # `_requests` is in arrival order
        heap = [(self._priority(request), request) for request in self._requests]
        heapq.heapify(heap)
        options = oldest.options if oldest else heap[0][1].options
        items, longest = [], 0
        largest_tag = self._virtual_time
        while heap and len(items) < self.max_batch_sentences:
            key, request = heapq.heappop(heap)
            if request.options != options:
                continue
            if not items:
                position = request.first_waiting()
            else:
                count = len(items) + 1
                position = request.closest_waiting(
                    longest, lambda tokens: count * max(longest, tokens) <= self.max_batch_tokens)
                if position is None:  # none of its sentences fits: it waits
                    continue
            index, tokens = request.take(position)
            items.append((request, index))
            longest = max(longest, tokens)
            largest_tag = max(largest_tag, key[0])
            if request.waiting:  # its next sentence, at its next fair-share place
                heapq.heappush(heap, (self._priority(request), request))
        if oldest is not None and all(request is not oldest for request, _ in items):
            items, longest = self._make_room(items, oldest)
        self._virtual_time = largest_tag
        self._requests = [request for request in self._requests if request.waiting]
        assert items, "a batch is formed only while a request waits"
        if self.metrics is not None:
            self.metrics.queue_waits([now - request.enqueued for request, _ in items])
        return Batch(options, items, longest, now)

    def _make_room(self, items, oldest):
        """``items`` plus the shortest waiting sentence of ``oldest``, the oldest
        aged request, after putting back the lowest-priority sentences (the
        last taken) until it fits the budget."""
        shortest = oldest.shortest_waiting_tokens
        while items:
            longest = max([shortest] + [r.tokens[i] for r, i in items])
            if (len(items) + 1) * longest <= self.max_batch_tokens and (
                    len(items) < self.max_batch_sentences):
                break
            request, index = items.pop()
            request.put_back(index)
        index, _ = oldest.take(0)  # its shortest
        items.append((oldest, index))
        return items, max(request.tokens[i] for request, i in items)

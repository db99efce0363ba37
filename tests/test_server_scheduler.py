"""The server's batch scheduler: token budget, fair share, order kept, bounded wait.

The scheduler is plain Python: these tests give it requests with known token
counts and a clock they move by hand, form batches one by one and check their
composition, so nothing here depends on how fast the machine is. The last tests
run the real tiny export through `ModelRunner` with batches taken by the test.
"""

import pytest

from keras_attn_zoo.export.serving.scheduler import SentenceScheduler

OPTIONS = (4, 0.6, 2.0, 10.0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def scheduler(clock=None, **settings):
    settings = {"max_batch_tokens": 200, "max_batch_sentences": 16,
                "max_wait_seconds": 10.0, **settings}
    return SentenceScheduler(clock=clock or Clock(), **settings)


def document(count, name="p"):
    """``count`` sentences of 5 to 29 tokens, lengths mixed up."""
    return [f"{name}{i}" for i in range(count)], [5 + (i * 7) % 25 for i in range(count)]


def drain(queue):
    """Forms and completes batches until none waits; returns the batches."""
    batches = []
    while (batch := queue.next_batch(block=False)) is not None:
        batches.append(batch)
        queue.complete(batch, [request.sentences[index] for request, index in batch.items])
    return batches


def test_a_large_request_is_split_interleaved_and_reassembled_in_order():
    queue = scheduler()
    sentences, tokens = document(50)
    large = queue.submit(sentences, tokens, OPTIONS)
    shorts = [queue.submit([f"s{i}"], [8], OPTIONS) for i in range(3)]
    first = queue.next_batch(block=False)
    queue.complete(first, [r.sentences[i] for r, i in first.items])
    late = queue.submit(["late"], [8], OPTIONS)  # arrives after the first batch
    batches = [first] + drain(queue)

    # Nothing lost, nothing twice, each request's results in its own order.
    assert large.future.result() == sentences
    assert [s.future.result() for s in shorts + [late]] == [["s0"], ["s1"], ["s2"], ["late"]]
    ran = [(id(request), index) for batch in batches for request, index in batch.items]
    assert len(ran) == len(set(ran)) == 54
    # Every batch within the token budget and the sentence limit.
    for batch in batches:
        assert batch.padded_tokens <= 200 and len(batch.items) <= 16
    # The large request ran in several batches, sharing them with the short ones.
    with_large = [b for b in batches if large in b.requests]
    assert len(with_large) >= 5
    assert large.batches == len(with_large)
    # Each short request rode in the first batch formed after it arrived.
    assert set(shorts) <= set(first.requests) and large in first.requests
    assert late in batches[1].requests and large in batches[1].requests


def test_a_short_request_goes_into_the_next_batch_while_a_long_one_is_in_flight():
    queue = scheduler()
    sentences, tokens = document(50)
    large = queue.submit(sentences, tokens, OPTIONS)
    in_flight = queue.next_batch(block=False)  # the model runs it; not completed yet
    short = queue.submit(["the dog"], [6], OPTIONS)
    following = queue.next_batch(block=False)
    # The short one goes first in the next batch, which is built around its
    # length: the document fills it with its shortest waiting sentences.
    assert following.items[0] == (short, 0)
    waiting = sorted(tokens[i] for i in range(50)
                     if (large, i) not in in_flight.items)
    picked = sorted(large.tokens[i] for r, i in following.items if r is large)
    assert picked == waiting[:len(picked)] and len(picked) == len(following.items) - 1
    queue.complete(following, [r.sentences[i] for r, i in following.items])
    assert short.future.result() == ["the dog"]
    assert not large.future.done()
    queue.complete(in_flight, [r.sentences[i] for r, i in in_flight.items])
    drain(queue)
    assert large.future.result() == sentences


def test_sentences_of_similar_length_share_a_batch():
    queue = scheduler()
    sentences, tokens = document(40)
    queue.submit(sentences, tokens, OPTIONS)
    batches = drain(queue)
    # Alone, a request's sentences run longest first in runs of similar length:
    # each batch is a contiguous stretch of its sorted lengths.
    lengths = [sorted(r.tokens[i] for r, i in batch.items) for batch in batches]
    assert [n for batch in lengths[::-1] for n in batch] == sorted(tokens)
    # So padding stays small: what the model runs is close to the real tokens.
    assert sum(batch.padded_tokens for batch in batches) <= 1.25 * sum(tokens)


def test_a_sentence_over_the_budget_runs_alone():
    queue = scheduler()
    huge = queue.submit(["long"], [500], OPTIONS)
    queue.submit(["a", "b"], [5, 5], OPTIONS)
    batches = drain(queue)
    assert [len(b.items) for b in batches] == [1, 2]
    assert batches[0].requests == [huge] and batches[0].padded_tokens == 500


def test_the_oldest_aged_request_is_in_every_batch_so_its_wait_is_bounded():
    """Long sentences that never fit beside a stream of short requests (the
    short ones win the fair-share ties) would wait forever; once the request is
    max_wait old, one of its sentences is in every batch, the short requests
    that no longer fit making room."""
    clock = Clock()
    queue = scheduler(clock, max_batch_tokens=40, max_batch_sentences=4, max_wait_seconds=1.0)
    old = queue.submit(["long0", "long1", "long2"], [30, 20, 30], OPTIONS)
    seen, shorts = [], []
    for step in range(12):
        for k in range(3):
            shorts.append(queue.submit([f"n{step}.{k}"], [10], OPTIONS))
        batch = queue.next_batch(block=False)
        seen.append((clock.now, [r.sentences[i] for r, i in batch.items if r is old]))
        assert batch.padded_tokens <= 40
        queue.complete(batch, [r.sentences[i] for r, i in batch.items])
        if old.future.done():
            break
        clock.now += 0.25
    # Left out before 1 s; from then on one sentence a batch, shortest first.
    assert seen == [(0.0, []), (0.25, []), (0.5, []), (0.75, []),
                    (1.0, ["long1"]), (1.25, ["long0"]), (1.5, ["long2"])]
    assert old.future.result() == ["long0", "long1", "long2"]
    # Nothing lost: the short requests that made room run later.
    drain(queue)
    assert [r.future.result() for r in shorts] == [list(r.sentences) for r in shorts]


def test_one_option_set_per_batch_and_every_set_gets_served():
    queue = scheduler()
    greedy = (1, 0.0, 2.0, 10.0)
    a = queue.submit(["a0", "a1"], [5, 5], OPTIONS)
    b = queue.submit(["b0"], [5], greedy)
    c = queue.submit(["c0"], [5], OPTIONS)
    batches = drain(queue)
    # b leads (equal tags: the request with fewer sentences waiting first).
    assert [sorted(r.sentences[i] for r, i in batch.items) for batch in batches] == [
        ["b0"], ["a0", "a1", "c0"]]
    assert [batch.options for batch in batches] == [greedy, OPTIONS]
    assert a.future.result() == ["a0", "a1"] and c.future.result() == ["c0"]
    assert b.future.result() == ["b0"]


def test_a_failed_request_drops_its_waiting_sentences_and_the_others_finish():
    queue = scheduler(max_batch_sentences=2)
    failing = queue.submit(["x0", "x1", "x2", "x3"], [5] * 4, OPTIONS)
    other = queue.submit(["y0", "y1"], [5] * 2, OPTIONS)
    batch = queue.next_batch(block=False)
    queue.fail(failing, ValueError("sentence 1 is bad"))
    queue.complete(batch, [r.sentences[i] for r, i in batch.items])
    drain(queue)
    with pytest.raises(ValueError, match="sentence 1"):
        failing.future.result()
    assert other.future.result() == ["y0", "y1"]
    assert queue.waiting_sentences() == 0


def test_settings_are_checked():
    with pytest.raises(ValueError, match="positive"):
        SentenceScheduler(max_batch_tokens=0)
    with pytest.raises(ValueError, match="token counts"):
        SentenceScheduler().submit(["a", "b"], [3], OPTIONS)
    assert SentenceScheduler().submit([], [], OPTIONS).future.result() == []


# ---- the real model, batches taken by the test ------------------------------------

@pytest.fixture(scope="module")
def runner(tiny_export):
    from keras_attn_zoo.export.serving import ModelRunner

    # A budget of ~3 tiny-export sentences per batch: a document spreads over many.
    runner = ModelRunner(tiny_export, start_worker=False, batch_max_tokens=48,
                         batch_max_sentences=8)
    assert runner.wait_until_loaded(120), runner.error
    yield runner
    runner.stop()


def run_all(runner):
    batches = []
    while (batch := runner.scheduler.next_batch(block=False)) is not None:
        batches.append([(request, index) for request, index in batch.items])
        runner.run_batch(batch)
    return batches


def test_the_model_answers_a_split_interleaved_document_as_sentence_by_sentence(runner):
    from tests.tiny_export import SENTENCES

    sentences = [SENTENCES[i % len(SENTENCES)] + (" and a dog" * (i % 3)) for i in range(14)]
    options = runner.default_options()
    expected = {}  # each sentence translated alone
    for sentence in sentences + ["the dog", "a bird"]:
        request = runner.submit([sentence], options)
        run_all(runner)
        expected[sentence] = request.future.result()[0]

    large = runner.submit(sentences, options)
    shorts = [runner.submit([s], options) for s in ("the dog", "a bird")]
    batches = run_all(runner)
    # The document spread over several batches; the short requests rode in the first.
    assert len(batches) >= 3 and all(any(r is large for r, _ in b) for b in batches)
    assert {shorts[0], shorts[1]} <= {r for r, _ in batches[0]}
    results = large.future.result()
    assert [r["translation"] for r in results] == [expected[s]["translation"]
                                                   for s in sentences]
    assert [r["score"] for r in results] == pytest.approx(
        [expected[s]["score"] for s in sentences], abs=1e-4)
    assert [r["source_pieces"] for r in results] == [expected[s]["source_pieces"]
                                                     for s in sentences]
    assert shorts[0].future.result()[0]["translation"] == expected["the dog"]["translation"]
    assert shorts[1].future.result()[0]["translation"] == expected["a bird"]["translation"]


def test_a_refused_sentence_fails_its_request_alone_when_split_over_batches(runner):
    from keras_attn_zoo.export.serving import BadRequest

    options = runner.default_options()
    too_long = " ".join(["dog"] * 1500)
    bad = runner.submit(["the cat", too_long, "a bird", "the tree"], options)
    good = runner.submit(["the dog sees the cat", "a small bird"], options)
    run_all(runner)
    with pytest.raises(BadRequest, match="sentence 1 has"):
        bad.future.result()
    assert len(good.future.result()) == 2
    assert runner.scheduler.waiting_sentences() == 0

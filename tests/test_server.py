"""The HTTP server, for real: a subprocess on a free 127.0.0.1 port."""

import concurrent.futures
import json
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url, body=None, raw=None, method=None, timeout=120):
    """Returns (status, parsed JSON or text)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def server(tiny_export):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_attn_zoo.cli", "serve", "--model", str(tiny_export),
         "--port", str(port), "--max-batch-size", "16", "--version-label", "stable",
         # Small batches, so that a long request spreads over several.
         "--batch-max-sentences", "8"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    name = tiny_export.name
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()[-3000:]
        try:
            status, _ = request(f"{base}/v1/models/{name}", timeout=5)
            if status == 200:
                break
        except OSError:
            pass
        time.sleep(0.3)
    else:
        process.kill()
        raise AssertionError("server did not become AVAILABLE in 120 s")
    yield {"base": base, "model": f"{base}/v1/models/{name}", "process": process,
           "name": name}
    _stop_gracefully(process)


def _stop_gracefully(process):
    """SIGTERM: the server finishes, says so and exits 0 (else the teardown fails)."""
    if process.poll() is not None:
        raise AssertionError(f"the server died: {process.stderr.read()[-3000:]}")
    process.send_signal(signal.SIGTERM)
    try:
        stdout, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0
    assert "server stopped" in stdout


def test_page_in_a_real_headless_browser(server):
    """Type a sentence, submit, see the translation and the heat map."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    if not pathlib.Path("/usr/bin/chromedriver").exists():
        pytest.fail("chromium-driver is not installed; `make test` installs it")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path="/usr/bin/chromedriver")
    browser = webdriver.Chrome(options=options, service=service)
    try:
        browser.get(server["base"] + "/")
        box = browser.find_element(By.ID, "source")
        box.clear()
        box.send_keys("the cat sees the dog")
        browser.find_element(By.ID, "submit").click()
        # The page shows "…" while the request runs.
        WebDriverWait(browser, 60).until(
            lambda b: b.find_element(By.ID, "translation").text != "…"
            or b.find_element(By.ID, "error").text)
        assert browser.find_element(By.ID, "error").text == ""
        _, expected = request(server["model"] + ":translate",
                              {"text": ["the cat sees the dog"]})
        assert browser.find_element(By.ID, "translation").text == expected["translations"][0].strip()
        cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap tbody td")
        detail = expected["details"][0]
        assert len(cells) == len(detail["target_pieces"]) * len(detail["source_pieces"])
    finally:
        browser.quit()


# ---- TensorFlow Serving's REST API, request by request ---------------------------

def test_status_of_the_model_its_version_and_its_label(server):
    status, body = request(server["model"])
    assert status == 200
    assert body == {"model_version_status": [{
        "version": "1", "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]}
    assert request(server["model"] + "/versions/1") == (200, body)
    assert request(server["model"] + "/labels/stable") == (200, body)
    status, error = request(server["model"] + "/versions/2")
    assert status == 404 and "version 2" in error["error"]
    status, error = request(server["model"] + "/labels/canary")
    assert status == 400 and "canary" in error["error"]
    status, error = request(server["base"] + "/v1/models/no-such-model")
    assert status == 404 and "no-such-model" in error["error"]


def test_metadata_lists_each_signature_with_inputs_and_outputs(server):
    status, body = request(server["model"] + "/metadata")
    assert status == 200
    assert body["model_spec"]["name"] == server["name"]
    assert body["model_spec"]["version"] == "1"
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == ["sample", "score", "serving_default", "translate",
                                  "translate_ids", "translate_n_best",
                                  "translate_with_options"]
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    text = default["inputs"]["text"]
    assert text["dtype"] == "DT_STRING"
    assert [d["size"] for d in text["tensor_shape"]["dim"]] == ["-1"]
    outputs = default["outputs"]
    assert sorted(outputs) == ["alignment", "length", "score", "source_pieces",
                               "target_pieces", "translation"]
    assert outputs["alignment"]["dtype"] == "DT_FLOAT"
    assert len(outputs["alignment"]["tensor_shape"]["dim"]) == 3
    assert outputs["length"]["dtype"] == "DT_INT32"
    options = signatures["translate_with_options"]["inputs"]
    assert options["beam_size"]["dtype"] == "DT_INT32"
    assert options["beam_size"]["tensor_shape"].get("dim", []) == []
    assert body["metadata"]["model_card"]["max_input_length"] == 1024
    assert request(server["model"] + "/versions/1/metadata") == (200, body)
    assert request(server["model"] + "/labels/stable/metadata") == (200, body)
    assert request(server["model"] + "/versions/7/metadata")[0] == 404


def test_predict_on_a_version_and_a_label(server):
    texts = ["the cat sees the dog", "dog"]
    status, plain = request(server["model"] + ":predict", {"instances": texts})
    assert status == 200, plain
    for path in ("/versions/1:predict", "/labels/stable:predict"):
        assert request(server["model"] + path, {"instances": texts}) == (200, plain)
    status, error = request(server["model"] + "/versions/2:predict", {"instances": texts})
    assert status == 404 and "Specific" in error["error"]
    status, error = request(server["model"] + "/labels/canary:predict", {"instances": texts})
    assert status == 400 and "canary" in error["error"]


def test_signature_name_is_honoured_and_an_unknown_one_refused(server):
    texts = ["the cat sees the dog", "a small bird sleeps"]
    _, default = request(server["model"] + ":predict", {"instances": texts})
    status, named = request(server["model"] + ":predict",
                            {"instances": texts, "signature_name": "translate"})
    assert status == 200 and named == default
    status, greedy = request(server["model"] + ":predict", {
        "inputs": {"text": texts, "beam_size": 1, "length_penalty": 0.0},
        "signature_name": "translate_with_options"})
    assert status == 200, greedy
    _, expected = request(server["model"] + ":translate",
                          {"text": texts, "beam_size": 1, "length_penalty": 0.0})
    assert greedy["outputs"]["translation"] == expected["translations"]
    status, rows = request(server["model"] + ":predict", {
        "instances": [{"text": t, "beam_size": 1, "length_penalty": 0.0} for t in texts],
        "signature_name": "translate_with_options"})
    assert status == 200, rows
    assert [p["translation"] for p in rows["predictions"]] == expected["translations"]
    status, error = request(server["model"] + ":predict",
                            {"instances": texts, "signature_name": "nope"})
    assert status == 400
    assert '"nope" not found' in error["error"] and "serving_default" in error["error"]
    status, error = request(server["model"] + ":predict",
                            {"inputs": {"text": texts, "beam": 1},
                             "signature_name": "translate_with_options"})
    assert status == 400 and "beam" in error["error"]


@pytest.mark.parametrize("verb, kind", [("classify", "classification"),
                                        ("regress", "regression")])
def test_classify_and_regress_answer_as_for_a_model_without_them(server, verb, kind):
    body = {"examples": [{"text": "the dog"}]}
    status, error = request(f"{server['model']}:{verb}", body)
    assert status == 400
    assert error["error"] == (f"Expected {kind} signature method_name to be "
                              f"tensorflow/serving/{verb}. Was: tensorflow/serving/predict")
    status, error = request(f"{server['model']}:{verb}", dict(body, signature_name="nope"))
    assert status == 400 and '"nope" not found' in error["error"]


def test_predict_row_and_columnar_formats_agree_with_translate(server):
    texts = ["the cat sees the dog", "die Katze mag den Fluss ."]
    status, rows = request(server["model"] + ":predict", {"instances": texts})
    assert status == 200, rows
    status, columns = request(server["model"] + ":predict", {"inputs": texts})
    assert status == 200, columns
    status, human = request(server["model"] + ":translate", {"text": texts, "beam_size": 4})
    assert status == 200, human
    assert [p["translation"] for p in rows["predictions"]] == columns["outputs"]["translation"]
    assert columns["outputs"]["translation"] == human["translations"]
    detail = human["details"][0]
    assert len(detail["alignment"]) == len(detail["target_pieces"])
    # Every output of the signature, per instance (row) or batched (columnar).
    assert sorted(rows["predictions"][0]) == sorted(columns["outputs"]) == [
        "alignment", "length", "score", "source_pieces", "target_pieces", "translation"]
    assert rows["predictions"][0]["source_pieces"] == detail["source_pieces"]
    assert columns["outputs"]["score"] == pytest.approx(human["scores"], abs=1e-5)
    widths = {len(p) for p in columns["outputs"]["source_pieces"]}
    assert len(widths) == 1, "columnar outputs are rectangular, as tensors"
    # Named inputs and TF Serving's base64 form of a string.
    import base64

    named = [{"text": t} for t in texts]
    b64 = [{"b64": base64.b64encode(t.encode()).decode()} for t in texts]
    assert request(server["model"] + ":predict", {"instances": named}) == (200, rows)
    assert request(server["model"] + ":predict", {"instances": b64}) == (200, rows)
    assert request(server["model"] + ":predict", {"inputs": {"text": texts}}) == (200, columns)


# ---- say why, lose nothing --------------------------------------------------------

def test_an_over_long_sentence_is_refused_with_the_models_reason(server, tiny_export):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor

    from keras_attn_zoo.export import latest_version

    text = " ".join(["tree", "dogs", "cats", "bird"] * 375)  # 1,500 words, 7,499 chars
    assert len(text) == 7_499
    vocabulary = sentencepiece_processor(
        latest_version(tiny_export) / "assets" / "vocab.model")
    tokens = len(vocabulary.encode(text)) + 1  # pieces + EOS
    for method, body in ((":translate", {"text": ["dog", text]}),
                         (":predict", {"instances": ["dog", text]})):
        status, error = request(server["model"] + method, body)
        assert status == 400, error
        assert f"has {tokens} tokens" in error["error"], error
        assert "max_input_length=1024" in error["error"]
        assert "text 1" in error["error"], "names the request's text"
        assert "Graph execution error" not in error["error"]


PARAGRAPH = ["The cat sees the dog.", "A small bird sleeps.", "The tree likes a small cat.",
             "The dog runs.", "A red house sleeps and the cat sleeps."]


def metric(text, name, **labels):
    """The value of one sample of a Prometheus text page (0 if absent)."""
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_paragraph_is_split_translated_in_one_batch_and_joined_in_order(server):
    from keras_attn_zoo.export.sentences import split_sentences

    paragraph = " ".join(PARAGRAPH)
    assert split_sentences(paragraph, "en") == PARAGRAPH  # a controlled input
    alone = [request(server["model"] + ":translate", {"text": [s]})[1] for s in PARAGRAPH]
    _, before = request(server["base"] + "/monitoring/prometheus/metrics")
    status, body = request(server["model"] + ":translate", {"text": [paragraph]})
    assert status == 200, body
    _, after = request(server["base"] + "/monitoring/prometheus/metrics")
    # The model ran the paragraph's N sentences (in one call: one batch).
    sentences = "keras_attn_zoo_sentences_total"
    assert metric(after, sentences) - metric(before, sentences) == len(PARAGRAPH)
    batches = "keras_attn_zoo_batch_size_count"
    assert metric(after, batches) - metric(before, batches) == 1
    expected = " ".join(a["translations"][0] for a in alone if a["translations"][0].strip())
    assert body["translations"] == [expected]
    detail = body["details"][0]
    assert detail["sentences"] == len(PARAGRAPH)
    assert detail["score"] == pytest.approx(sum(a["scores"][0] for a in alone), abs=1e-4)
    # The alignment covers the whole input: every piece of every sentence.
    assert detail["source_pieces"] == [p for a in alone for p in a["details"][0]["source_pieces"]]
    assert detail["target_pieces"] == [p for a in alone for p in a["details"][0]["target_pieces"]]
    assert len(detail["alignment"]) == len(detail["target_pieces"])
    assert {len(row) for row in detail["alignment"]} == {len(detail["source_pieces"])}
    status, rows = request(server["model"] + ":predict", {"instances": [paragraph]})
    assert rows["predictions"][0]["translation"] == expected
    # Turned off: the paragraph is one sentence to the model.
    status, whole = request(server["model"] + ":translate",
                            {"text": [paragraph], "split_sentences": False})
    assert status == 200 and whole["details"][0]["sentences"] == 1
    assert len(whole["details"][0]["source_pieces"]) < len(detail["source_pieces"]) + 1


def test_the_german_splitter_keeps_abbreviations_and_ordinals_together():
    from keras_attn_zoo.export.sentences import split_sentences
    from keras_attn_zoo.export.sentences import split_texts

    assert split_sentences("Dr. Müller kam am 3. Mai. Er sah z. B. den Hund.", "de") == [
        "Dr. Müller kam am 3. Mai.", "Er sah z. B. den Hund."]
    assert split_texts(["Eins. Zwei.", "", "  "], "de") == (["Eins.", "Zwei.", "", "  "],
                                                             [2, 1, 1])


def test_prometheus_metrics_move(server):
    url = server["base"] + "/monitoring/prometheus/metrics"
    status, before = request(url)
    assert status == 200
    assert "# TYPE keras_attn_zoo_requests_total counter" in before
    assert "# TYPE keras_attn_zoo_request_latency_seconds histogram" in before
    assert "# TYPE keras_attn_zoo_queue_length gauge" in before
    # What shows the scheduler at work.
    for name, kind in (("queue_wait_seconds", "histogram"), ("batch_tokens", "histogram"),
                       ("request_sentences", "histogram"), ("request_batches", "histogram"),
                       ("queue_oldest_wait_seconds", "gauge")):
        assert f"# TYPE keras_attn_zoo_{name} {kind}" in before
    request(server["model"] + ":predict", {"instances": ["dog", "the cat"]})
    request(server["model"] + ":predict", {"instances": [3]})
    _, after = request(url)
    ok = dict(method="predict", code="200")
    bad = dict(method="predict", code="400")
    name = "keras_attn_zoo_requests_total"
    assert metric(after, name, **ok) == metric(before, name, **ok) + 1
    assert metric(after, name, **bad) == metric(before, name, **bad) + 1
    latency = "keras_attn_zoo_request_latency_seconds_count"
    assert metric(after, latency) >= metric(before, latency) + 2
    assert metric(after, "keras_attn_zoo_batch_size_sum") >= (
        metric(before, "keras_attn_zoo_batch_size_sum") + 2)
    assert metric(after, "keras_attn_zoo_queue_length") >= 0
    # One request of two sentences: two queue waits, one request of 2 sentences.
    waits = "keras_attn_zoo_queue_wait_seconds_count"
    assert metric(after, waits) == metric(before, waits) + 2
    sizes = "keras_attn_zoo_request_sentences_bucket"
    assert metric(after, sizes, le="2") - metric(before, sizes, le="2") == 1
    assert metric(after, sizes, le="1") == metric(before, sizes, le="1")
    assert metric(after, "keras_attn_zoo_batch_tokens_sum") > metric(
        before, "keras_attn_zoo_batch_tokens_sum")


@pytest.mark.parametrize("raw, fragment", [
    (b"not json", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (json.dumps({"instances": "x", "inputs": "y"}).encode(), "exactly one"),
    (json.dumps({"text": ["a"], "beam": 4}).encode(), "unknown fields"),
    (json.dumps({"text": []}).encode(), "non-empty list"),
    (json.dumps({"text": [3]}).encode(), "not a string"),
    (json.dumps({"text": ["a"] * 17}).encode(), "limit is 16"),
    (json.dumps({"text": ["a" * 10_001]}).encode(), "limit is 10000"),
    (json.dumps({"text": ["a"], "beam_size": 0}).encode(), "beam_size"),
    (b'{"text": ["\\ud800"]}', "lone surrogate"),
])
def test_bad_requests_get_400_with_a_message_and_the_server_keeps_serving(server, raw, fragment):
    method = server["model"] + (":predict" if b"instances" in raw else ":translate")
    status, body = request(method, raw=raw)
    assert status == 400, body
    assert fragment in body["error"]
    status, _ = request(server["model"] + ":translate", {"text": ["the dog"]})
    assert status == 200


def test_an_oversized_body_is_refused_before_it_is_read(server):
    status, body = request(server["model"] + ":translate", raw=b" " * (2 << 20))
    assert status == 413 and "limit" in body["error"]


def test_concurrent_clients_all_get_their_own_answers(server):
    texts = [" ".join(["the dog sees"] + ["a cat"] * (i % 5) + ["the tree"]) for i in range(12)]
    _, alone = request(server["model"] + ":translate", {"text": texts})

    def one(index):
        return request(server["model"] + ":translate", {"text": [texts[index]]})

    def bad(index):
        return request(server["model"] + ":translate", {"text": [" ".join(["dog"] * 1500)]})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        refused = [pool.submit(bad, i) for i in range(4)]
        answers = list(pool.map(one, range(len(texts))))
    assert all(status == 200 for status, _ in answers)
    assert [body["translations"][0] for _, body in answers] == alone["translations"]
    # Refused inputs, possibly batched with good ones, fail alone.
    assert all(f.result()[0] == 400 for f in refused)


def test_a_long_request_spreads_over_batches_beside_short_ones_and_keeps_its_order(server):
    """A 40-sentence text runs in several model calls (at most 8 sentences each
    here), with short requests sent at the same time; every answer is the
    sentence-by-sentence translation, in order, and nothing is lost."""
    sentences = [PARAGRAPH[i % len(PARAGRAPH)] for i in range(40)]
    alone = request(server["model"] + ":translate",
                    {"text": PARAGRAPH, "split_sentences": False})[1]["translations"]
    url = server["base"] + "/monitoring/prometheus/metrics"
    _, before = request(url)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        document = pool.submit(request, server["model"] + ":translate",
                               {"text": [" ".join(sentences)]})
        shorts = list(pool.map(
            lambda s: request(server["model"] + ":translate", {"text": [s]}), PARAGRAPH))
        status, body = document.result()
    assert status == 200, body
    assert body["details"][0]["sentences"] == 40
    expected = [alone[i % len(PARAGRAPH)] for i in range(40)]
    assert body["translations"] == [" ".join(t for t in expected if t.strip())]
    assert [b["translations"][0] for _, b in shorts] == alone
    _, after = request(url)
    # The document's request ran in at least 40 / 8 = 5 model calls.
    spread = "keras_attn_zoo_request_batches_bucket"
    assert metric(after, spread, le="4") - metric(before, spread, le="4") == len(PARAGRAPH)
    assert metric(after, spread, le="+Inf") - metric(before, spread, le="+Inf") == 6


def test_static_page_is_served(server):
    status, page = request(server["base"] + "/")
    assert status == 200 and "<textarea" in page and server["name"] in page


# SIGTERM stops the server gracefully (exit 0, "server stopped"): checked by the
# `server` fixture's teardown, after this module's requests.


def test_bounded_load_benchmark_smoke(server, tmp_path):
    """benchmarks/server_load.py end to end against the running server (`--url`; a
    server of its own cost a start-up, TensorFlow's import and the SavedModel's
    load): no errors, latencies reported, and the server still answers."""
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "server_load.py"), "--url",
         server["model"], "--smoke", "--bad-share", "0.25", "--output-dir", str(tmp_path),
         # 12 requests per load (smoke: 24): still 2 paragraphs and 2 refused each.
         "--requests", "12"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    [result] = tmp_path.glob("server_load-*-smoke.json")
    document = json.loads(result.read_text())
    rows = document["rows"]
    assert all(row["errors"] == 0 and row["ok"] == row["requests"] - row["bad_requests"]
               and row["server_errors_5xx"] == 0 for row in rows)
    assert rows[1]["bad_requests"] > 0 and rows[1]["paragraph_count"] > 0
    assert rows[1]["short_p99_ms"] >= rows[1]["short_p50_ms"] > 0
    assert rows[1]["sentences_per_second"] > rows[1]["requests_per_second"]
    assert document["server_histograms"]["running server"], "the server's batch histograms"
    assert server["process"].poll() is None


def test_translate_returns_n_best_hypotheses(server):
    texts = ["the cat sees the dog", "die Katze mag den Fluss ."]
    status, one = request(server["model"] + ":translate", {"text": texts, "beam_size": 4})
    assert status == 200, one
    status, three = request(server["model"] + ":translate",
                            {"text": texts, "beam_size": 4, "num_hypotheses": 3})
    assert status == 200, three
    assert three["translations"] == one["translations"]  # the best is unchanged
    for detail in three["details"]:
        hypotheses = detail["hypotheses"]
        assert len(hypotheses) == 3 and hypotheses[0]["translation"] == detail["translation"]
        scores = [h["score"] for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
    assert "hypotheses" not in one["details"][0]
    status, body = request(server["model"] + ":translate",
                           {"text": texts, "beam_size": 2, "num_hypotheses": 3})
    assert status == 400 and "num_hypotheses" in body["error"]


def test_predict_runs_the_n_best_sampling_and_scoring_signatures(server):
    texts = ["the cat sees the dog", "die Katze mag den Fluss ."]
    options = {"beam_size": 4, "length_penalty": 0.0, "max_length_a": 2.0,
               "max_length_b": 10.0}
    status, best = request(server["model"] + ":predict", {
        "signature_name": "translate_n_best",
        "inputs": {"text": texts, "num_hypotheses": 2, "no_repeat_ngram_size": 0,
                   **options}})
    assert status == 200, best
    assert [len(h) for h in best["outputs"]["hypotheses"]] == [2, 2]
    status, rows = request(server["model"] + ":predict", {
        "signature_name": "sample",
        "instances": [{"text": t, "temperature": 1.0, "top_k": 1, "top_p": 1.0, "seed": 3,
                       "max_length_a": 2.0, "max_length_b": 10.0} for t in texts]})
    assert status == 200, rows
    greedy = request(server["model"] + ":predict", {
        "signature_name": "translate_with_options",
        "inputs": {"text": texts, **options, "beam_size": 1}})[1]
    assert [r["translation"] for r in rows["predictions"]] == greedy["outputs"]["translation"]
    translations = best["outputs"]["translation"]
    status, scored = request(server["model"] + ":predict", {
        "signature_name": "score", "inputs": {"text": texts, "target": translations}})
    assert status == 200, scored
    assert len(scored["outputs"]["log_prob"]) == 2
    assert all(value <= 0 for value in scored["outputs"]["log_prob"])
    status, body = request(server["model"] + ":predict", {
        "signature_name": "score", "inputs": {"text": texts}})
    assert status == 400 and "missing ['target']" in body["error"]

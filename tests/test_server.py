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
         "--port", str(port), "--max-batch-size", "16", "--max-text-chars", "2000"],
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
    if process.poll() is None:
        process.kill()


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


def test_status_and_metadata(server):
    status, body = request(server["model"])
    assert status == 200
    assert body["model_version_status"][0]["state"] == "AVAILABLE"
    status, body = request(server["model"] + "/metadata")
    assert status == 200
    assert "serving_default" in body["metadata"]["signature_names"]


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


@pytest.mark.parametrize("raw, fragment", [
    (b"not json", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (json.dumps({"instances": "x", "inputs": "y"}).encode(), "exactly one"),
    (json.dumps({"text": ["a"], "beam": 4}).encode(), "unknown fields"),
    (json.dumps({"text": []}).encode(), "non-empty list"),
    (json.dumps({"text": [3]}).encode(), "not a string"),
    (json.dumps({"text": ["a"] * 17}).encode(), "limit is 16"),
    (json.dumps({"text": ["a" * 2001]}).encode(), "limit is 2000"),
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

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(len(texts))))
    assert all(status == 200 for status, _ in answers)
    assert [body["translations"][0] for _, body in answers] == alone["translations"]


def test_static_page_is_served(server):
    status, page = request(server["base"] + "/")
    assert status == 200 and "<textarea" in page and server["name"] in page


def test_sigterm_stops_gracefully(tiny_export):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_attn_zoo.cli", "serve", "--model", str(tiny_export),
         "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    url = f"http://127.0.0.1:{port}/v1/models/{tiny_export.name}"
    while time.monotonic() < deadline:
        try:
            if request(url, timeout=5)[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert "server stopped" in stdout


def test_bounded_load_benchmark_smoke(tiny_export, tmp_path):
    """benchmarks/server_load.py end to end: no errors, latencies reported."""
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "server_load.py"), "--model",
         str(tiny_export), "--smoke", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    [result] = tmp_path.glob("server_load-*-smoke.json")
    rows = json.loads(result.read_text())["rows"]
    assert all(row["errors"] == 0 and row["ok"] == row["requests"] for row in rows)
    assert rows[1]["p99_ms"] >= rows[1]["p50_ms"] > 0

"""Bounded load test of the HTTP server on 127.0.0.1, under a mix of request sizes.

    python benchmarks/server_load.py --model saved_models/NAME [--clients 1,16]
        [--requests 160] [--paragraph-share 0.2] [--bad-share 0]
        [--baseline-code /path/to/other/checkout] [--rounds 2]
    python benchmarks/server_load.py --url http://127.0.0.1:PORT/v1/models/NAME

Starts `keras-attn-zoo serve` in a subprocess on a free loopback port and, for
each client count, sends `--requests` `:translate` requests from that many
concurrent clients. The mix: a share (`--paragraph-share`, default one in five)
of the requests is a pasted paragraph of `--paragraph-sentences` (50) German
sentences of 2 to 27 words; a share (`--bad-share`) is an input the model
refuses (over `max_input_length`), which must get 400 without failing any good
request batched with it; the rest are one short sentence each.

With `--url` the load goes to a server that is already running (it is
neither started nor stopped here), e.g. one started with other `serve` flags.

With `--baseline-code DIR` a second server runs the same export from another
checkout's code (e.g. the main branch before a change): both servers are up at
once and the loads alternate between them, round by round in the order A B, B A
(`--rounds`), so that load from other processes on a shared machine hits both
alike.

Reported per server and client count: p50/p99 of the one-sentence requests
(and their ratio, the tail a short request pays), of the paragraphs and of all
good requests; sentences/s and requests/s; the status codes (0 x 5xx is the
bar), plus the machine's load average and matmul rate, and each server's batch
histograms from its metrics page. The request loop is bounded in count and time
and stops by itself; traffic never leaves 127.0.0.1.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import common

SENTENCES = [
    "Das ist ein kleines Haus.", "Wie spät ist es?", "Ich habe keine Zeit.",
    "Er hat den Zug verpasst.", "Die Katze schläft auf dem Sofa.",
    "Können Sie mir bitte helfen?", "Wir fahren morgen nach Berlin.",
    "Das Wetter ist heute schön.",
]
# Sentences of a pasted document, 2 to 27 words: the paragraph cycles through them.
DOCUMENT = [
    "Guten Morgen.",
    "Die Sitzung beginnt um neun Uhr im großen Saal.",
    "Bitte bringen Sie die Unterlagen vom letzten Monat mit, damit wir die Zahlen "
    "gemeinsam durchgehen können.",
    "Danke.",
    "Der neue Mitarbeiter fängt am Montag an und wird zuerst im Lager arbeiten.",
    "Wegen der Bauarbeiten vor dem Haupteingang benutzen alle Besucher in dieser Woche "
    "den Eingang an der Rückseite des Gebäudes, der neben dem Parkplatz liegt.",
    "Hat jemand meinen Schlüssel gesehen?",
    "Die Kantine bleibt am Freitag geschlossen.",
    "Wer Fragen zum Urlaubsantrag hat, wendet sich bitte an die Personalabteilung im "
    "zweiten Stock.",
    "Das Projekt ist fast fertig.",
    "Im nächsten Jahr wollen wir mehr Kunden in Österreich und in der Schweiz gewinnen, "
    "deshalb suchen wir zwei neue Kollegen für den Vertrieb, die gut Französisch und "
    "Italienisch sprechen.",
    "Schönes Wochenende!",
]

# Over max_input_length (1024 pieces) but under the 10,000-character limit.
BAD_SENTENCE = " ".join(["Haus"] * 1500) + "."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paragraph(sentences):
    return " ".join(DOCUMENT[i % len(DOCUMENT)] for i in range(sentences))


def post(url, payload, timeout):
    """(HTTP status or None, seconds, body bytes)."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    body = b""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    except OSError:
        status = None
    return status, time.perf_counter() - started, body


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def request_mix(requests, paragraph_share, bad_share):
    """The kind of each request ("short", "paragraph" or "bad"), the same for
    every server and round: every k-th request a paragraph (k = 1/share), every
    m-th of the others a bad one."""
    def every(share):
        return round(1 / share) if share > 0 else 0

    paragraphs, bad = every(paragraph_share), every(bad_share)
    kinds, others = [], 0
    for index in range(requests):
        if paragraphs and index % paragraphs == paragraphs - 1:
            kinds.append("paragraph")
            continue
        others += 1
        kinds.append("bad" if bad and others % bad == 0 else "short")
    return kinds


def summarize(latencies):
    if not latencies:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "mean_ms": None,
                "p99_over_p50": None}
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return {"count": len(latencies), "p50_ms": 1000 * p50, "p99_ms": 1000 * p99,
            "mean_ms": 1000 * sum(latencies) / len(latencies), "p99_over_p50": p99 / p50}


def load(url, clients, kinds, deadline_seconds, timeout, paragraph_sentences):
    """One POST per entry of ``kinds`` from ``clients`` threads; stops at the
    deadline. Returns the raw results: (kind, status, seconds)."""
    stop_at = time.monotonic() + deadline_seconds
    texts = {"short": None, "paragraph": paragraph(paragraph_sentences), "bad": BAD_SENTENCE}

    def one(index):
        if time.monotonic() > stop_at:
            return kinds[index], "skipped", 0.0
        kind = kinds[index]
        text = texts[kind] or SENTENCES[index % len(SENTENCES)]
        status, seconds, _ = post(url, {"text": [text]}, timeout)
        return kind, status, seconds

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(len(kinds))))
    return results, time.perf_counter() - started


def row_of(server, clients, results, wall, paragraph_sentences):
    """Latency and throughput figures of one or more loads of one server."""
    by_kind = collections.defaultdict(list)
    for kind, status, seconds in results:
        if status == 200 and kind != "bad":
            by_kind[kind].append(seconds)
    statuses = collections.Counter(str(status) for _, status, _ in results)
    good = [r for r in results if r[0] != "bad"]
    refused = [r for r in results if r[0] == "bad"]
    sentences = len(by_kind["short"]) + paragraph_sentences * len(by_kind["paragraph"])
    short, long_ = summarize(by_kind["short"]), summarize(by_kind["paragraph"])
    every = summarize(by_kind["short"] + by_kind["paragraph"])
    return {
        "server": server,
        "clients": clients,
        "requests": len(results),
        "bad_requests": len(refused),
        "ok": every["count"],
        # A good request that failed, or a bad one not answered with 400.
        "errors": sum(1 for _, status, _ in good if status not in (200, "skipped"))
        + sum(1 for _, status, _ in refused if status not in (400, "skipped")),
        "server_errors_5xx": sum(1 for _, status, _ in results
                                 if isinstance(status, int) and status >= 500),
        "skipped": statuses.get("skipped", 0),
        "status_counts": dict(sorted(statuses.items())),
        "wall_seconds": wall,
        "short_p50_ms": short["p50_ms"], "short_p99_ms": short["p99_ms"],
        "short_p99_over_p50": short["p99_over_p50"], "short_count": short["count"],
        "paragraph_p50_ms": long_["p50_ms"], "paragraph_p99_ms": long_["p99_ms"],
        "paragraph_count": long_["count"],
        "p50_ms": every["p50_ms"], "p99_ms": every["p99_ms"], "mean_ms": every["mean_ms"],
        "p99_over_p50": every["p99_over_p50"],
        "sentences_per_second": sentences / wall,
        "requests_per_second": every["count"] / wall,
    }


class Server:
    """`keras-attn-zoo serve` in a subprocess, from the code in ``code_dir``."""

    def __init__(self, name, code_dir, model, extra_args):
        self.name, self.code_dir = name, pathlib.Path(code_dir).resolve()
        self.port = free_port()
        self.model = pathlib.Path(model).resolve()
        model_name = (self.model.parent.name if (self.model / "saved_model.pb").exists()
                      else self.model.name)
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1/models/{model_name}"
        environment = dict(os.environ, PYTHONPATH=str(self.code_dir))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "keras_attn_zoo.cli", "serve", "--model",
             str(self.model), "--port", str(self.port), *extra_args],
            cwd=self.code_dir, env=environment, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)

    def wait_ready(self, seconds=300):
        ready_by = time.monotonic() + seconds
        while time.monotonic() < ready_by:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name}: " + self.process.stderr.read()[-3000:])
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"{self.name}: not AVAILABLE in {seconds} s")

    def metrics(self):
        with urllib.request.urlopen(self.base + "/monitoring/prometheus/metrics",
                                    timeout=30) as page:
            return page.read().decode("utf-8")

    def stop(self):
        alive = self.process.poll() is None
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return alive, self.process.returncode


class RunningServer(Server):
    """A server started elsewhere (`--url .../v1/models/NAME`): loaded, never stopped."""

    def __init__(self, url):
        self.name, self.code_dir, self.process = "running server", None, None
        self.url = url.rstrip("/")
        self.base = self.url.split("/v1/models/")[0]

    def wait_ready(self, seconds=300):
        try:
            with urllib.request.urlopen(self.url, timeout=min(seconds, 30)) as response:
                if response.status == 200:
                    return
        except OSError as error:
            raise SystemExit(f"{self.url}: not AVAILABLE ({error})") from error
        raise SystemExit(f"{self.url}: not AVAILABLE")

    def stop(self):
        """Not ours to stop: (whether it still answers, None)."""
        try:
            with urllib.request.urlopen(self.url, timeout=30) as response:
                return response.status == 200, None
        except OSError:
            return False, None


SERVER_HISTOGRAMS = ("keras_attn_zoo_batch_size", "keras_attn_zoo_batch_tokens",
                     "keras_attn_zoo_queue_wait_seconds", "keras_attn_zoo_request_batches")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--model", help="saved_models/NAME, served here from this checkout")
    target.add_argument("--url", help="a running server's model, "
                                      "http://127.0.0.1:PORT/v1/models/NAME")
    parser.add_argument("--clients", type=common.int_list, default=[1, 16],
                        help="client counts, one row each (default 1,16)")
    parser.add_argument("--requests", type=int, default=160,
                        help="requests per client count, server and round (160)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternating rounds (A B, B A, ...) per server (1)")
    parser.add_argument("--paragraph-share", type=float, default=0.2,
                        help="share of requests that are a pasted paragraph (0.2)")
    parser.add_argument("--paragraph-sentences", type=int, default=50)
    parser.add_argument("--bad-share", type=float, default=0.0,
                        help="share of the other requests the model refuses (0)")
    parser.add_argument("--deadline-seconds", type=float, default=900,
                        help="per load; later requests are skipped and counted")
    parser.add_argument("--server-args", default="",
                        help="extra `serve` flags of this checkout's server")
    parser.add_argument("--baseline-code", default=None,
                        help="another checkout whose server runs the same export, "
                             "alternating with this one")
    parser.add_argument("--baseline-server-args", default="")
    parser.add_argument("--note", default="", help="free text kept in the results")
    common.add_common_arguments(parser, repeats=1, warmup=1)
    args = parser.parse_args(argv)
    if args.url and (args.baseline_code or args.server_args):
        parser.error("--url loads a running server: --baseline-code and --server-args "
                     "need --model")
    if args.url and "/v1/models/" not in args.url:
        parser.error(f"--url must name a model, http://HOST:PORT/v1/models/NAME: {args.url}")
    if args.smoke:
        args.requests = min(args.requests, 24)
        args.clients = [min(c, 4) for c in args.clients][:2]
        args.paragraph_sentences = min(args.paragraph_sentences, 6)
    run = common.start_run()
    matmul = common.matmul_rate("float32", size=256 if args.smoke else 1024)
    servers = [RunningServer(args.url) if args.url else
               Server("this checkout", common.REPO_DIR, args.model, args.server_args.split())]
    if args.baseline_code:
        servers.append(Server(f"baseline ({args.baseline_code})", args.baseline_code,
                              args.model, args.baseline_server_args.split()))
    kinds = request_mix(args.requests, args.paragraph_share, args.bad_share)
    raw = {(server.name, clients): ([], 0.0) for server in servers
           for clients in args.clients}
    exits, server_metrics = {}, {}
    try:
        for server in servers:
            server.wait_ready()
            for _ in range(args.warmup):
                status, _, body = post(server.url + ":translate",
                                       {"text": SENTENCES + [paragraph(
                                           args.paragraph_sentences)]}, timeout=300)
                details = json.loads(body)["details"] if status == 200 else None
                if not details or details[-1]["sentences"] != args.paragraph_sentences:
                    raise SystemExit(f"{server.name}: the paragraph did not split into "
                                     f"{args.paragraph_sentences} sentences: {body[:300]}")
        for round_index in range(args.rounds):
            order = servers if round_index % 2 == 0 else servers[::-1]
            for server in order:
                for clients in args.clients:
                    results, wall = load(server.url + ":translate", clients, kinds,
                                         args.deadline_seconds, 300,
                                         args.paragraph_sentences)
                    earlier, seconds = raw[(server.name, clients)]
                    raw[(server.name, clients)] = (earlier + results, seconds + wall)
                    print(f"round {round_index}: {server.name}, {clients} clients: "
                          f"{wall:.1f} s", flush=True)
        for server in servers:
            server_metrics[server.name] = [
                line for line in server.metrics().splitlines()
                if line.startswith(SERVER_HISTOGRAMS)]
    finally:
        for server in servers:
            exits[server.name] = server.stop()
    rows = [row_of(name, clients, results, wall, args.paragraph_sentences)
            for (name, clients), (results, wall) in raw.items()]
    common.print_table(rows, [
        ("server", "server", ""), ("clients", "clients", ""), ("ok", "ok", ""),
        ("errors", "errors", ""), ("server_errors_5xx", "5xx", ""),
        ("short_p50_ms", "short p50 ms", ".1f"), ("short_p99_ms", "short p99 ms", ".1f"),
        ("short_p99_over_p50", "p99/p50", ".2f"),
        ("paragraph_p50_ms", "para p50 ms", ".0f"), ("paragraph_p99_ms", "para p99 ms", ".0f"),
        ("sentences_per_second", "sent/s", ".1f"), ("requests_per_second", "req/s", ".2f"),
    ], title=f"server load test ({args.model or args.url}, loopback)")
    comparison = []
    if args.baseline_code:
        for clients in args.clients:
            new, old = (next(r for r in rows if r["server"] == s.name and r["clients"] == clients)
                        for s in servers)
            comparison.append({
                "clients": clients,
                "sentences_per_second_vs_baseline": (new["sentences_per_second"]
                                                     / old["sentences_per_second"]),
                "short_p99_over_p50": new["short_p99_over_p50"],
                "baseline_short_p99_over_p50": old["short_p99_over_p50"],
            })
            print(f"{clients} clients: sentences/s {comparison[-1]['sentences_per_second_vs_baseline']:.3f}"
                  f" x baseline; short p99/p50 {new['short_p99_over_p50']:.2f} "
                  f"(baseline {old['short_p99_over_p50']:.2f})")
    path = common.write_results("server_load", {
        "model": str(args.model or args.url), "note": args.note,
        "servers": {s.name: {"code": s.code_dir and str(s.code_dir), "args": a}
                    for s, a in zip(servers, (args.server_args, args.baseline_server_args))},
        "mix": {"requests_per_load": args.requests, "rounds": args.rounds,
                "paragraph_share": args.paragraph_share,
                "paragraph_sentences": args.paragraph_sentences,
                "bad_share": args.bad_share},
        "matmul_float32": matmul,
        "server_histograms": server_metrics,
        "rows": rows, "comparison": comparison,
        "server_alive_after_load_and_exit_code": exits,
    }, output_dir=args.output_dir, smoke=args.smoke, run=run)
    print(f"load average {common.load_average()}, matmul {matmul['gflops']:.1f} GFLOP/s")
    print(f"wrote {path}")
    # A server started here exits 0 on SIGTERM; a running one (`--url`) still answers.
    healthy = all(alive and code in (0, None) for alive, code in exits.values())
    return 0 if healthy and all(row["errors"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Bounded load test of the HTTP server on 127.0.0.1.

    python benchmarks/server_load.py --model saved_models/NAME [--clients 1,8,16]
        [--requests 320] [--bad-share 0.1]

Starts `keras-attn-zoo serve` in a subprocess on a free loopback port and, for
each client count, sends `--requests` single-sentence `:translate` requests
from that many concurrent clients. A share (`--bad-share`) of them is an input
the model refuses (over `max_input_length`): those must get 400, and no good
request batched with them may fail. Reports p50/p99 latency of the good
requests, requests/s, the machine's load average and matmul rate. The request
loop is bounded in count and time and stops by itself; traffic never leaves
127.0.0.1.
"""

import argparse
import concurrent.futures
import json
import pathlib
import socket
import statistics
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, payload, timeout):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError:
        status = None
    return status, time.perf_counter() - started


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


# Over max_input_length (1024 pieces) but under the 10,000-character limit.
BAD_SENTENCE = " ".join(["Haus"] * 1500) + "."


def load(url, clients, requests, deadline_seconds, timeout, bad_share=0.0):
    """`requests` POSTs from `clients` threads; stops at the deadline."""
    stop_at = time.monotonic() + deadline_seconds
    every = round(1 / bad_share) if bad_share > 0 else 0
    bad = [bool(every) and i % every == every - 1 for i in range(requests)]
    payloads = [{"text": [BAD_SENTENCE if bad[i] else SENTENCES[i % len(SENTENCES)]]}
                for i in range(requests)]

    def one(payload):
        if time.monotonic() > stop_at:
            return "skipped", 0.0
        return post(url, payload, timeout)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, payloads))
    wall = time.perf_counter() - started
    good = [result for result, is_bad in zip(results, bad) if not is_bad]
    refused = [result for result, is_bad in zip(results, bad) if is_bad]
    latencies = [seconds for status, seconds in good if status == 200]
    return {
        "clients": clients,
        "requests": requests,
        "bad_requests": len(refused),
        "ok": len(latencies),
        # A good request that failed, or a bad one not answered with 400.
        "errors": sum(1 for status, _ in good if status not in (200, "skipped"))
        + sum(1 for status, _ in refused if status not in (400, "skipped")),
        "skipped": sum(1 for status, _ in results if status == "skipped"),
        "p50_ms": 1000 * percentile(latencies, 50) if latencies else None,
        "p99_ms": 1000 * percentile(latencies, 99) if latencies else None,
        "mean_ms": 1000 * statistics.mean(latencies) if latencies else None,
        "requests_per_second": len(latencies) / wall,
        "p99_over_p50": (percentile(latencies, 99) / percentile(latencies, 50)
                         if latencies else None),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="saved_models/NAME")
    parser.add_argument("--clients", type=common.int_list, default=[1, 8, 16],
                        help="client counts, one row each (default 1,8,16)")
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--bad-share", type=float, default=0.1,
                        help="share of requests the model refuses (default 0.1)")
    parser.add_argument("--deadline-seconds", type=float, default=600)
    parser.add_argument("--server-args", default="",
                        help="extra `serve` flags, e.g. '--batch-timeout-ms 10'")
    common.add_common_arguments(parser, repeats=1, warmup=1)
    args = parser.parse_args(argv)
    if args.smoke:
        args.requests = min(args.requests, 24)
        args.clients = [min(c, 4) for c in args.clients][:2]
    run = common.start_run()
    matmul = common.matmul_rate("float32", size=256 if args.smoke else 1024)
    model = pathlib.Path(args.model)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "keras_attn_zoo.cli", "serve", "--model", str(model),
         "--port", str(port), *args.server_args.split()],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    name = model.name if not (model / "saved_model.pb").exists() else model.parent.name
    base = f"http://127.0.0.1:{port}/v1/models/{name}"
    try:
        ready_by = time.monotonic() + 180
        while time.monotonic() < ready_by:
            if server.poll() is not None:
                raise SystemExit(server.stderr.read()[-3000:])
            try:
                with urllib.request.urlopen(base, timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.3)
        for _ in range(args.warmup):
            post(base + ":translate", {"text": SENTENCES}, timeout=120)
        rows = [load(base + ":translate", clients, args.requests, args.deadline_seconds,
                     120, args.bad_share) for clients in args.clients]
        with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/monitoring/prometheus/metrics", timeout=30) as page:
            metrics = page.read().decode("utf-8")
        alive = server.poll() is None
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    for row in rows:
        row["speedup_vs_one_client"] = (
            row["requests_per_second"] / rows[0]["requests_per_second"])
    common.print_table(rows, [
        ("clients", "clients", ""), ("requests", "requests", ""), ("ok", "ok", ""),
        ("errors", "errors", ""), ("p50_ms", "p50 ms", ".1f"), ("p99_ms", "p99 ms", ".1f"),
        ("p99_over_p50", "p99/p50", ".2f"), ("requests_per_second", "req/s", ".2f"),
        ("speedup_vs_one_client", "x 1 client", ".2f"),
    ], title=f"server load test ({name}, loopback)")
    path = common.write_results("server_load", {
        "model": str(model), "server_args": args.server_args,
        "bad_share": args.bad_share, "matmul_float32": matmul,
        "batch_size_histogram": [line for line in metrics.splitlines()
                                 if line.startswith("keras_attn_zoo_batch_size")],
        "rows": rows, "server_alive_after_load": alive,
        "server_exit_code_after_sigterm": server.returncode,
    }, output_dir=args.output_dir, smoke=args.smoke, run=run)
    print(f"load average {common.load_average()}, matmul {matmul['gflops']:.1f} GFLOP/s")
    print(f"wrote {path}")
    return 0 if alive and all(row["errors"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

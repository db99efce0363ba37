"""Plumbing shared by every benchmark script (one copy, imported by all of them).

* timing: :func:`time_call` (warm-up calls, then the median of timed repeats) and
  :func:`alternate` (several contenders timed in interleaved rounds, A B / B A ...,
  so that load from other processes on a shared machine hits all of them alike);
* machine: :func:`machine_info` (CPU count and flags, load average, versions),
  :func:`matmul_rate` (the machine's matmul GFLOP/s through TensorFlow, float32 or
  bfloat16) and :func:`cpu_supports_bf16`;
* results: :func:`write_results` (``benchmarks/results/<name>-<date>.json``,
  ``-smoke`` before ``.json`` in smoke mode, written atomically, with the machine
  info and the load average at the start and the end of the run),
  :func:`format_table` / :func:`print_table`;
* memory: :func:`run_isolated` runs one function of a benchmark script in a fresh
  Python process and returns its result with the child's peak resident memory
  (``ru_maxrss``) before and after the call;
* fits: :func:`log_log_slope` (the exponent of a power law ``y ~ x^k``).

Every script imports it as ``import common`` (the scripts' directory is on
``sys.path`` when they run as ``python benchmarks/<script>.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import math
import os
import pathlib
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parent
RESULTS_DIR = BENCHMARKS_DIR / "results"
REPO_DIR = BENCHMARKS_DIR.parent
_RESULT_MARKER = "@@benchmark-result@@"


# ---- arguments ------------------------------------------------------------------------

def add_common_arguments(parser: argparse.ArgumentParser, repeats=3, warmup=1):
    """``--smoke``, ``--repeats``, ``--warmup`` and ``--output-dir``."""
    parser.add_argument("--smoke", action="store_true",
                        help="tiny preset, tiny sizes, one repeat: seconds, for tests")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help=f"timed runs per measurement, the median is kept "
                             f"(default {repeats})")
    parser.add_argument("--warmup", type=int, default=warmup,
                        help=f"untimed runs before timing (default {warmup})")
    parser.add_argument("--output-dir", default=str(RESULTS_DIR),
                        help="where the JSON result goes (default benchmarks/results)")
    return parser


def int_list(text):
    """``"1,10,32"`` -> ``[1, 10, 32]``."""
    return [int(x) for x in str(text).split(",") if x.strip()]


def str_list(text):
    return [x.strip() for x in str(text).split(",") if x.strip()]


# ---- timing ---------------------------------------------------------------------------

@dataclasses.dataclass
class Timing:
    """Seconds of the timed calls of one measurement."""

    times: list

    @property
    def median(self):
        return statistics.median(self.times)

    @property
    def best(self):
        return min(self.times)

    @property
    def spread(self):
        """(max - min) / median: how noisy the repeats were."""
        return (max(self.times) - min(self.times)) / self.median if self.median else 0.0

    def as_dict(self):
        return {"seconds": self.median, "best_seconds": self.best,
                "spread": round(self.spread, 3), "times": self.times}


def timed_once(function):
    """`(seconds, result)` of one call of `function`, its result's tensors ready."""
    start = time.perf_counter()
    result = function()
    _block(result)
    return time.perf_counter() - start, result


def _block(result):
    """Waits for TensorFlow results (``.numpy()`` on the first tensor leaf)."""
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover
        return
    for leaf in tf.nest.flatten(result):
        if hasattr(leaf, "numpy"):
            leaf.numpy()
            return


def time_call(function, repeats=3, warmup=1):
    """``warmup`` untimed calls, then ``repeats`` timed ones: ``(Timing, last result)``."""
    result = None
    for _ in range(warmup):
        result = function()
        _block(result)
    times = []
    for _ in range(max(repeats, 1)):
        seconds, result = timed_once(function)
        times.append(seconds)
    return Timing(times), result


def alternate(functions, repeats=3, warmup=1):
    """Times several contenders in interleaved rounds.

    Each contender gets ``warmup`` untimed calls first; then round ``i`` calls
    every contender once, in the given order for even ``i`` and reversed for odd
    ``i`` (A B, B A, ...), so a slow period on a shared machine is spread over all.

    Args:
        functions: ``{name: zero-argument callable}``.

    Returns:
        ``({name: Timing}, {name: last result})``.
    """
    names = list(functions)
    results = {}
    for name in names:
        for _ in range(warmup):
            results[name] = functions[name]()
            _block(results[name])
    times = {name: [] for name in names}
    for round_index in range(max(repeats, 1)):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            seconds, results[name] = timed_once(functions[name])
            times[name].append(seconds)
    return {name: Timing(times[name]) for name in names}, results


# ---- machine --------------------------------------------------------------------------

def load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def cpu_flags():
    from keras_attn_zoo.runtime import cpu_flags as flags

    return flags()


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover
        pass
    return platform.processor()


def cpu_supports_bf16():
    """True if the CPU has native bfloat16 arithmetic (AVX512-BF16 or AMX-BF16)."""
    from keras_attn_zoo.runtime import cpu_has_native_bf16

    return cpu_has_native_bf16()


def machine_info():
    info = {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "bf16_flags": sorted({"avx512_bf16", "amx_bf16", "amx_tile"} & cpu_flags()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1_5_15": load_average(),
    }
    for module in ("tensorflow", "keras", "keras_hub"):
        if module in sys.modules:
            info[module] = getattr(sys.modules[module], "__version__", None)
    return info


def hardware_peak_gflops(dtype="float32"):
    """An upper bound of this CPU's dense FLOP rate: cores x clock x FLOPs per cycle.

    FLOPs per cycle and core assume two FMA units (2 FLOPs per lane each), with
    8 float32 lanes under AVX2 and 16 under AVX-512; bfloat16 doubles the lanes
    only with AVX512-BF16 (AMX is counted as AVX512-BF16: a lower bound of its
    peak). The clock is ``/proc/cpuinfo``'s "cpu MHz", in a VM often the nominal
    clock: boost can add up to about 1.5x, so a measured rate above 1.6x this
    peak means the measurement is wrong, not the machine fast.
    """
    flags = cpu_flags()
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    fma_units = 2 if "fma" in flags or "avx512f" in flags else 1
    if dtype in ("bfloat16", "bf16") and "avx512_bf16" in flags:
        lanes *= 2
    mhz = None
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                mhz = float(line.split(":", 1)[1])
                break
    except OSError:  # pragma: no cover
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    flops_per_cycle = fma_units * 2 * lanes
    gflops = cores * mhz * 1e6 * flops_per_cycle / 1e9 if mhz else None
    return {"cores": cores, "mhz": mhz, "flops_per_cycle_per_core": flops_per_cycle,
            "gflops": gflops}


def matmul_rate(dtype="float32", size=2048, repeats=5, chain=8):
    """The machine's dense matmul rate through TensorFlow, in GFLOP/s.

    Times a ``tf.function`` computing ``chain`` products of *distinct*
    ``[size, size]`` operand pairs (``2 size^3`` FLOPs each) and returns the sum
    of every element of every product, the median of ``repeats`` calls after one
    warm-up. Distinct operands and fully used results matter: TensorFlow's graph
    optimizer merges repeated products of the same operands and prunes unused
    ones, which made an earlier version of this function report about 4x the
    real rate. The result also carries :func:`hardware_peak_gflops` and the
    share of it reached; this is the practical peak the MFU figures divide by.
    """
    import tensorflow as tf

    tf_dtype = tf.as_dtype(dtype)
    generator = tf.random.Generator.from_seed(0)
    lefts = [tf.cast(generator.normal([size, size]), tf_dtype) for _ in range(chain)]
    rights = [tf.cast(generator.normal([size, size]), tf_dtype) for _ in range(chain)]

    @tf.function
    def products():
        return tf.add_n([tf.reduce_sum(tf.cast(tf.matmul(left, right), tf.float32))
                         for left, right in zip(lefts, rights)])

    timing, _ = time_call(products, repeats=repeats, warmup=1)
    flops = chain * 2.0 * size ** 3
    peak = hardware_peak_gflops(dtype)
    rate = flops / timing.median / 1e9
    return {"dtype": dtype, "size": size, "gflops": rate,
            "best_gflops": flops / timing.best / 1e9,
            "hardware_peak_gflops": peak["gflops"],
            "share_of_hardware_peak": rate / peak["gflops"] if peak["gflops"] else None}


# ---- results --------------------------------------------------------------------------

def result_path(name, output_dir=None, smoke=False, date=None):
    date = date or datetime.date.today().isoformat()
    suffix = "-smoke" if smoke else ""
    return pathlib.Path(output_dir or RESULTS_DIR) / f"{name}-{date}{suffix}.json"


def start_run():
    """Call at the start of a benchmark: the clock, date and load average then."""
    return {"started": time.perf_counter(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "load_average_at_start": load_average()}


# What an example translation (`workflow.evaluate`'s "examples") quotes from the
# corpus. Results files are committed and the corpus is not (Ding is GPL-2+ and
# installed by `make corpus`), so they keep the sentence's index instead.
CORPUS_TEXT_KEYS = ("source", "reference")


def without_corpus_text(value):
    """``value`` with the corpus sentences left out of every example list.

    An example list is a list of dicts under a key ending in ``examples``; each of
    its dicts loses ``source`` and ``reference`` and gains ``index``, the sentence's
    position in the split it was translated from (every writer shows the split's
    first sentences), unless it has one. Model outputs and everything else stay.
    """
    if isinstance(value, dict):
        return {key: (_examples_without_corpus_text(item)
                      if key.endswith("examples") and isinstance(item, list)
                      else without_corpus_text(item))
                for key, item in value.items()}
    if isinstance(value, list):
        return [without_corpus_text(item) for item in value]
    return value


def _examples_without_corpus_text(examples):
    return [{"index": index,
             **{key: item for key, item in example.items() if key not in CORPUS_TEXT_KEYS}}
            if isinstance(example, dict) else example
            for index, example in enumerate(examples)]


def write_results(name, results, output_dir=None, smoke=False, run=None):
    """Writes ``results`` (a JSON-able dict) to ``<output_dir>/<name>-<date>.json``.

    Adds ``machine`` (with the load average now), and, given the ``run`` of
    :func:`start_run`, ``date``, ``load_average_at_start`` and ``wall_seconds``;
    leaves out the corpus sentences of its examples (:func:`without_corpus_text`).
    The file is written under a temporary name and renamed.
    """
    results = without_corpus_text(dict(results))
    results.setdefault("benchmark", name)
    results.setdefault("smoke", bool(smoke))
    results["machine"] = {**machine_info(), **results.get("machine", {})}
    results["load_average_at_end"] = load_average()
    if run is not None:
        results.setdefault("date", run["date"])
        results["load_average_at_start"] = run["load_average_at_start"]
        results["wall_seconds"] = round(time.perf_counter() - run["started"], 1)
    path = result_path(name, output_dir, smoke)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(results, indent=2, default=_json_default) + "\n",
                         encoding="utf-8")
    temporary.replace(path)
    return path


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)


def format_table(rows, columns, title=None):
    """Rows of dicts as a plain-text table.

    Args:
        rows: list of dicts.
        columns: list of ``(key, header, format)``; ``format`` is a format spec
            such as ``".2f"`` or ``""``. A missing or None value prints ``-``.
    """
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        line = []
        for key, _, spec in columns:
            value = row.get(key)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                line.append("-")
            else:
                line.append(format(value, spec) if spec else str(value))
        cells.append(line)
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    text = [title] if title else []
    for index, line in enumerate(cells):
        text.append("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))
        if index == 0:
            text.append("  ".join("-" * width for width in widths))
    return "\n".join(text)


def print_table(rows, columns, title=None, file=None):
    print(format_table(rows, columns, title), file=file or sys.stdout, flush=True)


# ---- memory in a fresh process ---------------------------------------------------------

def peak_rss_mb():
    """This process's peak resident set size so far (``ru_maxrss``), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def run_isolated(script, function, kwargs=None, timeout=900):
    """Runs ``function(**kwargs)`` of ``script`` in a fresh Python process.

    The function may call ``common.mark_baseline()`` once its setup is done (model
    built, search traced); the result then also has ``baseline_rss_mb``, the peak
    resident memory before the measured part, and ``delta_rss_mb``.

    Args:
        script: path of a benchmark script (imported by path in the child).
        function: name of a function in it returning a JSON-able dict.
        kwargs: JSON-able keyword arguments.

    Returns:
        The function's dict plus ``peak_rss_mb`` (the child's ``ru_maxrss`` at
        the end) or, if the child failed, ``{"error": ..., "returncode": ...}``.
    """
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--isolated",
               str(pathlib.Path(script).resolve()), function,
               json.dumps(kwargs or {})]
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        completed = subprocess.run(command, capture_output=True, text=True,
                                   timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "returncode": None}
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith(_RESULT_MARKER):
            return json.loads(line[len(_RESULT_MARKER):])
    return {"error": child_error(completed.stderr), "returncode": completed.returncode}


def child_error(stderr):
    """The exception line of a child's traceback (TensorFlow's messages end in
    node names, so the line naming the exception is the useful one)."""
    lines = stderr.strip().splitlines()
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*?: ", line):
            return line.strip()[:500]
    return lines[-1].strip()[:500] if lines else "no result"


_BASELINE = {}


def mark_baseline():
    """Records the peak RSS so far as the baseline of an isolated measurement."""
    _BASELINE["rss_mb"] = peak_rss_mb()


def reset_baseline():
    """Forgets the baseline (before the next of several measurements in one child)."""
    _BASELINE.pop("rss_mb", None)


def baseline_rss_mb():
    """The baseline of :func:`mark_baseline`, or None."""
    return _BASELINE.get("rss_mb")


def _isolated_main(script, function, kwargs_json):
    spec = importlib.util.spec_from_file_location("isolated_benchmark", script)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(pathlib.Path(script).parent))
    spec.loader.exec_module(module)
    result = getattr(module, function)(**json.loads(kwargs_json))
    result = dict(result or {})
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    # The child imported this file as `common` too: its baseline lives there.
    shared = sys.modules.get("common")
    baseline = getattr(shared, "_BASELINE", {}) if shared else {}
    baseline = baseline.get("rss_mb", _BASELINE.get("rss_mb"))
    if baseline is not None:
        result["baseline_rss_mb"] = round(baseline, 1)
        result["delta_rss_mb"] = round(result["peak_rss_mb"] - baseline, 1)
    print(_RESULT_MARKER + json.dumps(result, default=_json_default), flush=True)


# ---- fits -------------------------------------------------------------------------------

def log_log_slope(xs, ys):
    """Least-squares slope of ``log y`` against ``log x``: k in ``y ~ x^k``."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(points) < 2:
        return math.nan
    mean_x = sum(p[0] for p in points) / len(points)
    mean_y = sum(p[1] for p in points) / len(points)
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in points)
    denominator = sum((x - mean_x) ** 2 for x, _ in points)
    return numerator / denominator if denominator else math.nan


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--isolated":
        _isolated_main(*sys.argv[2:])
    else:
        sys.exit("usage: common.py --isolated SCRIPT FUNCTION KWARGS_JSON")

"""The entry points start TensorFlow without its start-up noise, and keep real errors;
the CPU features that decide `--mixed-precision auto` are read from the flags line."""

import json
import os
import subprocess
import sys

import pytest

from keras_attn_zoo import runtime

# One fresh Python for the three defaults (a TensorFlow import is most of each
# process's time): its environment lacks every variable `start_tensorflow` sets.
DEFAULTS_SCRIPT = """
import gc, json, os, resource
from keras_attn_zoo.runtime import quiet_startup_logs, start_tensorflow
tf = start_tensorflow()
report = {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}
with quiet_startup_logs():
    os.write(2, b"I0000 cudart_stub.cc:31] Could not find cuda drivers\\n")
    os.write(2, b"a real problem\\n")
report["sum"] = int(tf.reduce_sum(tf.constant([1, 2])).numpy())

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
tf.reduce_sum(tf.fill([4096, 4096], 1.0)).numpy()  # the pool grows once
before = faults()
for _ in range(20):  # 64 MB each
    tf.reduce_sum(tf.fill([4096, 4096], 1.0)).numpy()
report["faults"] = faults() - before
report["onednn"] = os.environ["TF_ENABLE_ONEDNN_OPTS"]
report["matmul"] = float(tf.matmul(tf.ones([2, 3]), tf.ones([3, 2])).numpy().sum())
print(json.dumps(report))
"""
START_TENSORFLOW_SETS = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPU_ALLOCATOR_USE_BFC",
                         "TF_ENABLE_ONEDNN_OPTS")


def run_script(script, env):
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True,
                               text=True, timeout=120, env=env)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


@pytest.fixture(scope="module")
def defaults():
    """`(report, stderr)` of the script where none of the variables is set."""
    env = {key: value for key, value in os.environ.items()
           if key not in START_TENSORFLOW_SETS}
    return run_script(DEFAULTS_SCRIPT, env)


def test_start_tensorflow_drops_only_the_start_up_noise(defaults):
    report, stderr = defaults
    assert report["sum"] == 3
    assert "a real problem" in stderr
    for noise in ("cudart_stub", "cuInit", "absl::InitializeLog", "cpu_feature_guard"):
        assert noise not in stderr, stderr


def test_start_tensorflow_pools_cpu_memory_instead_of_faulting_in_every_large_tensor(
        defaults):
    pages_per_tensor = 64 * 2**20 // 4096
    # The default allocator faults in every page of every tensor: 20 x 16,384.
    assert defaults[0]["faults"] < 2 * pages_per_tensor


def test_start_tensorflow_leaves_tensorflows_objects_to_reference_counting(defaults):
    """The import's objects are out of the cyclic collector's reach (faster full
    collections and exit); what the program creates afterwards is not."""
    report, _ = defaults
    assert report["frozen"] > 100_000 and report["tracked"] < report["frozen"] / 10, report


ONEDNN_SCRIPT = """
import json, os
from keras_attn_zoo.runtime import start_tensorflow
tf = start_tensorflow()
print(json.dumps({"onednn": os.environ["TF_ENABLE_ONEDNN_OPTS"],
                  "matmul": float(tf.matmul(tf.ones([2, 3]), tf.ones([3, 2])).numpy().sum())}))
"""


def test_start_tensorflow_asks_for_onednn_kernels_unless_told_otherwise(defaults):
    """oneDNN's kernels: 1.27x / 1.42x the RNN steps on AVX2 CPUs, where TensorFlow
    leaves them off (docs/speed.md); an explicit setting wins."""
    report, stderr = defaults
    assert (report["onednn"], report["matmul"]) == ("1", 12.0)
    assert "oneDNN custom operations are on" not in stderr
    report, _ = run_script(ONEDNN_SCRIPT, dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0"))
    assert (report["onednn"], report["matmul"]) == ("0", 12.0)


def test_cpu_flags_are_read_from_the_cpuinfo_flags_line(tmp_path):
    with_bf16 = tmp_path / "with"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    without = tmp_path / "without"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert runtime.cpu_flags(with_bf16) == {"fpu", "sse2", "avx512f", "avx512_bf16"}
    assert not runtime.NATIVE_BF16_CPU_FLAGS & runtime.cpu_flags(without)
    assert runtime.cpu_flags(tmp_path / "absent") == set()

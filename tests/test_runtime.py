"""The entry points start TensorFlow without its start-up noise, and keep real errors."""

import os
import subprocess
import sys

SCRIPT = """
import os
from keras_attn_zoo.runtime import quiet_startup_logs, start_tensorflow
tf = start_tensorflow()
with quiet_startup_logs():
    os.write(2, b"I0000 cudart_stub.cc:31] Could not find cuda drivers\\n")
    os.write(2, b"a real problem\\n")
print(tf.reduce_sum(tf.constant([1, 2])).numpy())
"""


def run_script(script, without):
    """Runs `script` in a fresh Python whose environment lacks the variable `without`."""
    env = {key: value for key, value in os.environ.items() if key != without}
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True,
                               text=True, timeout=120, env=env)
    assert completed.returncode == 0, completed.stderr
    return completed


def test_start_tensorflow_drops_only_the_start_up_noise():
    completed = run_script(SCRIPT, without="TF_CPP_MIN_LOG_LEVEL")
    assert completed.stdout.strip() == "3"
    assert "a real problem" in completed.stderr
    for noise in ("cudart_stub", "cuInit", "absl::InitializeLog", "cpu_feature_guard"):
        assert noise not in completed.stderr, completed.stderr


ALLOCATION_SCRIPT = """
import resource
from keras_attn_zoo.runtime import start_tensorflow
tf = start_tensorflow()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
tf.reduce_sum(tf.fill([4096, 4096], 1.0)).numpy()  # the pool grows once
before = faults()
for _ in range(20):  # 64 MB each
    tf.reduce_sum(tf.fill([4096, 4096], 1.0)).numpy()
print(faults() - before)
"""


def test_start_tensorflow_pools_cpu_memory_instead_of_faulting_in_every_large_tensor():
    completed = run_script(ALLOCATION_SCRIPT, without="TF_CPU_ALLOCATOR_USE_BFC")
    pages_per_tensor = 64 * 2**20 // 4096
    # The default allocator faults in every page of every tensor: 20 x 16,384.
    assert int(completed.stdout.strip()) < 2 * pages_per_tensor


ONEDNN_SCRIPT = """
import os
from keras_attn_zoo.runtime import start_tensorflow
tf = start_tensorflow()
print(os.environ["TF_ENABLE_ONEDNN_OPTS"], tf.matmul(tf.ones([2, 3]), tf.ones([3, 2])).numpy().sum())
"""


def test_start_tensorflow_asks_for_onednn_kernels_unless_told_otherwise():
    """oneDNN's kernels: 1.27x / 1.42x the RNN steps on AVX2 CPUs, where TensorFlow
    leaves them off (docs/speed.md); an explicit setting wins."""
    completed = run_script(ONEDNN_SCRIPT, without="TF_ENABLE_ONEDNN_OPTS")
    assert completed.stdout.split() == ["1", "12.0"]
    assert "oneDNN custom operations are on" not in completed.stderr
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0")
    completed = subprocess.run([sys.executable, "-c", ONEDNN_SCRIPT], capture_output=True,
                               text=True, timeout=120, env=env)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["0", "12.0"]

"""Starting TensorFlow without its start-up noise.

On import and on first device use, TensorFlow's native code writes lines
such as "Could not find cuda drivers", "failed call to cuInit" (on a machine
without a GPU) or "rebuild TensorFlow with the appropriate compiler flags".
Some are written before absl's logging is initialised, so
`TF_CPP_MIN_LOG_LEVEL` cannot silence them. The command-line entry points call
`start_tensorflow()`, which holds file descriptor 2 while TensorFlow starts and
passes every other line through, so real errors still reach the user.

It also gives TensorFlow's CPU tensors a pooled (BFC) allocator. The default
one takes every large tensor (the logits of a batch are tens of MB) from the
operating system and gives it back after use; in the `small` recipe's loop
on 2 cores the page faults took 6.64 s of system CPU per 20-step pass of
19.69 s, against 0.50 s of 15.46 s with the pool (docs/speed.md, "Training speed").

And it turns on oneDNN's kernels where TensorFlow leaves them off: TensorFlow
enables them by default only on CPUs with AVX512-class features, and on the
project's 2-core AVX2 machines its own (Eigen) matmuls ran the RNN training
steps at 1.27x (RNNsearch) and 1.42x (eager translator) the CPU seconds per
step of oneDNN's, with the same losses (docs/speed.md, "The RNN step, third
pass"). Where TensorFlow turns them on already, nothing changes.

Last, it takes the objects TensorFlow's import created (about 390,000,
Keras' included) out of the cyclic garbage collector's reach
(`freeze_import_time_objects`).
"""

import contextlib
import gc
import os
import re
import sys
import tempfile

# Lines that tell a user of this package nothing they can act on.
STARTUP_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|cudart_stub\.cc|cuda_platform\.cc"
    r"|cuda_executor\.cc|cpu_feature_guard\.cc|To enable the following instructions"
    r"|oneDNN custom operations are on|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation_placer\.cc|TF-TRT Warning|failed call to cuInit"
)


@contextlib.contextmanager
def quiet_startup_logs():
    """Drops `STARTUP_NOISE` lines written to fd 2 inside the block; keeps the rest."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            for line in capture.read().decode("utf-8", "replace").splitlines(True):
                if not STARTUP_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


# Read by TensorFlow when it creates its CPU allocator (first tensor): set it
# before importing TensorFlow. An explicit setting in the environment wins.
POOLED_CPU_ALLOCATOR = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}


def use_pooled_cpu_allocator():
    """Asks TensorFlow for the pooled CPU allocator (no effect once it has started)."""
    for name, value in POOLED_CPU_ALLOCATOR.items():
        os.environ.setdefault(name, value)


# Read when TensorFlow's library loads: set it before importing TensorFlow. An
# explicit setting in the environment wins (TF_ENABLE_ONEDNN_OPTS=0 turns them off).
ONEDNN_KERNELS = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def use_onednn_kernels():
    """Asks TensorFlow for oneDNN's CPU kernels (no effect once it is imported)."""
    for name, value in ONEDNN_KERNELS.items():
        os.environ.setdefault(name, value)


def start_tensorflow():
    """Imports TensorFlow (pooled CPU allocator, oneDNN kernels) and touches the
    devices quietly."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    use_pooled_cpu_allocator()
    use_onednn_kernels()
    with quiet_startup_logs():
        import tensorflow as tf

        tf.constant(0)  # first device use: where cuInit reports
    freeze_import_time_objects()
    return tf


def freeze_import_time_objects():
    """Moves every object alive now to the garbage collector's permanent generation.

    Call it once the heavy imports are done. Their module-level objects live
    as long as the process, yet every full collection walked all of them
    again, and so did the collections at interpreter exit. On the 2-core
    machine, TensorFlow's import tracks ~390,000 objects (~440,000 with
    keras-hub's; one full collection of those took 0.30 s), and a process
    exited in 1.7-2.3 s instead of 0.2 s. Objects
    created later are collected as before; frozen ones are still freed by
    reference counting.
    """
    gc.freeze()


# CPU features with bfloat16 arithmetic in hardware (Linux's /proc/cpuinfo
# names). Without them TensorFlow still runs bf16, by converting to float32 and
# back around each matmul, which is slower than float32 itself.
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo_path="/proc/cpuinfo"):
    """The CPU's feature flags from /proc/cpuinfo (an empty set where it is absent)."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_native_bf16():
    """True if the CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX-BF16)."""
    return bool(NATIVE_BF16_CPU_FLAGS & cpu_flags())


def checked_at_run_time(value, condition, message, name):
    """`value`, which TensorFlow graphs only produce once `condition` holds.

    The layers are written with `keras.ops`, which has no assertion, so they
    run on every Keras backend. A check of a *dynamic* shape needs one in
    TensorFlow graphs only (`tf.function`, exported SavedModels: lengths are
    unknown until run time): there the returned tensor depends on a
    `tf.debugging.Assert` of `condition()` (a function returning a boolean
    scalar, called on TensorFlow only) that fails with `InvalidArgumentError`
    carrying `message` (a list of strings and tensors).
    On JAX and PyTorch shapes are concrete Python ints, which the caller
    checks in Python before, so `value` comes back as it is. The one place
    the layers reach a backend's own ops.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        return value
    import tensorflow as tf

    check = tf.debugging.Assert(condition(), message, name=name)
    with tf.control_dependencies([check]):
        return tf.identity(value)

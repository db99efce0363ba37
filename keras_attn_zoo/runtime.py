"""Starting TensorFlow without its start-up noise.

On import and on first device use, TensorFlow's native code writes lines
such as "Could not find cuda drivers", "failed call to cuInit" (on a machine
without a GPU) or "rebuild TensorFlow with the appropriate compiler flags".
Some are written before absl's logging is initialised, so
`TF_CPP_MIN_LOG_LEVEL` cannot silence them. The command-line entry points call
`start_tensorflow()`, which holds file descriptor 2 while TensorFlow starts and
passes every other line through, so real errors still reach the user.
"""

import contextlib
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


def start_tensorflow():
    """Imports TensorFlow and touches the devices quietly; returns the module."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with quiet_startup_logs():
        import tensorflow as tf

        tf.constant(0)  # first device use: where cuInit reports
    return tf

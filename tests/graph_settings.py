"""TensorFlow settings of the test processes (pytest's workers and the test scripts).

Grappler rewrites each new graph before its first run: for the tiny models of
the tests that was about half of a first call (a Translator's search 5.3 ->
2.9 s, a training step 4.0 -> 2.2-3.4 s on the 2-core machine), with the same
speed afterwards. Its rewrites keep the maths (remapping fuses kernels, which
can move rounding): like XLA at -O0 (tests/conftest.py), the tests check what
the graphs compute. The product's own processes that tests start (the
fresh-process export, server, CLI and recipe runs) keep TensorFlow's defaults,
so both are exercised.
"""


def turn_off_grappler():
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

"""Model FLOPs from a model's config: training and decoding, per batch and per token.

Counts the multiply-adds of matrix products only, as ``2 * m * n * k`` FLOPs for an
``[m, k] x [k, n]`` product: in every zoo model the matmuls are nearly all the work
(softmax, layer norms, activations and embeddings gathers are a few percent of it
and are left out, as in the usual "model FLOPs utilisation" accounting of Kaplan et
al. 2020 and Chowdhery et al. 2022). The backward pass costs twice the forward
pass (one product for the input gradient, one for the weight gradient), so a
training step costs ``3 x`` its forward pass.

Shapes: a batch of ``B`` sentence pairs padded to ``S`` source and ``T`` target
tokens is counted at its padded shape, which is what the hardware computes.
Full-sequence attention (teacher forcing) is counted over the whole ``T x T`` or
``T x S`` score matrix, as implemented (a causal mask does not skip work).

Supported configs (``model.zoo_config`` or ``model.get_config()``):

* ``Seq2SeqTransformer`` and every builder on it (transformer, ran_transformer,
  gmm_transformer, weighted_transformer, hard_coded_transformer,
  synthesizer_transformer), with the attention kinds ``multi_head``,
  ``recurrent`` (RAN), ``hard_coded_gaussian``, ``random_synthesizer``,
  ``gaussian_mixture`` and ``branched_weighted``;
* ``BahdanauRNN`` (RNNsearch) and ``EagerLSTMTranslator``.

Each attention kind's record (``keras_attn_zoo.models.attention_kinds``) says what
its layers compute beyond a plain attention; this module adds the terms up. Per-kind
terms, with ``d`` model width, ``f`` FFN width, ``h`` heads, ``d_k = d/h``,
``V`` vocabulary, ``n`` a fixed-pattern model's ``max_length``, for one query token
attending over ``K`` keys:

* ``multi_head``: Q, K, V and output projections ``4 * 2 d^2`` (for
  cross-attention the K, V projections are counted per *source* token), scores and
  weighted sum ``2 * 2 K d``;
* ``recurrent`` / ``hard_coded_gaussian`` / ``random_synthesizer``: value and
  output projections ``2 * 2 d^2`` and the weighted sum ``2 K d`` (no scores: the
  pattern is input-independent). RAN also refines its matrices once per forward
  pass (per batch, not per token): ``L`` transitions of ``2 h n^3`` (paper) or
  ``16 h n^3`` (the FFN transition);
* ``gaussian_mixture``: ``multi_head`` plus, per query token and head, four small
  FFNs ``d_k -> d_k -> {K, K, K, 1}``;
* ``branched_weighted``: Q, K, V ``3 * 2 d^2``, per-branch output projections
  ``2 d^2``, scores and sum ``4 K d``, the ``M = h`` branch FFNs ``M * 4 d f_b``
  and their alpha-weighted sum ``2 M d`` (the block then has no FFN of its own);
  ``f_b`` is ``weighted_transformer.branch_width(config)`` (default ``f / h``);
* a kind registered elsewhere: its record's ``fixed_pattern``,
  ``extra_query_flops``, ``stack_flops`` and ``uses_feed_forward``;
* FFN ``4 d f``; tied output layer ``2 d V`` per target token.

Decoding (incremental, with caches) is counted *ideally*: step ``t`` attends over
``t + 1`` cached keys. The zoo's fixed-size caches attend over the whole buffer
(masked), so the hardware does more for long outputs; see
``benchmarks/length_scaling.py``.

Cross-checks: :func:`hlo_dot_flops` counts the ``dot`` instructions of XLA's
optimised HLO of a traced function and :func:`profiler_matmul_flops` asks
``tf.compat.v1.profiler`` for the float ops of the ``MatMul`` / ``BatchMatMul``
nodes of a graph; ``tests/test_flops.py`` compares both with this counter.

Examples:
    >>> config = transformer(8000, preset="base").zoo_config
    >>> per_token = training_flops(config, batch_size=1, source_length=24,
    ...                            target_length=24)["per_target_token"]
"""

from __future__ import annotations

import math
import re

BACKWARD_FACTOR = 2.0  # backward pass = 2 x forward pass


def _kinds():
    """The attention-kind registry, every builder's kinds registered.

    Imported here: the rest of this module runs without TensorFlow.
    """
    import keras_attn_zoo.models  # noqa: F401 (registers the builders' kinds)
    from keras_attn_zoo.models import attention_kinds

    return attention_kinds


def matmul_flops(m, n, k):
    """FLOPs of an ``[m, k] x [k, n]`` product: ``2 m n k``."""
    return 2 * m * n * k


# ---- Transformer family --------------------------------------------------------------

def _attention_query_flops(kind, config, keys, slot):
    """Forward FLOPs of one attention layer for ONE query token over ``keys`` keys.

    Excludes the key/value projections of cross-attention (per source token, see
    `_cross_source_flops`), includes self-attention's K/V projection of the token.
    """
    d = config["model_dim"]
    kinds = _kinds()
    if kind not in kinds.ATTENTION_KINDS:
        raise ValueError(f"No FLOP model for attention kind {kind!r}.")
    record = kinds.attention_kind(kind)
    if record.fixed_pattern:
        flops = matmul_flops(1, d, d) * 2 + matmul_flops(1, d, keys)
    else:
        cross = slot == "cross"
        projections = (2 if cross else 4) * matmul_flops(1, d, d)  # Q, O (+ K, V)
        attention = 2 * matmul_flops(1, d, keys)  # scores and weighted sum, all heads
        flops = projections + attention
    if record.extra_query_flops is not None:
        flops += record.extra_query_flops(config, slot)
    return flops


def _block_kinds(config, side, index):
    """The kinds filling block ``index`` of the encoder or decoder, by slot."""
    kinds = _kinds()
    slots = ("encoder_self",) if side == "encoder" else ("decoder_self", "cross")
    return {slot: kinds.layer_kind(config, slot, index) for slot in slots}


def _uses_feed_forward(config, block_kinds):
    return _kinds().block_uses_feed_forward(config, block_kinds.values())


def _ffn_flops(config):
    return 2 * matmul_flops(1, config["intermediate_dim"], config["model_dim"])


def _cross_source_flops(config, kind):
    """K and V projections of cross-attention, per source token."""
    del kind  # every cross kind of the zoo projects keys and values
    return 2 * matmul_flops(1, config["model_dim"], config["model_dim"])


def _stack_flops(config, slot, depth):
    """A slot's stack layer (RAN's matrix refinement), once per forward pass."""
    record = _kinds().attention_kind(_kinds().slot_kinds(config)[slot])
    return record.stack_flops(config, slot, depth) if record.stack_flops else 0


def _encoder_flops(config, tokens, source_length):
    """Encoder forward FLOPs of ``tokens`` source tokens of length ``source_length``."""
    total = 0
    for index in range(config["num_encoder_layers"]):
        block = _block_kinds(config, "encoder", index)
        total += tokens * (
            _attention_query_flops(block["encoder_self"], config, source_length,
                                   "encoder_self")
            + (_ffn_flops(config) if _uses_feed_forward(config, block) else 0))
    return total


def _decoder_query_flops(config, block, self_keys, source_length):
    """One decoder block's forward FLOPs for one target token."""
    return (_attention_query_flops(block["decoder_self"], config, self_keys,
                                   "decoder_self")
            + _attention_query_flops(block["cross"], config, source_length, "cross")
            + (_ffn_flops(config) if _uses_feed_forward(config, block) else 0))


def _transformer_forward(config, batch_size, source_length, target_length):
    d, vocab = config["model_dim"], config["vocabulary_size"]
    source_tokens = batch_size * source_length
    target_tokens = batch_size * target_length
    encoder = _encoder_flops(config, source_tokens, source_length)
    decoder = 0
    for index in range(config["num_decoder_layers"]):
        block = _block_kinds(config, "decoder", index)
        decoder += target_tokens * _decoder_query_flops(config, block, target_length,
                                                        source_length)
        decoder += source_tokens * _cross_source_flops(config, block["cross"])
    output = target_tokens * matmul_flops(1, vocab, d)
    per_batch = (_stack_flops(config, "encoder_self", config["num_encoder_layers"])
                 + _stack_flops(config, "decoder_self", config["num_decoder_layers"])
                 + _stack_flops(config, "cross", config["num_decoder_layers"]))
    return {"encoder": encoder, "decoder": decoder, "output": output,
            "per_batch": per_batch}


def _transformer_decoding(config, source_length, target_length):
    """Forward FLOPs of translating ONE sentence (one hypothesis) token by token."""
    d, vocab = config["model_dim"], config["vocabulary_size"]
    encoder = _encoder_flops(config, source_length, source_length)
    steps = target_length + 1  # the tokens and the EOS step
    decoder = 0
    for index in range(config["num_decoder_layers"]):
        block = _block_kinds(config, "decoder", index)
        decoder += source_length * _cross_source_flops(config, block["cross"])
        for step in range(steps):
            decoder += _decoder_query_flops(config, block, step + 1, source_length)
    output = steps * matmul_flops(1, vocab, d)
    return {"encoder": encoder, "decoder": decoder, "output": output}


# ---- RNN models ---------------------------------------------------------------------

def _gru_flops(input_dim, units):
    return 3 * (matmul_flops(1, units, input_dim) + matmul_flops(1, units, units))


def _lstm_flops(input_dim, units):
    return 4 * (matmul_flops(1, units, input_dim) + matmul_flops(1, units, units))


def _bahdanau_parts(config, source_length, target_steps, score_keys):
    e, hdim = config["embedding_dim"], config["hidden_dim"]
    a, vocab = config["attention_dim"], config["vocabulary_size"]
    memory = 2 * hdim
    encoder = source_length * 2 * _gru_flops(e, hdim)
    keys = source_length * matmul_flops(1, a, memory)  # U h_j, once per sentence
    initial = matmul_flops(1, hdim, hdim)
    readout_in = hdim + memory + e
    if config.get("output", "maxout") == "maxout":
        maxout = config.get("maxout_dim") or hdim // 2
        readout = matmul_flops(1, 2 * maxout, readout_in) + matmul_flops(1, vocab, maxout)
    else:
        readout = matmul_flops(1, vocab, readout_in)
    step = (matmul_flops(1, a, hdim)  # W s_{i-1}
            + matmul_flops(1, score_keys, a)  # v^T tanh(.) over the source
            + matmul_flops(1, memory, score_keys)  # context
            + _gru_flops(e + memory, hdim))
    decoder = target_steps * step + keys + initial
    return {"encoder": encoder, "decoder": decoder, "output": target_steps * readout}


def _eager_parts(config, steps):
    e, layers, vocab = config["embedding_dim"], config["num_layers"], config["vocabulary_size"]
    units = config.get("hidden_dim") or 2 * e
    lstm = _lstm_flops(2 * e, units) + (layers - 1) * _lstm_flops(units, units)
    return {"encoder": 0, "decoder": steps * (lstm + matmul_flops(1, e, units)),
            "output": steps * matmul_flops(1, vocab, e)}


def model_family(config):
    """"transformer", "bahdanau" or "eager" for a zoo model config."""
    if "model_dim" in config and "num_encoder_layers" in config:
        return "transformer"
    if "attention_dim" in config:
        return "bahdanau"
    if "num_layers" in config and "embedding_dim" in config:
        return "eager"
    raise ValueError(f"No FLOP model for a config with keys {sorted(config)}.")


def _config(model_or_config):
    if isinstance(model_or_config, dict):
        return model_or_config
    return dict(model_or_config.zoo_config)  # every zoo model keeps its arguments


# ---- public API -----------------------------------------------------------------------

def forward_flops(model_or_config, batch_size, source_length, target_length):
    """Forward (teacher-forced) FLOPs of one batch.

    Args:
        model_or_config: a zoo model or its config dict.
        batch_size: sentence pairs B.
        source_length: padded source length S (with EOS). The eager translator
            reads one source token per target token: its ``source_length`` is
            ignored.
        target_length: padded target length T (with BOS).

    Returns:
        dict: ``encoder``, ``decoder``, ``output`` (the vocabulary projection),
        ``per_batch`` (RAN's matrix refinement) and ``total``, in FLOPs.
    """
    config = _config(model_or_config)
    family = model_family(config)
    if family == "transformer":
        parts = _transformer_forward(config, batch_size, source_length, target_length)
    elif family == "bahdanau":
        parts = {key: batch_size * value for key, value in _bahdanau_parts(
            config, source_length, target_length, source_length).items()}
        parts["per_batch"] = 0
    else:
        parts = {key: batch_size * value for key, value in
                 _eager_parts(config, target_length).items()}
        parts["per_batch"] = 0
    parts["total"] = sum(parts.values())
    return parts


def training_flops(model_or_config, batch_size, source_length, target_length,
                   target_tokens=None):
    """FLOPs of one training step (forward + backward = 3 x forward).

    Args:
        target_tokens: real (non-padding) target tokens in the batch, for the
            per-token figure; default ``batch_size * target_length``.

    Returns:
        dict: ``forward``, ``backward``, ``total`` and ``per_target_token``.
    """
    forward = forward_flops(model_or_config, batch_size, source_length,
                            target_length)["total"]
    backward = BACKWARD_FACTOR * forward
    tokens = target_tokens if target_tokens is not None else batch_size * target_length
    total = forward + backward
    return {"forward": forward, "backward": backward, "total": total,
            "per_target_token": total / max(tokens, 1)}


def decoding_flops(model_or_config, source_length, target_length, beam_size=1):
    """Ideal forward FLOPs of translating one sentence incrementally.

    The encoder runs once per sentence; the decoder runs ``target_length + 1``
    steps (the tokens and EOS) for each of ``beam_size`` hypotheses, attending
    over the ``t + 1`` cached positions at step ``t``.

    Returns:
        dict: ``encoder``, ``decoder``, ``output``, ``total`` and
        ``per_target_token`` (total / target_length).
    """
    config = _config(model_or_config)
    family = model_family(config)
    steps = target_length + 1
    if family == "transformer":
        parts = _transformer_decoding(config, source_length, target_length)
        # The hypotheses share the encoder and the cross K/V projections (the
        # search tiles them); everything per step is per hypothesis.
        shared = config["num_decoder_layers"] * source_length * _cross_source_flops(
            config, "multi_head")
        parts["decoder"] = (parts["decoder"] - shared) * beam_size + shared
        parts["output"] *= beam_size
    elif family == "bahdanau":
        parts = _bahdanau_parts(config, source_length, steps, source_length)
        shared = source_length * matmul_flops(1, config["attention_dim"],
                                              2 * config["hidden_dim"])
        parts["decoder"] = (parts["decoder"] - shared) * beam_size + shared
        parts["output"] *= beam_size
    else:
        parts = {key: value * beam_size for key, value in
                 _eager_parts(config, steps).items()}
    parts["total"] = sum(parts.values())
    parts["per_target_token"] = parts["total"] / max(target_length, 1)
    return parts


def mfu(flops, seconds, peak_flops_per_second):
    """Model FLOPs utilisation: achieved FLOP/s over the peak, in [0, 1]."""
    if seconds <= 0 or peak_flops_per_second <= 0:
        return math.nan
    return flops / seconds / peak_flops_per_second


# ---- cross-checks against TensorFlow's own counts ------------------------------------

_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>\w+)\[(?P<shape>[\d,]*)\]"
    r"(?:\{[^}]*\})?\s+(?P<op>[\w\-]+)\((?P<operands>[^)]*)\)(?P<rest>.*)$")
_DIMS = re.compile(r"lhs_contracting_dims=\{(?P<dims>[\d,]*)\}")


def _shape(text):
    return [int(x) for x in text.split(",") if x]


def hlo_dot_flops(hlo_text):
    """``2 * prod(output shape) * prod(contracted sizes)`` over the HLO's ``dot`` ops.

    Args:
        hlo_text: HLO module text, e.g. from
            ``tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)
            (stage="optimized_hlo")``.

    Returns:
        int FLOPs of every ``dot`` instruction (fusions included).
    """
    shapes = {}
    dots = []
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        shapes[match["name"]] = _shape(match["shape"])
        if match["op"] == "dot":
            dots.append(match)
    total = 0
    for match in dots:
        lhs = match["operands"].split(",")[0].strip().split()[-1].lstrip("%")
        contracting = _DIMS.search(match["rest"])
        lhs_shape = shapes.get(lhs)
        if lhs_shape is None or contracting is None:
            raise ValueError(f"Cannot read the operands of {match.group(0)[:120]!r}.")
        reduced = math.prod(lhs_shape[int(i)] for i in _shape(contracting["dims"]))
        total += 2 * math.prod(_shape(match["shape"])) * reduced
    return total


def xla_forward_flops(function, *args):
    """:func:`hlo_dot_flops` of ``function(*args)`` compiled by XLA."""
    import tensorflow as tf

    compiled = tf.function(function, jit_compile=True)
    hlo = compiled.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    return hlo_dot_flops(hlo)


MATMUL_OP_TYPES = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")


def profiler_matmul_flops(function, *args):
    """``tf.compat.v1.profiler`` float ops of the matmul nodes of ``function(*args)``.

    The variables are frozen into constants so the profiler sees static shapes.
    Einsum nodes have no registered FLOP statistic (the profiler counts them as
    0), so functions whose matmuls are ``tf.einsum`` are undercounted; the
    zoo's projections are ``MatMul`` and Keras' TensorFlow backend lowers its
    ``ops.einsum`` (attention scores and values) to ``BatchMatMulV2``, both counted.
    """
    import tensorflow as tf
    from tensorflow.python.framework import convert_to_constants

    concrete = tf.function(function).get_concrete_function(*args)
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
    graph = frozen.graph
    matmul_names = {op.name for op in graph.get_operations()
                    if op.type in MATMUL_OP_TYPES}
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    profile = tf.compat.v1.profiler.profile(graph, options=options)
    return sum(child.total_float_ops for child in profile.children
               if child.name in matmul_names)

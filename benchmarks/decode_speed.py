#!/usr/bin/env python
"""Decoding speed of the exported `translate`, and of keras-hub's BeamSampler.

Measures, on the exported SavedModel (loaded with ``tf.saved_model.load``, as a
server would):

1. sentences/s and target tokens/s of ``translate_with_options`` (the exported
   ``translate`` with the beam size as an input) at batch 1, 32, 100 and beam 1, 4,
   with the export's default output limit ``ceil(a * source + b)``;
2. the same search against ``keras_hub.samplers.BeamSampler`` driving a model of the
   same size built from ``keras_hub.layers.TransformerEncoder/TransformerDecoder``
   with their key/value caches, both decoding the same number of steps (ours with
   ``max_length_a=0, max_length_b=T``; keras-hub with a prompt of ``T + 2`` slots and
   no stop token), at batch 32 and beam 4: the time ratio ours / keras-hub;
3. the cost of 4x longer outputs (T -> 4T steps) for both: time ratio (4 = linear);
4. every zoo model (``--models``; RAN-ALL is ``ran_transformer:apply_to=all``):
   sentences/s and target tokens/s by batch size (1, 10, 32, 100) and beam size (1,
   4, 8), as the RAN paper's Figure 3 plots, all models alternating at each point,
   with each model's speed relative to the Transformer (goal of issue 7: RAN-ALL >=
   1.25x at batch 100; the paper: 1.236x) and the decoding MFU (ideal decoding
   FLOPs from ``keras_attn_zoo.evaluation.flops`` over the float32 matmul rate).

Fixed output length (table 4): untrained models end a sentence whenever EOS happens
to win, so their speed would measure luck. Every zoo model therefore decodes with
a logits processor that bans EOS, and with ``max_length_a=0, max_length_b=L``
(``--output-length``): the search forces EOS at step L whatever the processor says
(with the model's own EOS log-probability), so every hypothesis has exactly L
tokens and every call runs exactly L + 1 decoder steps (checked: the rows record
the mean output length). The search is the
export's: ``Translator.translate_ids`` (the exported ``translate_ids`` graph,
in-process), with the processor attached to the model. The eager translator
decodes under its own rules (forced start tokens, epsilon limit, source padding
injection) with the injection limit raised to L so that only the ban and the
length limit decide where its output ends; its ``clean_output`` hook (which drops
start and epsilon tokens from the result) is left out so that the rows count
decoded tokens. Sources are random ids of ``--source-tokens``
tokens (EOS included), all rows equally long.

Both models are random (or the trained export's weights for ours): what is measured
is the search, not the translation. An untrained model rarely emits EOS, so outputs
run to the length limit; a trained model's outputs end earlier, so also read the
target tokens/s, not only sentences/s.

Usage:
    python benchmarks/decode_speed.py --preset small          # untrained, built here
    python benchmarks/decode_speed.py --model-dir saved_models/NAME
    python benchmarks/decode_speed.py --smoke                 # seconds, for tests
    python benchmarks/decode_speed.py --no-keras-hub --models transformer,\
        ran_transformer:apply_to=all --zoo-batches 100 --zoo-beams 4

Writes ``benchmarks/results/decode_speed-<date>.json`` (``-smoke`` before ``.json`` in
smoke mode) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import string
import sys
import tempfile

import common
from keras_attn_zoo.training.seeding import seed_everything

RESULTS_DIR = common.RESULTS_DIR
ZOO_MODELS = ("transformer,ran_transformer:apply_to=all,ran_transformer,gmm_transformer,"
              "weighted_transformer,hard_coded_transformer,synthesizer_transformer,"
              "bahdanau_rnn,eager_translator")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model-dir", help="an exported model (base or version dir)")
    source.add_argument("--preset", default="small",
                        help="build an untrained transformer of this preset "
                             "(default small)")
    parser.add_argument("--vocab-size", type=int, default=8000,
                        help="SentencePiece vocabulary for --preset (default 8000)")
    parser.add_argument("--source-words", type=int, default=15,
                        help="words per synthetic source sentence (default 15)")
    parser.add_argument("--sentences", help="file of source sentences (one a line)")
    parser.add_argument("--batches", default="1,32,100")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--compare-batch", type=int, default=32)
    parser.add_argument("--compare-beam", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32,
                        help="output tokens T of the keras-hub comparison (default 32)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per configuration; the median is kept")
    parser.add_argument("--output-dir", default=str(RESULTS_DIR))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny preset, small batches and vocabulary, one run each")
    parser.add_argument("--no-keras-hub", action="store_true",
                        help="skip the keras-hub comparison")
    parser.add_argument("--models", default=ZOO_MODELS,
                        help="zoo models of table 4: builder names, options after "
                             "':' as key=value pairs joined by ';' (default: all, "
                             "plus RAN-ALL)")
    parser.add_argument("--zoo-preset", default=None,
                        help="preset of the zoo models (default: --preset)")
    parser.add_argument("--zoo-batches", default="1,10,32,100")
    parser.add_argument("--zoo-beams", default="1,4,8")
    parser.add_argument("--output-length", type=int, default=24,
                        help="forced output tokens L of table 4 (default 24)")
    parser.add_argument("--source-tokens", type=int, default=16,
                        help="source tokens incl. EOS of table 4 (default 16)")
    parser.add_argument("--no-zoo", action="store_true", help="skip table 4")
    args = parser.parse_args(argv)
    if args.smoke:
        if args.model_dir is None:
            args.preset = "tiny"
        args.vocab_size = min(args.vocab_size, 120)
        args.source_words = min(args.source_words, 5)
        args.batches, args.beams = "1,4", "1,2"
        args.compare_batch, args.compare_beam = 4, 2
        args.steps = min(args.steps, 6)
        args.repeats = 1
        args.models = "transformer,ran_transformer:apply_to=all,eager_translator"
        args.zoo_batches, args.zoo_beams = "1,4", "1,2"
        args.output_length, args.source_tokens = 6, 5
    args.batches = [int(b) for b in args.batches.split(",")]
    args.beams = [int(b) for b in args.beams.split(",")]
    args.zoo_batches = common.int_list(args.zoo_batches)
    args.zoo_beams = common.int_list(args.zoo_beams)
    args.models = common.str_list(args.models)
    if args.zoo_preset is None:
        args.zoo_preset = args.preset or "small"
    return args


# ---- inputs -----------------------------------------------------------------------

def synthetic_corpus(num_words, num_sentences, words_per_sentence, seed=0):
    """Random pseudo-words with a Zipf-like frequency, as sentences."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase)
                     for _ in range(rng.randint(2, 9))) for _ in range(num_words)]
    weights = [1.0 / (rank + 1) for rank in range(num_words)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(
        max(1, words_per_sentence // 2), words_per_sentence * 2)))
        for _ in range(num_sentences)], words, weights


def benchmark_sentences(args, count, words=None, weights=None, seed=1):
    if args.sentences:
        lines = [line.strip() for line in
                 pathlib.Path(args.sentences).read_text(encoding="utf-8").splitlines()]
        lines = [line for line in lines if line] or ["."]
        return [lines[i % len(lines)] for i in range(count)]
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, weights, k=args.source_words))
            for _ in range(count)]


def vocabulary_words(proto):
    """Words to build sentences from, for a trained export: its whole-word pieces."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    words = [processor.id_to_piece(i)[1:] for i in range(4, processor.get_piece_size())
             if processor.id_to_piece(i).startswith("\u2581")
             and len(processor.id_to_piece(i)) > 1]
    return words or ["a"], [1.0] * max(len(words), 1)


def build_export(args, workdir):
    """Trains a SentencePiece model on synthetic text, builds and exports a model."""

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.export import export_saved_model
    from keras_attn_zoo.models import transformer

    num_words = max(50, args.vocab_size)
    vocab_path = benchmark_vocabulary(args, workdir)
    _, words, weights = synthetic_corpus(num_words, 0, args.source_words)
    seed_everything(0)
    tokenizer = load_tokenizer(vocab_path)
    model = transformer(int(tokenizer.vocabulary_size()), preset=args.preset)
    path = export_saved_model(model, tokenizer, workdir / "saved_models" / "bench",
                              model_card={"preset": args.preset, "data": "untrained"})
    return path, words, weights


def benchmark_vocabulary(args, workdir):
    """A SentencePiece model trained on the synthetic corpus (made once per run)."""
    from keras_attn_zoo.data.vocabulary import train_sentencepiece

    path = workdir / "vocab.model"
    if not path.exists():
        corpus, _, _ = synthetic_corpus(max(50, args.vocab_size),
                                        400 if args.smoke else 40_000,
                                        args.source_words)
        train_sentencepiece(corpus, path, vocab_size=args.vocab_size)
    return path


# ---- timing -----------------------------------------------------------------------

def timed(function, repeats):
    """Warm-up call, then the median of ``repeats`` timed calls: (seconds, result)."""
    timing, result = common.time_call(function, repeats=repeats, warmup=1)
    return timing.median, result


def ours_call(signature, sentences, beam, a, b):
    import tensorflow as tf

    text = tf.constant(sentences)
    options = dict(beam_size=tf.constant(beam, tf.int32),
                   length_penalty=tf.constant(0.6, tf.float32),
                   max_length_a=tf.constant(float(a), tf.float32),
                   max_length_b=tf.constant(float(b), tf.float32))
    return lambda: signature(text=text, **options)


# ---- keras-hub reference ------------------------------------------------------------

class KerasHubSeq2Seq:
    """A Transformer of the zoo model's size built from keras-hub layers, decoded with
    ``keras_hub.samplers.BeamSampler`` and per-layer key/value caches."""

    def __init__(self, vocabulary_size, model_dim, intermediate_dim, num_heads,
                 num_encoder_layers, num_decoder_layers, max_positions):
        import keras
        import keras_hub

        self.model_dim, self.num_heads = model_dim, num_heads
        self.head_dim = model_dim // num_heads
        self.embedding = keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_positions, model_dim)
        self.encoders = [keras_hub.layers.TransformerEncoder(intermediate_dim, num_heads)
                         for _ in range(num_encoder_layers)]
        self.decoders = [keras_hub.layers.TransformerDecoder(intermediate_dim, num_heads)
                         for _ in range(num_decoder_layers)]
        self.output_layer = keras.layers.Dense(vocabulary_size)
        self._functions = {}

    def encode(self, source_ids):
        from keras import ops

        mask = ops.not_equal(source_ids, 0)
        x = self.embedding(source_ids)
        for layer in self.encoders:
            x = layer(x, padding_mask=mask)
        return x, mask

    def _decode_one(self, token_ids, index, memory, memory_mask, self_caches,
                    cross_caches, seed_cross):
        x = self.embedding(token_ids, start_index=index)
        new_self, new_cross = [], []
        for layer, self_cache, cross_cache in zip(self.decoders, self_caches,
                                                  cross_caches):
            x, self_cache, cross_cache = layer(
                x, encoder_sequence=memory, encoder_padding_mask=memory_mask,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=0 if seed_cross else None)
            new_self.append(self_cache)
            new_cross.append(cross_cache)
        return self.output_layer(x)[:, 0, :], x[:, 0, :], new_self, new_cross

    def generate_function(self, num_beams):
        """tf.function(source_ids [B, S], prompt [B, T + 2]) -> tokens [B, T + 2]."""
        if num_beams in self._functions:
            return self._functions[num_beams]
        import keras_hub
        import tensorflow as tf
        from keras import ops

        sampler = keras_hub.samplers.BeamSampler(num_beams=num_beams)

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                      tf.TensorSpec([None, None], tf.int32)])
        def generate(source_ids, prompt):
            memory, memory_mask = self.encode(source_ids)
            batch = ops.shape(source_ids)[0]
            self_shape = [batch, 2, ops.shape(prompt)[1], self.num_heads, self.head_dim]
            cross_shape = [batch, 2, ops.shape(source_ids)[1], self.num_heads,
                           self.head_dim]
            layers = range(len(self.decoders))
            self_caches = [ops.zeros(self_shape) for _ in layers]
            cross_caches = [ops.zeros(cross_shape) for _ in layers]
            # Seeding pass on BOS: fills slot 0 and the cross-attention caches.
            _, _, self_caches, cross_caches = self._decode_one(
                prompt[:, :1], 0, memory, memory_mask, self_caches, cross_caches,
                seed_cross=True)

            def next_fn(prompt, cache, index):
                self_caches, cross_caches, memory, memory_mask = cache
                token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
                logits, hidden, self_caches, _ = self._decode_one(
                    token, index - 1, memory, memory_mask, self_caches, cross_caches,
                    seed_cross=False)
                return logits, hidden, (self_caches, cross_caches, memory, memory_mask)

            return sampler(next=next_fn, prompt=prompt,
                           cache=(self_caches, cross_caches, memory, memory_mask),
                           index=1)

        self._functions[num_beams] = generate
        return generate

    def call(self, source_ids, steps, num_beams):
        """A callable decoding ``steps`` + 1 positions (T tokens + the EOS step)."""
        import numpy as np
        import tensorflow as tf

        prompt = np.zeros([source_ids.shape[0], steps + 2], "int32")
        prompt[:, 0] = 2  # BOS
        generate = self.generate_function(num_beams)
        source = tf.constant(source_ids)
        prompt = tf.constant(prompt)
        return lambda: generate(source, prompt)


# ---- every zoo model at a fixed output length (table 4) ----------------------------

def parse_model_spec(spec):
    """``"ran_transformer:apply_to=all"`` -> ``("ran_transformer", {"apply_to": "all"},
    "ran_transformer:apply_to=all")`` (options as ``train_wmt.py --model-options``)."""
    from keras_attn_zoo.models import parse_model_options

    name, _, options = spec.partition(":")
    return name.strip(), parse_model_options(options), spec


class FixedLengthModel:
    """Step-protocol proxy whose ``logits_processor`` bans EOS at every step.

    Decoded with ``max_length_a=0, max_length_b=L``, the search forces EOS at step
    L anyway (at a row's length limit only EOS is allowed, with the model's own
    log-probability, whatever the processor returns): every hypothesis is then
    exactly L tokens long, whatever the weights. ``inner`` (a model's own
    processor, e.g. the eager translator's rules) runs first. Every other
    attribute is the wrapped model's.
    """

    def __init__(self, model, inner=None):
        self.model = model
        self.inner = inner

    def __getattr__(self, name):
        # clean_output (the eager translator's removal of start/epsilon tokens) is
        # left out so that the returned lengths count the decoded tokens.
        if name in ("model", "inner", "clean_output"):
            raise AttributeError(name)
        return getattr(self.model, name)

    def encode(self, source_ids):
        return self.model.encode(source_ids)

    def initial_state(self, memory, max_length):
        return self.model.initial_state(memory, max_length)

    def decode_step(self, token, step, state):
        return self.model.decode_step(token, step, state)

    def logits_processor(self, log_probs, step, tokens_so_far, state):
        import tensorflow as tf

        from keras_attn_zoo.decoding import common as search_common

        if self.inner is not None:
            log_probs = self.inner(log_probs, step, tokens_so_far, state)
        del step, tokens_so_far, state
        is_eos = tf.equal(tf.range(tf.shape(log_probs)[-1]), search_common.EOS_ID)
        return tf.where(is_eos[tf.newaxis, :], search_common.NEG_INF, log_probs)


def build_zoo_translator(spec, vocab_path, preset, output_length):
    """``(Translator, model)`` of one zoo model spec, untrained, EOS banned.

    ``output_length``: the longest output it will decode (the eager translator's
    source padding injection and epsilon limit are raised to it, so that only the
    length limit ends its output)."""

    from keras_attn_zoo.export import Translator
    from keras_attn_zoo.models import build_model

    name, kwargs, _ = parse_model_spec(spec)
    proto = pathlib.Path(vocab_path).read_bytes()
    vocab_size = _sentencepiece_proto(proto).get_piece_size()
    seed_everything(0)
    model = build_model(name, vocab_size, preset=preset, **kwargs)
    extra = int(getattr(model, "extra_token_count", 0) or 0)
    if extra:  # ids beyond the SentencePiece pieces (the eager translator's 3)
        seed_everything(0)
        model = build_model(name, vocab_size + extra, preset=preset, **kwargs)
    inner = None
    if name == "eager_translator":
        from keras_attn_zoo.decoding.eager_processor import eager_processor_for

        inner = eager_processor_for(model, source_padding_injection=output_length,
                                    epsilon_limit=output_length)
    proxy = FixedLengthModel(model, inner)
    return Translator(proxy, proto, beam_size=4), model


def _sentencepiece_proto(proto):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=proto)


def zoo_source_ids(batch, source_tokens, vocab_size, seed=2):
    """Random piece ids ``[batch, source_tokens]``, the last one EOS (3)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab_size - 3, size=[batch, source_tokens]).astype("int32")
    ids[:, -1] = 3
    return ids


def zoo_call(translator, source_ids, beam, length):
    import tensorflow as tf

    source = tf.constant(source_ids)
    options = (tf.constant(beam, tf.int32), tf.constant(0.6, tf.float32),
               tf.constant(0.0, tf.float32), tf.constant(float(length), tf.float32))
    return lambda: translator.translate_ids(source, *options)


def measure_zoo(args, vocab_path, peak_gflops):
    """Table 4: every zoo model by batch and beam, all models alternating per point."""
    from keras_attn_zoo.evaluation.flops import decoding_flops

    length, source_tokens = args.output_length, args.source_tokens
    translators, configs = {}, {}
    for spec in args.models:
        translator, model = build_zoo_translator(spec, vocab_path, args.zoo_preset,
                                                 length)
        translators[spec] = translator
        configs[spec] = dict(model.zoo_config)
    vocab_size = _sentencepiece_proto(pathlib.Path(vocab_path).read_bytes()
                                      ).get_piece_size()
    # One warm-up call per model (traces the search once: batch and beam are inputs).
    warm = zoo_source_ids(1, source_tokens, vocab_size)
    for translator in translators.values():
        zoo_call(translator, warm, 1, length)()
    rows = []
    for beam in args.zoo_beams:
        for batch in args.zoo_batches:
            source = zoo_source_ids(batch, source_tokens, vocab_size)
            timings, outputs = common.alternate(
                {spec: zoo_call(t, source, beam, length)
                 for spec, t in translators.items()},
                repeats=args.repeats, warmup=0)
            reference = timings.get("transformer")
            for spec, timing in timings.items():
                seconds = timing.median
                flops = batch * decoding_flops(configs[spec], source_tokens, length,
                                               beam)["total"]
                rows.append({
                    "model": spec, "batch": batch, "beam": beam, "seconds": seconds,
                    "sentences_per_s": batch / seconds,
                    "target_tokens_per_s": batch * length / seconds,
                    "mean_target_length": float(outputs[spec]["lengths"].numpy().mean()),
                    "speed_vs_transformer": (reference.median / seconds
                                             if reference else None),
                    "decode_mfu": flops / seconds / (peak_gflops * 1e9),
                    "spread": timing.spread,
                })
            print(common.format_table(rows[-len(timings):], ZOO_COLUMNS,
                                      f"beam {beam} batch {batch}:"), flush=True)
    return rows


ZOO_COLUMNS = [
    ("model", "model", ""), ("beam", "beam", ""), ("batch", "batch", ""),
    ("sentences_per_s", "sent/s", ".2f"), ("target_tokens_per_s", "tok/s", ".0f"),
    ("speed_vs_transformer", "vs transf.", ".3f"), ("decode_mfu", "MFU", ".2%"),
    ("mean_target_length", "len", ".1f"), ("spread", "spread", ".2f"),
]


def zoo_summary(rows):
    """RAN-ALL over the Transformer at the largest batch, per beam."""
    ran_all = [r for r in rows if r["model"].startswith("ran_transformer")
               and "all" in r["model"]]
    if not ran_all:
        return None
    largest = max(r["batch"] for r in ran_all)
    return {f"ran_all_over_transformer_batch{largest}_beam{r['beam']}":
            r["speed_vs_transformer"] for r in ran_all if r["batch"] == largest}


# ---- main ---------------------------------------------------------------------------

def run(args):
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="decode_speed-"))
    run_info = common.start_run()
    if args.model_dir:
        from keras_attn_zoo.export import latest_version

        model_dir = latest_version(args.model_dir)
        words, weights = vocabulary_words((model_dir / "assets" / "vocab.model")
                                          .read_bytes())
        source_label = str(model_dir)
    else:
        model_dir, words, weights = build_export(args, workdir)
        source_label = f"untrained transformer preset={args.preset}"
    card = json.loads((model_dir / "model_card.json").read_text(encoding="utf-8"))
    config = card.get("model_config") or {}
    defaults = card.get("defaults", {})
    a, b = defaults.get("max_length_a", 2.0), defaults.get("max_length_b", 10)
    loaded = tf.saved_model.load(str(model_dir))
    signature = loaded.signatures["translate_with_options"]
    sentences = benchmark_sentences(args, max(args.batches + [args.compare_batch]),
                                    words, weights)

    rows = []
    for beam in args.beams:
        for batch in args.batches:
            seconds, out = timed(ours_call(signature, sentences[:batch], beam, a, b),
                                 args.repeats)
            tokens = int(out["length"].numpy().sum())
            rows.append({
                "batch": batch, "beam": beam, "seconds": seconds,
                "sentences_per_s": batch / seconds, "target_tokens_per_s": tokens / seconds,
                "mean_target_length": tokens / batch,
                "mean_source_tokens": float(np.mean(
                    (out["source_pieces"].numpy() != b"").sum(axis=1))),
            })

    comparison = None
    batch, beam, steps = args.compare_batch, args.compare_beam, args.steps
    compare_sentences = sentences[:batch]
    ours = {}
    for length in (steps, 4 * steps):
        seconds, out = timed(ours_call(signature, compare_sentences, beam, 0, length),
                             args.repeats)
        ours[length] = {"seconds": seconds,
                        "mean_target_length": float(out["length"].numpy().mean())}
    comparison = {
        "batch": batch, "beam": beam, "target_tokens": steps,
        "ours_seconds": ours[steps]["seconds"],
        "ours_mean_target_length": ours[steps]["mean_target_length"],
        "ours_long_ratio": ours[4 * steps]["seconds"] / ours[steps]["seconds"],
        "ours_long_mean_target_length": ours[4 * steps]["mean_target_length"],
    }
    if not args.no_keras_hub and config:
        # The keras-hub model gets the same source ids as ours.
        sp = _sentencepiece(model_dir)
        ids = [sp.encode(s) + [3] for s in compare_sentences]
        width = max(len(i) for i in ids)
        source = np.array([i + [0] * (width - len(i)) for i in ids], "int32")
        seed_everything(0)
        hub = KerasHubSeq2Seq(
            config["vocabulary_size"], config["model_dim"], config["intermediate_dim"],
            config["num_heads"], config["num_encoder_layers"],
            config["num_decoder_layers"], max_positions=max(4 * steps + 2, width) + 8)
        hub_seconds = {}
        for length in (steps, 4 * steps):
            hub_seconds[length], _ = timed(hub.call(source, length, beam), args.repeats)
        comparison.update({
            "keras_hub_seconds": hub_seconds[steps],
            "ratio_ours_over_keras_hub": ours[steps]["seconds"] / hub_seconds[steps],
            "speedup_over_keras_hub": hub_seconds[steps] / ours[steps]["seconds"],
            "keras_hub_long_ratio": hub_seconds[4 * steps] / hub_seconds[steps],
            "ratio_ours_over_keras_hub_long": (ours[4 * steps]["seconds"]
                                               / hub_seconds[4 * steps]),
        })

    zoo_rows, zoo_info = [], None
    if not args.no_zoo and args.models:
        vocab_path = (model_dir / "assets" / "vocab.model" if args.model_dir
                      else benchmark_vocabulary(args, workdir))
        peak = common.matmul_rate("float32", size=256 if args.smoke else 2048)
        zoo_rows = measure_zoo(args, vocab_path, peak["gflops"])
        zoo_info = {"preset": args.zoo_preset, "output_length": args.output_length,
                    "source_tokens": args.source_tokens,
                    "matmul_gflops_float32": peak["gflops"],
                    "fixed_length": "EOS banned before L tokens, max_length_a=0, "
                                    "max_length_b=L (EOS forced at step L)",
                    "summary": zoo_summary(zoo_rows)}

    results = {
        "date": run_info["date"],
        "model": source_label,
        "model_config": config,
        "smoke": args.smoke,
        "max_length_a": a, "max_length_b": b,
        "repeats": args.repeats,
        "translate": rows,
        "comparison": comparison,
        "zoo": zoo_rows,
        "zoo_settings": zoo_info,
    }
    return results, run_info


def _sentencepiece(model_dir):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(
        model_proto=(model_dir / "assets" / "vocab.model").read_bytes())


def print_table(results, file=sys.stdout):
    print(f"model: {results['model']}  (output limit ceil({results['max_length_a']} * "
          f"source + {results['max_length_b']}))", file=file)
    print(f"{'beam':>4} {'batch':>5} {'sent/s':>9} {'tok/s':>9} {'tgt len':>8} "
          f"{'seconds':>8}", file=file)
    for row in results["translate"]:
        print(f"{row['beam']:>4} {row['batch']:>5} {row['sentences_per_s']:>9.2f} "
              f"{row['target_tokens_per_s']:>9.1f} {row['mean_target_length']:>8.1f} "
              f"{row['seconds']:>8.3f}", file=file)
    c = results["comparison"]
    if c:
        print(f"\nbatch {c['batch']} beam {c['beam']}, T={c['target_tokens']} tokens "
              f"(ours mean length {c['ours_mean_target_length']:.1f}):", file=file)
        print(f"  ours {c['ours_seconds']:.3f} s", end="", file=file)
        if "keras_hub_seconds" in c:
            print(f", keras-hub BeamSampler {c['keras_hub_seconds']:.3f} s, "
                  f"ratio ours/keras-hub {c['ratio_ours_over_keras_hub']:.2f} "
                  f"(ours {1 / c['ratio_ours_over_keras_hub']:.2f}x faster)", end="",
                  file=file)
        print(file=file)
        print(f"  4x longer outputs: ours x{c['ours_long_ratio']:.2f}", end="", file=file)
        if "keras_hub_long_ratio" in c:
            print(f", keras-hub x{c['keras_hub_long_ratio']:.2f} "
                  f"(ratio at 4T {c['ratio_ours_over_keras_hub_long']:.2f})", end="",
                  file=file)
        print(file=file)
    if results.get("zoo"):
        settings = results["zoo_settings"]
        common.print_table(
            results["zoo"], ZOO_COLUMNS,
            f"\nevery zoo model, preset {settings['preset']}, {settings['source_tokens']} "
            f"source tokens, output forced to {settings['output_length']} tokens "
            "(alternating at each point):", file=file)
        for key, value in (settings.get("summary") or {}).items():
            print(f"  {key}: {value:.3f}", file=file)


def write_results(results, output_dir, smoke=False, run_info=None):
    return common.write_results("decode_speed", results, output_dir, smoke=smoke,
                                run=run_info)


def main(argv=None):
    args = parse_args(argv)
    results, run_info = run(args)
    print_table(results)
    path = write_results(results, args.output_dir, smoke=args.smoke, run_info=run_info)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()

"""Every zoo model decoded at a fixed output length: the translators and table 4.

Untrained models end a sentence whenever EOS happens to win, so their speed would
measure luck. Every zoo model therefore decodes with a logits processor that bans
EOS, and with ``max_length_a=0, max_length_b=L``: the search forces EOS at step L
whatever the processor says (with the model's own EOS log-probability), so every
hypothesis has exactly L tokens and every call runs exactly L + 1 decoder steps.
The search is the export's: ``Translator.translate_ids`` (the exported
``translate_ids`` graph, in-process), with the processor attached to the model.
The eager translator decodes under its own rules (forced start tokens, epsilon
limit, source padding injection) with the injection limit raised to L so that
only the ban and the length limit decide where its output ends; its
``clean_output`` hook (which drops start and epsilon tokens from the result) is
left out so that the rows count decoded tokens.

Used by decode_speed.py (table 4), decode_memory.py, length_scaling.py and mfu.py.
"""

from __future__ import annotations

import pathlib

import common
from inputs import zoo_source_ids
from keras_attn_zoo.data.vocabulary import sentencepiece_processor
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.training.seeding import seed_everything


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
    processor, e.g. the eager translator's rules) runs first.

    The search and the Translator read the model contract's attributes; they are
    the wrapped model's, except ``clean_output`` (the eager translator's removal
    of start/epsilon tokens), which is the identity here so that the returned
    lengths count the decoded tokens.
    """

    def __init__(self, model, inner=None):
        self.model = model
        self.inner = inner
        self.zoo_config = model.zoo_config
        self.max_decode_length = model.max_decode_length
        self.extra_token_count = model.extra_token_count

    @property
    def variables(self):
        """The wrapped model's (an export or Translator saves them)."""
        return self.model.variables

    def clean_output(self, ids, lengths, alignment=None):
        return ids, lengths, alignment

    def encode(self, source_ids):
        return self.model.encode(source_ids)

    def initial_state(self, memory, max_length):
        return self.model.initial_state(memory, max_length)

    def decode_step(self, token, step, state):
        return self.model.decode_step(token, step, state)

    @property
    def logits_processor(self):
        """The wrapped model's rules (``inner``), then EOS banned."""
        return self._ban_eos

    def _ban_eos(self, log_probs, step, tokens_so_far, state):
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

    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.models import extra_token_count
    from keras_attn_zoo.workflow import RunConfig
    from keras_attn_zoo.workflow import run_translator

    name, kwargs, _ = parse_model_spec(spec)
    proto = pathlib.Path(vocab_path).read_bytes()
    vocab_size = sentencepiece_processor(proto).get_piece_size()
    seed_everything(0)
    # ids beyond the SentencePiece pieces (the eager translator's 3), known before the build
    model = build_model(name, vocab_size + extra_token_count(name), preset=preset, **kwargs)
    inner = None
    if name == "eager_translator":
        from keras_attn_zoo.decoding.eager_processor import eager_processor_for

        inner = eager_processor_for(model, source_padding_injection=output_length,
                                    epsilon_limit=output_length)
    proxy = FixedLengthModel(model, inner)
    return run_translator(RunConfig(), proxy, proto), model


def zoo_call(translator, source_ids, beam, length):
    import tensorflow as tf

    source = tf.constant(source_ids)
    options = (tf.constant(beam, tf.int32), tf.constant(DEFAULT_LENGTH_PENALTY, tf.float32),
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
    vocab_size = sentencepiece_processor(vocab_path).get_piece_size()
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



#!/usr/bin/env python
"""Does every zoo model decode what it trains? Teacher forcing against step decoding.

For each published model (``keras_attn_zoo.models.MODEL_VARIANTS``) and the
option variants below, builds the model with random weights (``--preset``, 2 + 2
layers at ``tiny``; dropout is off at inference), feeds the same target tokens to
the functional graph (what ``fit``, the ``Trainer`` and rescoring run) and to
``decode_step`` one position at a time (what beam search runs), and reports the
largest absolute logit difference (``decoding.consistency``). Float32 rounding
gives about 1e-6; anything near 1e-2 or above means the two paths are different
models. The eager translator is compared while it reads the source
(``stepwise_positions``).

Usage:
    python benchmarks/step_fidelity.py             # tiny preset, a minute
    python benchmarks/step_fidelity.py --preset small

Writes ``benchmarks/results/step_fidelity-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse

import numpy as np

import common

# Option variants beside the published models: other norms, transitions,
# normalisations, branch layouts and output layers.
OPTION_VARIANTS = {
    "transformer pre-norm": ("transformer", {"norm_first": True}),
    "RAN-ALL ffn transition": ("ran_transformer", {"apply_to": "all",
                                                   "transition": "ffn"}),
    "GMM strict": ("gmm_transformer", {"normalization": "strict"}),
    "GMM none": ("gmm_transformer", {"normalization": "none"}),
    "weighted full-width branches": ("weighted_transformer",
                                     {"branch_intermediate_dim": "full"}),
    "weighted all slots, softmax": ("weighted_transformer", {
        "branched_slots": ["encoder_self", "decoder_self", "cross"],
        "weight_parameterization": "softmax"}),
    # Issue 32's variants (WEIGHTED_VARIANTS, "paper" is the published model).
    "weighted gain": ("weighted_transformer", {"weight_gain": "branches"}),
    "weighted gain rms, random start": ("weighted_transformer", {
        "weight_gain": "branches_rms", "weight_initialization": "random"}),
    "weighted port (branch residual + norm)": ("weighted_transformer", {
        "branch_residual_norm": True, "weight_parameterization": "softmax",
        "weight_initialization": "random"}),
    "RNNsearch dense, shared, normalised": ("bahdanau_rnn", {
        "output": "dense", "share_embeddings": True, "normalize_attention": True}),
}
FIXED_LENGTH_BUILDERS = ("ran_transformer", "hard_coded_transformer",
                         "synthesizer_transformer")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab-size", type=int, default=60)
    parser.add_argument("--length", type=int, default=9,
                        help="source and target length of the random batch")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir")
    parser.add_argument("--smoke", action="store_true")
    return parser.parse_args(argv)


def random_batch(vocabulary_size, batch, length, seed):
    """Random ids below the eager model's special ids; row r padded by r tokens
    on both sides (the eager model needs equal source and target lengths)."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocabulary_size - 3, (batch, length)).astype("int32")
    target = rng.integers(4, vocabulary_size - 3, (batch, length)).astype("int32")
    target[:, 0] = 2  # BOS
    for row in range(1, batch):
        source[row, length - row:] = 0
        target[row, length - row:] = 0
    return source, target


def depths(model):
    config = model.zoo_config
    if "num_encoder_layers" in config:
        return f"{config['num_encoder_layers']} + {config['num_decoder_layers']}"
    if "num_layers" in config:
        return f"{config['num_layers']} LSTM"
    return "1 + 1 GRU"


def measure(label, builder, options, args, source, target):
    from keras_attn_zoo.decoding.consistency import step_decoding_divergence
    from keras_attn_zoo.models import build_model
    from keras_attn_zoo.training.seeding import seed_everything

    seed_everything(args.seed)
    options = dict(options)
    if builder in FIXED_LENGTH_BUILDERS:
        options.setdefault("max_length", 32)
    model = build_model(builder, args.vocab_size, preset=args.preset, **options)
    divergence = step_decoding_divergence(model, source, target)
    compared = int(np.asarray(model.stepwise_positions(source, target)).sum())
    return {"model": label, "builder": builder, "options": options,
            "layers": depths(model), "parameters": model.count_params(),
            "max_abs_logit_difference": divergence, "positions_compared": compared}


def main(argv=None):
    args = parse_args(argv)
    run = common.start_run()
    from keras_attn_zoo.models import MODEL_VARIANTS

    source, target = random_batch(args.vocab_size, args.batch, args.length, args.seed)
    rows = [measure(label, builder, options, args, source, target)
            for label, (builder, options) in {**MODEL_VARIANTS, **OPTION_VARIANTS}.items()]
    common.print_table(rows, [("model", "model", ""), ("layers", "layers", ""),
                              ("parameters", "parameters", ","),
                              ("positions_compared", "positions", ""),
                              ("max_abs_logit_difference", "max |full - step| logit",
                               ".2g")],
                       title=f"Teacher forcing vs step decoding, preset {args.preset}")
    path = common.write_results("step_fidelity", {"preset": args.preset, "rows": rows},
                                args.output_dir, args.smoke, run)
    print(f"wrote {path}")
    return rows


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""The Weighted Transformer's variants (issue 32): initial gain, trained κ/α, loss.

For each variant of ``keras_attn_zoo.models.weighted_transformer.WEIGHTED_VARIANTS``
(the paper's equations, the gain-corrected forms, the port's per-branch
residual + norm) this measures

* the RMS of the branched sublayer's output at initialisation, layer-level at
  the chosen preset's shape on unit-RMS input (what a pre-norm block feeds),
  against the Transformer's attention sublayer on the same input (the mean
  over ``--inits`` initialisations of each);
* after a short training on a toy reversal task (same seeds, same batches
  for every model, the zoo's ``Trainer`` and Adam with the inverse-square-root
  schedule), the training loss at the end (mean of the last 10 steps) and κ/α
  of every branched layer (at the start and at the end), with the largest
  |κ_i - α_i| (the issue's tie: with the uniform start they stay equal to
  three decimals) and the largest move of a weight from its start.

The plain Transformer is trained beside them as the peer.

``--trained NAME=MODEL.keras,...`` measures trained models instead (the
leaderboard's cells, for example): on the same unit-RMS input, the RMS of
every encoder and decoder block's whole residual update (block(x) - x; a
Weighted block's branched layer holds its FFNs, a Transformer block has an
attention and an FFN sublayer, so only the whole update compares) and of each
attention sublayer's output. Whether training made up for the paper form's
small start, and how large the gain forms' updates grew.

Usage:
    python benchmarks/weighted_variants.py               # small preset, ~minutes
    python benchmarks/weighted_variants.py --smoke       # tiny, seconds
    python benchmarks/weighted_variants.py --trained transformer=runs/.../model.keras,...

Writes ``benchmarks/results/weighted_variants-<date>.json`` (``--trained``:
``weighted_trained_updates-<date>.json``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import common


def toy_reversal_batches(vocabulary_size, batch_size, length, steps, seed):
    """`steps` batches of (inputs, labels): the target is the source reversed.

    Ids 0-3 are reserved (pad, unk, BOS, EOS); every row has `length` tokens.
    """
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(steps):
        source = rng.integers(4, vocabulary_size, (batch_size, length)).astype("int32")
        reversed_ = source[:, ::-1]
        bos = np.full((batch_size, 1), 2, "int32")
        eos = np.full((batch_size, 1), 3, "int32")
        target_in = np.concatenate([bos, reversed_], axis=1)
        labels = np.concatenate([reversed_, eos], axis=1)
        batches.append(({"source_ids": source, "target_ids": target_in}, labels))
    return batches


def initial_rms(preset, inits, seed):
    import keras

    from keras_attn_zoo.layers.branched_weighted_attention import BranchedWeightedAttention
    from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
    from keras_attn_zoo.models.presets import TRANSFORMER_PRESETS
    from keras_attn_zoo.models.weighted_transformer import WEIGHTED_VARIANTS

    config = TRANSFORMER_PRESETS[preset]
    d, heads = config["model_dim"], config["num_heads"]
    branch_inner = config["intermediate_dim"] // heads  # the default "split" width
    keras.utils.set_random_seed(seed)
    x = keras.random.normal((8, 16, d), seed=seed)

    def rms(layer):
        return float(np.sqrt(np.mean(np.asarray(layer(x)) ** 2)))

    attention = [rms(MultiHeadAttention(heads, d // heads)) for _ in range(inits)]
    rows = {"transformer_attention": {"rms_mean": float(np.mean(attention)),
                                      "rms_each": attention}}
    for name, options in WEIGHTED_VARIANTS.items():
        values = [rms(BranchedWeightedAttention(heads, d // heads, branch_inner, **options))
                  for _ in range(inits)]
        rows[name] = {"options": options, "rms_mean": float(np.mean(values)),
                      "rms_each": values,
                      "ratio_to_attention": float(np.mean(values) / np.mean(attention))}
    return rows


def train_one(name, options, preset, vocabulary_size, batches, seed, peak, warmup):
    import keras

    from keras_attn_zoo.models.transformer import transformer
    from keras_attn_zoo.models.weighted_transformer import weighted_branch_weights
    from keras_attn_zoo.models.weighted_transformer import weighted_transformer
    from keras_attn_zoo.optimizers import Adam
    from keras_attn_zoo.training import InverseSquareRootSchedule
    from keras_attn_zoo.training import Trainer

    keras.utils.set_random_seed(seed)
    if name == "transformer":
        model = transformer(vocabulary_size, preset=preset)
    else:
        model = weighted_transformer(vocabulary_size, preset=preset, **options)
        model(batches[0][0])  # built: κ/α exist
        start = weighted_branch_weights(model)
    optimizer = Adam(InverseSquareRootSchedule(peak, warmup_steps=warmup),
                     beta_2=0.98, epsilon=1e-9)
    losses = []

    class Record:
        def on_step_end(self, trainer, step, logs):
            losses.append(float(logs["loss"]))

    import tensorflow as tf

    dataset = tf.data.Dataset.from_generator(
        lambda: iter(batches),
        output_signature=(
            {"source_ids": tf.TensorSpec(batches[0][0]["source_ids"].shape, tf.int32),
             "target_ids": tf.TensorSpec(batches[0][0]["target_ids"].shape, tf.int32)},
            tf.TensorSpec(batches[0][1].shape, tf.int32)))
    trainer = Trainer(model, optimizer, callbacks=[Record()])
    started = time.perf_counter()
    trainer.train(lambda epoch: dataset, max_steps=len(batches), verbose=0)
    result = {"seed": seed, "steps": len(losses),
              "loss_first_10": float(np.mean(losses[:10])),
              "loss_last_10": float(np.mean(losses[-10:])),
              "train_seconds": round(time.perf_counter() - started, 1)}
    if name != "transformer":
        weights = weighted_branch_weights(model)
        result["branch_weights"] = {
            layer: {key: [round(v, 5) for v in values] for key, values in kv.items()}
            for layer, kv in weights.items()}
        result["max_abs_kappa_minus_alpha"] = float(max(
            np.abs(np.subtract(kv["kappa"], kv["alpha"])).max() for kv in weights.values()))
        result["initial_branch_weights"] = {
            layer: {key: [round(v, 5) for v in values] for key, values in kv.items()}
            for layer, kv in start.items()}
        result["max_abs_move_from_start"] = float(max(
            np.abs(np.subtract(kv[key], start[layer][key])).max()
            for layer, kv in weights.items() for key in ("kappa", "alpha")))
    return result


def trained_updates(models, seed):
    """`{name: {"blocks": {block: RMS of block(x) - x}, "attention": {layer: RMS}}}`
    for trained models (`{name: path of a .keras file}`), on one unit-RMS input
    (and the same input as the decoder blocks' memory)."""
    import keras

    import keras_attn_zoo.models  # noqa: F401  (registers the saved classes)

    def rms(values):
        return round(float(np.sqrt(np.mean(np.asarray(values) ** 2))), 4)

    rows = {}
    for name, path in models.items():
        model = keras.models.load_model(path, compile=False)  # a Seq2SeqTransformer
        x = keras.random.normal((8, 16, model.get_config()["model_dim"]), seed=seed)
        blocks = {block.name: rms(block(x) - x) for block in model.encoder_blocks}
        blocks.update({block.name: rms(block(x, x) - x) for block in model.decoder_blocks})
        slots = [block.self_attention for block in model.encoder_blocks]
        for block in model.decoder_blocks:
            slots += [block.self_attention, block.cross_attention]
        attention = {layer.name: rms(layer(x, context=x)) for layer in slots}
        rows[name] = {"path": str(path), "blocks": blocks, "attention": attention}
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, repeats=1, warmup=0)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seeds", type=common.int_list, default=[0, 1])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=10)
    parser.add_argument("--vocabulary-size", type=int, default=64)
    parser.add_argument("--peak-learning-rate", type=float, default=2e-3)
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--variants", type=common.str_list, default=None,
                        help="WEIGHTED_VARIANTS names to run (default: all)")
    parser.add_argument("--inits", type=int, default=4,
                        help="initialisations averaged for the initial RMS")
    parser.add_argument("--trained", type=common.str_list, default=None,
                        help="NAME=MODEL.keras,...: measure these trained models' "
                             "residual updates instead of training on the toy task")
    args = parser.parse_args(argv)
    if args.trained:
        run = common.start_run()
        models = dict(item.split("=", 1) for item in args.trained)
        results = {"input": "unit-RMS normal, [8, 16, d], seed 0",
                   "models": trained_updates(models, seed=0)}
        for name, row in results["models"].items():
            print(name, row["blocks"], row["attention"], flush=True)
        print(common.write_results("weighted_trained_updates", results, args.output_dir,
                                   args.smoke, run))
        return
    if args.smoke:
        args.preset, args.seeds, args.steps, args.inits = "tiny", [0], 12, 1

    from keras_attn_zoo.models.weighted_transformer import WEIGHTED_VARIANTS

    run = common.start_run()
    results = {"preset": args.preset, "seeds": args.seeds, "steps": args.steps,
               "task": f"toy reversal, {args.length} tokens, vocabulary "
                       f"{args.vocabulary_size}, batch {args.batch_size}",
               "optimizer": f"Adam(0.9, 0.98), inverse-sqrt peak "
                            f"{args.peak_learning_rate}, warm-up {args.warmup_steps}",
               "initial_rms": initial_rms(args.preset, args.inits, seed=0),
               "training": {}}
    chosen = args.variants or list(WEIGHTED_VARIANTS)
    contenders = {"transformer": {}, **{name: WEIGHTED_VARIANTS[name] for name in chosen}}
    for seed in args.seeds:
        batches = toy_reversal_batches(args.vocabulary_size, args.batch_size,
                                       args.length, args.steps, seed)
        # One model after the other per seed, in the same order for every seed.
        for name, options in contenders.items():
            row = train_one(name, options, args.preset, args.vocabulary_size,
                            batches, seed, args.peak_learning_rate, args.warmup_steps)
            results["training"].setdefault(name, []).append(row)
            print(name, seed, row["loss_last_10"], row.get("max_abs_kappa_minus_alpha"),
                  flush=True)
    path = common.write_results("weighted_variants", results, args.output_dir,
                                args.smoke, run)
    rows = [{"variant": name,
             "initial_rms": round(results["initial_rms"][
                 "transformer_attention" if name == "transformer" else name]["rms_mean"], 4),
             "final_loss": " / ".join(f"{r['loss_last_10']:.3f}"
                                      for r in results["training"][name]),
             "max|κ-α|": " / ".join(f"{r['max_abs_kappa_minus_alpha']:.4f}"
                                    for r in results["training"][name])
             if name != "transformer" else "-"}
            for name in contenders]
    common.print_table(rows, [("variant", "variant", ""), ("initial_rms", "initial RMS", ""),
                              ("final_loss", "loss, last 10 steps", ""),
                              ("max|κ-α|", "max |κ-α|", "")])
    print(path)


if __name__ == "__main__":
    main()

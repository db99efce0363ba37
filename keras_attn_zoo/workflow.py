"""The train -> evaluate -> export workflow behind `recipes/train_wmt.py`, as phases.

Kept in the package (not in the recipe) so the leaderboard, the benchmarks and
the tests run exactly the code users run. A run is a typed `RunConfig` (the
recipe parses its flags into one) and five phases, as OpenNMT-tf's `Runner`
separates train / evaluate / infer / export:

* `prepare_data(config)`: the corpus and the SentencePiece tokenizer;
* `build(config, tokenizer, strategy)`: the model (with the vocabulary ids it
  adds, `ZooModel.extra_token_count`) and its optimizer;
* `train(...)`: the model's own training data (`ZooModel.training_data`: how
  pairs are prepared and batched, e.g. the eager translator's ε preprocessing
  and aligned stream) through the one `Trainer`;
* `evaluate(...)`: BLEU/chrF on the test split through `Translator`;
* `export(...)`: the SavedModel, the Keras model and `results.json`.

Model options that act during training reach the loop through the model's own
hooks (`training_callbacks`, `wrap_optimizer`, `training_data`), so the
workflow names no model; options that could not act in the run are refused
before training, naming the option.

The low-resource recipe (Sennrich & Zhang, 2019; Araabi & Monz, 2020) is a
set of run options on top of the builders' `dropout`, `attention_dropout`,
`activation_dropout` and `decoder_layer_drop` (`--model-options`):

* `word_dropout`: target and source word dropout on the training batches
  (`data.noise.with_word_dropout`, seeded by the run's seed and the epoch,
  so a resumed run replays the same noise);
* `average_checkpoints`: after training, the mean of the run's last N
  checkpoints goes into the model before evaluation and export;
* `ema_momentum`: the optimizer keeps an exponential moving average of the
  weights (Keras' `use_ema`, its momentum warmed up as in
  `tf.train.ExponentialMovingAverage`), which goes into the model after training.

Averaging and the EMA change only the model that is evaluated and exported:
the run's last checkpoint keeps the raw trained weights (and the EMA in the
optimizer's slots), so rerunning the command resumes training from them.
"""

import dataclasses
import json
import os
import pathlib
import random
import time
from typing import Optional

import keras
import tensorflow as tf

from keras_attn_zoo import data as zoo_data
from keras_attn_zoo.data import noise as zoo_noise
from keras_attn_zoo.data.vocabulary import load_tokenizer
from keras_attn_zoo.data.vocabulary import train_sentencepiece
from keras_attn_zoo.data.vocabulary import vocabulary_size
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.evaluation.scores import best_setting
from keras_attn_zoo.evaluation.scores import corpus_scores
from keras_attn_zoo.evaluation.scores import search_grid
from keras_attn_zoo.models import build_model
from keras_attn_zoo.models import extra_token_count
from keras_attn_zoo.models import parse_model_options
from keras_attn_zoo.optimizers import Adam
from keras_attn_zoo.optimizers import PlateauHalvingSchedule
from keras_attn_zoo.training import InverseSquareRootSchedule
from keras_attn_zoo.training import Trainer
from keras_attn_zoo.training.trainer import resolve_jit_compile
from keras_attn_zoo.training import select_strategy
from keras_attn_zoo.training.averaging import average_checkpoints
from keras_attn_zoo.training.averaging import latest_checkpoints
from keras_attn_zoo.training.callbacks import default_callbacks
from keras_attn_zoo.training.curve import LearningCurve
from keras_attn_zoo.training.curve import curve_text
from keras_attn_zoo.training.curve import training_probes
from keras_attn_zoo.files import write_atomically
from keras_attn_zoo.training.early_stopping import METRICS as EARLY_STOPPING_METRICS
from keras_attn_zoo.training.early_stopping import EarlyStopping
from keras_attn_zoo.training.strategy import is_chief
from keras_attn_zoo.training.seeding import seed_everything
from keras_attn_zoo.runtime import cpu_has_native_bf16

MIXED_PRECISION_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16",
                            "fp16": "mixed_float16"}
# `--mixed-precision auto` (`resolve_mixed_precision`): bf16 where the hardware
# multiplies it natively, float32 elsewhere.
MIXED_PRECISION_SETTINGS = (*MIXED_PRECISION_POLICIES, "auto")
XLA_SETTINGS = {"auto": "auto", "on": True, "off": False}


def join_model_options(*texts):
    """`model_options` strings joined in order; a later `key=value` wins."""
    return ";".join(text.strip(";") for text in texts if text and text.strip(";"))


# Named recipes (`train_wmt.py --recipe`): `RunConfig` values over the defaults,
# compared at convergence on the Ding valid split (issue 31, docs/measurements.md).
# "low-resource" is the low-resource literature's setting for ~16k pairs
# (Sennrich & Zhang 2019; Araabi & Monz 2020): ahead of "default" at convergence,
# but it needs 1.5-3x the steps, so a short budget (`make train`'s 24 minutes)
# keeps "default". Its dropouts are Transformer-family builder options. It
# trains in bf16 where the hardware multiplies bf16 natively ("auto"): on an
# AVX512-BF16/AMX CPU a step took 0.67x float32's time and the converged valid
# BLEU held (7.46 against float32's seeds 6.80-7.03; docs/measurements.md).
_LOW_RESOURCE = {"vocab_size": 4000, "word_dropout": 0.1, "model_options":
                 "dropout=0.3;attention_dropout=0.1;activation_dropout=0.1",
                 "mixed_precision": "auto"}
RECIPES = {
    "default": {},
    "low-resource": _LOW_RESOURCE,
    # The converged run's recipe: low-resource with 3 + 3 layers, ahead of
    # low-resource on three seeds (recipe cell `low-resource-3-layers`), with the
    # weights and search its valid results chose over those seeds: the mean of the
    # 4 best checkpoints, beam 8, length penalty 1.0 (docs/measurements.md).
    "low-resource-3-layers": {
        **_LOW_RESOURCE,
        "model_options": join_model_options(_LOW_RESOURCE["model_options"],
                                            "num_encoder_layers=3;num_decoder_layers=3"),
        "average_checkpoints": 4, "beam_size": 8, "length_penalty": 1.0},
    # The eager translator paper's optimisation (Press & Smith, 2018, after
    # AWD-LSTM): plain SGD from 20, halved when the valid score does not improve
    # (the paper checks every 6,500 updates; here at every early-stopping
    # evaluation). A candidate of that family's grid (issue 33).
    "eager-paper": {"optimizer": "sgd", "learning_rate": 20.0, "warmup_steps": 0,
                    "schedule": "plateau-halving"},
    # RNNsearch's paper's optimisation (Bahdanau et al., 2015, appendix B):
    # Adadelta (rho 0.95, epsilon 1e-6, rate 1) with the gradient's L2 norm
    # rescaled to at most 1, no label smoothing; its minibatches of 80 sentences
    # are about the recipes' 1,500-token batches on Ding. A candidate of that
    # family's grid (issue 33).
    "rnnsearch-paper": {"optimizer": "adadelta", "learning_rate": 1.0, "warmup_steps": 0,
                        "schedule": "constant", "clip_norm": 1.0, "label_smoothing": 0.0},
    # RNNsearch regularised for ~16k pairs: the low-resource recipe's data side
    # (4,000 pieces, word dropout 0.1) with the model's own dropout (embeddings
    # and readout) raised from 0.2 to 0.4. The default recipe's run over-fits:
    # at its best checkpoint teacher-forced loss 0.815 on training pairs against
    # 4.2995 on valid (the Transformer 2.0168 against 3.2198;
    # benchmarks/results/fit_gap-2026-12-07.json). A candidate of that family's
    # grid (issue 33).
    "rnnsearch-low-resource": {"vocab_size": 4000, "word_dropout": 0.1,
                               "model_options": "dropout=0.4"},
    # The RNN families' grids' slower rates (RNNsearch's seed study trains at
    # 5e-4), named so that a family's table cells can take the one chosen.
    "learning-rate-1e-3": {"learning_rate": 1e-3},
    "learning-rate-5e-4": {"learning_rate": 5e-4},
}


@dataclasses.dataclass
class RunConfig:
    """One recipe run; the defaults are `recipes/train_wmt.py`'s (its flags, same names).

    The stop conditions all default to unbounded here; the recipe applies its
    default budget (24 minutes) and the preset's learning-rate schedule when parsing.
    """

    model: str = "transformer"
    preset: str = "small"
    data: str = "ding"
    # With data "ding:all": each example sentence appears this many times in
    # an epoch, each dictionary phrase once (flag: --sentence-repeats).
    sentence_repeats: int = 1
    train_src: Optional[str] = None
    train_tgt: Optional[str] = None
    valid_src: Optional[str] = None
    valid_tgt: Optional[str] = None
    test_src: Optional[str] = None
    test_tgt: Optional[str] = None
    direction: str = "de-en"
    epochs: Optional[int] = None
    max_steps: Optional[int] = None
    time_budget_minutes: Optional[float] = None
    model_options: str = ""
    batch_tokens: int = 1500
    max_length: int = 128
    vocab_size: int = 8000
    learning_rate: float = 1e-3
    warmup_steps: int = 1000
    # "adam" (the recipes', beta 0.9/0.98) or "sgd" (plain, the eager paper's);
    # schedule "inverse-sqrt" or "plateau-halving" (constant after warm-up,
    # halved at each valid evaluation without a gain; needs early stopping).
    optimizer: str = "adam"
    schedule: str = "inverse-sqrt"
    # Rescale the gradients to at most this global L2 norm (None: the model's
    # own rule, e.g. the eager translator's aligned stream clips at 0.25; off
    # for the others). RNNsearch's paper clips at 1 (flag: --clip-norm).
    clip_norm: Optional[float] = None
    label_smoothing: float = 0.1
    strategy: str = "auto"
    mixed_precision: str = "none"
    # XLA-compiled training step on fixed batch shapes: auto (where a GPU is
    # visible), on, off (flag: --xla).
    xla: str = "auto"
    output_dir: Optional[str] = None
    log_dir: Optional[str] = None
    export_dir: Optional[str] = None
    name: Optional[str] = None
    beam_size: int = DEFAULT_BEAM_SIZE
    length_penalty: float = DEFAULT_LENGTH_PENALTY
    eval_limit: Optional[int] = None
    checkpoint_every: int = 500
    eval_every: int = 200
    no_monitoring: bool = False
    # Early stopping on the valid split (`training.early_stopping`): evaluate
    # every `valid_every` steps (0: never; then the last weights are exported),
    # stop after `patience` evaluations without an improvement of
    # `min_improvement` (0: never stop), but not before step `min_steps`;
    # evaluate and export the best weights.
    valid_every: int = 500
    valid_metric: str = "bleu"
    patience: int = 4
    min_improvement: float = 0.0
    min_steps: int = 0
    valid_sentences: Optional[int] = None  # the first N valid pairs; None: all
    valid_beam_size: int = 1
    # The paper's aligned stream, for a model that carries a training state
    # (flag: --eager-aligned-batching).
    aligned_batching: bool = False
    # The eager translator's source padding injection at decoding: "model"
    # (the model's), "valid" (chosen on the valid split) or a number.
    source_padding_injection: str = "model"
    # GNMT length penalties to choose among by `valid_metric` on the valid split (beam
    # `beam_size`) before the test evaluation and the export; empty: `length_penalty`.
    length_penalty_choices: tuple = ()
    seed: int = 0
    # The low-resource recipe (flags of the same names; 0: off).
    word_dropout: float = 0.0
    average_checkpoints: int = 0
    ema_momentum: float = 0.0
    no_export: bool = False
    quiet: bool = False

    @property
    def builder_options(self):
        """The builder arguments of `model_options` (`key=value;...`)."""
        return parse_model_options(self.model_options)

    @property
    def run_name(self):
        data = self.data.replace(":", "-").replace("/", "-")
        return self.name or f"{self.model}-{self.preset}-{data}-{self.direction}"

    @property
    def paths(self):
        """`(output_dir, log_dir, export_base)` of the run."""
        output_dir = pathlib.Path(self.output_dir or pathlib.Path("runs") / self.run_name)
        log_dir = pathlib.Path(self.log_dir or output_dir / "logs")
        export_base = pathlib.Path(
            self.export_dir or pathlib.Path("saved_models") / self.run_name)
        return output_dir, log_dir, export_base


@dataclasses.dataclass
class Corpus:
    """Train/valid/test `(source, target)` pairs and a description of them.

    `train` is a list, or a streaming source (`data.ParallelFiles`,
    `data.TfdsTranslation`) that the pipeline reads from disk each epoch;
    `dropped_empty` counts the empty pairs of the lists (a streamed split's
    are counted by `data.pipeline_stats`).
    """

    train: object
    valid: list
    test: list
    description: str
    dropped_empty: int = 0


# What a run directory's vocabulary and checkpoints depend on. A later session
# resumes the directory only with the same values; its stop conditions and its
# evaluation, early-stopping and export settings may change.
RUN_IDENTITY_FIELDS = (
    "model", "preset", "model_options", "data", "direction", "sentence_repeats",
    "train_src", "train_tgt", "vocab_size", "max_length", "batch_tokens", "learning_rate",
    "warmup_steps", "optimizer", "schedule", "label_smoothing", "mixed_precision", "seed",
    "word_dropout", "ema_momentum", "aligned_batching", "clip_norm")
RUN_IDENTITY_FILE = "run_identity.json"


def run_identity(config):
    """What a run directory's `run_identity.json` holds for `config` (its precision
    as `use_mixed_precision` resolved it when the run started)."""
    identity = {field: getattr(config, field) for field in RUN_IDENTITY_FIELDS}
    identity["model_options"] = config.builder_options  # the order of the pairs is free
    return identity


def open_run_directory(config):
    """Creates the run directory, or checks that the run in it trains this model.

    The first session writes `run_identity.json` (`RUN_IDENTITY_FIELDS`). A
    later command with other values is refused before any work, naming them:
    it would reuse that run's vocabulary and resume its checkpoints. A
    directory written before the file existed is taken as it is. Returns the
    directory.
    """
    output_dir = config.paths[0]
    output_dir.mkdir(parents=True, exist_ok=True)
    identity = run_identity(config)
    path = output_dir / RUN_IDENTITY_FILE
    if not path.exists():
        write_atomically(path, json.dumps(identity, indent=2, sort_keys=True) + "\n")
        return output_dir
    recorded = json.loads(path.read_text(encoding="utf-8"))
    differences = [f"{field} {recorded[field]!r} there, {value!r} now"
                   for field, value in identity.items()
                   if field in recorded and recorded[field] != value]
    if differences:
        raise SystemExit(
            f"{output_dir} holds a run with other settings, which this command would "
            f"resume: {'; '.join(differences)}. Give this run its own --name (or "
            "--output-dir), or delete that directory to start it again.")
    return output_dir


def resolve_mixed_precision(setting):
    """The precision a run trains in: `setting`, with "auto" decided by the hardware.

    "auto" is "bf16" where bfloat16 matmuls run natively: a GPU of compute
    capability 8.0 or more (Ampere onwards), or, with no GPU, a CPU with
    AVX512-BF16 or AMX-BF16 (`runtime.cpu_has_native_bf16`). Elsewhere TensorFlow
    emulates bf16 and it is slower than float32, so "auto" is "none" there.
    """
    if setting != "auto":
        return setting
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [tf.config.experimental.get_device_details(gpu).get(
            "compute_capability", (0, 0)) for gpu in gpus]
        return "bf16" if min(capabilities) >= (8, 0) else "none"
    return "bf16" if cpu_has_native_bf16() else "none"


def use_mixed_precision(config):
    """Sets Keras' global dtype policy for `config` and returns `config` with
    "auto" resolved (the run's identity, results and resume see the precision
    it really trains in)."""
    config = dataclasses.replace(config,
                                 mixed_precision=resolve_mixed_precision(config.mixed_precision))
    keras.mixed_precision.set_global_policy(MIXED_PRECISION_POLICIES[config.mixed_precision])
    return config


def check_run_options(config):
    """Refuses low-resource options that are out of range or that exclude each other."""
    if not 0.0 <= config.word_dropout <= 1.0:
        raise SystemExit(f"--word-dropout must be in [0, 1], got {config.word_dropout}.")
    if config.average_checkpoints < 0:
        raise SystemExit(f"--average-checkpoints must be >= 0 (0: off), got "
                         f"{config.average_checkpoints}.")
    if not 0.0 <= config.ema_momentum < 1.0:
        raise SystemExit(f"--ema-momentum must be in [0, 1) (0: off), got "
                         f"{config.ema_momentum}.")
    if config.mixed_precision not in MIXED_PRECISION_SETTINGS:
        raise SystemExit(f"--mixed-precision must be one of {list(MIXED_PRECISION_SETTINGS)}, "
                         f"got {config.mixed_precision!r}.")
    if config.xla not in XLA_SETTINGS:
        raise SystemExit(f"--xla must be one of {sorted(XLA_SETTINGS)}, got {config.xla!r}.")
    if config.ema_momentum and config.average_checkpoints:
        raise SystemExit("--ema-momentum and --average-checkpoints both replace the "
                         "trained weights by an average; choose one.")
    if config.clip_norm is not None and not config.clip_norm > 0:
        raise SystemExit(f"--clip-norm must be > 0, got {config.clip_norm}.")
    if config.valid_every < 0 or config.patience < 0 or config.min_steps < 0:
        raise SystemExit(f"--valid-every, --patience and --min-steps must be >= 0 (0: off), "
                         f"got {config.valid_every}, {config.patience} and "
                         f"{config.min_steps}.")
    injection = str(config.source_padding_injection)
    if injection not in ("model", "valid") and not (injection.isdigit()):
        raise SystemExit(f"--source-padding-injection must be model, valid or a number "
                         f">= 0, got {config.source_padding_injection!r}.")
    if injection != "model" and config.model != "eager_translator":
        raise SystemExit("--source-padding-injection applies to --model eager_translator "
                         f"only, not {config.model!r}.")
    if config.valid_metric not in EARLY_STOPPING_METRICS:
        raise SystemExit(f"--valid-metric must be one of {EARLY_STOPPING_METRICS}, got "
                         f"{config.valid_metric!r}.")
    if config.sentence_repeats < 1:
        raise SystemExit(f"--sentence-repeats must be >= 1, got {config.sentence_repeats}.")
    if config.sentence_repeats > 1 and config.data != "ding:all":
        raise SystemExit(f"--sentence-repeats weighs the example sentences against the "
                         f"dictionary phrases of --data ding:all; --data {config.data} "
                         "has no phrases.")
    if config.valid_sentences is not None and config.valid_sentences < 1:
        raise SystemExit(f"--valid-sentences must be >= 1, got {config.valid_sentences}.")
    if any(value < 0 for value in config.length_penalty_choices):
        raise SystemExit(f"--length-penalty-choices must be >= 0, got "
                         f"{list(config.length_penalty_choices)}.")
    if config.length_penalty_choices and config.beam_size < 2:
        raise SystemExit("--length-penalty-choices needs --beam-size >= 2: greedy search "
                         "has no length penalty.")
    normalization = config.builder_options.get("length_normalization", "gnmt")
    if config.length_penalty_choices and normalization != "gnmt":
        raise SystemExit(f"--length-penalty-choices: length_normalization={normalization!r} "
                         "ranks hypotheses without the GNMT length penalty; leave the flag "
                         "out or use length_normalization=gnmt.")


def check_checkpoints_to_average(config):
    """Refuses `average_checkpoints` above what the run can have, before training.

    At most: the checkpoints already in the run's directory, one every
    `checkpoint_every` steps up to `max_steps`, and the last one; or, where
    early stopping runs (`valid_every`), its evaluations up to `max_steps`,
    whose best it averages. (Whether the data has a valid split is known only
    once it is read, so the larger bound is taken; `final_weights` checks what
    the run has after training, and runs stopped by time or epochs are checked
    there too.)
    """
    wanted = config.average_checkpoints
    if not wanted:
        return
    every, evaluate_every, steps = (config.checkpoint_every, config.valid_every,
                                    config.max_steps)
    if steps is None and (every or evaluate_every):
        return  # unbounded until training ends: `final_weights` checks then
    directory = config.paths[0] / "checkpoints"
    state = tf.train.get_checkpoint_state(str(directory)) if directory.exists() else None
    existing = len(state.all_model_checkpoint_paths) if state else 0
    saved = existing + (steps // every if every else 0) + 1
    evaluations = steps // evaluate_every if evaluate_every else 0
    if wanted > max(saved, evaluations):
        bounds = [f"{saved} checkpoint(s) ({existing} in {directory}"
                  + (f", one every --checkpoint-every {every} steps up to --max-steps "
                     f"{steps}" if every else "") + ", and the last)"]
        if evaluations:
            bounds.append(f"{evaluations} early-stopping evaluation(s), one every "
                          f"--valid-every {evaluate_every}")
        raise SystemExit(
            f"--average-checkpoints {wanted}: this run can have at most "
            + " or ".join(bounds) + "; lower N, or checkpoint or evaluate more often.")


# ---- prepare data ---------------------------------------------------------------------------


def _file_list(paths):
    """`a.de,b.de` -> `["a.de", "b.de"]`: a training side may be several files."""
    return [path.strip() for path in paths.split(",") if path.strip()]


def load_corpus(config):
    """Resolves the config's `data` (and the file paths) into a `Corpus`.

    The training split of files and TFDS data sets streams from disk
    (`data.open_parallel_files`, `data.open_tfds_translation`: checked, not
    loaded); valid and test splits, and the Ding corpus, are lists in memory.
    """
    if config.data == "files":
        if config.train_src is None or config.train_tgt is None:
            raise SystemExit("--data files needs --train-src and --train-tgt.")
        train = zoo_data.open_parallel_files(_file_list(config.train_src),
                                             _file_list(config.train_tgt))
        files = {"valid": (config.valid_src, config.valid_tgt),
                 "test": (config.test_src, config.test_tgt)}
        splits, dropped = {}, 0
        for split, (src, tgt) in files.items():
            if src is None or tgt is None:
                splits[split] = []
                continue
            splits[split], n_dropped = zoo_data.read_parallel_files(src, tgt)
            dropped += n_dropped
        return Corpus(train, splits["valid"], splits["test"],
                      f"files:{config.train_src}", dropped)
    if config.data in ("ding", "ding:all"):
        # Evaluation is always on whole sentences. "ding" trains on them too:
        # a 24-minute CPU budget sees each sentence a few times, while the
        # 320,000 dictionary phrases of "ding:all" need hours to pay off.
        kind = "sentences" if config.data == "ding" else "all"
        train = zoo_data.load_pairs(f"ding:{kind}", "train", config.direction)
        if config.sentence_repeats > 1:
            # The sentences are 5% of ding:all's pairs and 15% of its target words.
            # The extra copies are spread through the list (seeded), as the
            # pipeline shuffles within a window of at most 200,000 pairs.
            sentences = zoo_data.load_pairs("ding:sentences", "train", config.direction)
            train = train + sentences * (config.sentence_repeats - 1)
            random.Random(config.seed).shuffle(train)
            kind = f"all, sentences x{config.sentence_repeats}"
        valid = zoo_data.load_pairs("ding:sentences", "valid", config.direction)
        test = zoo_data.load_pairs("ding:sentences", "test", config.direction)
        return Corpus(train, valid, test, f"ding (train: {kind}, eval: sentences)")
    spec = zoo_data.parse_data_spec(config.data)
    if spec.corpus == "tfds":
        train = zoo_data.open_tfds_translation(spec.name, "train", config.direction)
    else:
        train = zoo_data.load_pairs(spec, "train", config.direction)
    splits = {split: zoo_data.load_pairs(spec, split, config.direction)
              for split in ("valid", "test")}
    return Corpus(train, splits["valid"], splits["test"], str(spec))


# A streamed training split's vocabulary trains on a sample of 100,000 texts (about
# 50,000 of each side), the lists on up to `DEFAULT_MAX_SENTENCES` (2,000,000) as before.
# SentencePiece's training was most of a fresh run's time to its first step, and grows
# with the sample: on ding:all, 8,000 pieces, 11.5 CPU seconds at 100,000 texts and 31.2
# at 300,000, for 5.70 and 5.56 pieces per test text (2.4% more pieces at 100,000;
# benchmarks/results/streaming_data-vocabulary-2026-11-25.json, docs/data.md). Its
# trainer also holds about 2 KB per text.
STREAMED_VOCABULARY_SAMPLE = 100_000


def prepare_data(config):
    """The corpus and the run's SentencePiece tokenizer (trained once, then reused).

    The vocabulary trains on a seeded sample of the training split drawn in
    one pass (`train_sentencepiece`'s reservoir), so a streamed split is read
    once for it and never held.
    """
    corpus = load_corpus(config)
    # A streamed split is not counted before training (`data.pipeline_stats` counts it).
    train = (f"{len(corpus.train)} train" if isinstance(corpus.train, list)
             else "train streamed from disk")
    print(f"data: {corpus.description}: {train}, "
          f"{len(corpus.valid)} valid, {len(corpus.test)} test pairs"
          + (f"; {corpus.dropped_empty} empty pairs dropped" if corpus.dropped_empty else ""))
    path = config.paths[0] / "vocab.model"
    if not path.exists():
        sample = {} if isinstance(corpus.train, list) else {
            "max_sentences": STREAMED_VOCABULARY_SAMPLE}
        train_sentencepiece(corpus.train, path, vocab_size=config.vocab_size, **sample)
    return corpus, load_tokenizer(path)


# ---- build ----------------------------------------------------------------------------------


def build_for_vocabulary(config, pieces):
    """The config's model for a tokenizer of `pieces` ids, plus the ids it adds,
    built once: the builder says how many it adds (`models.extra_token_count`)."""
    extra = extra_token_count(config.model)
    model = build_model(config.model, pieces + extra, preset=config.preset,
                        **config.builder_options)
    if model.extra_token_count != extra:
        raise ValueError(f"{config.model} built a model that adds {model.extra_token_count} "
                         f"ids to the tokenizer's, but its builder says {extra}.")
    return model


OPTIMIZERS = ("adam", "sgd", "adadelta")
SCHEDULES = ("inverse-sqrt", "plateau-halving", "constant")


def make_optimizer(config, ema):
    """The run's optimizer and learning-rate schedule (`optimizer`, `schedule`)."""
    if config.schedule == "plateau-halving":
        if not config.valid_every:
            raise SystemExit("--schedule plateau-halving halves the rate at the valid "
                             "evaluations: it needs early stopping (--valid-every >= 1).")
        schedule = PlateauHalvingSchedule(config.learning_rate, config.warmup_steps)
    elif config.schedule == "constant":  # warm-up, then never halved
        schedule = PlateauHalvingSchedule(config.learning_rate, config.warmup_steps, factor=1.0)
    elif config.schedule == "inverse-sqrt":
        schedule = InverseSquareRootSchedule(config.learning_rate, config.warmup_steps)
    else:
        raise SystemExit(f"--schedule must be one of {SCHEDULES}, got {config.schedule!r}.")
    if config.optimizer == "sgd":
        return keras.optimizers.SGD(schedule, **ema)
    if config.optimizer == "adadelta":  # Zeiler (2012) as RNNsearch's paper sets it
        return keras.optimizers.Adadelta(schedule, rho=0.95, epsilon=1e-6, **ema)
    if config.optimizer != "adam":
        raise SystemExit(f"--optimizer must be one of {OPTIMIZERS}, got {config.optimizer!r}.")
    return Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=None, **ema)


def build(config, tokenizer, strategy):
    """The model and its optimizer, in `strategy`'s scope.

    With `ema_momentum` the optimizer (also as the model's `wrap_optimizer`
    returns it) keeps the weights' moving average (Keras' `use_ema`, with the
    momentum warmed up: `keras_attn_zoo.optimizers.MovingAverageWarmup`).

    The model first: its options shape the data (length limit, eager special
    tokens) and the optimizer, and a bad option fails before any data work.
    """
    ema = dict(use_ema=True, ema_momentum=config.ema_momentum) if config.ema_momentum else {}
    with strategy.scope():
        model = build_for_vocabulary(config, vocabulary_size(tokenizer))
        optimizer = model.wrap_optimizer(make_optimizer(config, ema))
        if config.mixed_precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    print(f"model: {config.model} preset {config.preset}, {model.count_params():,} parameters")
    return model, optimizer


# ---- train ----------------------------------------------------------------------------------


WORD_DROPOUT_KEYS = ("source_ids", "target_ids")


def with_word_dropout(config, make_dataset):
    """`make_dataset` with the run's word dropout on the source and decoder input ids.

    Epoch `e`'s noise is seeded by `(config.seed, e)` and drawn per batch
    before the `Trainer` skips the batches a resumed epoch has seen, so a
    resumed run sees the noise it would have seen. Labels are untouched.
    """
    if not config.word_dropout:
        return make_dataset

    def noisy(epoch):
        dataset = make_dataset(epoch)
        features = dataset.element_spec[0]
        missing = [key for key in WORD_DROPOUT_KEYS
                   if not isinstance(features, dict) or key not in features]
        if missing:
            raise ValueError(f"--word-dropout acts on the features {WORD_DROPOUT_KEYS}; "
                             f"{config.model}'s training batches lack {missing}.")
        return zoo_noise.with_word_dropout(dataset, config.word_dropout, seed=config.seed,
                                           keys=WORD_DROPOUT_KEYS, epoch=epoch)

    return noisy


def trainer_xla(config):
    """Whether the run's training step is XLA-compiled (`config.xla` resolved)."""
    return resolve_jit_compile(XLA_SETTINGS[config.xla])


def run_translator(config, model, tokenizer):
    """The run's one `Translator` of `model`: the dev monitor, early stopping, the
    test split's evaluation and the export search with it (the weights they see
    are the model's at the time; `beam_size`/`length_penalty` of the config are
    its defaults, early stopping passes its own beam)."""
    from keras_attn_zoo.inference import Translator

    return Translator(model, tokenizer, beam_size=config.beam_size,
                      length_penalty=config.length_penalty)


def default_monitors(config, model, tokenizer, valid, dev_translation=True,
                     translator=None):
    """The run's monitoring callbacks on the `valid` pairs (none with `no_monitoring`).

    `dev_translation=False` leaves out the dev BLEU monitor (early stopping
    evaluates the valid split itself); `translator`: the run's (None: the dev
    monitor builds one)."""
    if config.no_monitoring:
        return []
    monitors = default_callbacks(model, tokenizer, valid, every=config.eval_every,
                                 beam_size=config.beam_size,
                                 length_penalty=config.length_penalty,
                                 dev_translation=dev_translation, translator=translator)
    # The model's own measurements (e.g. the eager translator's source-use
    # probe), at the valid split's pace.
    return monitors + model.monitoring_callbacks(
        tokenizer, valid, config.paths[0], every=config.valid_every or config.eval_every)


def early_stopping(config, model, tokenizer, valid, translator=None, keep_best=None):
    """The run's `EarlyStopping` callback, or None (`valid_every=0`, or no valid pairs:
    then the last weights are evaluated and exported, and the run says so).

    It keeps the checkpoints of the `average_checkpoints` best evaluations (at
    least one), or of the `keep_best` best when that is more (the recipe table
    also scores the mean of the best few)."""
    if not config.valid_every:
        return None
    if not valid:
        print("early stopping: off, the data has no valid split (--valid-src/--valid-tgt "
              "for --data files); the last weights are evaluated and exported")
        return None
    return EarlyStopping(
        model, tokenizer, valid, config.paths[0], every=config.valid_every,
        metric=config.valid_metric, patience=config.patience,
        min_improvement=config.min_improvement, min_steps=config.min_steps,
        max_sentences=config.valid_sentences, beam_size=config.valid_beam_size,
        length_penalty=config.length_penalty,
        keep_best=max(1, config.average_checkpoints, keep_best or 0), translator=translator)


def train(config, model, optimizer, strategy, corpus, tokenizer, monitors=None):
    """Trains on the model's own training data; returns `(summary, training_data)`.

    `word_dropout` noises the batches (see `with_word_dropout`); the `Trainer`
    keeps at least `average_checkpoints` checkpoints. `monitors`: the
    callbacks after the model's own (default: `default_monitors`); a caller
    that passes them can read them after training (e.g. the dev monitor's
    learning curve).
    """
    output_dir, log_dir, _ = config.paths
    if config.aligned_batching and model.initial_training_state(1) is None:
        raise SystemExit(f"--eager-aligned-batching needs a model that carries a training "
                         f"state from batch to batch; {config.model} does not.")
    if config.word_dropout and model.extra_token_count:
        raise SystemExit(
            f"--word-dropout would turn {config.model}'s own {model.extra_token_count} "
            "special ids (beyond the tokenizer's pieces) in its inputs into UNK; it "
            "works only for models whose inputs are the tokenizer's pieces.")
    jit_compile = trainer_xla(config)
    try:
        training_data = model.training_data(
            corpus.train, tokenizer, batch_tokens=config.batch_tokens,
            max_length=config.max_length, seed=config.seed, work_dir=output_dir,
            aligned_batching=config.aligned_batching, fixed_shapes=jit_compile)
    except ValueError as error:  # the model's refusal, said as the recipe's
        raise SystemExit(str(error)) from error
    if monitors is None:
        monitors = default_monitors(config, model, tokenizer, corpus.valid)
    trainer = Trainer(
        model, optimizer, strategy,
        label_smoothing=config.label_smoothing,
        checkpoint_dir=str(output_dir / "checkpoints"),
        log_dir=str(log_dir),
        checkpoint_every=config.checkpoint_every,
        keep_checkpoints=max(3, config.average_checkpoints),
        # The model's own callbacks first: monitors then see this step's state.
        callbacks=model.training_callbacks() + monitors,
        carry_state=training_data.carry_state,
        clip_norm=config.clip_norm if config.clip_norm is not None else training_data.clip_norm,
        jit_compile=jit_compile,
    )
    budget = (None if config.time_budget_minutes is None
              else config.time_budget_minutes * 60)
    summary = trainer.train(
        with_word_dropout(config, training_data.make_dataset),
        epochs=config.epochs, max_steps=config.max_steps,
        time_budget_seconds=budget, verbose=0 if config.quiet else 1,
    )
    if summary.final_loss is None:
        print(f"nothing left to train: the run ended at step {summary.steps} "
              f"({summary.stop_reason})")
    else:
        print(f"trained {summary.steps} steps in {summary.train_seconds:.0f} s "
              f"({summary.target_tokens_per_second:.0f} target tokens/s)")
    return summary, training_data


def training_rate(summary):
    """Target tokens a second of the `train` call, to 0.1; None if it trained no step."""
    rate = summary.target_tokens_per_second
    return None if rate is None else round(rate, 1)


# ---- the weights to evaluate and export ----------------------------------------------------


def final_weights(config, model, optimizer, stopper=None):
    """Puts the weights to evaluate in `model` (after training); returns results entries.

    With early stopping (`stopper`, an `EarlyStopping` that evaluated at least
    once): the best evaluation's weights, or with `average_checkpoints=N` the
    mean of the N best evaluations' (with `ema_momentum` the best checkpoints
    hold the moving average already). Otherwise:

    `average_checkpoints=N`: the mean of the run's last N checkpoints (the
    `Trainer` kept them); `ema_momentum`: the optimizer's moving average
    (`optimizer.finalize_variable_values`; Keras averages each weight after
    the update and before its constraint, so constrained weights, the
    Weighted Transformer's κ/α, are projected once more after it). The
    checkpoints on disk are left as they are, so the run's last checkpoint
    keeps the raw trained weights.
    """
    if stopper is not None and stopper.kept:
        count = max(1, config.average_checkpoints)
        try:
            steps = stopper.restore_best(model, count)
        except ValueError as error:
            raise SystemExit(f"--average-checkpoints {count} with early stopping: "
                             f"{error} The trained model is saved: rerun with a smaller "
                             "N.") from error
        what = "moving average" if config.ema_momentum else "weights"
        print(f"{what} of the best valid {stopper.metric} "
              + (f"(step {steps[0]})" if count == 1 else
                 f"(the mean of the {count} best, steps {', '.join(map(str, steps))})"))
        return {"averaged_checkpoints": count if count > 1 else 0,
                "evaluated_steps": steps}
    if config.average_checkpoints:
        directory = config.paths[0] / "checkpoints"
        available = latest_checkpoints(directory, config.average_checkpoints)
        if len(available) < config.average_checkpoints:
            raise SystemExit(
                f"--average-checkpoints {config.average_checkpoints}: the run has only "
                f"{len(available)} checkpoint(s) in {directory} (one every "
                f"--checkpoint-every {config.checkpoint_every} steps, and the last). "
                "The trained model is saved: rerun with a smaller N, or train longer "
                "or with a smaller --checkpoint-every.")
        count = average_checkpoints(model, available)
        print(f"averaged the last {count} checkpoints: "
              + ", ".join(os.path.basename(path) for path in available))
        return {"averaged_checkpoints": count}
    if config.ema_momentum:
        optimizer.finalize_variable_values(model.trainable_variables)
        # Keras updates the average before it applies the variables'
        # constraints, so a constrained weight's average (the Weighted
        # Transformer's κ/α, on the simplex) is projected here once more.
        for variable in model.trainable_variables:
            if variable.constraint is not None:
                variable.assign(variable.constraint(variable))
        print(f"weights: the exponential moving average (momentum {config.ema_momentum})")
        return {}
    return {}


# ---- evaluate -------------------------------------------------------------------------------


def choose_decoding(config, translator, valid):
    """Sets the decoding choices of the run's `translator` before the test evaluation
    and the export; returns their results entries.

    The eager translator's source padding injection (`--source-padding-injection`):
    "valid" picks the value with the best `valid_metric` (BLEU, or chrF for the
    families whose greedy BLEU is too low to rank by) on the valid split's first
    `valid_sentences` pairs (`evaluation.source_padding.choose_source_padding_injection`,
    the paper's choice on the development set) with the test evaluation's search, and
    the `translator` is retraced for the rules it ends with. Then the GNMT length
    penalty, where `length_penalty_choices` are given: the one with the best
    `valid_metric` on the same pairs at beam `beam_size` (the other metric breaks
    ties) becomes the translator's.
    """
    results = _choose_source_padding_injection(config, translator, valid)
    results.update(_choose_length_penalty(config, translator, valid))
    return results


def _valid_pairs_to_choose_on(config, valid, flag):
    if not valid:
        raise SystemExit(f"{flag} chooses on the valid split, and the data has none.")
    return valid[: config.valid_sentences] if config.valid_sentences else valid


def _choose_source_padding_injection(config, translator, valid):
    setting = str(config.source_padding_injection)
    if setting == "model":
        return {}
    if setting != "valid":
        translator.model.set_decoding(source_padding_injection=int(setting))
        translator.retrace()
        return {"source_padding_injection": {"chosen": int(setting), "by": "flag"}}
    from keras_attn_zoo.evaluation.source_padding import choose_source_padding_injection

    pairs = _valid_pairs_to_choose_on(config, valid, "--source-padding-injection valid")
    started = time.monotonic()
    choice = choose_source_padding_injection(translator, pairs,
                                             beam_size=config.beam_size,
                                             length_penalty=config.length_penalty,
                                             metric=config.valid_metric)
    print(f"source padding injection: {choice['chosen']} (best valid {config.valid_metric} on "
          f"{len(pairs)} pairs of {sorted(choice['by_value'])})")
    return {"source_padding_injection": {**choice, "by": "valid", "valid_pairs": len(pairs),
                                         "seconds": round(time.monotonic() - started, 1)}}


def _choose_length_penalty(config, translator, valid):
    choices = [float(value) for value in config.length_penalty_choices]
    if not choices:
        return {}
    # A model whose builder ranks by another rule by default (the eager
    # translator: the reference's average log-prob) has no penalty to choose; an
    # explicit length_normalization was refused before training (check_run_options).
    normalization = getattr(translator.model, "length_normalization", "gnmt")
    if normalization != "gnmt":
        print(f"length penalty: not chosen, the model ranks hypotheses by "
              f"length_normalization={normalization!r}")
        return {"length_penalty_choice": {"chosen": None, "by": "not applicable",
                                          "length_normalization": normalization}}
    pairs = _valid_pairs_to_choose_on(config, valid, "--length-penalty-choices")
    started = time.monotonic()
    rows = search_grid(translator, pairs, [translator.beam_size], choices)
    metric = config.valid_metric
    chosen = best_setting(rows, metric)["length_penalty"]
    translator.set_length_penalty(chosen)
    print(f"length penalty: {chosen} (best valid {metric} on {len(pairs)} pairs at beam "
          f"{translator.beam_size}: " + ", ".join(
              f"{row['length_penalty']} -> {row[metric]}" for row in rows) + ")")
    return {"length_penalty_choice": {
        "chosen": chosen, "by": "valid", "metric": metric, "valid_pairs": len(pairs),
        "rows": rows,
        "seconds": round(time.monotonic() - started, 1)}}


def evaluate(config, translator, test, split="test"):
    """BLEU/chrF and decoding speed on the `test` pairs (`{}` when there are none).

    `translator`: the run's (`run_translator`), searching with its defaults;
    `split`: what the pairs are, for the printed line and the `<split>_pairs`
    entry (`recipes/recipe_experiments.py` scores the valid split).
    """
    if config.eval_limit is not None:
        test = test[: config.eval_limit]
    if not test:
        return {}
    started = time.monotonic()
    hypotheses = translator.translate_texts([s for s, _ in test])
    seconds = time.monotonic() - started
    results = corpus_scores(hypotheses, [t for _, t in test])
    results.update(
        **{f"{split}_pairs": len(test)},
        beam_size=translator.beam_size,
        length_penalty=translator.length_penalty,
        decode_seconds=round(seconds, 1),
        decode_sentences_per_second=round(len(test) / max(seconds, 1e-9), 2),
        examples=[{"source": s, "reference": t, "translation": h}
                  for (s, t), h in list(zip(test, hypotheses))[:5]],
    )
    print(f"{split}: BLEU {results['bleu']} chrF {results['chrf']} on {len(test)} "
          f"sentences ({results['sacrebleu_signature']})")
    return results


# ---- export ---------------------------------------------------------------------------------


def export(config, translator, results):
    """The SavedModel (unless `no_export`), the Keras model and `results.json`.

    `translator`: the run's (`run_translator`): the SavedModel is it, with the
    search its evaluations traced; the Keras model is its model."""
    from keras_attn_zoo.export import export_saved_model

    output_dir, _, export_base = config.paths
    model = translator.model
    if not config.no_export:
        card = {k: results.get(k) for k in (
            "model", "preset", "model_options", "data", "direction", "bleu", "chrf",
            "sacrebleu_signature", "params")}
        path = export_saved_model(translator, export_base, name=config.run_name,
                                  model_card=card)
        results["export_path"] = str(path)
    # The Keras model too: per-layer analyses (recipes/analyze.py --keras-model)
    # need every layer, the SavedModel keeps one alignment. Saved under a
    # temporary name and renamed, like the export.
    keras_path = output_dir / "model.keras"
    model.save(output_dir / "model.tmp.keras")
    os.replace(output_dir / "model.tmp.keras", keras_path)
    results["keras_model_path"] = str(keras_path)
    write_atomically(output_dir / "results.json",
                     json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results


def learning_curve_outputs(config, points, stopper=None):
    """Prints the dev learning curve and draws it (`learning_curve.png` in the run
    directory, BLEU and chrF, the best step marked); returns the results entries."""
    if not points:
        return {"learning_curve": []}
    from keras_attn_zoo.evaluation.plots import plot_run_curve

    if stopper is not None:
        search = "greedy" if stopper.beam_size == 1 else f"beam {stopper.beam_size}"
        what = f"{len(stopper.pairs)} valid sentences, {search}"
    else:
        what = f"first 100 valid sentences, beam {config.beam_size}"
    print(curve_text(points, what))
    best = stopper.best_step if stopper is not None else None
    path = plot_run_curve(points, config.paths[0] / "learning_curve.png", best_step=best,
                          metric=stopper.metric if stopper is not None else None,
                          title=f"{config.run_name}: dev scores ({what})")
    return {"learning_curve": points, "learning_curve_png": str(path)}


# ---- the run --------------------------------------------------------------------------------


def training_run(config, machine=None):
    """Runs the phases for a `RunConfig`; returns the results.

    `machine`: entries about the machine (its measured speed) kept in the
    results; the load average after training and at the end are added.
    """
    check_run_options(config)
    check_checkpoints_to_average(config)
    config = use_mixed_precision(config)
    output_dir, log_dir, _ = config.paths
    open_run_directory(config)
    seed_everything(config.seed)

    corpus, tokenizer = prepare_data(config)
    strategy = select_strategy(config.strategy)
    model, optimizer = build(config, tokenizer, strategy)
    # One inference object for the run: every evaluation and the export search
    # through it, tracing its functions once.
    translator = run_translator(config, model, tokenizer)
    stopper = early_stopping(config, model, tokenizer, corpus.valid, translator)
    monitors = ([stopper] if stopper else []) + default_monitors(
        config, model, tokenizer, corpus.valid, dev_translation=stopper is None,
        translator=translator)
    curve = None
    if is_chief(strategy) and monitors:
        curve = LearningCurve(monitors, output_dir, config.checkpoint_every)
        monitors = monitors + [curve]
        curve.begin()
    summary, training_data = train(config, model, optimizer, strategy, corpus, tokenizer,
                                   monitors=monitors)
    # A resumed run's `train_seconds` are this session's; the curve's clock
    # counts every session (data preparation and dev evaluations included).
    clock = curve.finish(summary.steps) if curve is not None else None
    machine = dict(machine or {}, load_average_after_training=load_average())

    results = {
        "model": config.model,
        "preset": config.preset,
        "model_options": config.builder_options,
        "data": corpus.description,
        "direction": config.direction,
        "params": model.count_params(),
        "steps": summary.steps,
        "xla": trainer_xla(config),
        "epochs_completed": summary.epochs_completed,
        "train_seconds": round(summary.train_seconds, 1),
        "train_target_tokens_per_second": training_rate(summary),
        "final_loss": summary.final_loss,
        "stop_reason": summary.stop_reason,
        "resumed_from_step": summary.resumed_from_step,
        "training_clock_seconds": round(clock["seconds"], 1) if clock else None,
        "pairs_dropped_too_long": training_data.dropped_too_long,
        "log_dir": str(log_dir),
        "export_path": None,
        "results_path": str(output_dir / "results.json"),
        "sentence_repeats": config.sentence_repeats,
        "word_dropout": config.word_dropout,
        "averaged_checkpoints": 0,
        "ema_momentum": config.ema_momentum,
        "mixed_precision": config.mixed_precision,  # "auto" resolved
        "training_probes": training_probes(output_dir),
        **training_data.info,
    }
    if not is_chief(strategy):
        return results
    if stopper is not None:
        print(f"stopped: {summary.stop_reason} at step {summary.steps}; best valid "
              f"{stopper.metric} {stopper.best_score} at step {stopper.best_step} "
              f"({len(stopper.evaluations)} evaluations, "
              f"{stopper.evaluations_since_best} since the best)")
        results.update(stopper.summary())
        # This session's evaluation seconds over its training seconds (which
        # include them): the cost of early stopping.
        results["early_stopping"]["session_time_share"] = round(
            stopper.seconds_spent / max(summary.train_seconds, 1e-9), 4)
    if curve is not None:
        results.update(learning_curve_outputs(config, curve.points(), stopper))
    results.update(final_weights(config, model, optimizer, stopper))
    results.update(choose_decoding(config, translator, corpus.valid))
    results.update(evaluate(config, translator, corpus.test))
    results["machine"] = dict(machine, load_average_at_end=load_average())
    return export(config, translator, results)


def load_average():
    """The 1, 5 and 15-minute load averages, rounded."""
    return [round(value, 2) for value in os.getloadavg()]

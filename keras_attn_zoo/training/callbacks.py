"""TensorBoard monitoring while training: dev BLEU, attention images, gates, weights.

Callbacks for `keras_attn_zoo.training.Trainer` (objects with
`on_step_end(trainer, step, logs)`). They write to `trainer.writer` (the
Trainer's TensorBoard writer, which also holds its loss, perplexity, token
accuracy, learning rate and target tokens/s scalars) and run only on the chief
worker: elsewhere they return at once, so no worker pays for them.

`default_callbacks(model, tokenizer, valid_pairs, every=500)` is what
`recipes/train_wmt.py` installs. TensorBoard tags written:

================================  =========  ===============================================
tag                               kind       what
================================  =========  ===============================================
``dev/bleu``, ``dev/chrf``        scalar     sacreBLEU on the first `bleu_sentences` dev
                                             pairs, translated with the exported beam search
                                             (`Translator.translate_texts`)
``dev/translations``              text       a markdown table: source, reference, translation
``attention/cross/sentence_K``    image      teacher-forced cross-attention of fixed dev
                                             sentence K: one panel per decoder layer (rows)
                                             and head (columns); RNNsearch: its alignment
``attention/ran/<slot>``          image      input-independent attention a model's kinds
                                             draw (`models.attention_kinds.attention_images`;
                                             RAN: each layer's softmax(A_l), rows: layers,
                                             columns: heads)
``gmm/gate/layer_L``              histogram  what a model's kinds read off the attention
                                             of the first `gate_sentences` dev pairs
                                             (`models.attention_kinds.monitored_attention`;
                                             GMM: gate values g of decoder layer L over
                                             every head and real target position)
``gmm/gate_mean/layer_L``         scalar     (GMM: their mean)
``weighted/<layer>/kappa``,       histogram  the weights a model's attention kinds want
``weighted/<layer>/alpha``                   watched (`models.attention_kinds.
                                             monitored_weights`; the Weighted Transformer:
                                             κ and α of each branched layer)
``weighted/<layer>/kappa_I``,     scalar     the same per entry I, so trajectories show
``weighted/<layer>/alpha_I``
================================  =========  ===============================================

Every `every` steps (weights: every `trainer.log_every` steps), unless that would
take the dev evaluations and attention images over `max_time_share` of the
wall time (default 5%, see `_Monitor`): then a refresh is postponed to a later
multiple of `every`. Images need
matplotlib (the `dev` extra); without it they are skipped with one warning.
A monitor that fails (for instance a dev sentence a fixed-length model cannot
take) logs the error once and switches itself off: monitoring never ends a
training run, unless `raise_errors=True` (tests).
"""

import logging
import time
import warnings

import numpy as np
import tensorflow as tf

from keras_attn_zoo.data.vocabulary import BOS_ID
from keras_attn_zoo.data.vocabulary import EOS_ID
from keras_attn_zoo.data.vocabulary import sentencepiece_processor
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY

logger = logging.getLogger(__name__)


# ---- shared helpers -------------------------------------------------------------------


def teacher_forcing_batch(processor, pairs):
    """Source ids (pieces + EOS), decoder inputs (BOS + pieces) and the pieces.

    Returns:
        `(source_ids [B, S], target_ids [B, T], source_pieces, target_pieces)`:
        int32 0-padded arrays and per-sentence piece lists (source with
        "</s>" appended; target without EOS), row `t` of the attention
        belonging to target piece `t`.
    """
    sources = [processor.encode_as_ids(s) + [EOS_ID] for s, _ in pairs]
    targets = [[BOS_ID] + processor.encode_as_ids(t) for _, t in pairs]
    source_pieces = [[processor.id_to_piece(i) for i in ids[:-1]] + ["</s>"]
                     for ids in sources]
    target_pieces = [[processor.id_to_piece(i) for i in ids[1:]] for ids in targets]

    def pad(rows):
        width = max([len(r) for r in rows] + [1])
        return np.array([r + [0] * (width - len(r)) for r in rows], "int32")

    return pad(sources), pad(targets), source_pieces, target_pieces


def text_translator(model, tokenizer, beam_size=DEFAULT_BEAM_SIZE,
                    length_penalty=DEFAULT_LENGTH_PENALTY, translator=None):
    """`texts -> translations` with the zoo's exported beam search, for any model.

    `keras_attn_zoo.inference.Translator` applies the model's own hooks (the eager
    translator's decoding rules and clean-up included). `translator`: the run's
    `Translator` of `model`, searching here with `beam_size` and
    `length_penalty` (its traced functions take them as inputs); None: one is
    built.
    """
    if translator is None:
        from keras_attn_zoo.inference import Translator

        translator = Translator(model, tokenizer, beam_size=beam_size,
                                length_penalty=length_penalty)

    def translate(texts, batch_size=32):
        return translator.translate_texts(list(texts), batch_size=batch_size,
                                          beam_size=beam_size, length_penalty=length_penalty)

    translate.translator = translator
    return translate


def fits_model(model, processor, pairs):
    """The pairs whose source (+EOS) and target (+BOS) fit the model's `max_length`
    (its `max_decode_length`)."""
    limit = model.max_decode_length
    if limit is None:
        return list(pairs)
    return [(s, t) for s, t in pairs
            if len(processor.encode_as_ids(s)) + 1 <= limit
            and len(processor.encode_as_ids(t)) + 1 <= limit]


def _markdown_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def translation_table(sources, references, translations):
    """A markdown table (TensorBoard renders it in the Text tab)."""
    lines = ["| # | source | reference | translation |", "|---|---|---|---|"]
    for number, row in enumerate(zip(sources, references, translations), start=1):
        lines.append(f"| {number} | " + " | ".join(_markdown_cell(c) for c in row) + " |")
    return "\n".join(lines)


def _require_matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure, FigureCanvasAgg


def heatmap_grid_image(weights, row_names, column_names, x_labels=None, y_labels=None,
                       title=None, dpi=72):
    """Renders `[rows, columns, T, S]` heat maps as one RGB uint8 image `[H, W, 3]`.

    Returns None when matplotlib is missing.
    """
    classes = _require_matplotlib()
    if classes is None:
        return None
    Figure, FigureCanvasAgg = classes
    weights = np.nan_to_num(np.asarray(weights, np.float32))
    rows, columns, height, width = weights.shape
    cell = 0.16
    panel_w = min(max(1.6, cell * width + 0.9), 8.0)
    panel_h = min(max(1.4, cell * height + 0.7), 8.0)
    figure = Figure(figsize=(panel_w * columns + 0.4, panel_h * rows + 0.6), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    for r in range(rows):
        for c in range(columns):
            axes = figure.add_subplot(rows, columns, r * columns + c + 1)
            axes.imshow(weights[r, c], cmap="Greys", vmin=0.0,
                        vmax=max(float(weights[r, c].max(initial=0.0)), 1e-6),
                        aspect="auto", interpolation="nearest")
            axes.set_title(f"{row_names[r]} {column_names[c]}", fontsize=7)
            if x_labels is not None and len(x_labels) <= 40:
                axes.set_xticks(range(len(x_labels)))
                axes.set_xticklabels(x_labels, rotation=90, fontsize=6)
            else:
                axes.tick_params(labelsize=6)
            if y_labels is not None and len(y_labels) <= 40 and c == 0:
                axes.set_yticks(range(len(y_labels)))
                axes.set_yticklabels(y_labels, fontsize=6)
            elif c:
                axes.set_yticks([])
    if title:
        figure.suptitle(title, fontsize=8)
    figure.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


class _Monitor:
    """Base: runs `_write(trainer, step, logs)` every `every` steps on the chief.

    With `max_time_share` (e.g. 0.05) the monitor keeps its evaluations under
    that share of the wall time: it measures each evaluation (`cost`) and,
    when `every` steps come around, postpones the next one until the wall time
    since the end of the previous one is at least `cost / max_time_share`
    (checked again every `every` steps). The first evaluation runs at the
    first due step: its cost is what the monitor learns from. So, by the
    monitor's own measurements, the seconds of all evaluations but the last
    are at most `max_time_share` times the time between them, and the total
    at most that plus one evaluation. `None`: no limit (every `every` steps).

    Kept for the report: `timings` (one dict per evaluation: `step`,
    `seconds`, `elapsed_seconds` since the monitor's first call), `skipped`
    (the due steps postponed), `seconds_spent` and `time_share()`.
    """

    name = "monitor"

    def __init__(self, every, raise_errors=False, max_time_share=None):
        if max_time_share is not None and not 0.0 < max_time_share <= 1.0:
            raise ValueError(f"max_time_share must be in (0, 1] or None, got "
                             f"{max_time_share}.")
        self.every = every
        self.raise_errors = raise_errors
        self.max_time_share = max_time_share
        self.enabled = True
        self.timings = []
        self.skipped = []
        self._started = None  # monotonic time of the first call
        self._last_end = None  # ... and of the end of the last evaluation

    @property
    def seconds_spent(self):
        """Seconds of every evaluation so far, as the monitor measured them."""
        return sum(entry["seconds"] for entry in self.timings)

    def time_share(self, now=None):
        """`seconds_spent` over the wall time since the monitor's first call."""
        if self._started is None:
            return 0.0
        elapsed = (time.monotonic() if now is None else now) - self._started
        return self.seconds_spent / elapsed if elapsed > 0 else 0.0

    def _due(self, trainer, step):
        every = self.every or getattr(trainer, "log_every", 1) or 1
        return (self.enabled and step % every == 0
                and getattr(trainer, "is_chief", True))

    def _postponed(self, now):
        """Whether the time share forbids an evaluation now."""
        if self.max_time_share is None or not self.timings:
            return False
        wanted = self.timings[-1]["seconds"] / self.max_time_share
        return now - self._last_end < wanted

    def on_step_end(self, trainer, step, logs):
        now = time.monotonic()
        if self._started is None:
            self._started = now
        if not self._due(trainer, step):
            return
        if self._postponed(now):
            self.skipped.append(step)
            return
        try:
            self._write(trainer, step, logs if logs is not None else {})
        except Exception as error:  # noqa: BLE001 - monitoring must not end training
            if self.raise_errors:
                raise
            self.enabled = False
            logger.warning("%s failed at step %d and is switched off (training goes on): "
                           "%s: %s", self.name, step, type(error).__name__, error)
            warnings.warn(f"{self.name} failed at step {step} and is switched off: "
                          f"{type(error).__name__}: {error}")
        finally:
            self._last_end = time.monotonic()
            self.timings.append({"step": step,
                                 "seconds": self._last_end - now,
                                 "elapsed_seconds": self._last_end - self._started})
        self._record_cost(trainer, step, logs if logs is not None else {})

    def _record_cost(self, trainer, step, logs):
        """After an evaluation: report its cost (the dev monitor logs it)."""

    def _write(self, trainer, step, logs):
        raise NotImplementedError


# ---- the monitors -----------------------------------------------------------------------


class DevTranslationMonitor(_Monitor):
    """`dev/bleu`, `dev/chrf` (scalars) and `dev/translations` (text).

    Args:
        model: the model being trained.
        tokenizer: its SentencePiece vocabulary.
        pairs: dev `(source, reference)` pairs; the first `max_sentences`
            that fit the model are translated.
        every: steps between evaluations.
        max_sentences: dev subset size for BLEU/chrF.
        num_examples: translations shown in the text table.
        beam_size: the search's beam (as exported).
        length_penalty: the search's length penalty (as exported).
        max_time_share: the most of the wall time the evaluations may take
            (see `_Monitor`; default 5%); None: every `every` steps.
        translator: the run's `Translator` of `model` to search with (None:
            one is built at the first evaluation).

    `history` holds `(step, bleu, chrf)` per evaluation, `timings` their
    seconds; after each evaluation the logs get `dev_eval_seconds` (its
    cost), `dev_eval_seconds_total` and `dev_evals_skipped` (postponed due
    steps so far), and TensorBoard `dev/eval_seconds` and `dev/time_share`.
    """

    name = "DevTranslationMonitor"

    def __init__(self, model, tokenizer, pairs, every=500, max_sentences=100,
                 num_examples=5, beam_size=DEFAULT_BEAM_SIZE,
                 length_penalty=DEFAULT_LENGTH_PENALTY, raise_errors=False,
                 max_time_share=0.05, translator=None):
        super().__init__(every, raise_errors, max_time_share)
        self.model = model
        self.tokenizer = tokenizer
        self.translator = translator
        processor = sentencepiece_processor(tokenizer)
        self.pairs = fits_model(model, processor, list(pairs)[:4 * max_sentences])[
            :max_sentences]
        self.num_examples = num_examples
        self.beam_size = beam_size
        self.length_penalty = length_penalty
        self._translate = None
        self.history = []

    def _write(self, trainer, step, logs):
        from keras_attn_zoo.evaluation.scores import corpus_scores

        if not self.pairs:
            return
        if self._translate is None:
            self._translate = text_translator(self.model, self.tokenizer, self.beam_size,
                                              self.length_penalty, self.translator)
        sources = [s for s, _ in self.pairs]
        references = [t for _, t in self.pairs]
        translations = self._translate(sources)
        scores = corpus_scores(translations, references)
        shown = slice(0, self.num_examples)
        with trainer.writer.as_default(step=step):
            tf.summary.scalar("dev/bleu", scores["bleu"])
            tf.summary.scalar("dev/chrf", scores["chrf"])
            tf.summary.text("dev/translations", translation_table(
                sources[shown], references[shown], translations[shown]))
        trainer.writer.flush()
        logs["dev_bleu"] = scores["bleu"]
        logs["dev_chrf"] = scores["chrf"]
        self.history.append((step, scores["bleu"], scores["chrf"]))

    def _record_cost(self, trainer, step, logs):
        seconds = self.timings[-1]["seconds"]
        logs["dev_eval_seconds"] = seconds
        logs["dev_eval_seconds_total"] = self.seconds_spent
        logs["dev_evals_skipped"] = len(self.skipped)
        if self.enabled:
            with trainer.writer.as_default(step=step):
                tf.summary.scalar("dev/eval_seconds", seconds)
                tf.summary.scalar("dev/time_share", self.time_share())


class AttentionMonitor(_Monitor):
    """Attention heat maps of fixed dev sentences, the kinds' input-independent
    attention (RAN's matrices) and GMM gates.

    Args:
        model: the model being trained.
        tokenizer: its vocabulary.
        pairs: dev pairs; the first `num_sentences` with at most `max_pieces`
            pieces per side (and fitting the model) are drawn, teacher forced on
            their references.
        every: steps between refreshes.
        gate_sentences: dev pairs whose attention the kinds' monitored values are
            read from (GMM's gate histograms).
        image_positions: positions of the input-independent attention drawn
            (the kinds' `attention_images`, e.g. RAN's matrices).
        max_time_share: the most of the wall time the refreshes may take
            (see `_Monitor`; default 5%: it runs the model on dev sentences
            and draws a matplotlib panel per layer and head); None: every
            `every` steps.
        ran_size: the former name of `image_positions` (deprecated).
    """

    name = "AttentionMonitor"

    def __init__(self, model, tokenizer, pairs, every=500, num_sentences=3, max_pieces=30,
                 gate_sentences=32, image_positions=24, raise_errors=False,
                 max_time_share=0.05, *, ran_size=None):
        super().__init__(every, raise_errors, max_time_share)
        if ran_size is not None:
            warnings.warn("AttentionMonitor(ran_size=...) is now image_positions=...",
                          DeprecationWarning, stacklevel=2)
            image_positions = ran_size
        self.model = model
        pairs = list(pairs or [])
        self.processor = sentencepiece_processor(tokenizer) if pairs else None
        # Only as many dev pairs are tokenized as are needed.
        self.gate_pairs = fits_model(model, self.processor, pairs[:4 * gate_sentences])[
            :gate_sentences] if pairs else []
        self.pairs = []
        for source, target in pairs:
            if len(self.pairs) >= num_sentences:
                break
            if (len(self.processor.encode_as_ids(source)) < max_pieces
                    and len(self.processor.encode_as_ids(target)) < max_pieces
                    and fits_model(model, self.processor, [(source, target)])):
                self.pairs.append((source, target))
        self.image_positions = image_positions
        self._watches_attention = None  # whether the model's kinds read any: at first use
        self._warned = False

    def _image(self, tag, image):
        if image is None:
            if not self._warned:
                warnings.warn("matplotlib is not installed: attention images are skipped "
                              "(pip install matplotlib).")
                self._warned = True
            return
        tf.summary.image(tag, image[None])

    def _write(self, trainer, step, logs):
        from keras_attn_zoo.evaluation.attention import attention_maps
        from keras_attn_zoo.models.attention_kinds import attention_images

        model = self.model
        with trainer.writer.as_default(step=step):
            if self.pairs:
                source, target, source_pieces, target_pieces = teacher_forcing_batch(
                    self.processor, self.pairs)
                maps = attention_maps(model, source, target)
                if maps:
                    cross = maps["cross"]  # [L, B, h, T, S]
                    for k, (src, tgt) in enumerate(zip(source_pieces, target_pieces)):
                        grid = cross[:, k, :, :len(tgt), :len(src)]
                        self._image(f"attention/cross/sentence_{k}", heatmap_grid_image(
                            grid, [f"layer {l}" for l in range(grid.shape[0])],
                            [f"head {h}" for h in range(grid.shape[1])],
                            x_labels=src, y_labels=tgt,
                            title=f"step {step}: {self.pairs[k][0][:80]}"))
            for name, (weights, what) in attention_images(model, self.image_positions).items():
                self._image(f"attention/{name}", heatmap_grid_image(
                    weights, [f"layer {l}" for l in range(weights.shape[0])],
                    [f"head {h}" for h in range(weights.shape[1])],
                    title=f"step {step}: {what}, first {self.image_positions} positions"))
            self._write_gates()
        trainer.writer.flush()

    def _write_gates(self):
        """What the model's kinds read off the attention of the gate pairs (GMM's gates)."""
        from keras_attn_zoo.evaluation.attention import attention_maps
        from keras_attn_zoo.models.attention_kinds import has_kind_hook
        from keras_attn_zoo.models.attention_kinds import monitored_attention

        if self._watches_attention is None:
            self._watches_attention = has_kind_hook(self.model, "monitored_attention")
        if not self.gate_pairs or not self._watches_attention:
            return
        source, target, _, target_pieces = teacher_forcing_batch(self.processor,
                                                                 self.gate_pairs)
        maps = attention_maps(self.model, source, target)
        if not maps:
            return
        batch, rows = np.shape(target)
        real = np.zeros((batch, rows), bool)
        for b, pieces in enumerate(target_pieces):
            real[b, :len(pieces) + 1] = True  # the EOS-predicting row is real too
        for tag, (kind, value) in monitored_attention(self.model, maps, real).items():
            if kind == "histogram":
                tf.summary.histogram(tag, value)
            else:
                tf.summary.scalar(tag, value)


class WeightMonitor(_Monitor):
    """The weights a model's attention kinds want watched (`models.attention_kinds.
    monitored_weights`; the Weighted Transformer's κ and α): a histogram per tag
    and a scalar per entry, `<tag>_I`.

    Args:
        model: the model being trained.
        every: steps between writes (None: the trainer's `log_every`).
    """

    name = "WeightMonitor"

    def __init__(self, model, every=None, raise_errors=False):
        super().__init__(every, raise_errors)
        self.model = model

    def _write(self, trainer, step, logs):
        from keras_attn_zoo.models.attention_kinds import monitored_weights

        with trainer.writer.as_default(step=step):
            for tag, values in monitored_weights(self.model).items():
                vector = np.asarray(values, np.float32)
                tf.summary.histogram(tag, vector)
                for index, value in enumerate(vector):
                    tf.summary.scalar(f"{tag}_{index}", float(value))


def _has_monitored_weights(model):
    from keras_attn_zoo.models.attention_kinds import monitored_weights

    return bool(monitored_weights(model))


def default_callbacks(model, tokenizer, valid_pairs, every=500, bleu_sentences=100,
                      num_examples=5, num_attention_sentences=3,
                      beam_size=DEFAULT_BEAM_SIZE, length_penalty=DEFAULT_LENGTH_PENALTY,
                      raise_errors=False, max_time_share=0.05,
                      dev_translation=True, translator=None):
    """The monitors `recipes/train_wmt.py` installs (see the module docstring).

    Args:
        model: the model being trained.
        tokenizer: its SentencePiece vocabulary (keras-hub tokenizer, path or bytes).
        valid_pairs: dev `(source, reference)` pairs (may be empty: then only
            the monitored weights and the input-independent attention are
            written).
        every: steps between dev evaluations and attention images.
        bleu_sentences: dev pairs translated for BLEU/chrF.
        num_examples: translations in the text table.
        num_attention_sentences: fixed dev sentences drawn as heat maps.
        beam_size: the beam of the search used for dev BLEU.
        length_penalty: the length penalty of that search.
        raise_errors: let a failing monitor raise (tests) instead of switching off.
        max_time_share: the most of the wall time the dev evaluations and the
            attention images may take together (default 5%): the dev monitor
            gets four fifths of it, the attention monitor one fifth (each
            postpones its refresh, see `_Monitor`). None: every `every` steps.
        dev_translation: include the dev BLEU monitor (False when early
            stopping evaluates the valid split itself).
        translator: the run's `Translator` of `model` for the dev BLEU monitor
            (None: it builds one).

    Returns:
        A list of callback objects for `Trainer(callbacks=...)`.
    """
    valid_pairs = list(valid_pairs or [])
    dev_share = attention_share = None
    if max_time_share is not None:
        dev_share, attention_share = 0.8 * max_time_share, 0.2 * max_time_share
    callbacks = []
    if valid_pairs and dev_translation:
        callbacks.append(DevTranslationMonitor(
            model, tokenizer, valid_pairs, every=every, max_sentences=bleu_sentences,
            num_examples=num_examples, beam_size=beam_size, length_penalty=length_penalty,
            raise_errors=raise_errors, max_time_share=dev_share, translator=translator))
    callbacks.append(AttentionMonitor(
        model, tokenizer, valid_pairs, every=every, num_sentences=num_attention_sentences,
        raise_errors=raise_errors, max_time_share=attention_share))
    if _has_monitored_weights(model):
        callbacks.append(WeightMonitor(model, raise_errors=raise_errors))
    return callbacks


__all__ = [
    "AttentionMonitor",
    "DevTranslationMonitor",
    "WeightMonitor",
    "default_callbacks",
    "heatmap_grid_image",
    "teacher_forcing_batch",
    "text_translator",
    "translation_table",
]

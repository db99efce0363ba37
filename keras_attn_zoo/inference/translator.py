"""`Translator`: text in, translations out, with tokenizer and beam search in one graph.

A `Translator` wraps a zoo model (anything implementing the step protocol) and its
SentencePiece vocabulary in a `tf.Module` whose `tf.function`s have fixed input
signatures, so the same object

* translates in Python (`translate_texts`, used by evaluation during training so the
  training BLEU comes from exactly the search that is exported), and
* is what `export_saved_model` saves: its functions become the SavedModel signatures.

A run builds one (`workflow.run_translator`) and passes it to the dev monitor,
early stopping, the test evaluation and the export; `retrace` renews its
traces when the model's decoding rules change.

Signatures (B = batch, S = source tokens including EOS, T = target tokens excluding EOS):

* ``translate(text: string[B])`` with the default beam size and length penalty;
* ``translate_with_options(text, beam_size: int32[], length_penalty: float32[],
  max_length_a: float32[], max_length_b: float32[])``;

  both return ``translation`` string[B], ``score`` float32[B] (the length-penalised
  log-probability; 0 for an empty input), ``alignment`` float32[B, T, S] (the model's
  cross-attention, row t for output piece t, column s for source piece s),
  ``length`` int32[B] (pieces of the translation), ``source_pieces`` string[B, S] and
  ``target_pieces`` string[B, T] (the pieces that label the alignment's axes, ""-padded).
* ``translate_ids(source_ids: int32[B, S], beam_size, length_penalty, max_length_a,
  max_length_b)`` returns ``ids`` int32[B, T], ``lengths`` int32[B], ``scores``
  float32[B], ``alignment`` float32[B, T, S]. Built from core TensorFlow ops only, for
  servers without the tensorflow-text ops: the client tokenizes (pieces, then EOS,
  0-padded) and detokenizes itself.

Input rules (the same in Python and in the exported graph):

* **Undecodable bytes** are replaced, not rejected: the graph first runs
  ``tf.strings.unicode_transcode(..., errors="replace")``, so every invalid UTF-8
  sequence becomes U+FFFD (which the default SentencePiece normaliser turns into a
  word boundary: "the <byte 0xFF> dog" translates like "the dog"). A server
  never fails on bad bytes and the translation stays one output per input. The CLI is
  stricter: it rejects a file with an undecodable line, naming the line.
* **Empty input** (empty, whitespace-only, or anything SentencePiece turns into no
  piece) translates to ``""`` with score 0 and an empty alignment; those rows are not
  sent to the model at all. In ``translate_ids`` a row without a non-zero id is empty.
* **Over-long input**: a sentence with more than ``max_input_length`` tokens (pieces
  plus EOS) raises ``InvalidArgumentError`` naming the sentence, its length and the
  limit. Inputs are never truncated. ``translate_ids`` first drops padding columns
  that are zero in every row, so a client may pad to any fixed width.
* **Output length**: at most ``ceil(a * source_tokens + b)`` pieces, and for a
  fixed-length model (``max_length`` set) at most ``max_length - 1`` (the search
  caps it, then forces EOS).
"""

from __future__ import annotations

import os
import pathlib
import re

import tensorflow as tf

from keras_attn_zoo.data.pipeline import eos_after_pieces
from keras_attn_zoo.data.pipeline import ragged_rows
from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.decoding import beam_search
from keras_attn_zoo.decoding import common
from keras_attn_zoo.decoding import sample_search
from keras_attn_zoo.decoding import score_targets

PAD_ID = common.PAD_ID
DEFAULT_MAX_INPUT_LENGTH = 1024
UNICODE_ERRORS = "replace"  # invalid UTF-8 -> U+FFFD inside the graph
REPLACEMENT_CHARACTER = 0xFFFD

TRANSLATION_OUTPUTS = ("translation", "score", "alignment", "length", "source_pieces",
                       "target_pieces")
_SCALAR_INT = tf.TensorSpec([], tf.int32)
_SCALAR_FLOAT = tf.TensorSpec([], tf.float32)
_TEXT = tf.TensorSpec([None], tf.string, name="text")
_IDS = tf.TensorSpec([None, None], tf.int32, name="source_ids")
# beam_size, length_penalty, max_length_a, max_length_b
_SEARCH_OPTIONS = (_SCALAR_INT, _SCALAR_FLOAT, _SCALAR_FLOAT, _SCALAR_FLOAT)
_N_BEST_OPTIONS = (tf.TensorSpec([], tf.int32, name="num_hypotheses"),
                   tf.TensorSpec([], tf.int32, name="no_repeat_ngram_size"))


def _proto_bytes(tokenizer):
    """The serialized SentencePiece model from a tokenizer, a path or bytes."""
    if isinstance(tokenizer, bytes):
        return tokenizer
    if isinstance(tokenizer, (str, os.PathLike)):
        return pathlib.Path(tokenizer).read_bytes()
    proto = getattr(tokenizer, "proto", None)
    if proto is None:
        raise TypeError(
            "tokenizer must be a keras_hub SentencePieceTokenizer (from "
            "keras_attn_zoo.data.load_tokenizer), a .model path or its bytes; got "
            f"{type(tokenizer).__name__}."
        )
    return bytes(proto)


def model_error_message(error):
    """The export's own message in a graph error (e.g. "Input too long: sentence 0
    has 1501 tokens ..."), not TensorFlow's first line ("Graph execution error:")."""
    text = error.message if isinstance(error, tf.errors.OpError) else str(error)
    for line in (text or "").splitlines():
        line = line.strip()
        # An Assert's message is its data: "assertion failed: [message]".
        match = re.search(r"\[(Input too long:.*?|source_ids must be.*?)\]", line)
        if match:
            return match.group(1)
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(
        ("Graph execution error", "Detected at node", "File ", "["))]
    return (meaningful or lines or [type(error).__name__])[0]


def default_max_input_length(model, limit=DEFAULT_MAX_INPUT_LENGTH):
    """``limit``, or the model's ``max_length`` (its ``max_decode_length``) when that
    is smaller."""
    model_limit = model.max_decode_length
    if model_limit is not None:
        return min(int(limit), int(model_limit))
    return int(limit)


_SENTENCE = re.compile(r"sentence (\d+)(?= has)")


def failing_sentence(message):
    """The row K a model message names ("sentence K has N tokens"), or None."""
    match = _SENTENCE.search(message)
    return int(match.group(1)) if match else None


def rename_sentence(message, name):
    """``message`` with its "sentence K" replaced by ``name`` (e.g. the caller's
    own numbering: a batch row is not what the caller sent)."""
    return _SENTENCE.sub(name, message, count=1)


class Translator(tf.Module):
    """A model and its SentencePiece vocabulary, translating text in one TF graph.

    Args:
        model: a ``ZooModel`` (step protocol: ``encode``, ``initial_state``,
            ``decode_step``); "Model hooks" below are the ones the translator
            reads (their defaults, in ``ZooModel``, give the plain beam search).
        tokenizer: the SentencePiece vocabulary: a keras_hub
            ``SentencePieceTokenizer`` (``keras_attn_zoo.data.load_tokenizer``), a
            ``.model`` path or the model's bytes. It must use the zoo's special ids.
        beam_size: default beam size (``translate``, ``translate_texts``).
        length_penalty: default GNMT alpha.
        max_length_a: ``a`` of the default output limit, at most
            ``ceil(a * source_tokens + b)`` pieces per sentence.
        max_length_b: ``b`` of that limit.
        max_input_length: longest accepted source in tokens (pieces + EOS);
            default 1024 or the model's ``max_length`` if smaller. Longer inputs are
            an error, never truncated.

    Model hooks (besides ``zoo_config``'s ``vocabulary_size`` and ``max_length``,
    and ``max_decode_length``, which caps ``score``'s targets):

    * ``logits_processor``: None, or passed to every search as its
      ``logits_processor`` (model-specific decoding rules).
    * ``length_normalization``: ``"gnmt"`` (the default: the ``length_penalty``
      input is the GNMT alpha) or ``"average"`` (scores are mean log-probs per
      token and ``length_penalty`` is unused), passed to ``beam_search``.
    * ``clean_output(ids, lengths, alignment) -> (ids, lengths, alignment)``:
      called on the best hypothesis of each sentence (``ids`` int32 [B, T] without
      BOS/EOS, 0-padded beyond ``lengths`` int32 [B]; ``alignment`` float32
      [B, T, S], row t belonging to ``ids[:, t]``) before anything is returned or
      detokenized; it removes model-specific tokens that are not SentencePiece
      pieces (for example the eager translator's start, epsilon and source-pad
      tokens). It must drop the same rows of ``alignment`` as of ``ids`` (so
      row t still labels output piece t), keep the 0-padding convention and use
      graph-compatible core TensorFlow ops only (it runs inside
      ``translate_ids``). The returned ``lengths`` count the kept pieces; the
      score stays the search's, whose length penalty counted every generated
      token.
    * ``extra_token_count`` (int): ids the model has beyond the
      SentencePiece vocabulary (appended after it); the translator checks
      ``zoo_config["vocabulary_size"] == tokenizer size + extra_token_count``.
      Such ids never reach the tokenizer: ``clean_output`` must remove them.

    Example:
    ```python
    translator = Translator(model, tokenizer)
    translator.translate_texts(["Guten Morgen ."])        # ['Good morning .']
    translator.translate(tf.constant(["Guten Morgen ."]))["translation"]
    export_saved_model(translator, "saved_models/de-en")  # reuses the traces
    ```
    """

    def __init__(self, model, tokenizer, *, beam_size=DEFAULT_BEAM_SIZE,
                 length_penalty=DEFAULT_LENGTH_PENALTY, max_length_a=2.0, max_length_b=10,
                 max_input_length=None, name=None):
        super().__init__(name=name)
        if int(beam_size) < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
        # An export saves the model's variables (the traced searches capture
        # them), not the Keras model object: its layers' object graph and Keras'
        # own default serving function would be saved, and restored on every
        # load, for nothing (a third of a tiny export's load time).
        object.__setattr__(self, "model", model)  # not tracked by tf.Module
        self.model_variables = list(model.variables)  # again in `signatures()`
        self.proto = _proto_bytes(tokenizer)
        self.vocabulary_size = int(self._sentencepiece().vocab_size())
        model_vocabulary = model.zoo_config.get("vocabulary_size")
        extra = int(model.extra_token_count)
        if model_vocabulary is not None and model_vocabulary != self.vocabulary_size + extra:
            plus = f" + {extra} model-specific ids" if extra else ""
            raise ValueError(
                f"The tokenizer has {self.vocabulary_size} pieces{plus} but the model's "
                f"vocabulary_size is {model_vocabulary}; export the vocabulary the model "
                "was trained with."
            )
        self.beam_size = int(beam_size)
        self.length_penalty = float(length_penalty)
        self.max_length_a = float(max_length_a)
        self.max_length_b = float(max_length_b)
        model_limit = model.max_decode_length
        if max_input_length is None:
            max_input_length = default_max_input_length(model)
        elif model_limit is not None and max_input_length > model_limit:
            raise ValueError(
                f"max_input_length={max_input_length} exceeds the model's max_length="
                f"{model_limit}."
            )
        self.max_input_length = int(max_input_length)
        self.retrace()

    def retrace(self, logits_processor=None):
        """Gives the translator fresh ``tf.function``s, traced at their next call.

        A trace holds the model's decoding rules as they were when it was made
        (``logits_processor`` and ``length_normalization`` are Python objects
        read while tracing). After ``model.set_decoding(...)`` (the eager
        translator's source padding injection chosen on the dev set) call this,
        and the same translator searches, and exports, by the new rules.

        Args:
            logits_processor: None (the model's rules), or rules to search by
                instead, until the next ``retrace``. Rules that read a
                ``tf.Variable`` take its value at each call, so a sweep over
                that value traces once (``choose_source_padding_injection``).
        """
        self._logits_processor_override = logits_processor

        def graph(method, *signature):
            # autograph=False: every loop and branch is an explicit
            # tf.while_loop / tf.cond.
            return tf.function(method, autograph=False, input_signature=list(signature))

        # The one beam search on ids: translate_ids and the text signatures
        # (translate -> translate_with_options -> translate_n_best) call it, so
        # it is traced, and stored in an export, once.
        self._beam_search_ids = graph(self._n_best_ids, _IDS, *_SEARCH_OPTIONS,
                                      *_N_BEST_OPTIONS)
        self.translate_ids = graph(self._translate_ids, _IDS, *_SEARCH_OPTIONS)
        self.translate = graph(self._translate, _TEXT)
        self.translate_with_options = graph(self._translate_with_options, _TEXT,
                                            *_SEARCH_OPTIONS)
        self.translate_n_best = graph(self._translate_n_best, _TEXT, *_SEARCH_OPTIONS,
                                      *_N_BEST_OPTIONS)
        self.sample = graph(
            self._sample, _TEXT, tf.TensorSpec([], tf.float32, name="temperature"),
            tf.TensorSpec([], tf.int32, name="top_k"),
            tf.TensorSpec([], tf.float32, name="top_p"),
            tf.TensorSpec([], tf.int32, name="seed"), _SCALAR_FLOAT, _SCALAR_FLOAT)
        self.score = graph(self._score, _TEXT,
                           tf.TensorSpec([None], tf.string, name="target"))

    def set_length_penalty(self, length_penalty):
        """Makes ``length_penalty`` the default search's: ``translate``,
        ``translate_texts`` and an export's ``translate`` signature and model card.

        The default is a constant of the ``translate`` trace, so the functions are
        traced anew (the decoding rules of the last ``retrace`` kept).
        """
        if float(length_penalty) < 0:
            raise ValueError(f"length_penalty must be >= 0, got {length_penalty}.")
        self.length_penalty = float(length_penalty)
        self.retrace(self._logits_processor_override)

    def _logits_processor(self):
        """The rules a trace reads: ``retrace``'s override, else the model's."""
        if self._logits_processor_override is not None:
            return self._logits_processor_override
        return self.model.logits_processor

    # ---- search on ids (core TensorFlow ops only) ---------------------------------

    def _checked_source(self, source_ids):
        """Validates ``source_ids`` and drops their all-padding columns.

        Returns ``(source_ids [B, W], rows, expand)``: ``rows`` are the non-empty
        rows (the only ones sent to the model) and ``expand(values)`` maps values
        of those rows back to the full batch, empty rows getting zeros.
        """
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        batch_size = tf.shape(source_ids)[0]
        is_token = tf.not_equal(source_ids, PAD_ID)
        positions = tf.range(1, tf.shape(source_ids)[1] + 1)[tf.newaxis, :]
        row_widths = tf.reduce_max(
            tf.concat([tf.where(is_token, positions, 0),
                       tf.zeros([batch_size, 1], tf.int32)], axis=1), axis=1)
        width = tf.reduce_max(tf.concat([row_widths, [0]], axis=0))
        longest_row = tf.argmax(tf.concat([row_widths, [0]], axis=0),
                                output_type=tf.int32)
        too_long = tf.strings.format(
            "Input too long: sentence {} has {} tokens (SentencePiece pieces + EOS) but "
            "this model accepts at most max_input_length={}. Inputs are never "
            "truncated: split the sentence or export with a larger max_input_length.",
            (longest_row, width, self.max_input_length))
        check = tf.debugging.Assert(width <= self.max_input_length, [too_long])
        bad_id = tf.strings.format(
            "source_ids must be in [0, {}); got values from {} to {}.",
            (self.vocabulary_size, tf.reduce_min(tf.concat([[0], tf.reshape(
                source_ids, [-1])], 0)), tf.reduce_max(tf.concat(
                    [[0], tf.reshape(source_ids, [-1])], 0))))
        check_ids = tf.debugging.Assert(tf.reduce_all(tf.logical_and(
            source_ids >= 0, source_ids < self.vocabulary_size)), [bad_id])
        with tf.control_dependencies([check, check_ids]):
            source_ids = tf.identity(source_ids[:, :width])

        non_empty = tf.reduce_any(tf.not_equal(source_ids, PAD_ID), axis=1)
        rows = tf.cast(tf.where(non_empty)[:, 0], tf.int32)
        # Back to the full batch: row i takes subset row `slot[i]`, empty rows the
        # appended zero row (a gather: scatter_nd rejects empty output shapes).
        slot = tf.where(non_empty,
                        tf.cumsum(tf.cast(non_empty, tf.int32)) - 1, tf.size(rows))

        def expand(values):
            zero_row = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], axis=0),
                                values.dtype)
            return tf.gather(tf.concat([values, zero_row], axis=0), slot)

        return source_ids, rows, expand

    def _beam(self, beam_size, length_penalty, max_length_a, max_length_b,
              num_hypotheses=1, no_repeat_ngram_size=0):
        """The export's beam search as ``search(source_ids) -> result``."""
        def search(source_ids):
            # The search caps the output of fixed-length models at their positions.
            return beam_search(
                self.model, source_ids, beam_size=beam_size,
                length_penalty=length_penalty, max_length_a=max_length_a,
                max_length_b=max_length_b, num_return=num_hypotheses,
                no_repeat_ngram_size=no_repeat_ngram_size,
                logits_processor=self._logits_processor(),
                length_normalization=getattr(self.model, "length_normalization", "gnmt"))
        return search

    def _search_ids(self, source_ids, search):
        """``search`` on the non-empty rows; empty rows give an empty result.

        Returns ``ids`` int32 [B, N, T], ``lengths`` int32 [B, N], ``scores``
        float32 [B, N] and ``alignment`` float32 [B, N, T, S], N hypotheses per
        sentence, after the model's ``clean_output`` hook.
        """
        source_ids, rows, expand = self._checked_source(source_ids)
        result = search(tf.gather(source_ids, rows))
        shape = tf.shape(result["ids"])  # [R, N, T]
        flat = shape[0] * shape[1]
        ids = tf.reshape(result["ids"], [flat, shape[2]])
        lengths = tf.reshape(result["lengths"], [flat])
        if "alignment" in result:
            alignment = tf.reshape(result["alignment"],
                                   [flat, shape[2], tf.shape(source_ids)[1]])
        else:  # models without an attention state still give the output
            alignment = tf.zeros([flat, shape[2], tf.shape(source_ids)[1]], tf.float32)
        # Model-specific tokens out (`ZooModel.clean_output`; default: no-op).
        ids, lengths, alignment = self.model.clean_output(ids, lengths, alignment)

        def by_sentence(values):
            return tf.reshape(values, tf.concat([shape[:2], tf.shape(values)[1:]], 0))

        return {
            "ids": expand(by_sentence(ids)),
            "lengths": expand(by_sentence(lengths)),
            "scores": expand(result["scores"]),
            "alignment": expand(by_sentence(alignment)),
        }

    def _n_best_ids(self, source_ids, beam_size, length_penalty, max_length_a,
                    max_length_b, num_hypotheses, no_repeat_ngram_size):
        """``_search_ids`` of the beam search with every option an input."""
        return self._search_ids(source_ids, self._beam(
            beam_size, length_penalty, max_length_a, max_length_b, num_hypotheses,
            no_repeat_ngram_size))

    @staticmethod
    def _best(result):
        """The first hypothesis of each sentence of a ``_search_ids`` result."""
        return {key: value[:, 0] for key, value in result.items()}

    def _translate_ids(self, source_ids, beam_size, length_penalty, max_length_a,
                      max_length_b):
        """Token ids in, token ids out (core TensorFlow ops only).

        Args:
            source_ids: int32 [B, S]: SentencePiece ids then EOS (3), 0-padded.
            beam_size: int32 scalar >= 1.
            length_penalty: float32 scalar GNMT alpha (0 = off).
            max_length_a: float32 scalar, ``a`` of the output limit
                ``ceil(a * source_tokens + b)``.
            max_length_b: float32 scalar, ``b`` of that limit.

        Returns:
            ``ids`` int32 [B, T] (no BOS/EOS, 0-padded; model-specific tokens
            removed by the model's ``clean_output`` hook), ``lengths`` int32 [B],
            ``scores`` float32 [B], ``alignment`` float32 [B, T, S'] where S' is S
            without the all-padding columns.
        """
        return self._best(self._beam_search_ids(
            source_ids, beam_size, length_penalty, max_length_a, max_length_b,
            tf.constant(1), tf.constant(0)))

    # ---- text ----------------------------------------------------------------------

    def _sentencepiece(self):
        """A tensorflow-text tokenizer whose resource is created where it is called.

        Called inside each traced function, so the SentencePiece resource is created
        by the function's own graph (the proto is a constant in it). An eagerly
        created one would be captured instead, and that kernel-owned resource is
        destroyed by `tf.random.set_seed` / `keras.utils.set_random_seed` (they clear
        TensorFlow's kernel cache), which would break this translator afterwards.
        """
        import tensorflow_text

        return tensorflow_text.SentencepieceTokenizer(model=self.proto,
                                                      out_type=tf.int32)

    def _source_ids(self, text, sentencepiece=None):
        """string [B] -> int32 [B, S]: pieces + EOS, 0-padded; empty rows all 0."""
        if sentencepiece is None:
            sentencepiece = self._sentencepiece()
        text = tf.strings.unicode_transcode(
            text, input_encoding="UTF-8", output_encoding="UTF-8",
            errors=UNICODE_ERRORS, replacement_char=REPLACEMENT_CHARACTER)
        pieces = sentencepiece.tokenize(text)
        if isinstance(pieces, tf.Tensor):  # defensive: always ragged for a [B] input
            pieces = tf.RaggedTensor.from_tensor(pieces)
        num_pieces = tf.cast(pieces.row_lengths(), tf.int32)
        source = eos_after_pieces(pieces.to_tensor(default_value=PAD_ID), num_pieces)
        return tf.where(num_pieces[:, tf.newaxis] > 0, source, PAD_ID)

    @staticmethod
    def _pieces(sentencepiece, ids, lengths):
        """int32 [B, T] + lengths -> string [B, T] pieces, "" beyond each length."""
        return sentencepiece.id_to_string(ragged_rows(ids, lengths)).to_tensor(
            default_value="")

    def _translate_text(self, text, search_ids, n_best=False):
        """Text in; the best hypothesis' outputs (and with ``n_best`` all N).

        ``search_ids(source_ids)`` gives ``_search_ids``' result."""
        sentencepiece = self._sentencepiece()
        source_ids = self._source_ids(text, sentencepiece)
        all_hypotheses = search_ids(source_ids)
        result = self._best(all_hypotheses)
        translation = sentencepiece.detokenize(ragged_rows(result["ids"], result["lengths"]))
        source_width = tf.shape(result["alignment"])[2]
        source_ids = source_ids[:, :source_width]
        source_lengths = tf.reduce_sum(
            tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
        outputs = {
            "translation": translation,
            "score": result["scores"],
            "alignment": result["alignment"],
            "length": result["lengths"],
            "source_pieces": self._pieces(sentencepiece, source_ids, source_lengths),
            "target_pieces": self._pieces(sentencepiece, result["ids"],
                                          result["lengths"]),
        }
        if n_best:
            shape = tf.shape(all_hypotheses["ids"])
            flat_ids = tf.reshape(all_hypotheses["ids"], [shape[0] * shape[1], shape[2]])
            flat_lengths = tf.reshape(all_hypotheses["lengths"], [-1])
            texts = sentencepiece.detokenize(ragged_rows(flat_ids, flat_lengths))
            outputs["hypotheses"] = tf.reshape(texts, shape[:2])
            outputs["hypothesis_scores"] = all_hypotheses["scores"]
            outputs["hypothesis_lengths"] = all_hypotheses["lengths"]
        return outputs

    def _translate(self, text):
        """Translates ``text`` string[B] with the default options.

        Returns ``translation`` string[B], ``score`` float32[B], ``alignment``
        float32[B, T, S], ``length`` int32[B], ``source_pieces`` string[B, S] and
        ``target_pieces`` string[B, T].
        """
        return self.translate_with_options(
            text, tf.constant(self.beam_size), tf.constant(self.length_penalty),
            tf.constant(self.max_length_a), tf.constant(self.max_length_b))

    def _translate_with_options(self, text, beam_size, length_penalty, max_length_a,
                               max_length_b):
        """``translate`` with beam size, length penalty and output limit as inputs."""
        # One traced search serves all three text signatures: this graph calls
        # translate_n_best's (N = 1, no n-gram blocking) and keeps its outputs.
        outputs = self.translate_n_best(text, beam_size, length_penalty, max_length_a,
                                        max_length_b, tf.constant(1), tf.constant(0))
        return {key: outputs[key] for key in TRANSLATION_OUTPUTS}

    def _translate_n_best(self, text, beam_size, length_penalty, max_length_a,
                         max_length_b, num_hypotheses, no_repeat_ngram_size):
        """``translate_with_options`` plus the N best hypotheses and n-gram blocking.

        ``num_hypotheses`` N (1 <= N <= beam_size) is a call-time input, so one
        export serves any N; ``no_repeat_ngram_size`` n > 0 bans repeating an
        n-gram (0 = off). Adds ``hypotheses`` string[B, N], ``hypothesis_scores``
        float32[B, N] (best first; -1e9 marks a slot the search could not fill)
        and ``hypothesis_lengths`` int32[B, N]; ``translation`` and the other
        outputs are those of the best hypothesis.
        """
        def search_ids(source_ids):
            return self._beam_search_ids(source_ids, beam_size, length_penalty,
                                         max_length_a, max_length_b, num_hypotheses,
                                         no_repeat_ngram_size)

        return self._translate_text(text, search_ids, n_best=True)

    def _sample(self, text, temperature, top_k, top_p, seed, max_length_a, max_length_b):
        """One translation drawn from the model (back-translation, diverse output).

        Each token is drawn from the distribution divided by ``temperature`` and
        cut to the ``top_k`` (0: all) most probable tokens and the ``top_p``
        nucleus (1.0: all); the same ``seed`` and input give the same output.
        Returns the outputs of ``translate``; ``score`` is the sum of the
        untempered log-probs (no length penalty).
        """
        def search(source_ids):
            return sample_search(
                self.model, source_ids, temperature=temperature, top_k=top_k,
                top_p=top_p, seed=seed, max_length_a=max_length_a,
                max_length_b=max_length_b,
                logits_processor=self._logits_processor())

        return self._translate_text(
            text, lambda source_ids: self._search_ids(source_ids, search))

    def _score(self, text, target):
        """Forced decoding: the model's log-probabilities of ``target`` given ``text``.

        Both are tokenized by the export's vocabulary; each target is scored
        piece by piece and then its EOS, through the search's own step and
        log-prob rules, so a translation's score equals what the search reported
        (before its length penalty). Returns ``log_prob`` float32[B] (the sum),
        ``token_log_probs`` float32[B, T + 1] (0-padded), ``length`` int32[B]
        (target pieces) and ``target_pieces`` string[B, T]. An empty source or
        target scores 0.
        """
        sentencepiece = self._sentencepiece()
        source_ids, rows, expand = self._checked_source(
            self._source_ids(text, sentencepiece))
        target = tf.strings.unicode_transcode(
            target, input_encoding="UTF-8", output_encoding="UTF-8",
            errors=UNICODE_ERRORS, replacement_char=REPLACEMENT_CHARACTER)
        target_ids = sentencepiece.tokenize(target).to_tensor(default_value=PAD_ID)
        limit = self.model.max_decode_length
        if limit is not None:  # the decoder has no position for a longer target
            too_long = tf.strings.format(
                "Target too long: {} pieces + EOS, but this model has {} decoder "
                "positions.", (tf.shape(target_ids)[1], limit))
            with tf.control_dependencies([tf.debugging.Assert(
                    tf.shape(target_ids)[1] < limit, [too_long])]):
                target_ids = tf.identity(target_ids)
        scored = score_targets(self.model, tf.gather(source_ids, rows),
                               tf.gather(target_ids, rows),
                               logits_processor=self._logits_processor())
        lengths = common.source_lengths(target_ids)
        return {
            "log_prob": expand(scored["total"]),
            "token_log_probs": expand(scored["token_log_probs"]),
            "length": lengths,
            "target_pieces": self._pieces(sentencepiece, target_ids, lengths),
        }

    # ---- plain Python ----------------------------------------------------------------

    def translate_texts(self, texts, batch_size=64, beam_size=None, length_penalty=None,
                        max_length_a=None, max_length_b=None, return_scores=False):
        """Translates a list of strings; the same graph and search as the export.

        Sentences are sorted by length and batched (less padding, fewer wasted
        decoding steps); the result is in the input order.

        Args:
            texts: list of ``str`` (or UTF-8 ``bytes``).
            batch_size: sentences per call.
            beam_size: None for the translator's default.
            length_penalty: None for the translator's default.
            max_length_a: None for the translator's default.
            max_length_b: None for the translator's default.
            return_scores: also return the scores.

        Returns:
            list of ``str`` (and a list of float scores if ``return_scores``).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        options = (
            tf.constant(self.beam_size if beam_size is None else beam_size, tf.int32),
            tf.constant(self.length_penalty if length_penalty is None
                        else length_penalty, tf.float32),
            tf.constant(self.max_length_a if max_length_a is None else max_length_a,
                        tf.float32),
            tf.constant(self.max_length_b if max_length_b is None else max_length_b,
                        tf.float32),
        )
        encoded = [t if isinstance(t, bytes) else str(t).encode("utf-8") for t in texts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        translations = [""] * len(encoded)
        scores = [0.0] * len(encoded)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            try:
                result = self.translate_with_options(
                    tf.constant([encoded[i] for i in chunk], tf.string), *options)
            except tf.errors.InvalidArgumentError as error:
                # Say why, naming the caller's sentence, not the chunk's row.
                message = model_error_message(error)
                row = failing_sentence(message)
                if row is not None and row < len(chunk):
                    message = rename_sentence(message, f"sentence {chunk[row]}")
                raise tf.errors.InvalidArgumentError(
                    error.node_def, error.op, message) from None
            for i, text, score in zip(chunk, result["translation"].numpy(),
                                      result["score"].numpy()):
                translations[i] = text.decode("utf-8", errors="replace")
                scores[i] = float(score)
        if return_scores:
            return translations, scores
        return translations

    def signatures(self):
        """The functions `export_saved_model` saves as signatures, by name.

        The `tf.function`s themselves (each has its input signature), not
        concrete functions: `tf.saved_model.save` traces them in its own
        context (a trace made outside it is not reused there), so each is
        traced once by the export instead of twice.

        It also tracks the model's variables as they are now (a model first
        built after this translator was made has new ones), so that the save
        finds every variable the searches capture.
        """
        self.model_variables = list(self.model.variables)
        return {
            "serving_default": self.translate,
            "translate": self.translate,
            "translate_with_options": self.translate_with_options,
            "translate_n_best": self.translate_n_best,
            "sample": self.sample,
            "translate_ids": self.translate_ids,
            **({"score": self.score} if self.can_score else {}),
        }

    @property
    def can_score(self):
        """Forced decoding of plain text needs a model whose outputs are plain
        pieces (the eager model's start and ε tokens are not in a reference)."""
        return not int(self.model.extra_token_count)


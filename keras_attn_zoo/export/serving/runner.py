"""The model side of the server: loads the SavedModel, counts each sentence's
tokens, and runs the batches `SentenceScheduler` forms on one worker thread.
"""

import pathlib
import threading

from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY
from keras_attn_zoo.export import sentences as sentence_tools
from keras_attn_zoo.export.saved_model import VOCABULARY_FILE
from keras_attn_zoo.export.saved_model import latest_version
from keras_attn_zoo.export.saved_model import load_model_card
from keras_attn_zoo.export.serving.metrics import Metrics
from keras_attn_zoo.export.serving.parsing import BadRequest
from keras_attn_zoo.export.serving.parsing import merge_results
from keras_attn_zoo.export.serving.parsing import parse_texts
from keras_attn_zoo.export.serving.scheduler import DEFAULT_MAX_BATCH_SENTENCES
from keras_attn_zoo.export.serving.scheduler import DEFAULT_MAX_BATCH_TOKENS
from keras_attn_zoo.export.serving.scheduler import DEFAULT_MAX_WAIT_SECONDS
from keras_attn_zoo.export.serving.scheduler import Batch
from keras_attn_zoo.export.serving.scheduler import SentenceScheduler
from keras_attn_zoo.inference.translator import failing_sentence
from keras_attn_zoo.inference.translator import model_error_message
from keras_attn_zoo.inference.translator import rename_sentence


class ModelRunner:
    """Loads the SavedModel in the background and runs batched translations.

    Text requests go through a `SentenceScheduler` (token-budget batches, a
    fair share per request, a bounded wait: see `scheduler.py`); its arguments
    ``max_batch_tokens``, ``max_batch_sentences``, ``max_wait_seconds`` and
    ``batch_timeout_seconds`` are passed on. ``start_worker=False`` leaves the
    batches to the caller (``runner.run_batch(runner.scheduler.next_batch())``),
    which the tests use to see each batch formed.
    """

    def __init__(self, model_path, batch_timeout_seconds=0.005,
                 batch_max_sentences=DEFAULT_MAX_BATCH_SENTENCES,
                 batch_max_tokens=DEFAULT_MAX_BATCH_TOKENS,
                 max_wait_seconds=DEFAULT_MAX_WAIT_SECONDS, metrics=None, start_worker=True):
        self.version_dir = latest_version(model_path)
        self.version = self.version_dir.name
        self.metrics = metrics or Metrics()
        self.scheduler = SentenceScheduler(
            max_batch_tokens=batch_max_tokens, max_batch_sentences=batch_max_sentences,
            max_wait_seconds=max_wait_seconds, batch_timeout_seconds=batch_timeout_seconds,
            metrics=self.metrics)
        self.state = "LOADING"
        self.error = ""
        self.model_card = {}
        self.signature_defs = {}
        self._model = None
        self._tokenizer = None
        self._loaded = threading.Event()
        threading.Thread(target=self._load, daemon=True, name="loader").start()
        self._worker = None
        if start_worker:
            self._worker = threading.Thread(target=self._serve_batches, daemon=True,
                                            name="batcher")
            self._worker.start()

    def _load(self):
        try:
            import tensorflow as tf
            import tensorflow_text

            self.signature_defs = read_signature_defs(self.version_dir)
            self._model = tf.saved_model.load(str(self.version_dir))
            self.model_card = load_model_card(self.version_dir)
            vocabulary = self.version_dir / VOCABULARY_FILE
            if vocabulary.exists():
                self._tokenizer = tensorflow_text.SentencepieceTokenizer(
                    model=vocabulary.read_bytes())
            self.state = "AVAILABLE"
        except Exception as error:  # reported through the status endpoint
            self.state, self.error = "END", f"{type(error).__name__}: {error}"
        finally:
            self._loaded.set()

    def wait_until_loaded(self, timeout=None):
        """True once the model is AVAILABLE (False if loading failed or timed out)."""
        self._loaded.wait(timeout)
        return self.state == "AVAILABLE"

    def gauges(self):
        """The metrics page's gauges, read from the scheduler."""
        return {"queue_length": self.scheduler.waiting_sentences(),
                "oldest_wait_seconds": self.scheduler.oldest_wait_seconds()}

    # ---- TF Serving's view: signatures run as they are ---------------------------------

    @property
    def signature_names(self):
        return sorted(self._model.signatures) if self._model is not None else []

    def signature_inputs(self, name):
        """``{input name: tf.TensorSpec}`` of signature ``name``."""
        return self._model.signatures[name].structured_input_signature[1]

    def run_signature(self, name, inputs, limits):
        """Runs signature ``name`` on ``inputs`` (JSON values by input name), as
        TF Serving does; returns the outputs as JSON-able lists."""
        import tensorflow as tf

        function = self._model.signatures[name]
        specs = self.signature_inputs(name)
        missing = sorted(set(specs) - set(inputs))
        unknown = sorted(set(inputs) - set(specs))
        if missing or unknown:
            raise BadRequest(f'signature "{name}" takes inputs {sorted(specs)}; '
                             f"missing {missing}, unknown {unknown}.")
        tensors = {}
        for key, spec in specs.items():
            value = inputs[key]
            if spec.dtype == tf.string:
                value = parse_texts(value, key, limits)
            try:
                tensors[key] = tf.constant(value, spec.dtype)
            except (TypeError, ValueError) as error:
                raise BadRequest(f'input "{key}" is not a {spec.dtype.name} of rank '
                                 f"{spec.shape.rank}: {error}") from None
            if not spec.shape.is_compatible_with(tensors[key].shape):
                raise BadRequest(f'input "{key}" has shape {tensors[key].shape.as_list()}; '
                                 f"signature {name!r} wants {spec.shape}.")
        self.metrics.batch(int(tensors["text"].shape[0]))
        try:
            outputs = function(**tensors)
        except tf.errors.InvalidArgumentError as error:
            raise BadRequest(f"input rejected by the model: {model_error_message(error)}"
                             ) from None

        def plain(value):
            if isinstance(value, bytes):
                return value.decode("utf-8", "replace")
            if value.dtype == object:  # strings: nested lists of text
                return [plain(item) for item in value]
            return value.tolist()

        return {key: plain(value.numpy()) for key, value in outputs.items()}

    # ---- text requests: split, scheduled, joined --------------------------------------

    def default_options(self):
        """(beam_size, length_penalty, max_length_a, max_length_b) of the card."""
        defaults = self.model_card.get("defaults", {})
        return (int(defaults.get("beam_size", DEFAULT_BEAM_SIZE)),
                float(defaults.get("length_penalty", DEFAULT_LENGTH_PENALTY)),
                float(defaults.get("max_length_a", 2.0)),
                float(defaults.get("max_length_b", 10)))

    def count_tokens(self, sentences):
        """Each sentence's length in pieces plus EOS, what the model is fed (from
        the export's SentencePiece model; without one, words x 2 + 1)."""
        if not sentences:
            return []
        if self._tokenizer is None:
            return [2 * len(sentence.split()) + 1 for sentence in sentences]
        import tensorflow as tf

        lengths = self._tokenizer.tokenize(tf.constant(list(sentences), tf.string))
        return [int(length) + 1 for length in lengths.row_lengths().numpy()]

    def submit(self, sentences, options):
        """Queues ``sentences`` with ``options`` (as `default_options`, plus
        ``num_hypotheses`` when over 1); returns the scheduler's request."""
        return self.scheduler.submit(sentences, self.count_tokens(sentences), tuple(options))

    def translate(self, sentences, options):
        """One result dict per sentence, in order, once all of them ran."""
        return self.submit(sentences, options).future.result()

    def translate_texts(self, texts, options, split):
        """Texts -> one merged result per text (each split into sentences when
        ``split``); a sentence the model refuses fails the request, named as
        "text T, sentence S"."""
        language = sentence_tools.source_language(self.model_card)
        sentences, counts = sentence_tools.split_texts(texts, language, split)
        try:
            results = self.translate(sentences, options)
        except BadRequest as error:
            row, text = failing_sentence(str(error)), 0
            if row is None or row >= len(sentences):
                raise
            while row >= counts[text]:
                row, text = row - counts[text], text + 1
            raise BadRequest(rename_sentence(
                str(error), f"text {text}, sentence {row}")) from None
        return [merge_results(group) for group in sentence_tools.regroup(results, counts)]

    def stop(self):
        """Stops the scheduler and waits (at most 30 s) for the model thread."""
        self.scheduler.stop()
        if self._worker is not None:
            self._worker.join(timeout=30)

    def _serve_batches(self):
        while True:
            batch = self.scheduler.next_batch()
            if batch is None:
                return
            try:
                self.run_batch(batch)
            except Exception as error:  # the worker must outlive any one batch
                for request in batch.requests:
                    self.scheduler.fail(request, error)

    def run_batch(self, batch):
        """Runs ``batch`` and hands its results to the scheduler. A sentence the
        model refuses fails its request alone (its other sentences are dropped)
        and the rest of the batch runs again; an unexpected error is retried one
        request at a time, so it fails only the request that causes it."""
        import tensorflow as tf

        items = [(request, index) for request, index in batch.items
                 if not request.future.done()]
        while items:
            part = Batch(batch.options, items, max(request.tokens[index]
                                                   for request, index in items), batch.formed)
            try:
                results = self._run(part)
            except tf.errors.InvalidArgumentError as error:
                message, row = _model_message_and_row(error)
                if row is None or row >= len(items):
                    return self._run_each_request(part, error)
                request, index = items[row]
                self.scheduler.fail(request, BadRequest(
                    "input rejected by the model: "
                    + rename_sentence(message, f"sentence {index}")))
                items = [item for item in items if item[0] is not request]
                continue
            except Exception as error:
                return self._run_each_request(part, error)
            self.scheduler.complete(part, results)
            return

    def _run_each_request(self, batch, error):
        requests = batch.requests
        if len(requests) == 1:
            message = error
            if not isinstance(error, BadRequest) and _is_invalid_argument(error):
                message = BadRequest(f"input rejected by the model: "
                                     f"{model_error_message(error)}")
            self.scheduler.fail(requests[0], message)
            return
        for request in requests:
            self.run_batch(Batch(batch.options, [item for item in batch.items
                                                 if item[0] is request], 0, batch.formed))

    def _run(self, batch):
        """The model on ``batch``'s sentences: one result dict per sentence."""
        import tensorflow as tf

        self.metrics.batch(len(batch.items), batch.padded_tokens)
        beam_size, length_penalty, max_length_a, max_length_b, *more = batch.options
        num_hypotheses = more[0] if more else 1
        inputs = dict(
            text=tf.constant(batch.sentences, tf.string),
            beam_size=tf.constant(beam_size, tf.int32),
            length_penalty=tf.constant(length_penalty, tf.float32),
            max_length_a=tf.constant(max_length_a, tf.float32),
            max_length_b=tf.constant(max_length_b, tf.float32))
        signature = "translate_with_options"
        if num_hypotheses > 1:
            signature = "translate_n_best"
            inputs.update(num_hypotheses=tf.constant(num_hypotheses, tf.int32),
                          no_repeat_ngram_size=tf.constant(0, tf.int32))
        outputs = self._model.signatures[signature](**inputs)
        outputs = {k: v.numpy() for k, v in outputs.items()}
        results = []
        for row in range(len(batch.items)):
            length = int(outputs["length"][row])
            source = [p.decode("utf-8", "replace") for p in outputs["source_pieces"][row] if p]
            target = [p.decode("utf-8", "replace")
                      for p in outputs["target_pieces"][row][:length]]
            alignment = outputs["alignment"][row][:length, : len(source)]
            result = {
                "translation": outputs["translation"][row].decode("utf-8", "replace"),
                "score": float(outputs["score"][row]),
                "alignment": [[round(float(w), 4) for w in r] for r in alignment],
                "length": length,
                "source_pieces": source,
                "target_pieces": target,
            }
            if "hypotheses" in outputs:
                result["hypotheses"] = [
                    {"translation": text.decode("utf-8", "replace"), "score": float(score)}
                    for text, score in zip(outputs["hypotheses"][row],
                                           outputs["hypothesis_scores"][row])]
            results.append(result)
        return results


def _is_invalid_argument(error):
    import tensorflow as tf

    return isinstance(error, tf.errors.InvalidArgumentError)


def _model_message_and_row(error):
    """The export's message of a graph error and the batch row it names, if any."""
    message = model_error_message(error)
    return message, failing_sentence(message)


def read_signature_defs(version_dir):
    """The SavedModel's signatures as TF Serving's metadata shows them (JSON of
    `SignatureDef`: inputs and outputs with dtype, shape and tensor name)."""
    from google.protobuf import json_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((pathlib.Path(version_dir) / "saved_model.pb").read_bytes())
    definitions = {}
    for name, definition in saved_model.meta_graphs[0].signature_def.items():
        if name.startswith("__"):  # the init op is no serving signature
            continue
        definitions[name] = json_format.MessageToDict(
            definition, preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True)
    return dict(sorted(definitions.items()))

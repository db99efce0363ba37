"""Export a zoo Transformer to CTranslate2 for fast CPU (and GPU) inference.

``export_ctranslate2(model, vocabulary, output_dir, quantization=...)`` fills a
``ctranslate2.specs.TransformerSpec`` with the model's weights and writes a
CTranslate2 model directory; ``CTranslate2Translator(output_dir)`` translates
text with it (SentencePiece in, SentencePiece out), like ``Translator``.

Supported models (the mapping is exact, checked by tests/test_ctranslate2.py):

* ``transformer`` (``Seq2SeqTransformer`` with ``multi_head`` attention in all
  three slots, ReLU feed-forward), post-norm (``norm_first=False``, the
  default) and pre-norm (``norm_first=True``, with its two final layer norms),
  any preset.

Refused with a ``ValueError`` (CTranslate2 has no equivalent layer):

* ``weighted_transformer`` (branched attention with learned κ/α mixing and
  per-branch FFNs), ``ran_transformer`` (recurrent attention matrices),
  ``gmm_transformer`` (Gaussian-mixture cross-attention), the hard-coded
  Gaussian, fixed-pattern and random-synthesizer attentions: any attention kind
  other than ``multi_head``, any stack layer, or a model without feed-forward
  blocks.
* the Bahdanau RNN and eager translator (not a ``Seq2SeqTransformer``; the
  eager model also has ids beyond its SentencePiece vocabulary).

What the exported model reproduces exactly: shared source/target/output
embeddings (the output layer is ``E^T``, no bias), embeddings times
``sqrt(d)``, our sinusoidal table (sines then cosines, timescale
``log(10000)/(d/2-1)``, positions from 0; stored as the position-encoding
weights, so CTranslate2's built-in table is never used), layer-norm epsilon
1e-6 (written to the model config), ``</s>`` appended to every source
(``add_source_eos``) and ``<s>`` as the decoder start.

Decoding differences from the zoo's beam search, documented:

* Length penalty: ours is GNMT's ``score / ((5 + n) / 6) ** alpha``;
  CTranslate2 divides by ``n ** alpha``. With ``length_penalty=0`` both rank
  by the plain sum of log-probs, and that is what the equality tests use.
* Output limit: ours is per sentence, ``ceil(a * source_length + b)`` real
  tokens (source length counting EOS), EOS forced after them; CTranslate2 has
  one ``max_decoding_length`` per batch (the same token count, EOS not
  counted). ``translate_texts(exact_limits=True)`` (the default) therefore
  batches only sentences with the same limit: exactly our limits, at the cost
  of smaller batches; ``exact_limits=False`` gives each length-sorted batch
  its largest limit (full batches; a sentence may then exceed its own limit
  by the spread within its batch).
* At the limit, CTranslate2 ends a hypothesis without scoring EOS, while our
  search forces EOS and adds its log-prob. Greedy outputs are unaffected;
  beam search may rank hypotheses that reach the limit differently (1 of 500
  Ding test sentences with a small trained model, a degenerate repetition).
* Positions: the stored table has ``max_positions`` rows (default 1024):
  sources (pieces + EOS) and outputs longer than that are refused / cut.
"""

import json
import math
import os
import pathlib
import shutil
import tempfile

import numpy as np

from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE

# Ids of the zoo's SentencePiece models (keras_attn_zoo.data.vocabulary).
PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_PIECES = (PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE)
LAYER_NORM_EPSILON = 1e-6
DEFAULT_MAX_POSITIONS = 1024
VOCABULARY_FILE = "sentencepiece.model"
INFO_FILE = "zoo_export.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16", "float16", "bfloat16")
_TEMPORARY_PREFIX = ".tmp-ct2-"


def sinusoidal_table(length, dim):
    """Our exact position table (layers/embedding.py) in NumPy float32 ``[length, dim]``."""
    half = dim // 2
    scale = math.log(10000.0) / max(half - 1, 1)
    # Same float32 steps as the Keras code, so the table matches to the last bit
    # up to sin/cos implementation differences.
    frequencies = np.exp(np.arange(half, dtype=np.float32) * np.float32(-scale))
    angles = np.arange(length, dtype=np.float32)[:, None] * frequencies[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
    if dim % 2:
        table = np.pad(table, [[0, 0], [0, 1]])
    return table.astype(np.float32)


def _numpy(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable,
                      dtype=np.float32)


def check_convertible(model):
    """Raises ``ValueError`` naming what CTranslate2 cannot express exactly."""
    from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
    from keras_attn_zoo.models.seq2seq_transformer import Seq2SeqTransformer

    if not isinstance(model, Seq2SeqTransformer):
        raise ValueError(
            f"CTranslate2 export supports the zoo's Transformer (Seq2SeqTransformer) "
            f"only; got {type(model).__name__}, which CTranslate2 cannot express.")
    config = model.zoo_config
    problems = []
    for slot in ("encoder_self_attention", "decoder_self_attention", "cross_attention"):
        if config[slot] != "multi_head":
            problems.append(f"{slot}={config[slot]!r} (only 'multi_head' maps to "
                            "CTranslate2's dot-product attention)")
    if model.stack_layers:
        problems.append(f"stack layers {sorted(model.stack_layers)} (no CTranslate2 "
                        "equivalent)")
    blocks = ([(block, [block.self_attention]) for block in model.encoder_blocks]
              + [(block, [block.self_attention, block.cross_attention])
                 for block in model.decoder_blocks])
    for block, attentions in blocks:
        for attention in attentions:
            # Exact class: subclasses (hard-coded, branched, ...) change the maths.
            if type(attention) is not MultiHeadAttention:
                problems.append(f"{block.name}: attention {type(attention).__name__}")
            elif not attention.use_bias:
                problems.append(f"{block.name}: attention without biases")
        if block.feed_forward is None:
            problems.append(f"{block.name}: no feed-forward block")
        elif block.feed_forward.activation != "relu":
            problems.append(f"{block.name}: activation "
                            f"{block.feed_forward.activation!r} (only 'relu')")
    if problems:
        raise ValueError("This model cannot be exported to CTranslate2 exactly: "
                         + "; ".join(dict.fromkeys(problems)) + ".")


def _linear(spec, kernel, bias):
    # Keras kernels are [in, out]; CTranslate2 linear weights are [out, in].
    spec.weight = np.ascontiguousarray(_numpy(kernel).T)
    if bias is not None:
        spec.bias = _numpy(bias)


def _layer_norm(spec, layer):
    spec.gamma = _numpy(layer.gamma)
    spec.beta = _numpy(layer.beta)


def _fused(spec, projections):
    """One CTranslate2 linear from several ``HeadsProjection``s stacked on outputs."""
    spec.weight = np.ascontiguousarray(
        np.concatenate([_numpy(p.kernel).T for p in projections], axis=0))
    spec.bias = np.concatenate([_numpy(p.bias) for p in projections], axis=0)


def _attention(spec, attention, norm, self_attention):
    if self_attention:  # linear[0] = fused Q, K, V
        _fused(spec.linear[0], [attention.query_projection, attention.key_projection,
                                attention.value_projection])
    else:  # cross: linear[0] = Q, linear[1] = fused K, V (applied to the memory)
        _fused(spec.linear[0], [attention.query_projection])
        _fused(spec.linear[1], [attention.key_projection, attention.value_projection])
    _linear(spec.linear[-1], attention.output_projection.kernel,
            attention.output_projection.bias)
    _layer_norm(spec.layer_norm, norm)


def _feed_forward(spec, block):
    inner, outer = block.feed_forward.dense_layers()
    _linear(spec.linear_0, inner.kernel, inner.bias)
    _linear(spec.linear_1, outer.kernel, outer.bias)
    _layer_norm(spec.layer_norm, block.feed_forward_norm)


def _pieces(vocabulary_model_path):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor

    processor = sentencepiece_processor(vocabulary_model_path)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    if tuple(pieces[:4]) != SPECIAL_PIECES:
        raise ValueError(
            f"{vocabulary_model_path}: expected the zoo's special pieces "
            f"{SPECIAL_PIECES} at ids 0-3, got {tuple(pieces[:4])}.")
    return pieces


def build_spec(model, vocabulary_model_path, max_positions=DEFAULT_MAX_POSITIONS):
    """The filled ``ctranslate2.specs.TransformerSpec`` of ``model`` (not optimised)."""
    from ctranslate2.specs import transformer_spec

    check_convertible(model)
    config = model.zoo_config
    pieces = _pieces(vocabulary_model_path)
    if len(pieces) != config["vocabulary_size"]:
        raise ValueError(
            f"The vocabulary has {len(pieces)} pieces but the model's vocabulary_size "
            f"is {config['vocabulary_size']}: CTranslate2 needs one name per id.")
    pre_norm = bool(config["norm_first"])
    spec = transformer_spec.TransformerSpec.from_config(
        (config["num_encoder_layers"], config["num_decoder_layers"]),
        config["num_heads"],
        pre_norm=pre_norm,  # pre-norm adds the final norms, post-norm has none
    )
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.config.add_source_eos = True  # our sources end with </s>
    spec.config.add_source_bos = False
    spec.config.decoder_start_token = BOS_PIECE

    embeddings = _numpy(model.embedding.embeddings)
    table = sinusoidal_table(max_positions, config["model_dim"])
    spec.encoder.embeddings[0].weight = embeddings
    spec.encoder.scale_embeddings = True
    spec.encoder.position_encodings.encodings = table
    spec.decoder.embeddings.weight = embeddings
    spec.decoder.scale_embeddings = True
    spec.decoder.position_encodings.encodings = table
    spec.decoder.projection.weight = embeddings  # tied output layer, [V, d], no bias

    for layer_spec, block in zip(spec.encoder.layer, model.encoder_blocks):
        _attention(layer_spec.self_attention, block.self_attention,
                   block.self_attention_norm, True)
        _feed_forward(layer_spec.ffn, block)
    for layer_spec, block in zip(spec.decoder.layer, model.decoder_blocks):
        _attention(layer_spec.self_attention, block.self_attention,
                   block.self_attention_norm, True)
        _attention(layer_spec.attention, block.cross_attention,
                   block.cross_attention_norm, False)
        _feed_forward(layer_spec.ffn, block)
    if pre_norm:
        _layer_norm(spec.encoder.layer_norm, model.encoder_final_norm)
        _layer_norm(spec.decoder.layer_norm, model.decoder_final_norm)

    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def export_ctranslate2(model, vocabulary_model_path, output_dir, quantization="float32",
                       *, max_positions=DEFAULT_MAX_POSITIONS, overwrite=False,
                       info=None):
    """Writes a CTranslate2 model directory for ``model``.

    Args:
        model: a trained zoo ``transformer`` (see the module docstring for which
            models convert; others raise ``ValueError`` before anything is written).
        vocabulary_model_path: the SentencePiece ``.model`` the model was trained
            with; copied into the export as ``sentencepiece.model``.
        output_dir: directory to create (must not exist unless ``overwrite``).
        quantization: weight type, one of ``QUANTIZATIONS`` ("float32", "int8",
            "int8_float32", ...).
        max_positions: rows of the stored position table (longest source in
            tokens, EOS included, and longest output).
        overwrite: replace an existing ``output_dir``.
        info: dict merged into ``zoo_export.json`` (e.g. the source run).

    Returns:
        ``pathlib.Path`` of the export. The directory appears complete or not at
        all: it is written to a temporary sibling and renamed.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got "
                         f"{quantization!r}.")
    output_dir = pathlib.Path(output_dir)
    if output_dir.exists() and not overwrite:
        raise FileExistsError(f"{output_dir} already exists; pass overwrite=True.")
    spec = build_spec(model, vocabulary_model_path, max_positions)
    spec.validate()
    spec.optimize(quantization=quantization)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    temporary = pathlib.Path(tempfile.mkdtemp(prefix=_TEMPORARY_PREFIX,
                                              dir=output_dir.parent))
    try:
        spec.save(str(temporary))
        shutil.copyfile(vocabulary_model_path, temporary / VOCABULARY_FILE)
        details = {
            "format": "ctranslate2",
            "model": model.name,
            "quantization": quantization,
            "max_positions": int(max_positions),
            "norm_first": bool(model.zoo_config["norm_first"]),
            "vocabulary_file": VOCABULARY_FILE,
            "length_penalty_note": "CTranslate2 divides by n**alpha, the zoo's "
                                   "beam search by ((5+n)/6)**alpha",
        }
        details.update(info or {})
        (temporary / INFO_FILE).write_text(
            json.dumps(details, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.chmod(temporary, 0o755)  # mkdtemp makes it 0700
        if output_dir.exists():  # overwrite: move the old one aside first
            old = output_dir.with_name(f"{_TEMPORARY_PREFIX}old-{output_dir.name}")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(output_dir, old)
            os.rename(temporary, output_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(temporary, output_dir)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return output_dir


KERAS_MODEL_FILE = "model.keras"


def find_keras_model(path):
    """``(model.keras path, vocab.model path)`` of a run directory, SavedModel or file.

    Accepts a run directory (``runs/NAME``: ``model.keras`` + ``vocab.model``,
    as ``workflow.py`` saves them), a SavedModel base or version directory with
    a ``model.keras`` beside it (``assets/vocab.model`` as vocabulary), or a
    ``.keras`` file with ``vocab.model`` / ``assets/vocab.model`` beside it.
    """
    path = pathlib.Path(path)
    if path.is_file():
        if path.suffix != ".keras":
            raise ValueError(f"{path} is not a .keras file or a directory.")
        keras_path, search = path, [path.parent]
    elif path.is_dir():
        search = [path]
        if not (path / KERAS_MODEL_FILE).is_file():
            # A SavedModel base directory: look in its latest version too.
            versions = sorted((int(p.name), p) for p in path.iterdir()
                              if p.is_dir() and p.name.isdigit())
            if versions:
                search.insert(0, versions[-1][1])
        found = [d / KERAS_MODEL_FILE for d in search if (d / KERAS_MODEL_FILE).is_file()]
        if not found:
            raise FileNotFoundError(
                f"No {KERAS_MODEL_FILE} in {path}: CTranslate2 export needs the Keras "
                "model (a run directory runs/NAME has one; a SavedModel alone does not "
                "keep the layer structure).")
        keras_path = found[0]
    else:
        raise FileNotFoundError(f"{path} does not exist.")
    for directory in [keras_path.parent] + search:
        for candidate in (directory / "vocab.model", directory / "assets" / "vocab.model"):
            if candidate.is_file():
                return keras_path, candidate
    raise FileNotFoundError(f"No vocab.model or assets/vocab.model beside {keras_path}.")


def export_ctranslate2_from_run(run_dir_or_saved_model, output_dir, quantization="float32",
                                **options):
    """``export_ctranslate2`` for a run directory / export holding ``model.keras``.

    For the CLI: ``keras-attn-zoo export-ct2 --model runs/NAME --output DIR``.
    """
    import keras

    import keras_attn_zoo.models  # noqa: F401  (registers the zoo's classes)

    keras_path, vocab_path = find_keras_model(run_dir_or_saved_model)
    model = keras.saving.load_model(str(keras_path), compile=False)
    info = {"source": str(keras_path)}
    # What the run says about itself (direction: the CLI's sentence splitter).
    for card_path in (keras_path.parent / "results.json",
                      keras_path.parent / "model_card.json"):
        if card_path.is_file():
            card = json.loads(card_path.read_text(encoding="utf-8"))
            info.update({key: card[key] for key in ("direction", "data", "preset", "bleu")
                         if card.get(key) is not None})
            break
    info.update(options.pop("info", None) or {})
    return export_ctranslate2(model, vocab_path, output_dir, quantization,
                              info=info, **options)


class CTranslate2Translator:
    """Translates text with a ``export_ctranslate2`` directory.

    Args:
        export_dir: the exported directory.
        device: "cpu" or "cuda".
        compute_type: CTranslate2 compute type ("default": the saved weights'
            type, "int8", "float32", ...).
        inter_threads: batches translated in parallel.
        intra_threads: threads per batch (0: CTranslate2's default).
    """

    def __init__(self, export_dir, device="cpu", compute_type="default", inter_threads=1,
                 intra_threads=0):
        import ctranslate2
        from keras_attn_zoo.data.vocabulary import sentencepiece_processor

        self.export_dir = pathlib.Path(export_dir)
        info_path = self.export_dir / INFO_FILE
        self.info = (json.loads(info_path.read_text(encoding="utf-8"))
                     if info_path.is_file() else {})
        self.max_positions = int(self.info.get("max_positions", DEFAULT_MAX_POSITIONS))
        self.processor = sentencepiece_processor(self.export_dir / VOCABULARY_FILE)
        self.translator = ctranslate2.Translator(
            str(self.export_dir), device=device, compute_type=compute_type,
            inter_threads=inter_threads, intra_threads=intra_threads)

    def tokenize(self, text):
        """SentencePiece pieces of ``text`` (CTranslate2 appends ``</s>``)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self.processor.encode(str(text), out_type=str)

    def score(self, sources, targets):
        """Per-token log-probs (EOS last) of target texts given source texts."""
        results = self.translator.score_batch(
            [self.tokenize(s) for s in sources], [self.tokenize(t) for t in targets],
            max_input_length=0)
        return [list(r.log_probs) for r in results]

    def translate_texts(self, texts, batch_size=32, beam_size=DEFAULT_BEAM_SIZE,
                        length_penalty=0.0,
                        max_length_a=2.0, max_length_b=10, return_scores=False,
                        exact_limits=True):
        """Translates a list of strings, in the input order.

        Sentences are sorted by length and batched. Each sentence may emit
        ``ceil(a * (pieces + 1) + b)`` tokens; with ``exact_limits`` a batch
        holds sentences of one limit only, otherwise a batch gets its largest
        limit (see the module docstring). ``length_penalty`` is CTranslate2's
        (``n ** alpha``), not GNMT's. Empty sentences give "".

        Returns:
            list of ``str`` (and a list of CTranslate2 scores if ``return_scores``).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        pieces = [self.tokenize(t) for t in texts]
        for index, row in enumerate(pieces):
            if len(row) + 1 > self.max_positions:
                raise ValueError(
                    f"Sentence {index} has {len(row) + 1} tokens (EOS included); this "
                    f"export accepts at most max_positions={self.max_positions}.")
        # Our limit: real tokens excluding EOS, source length counting EOS.
        limits = [max(0, math.ceil(max_length_a * (len(p) + 1) + max_length_b - 1e-9))
                  for p in pieces]
        order = sorted((i for i in range(len(pieces)) if pieces[i]),
                       key=lambda i: (limits[i], len(pieces[i])))
        chunks = []
        for i in order:
            if (chunks and len(chunks[-1]) < batch_size
                    and (not exact_limits or limits[chunks[-1][0]] == limits[i])):
                chunks[-1].append(i)
            else:
                chunks.append([i])
        translations = [""] * len(pieces)
        scores = [0.0] * len(pieces)
        for chunk in chunks:
            limit = min(max(limits[i] for i in chunk), self.max_positions - 1)
            if limit == 0:  # no token allowed: EOS at once, as in our searches
                continue
            results = self.translator.translate_batch(
                [pieces[i] for i in chunk],
                beam_size=beam_size,
                length_penalty=length_penalty,
                max_decoding_length=limit,
                min_decoding_length=0,  # EOS may come first, as in our searches
                max_input_length=0,  # never truncate (checked above)
                suppress_sequences=[[PAD_PIECE], [BOS_PIECE]],  # our searches ban these
                return_scores=return_scores,
            )
            for i, result in zip(chunk, results):
                translations[i] = self.processor.decode(result.hypotheses[0])
                if return_scores:
                    scores[i] = float(result.scores[0])
        if return_scores:
            return translations, scores
        return translations

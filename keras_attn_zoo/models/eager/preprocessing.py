"""Eager-feasible preprocessing for the eager translator (Press & Smith, 2018).

The eager model reads source token ``t`` and writes target token ``t`` at the
same step, so a pair is only learnable if no target token has to be written
before the source token it translates has been read. A pair is *eager
feasible* when every alignment link ``(i, j)`` (source ``i``, target ``j``,
0-based) satisfies ``j >= i``. :func:`eager_feasible` makes a pair feasible by
inserting the fewest ε tokens into the target (REFERENCE.md section 2):

1. prepend ``start_pads`` start tokens to the target, ``cost = start_pads``;
2. walk the links in target order; where ``i - j > cost`` insert
   ``i - j - cost`` ε tokens at target position ``j + cost`` and add them to
   ``cost``;
3. equalise the lengths: pad the target with ε, or the source with the
   source-pad token;
4. append EOS to both.

Tokens are strings at this level (or any hashable: pass ids and the special ids
to work on ids directly, as :func:`make_eager_id_pairs` does).

Special tokens and their ids
----------------------------
The SentencePiece vocabulary (``vocabulary.py``) fixes ``0..3`` =
PAD/UNK/BOS/EOS. The eager model needs three more symbols. They are **appended
after the SentencePiece vocabulary** (``special_ids.eager_special_ids``)::

    "<start>"   -> sp_size + 0    start padding (forced at the first steps)
    "<eps>"     -> sp_size + 1    ε, "write nothing yet"
    "<src_pad>" -> sp_size + 2    source padding (also fed by SPI)
    "</s>"      -> EOS_ID = 3     end of sentence, both sides

and the model is built with ``vocabulary_size = sp_size + 3``
(``special_ids.eager_vocabulary_size``); ``EagerLSTMTranslator`` takes the last three
ids as its special ids by default. This needs no change to
``train_sentencepiece`` (which accepts no extra trainer options) and works with
any existing SentencePiece model; the three ids are never given to the
tokenizer: ``strip_eager_tokens`` removes them before detokenizing. (The
alternative, ``user_defined_symbols=["<start>", "<eps>", "<src_pad>"]`` in
``SentencePieceTrainer.train``, would put them at ids 4..6 but would also make
the tokenizer split those strings out of raw text, and needs a new argument in
``train_sentencepiece``.)

Start pads: the default is 5, the value of the paper's published decoding
command and the best of Table 2 on FR→EN, DE→EN and EN→DE (EN→FR peaked at 3);
the reference code's ``add_epsilons.py`` listing inserts 3 (its README trains
with 4). Pass ``start_pads=3`` for the code's choice.

Alignments: Pharaoh ``i-j`` lines (:func:`read_pharaoh`) from any aligner, or
:func:`align_with_eflomal` (``pip install eflomal``), a faster and better
aligner of fast_align's family (the paper used fast_align forward alignments).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
from typing import Callable, Iterable, Sequence

import numpy as np

from keras_attn_zoo.data.alignments import check_links
from keras_attn_zoo.data.alignments import read_alignments
from keras_attn_zoo.data.alignments import write_pharaoh
from keras_attn_zoo.data.vocabulary import BOS_ID, EOS_ID
from keras_attn_zoo.models.eager.special_ids import DEFAULT_START_PADS
from keras_attn_zoo.models.eager.special_ids import EagerSpecialIds
from keras_attn_zoo.models.eager.special_ids import eager_special_ids

START_TOKEN = "<start>"
EPSILON_TOKEN = "<eps>"
SOURCE_PAD_TOKEN = "<src_pad>"
EOS_TOKEN = "</s>"

# Aligned batching: truncated back-propagation through time, in steps (paper: 60).
DEFAULT_BPTT = 60


# ---- links ----------------------------------------------------------------------------------


def read_pharaoh(lines_or_path, pairs: Sequence | None = None) -> list[list[tuple[int, int]]]:
    """Links per line of a Pharaoh file (`data.alignments.read_alignments`), in file order."""
    return [alignment.links for alignment in read_alignments(lines_or_path, pairs)]


def monotone_links(source_length: int, target_length: int) -> list[tuple[int, int]]:
    """A trivial monotone alignment: target ``j`` to source ``floor(j * S / T)``.

    For tests and for language pairs too small to align; real data should use
    :func:`align_with_eflomal` or another aligner.
    """
    if source_length == 0 or target_length == 0:
        return []
    return [(j * source_length // target_length, j) for j in range(target_length)]


# ---- eager feasibility ----------------------------------------------------------------------


def eager_feasible(
    source_tokens: Sequence,
    target_tokens: Sequence,
    links: Iterable[tuple[int, int]],
    start_pads: int = DEFAULT_START_PADS,
    *,
    start_token=START_TOKEN,
    epsilon_token=EPSILON_TOKEN,
    source_pad_token=SOURCE_PAD_TOKEN,
    eos_token=EOS_TOKEN,
):
    """Makes one pair eager feasible (Press & Smith, 2018, section 2).

    Args:
        source_tokens: the pair's source tokens, without EOS.
        target_tokens: the pair's target tokens, without EOS.
        links: ``(i, j)`` alignment links, source ``i``, target ``j``, 0-based
            (any order; several links may share an ``i`` or a ``j``).
        start_pads: start tokens prepended to the target (default 5, see the
            module docstring; the reference code's listing uses 3).
        start_token: the start token (strings by default; pass ids, for all
            four special tokens, to work on ids).
        epsilon_token: the ε token.
        source_pad_token: the source pad token.
        eos_token: the end-of-sentence token.

    Returns:
        ``(source, target, links_after)``: equally long token lists, each ending
        with ``eos_token``, and the links re-indexed into the new target, every
        one with ``j >= i``.

    Raises:
        ValueError: if a link lies outside the pair or ``start_pads < 0``.
    """
    if start_pads < 0:
        raise ValueError(f"start_pads must be >= 0, got {start_pads}.")
    source = list(source_tokens)
    original_target = list(target_tokens)
    links = [(int(i), int(j)) for i, j in links]
    check_links(links, len(source), len(original_target))

    # Walking the links in target order keeps every earlier target token in
    # place: insertions happen right before original token j, after all
    # original tokens < j. Only the largest i of each j matters.
    latest_source = {}
    for i, j in links:
        latest_source[j] = max(i, latest_source.get(j, -1))
    cost = start_pads
    inserted_before = {}  # original target index -> ε inserted right before it
    shift = [0] * len(original_target)  # final position = j + shift[j]
    for j in sorted(latest_source):
        i = latest_source[j]
        if i - j > cost:
            inserted_before[j] = i - j - cost
            cost = i - j
    running = start_pads
    for j in range(len(original_target)):
        running += inserted_before.get(j, 0)
        shift[j] = running

    target = [start_token] * start_pads
    for j, token in enumerate(original_target):
        target.extend([epsilon_token] * inserted_before.get(j, 0))
        target.append(token)
    if len(source) > len(target):
        target.extend([epsilon_token] * (len(source) - len(target)))
    elif len(target) > len(source):
        source.extend([source_pad_token] * (len(target) - len(source)))
    source.append(eos_token)
    target.append(eos_token)
    links_after = [(i, j + shift[j]) for i, j in links]
    return source, target, links_after


def is_eager_feasible(links: Iterable[tuple[int, int]]) -> bool:
    """True when every link ``(i, j)`` has ``j >= i``."""
    return all(j >= i for i, j in links)


def epsilon_statistics(targets: Iterable[Sequence], *, epsilon_token=EPSILON_TOKEN,
                       start_token=START_TOKEN, eos_token=EOS_TOKEN) -> dict:
    """The share of ε in eager-feasible targets, as in the paper's Table 1.

    Start tokens, the final EOS and the ε appended to equalise lengths (the
    trailing run of ε) are not counted, neither as ε nor as tokens.

    Returns:
        dict with ``epsilons`` (inserted ε), ``tokens`` (words + inserted ε),
        ``proportion`` (``epsilons / tokens`` over the corpus) and
        ``mean_sentence_proportion`` (the mean of the per-sentence shares, over
        sentences with at least one token). The paper found 14-23%.
    """
    epsilons = tokens = 0
    shares = []
    for target in targets:
        body = list(target)
        while body and body[-1] == eos_token:
            body.pop()
        while body and body[-1] == epsilon_token:
            body.pop()
        start = 0
        while start < len(body) and body[start] == start_token:
            start += 1
        body = body[start:]
        count = sum(1 for token in body if token == epsilon_token)
        epsilons += count
        tokens += len(body)
        if body:
            shares.append(count / len(body))
    return {
        "epsilons": epsilons,
        "tokens": tokens,
        "proportion": epsilons / tokens if tokens else 0.0,
        "mean_sentence_proportion": float(np.mean(shares)) if shares else 0.0,
    }


# ---- eflomal ----------------------------------------------------------------------------------

_EFLOMAL_HINT = (
    "align_with_eflomal needs the 'eflomal' package: `pip install eflomal` (it builds a "
    "small C extension, so a C compiler and Cython are needed). Alternatively align with "
    "any aligner that writes Pharaoh 'i-j' lines and read them with read_pharaoh()."
)


def align_with_eflomal(pairs: Sequence, cache_dir, *, direction: str = "forward",
                       model: int = 3, n_iterations: int | None = None,
                       n_samplers: int = 3, null_prior: float = 0.2) -> list[list[tuple[int, int]]]:
    """Word-aligns ``pairs`` with eflomal, caching the links in ``cache_dir``.

    Args:
        pairs: ``(source_tokens, target_tokens)`` per pair, token lists or
            whitespace-tokenized strings (tokens must contain no whitespace;
            ids work too). eflomal lowercases tokens.
        cache_dir: directory for the Pharaoh files, e.g. beside the data. The
            file name is a hash of the tokens and options, so the same corpus is
            aligned once; eflomal's sampler is not seeded, the cache is what
            makes repeated runs reproducible.
        direction: "forward" (links of the source→target model, like the
            paper's ``fast_align -d -o -v``) or "reverse" (the target→source
            model's links, still written as ``source-target``).
        model: ``eflomal.Aligner``'s model (3 = IBM1 + HMM + fertility).
        n_iterations: ``eflomal.Aligner``'s iterations.
        n_samplers: ``eflomal.Aligner``'s independent samplers.
        null_prior: ``eflomal.Aligner``'s prior of the NULL word.

    Returns:
        one list of ``(i, j)`` links per pair, checked to lie inside the pair.

    Raises:
        ImportError: with an installation hint when eflomal is missing.
        ValueError: for an unknown direction.
    """
    if direction not in ("forward", "reverse"):
        raise ValueError(f"direction must be 'forward' or 'reverse', got {direction!r}.")
    token_pairs = [(source.split() if isinstance(source, str) else list(source),
                    target.split() if isinstance(target, str) else list(target))
                   for source, target in pairs]
    for number, (source, target) in enumerate(token_pairs, 1):
        for token in list(source) + list(target):
            if any(character.isspace() for character in str(token)) or str(token) == "":
                raise ValueError(f"pair {number}: token {token!r} is empty or has whitespace.")
    options = dict(model=model, n_iterations=n_iterations, n_samplers=n_samplers,
                   null_prior=null_prior)
    digest = hashlib.sha256()
    digest.update(json.dumps(options, sort_keys=True).encode())
    for source, target in token_pairs:
        digest.update(" ".join(map(str, source)).encode("utf-8") + b"\t")
        digest.update(" ".join(map(str, target)).encode("utf-8") + b"\n")
    cache_dir = pathlib.Path(cache_dir)
    stem = f"eflomal-{digest.hexdigest()[:20]}"
    paths = {name: cache_dir / f"{stem}.{name}.links" for name in ("forward", "reverse")}
    if not paths[direction].exists():
        try:
            import eflomal
        except ImportError as error:
            raise ImportError(_EFLOMAL_HINT) from error
        cache_dir.mkdir(parents=True, exist_ok=True)
        sources = [" ".join(map(str, source)) for source, _ in token_pairs]
        targets = [" ".join(map(str, target)) for _, target in token_pairs]
        with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
            scratch_paths = {name: os.path.join(scratch, name) for name in paths}
            eflomal.Aligner(**options).align(
                sources, targets,
                links_filename_fwd=scratch_paths["forward"],
                links_filename_rev=scratch_paths["reverse"],
                quiet=True,
            )
            # Whole files appear at once, so an interrupted run leaves no half cache.
            for name, path in paths.items():
                os.replace(scratch_paths[name], path)
    return read_pharaoh(paths[direction], pairs=token_pairs)


# ---- ids and datasets ---------------------------------------------------------------------------


def _tokenize(tokenizer, texts):
    if not texts:
        return []
    return [list(map(int, row)) for row in tokenizer(list(texts))]


# Start pads at which `make_eager_id_pairs` also reports the ε share: none,
# the seed's add_epsilon.py (3) and the zoo's default (5).
EPSILON_REPORT_START_PADS = (0, 3, 5)


def make_eager_id_pairs(
    pairs: Sequence[tuple[str, str]],
    tokenizer,
    *,
    aligner: str | Callable | Sequence = "eflomal",
    cache_dir=None,
    start_pads: int = DEFAULT_START_PADS,
    special_ids: EagerSpecialIds | None = None,
):
    """Tokenizes text pairs and makes them eager feasible, as int32 id arrays.

    Args:
        pairs: ``(source, target)`` texts.
        tokenizer: a SentencePiece tokenizer from ``load_tokenizer``.
        aligner: "eflomal" (needs ``cache_dir``), "monotone" (:func:`monotone_links`),
            a callable ``(list of (source_ids, target_ids)) -> alignments``, or
            the alignments themselves (one link list per pair, over pieces).
        cache_dir: eflomal's cache directory.
        start_pads: see :func:`eager_feasible`.
        special_ids: default: ``eager_special_ids`` of the tokenizer's size.

    Returns:
        ``(id_pairs, stats)``: a list of ``(source_ids, target_ids)`` int32
        arrays of equal length, both ending with EOS (the model's
        ``source_ids`` and its labels), and :func:`epsilon_statistics` plus
        ``pairs`` and ``proportion_by_start_pads`` (``{pads: share}`` at
        ``EPSILON_REPORT_START_PADS`` and ``start_pads``).
    """
    from keras_attn_zoo.data.vocabulary import vocabulary_size

    if special_ids is None:
        special_ids = eager_special_ids(vocabulary_size(tokenizer))
    sources = _tokenize(tokenizer, [source for source, _ in pairs])
    targets = _tokenize(tokenizer, [target for _, target in pairs])
    piece_pairs = list(zip(sources, targets))
    if isinstance(aligner, str):
        if aligner == "eflomal":
            if cache_dir is None:
                raise ValueError("aligner='eflomal' needs a cache_dir.")
            alignments = align_with_eflomal(piece_pairs, cache_dir)
        elif aligner == "monotone":
            alignments = [monotone_links(len(s), len(t)) for s, t in piece_pairs]
        else:
            raise ValueError(f"Unknown aligner {aligner!r}; use 'eflomal' or 'monotone'.")
    elif callable(aligner):
        alignments = aligner(piece_pairs)
    else:
        alignments = list(aligner)
    if len(alignments) != len(piece_pairs):
        raise ValueError(
            f"{len(alignments)} alignments were given for {len(piece_pairs)} pairs."
        )
    def feasible_pairs(pads):
        made = []
        for number, ((source, target), links) in enumerate(zip(piece_pairs, alignments), 1):
            try:
                source, target, _ = eager_feasible(
                    source, target, links, pads,
                    start_token=special_ids.start_id, epsilon_token=special_ids.epsilon_id,
                    source_pad_token=special_ids.source_pad_id, eos_token=EOS_ID)
            except ValueError as error:
                raise ValueError(f"pair {number}: {error}") from None
            made.append((np.asarray(source, np.int32), np.asarray(target, np.int32)))
        return made

    def statistics(made):
        return epsilon_statistics(
            (target for _, target in made), epsilon_token=special_ids.epsilon_id,
            start_token=special_ids.start_id, eos_token=EOS_ID)

    id_pairs = feasible_pairs(start_pads)
    stats = statistics(id_pairs)
    stats["pairs"] = len(id_pairs)
    # Start pads absorb ε (each lets every link move one step later for
    # free), so the share depends on them: the paper's Table 1 does not say
    # with how many it counted (its caption only leaves the start pads
    # themselves out; the add_epsilon.py excerpt in the seed inserts 3).
    stats["proportion_by_start_pads"] = {
        pads: (stats["proportion"] if pads == start_pads
               else statistics(feasible_pairs(pads))["proportion"])
        for pads in sorted(set(EPSILON_REPORT_START_PADS) | {start_pads})}
    return id_pairs, stats


def eager_training_example(source_ids, target_ids):
    """``({"source_ids", "target_ids"}, labels)`` of one eager-feasible id pair.

    ``source_ids`` as given, ``target_ids`` = ``[BOS] + target[:-1]`` (the
    previous target token at each step), labels = the target: all three have
    the same length.
    """
    source_ids = np.asarray(source_ids, np.int32)
    labels = np.asarray(target_ids, np.int32)
    if source_ids.shape != labels.shape:
        raise ValueError(
            f"An eager pair needs equally long source and target, got {source_ids.shape[0]} "
            f"and {labels.shape[0]} tokens; run eager_feasible() first."
        )
    previous = np.concatenate([[BOS_ID], labels[:-1]]).astype(np.int32)
    return {"source_ids": source_ids, "target_ids": previous}, labels


def make_eager_dataset(id_pairs: Sequence, batch_size: int = 32, *, shuffle: bool = True,
                       seed: int = 0, length_multiple: int = 1):
    """Per-sentence batches for the default ``Trainer`` path.

    Elements are ``({"source_ids": int32[B, T], "target_ids": int32[B, T]},
    labels int32[B, T])``, 0-padded; pairs are sorted into batches of similar
    length after shuffling (``seed``: pass ``seed + epoch`` to reshuffle),
    padded to a multiple of ``length_multiple`` steps (8: few shapes for XLA).
    """
    import tensorflow as tf

    examples = [eager_training_example(source, target) for source, target in id_pairs]
    order = np.arange(len(examples))
    if shuffle:
        np.random.default_rng(seed).shuffle(order)
    # Chunks of 50 batches sorted by length: little padding, still random.
    chunk = batch_size * 50
    order = np.concatenate([
        sorted(order[start:start + chunk], key=lambda k: len(examples[k][1]))
        for start in range(0, len(order), chunk)
    ] or [order]).astype(int)
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    if shuffle:
        np.random.default_rng(seed + 1).shuffle(batches)

    def generate():
        for batch in batches:
            length = max(len(examples[k][1]) for k in batch)
            length = -(-length // length_multiple) * length_multiple
            padded = {name: np.zeros([len(batch), length], np.int32)
                      for name in ("source_ids", "target_ids", "labels")}
            for row, k in enumerate(batch):
                features, labels = examples[k]
                size = len(labels)
                padded["source_ids"][row, :size] = features["source_ids"]
                padded["target_ids"][row, :size] = features["target_ids"]
                padded["labels"][row, :size] = labels
            labels = padded.pop("labels")
            yield padded, labels

    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.data.Dataset.from_generator(
        generate, output_signature=({"source_ids": spec, "target_ids": spec}, spec))


def make_aligned_stream_dataset(id_pairs: Sequence, batch_size: int,
                                bptt: int = DEFAULT_BPTT, *, shuffle_seed=None):
    """"Aligned batching": the corpus as one stream cut into ``batch_size`` columns.

    With ``shuffle_seed`` (an int or a sequence of ints, e.g. ``(run seed,
    epoch)``) the pairs are first put in a random order drawn from it, as the
    reference shuffles the corpus before it concatenates; ``None`` keeps the
    corpus order. The order depends on the seed alone, so a resumed run that
    rebuilds the epoch's stream and skips its first windows sees the same
    stream. All sources are concatenated into one stream and all targets into another
    (eager pairs are equally long, so the streams line up), each cut into
    ``batch_size`` equal columns (the remainder is dropped), and the columns
    are cut into windows of ``bptt`` steps (the last one may be shorter).
    Window ``k + 1`` continues window ``k`` in every column, so a trainer that
    carries the LSTM state from one element to the next
    (``Trainer`` with the model's carried training state) back-propagates through ``bptt`` steps while
    the state flows through the whole stream, as in the paper.

    ``target_ids`` is the previous target token of the stream, except at the
    first token of each sentence, where it is BOS, as in per-sentence training
    and decoding (the paper's code feeds the previous sentence's EOS there,
    which its decoder also uses as BOS).

    Returns:
        An ordered (never shuffle its windows: they continue each other)
        ``tf.data.Dataset`` of
        ``({"source_ids": int32[B, t], "target_ids": int32[B, t]}, labels)``.
    """
    import tensorflow as tf

    if batch_size < 1 or bptt < 1:
        raise ValueError(f"batch_size and bptt must be >= 1, got {batch_size} and {bptt}.")
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(id_pairs))
        id_pairs = [id_pairs[k] for k in order]
    sources, previous, labels = [], [], []
    for source, target in id_pairs:
        features, pair_labels = eager_training_example(source, target)
        sources.append(features["source_ids"])
        previous.append(features["target_ids"])
        labels.append(pair_labels)
    total = sum(len(row) for row in labels)
    column_length = total // batch_size
    if column_length == 0:
        raise ValueError(
            f"The corpus has {total} tokens, fewer than batch_size={batch_size} columns."
        )
    streams = [
        np.concatenate(rows)[: column_length * batch_size].reshape(batch_size, column_length)
        for rows in (sources, previous, labels)
    ]
    starts = list(range(0, column_length, bptt))

    def window(stream, start):
        return stream[:, start:start + bptt]

    def generate():
        for start in starts:
            yield ({"source_ids": window(streams[0], start),
                    "target_ids": window(streams[1], start)},
                   window(streams[2], start))

    spec = tf.TensorSpec([batch_size, None], tf.int32)
    return tf.data.Dataset.from_generator(
        generate, output_signature=({"source_ids": spec, "target_ids": spec}, spec))


__all__ = [
    "DEFAULT_BPTT",
    "EOS_TOKEN",
    "EPSILON_TOKEN",
    "SOURCE_PAD_TOKEN",
    "START_TOKEN",
    "align_with_eflomal",
    "eager_feasible",
    "eager_training_example",
    "epsilon_statistics",
    "is_eager_feasible",
    "make_aligned_stream_dataset",
    "make_eager_dataset",
    "make_eager_id_pairs",
    "monotone_links",
    "read_pharaoh",
    "write_pharaoh",
]

"""Probes of one trained model: what the claims need from it, as a JSON-serialisable
dict the leaderboard stores in the cell's ``"probes"``.

The attention's entropy and its alignment error rate against eflomal's links
are measured here for every attention model; what one mechanism needs comes
from the `probe` of its paper's module (`papers.PAPERS`), given a
`ProbeContext`, so no mechanism is named here.
"""

import dataclasses

import hashlib
import json
import math
import pathlib

from keras_attn_zoo.evaluation import analysis
from keras_attn_zoo.evaluation import report
from keras_attn_zoo.evaluation.claims.papers import PAPERS


@dataclasses.dataclass
class ProbeContext:
    """What a paper's `probe(context)` may read: the model and its teacher-forced
    attention on the probed pairs.

    Attributes:
        model: the trained zoo model.
        pairs: the probed `(source, reference)` pairs (those the model accepts).
        make_batch: `probe_model`'s `make_batch`.
        batch_size: sentences per teacher-forced pass.
        stats: `report.attention_statistics` of `pairs`.
        out_dir: where images go (`pathlib.Path`, created).
        files: the image paths written, relative to `out_dir`; a probe appends.
        alignment_layer: the decoder layer the alignment is read from.
    """

    model: object
    pairs: list
    make_batch: object
    batch_size: int
    stats: dict
    out_dir: pathlib.Path
    files: list
    alignment_layer: int


def align_test_with_eflomal(train_pairs, test_pairs, cache_dir):
    """eflomal links of the test pairs, aligned together with the training pairs.

    eflomal is unsupervised: aligning the test sentences alone would give it
    too little statistics, so train and test are aligned in one run (cached
    by `models.eager.preprocessing.align_with_eflomal`) and the test pairs'
    links returned. Words are the whitespace-split words of the texts (what
    `analysis` and `report.alignment_quality` expect); the links are the
    forward (source -> target) model's, one source word per target word at
    most, like the attention's argmax links.

    Returns:
        One list of `(source word, target word)` links per test pair.
    """
    from keras_attn_zoo.models.eager.preprocessing import align_with_eflomal

    train_pairs, test_pairs = list(train_pairs), list(test_pairs)
    links = align_with_eflomal(train_pairs + test_pairs, cache_dir)
    return links[len(train_pairs):]


# The probes score AER on the first `PROBED_PAIRS` test pairs (`probe_model`'s
# max_pairs); the gold links file holds exactly those.
PROBED_PAIRS = 200
GOLD_ALIGNER = "eflomal model 3 (IBM1 + HMM + fertility), forward links, aligned with the training pairs"


def pairs_digest(pairs):
    """A fingerprint of `(source, reference)` pairs: the gold links name the pairs
    they link."""
    text = "\n".join(f"{source}\t{target}" for source, target in pairs)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def gold_links_record(train_pairs, test_pairs, cache_dir, count=PROBED_PAIRS):
    """eflomal's links of the first `count` test pairs (`align_test_with_eflomal`), as
    the record a gold links file keeps: aligned once and committed, so that every cell
    is scored against the same links (eflomal's sampler is unseeded: two runs, or two
    machines, give different links)."""
    test_pairs = list(test_pairs)[:count]
    links = align_test_with_eflomal(train_pairs, test_pairs, cache_dir)
    lines = [" ".join(f"{i}-{j}" for i, j in pair_links) for pair_links in links]
    return {"aligner": GOLD_ALIGNER, "pairs": len(test_pairs),
            "pairs_digest": pairs_digest(test_pairs),
            "sure_links": sum(len(pair_links) for pair_links in links),
            "links_digest": hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16],
            "links": lines}


def read_gold_links(path, test_pairs):
    """The Pharaoh lines of a gold links file, checked to link these test pairs (its
    first ``"pairs"``). Raises ValueError naming the file when they are other pairs."""
    record = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    pairs = list(test_pairs)[:record["pairs"]]
    if len(pairs) != record["pairs"] or pairs_digest(pairs) != record["pairs_digest"]:
        raise ValueError(f"{path} links other test pairs (digest {record['pairs_digest']} of "
                         f"{record['pairs']} pairs, these {pairs_digest(pairs)} of "
                         f"{len(pairs)}): delete it to align these, or use their data.")
    if len(record["links"]) != record["pairs"]:
        raise ValueError(f"{path} has {len(record['links'])} link lines for "
                         f"{record['pairs']} pairs.")
    return record


def _gold(item, pair):
    """An `Alignment` from a Pharaoh line, an `Alignment` or `(i, j)` links."""
    from keras_attn_zoo.data.alignments import Alignment
    from keras_attn_zoo.data.alignments import check_links
    from keras_attn_zoo.data.alignments import parse_pharaoh_line

    source, target = (len(text.split()) for text in pair)
    if isinstance(item, Alignment):
        return item
    if isinstance(item, str):
        return parse_pharaoh_line(item, source, target)
    links = [(int(i), int(j)) for i, j in item]
    check_links(links, source, target)
    return Alignment(links, set(links), set(links))


def _alignment(stats, pairs, links, layer):
    """`report.alignment_quality` plus the AER of a monotone alignment of the same sentences."""
    from keras_attn_zoo.models.eager.preprocessing import monotone_links

    gold = [_gold(item, pair) for item, pair in zip(links, pairs)]
    quality = report.alignment_quality(stats, pairs, gold, layer)
    skipped = {number - 1 for number in quality["skipped_lines"]}
    kept = [k for k in range(len(pairs)) if k not in skipped]
    if kept:
        diagonal = [set(monotone_links(len(pairs[k][0].split()), len(pairs[k][1].split())))
                    for k in kept]
        scores = analysis.alignment_scores(diagonal, [gold[k] for k in kept])
        quality["monotone_aer"] = None if math.isnan(scores["aer"]) else round(scores["aer"], 4)
    return quality


def probe_model(model, tokenizer, pairs, out_dir, *, model_name, make_batch,
                max_pairs=PROBED_PAIRS, source_links=None, batch_size=32):
    """What the claims need from one trained model, as a JSON-serialisable dict.

    Teacher forced on the references of the first `max_pairs` test pairs
    (those the model accepts; `report.fitting_pairs`), padding excluded.

    The result holds ``{"model", "pairs_probed", "pairs_skipped_too_long",
    "files", "unavailable"}`` and, where they apply:

    * every attention model: ``"cross_attention_entropy"`` (nats, per
      decoder layer, heads and real rows averaged; the fused weights for
      GMM), ``"cross_attention_entropy_mean"``,
      ``"cross_attention_entropy_by_length"`` (source words: <= 20,
      21-40, > 40, the GMM paper's Table 6), ``"entropy_per_layer"``
      (every slot: encoder/decoder self, GMM's dot-product and mixture
      parts);
    * with `source_links`: ``"aer"`` (`report.alignment_quality` of the
      penultimate decoder layer, the last for one layer, heads averaged,
      plus ``"monotone_aer"``, the AER of a monotone alignment of the same
      sentences);
    * what each paper's `probe` returns for this model (GMM's
      ``"gmm_gate_per_layer"``, the Weighted Transformer's
      ``"branch_weights"``, RAN's ``"ran_matrix_patterns"``; RNNsearch's heat
      maps under ``heatmaps/``): see the papers' modules.

    Args:
        model: a trained zoo model.
        tokenizer: its SentencePiece tokenizer (or a processor or `.model` path).
        pairs: `(source, reference)` test texts.
        out_dir: where the images go (created); paths in ``"files"`` are
            relative to it.
        model_name: the leaderboard's key, recorded in the result.
        make_batch: `pairs -> (source_ids, target_ids, source_pieces,
            target_pieces)`, i.e. `functools.partial(
            training.callbacks.teacher_forcing_batch, processor)` (passed in
            because evaluation ranks below training).
        max_pairs: how many pairs to probe.
        source_links: eflomal's (or any) word links of `pairs`, one entry per
            pair: a Pharaoh line, an `Alignment` or a list of `(i, j)`
            (`align_test_with_eflomal`); None: no AER.
        batch_size: sentences per teacher-forced pass.

    Returns:
        The probes, a JSON-serialisable dict (keys above).
    """
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.evaluation.attention import has_attention

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = list(pairs)[:max_pairs]
    links = None if source_links is None else list(source_links)[:max_pairs]
    if links is not None and len(links) != len(pairs):
        raise ValueError(f"{len(links)} source links for {len(pairs)} pairs: give one "
                         "alignment per pair.")
    files, unavailable = [], {}
    result = {"model": model_name, "pairs_probed": 0, "pairs_skipped_too_long": 0,
              "files": files, "unavailable": unavailable}
    if not has_attention(model):
        reason = (f"{type(model).__name__} has no attention weights: it reads the source "
                  "and writes the target at the same time.")
        for name in ("cross_attention_entropy", "aer", "heat maps"):
            unavailable[name] = reason
        return result
    processor = sentencepiece_processor(tokenizer)
    limit = model.max_decode_length
    kept = report.fitting_pairs(processor, pairs, limit, limit)
    result["pairs_skipped_too_long"] = len(pairs) - len(kept)
    pairs = [pairs[k] for k in kept]
    links = None if links is None else [links[k] for k in kept]
    result["pairs_probed"] = len(pairs)
    if not pairs:
        unavailable["attention"] = (f"no test pair fits the model's max_length {limit}.")
        return result

    stats = report.attention_statistics(model, pairs, make_batch, batch_size)
    buckets = analysis.length_buckets([len(source.split()) for source, _ in pairs],
                                      analysis.DEFAULT_ENTROPY_BOUNDARIES)
    summary = report.summarise_attention(stats, buckets)
    result["cross_attention_entropy"] = summary["per_layer"]["cross"]
    result["cross_attention_entropy_mean"] = summary["all"]["cross"]
    result["cross_attention_entropy_by_length"] = summary["by_length"]["cross"]
    result["entropy_per_layer"] = summary["per_layer"]
    layers = stats["cross"][0].shape[0]
    alignment_layer = layers - 2 if layers >= 2 else layers - 1

    if links is not None:
        result["aer"] = _alignment(stats, pairs, links, alignment_layer)
    else:
        unavailable["aer"] = ("no source links given (eflomal's links of the test "
                              "sentences: align_test_with_eflomal).")
    context = ProbeContext(model=model, pairs=pairs, make_batch=make_batch,
                           batch_size=batch_size, stats=stats, out_dir=out_dir, files=files,
                           alignment_layer=alignment_layer)
    for paper in PAPERS:
        result.update(paper.probe(context))
    return result

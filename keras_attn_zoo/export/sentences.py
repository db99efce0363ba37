"""Sentence splitting around the exported model (the models are trained on single
sentences; a paragraph sent as one input would come back as one short sentence).

The SavedModel signatures stay sentence-level (TF Serving proper loads them as
they are); the server and the CLI split each input with the Moses-derived
`sentence-splitter` package (its non-breaking prefixes keep "Dr. Müller kam am
3. Mai." together), translate the sentences (the CLI as one batch, the server
through its scheduler, `serving/scheduler.py`) and join the results.
"""

from __future__ import annotations

import functools

DEFAULT_LANGUAGE = "en"


def source_language(model_card):
    """The source language of a model card's ``direction`` ("de-en" -> "de")."""
    direction = (model_card or {}).get("direction") or ""
    return direction.split("-")[0] or DEFAULT_LANGUAGE


@functools.lru_cache(maxsize=None)
def _splitter(language):
    from sentence_splitter import SentenceSplitter
    from sentence_splitter import SentenceSplitterException

    try:
        return SentenceSplitter(language=language)
    except SentenceSplitterException:  # no prefix list for it: the English rules
        return SentenceSplitter(language=DEFAULT_LANGUAGE)


def split_sentences(text, language=DEFAULT_LANGUAGE):
    """``text`` -> its sentences; an empty or blank text is one empty sentence
    (so every input keeps exactly one output)."""
    sentences = [s for s in _splitter(language).split(text) if s.strip()]
    return sentences or [text]


def split_texts(texts, language=DEFAULT_LANGUAGE, enabled=True):
    """Flattens ``texts`` into sentences; returns ``(sentences, counts)`` where
    ``counts[i]`` is how many sentences text ``i`` gave (1 when disabled)."""
    if not enabled:
        return list(texts), [1] * len(texts)
    sentences, counts = [], []
    for text in texts:
        parts = split_sentences(text, language)
        sentences.extend(parts)
        counts.append(len(parts))
    return sentences, counts


def regroup(items, counts):
    """The inverse of `split_texts`' flattening: ``items`` in groups of ``counts``."""
    groups, offset = [], 0
    for count in counts:
        groups.append(items[offset:offset + count])
        offset += count
    return groups


def join_translations(translations):
    """Translated sentences of one input -> one text (empty ones dropped)."""
    return " ".join(t for t in translations if t.strip())

"""How fast trained models translate, timed side by side.

The leaderboard's speed columns and its papers' speed claims (RAN-ALL and the
eager translator against the Transformer, the eager translator against
RNNsearch) compare models timed in the same process, round by round
(`timed_rounds`), so that a change of the machine's load falls on every model
alike. Each search is a `Translator`'s traced `translate_with_options` on one
batch of text, the output ending at EOS as in use.
"""

import time

import numpy as np


def timed_search(translator, text, beam_size, length_penalty):
    """`(call, translations of a first, tracing call)` of one translator's beam
    search of `text` (a string tensor [B]); `call()` gives the output lengths."""
    import tensorflow as tf

    options = (tf.constant(beam_size, tf.int32), tf.constant(length_penalty, tf.float32),
               tf.constant(translator.max_length_a, tf.float32),
               tf.constant(translator.max_length_b, tf.float32))

    def call(key="length"):
        return translator.translate_with_options(text, *options)[key].numpy()

    return call, [t.decode("utf-8") for t in call("translation")]


def timed_rounds(searches, repeats):
    """`({name: median seconds}, {name: lengths})` of the searches `{name: (call,
    translations)}`, timed round by round: each round calls every search once, the
    order rotated by one each round (no search always runs first, after the same
    one), so that a change of the machine's load falls on all of them alike."""
    names = list(searches)
    times = {name: [] for name in names}
    lengths = {}
    for round_number in range(max(repeats, 1)):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            lengths[name] = searches[name][0]()
            times[name].append(time.perf_counter() - started)
    return {name: float(np.median(values)) for name, values in times.items()}, lengths


def timed_batch(tokenizer, sources, size):
    """`(text, source tokens)`: the first `size` of `sources` (cycled when there are
    fewer) as a string tensor, and their SentencePiece pieces counted."""
    import tensorflow as tf

    batch = [sources[i % len(sources)] for i in range(size)]
    pieces = tokenizer.tokenize(batch)
    pieces = pieces.to_list() if hasattr(pieces, "to_list") else pieces
    return (tf.constant([s.encode("utf-8") for s in batch]),
            int(sum(len(ids) for ids in pieces)))


def decoding_speed(translator, tokenizer, sources, *, batch_size, beam_size, repeats,
                   length_penalty, peers=None):
    """Sentences/s and tokens/s of `translator`'s traced beam search on a batch of
    `batch_size` of `sources`, the median of `repeats` rounds.

    `peers`: `{name: Translator}` timed on the same batch in the same rounds (each
    with its own length penalty); their ratios go under `decode_versus`. Returns
    `(row, {name or None: translations of the batch})`, None naming `translator`.
    """
    text, source_tokens = timed_batch(tokenizer, sources, batch_size)
    searches = {None: timed_search(translator, text, beam_size, length_penalty)}
    for name, peer in (peers or {}).items():
        searches[name] = timed_search(peer, text, beam_size, peer.length_penalty)
    seconds, lengths = timed_rounds(searches, repeats)
    own = seconds.pop(None)
    translations = {name: first for name, (_, first) in searches.items()}
    row = {"decode_sentences_per_second": round(batch_size / own, 2),
           "decode_source_tokens_per_second": round(source_tokens / own, 1),
           "decode_target_tokens_per_second": round(float(lengths[None].sum()) / own, 1),
           "decode_mean_target_length": round(float(lengths[None].mean()), 2),
           "decode_batch": batch_size, "decode_beam": beam_size}
    if seconds:
        # The same sentences: a ratio of sentences/s is one of source tokens/s.
        row["decode_versus"] = {
            name: {"peer_sentences_per_second": round(batch_size / value, 2),
                   "ratio": round(value / own, 4),
                   "peer_mean_target_length": round(float(lengths[name].mean()), 2)}
            for name, value in seconds.items()}
    return row, translations


def agreement(translations, hypotheses):
    """Share of a timed batch (`hypotheses`' sources, cycled) translated as
    `hypotheses` (a scored run's translations) are."""
    same = sum(t == hypotheses[i % len(hypotheses)] for i, t in enumerate(translations))
    return round(same / len(translations), 4)

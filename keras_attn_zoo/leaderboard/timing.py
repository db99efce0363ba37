"""The leaderboard's decoding speeds timed after its cells, in one process.

`time_seeds` times every model of a seed together, with the scored models
themselves (`speed-seed<N>.json`, which the speed claims read);
`retime_decoding` adds to finished cells the same-process ratios against the
speed peers that were trained after them.
"""

import datetime
import gc
import json
import pathlib

from keras_attn_zoo.leaderboard.cells import CELL_FILE
from keras_attn_zoo.leaderboard.cells import SPEED_PEERS
from keras_attn_zoo.leaderboard.cells import cell_dir
from keras_attn_zoo.leaderboard.cells import cell_name
from keras_attn_zoo.leaderboard.cells import read_hypotheses
from keras_attn_zoo.leaderboard.cells import speed_peers
from keras_attn_zoo.leaderboard.cells import timed_speed
from keras_attn_zoo.leaderboard.cells import trained_translator
from keras_attn_zoo.leaderboard.cells import write_json

SPEED_FILE = "speed-seed{seed}.json"


def _test_sources(board, model, seed, pairs):
    """The first `pairs` test sources of a cell's run, its tokenizer and its config."""
    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.workflow import load_corpus

    config = board.config_of(model, seed)
    sources = [s for s, _ in load_corpus(config).test[:pairs]]
    return sources, load_tokenizer(config.paths[0] / "vocab.model"), config


def _release_models():
    import keras

    keras.backend.clear_session()
    gc.collect()


def retime_decoding(board):
    """Adds the same-process decoding ratios (`decode_versus`) that finished cells of
    `board.models`/`seeds` lack because a speed peer's trained model was missing when
    the cell ran (the peer trained later, or its run dir lost and retrained).

    The cell's model and the peers, loaded from their run dirs, are timed on the cell's
    batch in the same rounds, as a cell times them. The cell's own first timing stays;
    each new entry says when and on which machine it was timed, and which share of the
    batch each model translates as its cell did: a retrained peer stands for its cell's
    model only as far as they agree.
    """
    from keras_attn_zoo.evaluation.decoding_speed import agreement

    for seed in board.seeds:
        for model in board.models:
            path = cell_dir(board.results_dir, model, seed) / CELL_FILE
            if not path.exists():
                continue
            cell = json.loads(path.read_text(encoding="utf-8"))
            timed = cell.get("decode_versus") or {}
            # Only peers with a cell of their own: their translations are compared.
            peers = speed_peers(board, model, seed, [
                p for p in SPEED_PEERS if p not in timed
                and (cell_dir(board.results_dir, p, seed) / CELL_FILE).exists()])
            if not peers:
                continue
            translator = trained_translator(board, model, seed)
            if translator is None:
                print(f"[{cell_name(model, seed)}] cannot retime: no model.keras in "
                      f"{board.output_dir / model / f'seed{seed}'}", flush=True)
                continue
            sources, tokenizer, config = _test_sources(board, model, seed,
                                                       cell["test_pairs"])
            row, translations = timed_speed(board, translator, tokenizer, sources,
                                            config.length_penalty, peers)
            retimed = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "command": board.command, "machine": board.machine(),
                       "sentences_per_second": row["decode_sentences_per_second"],
                       "agreement_with_cell": agreement(
                           translations[None], read_hypotheses(path.parent))}
            for peer, entry in row["decode_versus"].items():
                peer_hypotheses = read_hypotheses(cell_dir(board.results_dir, peer, seed))
                timed[peer] = {**entry, "retimed": {
                    **retimed, "peer_agreement_with_cell": agreement(translations[peer],
                                                                     peer_hypotheses)}}
                print(f"[{cell_name(model, seed)}] decoding {entry['ratio']}x the "
                      f"{peer}'s, timed in one process", flush=True)
            cell["decode_versus"] = timed
            write_json(path, cell)
            _release_models()


def time_seeds(board):
    """Times the decoding of every model of each seed in `board.seeds` in one process,
    round by round (`evaluation.decoding_speed.timed_rounds`), with the scored models
    themselves: each cell's model.keras from its run dir, checked to translate the
    timed batch as its cell did (`agreement_with_cell`; below 1.0 it is not the model
    the cell scored, and its speed is kept apart). Writes
    `<results-dir>/speed-seed<N>.json` with the machine's matmul rate and load before
    and after; the report's speed ratios come from these files where they exist."""
    from keras_attn_zoo.evaluation.claims.engine import BASELINE
    from keras_attn_zoo.evaluation.decoding_speed import agreement
    from keras_attn_zoo.evaluation.decoding_speed import timed_batch
    from keras_attn_zoo.evaluation.decoding_speed import timed_rounds
    from keras_attn_zoo.evaluation.decoding_speed import timed_search

    for seed in board.seeds:
        translators, cells = {}, {}
        for model in board.models:
            path = cell_dir(board.results_dir, model, seed) / CELL_FILE
            translator = trained_translator(board, model, seed) if path.exists() else None
            if translator is None:
                print(f"[{cell_name(model, seed)}] not timed: no cell or no model.keras",
                      flush=True)
                continue
            translators[model] = translator
            cells[model] = json.loads(path.read_text(encoding="utf-8"))
        if not translators:
            continue
        first = next(iter(cells.values()))
        sources, tokenizer, _ = _test_sources(board, first["model"], seed,
                                              first["test_pairs"])
        text, source_tokens = timed_batch(tokenizer, sources, board.decode_batch)
        machine_before = board.machine()
        searches = {model: timed_search(translator, text, board.decode_beam,
                                        translator.length_penalty)
                    for model, translator in translators.items()}
        seconds, lengths = timed_rounds(searches, board.decode_repeats)
        entries = {}
        for model, value in seconds.items():
            same = agreement(searches[model][1],
                             read_hypotheses(cell_dir(board.results_dir, model, seed)))
            entries[model] = {"sentences_per_second": round(board.decode_batch / value, 2),
                              "source_tokens_per_second": round(source_tokens / value, 1),
                              "mean_target_length": round(float(lengths[model].mean()), 2),
                              "agreement_with_cell": same}
        if BASELINE in seconds:
            for model, entry in entries.items():
                entry["ratio_to_transformer"] = round(seconds[BASELINE] / seconds[model], 4)
        record = {"seed": seed, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "command": board.command, "batch": board.decode_batch,
                  "beam": board.decode_beam, "rounds": max(board.decode_repeats, 1),
                  "source_tokens": source_tokens, "machine_before": machine_before,
                  "machine_after": board.machine(), "models": entries}
        path = board.results_dir / SPEED_FILE.format(seed=seed)
        write_json(path, record)
        print(f"seed {seed}: {len(entries)} models timed together -> {path}", flush=True)
        _release_models()


def load_speed_records(results_dir):
    """`{seed: record}` of the `time_seeds` files in `results_dir`."""
    records = {}
    for path in sorted(pathlib.Path(results_dir).glob(SPEED_FILE.format(seed="*"))):
        record = json.loads(path.read_text(encoding="utf-8"))
        records[record["seed"]] = {**record, "file": path.name}
    return records

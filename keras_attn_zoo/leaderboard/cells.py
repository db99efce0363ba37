"""A leaderboard cell: one (model, seed) trained, evaluated, timed and probed.

The cell trains by `workflow.training_run` (the code behind
`recipes/train_wmt.py`, with the same data and caps for every model and its
family's recipe, one SentencePiece vocabulary per size), translates the whole
test split with the run's `Translator`, times that search against its speed
peers in one process (`evaluation.decoding_speed`), probes the model for its paper's claim
(`evaluation.claims.probe_model`) and writes `<results-dir>/<model>/seed<N>/cell.json`
with its translations beside it (`hypotheses.txt.gz`).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gzip
import hashlib
import json
import os
import pathlib
import shutil
import time
from typing import Callable
from typing import Optional

from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
from keras_attn_zoo.training.curve import logged_training_loss

CELL_FILE = "cell.json"
HYPOTHESES_FILE = "hypotheses.txt.gz"
# Source-length buckets (words) of the BLEU-by-length column; the last is the
# "longest bucket" of the GMM claim (Ding's test sentences: 1-50 words, most under 15).
LENGTH_BOUNDARIES = (5, 10, 15, 20)
# The references of the papers' speed claims (RAN-ALL and eager against the
# Transformer, eager against RNNsearch): timed in the same process as the cell's
# model, round by round, so that the ratio does not depend on the machine's load.
SPEED_PEERS = ("transformer", "RNNsearch")


@dataclasses.dataclass
class Leaderboard:
    """The leaderboard's settings, as `recipes/leaderboard.py` parsed them.

    Args:
        output_dir: the cells' run directories (checkpoints, logs, model.keras).
        results_dir: the cells' files, translations and probes, the table and plots.
        config_of: `(model, seed) -> RunConfig` of a cell (the recipe parses it
            with train_wmt's own parser).
        recipe_of: `model -> ` the name of its family's recipe (`workflow.RECIPES`),
            as its cell records it.
        models: the `LEADERBOARD_MODELS` names to train, time or retime.
        seeds: their seeds.
        protocol: "converge" (early stopping under the caps) or "fixed" (a fixed
            budget, the last weights).
        steps: the step cap (converge) or budget (fixed; None: `budget`'s minutes).
        cap_minutes: converge: the training wall-time cap of every cell.
        budget: the budget as the cells and the table name it.
        decode_batch: sentences of the timed decoding batch.
        decode_beam: its beam.
        decode_repeats: timed rounds; the median is kept.
        machine: `() -> dict` of the machine's measured speed and load now.
        command: the command line, kept in what it writes.
        repo: the repository: paths inside it are shown relative to it.
        epsilon_share_file: the ε share of the data by start pads (read by the
            ε claim where the eager cells lack it), or None.
    """

    output_dir: pathlib.Path
    results_dir: pathlib.Path
    config_of: Callable
    recipe_of: Callable = lambda model: "default"
    models: list = dataclasses.field(default_factory=list)
    seeds: list = dataclasses.field(default_factory=list)
    protocol: str = "converge"
    steps: Optional[int] = None
    cap_minutes: float = 240.0
    budget: str = ""
    decode_batch: int = 100
    decode_beam: int = DEFAULT_BEAM_SIZE
    decode_repeats: int = 3
    machine: Callable = dict
    command: str = ""
    repo: Optional[pathlib.Path] = None
    epsilon_share_file: Optional[pathlib.Path] = None


def cell_name(model, seed):
    """`<model>/seed<seed>`, as the progress lines name a cell."""
    return f"{model}/seed{seed}"


def cell_dir(root, model, seed):
    """`<root>/<model>/seed<seed>`: a cell's run dir (root `output_dir`) or its
    result files (root `results_dir`)."""
    return root / model / f"seed{seed}"


def write_json(path, record):
    """Writes a cell, timing or table record (indented, UTF-8) atomically."""
    from keras_attn_zoo.files import write_atomically

    write_atomically(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def read_hypotheses(directory):
    """The test translations a cell kept in `directory`, one per test pair."""
    text = gzip.decompress((directory / HYPOTHESES_FILE).read_bytes()).decode("utf-8")
    return text.split("\n")[:-1]


def load_cells(results_dir):
    """Every finished cell under `results_dir`, with its directory (`_dir`)."""
    cells = []
    for path in sorted(pathlib.Path(results_dir).glob(f"*/seed*/{CELL_FILE}")):
        cell = json.loads(path.read_text(encoding="utf-8"))
        cell["_dir"] = path.parent
        cells.append(cell)
    return cells


def store_cell(cell):
    """Writes back a cell read by `load_cells` (without its `_dir`)."""
    write_json(cell["_dir"] / CELL_FILE, {k: v for k, v in cell.items() if k != "_dir"})


def references_digest(references):
    """A fingerprint of the test references: paired tests need the same sentences."""
    return hashlib.sha256("\n".join(references).encode("utf-8")).hexdigest()[:16]


def test_split(config, corpus=None):
    """The test pairs a cell translates (the first `eval_limit` of them)."""
    from keras_attn_zoo.workflow import load_corpus

    test = (corpus or load_corpus(config)).test
    return test if config.eval_limit is None else test[:config.eval_limit]


# ---- training ---------------------------------------------------------------------------------


def shared_vocabulary(board, config):
    """One SentencePiece model for every cell of its size (trained once, then copied)."""
    from keras_attn_zoo.data.vocabulary import train_sentencepiece
    from keras_attn_zoo.workflow import load_corpus

    path = board.output_dir / f"vocab-{config.vocab_size}.model"
    if not path.exists():
        corpus = load_corpus(config)
        board.output_dir.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp.model")
        train_sentencepiece(corpus.train, temporary, vocab_size=config.vocab_size)
        temporary.replace(path)
    return path


def train_cell(board, config):
    """The run's results: trained now (or resumed), or read back when it finished before."""
    from keras_attn_zoo.workflow import training_run

    run_dir = config.paths[0]
    results_path = run_dir / "results.json"
    if results_path.exists() and (run_dir / "model.keras").exists():
        print(f"  trained before ({results_path}); evaluating", flush=True)
        return json.loads(results_path.read_text(encoding="utf-8"))
    vocabulary = shared_vocabulary(board, config)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "vocab.model").exists():
        shutil.copyfile(vocabulary, run_dir / "vocab.model")
    # The test split is translated once, by `evaluate_cell`, with the model.keras written.
    # converge: early stopping on the valid split, the best weights; fixed (the
    # committed table's protocol): the last weights, the dev monitor's curve.
    if board.protocol == "fixed":
        config = dataclasses.replace(config, valid_every=0)
    elif not config.valid_every:
        raise SystemExit("--protocol converge needs early stopping: --valid-every >= 1.")
    else:
        from keras_attn_zoo.training.curve import remaining_cap_minutes

        config = dataclasses.replace(config, time_budget_minutes=remaining_cap_minutes(
            run_dir, board.cap_minutes))
    return training_run(dataclasses.replace(config, eval_limit=0), machine=board.machine())


# ---- a recipe grid's run as a cell's training ------------------------------------------------

# A family's recipe grid (recipes/recipe_experiments.py, under the table's caps)
# trains, at seed 0, the run the table then asks for with the chosen recipe. A
# cell can adopt that finished run instead of training it again. These RunConfig
# fields only name, monitor or decode (or are compared otherwise: the cap by the
# grid's `cap_minutes`, the precision as the run resolved it in its identity);
# every other one must be equal.
ADOPTION_FREE_FIELDS = frozenset({
    "name", "output_dir", "log_dir", "export_dir", "no_export", "quiet", "eval_limit",
    "test_src", "test_tgt", "beam_size", "length_penalty", "length_penalty_choices",
    "source_padding_injection", "eval_every", "no_monitoring", "time_budget_minutes",
    "mixed_precision", "model_options"})
# The grid's own outputs: the cell writes its model and results anew from the
# adopted checkpoints (the best one, restored by early stopping).
ADOPTION_LEFT_BEHIND = ("results.json", "model.keras")
ADOPTION_FILE = "adopted_from.json"


def _as_json(value):
    return json.loads(json.dumps(value, sort_keys=True))


def adoption_differences(recorded_config, recorded_identity, config, recorded_run=None):
    """What keeps a run of `recorded_config` (a grid result's `config`) and
    `recorded_identity` (its `run_identity.json`) from being `config`'s training:
    "field X there, Y here" for each setting outside `ADOPTION_FREE_FIELDS` and
    each identity field that differ (none: the same run).

    The early-stopping floor (`min_steps`; a run from before it existed had
    none) may differ when `recorded_run` (the grid result) shows it did not
    matter: its valid curve, stopped by `config`'s rule, ends where the run
    ended, and for the same reason."""
    from keras_attn_zoo.workflow import run_identity

    recorded, wanted = _as_json(recorded_config), _as_json(dataclasses.asdict(config))
    recorded.setdefault("min_steps", 0)
    floor_free = recorded_run is not None and stops_alike(recorded_run, config)
    differences = [f"{field} {recorded.get(field)!r} there, {wanted[field]!r} here"
                   for field in sorted(wanted)
                   if field not in ADOPTION_FREE_FIELDS and recorded.get(field) != wanted[field]
                   and not (field == "min_steps" and floor_free)]
    identity = _as_json(recorded_identity)
    differences += [f"{field} {identity.get(field)!r} there, {value!r} here"
                    for field, value in sorted(_as_json(run_identity(config)).items())
                    if identity.get(field) != value]
    return list(dict.fromkeys(differences))


def stops_alike(result, config):
    """Whether `config`'s early stopping, run over the valid curve of grid result
    `result`, stops where that run stopped: converged at its last step, or not
    converged when a cap stopped it."""
    from keras_attn_zoo.training.early_stopping import truncate_at_convergence

    curve = result.get("valid_curve") or []
    if not curve:
        return False
    stopped, converged = truncate_at_convergence(
        curve, config.valid_metric, config.patience, config.min_improvement,
        config.min_steps)
    if result.get("stop_reason") == "converged":
        return converged and stopped[-1]["step"] == curve[-1]["step"]
    return not converged


def adopt_run(board, model, seed, result_path, run_dir=None):
    """Makes a finished recipe-grid run cell `(model, seed)`'s training.

    `result_path` is the grid cell's result file; `run_dir` its run directory
    (default: the `output_dir` the result records, relative to the working
    directory). Refused, naming why, unless the cell has no run directory yet,
    the table converges under the grid's caps, the run stopped by converging or
    at one of the caps (resumed under the same caps, it trains no step), every
    training, early-stopping and data setting of the two is equal, its
    `run_identity.json` is the cell's and its vocabulary the table's. The run
    directory is copied, without the grid's model and results, under a
    temporary name and renamed, with `adopted_from.json` naming its source; the
    cell then resumes it, trains no step, and evaluates its best checkpoint as
    any cell. Returns the cell's run directory.
    """
    from keras_attn_zoo.workflow import RUN_IDENTITY_FILE

    result_path = pathlib.Path(result_path)
    name = cell_name(model, seed)
    config = board.config_of(model, seed)
    target = config.paths[0]
    if target.exists():
        raise SystemExit(f"[{name}] has a run of its own in {target}: a cell adopts a "
                         "run only before it starts training.")
    if board.protocol != "converge":
        raise SystemExit("only the converge protocol's cells can adopt a grid's run.")
    result = json.loads(result_path.read_text(encoding="utf-8"))
    if "config" not in result or "steps_budget" not in result:
        raise SystemExit(f"{result_path} is not a recipe grid cell's result file.")
    caps = (result["steps_budget"], result.get("cap_minutes"))
    if caps != (board.steps, board.cap_minutes):
        raise SystemExit(f"{result_path} was trained under caps {caps[0]} steps / "
                         f"{caps[1]} min, the table's are {board.steps} steps / "
                         f"{board.cap_minutes:g} min.")
    if result.get("stop_reason") not in ("converged", "max_steps", "time_budget"):
        raise SystemExit(f"{result_path}'s run stopped by {result.get('stop_reason')!r}: "
                         "resumed, it would train on, so the cell must train itself.")
    run_dir = pathlib.Path(run_dir or result["config"]["output_dir"])
    identity_path = run_dir / RUN_IDENTITY_FILE
    if not identity_path.exists():
        raise SystemExit(f"{run_dir} holds no run ({RUN_IDENTITY_FILE} missing): give the "
                         "grid's run directory.")
    differences = adoption_differences(
        result["config"], json.loads(identity_path.read_text(encoding="utf-8")), config,
        recorded_run=result)
    if differences:
        raise SystemExit(f"{result_path} trained another run than cell [{name}]: "
                         + "; ".join(differences) + ".")
    vocabulary = shared_vocabulary(board, config)
    if (run_dir / "vocab.model").read_bytes() != vocabulary.read_bytes():
        raise SystemExit(f"{run_dir}/vocab.model is not the table's vocabulary {vocabulary}.")
    temporary = target.with_name(f"{target.name}.adopting-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    shutil.copytree(run_dir, temporary, ignore=shutil.ignore_patterns(*ADOPTION_LEFT_BEHIND))
    write_json(temporary / ADOPTION_FILE, {
        "result": str(result_path), "run_dir": str(run_dir), "cell": result.get("cell"),
        "stop_reason": result["stop_reason"], "steps": result.get("steps"),
        "best_step": result.get("best_step")})
    temporary.replace(target)
    print(f"[{name}] adopted {run_dir} ({result_path})", flush=True)
    return target


# ---- the trained models ---------------------------------------------------------------------


def trained_translator(board, model_name, seed):
    """The `Translator` of a cell's trained model (its run dir), or None when absent."""
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.workflow import run_translator

    run_dir = cell_dir(board.output_dir, model_name, seed)
    if not (run_dir / "model.keras").exists():
        return None
    return run_translator(board.config_of(model_name, seed),
                          keras.saving.load_model(run_dir / "model.keras"),
                          load_tokenizer(run_dir / "vocab.model"))


def speed_peers(board, model_name, seed, names=SPEED_PEERS):
    """`{peer: Translator}` of the trained speed peers of the same seed (their run dirs)."""
    peers = {}
    for peer in names:
        translator = None if peer == model_name else trained_translator(board, peer, seed)
        if translator is not None:
            peers[peer] = translator
    return peers


def timed_speed(board, translator, tokenizer, sources, length_penalty, peers=None):
    """`evaluation.decoding_speed` at the leaderboard's batch, beam and rounds."""
    from keras_attn_zoo.evaluation.decoding_speed import decoding_speed

    return decoding_speed(translator, tokenizer, sources, batch_size=board.decode_batch,
                          beam_size=board.decode_beam, repeats=board.decode_repeats,
                          length_penalty=length_penalty, peers=peers)


# ---- the gold links of the alignment probe ---------------------------------------------------


def gold_links_path(results_dir, config, test):
    """Where the table's gold links live: beside the tables' results directories,
    named by the data and the probed test pairs, shared by every protocol and preset."""
    from keras_attn_zoo.evaluation.claims.probes import PROBED_PAIRS
    from keras_attn_zoo.evaluation.claims.probes import pairs_digest

    probed = list(test)[:PROBED_PAIRS]
    data = config.data.replace(":", "-").replace("/", "-")
    return pathlib.Path(results_dir).parent / (f"gold-links-{data}-test{len(probed)}-"
                                               f"{pairs_digest(probed)[:8]}.json")


def test_links(board, config, corpus, test):
    """`(links, gold)`: the gold word links of the probed test pairs from the table's
    gold links file (aligned by eflomal and written by the first cell that needs them,
    then committed and read by every cell), and the entry a cell keeps to say which
    file it was scored against; `(None, None)` without eflomal."""
    from keras_attn_zoo.evaluation.claims.probes import gold_links_record
    from keras_attn_zoo.evaluation.claims.probes import read_gold_links
    from keras_attn_zoo.files import write_atomically

    path = gold_links_path(board.results_dir, config, test)
    if not path.exists():
        try:
            record = gold_links_record(corpus.train, test, board.output_dir / "eflomal-cache")
        except ImportError as error:
            print(f"  no AER: {error}", flush=True)
            return None, None
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"  gold links written once: {path} ({record['sure_links']} links)", flush=True)
    try:
        record = read_gold_links(path, test)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    gold = {"file": path.name, "links_digest": record["links_digest"],
            "sure_links": record["sure_links"]}
    return record["links"], gold


def align_gold(board):
    """Writes (or checks) the table's gold links file, as the first cell would;
    returns its entry."""
    from keras_attn_zoo.workflow import load_corpus

    config = board.config_of(board.models[0], board.seeds[0])
    corpus = load_corpus(config)
    return test_links(board, config, corpus, test_split(config, corpus))[1]


# ---- evaluation -------------------------------------------------------------------------------


def evaluate_cell(board, config, directory, model_name):
    """Translations, scores, decoding speed and probes of the trained model."""
    import keras

    from keras_attn_zoo.data.vocabulary import load_tokenizer
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.evaluation import claims
    from keras_attn_zoo.evaluation.attention import has_attention
    from keras_attn_zoo.evaluation.analysis import length_buckets
    from keras_attn_zoo.evaluation.analysis import scores_by_bucket
    from keras_attn_zoo.evaluation.scores import corpus_scores
    from keras_attn_zoo.training.callbacks import teacher_forcing_batch
    from keras_attn_zoo.files import write_atomically
    from keras_attn_zoo.workflow import load_corpus
    from keras_attn_zoo.workflow import run_translator

    run_dir = config.paths[0]
    model = keras.saving.load_model(run_dir / "model.keras")
    tokenizer = load_tokenizer(run_dir / "vocab.model")
    corpus = load_corpus(config)
    test = test_split(config, corpus)
    if not test:
        raise SystemExit("the leaderboard scores the test split: the data has none.")
    sources, references = [s for s, _ in test], [t for _, t in test]
    translator = run_translator(config, model, tokenizer)
    started = time.monotonic()
    hypotheses = translator.translate_texts(sources)
    row = corpus_scores(hypotheses, references)
    row.update(test_pairs=len(test), test_references=references_digest(references),
               eval_seconds=round(time.monotonic() - started, 1),
               beam_size=config.beam_size, length_penalty=config.length_penalty)
    buckets = length_buckets([len(s.split()) for s in sources], LENGTH_BOUNDARIES)
    row["bleu_by_source_length"] = scores_by_bucket(hypotheses, references, buckets)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / HYPOTHESES_FILE,
                     gzip.compress("".join(h + "\n" for h in hypotheses).encode("utf-8"),
                                   mtime=0))
    row.update(timed_speed(board, translator, tokenizer, sources, config.length_penalty,
                           speed_peers(board, model_name, config.seed))[0])
    links, gold = (test_links(board, config, corpus, test) if has_attention(model)
                   else (None, None))
    make_batch = functools.partial(teacher_forcing_batch, sentencepiece_processor(tokenizer))
    row["probes"] = claims.probe_model(model, tokenizer, test, directory / "probes",
                                       model_name=model_name, make_batch=make_batch,
                                       source_links=links)
    if gold and "aer" in row["probes"]:
        row["probes"]["aer"]["gold_links"] = gold  # every cell: the same file
    return row


# The training results a cell keeps.
RESULT_KEYS = (
    "params", "steps", "train_seconds", "train_target_tokens_per_second", "final_loss",
    "data", "epochs_completed", "learning_curve", "machine", "epsilon_proportion",
    "resumed_from_step", "training_clock_seconds",
    # Why training stopped (converged, max_steps, time_budget) and, with early
    # stopping, the best evaluation (its weights are the ones scored).
    "stop_reason", "best_step", "best_valid_bleu", "best_valid_chrf", "valid_curve",
    "early_stopping",
    # The model's own measurements during training (`training.curve.training_probes`).
    "training_probes")


def run_cell(board, model, seed):
    """Trains, evaluates and probes one cell unless its file exists; returns the cell."""
    directory = cell_dir(board.results_dir, model, seed)
    path = directory / CELL_FILE
    if path.exists():
        print(f"[{cell_name(model, seed)}] finished before: {path}", flush=True)
        return json.loads(path.read_text(encoding="utf-8"))
    config = board.config_of(model, seed)
    print(f"[{cell_name(model, seed)}] {config.model} ({config.builder_options or 'preset'}),"
          f" {board.budget}", flush=True)
    started = time.monotonic()
    results = train_cell(board, config)
    cell = {"model": model, "builder": config.model, "model_options": config.builder_options,
            "seed": seed, "preset": config.preset, "recipe": board.recipe_of(model),
            "budget": board.budget,
            "protocol": board.protocol,
            "caps": ({"steps": board.steps, "minutes": board.cap_minutes}
                     if board.protocol == "converge" else None),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": board.command, "status": "ok",
            "config": {k: v for k, v in dataclasses.asdict(config).items()
                       if not k.endswith(("_src", "_tgt"))}}
    cell.update({key: results.get(key) for key in RESULT_KEYS})
    cell["converged"] = cell.get("stop_reason") == "converged"
    adopted = config.paths[0] / ADOPTION_FILE
    if adopted.exists():  # trained by a recipe grid's cell (`adopt_run`)
        cell["adopted_from"] = json.loads(adopted.read_text(encoding="utf-8"))
    # The logged batches' losses: cells of one seed saw the same batches, so
    # their losses compare step by step (the last loss alone is one batch).
    cell["training_loss_logged"] = logged_training_loss(results["log_dir"])
    if results.get("epsilon_proportion") is not None:
        cell["eager"] = {"epsilon_share": results["epsilon_proportion"],
                         # {start pads: share}: the share falls as they grow
                         "epsilon_share_by_start_pads":
                             results.get("epsilon_proportion_by_start_pads")}
    # Every cell must share the vocabulary: its fingerprint is in the table's settings.
    cell["vocabulary"] = hashlib.sha256(
        (config.paths[0] / "vocab.model").read_bytes()).hexdigest()[:16]
    cell.update(evaluate_cell(board, config, directory, model))
    cell["wall_seconds"] = round(time.monotonic() - started, 1)
    write_json(path, cell)
    print(f"[{cell_name(model, seed)}] BLEU {cell['bleu']} chrF {cell['chrf']} -> {path}",
          flush=True)
    return cell

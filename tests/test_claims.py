"""The seed papers' claims: probes of one model (tiny, untrained) and verdicts over seeds."""

import ast
import functools
import json
import math
import pathlib

import numpy as np
import pytest

from keras_attn_zoo.evaluation import claims
from keras_attn_zoo.evaluation.claims import ran
from keras_attn_zoo.evaluation.claims import weighted
from keras_attn_zoo.evaluation.claims.bahdanau import HEATMAP_PAIRS
from keras_attn_zoo.evaluation.significance import CONFIRMED
from keras_attn_zoo.evaluation.significance import INCONCLUSIVE
from keras_attn_zoo.evaluation.significance import NOT_CONFIRMED
from tests.conftest import make_synthetic_parallel_sentences

PAIRS = make_synthetic_parallel_sentences(5, seed=11)


def _setup(tokenizer):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor
    from keras_attn_zoo.data.vocabulary import vocabulary_size
    from keras_attn_zoo.training.callbacks import teacher_forcing_batch

    processor = sentencepiece_processor(tokenizer)
    return vocabulary_size(tokenizer), processor, functools.partial(
        teacher_forcing_batch, processor)


def _probe(model, tokenizer, out_dir, make_batch, name, **options):
    result = claims.probe_model(model, tokenizer, PAIRS, out_dir, model_name=name,
                                make_batch=make_batch, **options)
    json.dumps(result)  # what the leaderboard stores
    for path in result["files"]:
        assert (out_dir / path).is_file() and (out_dir / path).stat().st_size > 0, path
    return result


# ---- probes --------------------------------------------------------------------------------


def test_the_shared_modules_name_no_paper():
    """A paper's module joins `papers.PAPERS`, and the claims and probes follow it;
    the modules every paper uses import none of them."""
    from keras_attn_zoo.evaluation.claims.papers import PAPERS

    assert claims.CLAIMS == [claim for paper in PAPERS for claim in paper.CLAIMS]
    assert all(callable(paper.probe) for paper in PAPERS)
    papers = {paper.__name__ for paper in PAPERS}
    directory = pathlib.Path(claims.__file__).parent
    for shared in ("__init__.py", "probes.py", "engine.py", "checks.py"):
        imported = set()
        for node in ast.walk(ast.parse((directory / shared).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        assert not imported & papers, (shared, sorted(imported & papers))



def test_gmm_probe_gives_entropy_and_one_gate_per_decoder_layer(tiny_tokenizer, tmp_path):
    from keras_attn_zoo.models import MODEL_BUILDERS

    size, processor, make_batch = _setup(tiny_tokenizer)
    model = MODEL_BUILDERS["gmm_transformer"](size, preset="tiny")
    result = _probe(model, tiny_tokenizer, tmp_path, make_batch, "GMM")
    longest = max(len(processor.encode_as_ids(source)) + 1 for source, _ in PAIRS)
    assert result["pairs_probed"] == len(PAIRS)
    entropy = result["cross_attention_entropy"]
    assert len(entropy) == 2  # tiny: 2 decoder layers
    assert all(0.0 < value <= math.log(longest) for value in entropy)
    assert 0.0 < result["cross_attention_entropy_mean"] <= math.log(longest)
    # The Gaussian part is sharper than the dot-product part of an untrained model.
    parts = result["entropy_per_layer"]
    assert np.mean(parts["cross_mixture"]) < np.mean(parts["cross_dot_product"])
    gates = result["gmm_gate_per_layer"]
    assert len(gates) == 2 and all(0.0 <= g <= 1.0 for g in gates)
    assert "branch_weights" not in result and "ran_matrix_patterns" not in result
    assert "aer" in result["unavailable"] and result["files"] == []


def test_weighted_probe_total_variation_of_kappa_and_alpha(tiny_tokenizer, tmp_path):
    from keras_attn_zoo.models import MODEL_BUILDERS
    from keras_attn_zoo.models.weighted_transformer import branched_layers

    size, _, make_batch = _setup(tiny_tokenizer)
    model = MODEL_BUILDERS["weighted_transformer"](size, preset="tiny")
    result = _probe(model, tiny_tokenizer, tmp_path, make_batch, "weighted",
                    max_pairs=2)
    rows = result["branch_weights"]
    assert len(rows) == 4  # encoder self-attention and cross-attention, 2 layers each
    for row in rows:  # initialised uniform
        assert row["kappa_tv_from_uniform"] == pytest.approx(0.0, abs=1e-6)
        assert row["alpha_tv_from_uniform"] == pytest.approx(0.0, abs=1e-6)
    layer = next(iter(branched_layers(model).values()))
    layer.kappa.assign([0.95, 0.05])
    layer.alpha.assign([0.2, 0.8])
    moved = _probe(model, tiny_tokenizer, tmp_path, make_batch, "weighted",
                   max_pairs=2)["branch_weights"]
    changed = next(row for row in moved if row["layer"] == layer.name)
    assert changed["kappa_tv_from_uniform"] == pytest.approx(0.45, abs=1e-6)
    assert changed["alpha_tv_from_uniform"] == pytest.approx(0.3, abs=1e-6)
    assert weighted.total_variation_from_uniform([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.75)


def test_attention_pattern_of_local_and_uniform_matrices():
    identity = ran.attention_pattern(np.eye(12))
    assert identity["diagonal"] == pytest.approx(1.0) and identity["band"] == pytest.approx(1.0)
    assert identity["diagonal"] > identity["uniform_diagonal"] == pytest.approx(1 / 12)
    assert identity["band"] > identity["uniform_band"]
    assert identity["lift"] == pytest.approx(1.0) and identity["looks_like_paper"]
    uniform = ran.attention_pattern(np.full((12, 12), 1 / 12))
    assert uniform["lift"] == pytest.approx(0.0, abs=1e-12)
    assert not uniform["looks_like_paper"]
    # The causal decoder: uniform over keys 0..i; the first token counts as pattern.
    causal_uniform = np.tril(np.ones((12, 12)))
    causal = ran.attention_pattern(causal_uniform, causal=True)
    assert causal["lift"] == pytest.approx(0.0, abs=1e-12)
    first = np.zeros((12, 12))
    first[:, 0] = 1.0
    first_token = ran.attention_pattern(first, causal=True)
    assert first_token["first_token"] == pytest.approx(1.0)
    assert first_token["looks_like_paper"]
    # Mass far from the diagonal is below uniform: a negative lift.
    far = ran.attention_pattern(np.eye(12)[::-1])
    assert far["lift"] < 0 and not far["looks_like_paper"]


def test_ran_probe_writes_every_matrix_and_its_pattern(tiny_tokenizer, tmp_path):
    from keras_attn_zoo.models import MODEL_BUILDERS

    size, _, make_batch = _setup(tiny_tokenizer)
    model = MODEL_BUILDERS["ran_transformer"](size, preset="tiny", apply_to="all",
                                              max_length=32)
    result = _probe(model, tiny_tokenizer, tmp_path, make_batch, "RAN-ALL", max_pairs=3)
    patterns = result["ran_matrix_patterns"]
    assert set(patterns["per_slot"]) == {"encoder_self", "decoder_self"}
    assert len(patterns["matrices"]) == 2 * 2 * 2  # slots x layers x heads
    for entry in patterns["matrices"]:
        assert entry["size"] == patterns["size"] and 2 <= patterns["size"] <= 32
        assert 0.0 <= entry["diagonal"] <= entry["band"] <= 1.0 + 1e-6
        assert entry["causal"] == (entry["slot"] == "decoder_self")
    assert sorted(result["files"]) == ["ran/decoder_self.png", "ran/encoder_self.png"]
    assert all((tmp_path / name).stat().st_size > 0 for name in result["files"])
    assert len(result["cross_attention_entropy"]) == 2


def _own_argmax_links(model, make_batch):
    from keras_attn_zoo.evaluation import analysis
    from keras_attn_zoo.evaluation.attention import attention_maps

    source, target, source_pieces, target_pieces = make_batch(PAIRS)
    cross = attention_maps(model, source, target)["cross"]  # [1, B, 1, T, S]
    links = []
    for row in range(len(PAIRS)):
        weights = cross[0, row].mean(axis=0)
        words = analysis.aggregate_to_words(weights, source_pieces[row][:-1],
                                            target_pieces[row])
        links.append(sorted(analysis.argmax_links(words)))
    return links


def test_bahdanau_probe_aer_and_heat_maps(tiny_tokenizer, tmp_path):
    from keras_attn_zoo.models import MODEL_BUILDERS

    size, _, make_batch = _setup(tiny_tokenizer)
    model = MODEL_BUILDERS["bahdanau_rnn"](size, preset="tiny")
    own = _own_argmax_links(model, make_batch)
    # Its own links as Pharaoh lines: a perfect alignment.
    lines = [" ".join(f"{i}-{j}" for i, j in links) for links in own]
    result = _probe(model, tiny_tokenizer, tmp_path, make_batch, "RNNsearch",
                    source_links=lines)
    aer = result["aer"]
    assert aer["sentences"] == len(PAIRS) and aer["layer"] == 0
    assert aer["aer"] == 0.0 and aer["precision"] == 1.0 and aer["recall"] == 1.0
    assert 0.0 <= aer["monotone_aer"] <= 1.0
    assert result["files"] == [f"heatmaps/sentence_{k}.png" for k in range(3)]
    # Every target word linked elsewhere: nothing in common.
    disjoint = []
    for (source, _), links in zip(PAIRS, own):
        words = len(source.split())
        disjoint.append([((i + 1) % words, j) for i, j in links])
    result = claims.probe_model(model, tiny_tokenizer, PAIRS, tmp_path / "b",
                                model_name="RNNsearch", make_batch=make_batch,
                                source_links=disjoint)
    assert result["aer"]["aer"] == 1.0
    # The maps are drawn on the hand-written pairs (committed with the cells; the test
    # split is not), the same whichever test pairs are probed.
    one = claims.probe_model(model, tiny_tokenizer, PAIRS[:1], tmp_path / "c",
                             model_name="RNNsearch", make_batch=make_batch)
    assert one["files"] == result["files"] and len(one["files"]) == len(HEATMAP_PAIRS)
    for name in one["files"]:
        assert (tmp_path / "c" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with pytest.raises(ValueError, match="2 source links for 5 pairs"):
        claims.probe_model(model, tiny_tokenizer, PAIRS, tmp_path, model_name="x",
                           make_batch=make_batch, source_links=lines[:2])


def test_eager_probe_says_why_nothing_is_measured(tiny_tokenizer, tmp_path):
    from keras_attn_zoo.models import MODEL_BUILDERS
    from keras_attn_zoo.models.eager import eager_vocabulary_size

    size, _, make_batch = _setup(tiny_tokenizer)
    model = MODEL_BUILDERS["eager_translator"](eager_vocabulary_size(size), preset="tiny")
    result = _probe(model, tiny_tokenizer, tmp_path, make_batch, "eager")
    assert "cross_attention_entropy" not in result and result["files"] == []
    assert "no attention weights" in result["unavailable"]["cross_attention_entropy"]


def test_eflomal_links_of_the_test_pairs_only(tmp_path):
    pytest.importorskip("eflomal")
    train = make_synthetic_parallel_sentences(60, seed=1)
    test = make_synthetic_parallel_sentences(4, seed=2)
    links = claims.align_test_with_eflomal(train, test, tmp_path)
    assert len(links) == len(test)
    for (source, target), pair_links in zip(test, links):
        assert pair_links
        for i, j in pair_links:
            assert 0 <= i < len(source.split()) and 0 <= j < len(target.split())
    # Cached: the same links again, without eflomal's unseeded sampler.
    assert claims.align_test_with_eflomal(train, test, tmp_path) == links


# ---- verdicts over seeds ---------------------------------------------------------------------


def _cell(model, seed, **fields):
    return {"model": model, "seed": seed, "status": "ok", "stop_reason": "converged",
            **fields}


def _versus(difference, p_value):
    return {"versus_transformer": {"bleu_difference": difference, "bleu_p_value": p_value,
                                   "chrf_difference": 0.0, "chrf_p_value": 0.5}}


def _row(verdicts, fragment):
    return next(row for row in verdicts if fragment in row["claim"])


def _transformers(**fields):
    return [_cell("transformer", seed, bleu=10.0, params=1000, **fields) for seed in range(3)]


@pytest.mark.parametrize("differences, p_values, expected", [
    ([0.6, 0.8, 0.5], [0.01, 0.02, 0.03], CONFIRMED),
    ([-0.6, -0.8, -0.5], [0.01, 0.02, 0.03], NOT_CONFIRMED),
    ([0.6, -0.8, 0.1], [0.01, 0.02, 0.5], INCONCLUSIVE),
])
def test_ran_d_verdict_follows_the_seeds(differences, p_values, expected):
    cells = _transformers() + [_cell("RAN-D", seed, **_versus(d, p))
                               for seed, (d, p) in enumerate(zip(differences, p_values))]
    row = _row(claims.claim_verdicts(cells), "RAN-D >= Transformer")
    assert row["verdict"] == expected
    assert row["numbers"]["bleu_difference"] == differences
    assert "3 seeds" in row["measurement"]


def test_missing_models_are_not_measured_and_failed_cells_do_not_count():
    cells = _transformers() + [_cell("RAN-D", 0, status="failed", **_versus(1.0, 0.01))]
    verdicts = claims.claim_verdicts(cells)
    assert len(verdicts) == len(claims.CLAIMS)
    row = _row(verdicts, "RAN-D >= Transformer")
    assert row["verdict"] == INCONCLUSIVE
    assert row["measurement"] == "not measured: no finished RAN-D cell"
    assert _row(verdicts, "fewer steps")["measurement"].startswith("not measured:")
    json.dumps(verdicts)
    markdown = claims.verdicts_markdown(verdicts)
    lines = markdown.splitlines()
    assert lines[0] == "| paper | claim | measurement | verdict |"
    assert len(lines) == 2 + len(verdicts)


def test_competitive_is_decided_on_bleu_and_the_parameter_count_only_reported():
    cells = _transformers(config={"max_length": 128}) + [
        _cell("RAN-E", seed, params=900, **_versus(-0.2 + 0.05 * seed, 0.3))
        for seed in range(3)] + [
        _cell("RAN-ALL", seed, params=1100, **_versus(-1.5 - 0.1 * seed, 0.001))
        for seed in range(3)]
    verdicts = claims.claim_verdicts(cells)
    ran_e = _row(verdicts, "RAN-E is competitive")
    assert ran_e["verdict"] == CONFIRMED  # within 0.5 BLEU, fewer parameters or not
    assert "set by max_length" in ran_e["measurement"] and "not tested" in ran_e["measurement"]
    ran_all = _row(verdicts, "RAN-ALL is competitive")
    assert ran_all["verdict"] == NOT_CONFIRMED  # significantly below by more than 0.5
    assert ran_all["numbers"]["params"] == [1100] * 3


def test_cells_at_the_cap_leave_a_claim_untested_not_refuted():
    capped = [_cell("RNNsearch", s, stop_reason="max_steps",
                    probes={"aer": {"aer": 0.8, "monotone_aer": 0.6, "sentences": 10}})
              for s in range(3)]
    row = _row(claims.claim_verdicts(capped), "word alignment")
    assert row["verdict"] == "untested: not converged" and row["at_cap"] == NOT_CONFIRMED
    assert row["measurement"].startswith("Not converged: RNNsearch seeds 0, 1, 2 (step cap)")
    assert "(at the cap: not confirmed)" in claims.verdicts_markdown([row])
    assert [e["seed"] for e in row["numbers"]["not_converged"]] == [0, 1, 2]
    # A fixed-step cell (no early stopping) did not converge either.
    fixed = [dict(c, stop_reason=None) for c in capped]
    row = _row(claims.claim_verdicts(fixed), "word alignment")
    assert row["verdict"] == "untested: not converged"
    assert "(fixed steps)" in row["measurement"]
    # The verdict at the cap goes through the seed rules too: 2 of 3 split seeds.
    split = _transformers() + [_cell("RAN-D", s, stop_reason="max_steps", **_versus(d, p))
                               for s, (d, p) in enumerate([(0.9, 0.001), (0.8, 0.001),
                                                           (0.7, 0.5)])]
    row = _row(claims.claim_verdicts(split), "RAN-D >= Transformer")
    assert row["at_cap"] == INCONCLUSIVE and row["at_cap_provisional"] == CONFIRMED
    assert "Transformer" not in row["measurement"].split(";")[0]  # converged: not listed
    assert claims.verdicts_markdown([row]).endswith(
        "| untested: not converged (at the cap: inconclusive at this scale, provisional: "
        "confirmed) |")
    # Three converged seeds decide; a fourth at its cap is left out and named.
    converged = [dict(c, stop_reason="converged", seed=s + 1,
                      probes={"aer": {"aer": 0.4, "monotone_aer": 0.6, "sentences": 10}})
                 for s, c in enumerate(capped)]
    row = _row(claims.claim_verdicts(converged + capped[:1]), "word alignment")
    assert row["verdict"] == CONFIRMED and row["numbers"]["seeds"] == [1, 2, 3]
    assert "Left out, not converged: RNNsearch seed 0 (step cap)." in row["measurement"]
    # The ε share is a property of the data: no convergence needed.
    eager = [_cell("eager", s, stop_reason="time_budget",
                   eager={"epsilon_share": 0.2, "epsilon_share_by_start_pads": {"3": 0.2}})
             for s in range(3)]
    assert _row(claims.claim_verdicts(eager), "ε share")["verdict"] == CONFIRMED


def test_a_verdict_on_split_seeds_needs_five_and_the_seed_test_is_holm_corrected():
    # Two of three seeds significantly better, one not: split, 3 seeds: withheld.
    cells = _transformers() + [_cell("RAN-D", s, **_versus(d, p)) for s, (d, p) in
                               enumerate([(0.9, 0.001), (0.8, 0.001), (0.7, 0.5)])]
    row = _row(claims.claim_verdicts(cells), "RAN-D >= Transformer")
    assert row["verdict"] == INCONCLUSIVE and row["provisional"] == CONFIRMED
    assert "its seeds split: 3 of the 5 seeds" in row["measurement"]
    assert row["numbers"]["outcomes"] == [True, True, None]
    # Five seeds, four better: the split is allowed and the t-test over seeds passes.
    five = _transformers() + [_cell("transformer", s, bleu=10.0) for s in (3, 4)] + [
        _cell("RAN-D", s, **_versus(d, p)) for s, (d, p) in
        enumerate([(0.9, 0.001), (0.8, 0.001), (0.1, 0.5), (0.7, 0.001), (1.0, 0.001)])]
    row = _row(claims.claim_verdicts(five), "RAN-D >= Transformer")
    assert row["verdict"] == CONFIRMED
    assert row["numbers"]["seed_test"]["p_holm"] < 0.05
    # Seeds that agree in sign but spread widely: the t-test over seeds fails.
    noisy = _transformers() + [_cell("RAN-D", s, **_versus(d, 0.001))
                               for s, d in enumerate([0.1, 3.0, 0.2])]
    row = _row(claims.claim_verdicts(noisy), "RAN-D >= Transformer")
    assert row["verdict"] == INCONCLUSIVE and "seed-level test" in row["measurement"]


def test_the_per_seed_bootstrap_p_values_are_holm_adjusted_over_the_table():
    # Alone, three tests at p 0.005 stay significant (Holm: 0.015); beside nine more
    # per-seed tests of the table (at p 0.04) they are not (0.005 x 12 = 0.06).
    others = [_cell(model, s, **_versus(0.5, 0.04)) for model in ("HC-SA", "RAN-E", "GMM")
              for s in range(3)]
    cells = _transformers() + [_cell("Syn-R", s, **_versus(-d, 0.005))
                               for s, d in enumerate([0.6, 0.5, 0.7])]
    row = _row(claims.claim_verdicts(cells), "Random Synthesizer")
    assert row["numbers"]["bleu_p_holm"] == pytest.approx([0.015] * 3)
    assert row["numbers"]["outcomes"] == [True] * 3
    row = _row(claims.claim_verdicts(cells + others), "Random Synthesizer")
    assert row["numbers"]["bleu_p_holm"] == pytest.approx([0.06] * 3)
    assert row["numbers"]["outcomes"] == [None] * 3 and row["verdict"] == INCONCLUSIVE


def test_the_entropy_sentence_says_higher_when_it_is_higher():
    cells = [_cell("transformer", s, probes={"cross_attention_entropy_mean": 1.0})
             for s in range(3)]
    cells += [_cell("GMM", s, probes={"cross_attention_entropy_mean": 1.3})
              for s in range(3)]
    row = _row(claims.claim_verdicts(cells), "entropy")
    assert "GMM's is 30.0% ± 0.0% higher (3 seeds)" in row["measurement"]
    assert "reduction" not in row["measurement"] and row["verdict"] == NOT_CONFIRMED


def test_speed_ratios_are_paired_by_seed():
    cells = [_cell("transformer", s, decode_sentences_per_second=10.0 + s,
                   decode_source_tokens_per_second=100.0) for s in range(3)]
    cells += [_cell("RAN-ALL", s, decode_sentences_per_second=1.25 * (10.0 + s))
              for s in range(3)]
    cells += [_cell("eager", s, decode_source_tokens_per_second=105.0)
              for s in range(3)]
    verdicts = claims.claim_verdicts(cells)
    ran = _row(verdicts, "RAN-ALL decodes faster")
    assert ran["verdict"] == CONFIRMED and ran["numbers"]["ratio"] == [1.25] * 3
    assert _row(verdicts, "source tokens per second of the Transformer")[
        "verdict"] == INCONCLUSIVE  # 1.05x: faster, far from 3x


@pytest.mark.parametrize("gap, expected", [(0.03, CONFIRMED), (0.10, NOT_CONFIRMED)])
def test_eager_bleu_gap(gap, expected):
    cells = [_cell("RNNsearch", s, bleu=20.0, params=100) for s in range(3)]
    cells += [_cell("eager", s, bleu=20.0 * (1 - gap), params=110,
                    eager={"epsilon_share": 0.04,
                           "epsilon_share_by_start_pads": {"0": 0.3, "3": 0.2, "5": 0.04}})
              for s in range(3)]
    verdicts = claims.claim_verdicts(cells)
    row = _row(verdicts, "BLEU at most 4.8% below an attention model")
    assert row["verdict"] == expected
    assert row["numbers"]["relative_gap"] == pytest.approx([gap] * 3)
    assert _row(verdicts, "BLEU at most 4.8% below the Transformer")[
        "verdict"] == INCONCLUSIVE  # no Transformer cells
    # Read at the paper's 3 start pads (20%), not at the cell's 5 (4%); one number.
    epsilon = _row(verdicts, "ε share")
    assert epsilon["verdict"] == CONFIRMED and epsilon["numbers"]["epsilon_share"] == 0.2
    assert "3 start pads" in epsilon["measurement"] and "not over seeds" in epsilon["measurement"]
    assert "seeds" not in epsilon["numbers"]
    # Cells that lack the pads' shares: the data's own measurement, named.
    for cell in cells:
        if cell["model"] == "eager":
            cell["eager"] = {"epsilon_share": 0.04}
    assert _row(claims.claim_verdicts(cells), "ε share")["measurement"].startswith(
        "not measured: no ε share at the paper's 3 start pads")
    measured = {"epsilon_share": {"epsilon_share_by_start_pads": {"3": 0.0774},
                                  "source": "eager_epsilon_share-x.json"}}
    epsilon = _row(claims.claim_verdicts(cells, measured), "ε share")
    assert epsilon["verdict"] == NOT_CONFIRMED and "7.7%" in epsilon["measurement"]
    assert "(eager_epsilon_share-x.json)" in epsilon["measurement"]


def _curve(bleus, every=200):
    return [{"step": every * (k + 1), "minutes": k, "bleu": b} for k, b in enumerate(bleus)]


@pytest.mark.parametrize("weighted, expected", [
    ([2.0, 4.0, 6.0, 6.5, 6.4], CONFIRMED),      # reaches 6.0 at step 600 against 1000
    ([1.0, 2.0, 3.0, 4.0, 5.0], NOT_CONFIRMED),  # never reaches 6.0
    ([1.0, 2.0, 3.0, 4.0, 6.0], NOT_CONFIRMED),  # reaches it at the same step
])
def test_weighted_fewer_steps_from_two_curves(weighted, expected):
    transformer = _curve([1.0, 2.0, 3.0, 5.0, 6.0])
    cells = [_cell("transformer", s, learning_curve=transformer) for s in range(3)]
    cells += [_cell("weighted", s, learning_curve=_curve(weighted))
              for s in range(3)]
    row = _row(claims.claim_verdicts(cells), "fewer steps")
    assert row["verdict"] == expected
    first = row["numbers"]["per_seed"][0]
    assert first["transformer_steps"] == 1000 and first["target_bleu"] == 6.0
    if expected == CONFIRMED:
        assert first["weighted_steps"] == 600 and first["ratio"] == pytest.approx(0.6)


def test_interpolated_steps_to_reach():
    assert claims.weighted.steps_to_reach(_curve([1.0, 3.0]), 2.0) == pytest.approx(300)
    assert claims.weighted.steps_to_reach(_curve([1.0, 3.0]), 4.0) is None


def test_probe_based_claims():
    def probes(**values):
        return {"probes": values}

    branch = [{"layer": "a", "kappa": [0.4, 0.2, 0.2, 0.2], "kappa_tv_from_uniform": 0.2,
               "alpha_tv_from_uniform": 0.1}]
    gold = {"file": "gold-links-ding-test10-x.json", "links_digest": "abc"}
    cells = [_cell("transformer", s, **probes(cross_attention_entropy_mean=2.0,
                                               aer={"aer": 0.6, "sentences": 10,
                                                    "gold_links": gold}))
             for s in range(3)]
    cells += [_cell("GMM", s, **probes(
        cross_attention_entropy_mean=1.5, gmm_gate_per_layer=[0.2, 0.6],
        aer={"aer": 0.62, "sentences": 10, "gold_links": gold})) for s in range(3)]
    cells += [_cell("weighted", s, steps=40, config={"learning_rate": 2e-3, "warmup_steps": 10},
                    **probes(branch_weights=branch)) for s in range(3)]
    cells += [_cell("RNNsearch", s, **probes(
        aer={"aer": 0.4, "monotone_aer": 0.7, "sentences": 10})) for s in range(3)]
    local = {"per_slot": {"encoder_self": {"matrices": 4, "share_like_paper": 0.75}},
             "matrices": [{"slot": "encoder_self", "lift": 0.5}]}
    flat = {"per_slot": {"decoder_self": {"matrices": 4, "share_like_paper": 0.25}},
            "matrices": [{"slot": "decoder_self", "lift": 0.1}]}
    cells += [_cell("RAN-E", s, **probes(ran_matrix_patterns=local)) for s in range(3)]
    cells += [_cell("RAN-D", 0, **probes(ran_matrix_patterns=flat))]
    verdicts = claims.claim_verdicts(cells)
    assert _row(verdicts, "entropy")["verdict"] == CONFIRMED  # 25% lower
    assert _row(verdicts, "Bottom decoder layers")["verdict"] == CONFIRMED
    alignment = _row(verdicts, "Table 7")
    assert alignment["verdict"] == NOT_CONFIRMED  # GMM's AER is higher
    assert "against the gold links of gold-links-ding-test10-x.json" in alignment["measurement"]
    assert _row(verdicts, "κ and α")["verdict"] == CONFIRMED
    assert _row(verdicts, "word alignment")["verdict"] == CONFIRMED
    patterns = _row(verdicts, "patterns")
    # 3 of 4 cells like the paper: the cells split, and 4 are fewer than 5.
    assert patterns["verdict"] == INCONCLUSIVE and patterns["provisional"] == CONFIRMED
    assert "3 of 4 cells" in patterns["measurement"]
    # The issue's reading (lower layers on the Gaussian part) is the paper's opposite.
    for cell in cells:
        if cell["model"] == "GMM":
            cell["probes"]["gmm_gate_per_layer"] = [0.7, 0.3]
    assert _row(claims.claim_verdicts(cells), "Bottom decoder layers")[
        "verdict"] == NOT_CONFIRMED


@pytest.mark.parametrize("gates, expected", [
    ([0.2, 0.6], CONFIRMED), ([0.7, 0.3], NOT_CONFIRMED),
    # The first converged GMM cell: the lowest layer's mean gate is an unmoved gate's 0.5.
    ([0.4997, 0.6016], INCONCLUSIVE),
    ([0.42, 0.44], INCONCLUSIVE), ([0.52, 0.51], NOT_CONFIRMED)])
def test_gmm_gate_claim_needs_a_margin_from_the_unmoved_gate(gates, expected):
    cells = [_cell("transformer", s) for s in range(3)]
    cells += [_cell("GMM", s, probes={"gmm_gate_per_layer": gates}) for s in range(3)]
    row = _row(claims.claim_verdicts(cells), "Bottom decoder layers")
    assert row["verdict"] == expected


@pytest.mark.parametrize("difference, p_better, p_worse, expected", [
    (1.5, 0.01, 0.99, CONFIRMED), (1.5, 0.2, 0.8, INCONCLUSIVE),
    (-1.0, 0.99, 0.01, NOT_CONFIRMED), (0.3, 0.01, 0.99, INCONCLUSIVE)])
def test_longest_decile_decides_by_margin_and_signed_bootstrap(difference, p_better, p_worse,
                                                               expected):
    entry = {"sentences": 131, "min_source_words": 17, "bleu_difference": difference,
             "interval": [difference - 1, difference + 1], "p_better": p_better,
             "p_worse": p_worse}
    cells = [_cell("transformer", s) for s in range(3)]
    cells += [_cell("GMM", s, longest_decile_versus_transformer=entry) for s in range(3)]
    row = _row(claims.claim_verdicts(cells), "longest source sentences")
    assert row["verdict"] == expected and row["numbers"]["sentences"] == [131] * 3
    assert "131 sentences of >= 17 source words" in row["measurement"]


def test_the_longest_tenth_keeps_ties_and_the_subset_test_sees_a_known_gap():
    from keras_attn_zoo.evaluation.significance import longest_share
    from keras_attn_zoo.evaluation.significance import subset_comparison

    indices, shortest = longest_share([3, 9, 5, 9, 1, 2, 7, 4, 6, 8, 9, 2], share=0.1)
    assert shortest == 9 and indices == [1, 3, 10]  # ceil(1.2) = 2, ties at 9 kept
    references = [f"the house {k} is red and the cat sat on the mat" for k in range(60)]
    worse = [" ".join(r.split()[:4]) for r in references]
    result = subset_comparison(worse, references, references, list(range(0, 60, 2)),
                               n_samples=200)
    assert result["sentences"] == 30 and result["bleu"] == pytest.approx(100.0)
    assert result["bleu_difference"] > 50 and result["p_better"] < 0.05
    assert result["p_worse"] > 0.95
    assert result["interval"][0] <= result["bleu_difference"] <= result["interval"][1]


def test_speed_ratios_timed_in_one_process_win_over_separate_cells():
    # Separate cells say 1.25x, but the rounds timed side by side say 1.0x (the
    # Transformer's cell ran on a busier machine): the same-process ratio decides.
    cells = [_cell("transformer", s, decode_sentences_per_second=8.0) for s in range(3)]
    cells += [_cell("RAN-ALL", s, decode_sentences_per_second=10.0,
                    decode_versus={"transformer": {"ratio": 1.0}}) for s in range(3)]
    ran = _row(claims.claim_verdicts(cells), "RAN-ALL decodes faster")
    assert ran["numbers"]["ratio"] == [1.0] * 3 and ran["numbers"]["same_process"]
    assert ran["verdict"] == NOT_CONFIRMED and "one process" in ran["measurement"]


def test_a_speed_ratio_timed_after_its_cells_says_how_far_the_models_still_agree():
    retimed = {"agreement_with_cell": 1.0, "peer_agreement_with_cell": 0.97}
    cells = [_cell("transformer", s, decode_sentences_per_second=8.0) for s in range(3)]
    cells += [_cell("RAN-ALL", s, decode_sentences_per_second=10.0, decode_versus={
        "transformer": {"ratio": 1.3, **({"retimed": retimed} if s == 1 else {})}})
        for s in range(3)]
    ran = _row(claims.claim_verdicts(cells), "RAN-ALL decodes faster")
    assert ran["numbers"]["retimed_seeds"] == [1] and ran["verdict"] == CONFIRMED
    assert ("Seed 1 timed after its cells (leaderboard --retime-decoding); share of the "
            "timed batch each model translates as its cell did (below 100%: retrained, not "
            "the model its cell scored): RAN-ALL 100%, Transformer 97%."
            ) in ran["measurement"]


def test_fewer_than_three_seeds_give_a_provisional_verdict_only():
    cells = _transformers() + [_cell("RAN-D", seed, **_versus(0.9, 0.01)) for seed in (0, 1)]
    row = _row(claims.claim_verdicts(cells), "RAN-D >= Transformer")
    assert row["verdict"] == INCONCLUSIVE and row["provisional"] == CONFIRMED
    assert row["measurement"].endswith(
        "Provisional: confirmed on 2 of the 3 seeds a verdict needs.")
    cells.append(_cell("RAN-D", 2, **_versus(0.9, 0.01)))
    row = _row(claims.claim_verdicts(cells), "RAN-D >= Transformer")
    assert row["verdict"] == CONFIRMED and "provisional" not in row
    # The RAN patterns pool the RAN models' cells, but still need three seeds.
    local = {"per_slot": {"encoder_self": {"matrices": 4, "share_like_paper": 0.75}},
             "matrices": [{"slot": "encoder_self", "lift": 0.5}]}
    pooled = [_cell(model, 0, probes={"ran_matrix_patterns": local})
              for model in ("RAN-E", "RAN-D", "RAN-ALL")]
    row = _row(claims.claim_verdicts(pooled), "patterns")
    assert row["verdict"] == INCONCLUSIVE and row["provisional"] == CONFIRMED


def test_kappa_alpha_movement_is_tested_against_adam_driven_by_noise():
    """Noise alone moves κ/α under Adam by about the learning rate per step: the
    null grows with the steps, and a movement inside it counts against."""
    from keras_attn_zoo.evaluation.claims.weighted import noise_null
    from keras_attn_zoo.evaluation.claims.weighted import null_p_value

    short, long = noise_null(4, 2, 20, 2e-3, 5), noise_null(4, 2, 200, 2e-3, 5)
    assert len(short) == 200 and np.all(np.diff(short) >= 0)
    assert 0.0 < np.median(short) < np.median(long) < 0.1
    # The same arguments, the same draws (seeded).
    assert np.array_equal(noise_null(4, 2, 20, 2e-3, 5, seed=0), short)
    assert null_p_value(long, 0.5) == pytest.approx(1 / 201)
    assert null_p_value(long, 0.0) == 1.0
    branch = [{"layer": k, "kappa": [0.25] * 4, "kappa_tv_from_uniform": float(np.median(long)),
               "alpha_tv_from_uniform": float(np.median(long))} for k in "ab"]
    cells = [_cell("weighted", s, steps=200, config={"learning_rate": 2e-3, "warmup_steps": 5},
                   probes={"branch_weights": branch}) for s in range(3)]
    row = _row(claims.claim_verdicts(cells), "κ and α")
    assert row["verdict"] == NOT_CONFIRMED and row["numbers"]["outcomes"] == [False] * 3
    assert "gradients with no preference among branches" in row["measurement"]


def test_aer_pairs_only_cells_scored_against_the_same_gold_links():
    def aer(value, digest):
        gold = {"file": "gold.json", "links_digest": digest} if digest else None
        return {"probes": {"aer": {"aer": value, "sentences": 10, "gold_links": gold}}}

    cells = [_cell("transformer", s, **aer(0.6, "one")) for s in range(3)]
    cells += [_cell("GMM", s, **aer(0.4, "one" if s else "other")) for s in range(3)]
    row = _row(claims.claim_verdicts(cells), "Table 7")
    assert row["verdict"] == INCONCLUSIVE and "different or unrecorded gold links" in row[
        "measurement"]
    cells[3] = _cell("GMM", 0, **aer(0.4, None))  # links aligned per cell, not recorded
    assert "not measured" in _row(claims.claim_verdicts(cells), "Table 7")["measurement"]
    cells[3] = _cell("GMM", 0, **aer(0.4, "one"))
    assert _row(claims.claim_verdicts(cells), "Table 7")["verdict"] == CONFIRMED


def test_gold_links_are_written_once_and_refuse_other_pairs(tmp_path):
    from keras_attn_zoo.evaluation.claims.probes import gold_links_record
    from keras_attn_zoo.evaluation.claims.probes import read_gold_links

    pytest.importorskip("eflomal")
    train = make_synthetic_parallel_sentences(60, seed=1)
    test = make_synthetic_parallel_sentences(6, seed=2)
    record = gold_links_record(train, test, tmp_path, count=4)
    assert record["pairs"] == 4 and len(record["links"]) == 4
    assert record["sure_links"] == sum(len(line.split()) for line in record["links"])
    path = tmp_path / "gold.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    assert read_gold_links(path, test)["links"] == record["links"]  # the first 4 pairs
    with pytest.raises(ValueError, match="gold.json links other test pairs"):
        read_gold_links(path, test[1:])


def test_speed_ratios_of_a_seed_timed_together_win_when_both_are_the_scored_models():
    cells = [_cell("transformer", s, decode_sentences_per_second=8.0) for s in range(3)]
    cells += [_cell("RAN-ALL", s, decode_sentences_per_second=10.0,
                    decode_versus={"transformer": {"ratio": 1.0}}) for s in range(3)]

    def record(seed, agreement=1.0):
        machine = {"matmul_gflops": 150.0, "load_average_1_5_15": [2.0, 2.0, 2.0]}
        return {"seed": seed, "file": f"speed-seed{seed}.json", "machine_before": machine,
                "models": {"transformer": {"sentences_per_second": 10.0,
                                           "agreement_with_cell": 1.0},
                           "RAN-ALL": {"sentences_per_second": 13.0,
                                       "agreement_with_cell": agreement}}}

    speed = {s: record(s) for s in range(3)}
    ran = _row(claims.claim_verdicts(cells, {"speed": speed}), "RAN-ALL decodes faster")
    assert ran["numbers"]["ratio"] == [1.3] * 3 and ran["verdict"] == CONFIRMED
    assert ran["numbers"]["timed_together_seeds"] == [0, 1, 2]
    assert "every model of the seed timed in one process" in ran["measurement"]
    assert "seed 0 speed-seed0.json: matmul 150.0 GFLOP/s, load 2.0" in ran["measurement"]
    # A model that no longer translates as its cell did is not the scored model:
    # that seed's record is not used, and the cells' own timings decide.
    speed[1] = record(1, agreement=0.9)
    ran = _row(claims.claim_verdicts(cells, {"speed": speed}), "RAN-ALL decodes faster")
    assert ran["numbers"]["ratio"] == [1.0] * 3 and ran["verdict"] == NOT_CONFIRMED


def test_the_weighted_forms_training_loss_is_compared_on_the_same_batches():
    """Per seed, the mean difference to the paper form over the logged steps both
    runs share in the second half of the shorter one (here steps 200-300 of a
    300-step run against a 400-step one): the early steps and the longer run's
    tail do not count, and a cell without the record gives no value. Each batch
    has its own difficulty, shared by every form that trains on it."""
    def form(model, losses_by_seed):
        return [_cell(model, seed, builder="weighted_transformer", best_valid_bleu=5.0,
                      bleu=5.0, model_options=model[9:], training_loss_logged=losses,
                      **_versus(0.0, 0.5))
                for seed, losses in enumerate(losses_by_seed)]

    batch = {step: 0.5 * np.sin(step) for step in range(50, 401, 50)}  # each batch's own
    paper = [[step, 4.0 + batch[step]] for step in range(50, 401, 50)]
    gain = [[[step, (9.0 if step <= 150 else 4.0 + 0.1 * (seed + 1)) + batch[step]]
             for step in range(50, 301, 50)] for seed in range(3)]
    cells = (form("weighted", [paper] * 3) + form("weighted-gain", gain[:2] + [[]])
             + _transformers())
    rows = {row["model"]: row for row in weighted.forms_table(cells)["rows"]}
    assert rows["weighted"]["training_loss_vs_paper"] == []
    assert rows["weighted-gain"]["training_loss_vs_paper"] == [
        pytest.approx(0.1), pytest.approx(0.2), None]
    table = weighted.forms_markdown(weighted.forms_table(cells))
    assert "| +0.150 ± 0.071 |" in table and "same batches" in table
    # Losses that do not move together come from different batches: no paired value.
    shuffled = [[step, loss] for (step, _), (_, loss) in zip(gain[0], gain[0][::-1])]
    assert weighted.same_batch_loss_difference(
        form("weighted-gain", [shuffled])[0], form("weighted", [paper])[0]) is None


def test_the_weighted_forms_kappa_alpha_columns_read_from_each_forms_start():
    """A random start is already away from uniform, so its distance is shown beside
    the start's expected value; the κ − α distance tells tied weights from free ones."""
    def layer(kappa, alpha):
        return {"kappa": kappa, "alpha": alpha,
                "kappa_tv_from_uniform": weighted.total_variation_from_uniform(kappa),
                "alpha_tv_from_uniform": weighted.total_variation_from_uniform(alpha)}

    def form(model, layers):
        return _cell(model, 0, builder="weighted_transformer", best_valid_bleu=5.0, bleu=5.0,
                     probes={"branch_weights": layers}, **_versus(0.0, 0.5))

    tied = [0.3, 0.2, 0.25, 0.25]
    cells = [form("weighted", [layer(tied, tied)] * 2),
             form("weighted-port", [layer([0.4, 0.2, 0.2, 0.2], [0.1, 0.3, 0.3, 0.3]),
                                    layer(tied, tied)])]
    rows = {row["model"]: row for row in weighted.forms_table(cells)["rows"]}
    assert rows["weighted"]["kappa_alpha_tv"] == 0.05
    assert rows["weighted"]["kappa_alpha_tv_at_start"] == 0.0
    assert rows["weighted"]["kappa_minus_alpha"] == 0.0
    # The port's start, softmax of U[0, 1) logits over 4 branches: about 0.103.
    assert rows["weighted-port"]["kappa_alpha_tv_at_start"] == pytest.approx(0.103, abs=0.002)
    assert rows["weighted-port"]["kappa_minus_alpha"] == pytest.approx(0.3 / 2)
    table = weighted.forms_markdown(weighted.forms_table(cells))
    assert "| 0.05 (0.0) | 0.0 |" in table
    assert f"({rows['weighted-port']['kappa_alpha_tv_at_start']}) | 0.15 |" in table


def test_the_weighted_forms_choose_the_default_on_valid_converged_seeds_only():
    def form(model, valid, test, stop="converged", seeds=range(3)):
        return [_cell(model, s, builder="weighted_transformer", best_valid_bleu=valid + s / 10,
                      bleu=test, stop_reason=stop, model_options=model[9:],
                      **_versus(test - 5.0, 0.01)) for s in seeds]

    # One form only (the committed tables): no forms table.
    assert weighted.forms_table(form("weighted", 5.0, 5.0))["rows"] == []
    # The best test BLEU does not choose; the best mean valid BLEU does.
    cells = (form("weighted", 5.0, 9.0) + form("weighted-gain", 6.0, 4.0)
             + _transformers())
    forms = weighted.forms_table(cells)
    assert forms["chosen"] == "weighted-gain" and [r["model"] for r in forms["rows"]] == [
        "weighted", "weighted-gain"]
    assert forms["rows"][1]["valid_bleu"] == [6.0, 6.1, 6.2]
    # Each form's own options, not the recipe's that every form shares.
    assert [r["model_options"] for r in forms["rows"]] == ["", "weight_gain=branches"]
    assert "**weighted-gain**" in weighted.forms_markdown(forms)
    # A form with a cell at the cap, or with fewer than three seeds, leaves it open.
    for other in (form("weighted-port", 9.0, 9.0, stop="max_steps"),
                  form("weighted-port", 9.0, 9.0, seeds=range(2))):
        forms = weighted.forms_table(cells + other)
        assert forms["chosen"] is None and "weighted-port" in forms["reason"]
        assert "not chosen yet" in weighted.forms_markdown(forms)

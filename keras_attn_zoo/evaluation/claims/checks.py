"""Checks that several papers' claims share: BLEU against the Transformer (paired
bootstrap per seed), a decoding-speed ratio, an alignment error rate below a
reference's.

* AER: the attention's argmax word links (teacher forced) against eflomal's
  links of the test sentences, aligned once into the table's gold links file
  (`probes.gold_links_record`) that every cell reads; a seed is for when the
  model's AER is at least `AER_MARGIN` (0.05) below the reference's (the
  monotone alignment of the same sentences, or the Transformer's cell scored
  against the same file), against when it is not below at all.
"""

from keras_attn_zoo.evaluation.claims.engine import BASELINE
from keras_attn_zoo.evaluation.claims.engine import NotMeasured
from keras_attn_zoo.evaluation.claims.engine import display_name
from keras_attn_zoo.evaluation.claims.engine import majority_verdict
from keras_attn_zoo.evaluation.claims.engine import rounded
from keras_attn_zoo.evaluation.claims.engine import spread
from keras_attn_zoo.evaluation.claims.engine import value_at
from keras_attn_zoo.evaluation.significance import ALPHA
from keras_attn_zoo.evaluation.significance import paired_seed_verdict
from keras_attn_zoo.evaluation.significance import ratio_verdict

AER_MARGIN = 0.05


def versus_transformer(cells, model):
    """`(seeds, differences, p_values)`: the per-seed BLEU differences against the
    Transformer and their bootstrap p-values, Holm-adjusted over every per-seed
    test of the table (``bleu_p_holm``; the raw p where the cells lack it)."""
    rows = cells.seeds(model, "versus_transformer.bleu_difference",
                       "versus_transformer.bleu_p_value")
    cells.reads(BASELINE)  # the differences are against its cells
    seeds = [seed for seed, _ in rows]
    differences = [float(value_at(c, "versus_transformer.bleu_difference")) for _, c in rows]
    p_values = [float(value_at(c, "versus_transformer.bleu_p_holm")
                      or value_at(c, "versus_transformer.bleu_p_value")) for _, c in rows]
    return seeds, differences, p_values


def bleu_sentence(model, differences, p_values, decision):
    """The paired BLEU comparison of `model` with the Transformer, in one sentence,
    with the seed-level test's p-values from `decision` (`paired_seed_verdict`)."""
    better = sum(d > 0 and p < ALPHA for d, p in zip(differences, p_values))
    worse = sum(d < 0 and p < ALPHA for d, p in zip(differences, p_values))
    p_for, p_against = decision["p_for"], decision["p_against"]
    seed_test = ("" if p_for is None else
                 f" Seed-level one-sided paired t-test over the seeds: p {p_for:.3f} for the "
                 f"claim, {p_against:.3f} against.")
    return (f"BLEU {display_name(model)} minus Transformer (same seed, paired bootstrap, "
            f"p Holm-adjusted over the table's per-seed tests): "
            f"{spread(differences, signed=True)}; significantly better (p < {ALPHA}) on "
            f"{better}, significantly worse on {worse} of {len(differences)} seeds."
            + seed_test)


def bleu_numbers(seeds, differences, p_values, decision):
    """The paired BLEU comparison's numbers, as a verdict records them."""
    return {"seeds": seeds, "bleu_difference": rounded(differences),
            "bleu_p_holm": rounded(p_values), "outcomes": decision["outcomes"],
            "seed_test": {"test": "one-sided paired t-test over seeds",
                          "p_for": decision["p_for"], "p_against": decision["p_against"],
                          "split": decision["split"]}}


def bleu_check(model, direction=1, margin=0.0):
    """`(measurement, numbers, verdict)` of a BLEU claim against the Transformer:
    direction 1 "at least as good" (with `margin`: "competitive"), -1 "below"."""
    def check(cells):
        seeds, differences, p_values = versus_transformer(cells, model)
        decision = paired_seed_verdict(differences, p_values, direction, margin)
        return (bleu_sentence(model, differences, p_values, decision),
                bleu_numbers(seeds, differences, p_values, decision), decision["verdict"])
    return check


def at_least_transformer(model):
    """A claim check: `model` translates at least as well as the Transformer (paired BLEU)."""
    return bleu_check(model)


def below_transformer(model):
    """A claim check: `model` translates worse than the Transformer (paired BLEU)."""
    # The claim "Transformer > model": a seed counts for when the model is worse.
    return bleu_check(model, direction=-1)


# A cell's speed key, and the same in a seed's timing record (`timed_together`).
SEED_TIMING_KEYS = {"decode_sentences_per_second": "sentences_per_second",
                    "decode_source_tokens_per_second": "source_tokens_per_second"}


def timed_together(cells, model, reference, key, seeds):
    """`[(seed, ratio, record)]` from the seeds' timing records (the leaderboard's
    --time-seeds: every model of a seed timed in one process, round by round, with
    the models its cells scored), for the seeds where both models were timed and
    both translated the batch as their cells did; [] where there are none."""
    records = cells.data_properties.get("speed") or {}
    found = []
    for seed in seeds:
        record = records.get(seed) or {}
        own, base = ((record.get("models") or {}).get(name) for name in (model, reference))
        if own and base and own["agreement_with_cell"] == base["agreement_with_cell"] == 1.0:
            found.append((seed, own[SEED_TIMING_KEYS[key]] / base[SEED_TIMING_KEYS[key]],
                          record))
    return found


def speed_ratio(model, key, claimed, tolerance, what, reference=BASELINE):
    """A claim check: `model`'s `key` (a speed) is `claimed` times the `reference`'s, within
    `tolerance`.
    """
    def check(cells):
        paired = cells.paired(model, [key], baseline=reference)
        seeds = [s for s, _, _ in paired]
        together = timed_together(cells, model, reference, key, seeds)
        # Best: every model of the seed timed in one process, round by round, with
        # the scored models (--time-seeds). Else the cell's own timing against the
        # reference, in the cell's process (`decode_versus`): the machine's load
        # cancels out. Else the two cells' own timings, under loads that may differ.
        same_run = [value_at(c, f"decode_versus.{reference}.ratio") for _, c, _ in paired]
        same_process = all(r is not None for r in same_run)
        if len(together) == len(paired):
            ratios = [ratio for _, ratio, _ in together]
            machines = "; ".join(
                f"seed {seed} {record['file']}: matmul {record['machine_before']['matmul_gflops']}"
                f" GFLOP/s, load {record['machine_before']['load_average_1_5_15'][0]}"
                for seed, _, record in together)
            how = (f"every model of the seed timed in one process, round by round, with the "
                   f"scored models ({machines})")
            same_process = True
        elif same_process:
            ratios, how = [float(r) for r in same_run], "timed in one process, round by round"
        else:
            ratios = [float(c[key]) / float(b[key]) for _, c, b in paired]
            how = "timed in separate cells, whose machine load may differ"
        own = [float(c[key]) for _, c, _ in paired]
        base = [float(b[key]) for _, _, b in paired]
        batch = paired[0][1].get("decode_batch")
        at = f" at batch {batch}" if batch else ""
        measurement = (f"{what} of {display_name(model)} / {display_name(reference)}{at} (same "
                       f"seed, {how}): {spread(ratios, unit='x')}; claimed {claimed}x, "
                       f"confirmed from {claimed * (1 - tolerance):.2f}x.")
        # Timed after the cell ran (leaderboard --retime-decoding), maybe against a
        # retrained peer: say how far both models still translate as their cells did.
        retimed = [(s, value_at(c, f"decode_versus.{reference}.retimed"))
                   for s, c, _ in paired]
        retimed = [(s, r) for s, r in retimed if r is not None and same_process
                   and len(together) < len(paired)]
        if retimed:
            measurement += (
                f" Seed {', '.join(str(s) for s, _ in retimed)} timed after its cells "
                f"(leaderboard --retime-decoding); share of the timed batch each model "
                f"translates as its cell did (below 100%: retrained, not the model its "
                f"cell scored): " + "; ".join(
                    f"{display_name(model)} {r['agreement_with_cell']:.0%}, {display_name(reference)} "
                    f"{r['peer_agreement_with_cell']:.0%}" for _, r in retimed) + ".")
        numbers = {"seeds": seeds, "ratio": rounded(ratios),
                   "same_process": same_process, "retimed_seeds": [s for s, _ in retimed],
                   "timed_together_seeds": [s for s, _, _ in together],
                   key: own, f"{reference}_{key}": base, "claimed": claimed,
                   "tolerance": tolerance}
        return measurement, numbers, ratio_verdict(ratios, claimed, tolerance)
    return check


def lower_aer(model, baseline_key, what):
    """AER of `model` below `baseline_key` ("transformer" or the monotone alignment)."""
    def check(cells):
        key = "probes.aer.aer"
        if baseline_key == "monotone":
            rows = [(s, c, c) for s, c in cells.seeds(model, key, "probes.aer.monotone_aer")]
            base_key = "probes.aer.monotone_aer"
        else:
            rows = cells.paired(model, [key], baseline=baseline_key)
            base_key = key
        golds = {value_at(cell, "probes.aer.gold_links.file") for _, c, b in rows
                 for cell in (c, b)}
        digests = {value_at(cell, "probes.aer.gold_links.links_digest") for _, c, b in rows
                   for cell in (c, b)}
        if baseline_key != "monotone" and (None in digests or len(digests) > 1):
            # eflomal is unseeded: links aligned per cell differ (1,342 against 1,327
            # sure links on the same sentences), and AERs on different gold do not pair.
            raise NotMeasured(f"{display_name(model)} and {display_name(baseline_key)} cells "
                              f"scored against different or unrecorded gold links; rescore "
                              f"them against one committed gold links file")
        own = [float(value_at(c, key)) for _, c, _ in rows]
        base = [float(value_at(b, base_key)) for _, _, b in rows]
        outcomes = [True if b - a >= AER_MARGIN else False if a >= b else None
                    for a, b in zip(own, base)]
        sentences = [value_at(c, "probes.aer.sentences") for _, c, _ in rows]
        gold = (f"the gold links of {golds.pop()}" if None not in golds and len(golds) == 1
                else "eflomal's links aligned per cell")
        measurement = (f"AER of {display_name(model)}'s attention (argmax word links, teacher "
                       f"forced) against {gold} on {sentences[0]} test sentences: "
                       f"{spread(own, 3)}; {what}: {spread(base, 3)}; a seed counts at >= "
                       f"{AER_MARGIN} lower.")
        numbers = {"seeds": [s for s, _, _ in rows], "aer": rounded(own),
                   "reference_aer": rounded(base), "sentences": sentences,
                   "outcomes": outcomes}
        return measurement, numbers, majority_verdict(outcomes)
    return check

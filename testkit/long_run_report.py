"""Blocks and goals of the long-run benchmark (issue #34): per block of cycles, what the daemon emitted
against what its policy sampled (exact in-band), validity, diversity (the project's Self-BLEU-3 and
Distinct-3), alerts, degraded reasons, spending, spot-check gaps and RSS; then each issue goal, met or not."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from curriculum.reward.diversity import collapse_metrics
from probes import metrics
from testkit.long_run import HEALTH_METRICS, CycleRecord

DIVERSITY_SAMPLE = 256  # texts per Self-BLEU-3 / Distinct-3 measurement (the same size for the baseline)
GATE_MARGIN = 0.10  # emitted ≥ all valid + this
UNTRAINED_FACTOR = 2.0  # emitted ≥ this × the untrained generator's in-band
MIN_VALIDITY = 0.90
TOPIC_SLACK = 0.10  # top-topic share ≤ first cycle's + this
BLEU_SLACK = 0.05  # Self-BLEU-3 ≤ base + this
SPOT_GAP_SHARE = 0.10  # no stretch without spot-checks longer than this share of the budget window
BUDGET_WINDOW_S = 3600.0
STALL_CYCLES = 10  # cycles without emission that must raise a reason
SUPPLY_PER_CYCLE = 1.0  # a window of STALL_CYCLES cycles emitting fewer tasks than this a cycle, queue not full, is dry
RECOVERY_WITHIN = 20  # cycles after a jump ...
RECOVERY_SHARE = 0.8  # ... to reach this share of the pre-jump emitted in-band
RSS_GROWTH = 0.10
PRED = "predicted_utility"  # the probes' own belief, for comparison


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def diversity(texts: list[str], topics: list[str | None]) -> dict[str, float | None]:
    """Self-BLEU-3, Distinct-3 (fixed sample of ``DIVERSITY_SAMPLE``) and top-topic share of ``texts``."""
    m = collapse_metrics(texts, topics, sample_size=DIVERSITY_SAMPLE, seed=0)
    return {"self_bleu3": m.self_bleu3, "distinct3": m.distinct3, "top_topic_share": m.top_topic_share}


def baseline(untrained: dict[str, Any]) -> dict[str, Any]:
    """The untrained generator's in-band, validity and diversity (texts dropped)."""
    return {k: v for k, v in untrained.items() if k not in ("texts", "topics")} | {
        f"{k}": v for k, v in diversity(untrained["texts"], untrained["topics"]).items()}


def spot_gaps(records: Sequence[CycleRecord]) -> tuple[int, float]:
    """Longest stretch without a dispatched spot-check: in cycles, and in wall seconds (from the last
    cycle that dispatched, or the start, to the end of the next that did, or of the last cycle)."""
    longest_c, longest_s, run_c, last_t = 0, 0.0, 0, 0.0
    for r in records:
        if r.metrics.get("spotcheck_dispatched", 0.0) > 0:
            run_c, last_t = 0, r.wall_s
            continue
        run_c += 1
        longest_c, longest_s = max(longest_c, run_c), max(longest_s, r.wall_s - last_t)
    return longest_c, longest_s


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """:func:`probes.metrics.spearman` (average ranks for ties), None when either side is constant or there
    are fewer than 3 pairs."""
    if len(a) < 3:
        return None
    rho = metrics.spearman(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    return None if math.isnan(rho) else rho


def ranking(r: CycleRecord, top: float = 0.25) -> tuple[float | None, float | None]:
    """How well the probes rank one cycle's valid tasks by their exact in-band probability: Spearman's
    correlation, and the in-band of the ``top`` share by probe score minus that of all (what a gate
    emitting that share would gain). None without scores."""
    pairs = [(p, y) for p, y in zip(r.valid_scores, r.valid_in_band, strict=False) if p is not None]
    if len(pairs) < 3:
        return None, None
    best = sorted(pairs, key=lambda py: -py[0])[:max(1, round(top * len(pairs)))]
    return (spearman([p for p, _ in pairs], [y for _, y in pairs]),
            sum(y for _, y in best) / len(best) - sum(y for _, y in pairs) / len(pairs))


def block(records: Sequence[CycleRecord]) -> dict[str, Any]:
    """One block of consecutive cycles."""
    emitted = [p for r in records for p in r.emitted_in_band]
    valid = [p for r in records for p in r.valid_in_band]
    validity = [r.metrics["validity"] for r in records if "validity" in r.metrics]
    top = [r.metrics["top_topic_share"] for r in records if "top_topic_share" in r.metrics]
    novel = [r.metrics["novel_share"] for r in records if "novel_share" in r.metrics]
    div = diversity([t for r in records for t in r.valid_texts], [t for r in records for t in r.valid_topics])
    em, va = _mean(emitted), _mean(valid)
    phases = ("rl", "sample", "spotcheck", "retrain", "emit")
    ranked = [ranking(r) for r in records]
    return {
        "cycles": [records[0].cycle, records[-1].cycle], "version": records[-1].version,
        "emitted": len(emitted), "emitted_in_band": em, "valid_sampled": len(valid),
        "valid_in_band": va, "gate_margin": em - va if em is not None and va is not None else None,
        # the probes' ranking of each cycle's valid tasks (mean over the block's cycles): can a gate select?
        "probe_spearman": _mean([x for x, _ in ranked if x is not None]),
        "top_quarter_margin": _mean([m for _, m in ranked if m is not None]),
        "validity_mean": _mean(validity), "validity_min": min(validity, default=None),
        "top_topic_share_max": max(top, default=None), "block_top_topic_share": div["top_topic_share"],
        "novel_share_mean": _mean(novel), "novel_share_min": min(novel, default=None),
        "self_bleu3": div["self_bleu3"], "distinct3": div["distinct3"],
        "alerts": [a["rule"] for r in records for a in r.alerts],
        "mitigations": [a["mitigation"] for r in records for a in r.alerts if a["mitigation"]],
        "degraded": sorted({d for r in records for d in r.degraded}),
        "solver_trials": sum(r.metrics.get("solver_trials", 0.0) for r in records),
        "spotchecks_per_cycle": [int(r.metrics.get("spotcheck_dispatched", 0.0)) for r in records],
        "emitted_per_cycle": [len(r.emitted_in_band) for r in records],
        # daemon.reference_share: the untrained generator's valid candidates, and the emitted share they took
        "reference_in_band": _mean([p for r in records for p in r.reference_in_band]),
        "emitted_reference_share": (sum(r.emitted_reference for r in records) / len(emitted)) if emitted else None,
        "queue_full_cycles": sum(1 for r in records if _queue_full(r)),
        "consumed": sum(r.consumed for r in records),  # leased by the run's consumer (Scenario.consume)
        "predicted_utility": _mean([r.metrics[PRED] for r in records if PRED in r.metrics]),
        "rss_mib": records[-1].rss_mib, "wall_s": records[-1].wall_s,
        "health": {m: [min(v), _mean(v), max(v)] for m in HEALTH_METRICS
                   if (v := [r.metrics[m] for r in records if m in r.metrics])},  # min, mean, max over the block
        "observe_s_per_cycle": _mean([r.observe_s for r in records]),
        "seconds_per_cycle": {p: _mean([r.metrics.get(f"{p}_seconds", 0.0) for r in records]) for p in phases},
    }


def _queue_full(r: CycleRecord) -> bool:
    """The queue was at its high-water mark at the emit phase: nothing may be emitted (backpressure, said
    on the dashboard as the ``backpressure`` degraded reason), which is no stall."""
    return r.metrics.get("backpressure", 0.0) > 0


SUMMARY_KEYS = ("probe_spearman", "top_quarter_margin", "valid_in_band", "emitted_in_band", "gate_margin",
                "validity_mean", "top_topic_share_max", "self_bleu3", "distinct3")


def summary(blocks: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Means over the blocks after the first (the first holds cycle 0's start-up emission and a probe the
    policy has not met yet) of the ranking, in-band and health figures, and the emitted tasks per cycle."""
    rest = list(blocks[1:])
    out = {k: _mean([b[k] for b in rest if b.get(k) is not None]) for k in SUMMARY_KEYS}
    cycles = sum(b["cycles"][1] - b["cycles"][0] + 1 for b in rest)
    out["emitted_per_cycle"] = sum(b["emitted"] for b in rest) / cycles if cycles else None
    return out


def _stalls(records: Sequence[CycleRecord]) -> list[dict[str, Any]]:
    """Stretches of ≥ STALL_CYCLES cycles without an emitted task while the queue had room, with what the
    daemon said in them (degraded reasons and alerts that name emission). A full queue ends a stretch."""
    out, start = [], None
    for i, r in enumerate([*records, None]):
        if r is not None and not r.emitted_in_band and not _queue_full(r):
            start = i if start is None else start
            continue
        if start is not None and i - start >= STALL_CYCLES:
            span = records[start:i]
            out.append({"cycles": [span[0].cycle, span[-1].cycle], "raised": sorted(_said(span))})
        start = None
    return out


def _said(span: Sequence[CycleRecord]) -> set[str]:
    """The degraded reasons and alerts that name emission over ``span``."""
    return {d for x in span for d in x.degraded if "emi" in d} | {a["rule"] for x in span for a in x.alerts
                                                                  if "emi" in a["rule"]}


def _dry_stretches(records: Sequence[CycleRecord]) -> list[dict[str, Any]]:
    """Consecutive windows of STALL_CYCLES cycles (aligned, the last may be shorter) that emitted fewer than
    SUPPLY_PER_CYCLE tasks a cycle while the queue had room, merged, with what was emitted and said in them.
    A stall counts only cycles that emitted nothing: one task every few cycles is a trickle it does not see
    (run 13: 0.2–1.6 tasks a cycle for 300 cycles, the stall raised 4 times)."""
    out: list[dict[str, Any]] = []
    for i in range(0, len(records), STALL_CYCLES):
        w = records[i:i + STALL_CYCLES]
        emitted = sum(len(r.emitted_in_band) for r in w)
        if any(_queue_full(r) for r in w) or emitted >= SUPPLY_PER_CYCLE * len(w):
            continue
        if out and out[-1]["cycles"][1] + 1 == w[0].cycle:  # continues the stretch before it
            last = out[-1]
            last["cycles"][1], last["emitted"] = w[-1].cycle, last["emitted"] + emitted
            last["raised"] = sorted(set(last["raised"]) | _said(w))
        else:
            out.append({"cycles": [w[0].cycle, w[-1].cycle], "emitted": emitted, "raised": sorted(_said(w))})
    return out


def _recoveries(records: Sequence[CycleRecord], announced: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per announce: emitted in-band over the 8 cycles before it and over cycles 12–19 after it."""
    by_cycle = {r.cycle: r for r in records}
    out = []
    for a in announced:
        c = int(a["before_cycle"])
        before = [p for k in range(c - 8, c) if k in by_cycle for p in by_cycle[k].emitted_in_band]
        tail = range(c + RECOVERY_WITHIN - 8, c + RECOVERY_WITHIN)
        if any(k not in by_cycle for k in tail):
            out.append({**a, "before": _mean(before), "after": None, "met": None})
            continue
        after = [p for k in tail for p in by_cycle[k].emitted_in_band]
        b, f = _mean(before), _mean(after)
        out.append({**a, "before": b, "after": f,
                    "met": None if b is None else (f is not None and f >= RECOVERY_SHARE * b)})
    return out


def _all(flags: Sequence[bool | None]) -> bool | None:
    known = [f for f in flags if f is not None]
    return None if not known else all(known)


def goals(blocks: Sequence[dict[str, Any]], records: Sequence[CycleRecord], base: dict[str, Any],
          announced: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each goal of issue #34 over the blocks so far: ``met`` True/False (None: not measurable yet); and one of
    ours, ``supply_ge_1_per_cycle``: no window of STALL_CYCLES cycles with the queue's room left and under one
    emitted task a cycle (a trainer downstream starves in a trickle the stall goal does not see)."""
    if not blocks:
        return {}
    first_top = next((r.metrics["top_topic_share"] for r in records if "top_topic_share" in r.metrics), None)
    untrained = base.get("in_band")
    by_version = {"": untrained} | {a["version"]: a.get("untrained_in_band") for a in announced}
    margin = [b["gate_margin"] is not None and b["gate_margin"] >= GATE_MARGIN for b in blocks]
    vs_base = [None if by_version.get(b["version"]) is None  # the untrained generator under the block's version
               else (b["emitted_in_band"] or 0.0) >= UNTRAINED_FACTOR * by_version[b["version"]] for b in blocks]
    validity = [b["validity_mean"] is not None and b["validity_mean"] >= MIN_VALIDITY for b in blocks]
    topic = [None if first_top is None or b["top_topic_share_max"] is None
             else b["top_topic_share_max"] <= first_top + TOPIC_SLACK for b in blocks]
    bleu = [None if base.get("self_bleu3") is None or b["self_bleu3"] is None
            else b["self_bleu3"] <= base["self_bleu3"] + BLEU_SLACK for b in blocks]
    gap_c, gap_s = spot_gaps(records)
    stalls, dry = _stalls(records), _dry_stretches(records)
    recov = _recoveries(records, announced)
    rss0, rss1 = blocks[0]["rss_mib"], blocks[-1]["rss_mib"]
    return {
        "emitted_vs_valid_plus_0.10": {"met": all(margin), "blocks_met": sum(margin), "blocks": len(blocks)},
        "emitted_vs_2x_untrained": {"met": _all(vs_base), "untrained_in_band": by_version,
                                    "blocks_met": sum(1 for f in vs_base if f)},
        "validity_ge_0.90": {"met": all(validity), "blocks_met": sum(validity)},
        "top_topic_le_first_plus_0.10": {"met": _all(topic), "first_cycle": first_top,
                                         "blocks_met": sum(1 for f in topic if f)},
        "self_bleu3_le_base_plus_0.05": {"met": _all(bleu), "base": base.get("self_bleu3"),
                                         "blocks_met": sum(1 for f in bleu if f)},
        "spotcheck_gap_le_10pct_window": {"met": gap_s <= SPOT_GAP_SHARE * BUDGET_WINDOW_S,
                                          "longest_gap_s": gap_s, "longest_gap_cycles": gap_c,
                                          "limit_s": SPOT_GAP_SHARE * BUDGET_WINDOW_S},
        "emission_never_stops_silently": {"met": all(s["raised"] for s in stalls), "stalls": stalls},
        "supply_ge_1_per_cycle": {"met": not dry, "dry_cycles": sum(d["cycles"][1] - d["cycles"][0] + 1 for d in dry),
                                  "stretches": dry},
        "recovery_after_jump": {"met": _all([r["met"] for r in recov]), "jumps": recov},
        "rss_growth_lt_10pct": {"met": (rss1 - rss0) / rss0 < RSS_GROWTH, "first_block_mib": rss0,
                                "last_block_mib": rss1},
    }

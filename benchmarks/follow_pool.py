"""Where the followed fast learner's frontier is lost (issue #36): in the generator's pool, or in the gate?

Runs ``follow_trainer``'s fast-learner scenario (the outside SYNTHETIC trainer against ``propel run`` on the
embedded defaults, follow on) and then reads the daemon's store: every valid candidate the daemon sampled,
its ensemble score and whether it was emitted. Each block of 4 daemon cycles is scored at the trainer's skill
when those candidates were made (the trainer's step clock against the tasks' ``created_at``), with the exact
probabilities of the synthetic solver:

* **pool**: the candidates' mean in-band probability (what an unfiltered draw serves) and too-easy share;
* **best quarter**: what a perfect gate keeping a quarter of the pool would serve: the bound the pool sets;
* **score quarter**: the quarter of the pool the gate's score ranks highest, with no emission rule (topic cap,
  backpressure): what the ranking alone would serve;
* **emitted**: what the gate served (explored tasks, served unfiltered, left out); **rho**: Spearman of the
  gate's score (its first, at sampling) against in-band: how well the gate ranks.

A gate far under the best quarter with a low rho is the gate's bound; a best quarter near the emitted share
is the pool's. Beside them, what the trainer was *served* (its own exact in-band share of the tasks it leased,
at its skill then), per window of its steps and at steps 90-99 (#36's goal: ≥ 0.25). Arms (``--arms``): ``on``
(the default), ``on_ref<S>`` (``daemon.reference_share = S``, the untrained generator's candidates beside the
policy's; their pool is also reported apart), ``on_lead<L>`` (``frontier.trainer_band_lead = L``), ``on_w<N>``,
``on_replay<N>`` (``emission.replay_max = N``; 0: no frontier replay).

    python -m benchmarks.follow_pool [--seeds 3] [--arms on,on_ref0.5]
"""

from __future__ import annotations

import bisect
import json
import re
import sqlite3
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks._common import RESULTS, write_result
from benchmarks.follow_trainer import run_arm
from testkit.follow_trainer import Run, Scenario

BLOCK = 4  # daemon cycles per row


Candidate = tuple[int, float, str, float, bool, bool, bool]


def candidates(db: Path) -> list[Candidate]:
    """(cycle, created_at epoch, text, score, emitted by the gate, emitted unfiltered (explore), from the untrained
    generator) of the valid candidates. The score is the first one, the gate's at sampling: emitted tasks that
    wait in the queue are scored again by every refreshed probe. The store keeps a task once per content, so a
    candidate the generator samples again in a later cycle counts once, in the cycle that first made it."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT t.cycle, t.created_at, t.text,"
            " (SELECT probability FROM probe_scores s WHERE s.task_id = t.id ORDER BY s.id LIMIT 1),"
            " EXISTS (SELECT 1 FROM queue q WHERE q.task_id = t.id AND NOT COALESCE(q.explore, 0)),"
            " EXISTS (SELECT 1 FROM queue q WHERE q.task_id = t.id AND COALESCE(q.explore, 0)),"
            " COALESCE(json_extract(t.payload, '$.generator') = 'reference', 0)"
            " FROM tasks t WHERE t.valid AND t.cycle IS NOT NULL").fetchall()
    return [(int(c), datetime.fromisoformat(at).replace(tzinfo=UTC).timestamp(), text, float(score), bool(em),
             bool(ex), bool(ref)) for c, at, text, score, em, ex, ref in rows if score is not None]


def blocks(run: Run, rows: list[Candidate], seed: int) -> list[dict[str, Any]]:
    """Per block of cycles, at the trainer's skill when the block's candidates were made (its median time)."""
    from curriculum.solvers.synthetic import SyntheticArithSolver
    from probes.metrics import spearman
    from testkit.follow_trainer import in_band_probability, too_easy_probability

    times = [r.at for r in run.steps]
    out = []
    for lo in range(0, max(r[0] for r in rows) + 1, BLOCK):
        sel = [r for r in rows if lo <= r[0] < lo + BLOCK]
        if len(sel) < 8:
            continue
        step = min(len(times) - 1, max(0, bisect.bisect(times, statistics.median(r[1] for r in sel)) - 1))
        judge = SyntheticArithSolver(offset=run.steps[step].skill, seed=seed)
        ib = np.array([in_band_probability(judge, r[2]) for r in sel])
        easy = np.array([too_easy_probability(judge, r[2]) for r in sel])
        score, emitted, explored, ref = (np.array([r[i] for r in sel]) for i in (3, 4, 5, 6))
        row = {"cycles": [lo, lo + BLOCK - 1], "step": step, "skill": round(run.steps[step].skill, 2),
               "candidates": len(sel), "pool_in_band": _r(ib.mean()), "pool_too_easy": _r(easy.mean()),
               "best_quarter": _r(np.sort(ib)[-max(1, len(ib) // 4):].mean()),
               "score_quarter": _r(ib[np.argsort(-score, kind="stable")[:max(1, len(ib) // 4)]].mean()),
               "emitted": int(emitted.sum()), "emitted_in_band": _r(ib[emitted].mean()) if emitted.any() else None,
               "explored": int(explored.sum()),
               "rho": _r(spearman(score, ib))}
        if ref.any() and (~ref).any():
            row |= {"reference_in_band": _r(ib[ref].mean()), "policy_in_band": _r(ib[~ref].mean())}
        out.append(row)
    return out


def _r(x: float) -> float:
    return round(float(x), 4)


STEP_WINDOWS = ((0, 29), (30, 59), (60, 99))  # the trainer's GRPO steps
SERVED_WINDOWS = (*STEP_WINDOWS, (90, 99))


def served(run: Run) -> dict[str, Any]:
    """What the trainer leased, per window of its steps (exact in-band and too-easy shares at its skill then),
    and its in-band curve per 10 steps (``curve``)."""
    from testkit.follow_trainer import window

    out: dict[str, Any] = {f"steps {lo}-{hi}": {k: _r(v) for k, v in window(run, lo, hi).items()
                                                if k in ("in_band", "too_easy", "useful_share", "tasks")}
                           for lo, hi in SERVED_WINDOWS}
    out["curve"] = [_r(window(run, s, s + 9)["in_band"]) for s in range(0, len(run.steps), 10)]
    return out


def served_summary(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """Per window: the seeds' mean, min and max of the served in-band share."""
    out: dict[str, Any] = {}
    for key in (k for k in per_seed[0] if k.startswith("steps")):
        vals = [s[key]["in_band"] for s in per_seed]
        out[key] = {"mean": _r(statistics.mean(vals)), "min": _r(min(vals)), "max": _r(max(vals)),
                    "too_easy": _r(statistics.mean(s[key]["too_easy"] for s in per_seed))}
    return out


def paired(table: dict[str, Any]) -> dict[str, Any]:
    """Each arm after the first minus the first, paired by seed: served in band per window, mean and 95 % t
    interval over seeds (the arms ran the same seeds)."""
    from testkit.closed_loop_stats import mean_ci

    names = list(table)
    base = table[names[0]]["served_per_seed"]
    return {f"{arm} - {names[0]}": {key: mean_ci([b[key]["in_band"] - a[key]["in_band"] for a, b in
                                                  zip(base, table[arm]["served_per_seed"], strict=True)])
                                    for key in (k for k in base[0] if k.startswith("steps"))}
            for arm in names[1:]}


def by_steps(per_seed: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Per window of the trainer's steps: the mean over seeds of each seed's mean over its blocks there (the arms
    run different numbers of daemon cycles per step, so windows of steps, not of cycles, compare them)."""
    keys = ("pool_in_band", "pool_too_easy", "best_quarter", "score_quarter", "emitted_in_band", "rho")
    out: dict[str, Any] = {}
    for lo, hi in STEP_WINDOWS:
        seeds: dict[str, list[float]] = {k: [] for k in keys}
        for rows in per_seed:
            for k in keys:
                vals = [r[k] for r in rows if lo <= r["step"] <= hi and r.get(k) is not None]
                if vals:
                    seeds[k].append(statistics.mean(vals))
        out[f"steps {lo}-{hi}"] = {k: _r(statistics.mean(v)) if v else None for k, v in seeds.items()}
    return out


@click.command()
@click.option("--seeds", type=int, default=3, show_default=True, help="seeds per arm")
@click.option("--seed-start", type=click.IntRange(min=0), default=0, show_default=True,
              help="first seed (seeds seed-start … seed-start + seeds − 1): new seeds, not a re-run of 0…")
@click.option("--arms", default="on,on_ref0.5", show_default=True,
              help="comma-separated: on (the defaults), on_ref<S>, on_lead<L> (or on_leadauto), on_w<N>, "
              "on_replay<N> (module doc)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel/bench-follow"), show_default=True,
              help="where the tiny generator is cached (follow_trainer's) and the arms run")
@click.option("--generator-steps", type=int, default=300, show_default=True, help="bootstrap steps of the generator")
@click.option("--name", default="follow_pool", show_default=True,
              help="result name: benchmarks/results/NAME.{json,png} (and the run directory)")
@click.option("--skill-per-useful-group", type=float, default=Scenario.skill_per_useful_group, show_default=True,
              help="how fast the trainer learns (0: a trainer whose solver does not move)")
@click.option("--start-skill", type=float, default=Scenario.start_skill, show_default=True,
              help="the trainer's skill at step 0 (the daemon's own synthetic solver: 6.0; above it, the trainer "
                   "is stronger than what the daemon first serves, like #36's strong pretrained LMs)")
@click.option("--resummarize", is_flag=True, help="recompute the step windows and the PNG of the stored JSON (no run)")
def main(seeds: int, seed_start: int, arms: str, data_dir: Path, generator_steps: int, name: str,
         skill_per_useful_group: float, start_skill: float, resummarize: bool) -> None:
    """Score the daemon's candidate pool and its gate, block by block, for a followed fast learner."""
    from curriculum.rl.bootstrap import bootstrap

    if resummarize:
        path = RESULTS / f"{name}.json"
        data = json.loads(path.read_text())
        for arm in data["arms"].values():
            arm["by_steps"] = by_steps(arm["per_seed"])
            click.echo(arm["by_steps"])
        data["paired"] = paired(data["arms"])
        click.echo(f"paired: {data['paired']}")
        path.write_text(json.dumps(data, indent=2) + "\n")
        plot(data["arms"], path.with_suffix(".png"))
        return

    data_dir = data_dir.absolute()
    generator = bootstrap("arith", data_dir=data_dir / "models", steps=generator_steps, show_progress=False).path
    scenario = Scenario(skill_per_useful_group=skill_per_useful_group, start_skill=start_skill)
    chosen = [a.strip() for a in arms.split(",") if a.strip()]
    arm_form = r"on|off|on_ref[0-9.]+|on_lead(?:[0-9]+|auto)|on_w[0-9]+|on_replay[0-9]+"
    bad = [a for a in chosen if not re.fullmatch(arm_form, a)]
    if bad:
        raise click.UsageError(f"unknown arm(s) {', '.join(bad)}: "
                               "use on, off, on_ref<S>, on_lead<L>, on_leadauto, on_w<N> or on_replay<N>")
    table: dict[str, Any] = {}
    for arm in chosen:
        per_seed: list[list[dict[str, Any]]] = []
        clocks: list[list[list[float]]] = []
        got: list[dict[str, Any]] = []
        for seed in range(seed_start, seed_start + seeds):
            run = run_arm(arm, seed, scenario, generator, data_dir / "runs" / name)
            rows = blocks(run, candidates(data_dir / "runs" / name / f"{arm}-s{seed}" / "propel.db"), seed)
            per_seed.append(rows)
            clocks.append([[round(r.at, 3), round(r.skill, 4)] for r in run.steps])
            got.append(served(run))
            for row in rows:
                click.echo(f"[{arm} seed {seed}] {row}", err=True)
        table[arm] = {"per_seed": per_seed, "by_steps": by_steps(per_seed), "trainer_steps": clocks,
                      "served_per_seed": got, "served": served_summary(got)}
        click.echo(f"{arm}: {table[arm]['by_steps']}\n{arm} served: {table[arm]['served']}")
    pairs = paired(table)
    click.echo(f"paired: {pairs}")
    write_result(name, {"scenario": scenario.__dict__, "block_cycles": BLOCK, "arms": table, "paired": pairs,
                        "seeds": list(range(seed_start, seed_start + seeds)),
                        "synthetic": "SYNTHETIC solvers on both sides: a sanity instrument, not a model"})
    plot(table, RESULTS / f"{name}.png")


def plot(table: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (("pool_in_band", "pool (unfiltered)"), ("best_quarter", "best quarter (perfect gate)"),
            ("score_quarter", "score's top quarter (no emission rule)"), ("emitted_in_band", "emitted (the gate)"))
    fig, axes = plt.subplots(1, len(table), figsize=(5.5 * len(table), 4), squeeze=False)
    for ax, (arm, data) in zip(axes[0], table.items(), strict=True):
        for (key, label), color in zip(keys, ("tab:gray", "tab:green", "tab:orange", "tab:blue"), strict=True):
            for i, rows in enumerate(data["per_seed"]):
                ax.plot([r["step"] for r in rows], [np.nan if r.get(key) is None else r[key] for r in rows],
                        color=color, alpha=0.7, label=label if i == 0 else None)
        for i, got in enumerate(data.get("served_per_seed", [])):
            curve = got.get("curve", [])
            ax.plot([s + 5 for s in range(0, 10 * len(curve), 10)], curve, color="black", ls="--", alpha=0.7,
                    label="served (what the trainer leased, per 10 steps)" if i == 0 else None)
        ax.axhline(0.25, color="tab:red", lw=0.8, ls=":", label="#36 goal at steps ≤ 100")
        ax.set(title=f"follow {arm}: in band at the trainer's skill", xlabel="trainer GRPO step (block of 4 cycles)",
               ylabel="exact in-band probability", ylim=(0, 0.8))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

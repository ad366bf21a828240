"""Closed loop: a solver trainer downstream of the real daemon, on arith, for R rounds, four arms.

Every arm serves its tasks through the product (``propel run`` as a subprocess with its HTTP API and
queue, or ``propel tasks import`` + ``propel serve``), and the trainer leases, trains, acks and announces
with ``propel_sdk``. Same solver start, same trainer steps, same daemon spot-check budget per cycle:

\b
  continuous  the daemon with trainer feedback on (acks become labels, each checkpoint is announced:
              spot-checks follow the solver's versions, stale labels age out, drift re-measurement and
              the champion/challenger primary refresh run, also after each round of labels);
  static      the same daemon with feedback off (its spot-check solver name is not the one the trainer
              announces, drift re-measurement off): probe and labels stay on the cycle-0 solver = one
              PROPEL run;
  base        valid tasks of the untrained (bootstrapped, no RL) generator, imported;
  corpus      tasks drawn from the bootstrap corpus, imported.

Opt-in (--arms …,reasoning_gym,filter; synthetic row only), what a lab would use instead of this service
(testkit/closed_loop_lab.py): reasoning_gym imports each step's batch from Reasoning Gym's arithmetic
generator at its own curriculum's level; filter rolls out candidates from a static pool and keeps the
groups with 0 < accuracy < 1 (balanced online difficulty filtering), every rollout counted.
Opt-in (--arms …,continuous_filter; synthetic row only): continuous's daemon, with the trainer filtering
its stream as the filter arm filters its pool (what a lab running both would do; the dropped groups' rollouts
are counted, and every candidate is acked, so they are labels too).
Opt-in (--arms …,trainer_labels; both rows): the daemon following the trainer from its acks alone
(no spot-checks of the trainer's solver, testkit/closed_loop.py). On the LM row this is the issue #36
scenario: the example TRL trainer against the embedded defaults, which know its solver only by its acks.

Per round: the in-band rate of the served tasks measured independently (k = 8 attempts by the checkpoint
that trained on them, outside every arm's budget), the share of the trainer's GRPO groups with non-zero
reward variance, the solver's accuracy on a fixed held-out arithmetic set, the daemon's solver trials and
all solver rollouts (the trainer's, the filter's dropped groups', the daemon's trials; cumulative).
Mean ± std over seeds; JSON + PNG (benchmarks/results/closed_loop.*; PROPEL_BENCH_RESULTS redirects).

Rows: ``synthetic`` — the synthetic solver made learnable (its skill rises with the GRPO groups of
non-zero variance it trains on; ALWAYS labelled synthetic, a fast sanity row). The tiny-LM row needs
the example trainer (examples/trl_trainer.py); it is reported only when it ran.

\b
Run:  .venv/bin/python -m benchmarks.closed_loop [--quick] [--seeds 3] [--rounds 4] [--arms continuous,static]
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks._common import COMMIT_AT_START, RESULTS, write_result
from benchmarks.long_run import check_overrides
from daemon.config import EmissionConfig
from testkit.closed_loop import (
    ARMS,
    FILTERED_ARM,
    FOLLOW_ARM,
    LAB_ARMS,
    ArmResult,
    LoopSettings,
    SyntheticLearner,
    measure_in_band,
    run_arm,
    serve_arm,
)
from testkit.closed_loop_lm import LMSettings
from testkit.closed_loop_stats import all_rollouts, comparisons
from testkit.configs import extra_tables

METRICS = ("in_band", "useful_share", "heldout_accuracy", "daemon_trials", "solver_rollouts")
#: Cost per arm (cumulative): trainer wall-clock (held-out measurement excluded), of which waiting on the
#: server (an empty queue, the daemon's cycles), of that on an empty queue alone, and the server's CPU seconds
#: (the daemon's in daemon arms)
COSTS = ("train_s", "wait_s", "queue_wait_s", "server_cpu_s")
QUICK = LoopSettings(rounds=2, steps_per_round=1, batch=4, cycles_per_round=1, measure_tasks=4,
                     heldout=32, heldout_n=1)
FULL = LoopSettings()
#: The powered synthetic row (#35): 4 rounds × 16 steps × 16 tasks; every served task of a round measured
#: (256); 512 held-out problems; the trainer paced at 0.5 s a step = 32 tasks/s (a tiny CPU TRL trainer
#: consumes 20-40); the solver starts at skill 4 (held-out ≈ 0.37) and learns 0.004 per useful group, so
#: an arm that trains on ~500-1,000 useful groups rises 20-45 points (not saturated, not flat).
POWERED = LoopSettings(rounds=4, steps_per_round=16, batch=16, measure_tasks=256, heldout=512, heldout_n=4,
                       start_skill=4.0, skill_per_useful_group=0.004, step_s=0.5)
POWERED_ARMS = ("continuous", "static", "base", "corpus", "reasoning_gym", "filter")
#: The LM row: a GRPO step is 4 prompts × 8 completions; the trainer paces itself (no cycle wait).
LM_FULL = LoopSettings(rounds=4, steps_per_round=10, batch=4, cycles_per_round=0, heldout=200, max_ops=3)


def run_one(arm: str, seed: int, settings: LoopSettings, generator: Path, workdir: Path) -> ArmResult:
    """One arm, one seed, synthetic learner: serve, train R rounds, then measure in-band."""
    from testkit.closed_loop_lab import first_tasks, lab_stepper, rg_source

    skill_file = workdir / "skills.json"
    learner = SyntheticLearner(settings, seed, skill_file)
    source = rg_source(arm, seed, settings)
    tasks = first_tasks(arm, settings, seed, source) if arm in LAB_ARMS else None
    with serve_arm(arm, workdir, generator, settings, seed, learner.solver_toml(), tasks) as server:
        step = lab_stepper(arm, learner, server, settings, source) if arm in (*LAB_ARMS, FILTERED_ARM) else None
        result = run_arm(arm, learner, server, settings, seed, log=lambda m: click.echo(m, err=True), step=step)
    measure_in_band(result, learner, settings)
    return result


def per_round(result: dict[str, Any]) -> dict[str, list[float]]:
    """One seed's curves (``ArmResult.to_json()``): every metric by round."""
    out: dict[str, list[float]] = {m: [] for m in METRICS + COSTS}
    for r in result["rounds"]:
        out["in_band"].append(float(r["in_band"] or 0.0))
        out["useful_share"].append(r["useful_groups"] / max(1, r["groups"]))
        out["heldout_accuracy"].append(float(r["heldout_accuracy"] or 0.0))
        out["daemon_trials"].append(float(r["daemon_trials"]))
        out["solver_rollouts"].append(float(all_rollouts(r)))
        for c in COSTS:
            if c in r:  # results of an older harness lack queue_wait_s: left out, never read as 0
                out[c].append(float(r[c] or 0.0))
    return out


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std over seeds per round, per metric and cost; plus the start accuracy and steps per round."""
    curves = [per_round(r) for r in results]
    out: dict[str, Any] = {"seeds": [r["seed"] for r in results], "steps": [x["steps"] for x in results[0]["rounds"]],
                           "start_heldout": float(np.mean([r["start_heldout"] for r in results]))}
    for m in METRICS + COSTS:
        if any(len(c[m]) != len(c["in_band"]) for c in curves):
            continue
        arr = np.array([c[m] for c in curves], dtype=float)
        out[m] = {"mean": arr.mean(0).round(4).tolist(), "std": arr.std(0).round(4).tolist(),
                  "per_seed": arr.round(4).tolist()}
    out["wall_s"] = float(np.mean([r["rounds"][-1]["wall_s"] for r in results]))
    train = out["train_s"]["mean"][-1]
    out["wait_share"] = round(out["wait_s"]["mean"][-1] / train, 4) if train else None
    return out


def steps_to_reach(arm: dict[str, Any], target: float) -> float | None:
    """Trainer steps at which the arm's mean held-out accuracy first reaches ``target`` (linear
    interpolation between rounds, from the start accuracy at step 0); None if never."""
    xs = [0, *arm["steps"]]
    ys = [arm["start_heldout"], *arm["heldout_accuracy"]["mean"]]
    for i in range(1, len(xs)):
        if ys[i] >= target:
            if ys[i - 1] >= target:
                return float(xs[i - 1])
            return float(xs[i - 1] + (xs[i] - xs[i - 1]) * (target - ys[i - 1]) / (ys[i] - ys[i - 1]))
    return None


def goals(table: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals, measured (never tuned to): value, target, met (None where the arms compared
    ran on different seeds: their means are not comparable)."""
    out: dict[str, Any] = {}
    a, b, c = table.get("continuous"), table.get("static"), table.get("base")
    out.update(_goals_of(a, b, c))
    for key, other in (("continuous_vs_static_final_in_band", b), ("continuous_vs_base_useful_groups", c),
                       ("continuous_steps_to_base_final_accuracy", c)):
        if key in out and a and other and a["seeds"] != other["seeds"]:
            out[key] = {**out[key], "met": None, "why_not_judged": "the arms ran on different seeds"}
    return out


def _goals_of(a: dict[str, Any] | None, b: dict[str, Any] | None, c: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a:
        first, last = a["in_band"]["mean"][0], a["in_band"]["mean"][-1]
        out["continuous_final_vs_first_in_band"] = _goal(last / first if first else None, ">= 0.8")
    if a and b:
        last_b = b["in_band"]["mean"][-1]
        out["continuous_vs_static_final_in_band"] = _goal(a["in_band"]["mean"][-1] / last_b if last_b else None,
                                                          ">= 1.5")
    if a and c:
        ua, uc = np.mean(a["useful_share"]["mean"]), np.mean(c["useful_share"]["mean"])
        out["continuous_vs_base_useful_groups"] = _goal(float(ua / uc) if uc else None, ">= 2.0")
        target, total = c["heldout_accuracy"]["mean"][-1], c["steps"][-1]
        reach = steps_to_reach(a, target)
        goal = _goal(reach / total if reach is not None else None, "<= 0.7")
        if target <= a["start_heldout"]:  # base never beat the common start: reaching it proves nothing
            goal = {**goal, "met": None, "vacuous": "base's final held-out accuracy is not above the start's"}
        out["continuous_steps_to_base_final_accuracy"] = {**goal, "steps": reach, "base_steps": total,
                                                          "base_final_accuracy": target}
    return out


def powered_goals(table: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """#35's goals, paired by seed (mean and 95 % interval): continuous reaches the best non-daemon arm's
    final held-out accuracy in ≤ 0.7× its steps and ≤ 1.0× its rollouts (the interval excluding 1, every
    seed reaching); the best arm rises ≥ 20 points; continuous / static final in-band ≥ 1.5; the
    continuous trainer waits < 5 % of its wall-clock."""
    out: dict[str, Any] = {}
    rise = {arm: t["heldout_accuracy"]["mean"][-1] - t["start_heldout"] for arm, t in table.items()}
    best_arm = max(rise, key=lambda a: rise[a])
    out["best_arm_heldout_rise"] = {**_goal(rise[best_arm], ">= 0.2"), "arm": best_arm}
    best = stats.get("best_non_daemon")
    if best and best in stats.get("vs", {}):
        for key, bound in (("steps_to_reach_its_final", 0.7), ("rollouts_to_reach_its_final", 1.0)):
            r = stats["vs"][best][key]
            met = (r["mean"] is not None and r["never_reached"] == 0 and r["mean"] <= bound
                   and r["hi"] is not None and r["hi"] < 1.0)
            out[f"continuous_{key.split('_')[0]}_to_best_non_daemon_final"] = {
                "value": r["mean"], "ci95": [r["lo"], r["hi"]], "never_reached": r["never_reached"],
                "target": f"<= {bound} (CI excludes 1)", "met": met, "vs": best}
    ib = stats.get("final_in_band_vs_static")
    if ib:
        goal = {**_goal(ib["mean"], ">= 1.5"), "ci95": [ib["lo"], ib["hi"]], "n": ib.get("n")}
        if (ib.get("n") or 0) < 2:  # one pair has no interval: not a measurement of the goal
            goal = {**goal, "met": None, "why_not_judged": "fewer than 2 paired seeds"}
        out["continuous_vs_static_final_in_band_paired"] = goal
    for key in ("wait_share", "queue_wait_share"):  # all waiting on the server; on an empty queue alone
        wait = stats.get(key, {}).get("continuous")
        if wait and wait["mean"] is not None:
            out[f"continuous_trainer_{key}"] = {**_goal(wait["mean"], "<= 0.05"), "ci95": [wait["lo"], wait["hi"]]}
    return out


def _goal(value: float | None, target: str) -> dict[str, Any]:
    op, bound = target.split()
    met = None if value is None else (value >= float(bound) if op == ">=" else value <= float(bound))
    return {"value": None if value is None else round(float(value), 4), "target": target, "met": met}


def markdown(rows: dict[str, dict[str, Any]], goal_rows: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Settings per row: {meta['settings']}; commit see JSON.", ""]
    for row, table in rows.items():
        lines += [f"**{row}** (final round; mean ± std over seeds)", "",
                  "| arm | in-band (first → final) | useful GRPO groups | held-out acc (start → final) | "
                  "daemon trials | solver rollouts (all) | trainer s (waiting) | server CPU s |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for arm, t in table.items():
            ib, us, ha, tr, ro = (t[m] for m in METRICS)
            train, wait, cpu = (t[c]["mean"][-1] for c in ("train_s", "wait_s", "server_cpu_s"))
            lines.append(f"| {arm} | {ib['mean'][0]:.2f} → {ib['mean'][-1]:.2f} ± {ib['std'][-1]:.2f} | "
                         f"{np.mean(us['mean']):.2f} | {t['start_heldout']:.3f} → {ha['mean'][-1]:.3f} ± "
                         f"{ha['std'][-1]:.3f} | {tr['mean'][-1]:.0f} | {ro['mean'][-1]:.0f} | "
                         f"{train:.0f} ({100 * wait / train if train else 0:.1f} %) | {cpu:.0f} |")
        lines += ["", "| goal | value | target | met |", "| --- | --- | --- | --- |"]
        for g, v in goal_rows[row].items():
            ci = f" (95 % CI {v['ci95'][0]}–{v['ci95'][1]})" if v.get("ci95") else ""
            lines.append(f"| {g} | {v['value']}{ci} | {v['target']} | {v['met']} |")
        lines.append("")
    return "\n".join(lines)


SYNTHETIC_ROW = "synthetic (learnable synthetic solver, SYNTHETIC)"
LM_ROW = "tiny LM (examples/trl_trainer.py, GRPO)"


def run_one_lm(arm: str, seed: int, settings: LoopSettings, lm: LMSettings, generator: Path, workdir: Path,
               cache: Path) -> ArmResult:
    """One arm, one seed, the tiny-LM trainer; in-band measured by each round's checkpoint afterwards."""
    from testkit.closed_loop_lm import run_lm_arm

    result, learner = run_lm_arm(arm, seed, settings, lm, generator, workdir, cache,
                                 say=lambda m: click.echo(m, err=True))
    measure_in_band(result, learner, settings, max_tokens=8)
    return result


def run_row(row: str, settings: LoopSettings, seeds: range, arms: tuple[str, ...], generator: Path,
            data_dir: Path, lm: LMSettings, keep: bool = False) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for seed in seeds:
        for arm in arms:
            work = Path(tempfile.mkdtemp(prefix=f"cl-{arm}-{seed}-", dir=data_dir))
            if row == SYNTHETIC_ROW:
                results.append(run_one(arm, seed, settings, generator, work).to_json())
            else:
                results.append(run_one_lm(arm, seed, settings, lm, generator, work,
                                          data_dir / "solver-cache").to_json())
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
    return results


def check_mergeable(row: str, settings: LoopSettings, lm: LMSettings, merge_from: tuple[Path, ...]) -> None:
    """Refuse (one line) a result file whose ``row`` ran with other settings than this run's: every setting
    both record is compared, seeds and the trainer's device aside (a merge of GPU parts may run on a CPU)."""
    def flat(loop: dict[str, Any], lm_json: dict[str, Any] | None) -> dict[str, Any]:
        lm_keys = {f"lm.{k}": v for k, v in (lm_json or {}).items() if k != "device"} if row == LM_ROW else {}
        return {**{k: v for k, v in loop.items() if k != "seeds"}, **lm_keys}

    expected = flat(json.loads(json.dumps(vars(settings))), json.loads(json.dumps(vars(lm))))
    for path in merge_from:
        data = json.loads(path.read_text())
        theirs = flat(data.get("settings", {}).get(row) or {}, data.get("lm"))
        differ = sorted(k for k in expected.keys() & theirs.keys() if theirs[k] != expected[k])
        if differ:
            raise click.UsageError(f"{path}: its {row} row ran with other {', '.join(differ)} than this run; "
                                   "merge results of one configuration only")


def merged(row: str, results: list[dict[str, Any]], merge_from: tuple[Path, ...]) -> list[dict[str, Any]]:
    """``results`` plus the same row's per-seed results of earlier result files (seeds run in other
    processes); a (arm, seed) pair run here wins over a merged one."""
    have = {(r["arm"], r["seed"]) for r in results}
    out = list(results)
    for path in merge_from:
        for r in json.loads(path.read_text()).get("per_seed", {}).get(row, []):
            if (r["arm"], r["seed"]) not in have:
                have.add((r["arm"], r["seed"]))
                out.append(r)
    return sorted(out, key=lambda r: (r["seed"], r["arm"]))


def run(plan: dict[str, tuple[LoopSettings, range]], arms: tuple[str, ...], generator_steps: int, data_dir: Path,
        name: str, lm: LMSettings, keep: bool = False, merge_from: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Every row of ``plan`` (row → settings, seeds), every arm, merged with ``merge_from``; JSON + PNG."""
    from benchmarks.closed_loop_report import plot
    from curriculum.rl.bootstrap import bootstrap

    for row, (settings, _) in plan.items():
        check_mergeable(row, settings, lm, merge_from)
    started = time.perf_counter()
    generator = bootstrap("arith", data_dir=data_dir / "models", steps=generator_steps, show_progress=False).path
    rows: dict[str, dict[str, Any]] = {}
    per_seed: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    for row, (settings, seeds) in plan.items():
        results = merged(row, run_row(row, settings, seeds, arms, generator, data_dir, lm, keep), merge_from)
        present = [a for a in dict.fromkeys(r["arm"] for r in results)]
        rows[row] = {arm: aggregate([r for r in results if r["arm"] == arm]) for arm in present}
        per_seed[row] = results
        stats[row] = comparisons(results)
        if any(r["arm"] == FILTERED_ARM for r in results):  # the daemon's stream filtered, against the rest
            stats[row][FILTERED_ARM] = comparisons(results, focus=FILTERED_ARM)
    goal_rows = {row: {**goals(t), **powered_goals(t, stats[row])} for row, t in rows.items()}
    for key in ("continuous_trainer_wait_share", "continuous_trainer_queue_wait_share"):
        goal_rows.get(LM_ROW, {}).pop(key, None)  # the TRL trainer's stream does not time its waits
    meta = {"settings": {row: {**vars(st), "seeds": sorted({r["seed"] for r in per_seed[row]})}
                         for row, (st, _) in plan.items()},
            "arms": list(arms), "generator_bootstrap_steps": generator_steps,
            "lm": vars(lm) if LM_ROW in plan else None, "merged_from": [str(p) for p in merge_from],
            "wall_s": round(time.perf_counter() - started, 1)}
    notes = [f"{SYNTHETIC_ROW}: the synthetic solver made learnable (skill += skill_per_useful_group per GRPO group of "
             "non-zero reward variance it trains on) — SYNTHETIC, not a model",
             "trainer paced at step_s seconds per step (its stated pace); train_s excludes held-out measurement "
             "and includes every wait on the server (wait_s: an empty queue, the daemon's cycles)"]
    if LM_ROW not in plan:
        notes.append("tiny-LM row: not run in this result")
    else:
        notes.append("tiny-LM row: train_s runs announce to announce (held-out scoring included); its waits on "
                     "the queue are not timed (wait_s 0 means unmeasured there)")
    data = {**meta, "rows": rows, "goals": goal_rows, "stats": stats, "per_seed": per_seed, "notes": notes,
            "markdown": markdown(rows, goal_rows, meta)}
    path = write_result(name, data)
    plot({**data, "commit": COMMIT_AT_START}, RESULTS / f"{name}.png")
    click.echo(f"wrote {path} and {RESULTS / (name + '.png')} in {data['wall_s']:.0f} s")
    click.echo(data["markdown"])
    return data


@click.command(help=__doc__)
@click.option("--quick", is_flag=True, help="2 rounds of 1 step of 4 tasks, 1 seed (a test of the pipeline)")
@click.option("--powered", is_flag=True,
              help="the powered synthetic row (#35): 4 rounds × 16 steps × 16 tasks, 256 measured tasks a round, "
                   "512 held-out, trainer paced at 32 tasks/s, all six arms, 5 seeds")
@click.option("--seeds", type=int, default=None, help="seeds (default 3; --powered 5; --quick 1)")
@click.option("--seed-start", type=int, default=0, show_default=True,
              help="first seed (run seeds in separate processes, then --merge-from their JSONs)")
@click.option("--merge-from", type=click.Path(exists=True, dir_okay=False, path_type=Path), multiple=True,
              help="result JSON(s) whose per-seed results join this one's (same row); --seeds 0 merges only")
@click.option("--rounds", type=int, default=None, help="rounds R (default 4; --quick: 2)")
@click.option("--steps-per-round", type=int, default=None, help="trainer steps per round (default 4; --powered 16)")
@click.option("--cycles-per-round", type=int, default=None,
              help="synthetic row, daemon arms: a round starts once the daemon has run this many more cycles, the "
                   "wait charged to the trainer (default 3; 0: the trainer never waits for cycles, as a real one)")
@click.option("--arms", default=None, help=f"comma-separated arms (default {','.join(ARMS)}; --powered all six); "
                                          f"also {FOLLOW_ARM}, and {', '.join((*LAB_ARMS, FILTERED_ARM))} "
                                          "(synthetic row only)")
@click.option("--sample-size-max", type=int, default=None,
              help="daemon arms: daemon.sample_size_max (default: the product's, 4 × sample_size; "
                   "32 = the config's sample_size = demand sampling off)")
@click.option("--rollouts", is_flag=True,
              help="daemon arms: daemon.emit_rollouts = true (the RL chunk's rollouts join the emission candidates)")
@click.option("--min-probability", type=click.FloatRange(0, 1), default=None,
              help="daemon arms: emission.min_probability (default: the product's, "
                   f"{EmissionConfig().min_probability}; the results before 2026-11-29 ran at 0.2)")
@click.option("--follow-lead", type=click.Choice(["0", "1", "2", "3", "auto"]), default=None,
              help="trainer_labels arm: frontier.trainer_band_lead, solves or auto (default: the product's)")
@click.option("--follow-replay", type=click.IntRange(min=0), default=None,
              help="trainer_labels arm: emission.replay_max, frontier replay (default: the product's; 0: off)")
@click.option("--daemon-set", multiple=True, metavar="SECTION.KEY=VALUE",
              help="daemon arms: one more config value (VALUE read as JSON, else a string), e.g. "
                   "health.rollback_novelty=0; repeatable")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="where the daemon's generator and the LM trainer run (cuda needs a visible GPU)")
@click.option("--daemon-device", type=click.Choice(["auto", "cpu"]), default="auto", show_default=True,
              help="the arms' servers: auto = as --device; cpu = started with no GPU visible (the trainer alone "
                   "on the GPU)")
@click.option("--generator-steps", type=int, default=300, show_default=True,
              help="bootstrap steps of the tiny arith generator (cached under DATA_DIR/models)")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".bench/closed_loop"),
              show_default=True)
@click.option("--rows", default=None, help="synthetic (fast sanity row) and/or lm (the tiny-LM trainer; --quick and "
                                           "--powered: synthetic only) [default: synthetic,lm]")
@click.option("--lm-seeds", type=int, default=None, help="seeds of the LM row (default: --seeds)")
@click.option("--lm-steps-per-round", type=int, default=LM_FULL.steps_per_round, show_default=True,
              help="GRPO steps per round of the LM row")
@click.option("--lm-measure-tasks", type=int, default=LM_FULL.measure_tasks, show_default=True,
              help="served tasks per round of the LM row whose in-band is measured (k = 8 by the round's checkpoint)")
@click.option("--lm-pretrain-steps", type=int, default=LMSettings().pretrain_steps, show_default=True,
              help="supervised steps of the LM solver before GRPO (cached)")
@click.option("--lm-held-out", type=click.IntRange(min=0), default=LMSettings().held_out, show_default=True,
              help="fixed held-out problems the LM row scores at each announce (greedy)")
@click.option("--lm-held-out-kind", type=click.Choice(["sums", "mix"]), default="sums", show_default=True,
              help="the LM row's held-out: two-digit sums (the pretraining's hard slice) or the arith corpus mix "
                   "of at most 3 operators (the range the arms serve)")
@click.option("--lm-learning-rate", type=click.FloatRange(min=0, min_open=True),
              default=LMSettings().learning_rate, show_default=True, help="the LM row's GRPO learning rate")
@click.option("--lm-prompts-per-step", type=click.IntRange(min=1), default=LMSettings().prompts_per_step,
              show_default=True, help="the LM row's GRPO prompts per step (each with 8 completions)")
@click.option("--keep-workdirs", is_flag=True, help="keep each arm's store, config and daemon log under DATA_DIR")
@click.option("--name", default="closed_loop", show_default=True, help="result file name")
def main(quick: bool, powered: bool, seeds: int | None, seed_start: int, merge_from: tuple[Path, ...],
         rounds: int | None, steps_per_round: int | None, cycles_per_round: int | None, arms: str | None,
         sample_size_max: int | None, rollouts: bool, min_probability: float | None, follow_lead: str | None,
         follow_replay: int | None, daemon_set: tuple[str, ...], device: str,
         daemon_device: str, generator_steps: int, data_dir: Path,
         rows: str | None,
         lm_seeds: int | None, lm_steps_per_round: int, lm_measure_tasks: int, lm_pretrain_steps: int,
         lm_held_out: int, lm_held_out_kind: str, lm_learning_rate: float, lm_prompts_per_step: int,
         keep_workdirs: bool, name: str) -> None:
    import signal
    import sys
    from dataclasses import replace

    # timeout(1) or a scheduler's SIGTERM: unwind, so that every arm's server is stopped (they run in their
    # own sessions and would outlive this process)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    check_overrides(daemon_set, "--daemon-set")  # the embedded config's keys and types
    try:
        extra = extra_tables(daemon_set)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--daemon-set") from None
    settings = QUICK if quick else POWERED if powered else FULL
    settings = replace(settings, daemon_extra=extra, rounds=rounds or settings.rounds,
                       steps_per_round=steps_per_round or settings.steps_per_round,
                       sample_size_max=sample_size_max, emit_rollouts=rollouts, follow_lead=follow_lead,
                       follow_replay=follow_replay,
                       min_probability=EmissionConfig().min_probability if min_probability is None else min_probability,
                       daemon_device="cpu" if device == "cpu" else daemon_device,
                       cycles_per_round=settings.cycles_per_round if cycles_per_round is None else cycles_per_round)
    chosen = tuple(a.strip() for a in (arms or ",".join(POWERED_ARMS if powered else ARMS)).split(",") if a.strip())
    known = (*ARMS, *LAB_ARMS, FOLLOW_ARM, FILTERED_ARM)
    unknown = [a for a in chosen if a not in known]
    if unknown:
        raise click.UsageError(f"unknown arm(s) {', '.join(unknown)}: choose from {', '.join(known)}")
    kinds = {r.strip() for r in (rows or ("synthetic" if powered else "synthetic,lm")).split(",") if r.strip()}
    check_setup(chosen, kinds, quick, device)
    n = 1 if quick else 5 if powered else 3
    n = n if seeds is None else seeds
    if n == 0 and not merge_from:
        raise click.UsageError("--seeds 0 runs nothing: give --merge-from files to merge, or seeds to run")
    plan: dict[str, tuple[LoopSettings, range]] = {}
    if "synthetic" in kinds:
        plan[SYNTHETIC_ROW] = (settings, range(seed_start, seed_start + n))
    if "lm" in kinds and not quick:
        lm_settings = replace(LM_FULL, steps_per_round=lm_steps_per_round, rounds=rounds or LM_FULL.rounds,
                              measure_tasks=lm_measure_tasks, daemon_device=settings.daemon_device,
                              heldout=lm_held_out, batch=lm_prompts_per_step,
                              min_probability=settings.min_probability, follow_lead=follow_lead,
                              follow_replay=follow_replay, daemon_extra=extra)
        plan[LM_ROW] = (lm_settings, range(seed_start, seed_start + (lm_seeds or n)))
    data_dir.mkdir(parents=True, exist_ok=True)
    lm = LMSettings(pretrain_steps=lm_pretrain_steps, held_out=lm_held_out, held_out_kind=lm_held_out_kind,
                    learning_rate=lm_learning_rate, prompts_per_step=lm_prompts_per_step, device=device)
    run(plan, chosen, generator_steps, data_dir.absolute(), name, lm, keep_workdirs, merge_from)


def check_setup(arms: tuple[str, ...], kinds: set[str], quick: bool, device: str) -> None:
    """One-line usage errors: missing reasoning-gym, lab arms on the LM row, unknown rows, no GPU."""
    import os

    if "reasoning_gym" in arms:
        from testkit.lab_arms import require_reasoning_gym

        try:
            require_reasoning_gym()
        except RuntimeError as exc:
            raise click.UsageError(str(exc)) from None
    lab = [a for a in arms if a in (*LAB_ARMS, FILTERED_ARM)]
    if lab and "lm" in kinds and not quick:
        raise click.UsageError(f"arm(s) {', '.join(lab)} run on the synthetic row only: pass --rows synthetic")
    if kinds - {"synthetic", "lm"}:
        raise click.UsageError(f"unknown row(s) {', '.join(sorted(kinds - {'synthetic', 'lm'}))}: synthetic, lm")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise click.UsageError("--device cuda: no GPU is visible here (torch.cuda.is_available() is False); "
                                   "run with --device cpu")
    else:  # the daemon subprocesses pick a visible GPU by themselves: hide it
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


if __name__ == "__main__":
    main()

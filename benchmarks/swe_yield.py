"""SWE bug validity yield of the procedural mutator, per operator and repository, with rejection
reasons; seconds per verified episode split into copy and test run; seconds per synthetic solver
trial.

For each chosen registry repository (fetched and preflighted: ``python -m curriculum.domains.swe
fetch``) and each of the 13 operators, ``--per-op`` bug specs are drawn uniformly (seeded) from
the spec space and verified with the product's verifier in the sandbox (the same code path as
``SweDomain.check``, without its on-disk memo so every episode really runs). Valid bugs then get
k=3 trials of the synthetic solver (labelled synthetic), graded by really running the suite.

Anchors (from the issue): procedural bug yields 17% (JavaScript) to 52–62% (Java) to about 86%
(one Python repository) in SWE-smith; about 72% of PROPEL's agent-written bugs valid.

Usage: ``.venv/bin/python benchmarks/swe_yield.py [--repos parse xmltodict idna inflection]
[--per-op 3] [--seed 0]``. Writes ``benchmarks/results/swe_yield.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import time
from collections import Counter, defaultdict
from typing import Any

from benchmarks._common import RESULTS, write_result
from curriculum.common.solver_api import Sampling
from curriculum.domains.swe.domain import SWE_BAND, RepoState, SweDomain
from curriculum.domains.swe.mutator import OPERATORS, mutation_patch
from curriculum.domains.swe.synthetic import SyntheticSweSolver
from curriculum.labelling.spotcheck import compute_label, grade_outcome

ANCHORS = {"swe_smith_javascript": 0.17, "swe_smith_java": [0.52, 0.62], "swe_smith_python_one_repo": 0.86,
           "propel_agent_bugs_valid": 0.72}


def git_commit() -> str:
    """``git rev-parse HEAD``, with ``-dirty`` when tracked files differ from it."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], capture_output=True).returncode != 0
    return (done.stdout.strip() or "unknown") + ("-dirty" if dirty else "")


def run_repo(domain: SweDomain, name: str, per_op: int, rng: random.Random) -> list[dict[str, Any]]:
    state = domain.repo(name)
    if not isinstance(state, RepoState):
        raise SystemExit(f"{name}: {state}")
    space = domain.spec_space(name)
    rows = []
    for op in sorted(OPERATORS):
        candidates = [s for s in space if s.operator == op]
        for spec in rng.sample(candidates, min(per_op, len(candidates))):
            patch = mutation_patch(state.checkout.root, spec).patch
            started = time.monotonic()
            verdict = state.verifier.verify(patch)
            rows.append({"repo": name, "operator": op, "spec": spec.render(), "code": verdict.code,
                         "reason": verdict.reason, "fail_to_pass": len(verdict.fail_to_pass),
                         "copy_s": verdict.copy_s, "run_s": verdict.run_s, "wall_s": time.monotonic() - started,
                         "patch": patch, "verdict": verdict})
        print(f"{name}: {op}: {sum(r['code'] == 'ok' for r in rows if r['operator'] == op)}/"
              f"{sum(r['operator'] == op for r in rows)} valid", flush=True)
    return rows


def solver_trials(domain: SweDomain, rows: list[dict[str, Any]], max_tasks: int) -> dict[str, Any]:
    """k=3 synthetic trials on up to ``max_tasks`` valid bugs (graded by real suite runs)."""
    import json

    from curriculum.domains.base import Task

    solver = SyntheticSweSolver(domain.cache.root, seed=0)
    band = domain_band()
    labels, trial_s, graded_s = [], [], []
    for row in [r for r in rows if r["code"] == "ok"][:max_tasks]:
        task = domain.parse(row["spec"]).task
        assert task is not None
        memo = domain.cache.root / "tasks" / f"{task.content_hash}.json"
        memo.parent.mkdir(parents=True, exist_ok=True)
        memo.write_text(json.dumps({"payload": task.payload, "verdict": row["verdict"].to_json()}))
        checked = domain.check(task).task
        answers = solver.generate([domain.solver_prompt(checked)], band.k, Sampling(seed=1))[0]
        outcomes = []
        for answer in answers:
            started = time.monotonic()
            outcomes.append(grade_outcome(domain, Task("swe", checked.text, checked.payload), answer.text))
            elapsed = time.monotonic() - started
            trial_s.append(elapsed)
            if answer.meta.get("correct"):
                graded_s.append(elapsed)
        labels.append(compute_label(outcomes, band))
    in_band = [lab.in_band for lab in labels if lab.in_band is not None]
    return {"solver": solver.solver_id, "synthetic": True, "band": SWE_BAND, "tasks": len(labels),
            "in_band_share": round(sum(in_band) / len(in_band), 3) if in_band else None,
            "solve_counts": dict(Counter(lab.solved for lab in labels)),
            "seconds_per_trial_mean": round(statistics.mean(trial_s), 3) if trial_s else None,
            "seconds_per_suite_graded_trial_mean": round(statistics.mean(graded_s), 3) if graded_s else None}


def domain_band() -> Any:
    from curriculum.labelling.spotcheck import Band

    return Band(**SWE_BAND)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(subset: list[dict[str, Any]]) -> float:
        return round(sum(r["code"] == "ok" for r in subset) / len(subset), 3) if subset else 0.0

    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_op[r["operator"]].append(r)
        by_repo[r["repo"]].append(r)
    rejected = [r for r in rows if r["code"] != "ok"]
    valid = [r for r in rows if r["code"] == "ok"]
    return {
        "episodes": len(rows), "valid": len(valid), "yield": share(rows),
        "yield_per_operator": {op: {"n": len(v), "yield": share(v),
                                    "rejections": dict(Counter(r["code"] for r in v if r["code"] != "ok"))}
                               for op, v in sorted(by_op.items())},
        "yield_per_repo": {repo: {"n": len(v), "yield": share(v)} for repo, v in sorted(by_repo.items())},
        "rejection_reason_shares": {code: round(n / len(rejected), 3)
                                    for code, n in Counter(r["code"] for r in rejected).most_common()},
        "seconds_per_episode": {"copy_mean": round(statistics.mean(r["copy_s"] for r in rows), 4),
                                "test_run_mean": round(statistics.mean(r["run_s"] for r in rows), 3),
                                "wall_mean": round(statistics.mean(r["wall_s"] for r in rows), 3)},
        "seconds_per_verified_episode": {
            "copy_mean": round(statistics.mean(r["copy_s"] for r in valid), 4) if valid else None,
            "test_run_mean": round(statistics.mean(r["run_s"] for r in valid), 3) if valid else None,
            "wall_mean": round(statistics.mean(r["wall_s"] for r in valid), 3) if valid else None,
            "wall_per_valid_bug": round(sum(r["wall_s"] for r in rows) / len(valid), 3) if valid else None},
        "median_fail_to_pass": statistics.median(r["fail_to_pass"] for r in valid) if valid else None,
    }


def plot(summary: dict[str, Any], rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [2, 1]})
    ops = list(summary["yield_per_operator"])
    codes = sorted({r["code"] for r in rows})
    palette = iter(["tab:orange", "tab:blue", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
                    "tab:olive", "tab:cyan"])
    colours = {code: "tab:green" if code == "ok" else next(palette) for code in ["ok", *codes]}
    bottom = [0.0] * len(ops)
    for code in ["ok", *[c for c in codes if c != "ok"]]:
        vals = [sum(r["code"] == code for r in rows if r["operator"] == op)
                / max(1, sum(r["operator"] == op for r in rows)) for op in ops]
        ax1.bar(ops, vals, bottom=bottom, label="valid" if code == "ok" else code, color=colours[code])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for name, value in (("SWE-smith Python (86%)", 0.86), ("PROPEL agent (72%)", 0.72),
                        ("SWE-smith JS (17%)", 0.17)):
        ax1.axhline(value, ls="--", lw=1, color="black")
        ax1.text(len(ops) - 0.5, value + 0.01, name, ha="right", fontsize=7)
    ax1.set_ylabel("share of episodes")
    ax1.set_title(f"procedural bug outcome per operator (overall yield {summary['yield']:.0%})")
    ax1.tick_params(axis="x", rotation=60)
    ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    repos = sorted({r["repo"] for r in rows})
    copy = [statistics.median(r["copy_s"] for r in rows if r["repo"] == repo) for repo in repos]
    run = [statistics.median(r["run_s"] for r in rows if r["repo"] == repo) for repo in repos]
    ax2.bar(repos, copy, label="copy")
    ax2.bar(repos, run, bottom=copy, label="test run")
    for i, repo in enumerate(repos):
        mean = statistics.mean(r["copy_s"] + r["run_s"] for r in rows if r["repo"] == repo)
        ax2.text(i, copy[i] + run[i], f"mean {mean:.1f}", ha="center", va="bottom", fontsize=7)
    ax2.set_ylabel("seconds per episode (median)")
    ax2.set_title("seconds per verifier episode (copy + test run)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repos", nargs="+", default=["parse", "xmltodict", "idna", "inflection"])
    parser.add_argument("--per-op", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solver-tasks", type=int, default=12)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--replot", action="store_true", help="only redraw the PNG from the stored JSON")
    args = parser.parse_args()
    if args.replot:
        import json

        stored = json.loads((RESULTS / "swe_yield.json").read_text())
        plot(stored, stored["episodes_detail"], str(RESULTS / "swe_yield.png"))
        return
    commit = git_commit()  # the code that runs is the code at start
    domain = SweDomain(args.cache, split=None, repos=args.repos, runner="auto")
    rng = random.Random(args.seed)
    started = time.monotonic()
    rows = [row for name in args.repos for row in run_repo(domain, name, args.per_op, rng)]
    summary = summarise(rows)
    trials = solver_trials(domain, rows, args.solver_tasks)
    examples = {code: next(r["reason"] for r in rows if r["code"] == code)
                for code in summary["rejection_reason_shares"]}
    data = {"commit": commit, "runner": domain.runner.name, "repos": args.repos, "per_op": args.per_op,
            "seed": args.seed, "total_s": round(time.monotonic() - started, 1), **summary,
            "rejection_examples": examples, "solver_trials": trials, "anchors": ANCHORS,
            "episodes_detail": [{k: v for k, v in r.items() if k not in ("patch", "verdict")} for r in rows]}
    path = write_result("swe_yield", data)
    plot(summary, rows, str(RESULTS / "swe_yield.png"))
    print(f"wrote {path}: yield {summary['yield']:.1%} over {len(rows)} episodes")


if __name__ == "__main__":
    main()

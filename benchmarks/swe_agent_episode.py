"""Seconds per SWE **agent** episode, split into copy, test runs, other tools and the agent loop, with a
**scripted model** (no model can run on this CPU machine; the model's own thinking time is not in these
numbers: add the serving latency per turn of the model a lab points the agent at).

The product's code runs every step: the generator episode is :func:`generate_bug` (what the daemon's
``AgentBugSupply`` runs), the completion goes through ``SweDomain.parse`` and ``SweDomain.check`` (the
verifier, cold memo), and the solver trials are ``AgentSweSolver.generate`` (the ``swe-agent`` backend,
built by :func:`build_agent_solver` as the daemon builds it) graded by ``grade_outcome`` and labelled
with ``compute_label`` (what ``label_tasks`` does). A scripted OpenAI-compatible HTTP server
(``testkit.servers.scripted_server``) plays the model with no thinking time. It replays procedural bugs:

* generator, per bug: ``bash`` (run the repository's suite) → ``edit`` (the mutator's change as an
  old/new snippet) → a summary with no tool call;
* solver, per trial: ``bash`` (run the failing tests named in the issue's repository) → ``edit`` (the
  reverse change) → ``bash`` (run them again) → a summary.

So the bugs are the mutator's (their validity says nothing about a model's) and every trial solves:
what this measures is the service's cost around the model, per episode and per turn.

Usage: ``python -m benchmarks.swe_agent_episode [--repos inflection parse sqlparse] [--bugs 4] [--k 3]``
(needs ``propel swe fetch`` first). Writes ``benchmarks/results/swe_agent_episode.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, write_result
from curriculum.common.solver_api import Sampling
from curriculum.domains.base import Task
from curriculum.domains.swe.agent import ChatClient
from curriculum.domains.swe.agent_backends import agent_limits, build_agent_solver
from curriculum.domains.swe.agent_roles import generate_bug
from curriculum.domains.swe.domain import SWE_BAND, RepoState, SweDomain
from curriculum.domains.swe.mutator import MutationError, mutate_source
from curriculum.domains.swe.spec import BugSpec
from curriculum.labelling.spotcheck import Band, bind_tasks, compute_label, grade_outcome
from testkit.servers import scripted_server

MODEL = "scripted"
_TASK = re.compile(r"^Task: ([0-9a-f]{16})$", re.MULTILINE)


@dataclass(frozen=True)
class Script:
    """One conversation's plan: the command the agent runs, and the edit it makes."""

    command: str
    path: str
    old: str
    new: str
    check_again: bool  # the solver runs its command again after the edit


def edit_snippet(before: str, after: str) -> tuple[str, str]:
    """The changed lines of ``before`` → ``after`` as an (old, new) pair, widened by whole lines of
    context until ``old`` occurs exactly once in ``before`` (the ``edit`` tool's rule)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi_a, hi_b = head, len(a) - tail, len(b) - tail
    while True:
        old, new = "".join(a[lo:hi_a]), "".join(b[lo:hi_b])
        if old and before.count(old) == 1:
            return old, new
        if lo == 0 and hi_a == len(a):
            raise ValueError("no unique snippet")
        lo, hi_a, hi_b = max(0, lo - 1), min(len(a), hi_a + 1), min(len(b), hi_b + 1)


def _call(name: str, n: int, **args: Any) -> dict[str, Any]:
    return {"id": f"call-{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


class ScriptedModel:
    """Answers the agent's chat requests from :class:`Script` s: generator conversations follow
    ``generator`` (set before each episode), solver conversations the script of their ``Task:`` id."""

    def __init__(self) -> None:
        self.generator: Script | None = None
        self.solver: dict[str, Script] = {}
        self.requests = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], i: int) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        found = _TASK.search(str(messages[1]["content"]))
        script = self.solver.get(found.group(1)) if found else self.generator
        with self.lock:
            self.requests += 1
        if script is None:
            return 200, {"choices": [{"message": {"role": "assistant", "content": "No plan."}}]}
        steps = [_call("bash", 0, command=script.command),
                 _call("edit", 1, path=script.path, old=script.old, new=script.new)]
        steps += [_call("bash", 2, command=script.command)] if script.check_again else []
        turn = sum(1 for m in messages if m["role"] == "assistant")
        message: dict[str, Any] = ({"role": "assistant", "content": "", "tool_calls": [steps[turn]]}
                                   if turn < len(steps) else {"role": "assistant", "content": "Done."})
        return 200, {"choices": [{"message": message}]}


def pytest_command(paths: list[str], pythonpath: tuple[str, ...]) -> str:
    env = f"PYTHONPATH={':'.join(pythonpath)} " if pythonpath else ""
    return f"{env}python -m pytest -q -p no:cacheprovider {' '.join(paths)} 2>&1 | tail -3"


def draw_bugs(domain: SweDomain, repo: str, n: int, rng: random.Random) -> list[tuple[BugSpec, str, str]]:
    """``n`` mutator bugs of ``repo`` with a unique edit snippet: (spec, file text before, after)."""
    state = domain.repo(repo)
    assert isinstance(state, RepoState), state
    out: list[tuple[BugSpec, str, str]] = []
    for spec in rng.sample(domain.spec_space(repo), min(len(domain.spec_space(repo)), 20 * n)):
        before = (state.checkout.root / spec.file).read_text()
        try:
            after = mutate_source(before, spec)
            edit_snippet(before, after), edit_snippet(after, before)  # the bug's edit and its reverse
        except (MutationError, ValueError, SyntaxError):
            continue
        if after != before:
            out.append((spec, before, after))
        if len(out) == n:
            break
    return out


def generator_episode(domain: SweDomain, model: ScriptedModel, client: ChatClient, repo: str,
                      bug: tuple[BugSpec, str, str]) -> dict[str, Any]:
    """One generator episode (``generate_bug``) and the verifier on its completion."""
    state = domain.repo(repo)
    assert isinstance(state, RepoState)
    spec, before, after = bug
    old, new = edit_snippet(before, after)
    tests = list(state.checkout.spec.tests) or ["."]
    model.generator = Script(pytest_command(tests, state.checkout.spec.pythonpath), spec.file, old, new, False)
    started = time.monotonic()
    episode, completion = generate_bug(domain, client, repo, agent_limits(max_steps=8))
    episode_s = time.monotonic() - started
    parsed = domain.parse(completion)
    if parsed.task is not None:  # a cold memo: every bug is verified again, as a new bug would be
        (domain.cache.root / "tasks" / f"{parsed.task.content_hash}.json").unlink(missing_ok=True)
    started = time.monotonic()
    validity = domain.check(parsed.task) if parsed.task is not None else None
    verify_s = time.monotonic() - started
    verdict = domain.verify(parsed.task) if parsed.task is not None else None
    return {"repo": repo, "spec": spec.render(), "stop_reason": episode.stop_reason, "steps": episode.steps,
            "episode_s": episode_s, "agent_s": episode.agent_s, "tool_s": episode.tool_s,
            "setup_s": episode_s - episode.agent_s - episode.tool_s,
            "valid": bool(validity and validity.valid), "reason": validity.reason if validity else parsed.reason,
            "verify_s": verify_s, "verify_copy_s": verdict.copy_s if verdict else 0.0,
            "verify_run_s": verdict.run_s if verdict else 0.0,
            "task": validity.task if validity and validity.valid else None, "file": spec.file,
            "fix": edit_snippet(after, before)}


def solver_trials(domain: SweDomain, model: ScriptedModel, url: str, row: dict[str, Any], k: int,
                  options: dict[str, Any]) -> dict[str, Any]:
    """``k`` agent trials on one verified bug (the ``swe-agent`` backend), each graded as spot-checks grade."""
    task: Task = row["task"]
    state = domain.repo(row["repo"])
    assert isinstance(state, RepoState)
    failing = list(task.payload["fail_to_pass"])[:3]
    fix_old, fix_new = row["fix"]
    model.solver[task.content_hash[:16]] = Script(pytest_command(failing, state.checkout.spec.pythonpath),
                                                 row["file"], fix_old, fix_new, True)
    solver = build_agent_solver(url, MODEL, domain_options=options, limits={"max_steps": 8})
    prompts = bind_tasks(solver, domain, [task])
    started = time.monotonic()
    [answers] = solver.generate(prompts, k, Sampling(seed=0))
    generate_s = time.monotonic() - started
    outcomes, grade_s = [], []
    for answer in answers:
        t0 = time.monotonic()
        outcomes.append(grade_outcome(domain, task, answer.text))
        grade_s.append(time.monotonic() - t0)
    label = compute_label(outcomes, Band(**SWE_BAND))
    metas = [a.meta for a in answers]
    return {"repo": row["repo"], "outcomes": outcomes, "solved": label.solved, "valid_trials": label.valid_trials,
            "trial_s": [generate_s / k + g for g in grade_s], "episode_s": generate_s / k,
            "agent_s": [m.get("agent_s", 0.0) for m in metas], "tool_s": [m.get("tool_s", 0.0) for m in metas],
            "steps": [m.get("steps", 0) for m in metas], "grade_s": grade_s}


def mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _means(rows: list[dict[str, Any]], keys: dict[str, str]) -> dict[str, float | None]:
    """``{name: mean of row[key]}``; a key holding lists is flattened over the rows."""
    out: dict[str, float | None] = {}
    for name, key in keys.items():
        values = [v for r in rows for v in (r[key] if isinstance(r[key], list) else [r[key]])]
        out[name] = mean(values)
    return out


def summarise(gens: list[dict[str, Any]], trials: list[dict[str, Any]]) -> dict[str, Any]:
    valid = [g for g in gens if g["valid"]]
    generator = _means(gens, {"episode_s": "episode_s", "copy_and_diff_s": "setup_s", "tool_s": "tool_s",
                              "agent_loop_s": "agent_s", "verify_s": "verify_s", "verify_copy_s": "verify_copy_s",
                              "verify_run_s": "verify_run_s"})
    solver = _means(trials, {"trial_s": "trial_s", "episode_s": "episode_s", "tool_s": "tool_s",
                             "agent_loop_s": "agent_s", "grade_s": "grade_s"})
    steps = sum(g["steps"] for g in gens) + sum(sum(t["steps"]) for t in trials)
    agent = sum(g["agent_s"] for g in gens) + sum(sum(t["agent_s"]) for t in trials)
    per_bug = round(sum(g["episode_s"] + g["verify_s"] for g in gens) / len(valid), 3) if valid else None
    return {"generator": {"episodes": len(gens), "valid": len(valid),
                          "stop_reasons": sorted({g["stop_reason"] for g in gens}), **generator,
                          "per_verified_bug_s": per_bug},
            "solver": {"trials": sum(len(t["grade_s"]) for t in trials), "solved": sum(t["solved"] for t in trials),
                       **solver},
            "agent_loop_s_per_turn": round(agent / steps, 5) if steps else None}


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g, s = summary["generator"], summary["solver"]
    rows = [("generator episode\n+ verification",
             [("copy + diff", g["copy_and_diff_s"]), ("agent tools (suite)", g["tool_s"]),
              ("agent loop", g["agent_loop_s"]), ("verifier / grading", g["verify_s"])]),
            ("solver trial\n+ grading",
             [("copy + diff", s["episode_s"] - s["tool_s"] - s["agent_loop_s"]), ("agent tools (suite)", s["tool_s"]),
              ("agent loop", s["agent_loop_s"]), ("verifier / grading", s["grade_s"])])]
    colors = {"copy + diff": "#999999", "agent tools (suite)": "#4c72b0", "agent loop": "#dd8452",
              "verifier / grading": "#55a868"}
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for y, (_, parts) in enumerate(rows):
        left = 0.0
        for name, value in parts:
            ax.barh(y, value, left=left, color=colors[name], label=name if y == 0 else None)
            left += value
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_xlabel("seconds (scripted model: no model time)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("SWE agent episode cost around the model (mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repos", nargs="+", default=["inflection", "parse", "sqlparse"])
    parser.add_argument("--bugs", type=int, default=4, help="generator episodes per repository")
    parser.add_argument("--k", type=int, default=SWE_BAND["k"], help="solver trials per verified bug")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=None, help="the SWE cache (default: the domain's)")
    parser.add_argument("--name", default="swe_agent_episode")
    args = parser.parse_args()
    options: dict[str, Any] = {"split": None, "repos": args.repos, "runner": "auto",
                               **({"cache_dir": args.cache} if args.cache else {})}
    domain = SweDomain(**options)
    missing = [r for r in args.repos if not isinstance(domain.repo(r), RepoState)]
    if missing:
        raise SystemExit(f"not fetched or not usable: {', '.join(missing)}; run `propel swe fetch` first")
    rng = random.Random(args.seed)
    model = ScriptedModel()
    started = time.monotonic()
    gens: list[dict[str, Any]] = []
    trials: list[dict[str, Any]] = []
    with scripted_server(model, models=[MODEL]) as (url, _):
        client = ChatClient(url, MODEL)
        for repo in args.repos:
            for bug in draw_bugs(domain, repo, args.bugs, rng):
                row = generator_episode(domain, model, client, repo, bug)
                gens.append(row)
                print(f"{repo}: {row['spec']}: {'valid' if row['valid'] else row['reason']} "
                      f"(episode {row['episode_s']:.2f} s, verify {row['verify_s']:.2f} s)", flush=True)
                if row["valid"]:
                    trials.append(solver_trials(domain, model, url, row, args.k, options))
                    print(f"  solver: {trials[-1]['outcomes']}", flush=True)
    summary = summarise(gens, trials)
    data = {"scripted_model": True, "note": "SCRIPTED MODEL: a scripted OpenAI-compatible server replays mutator "
            "bugs and their reverse fixes; no model time is included", "runner": domain.runner.name,
            "repos": args.repos, "bugs_per_repo": args.bugs, "k": args.k, "seed": args.seed,
            "requests": model.requests, "total_s": round(time.monotonic() - started, 1), **summary,
            "generator_detail": [{k: v for k, v in g.items() if k not in ("task", "fix")} for g in gens],
            "solver_detail": trials}
    path = write_result(args.name, data)
    plot(summary, RESULTS / f"{args.name}.png")
    print(f"wrote {path}: {json.dumps(summary)}")


if __name__ == "__main__":
    main()

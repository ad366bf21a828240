"""An outside trainer against the default daemon (issue #36), shared by ``benchmarks/follow_trainer.py`` and
``tests/integration/test_follow_trainer.py``.

The daemon is ``propel run`` with the embedded defaults (shrunk for a CPU by :func:`testkit.configs.write_config`)
and no solver setting: its spot-check solver is the synthetic one at its default skill. The trainer is
another solver the daemon cannot spot-check: a :class:`testkit.closed_loop.SyntheticLearner` (SYNTHETIC — a
sanity instrument) of its own skill, acking every task once under its own name ``my-policy`` as its current
version and announcing ``step-N`` every ``announce_every`` GRPO steps. ``follow = False`` sets
``solver.follow = "config"`` (today's behaviour: the daemon keeps following its own solver).

Per GRPO step it records the tasks served, the exact probability that each lands in the band for the
trainer's solver at that step (the synthetic solver's success probability, binomial over k — no sampling
noise), and the useful groups (0 < solves < group), i.e. the group has reward variance.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from curriculum.solvers.synthetic import SyntheticArithSolver
from probes.band import Band
from propel_sdk.client import Ack, PropelClient
from testkit.closed_loop import ArmServer, LoopSettings, SyntheticLearner, propel, stop_process, task_of
from testkit.configs import write_config
from testkit.servers import free_port

TRAINER = "my-policy"  # the outside trainer's solver name (the daemon is never told it)
BAND = Band(8, 1, 3, 6)


@dataclass(frozen=True)
class Scenario:
    steps: int = 100
    batch: int = 8  # GRPO prompts per step
    group: int = 8  # completions per prompt
    announce_every: int = 50
    start_skill: float = 2.0  # the trainer's solver: far weaker than the daemon's synthetic one (6.0), as in #36
    skill_per_useful_group: float = 0.01
    wait_s: float = 20.0  # a step takes what the queue holds after at most this long (at least one task)
    first_wait_s: float = 900.0  # the first tasks: the daemon bootstraps its generator and probes first
    # the product's emission threshold: testkit/configs.py lowers it to 0.2 for quick tests, which emits nearly
    # every sampled task and leaves the probes no say in what is served
    min_probability: float = 0.5


@dataclass
class StepRecord:
    step: int
    version: str
    tasks: int
    in_band_p: list[float]  # exact in-band probability of each served task for the trainer at this step
    useful: int
    explore: int
    remeasure: int
    skill: float
    too_easy_p: list[float] = field(default_factory=list)  # exact P(solves > band.hi) of each served task
    at: float = 0.0  # wall clock (time.time()) when the step leased its tasks: maps daemon cycles to skills
    replay: int = 0  # tasks served again by frontier replay (message "replay": true)


@dataclass
class Run:
    follow: bool
    seed: int
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)


def in_band_probability(solver: SyntheticArithSolver, expr: str, band: Band = BAND) -> float:
    """P(lo ≤ solves ≤ hi) of k attempts for the synthetic solver (its own success probability)."""
    return band.probability(solver.success_probability(expr))


def too_easy_probability(solver: SyntheticArithSolver, expr: str, band: Band = BAND) -> float:
    """P(solves > hi) of k attempts: the task is above the band for this solver."""
    if band.hi == band.k:
        return 0.0
    return Band(band.k, band.hi + 1, band.k).probability(solver.success_probability(expr))


@contextmanager
def default_daemon(workdir: Path, generator: Path, seed: int, follow: bool,
                   min_probability: float = 0.5, label_window: int | None = None,
                   daemon_keys: str = "", frontier_keys: str = "", emission_keys: str = "") -> Iterator[ArmServer]:
    """``propel run`` with the defaults (follow off: ``solver.follow = "config"``) at the product's emission
    threshold; ``label_window`` sets ``frontier.refresh_trainer_label_window`` (None: the default);
    ``daemon_keys`` go into the ``[daemon]`` table, ``frontier_keys`` into ``[frontier]``, ``emission_keys``
    into ``[emission]``."""
    workdir.mkdir(parents=True, exist_ok=True)
    db_url, port, run = f"sqlite:///{workdir / 'propel.db'}", free_port(), "follow" if follow else "config"
    solver = "" if follow else '[solver]\nfollow = "config"\n'
    if label_window is not None:
        frontier_keys += f"\nrefresh_trainer_label_window = {label_window}"
    if frontier_keys:
        solver += f"[frontier]\n{frontier_keys.strip()}\n"
    cfg = write_config(workdir / "propel.toml", generator, workdir / "data", db_url, run, solver, port=port,
                       seed=seed, daemon_keys=daemon_keys, min_probability=min_probability,
                       emission_keys=emission_keys)
    log = workdir / "propel.log"
    proc = propel(cfg, "run", log=log, wait=False)
    try:
        yield ArmServer(f"http://127.0.0.1:{port}", db_url, proc, log, run, cfg)
    finally:
        stop_process(proc)


def lease_some(client: PropelClient, server: ArmServer, n: int, wait_s: float) -> list[Any]:
    """Up to ``n`` tasks: what the queue holds once full or after ``wait_s`` (at least one)."""
    got: list[Any] = []
    deadline = time.monotonic() + wait_s
    while len(got) < n:
        with suppress(httpx.TransportError):  # the API is not up yet (connection refused)
            got += client.lease(n - len(got), lease_s=3_600, consumer="outside-trainer")
        if len(got) >= n or (got and time.monotonic() > deadline):
            break
        if server.proc.poll() is not None:
            raise RuntimeError(f"daemon exited ({server.proc.returncode}): {server.log.read_text()[-3000:]}")
        if time.monotonic() > deadline + 3_600:
            raise TimeoutError(f"no task after {wait_s + 3_600:.0f} s; log {server.log}")
        time.sleep(0.5)
    return got


def train(server: ArmServer, sc: Scenario, seed: int, follow: bool, log: Any = print) -> Run:
    """The trainer's loop: lease, roll out a group per task, ack each once, announce every ``announce_every``."""
    settings = LoopSettings(group=sc.group, start_skill=sc.start_skill,
                            skill_per_useful_group=sc.skill_per_useful_group)
    learner = SyntheticLearner(settings, seed, server.log.parent / "trainer-skills.json")
    learner.checkpoint("step-0")
    out, started = Run(follow, seed), time.monotonic()
    with PropelClient(server.url, timeout_s=60) as client:
        for step in range(sc.steps):
            leased = lease_some(client, server, sc.batch, sc.first_wait_s if step == 0 else sc.wait_s)
            leased_at = time.time()
            tasks = [task_of(t.message["grading"]) for t in leased]
            judge = SyntheticArithSolver(offset=learner.skill, seed=seed)
            probs = [in_band_probability(judge, t.text) for t in tasks]
            easy = [too_easy_probability(judge, t.text) for t in tasks]
            skill, solved = learner.skill, learner.train_step(tasks)
            client.ack_many([Ack(t, solved=n, n=sc.group, solver=TRAINER, version=learner.version)
                             for t, n in zip(leased, solved, strict=True)])
            out.steps.append(StepRecord(step, learner.version, len(tasks), probs,
                                        sum(0 < n < sc.group for n in solved),
                                        sum(bool(t.message.get("explore")) for t in leased),
                                        sum(bool(t.message.get("remeasure")) for t in leased), skill, easy,
                                        leased_at, sum(bool(t.message.get("replay")) for t in leased)))
            if (step + 1) % sc.announce_every == 0:
                learner.checkpoint(f"step-{step + 1}")
                client.announce(TRAINER, learner.version)
            if step % 10 == 9:
                last = out.steps[-10:]
                log(f"[follow={follow} seed {seed}] step {step + 1}: {sum(r.tasks for r in last)} tasks, in band "
                    f"{_mean([p for r in last for p in r.in_band_p]):.3f} (too easy "
                    f"{_mean([p for r in last for p in r.too_easy_p]):.2f}), useful "
                    f"{sum(r.useful for r in last)}/{sum(r.tasks for r in last)}, skill {learner.skill:.2f}, "
                    f"{time.monotonic() - started:.0f} s")
        out.status = client.status()
    out.wall_s = time.monotonic() - started
    return out


def window(run: Run, lo: int, hi: int) -> dict[str, float]:
    """In-band share, useful-group share and tasks served over GRPO steps ``lo..hi`` (inclusive)."""
    rows = [r for r in run.steps if lo <= r.step <= hi]
    tasks = sum(r.tasks for r in rows)
    return {"in_band": _mean([p for r in rows for p in r.in_band_p]),
            "too_easy": _mean([p for r in rows for p in r.too_easy_p]), "useful_share": sum(r.useful for r in rows)
            / max(1, tasks), "tasks": float(tasks), "tasks_asked": float(len(rows) * 8),
            "explore": float(sum(r.explore for r in rows)), "remeasure": float(sum(r.remeasure for r in rows)),
            "replay": float(sum(r.replay for r in rows))}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0

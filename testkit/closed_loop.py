"""The closed-loop harness: a solver trainer downstream of the real daemon, round by round.

Shared by ``benchmarks/closed_loop.py`` and its quick test. Every arm serves tasks the way users get
them: through the product's HTTP API (``propel run`` for the daemon arms, ``propel tasks import`` +
``propel serve`` for the baselines), leased and acked with :class:`propel_sdk.client.PropelClient`.

Arms (same solver start, same trainer steps, same daemon spot-check budget per cycle):

* ``continuous`` — ``propel run`` with trainer feedback on: the trainer acks its outcomes and announces
  each checkpoint under the daemon's solver name, so spot-checks follow the current version, labels age
  by the staleness policy, drift is re-measured and the primary probe is refreshed (champion/challenger)
  on drift and after every round's worth of new labels (``frontier.refresh_every_labels``);
* ``static`` — the same daemon with feedback off: its solver name (``solver.name``) differs from the
  one the trainer acks and announces under, and ``frontier.drift_budget_share = 0``. Its spot-checks
  stay on the cycle-0 solver — one PROPEL run whose labels never see the trainer's checkpoints;
* ``base`` — valid tasks sampled from the untrained (bootstrapped, no RL) generator, imported;
* ``corpus`` — tasks drawn from the bootstrap corpus (the generator's pre-training distribution), imported;
* ``trainer_labels`` (opt-in, #35/#36) — ``propel run`` that knows the trainer's solver only through its
  acks and announces: the daemon's configured solver is its own synthetic one at the default skill (it
  never reads the trainer's skill file), ``solver.follow = "first_trainer"``, so from the trainer's first
  ack on there are no spot-checks and the probes, drift and emission learn from trainer labels alone
  (the product's defaults: refresh every 128 of them, on the newest 256, an exploration share of 15 %).

The *learner* (the trainer's model of the solver) is pluggable: :class:`SyntheticLearner` is the fast
sanity instrument — ALWAYS labelled synthetic — whose skill (the synthetic solver's offset) rises with
the GRPO groups of non-zero reward variance it trains on; it writes each checkpoint's skill to the skill
file the daemon's synthetic spot-check solver reads (``solver.synthetic_skill_file``).

Measurement happens after an arm finishes, outside every arm's budget: the tasks served in each round
are labelled with k attempts by the checkpoint that trained on them (the version current when they were
leased), with the product's grader (:func:`curriculum.labelling.spotcheck.label_tasks`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import Task
from curriculum.labelling.spotcheck import grade_outcome, label_tasks
from curriculum.solvers.synthetic import SyntheticArithSolver, write_skill_file
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial
from probes.band import Band
from propel_sdk.client import Ack, LeasedTask, PropelClient
from testkit.configs import write_config
from testkit.servers import free_port

ARMS = ("continuous", "static", "base", "corpus")
LAB_ARMS = ("reasoning_gym", "filter")  # what a lab would use instead (testkit/closed_loop_lab.py); opt-in
FOLLOW_ARM = "trainer_labels"  # the daemon follows the trainer from its acks alone; opt-in
FILTERED_ARM = "continuous_filter"  # continuous's daemon, the trainer filtering its stream like the filter arm; opt-in
DAEMON_ARMS = ("continuous", "static", FOLLOW_ARM, FILTERED_ARM)
SOLVER_NAME = "arith-solver"  # what the trainer acks and announces under
FROZEN_NAME = "arith-solver-frozen"  # the static daemon's spot-check solver name: the trainer never announces it
BAND = Band(8, 1, 3, 6)  # the run's utility band (k = 8, 1-3 solves)


@dataclass(frozen=True)
class LoopSettings:
    """One closed-loop run's shape (every arm gets the same)."""

    rounds: int = 4
    steps_per_round: int = 4
    batch: int = 16  # tasks per trainer step (GRPO prompts)
    cycles_per_round: int = 3  # daemon arms: a round starts once the daemon has run this many more cycles
    group: int = 8  # completions per task (num_generations)
    measure_k: int = 8  # independent in-band measurement: attempts per served task
    measure_tasks: int = 32  # served tasks measured per round (a seeded sample)
    heldout: int = 256  # fixed held-out arithmetic test set
    heldout_n: int = 4  # attempts per held-out task
    spot_budget: int = 12  # daemon spot-check tasks per cycle (both daemon arms)
    start_skill: float = 6.0  # synthetic: the solver's start offset (the synthetic backend's default)
    skill_per_useful_group: float = 0.03  # synthetic: skill gained per non-zero-variance GRPO group
    lease_timeout_s: float = 900.0  # a trainer step waits this long for a batch, then the arm fails
    max_ops: int = 6  # the arith domain's operator limit (daemon validity, imported tasks)
    daemon_extra: str = ""  # extra daemon config TOML (appended)
    follow_lead: str | None = None  # trainer_labels arm: frontier.trainer_band_lead, "1" or "auto" (None: the default)
    follow_replay: int | None = None  # trainer_labels arm: emission.replay_max (None: the product's default)
    filter_pool: int = 0  # filter arm: static pool size (0: 16 × the tasks the trainer trains on)
    sample_size_max: int | None = None  # daemon arms: daemon.sample_size_max (None: the product's default)
    emit_rollouts: bool = False  # daemon arms: daemon.emit_rollouts (the product's default: off)
    min_probability: float = 0.2  # daemon arms: emission.min_probability (the product's default is 0.5)
    step_s: float = 0.0  # the trainer's pace: a step computes at least this long (0: as fast as the learner)
    daemon_device: str = "auto"  # the arm's server: "auto" takes a visible GPU, "cpu" is started with none visible


@dataclass
class RoundRecord:
    round: int
    version: str  # the checkpoint the round's tasks were served to (current when leased)
    steps: int  # trainer steps done by the end of the round
    served: list[dict[str, Any]]  # the served tasks' grading payloads
    groups: int
    useful_groups: int
    daemon_trials: int  # solver trials the daemon has spent so far (cumulative)
    daemon_cycle: int
    wall_s: float
    heldout_accuracy: float | None = None  # of the checkpoint at the end of the round
    in_band: float | None = None  # measured later, k attempts by ``version``
    rollouts: int = 0  # trainer rollouts on the groups it trained on, cumulative
    filter_rollouts: int = 0  # filter arm: rollouts of groups it dropped, cumulative
    level: int | None = None  # reasoning_gym arm: its curriculum's level at the end of the round
    train_s: float = 0.0  # trainer wall-clock, cumulative, held-out measurement excluded (waiting included)
    wait_s: float = 0.0  # of which the trainer waited on the server: an empty queue, the daemon's cycles
    queue_wait_s: float = 0.0  # of which on an empty queue (the rest: the daemon arms' cycles_per_round)
    server_cpu_s: float = 0.0  # CPU seconds of the arm's server process tree (the daemon for daemon arms)
    replayed: int = 0  # tasks the daemon served again by frontier replay so far (cumulative; LM row)
    rollbacks: int = 0  # generator rollbacks so far (cumulative; LM row)
    novel_share: float | None = None  # mean share of new tasks in the daemon's valid samples this round (LM row)


@dataclass
class ArmResult:
    arm: str
    seed: int
    start_heldout: float
    rounds: list[RoundRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for r in out["rounds"]:
            r["served"] = len(r["served"])
        return out


class Learner(Protocol):
    """The trainer's side: rolls a batch out, updates, checkpoints as a version, answers as a version."""

    synthetic: bool
    version: str

    def solver_toml(self) -> str: ...  # the daemon's [solver] keys besides its name

    def train_step(self, tasks: Sequence[Task]) -> list[int]: ...  # solves of ``group`` per task

    def checkpoint(self, version: str) -> None: ...

    def solver_at(self, version: str) -> SolverBackend: ...


def task_of(message_grading: dict[str, Any]) -> Task:
    """The arith task a served message's grading payload describes (what the grader needs)."""
    return Task("arith", str(message_grading["expr"]), dict(message_grading))


class SyntheticLearner:
    """A fake trainer: the synthetic solver whose skill rises by ``skill_per_useful_group`` for every
    GRPO group with non-zero reward variance it trains on. SYNTHETIC — a sanity instrument only."""

    synthetic = True

    def __init__(self, settings: LoopSettings, seed: int, skill_file: Path) -> None:
        self.s, self.seed, self.skill_file = settings, seed, skill_file
        self.skill = settings.start_skill
        self.skills: dict[str, float] = {"": settings.start_skill}
        self.version, self.steps = "", 0
        self.domain = ArithDomain()

    def train_step(self, tasks: Sequence[Task]) -> list[int]:
        solved = self.rollout(tasks)
        self.learn(solved)
        return solved

    def rollout(self, tasks: Sequence[Task]) -> list[int]:
        """The current policy's group of ``group`` attempts per task: solves per task (no update)."""
        solver = SyntheticArithSolver(offset=self.skill, seed=self.seed)
        comps = solver.generate([self.domain.solver_prompt(t) for t in tasks], self.s.group,
                                Sampling(seed=self.seed * 100_003 + self.steps))
        return [sum(grade_outcome(self.domain, t, c.text) == "pass" for c in row)
                for t, row in zip(tasks, comps, strict=True)]

    def learn(self, solved: Sequence[int]) -> None:
        """One update on rolled-out groups: only groups of non-zero reward variance teach."""
        self.skill += self.s.skill_per_useful_group * sum(0 < n < self.s.group for n in solved)
        self.steps += 1

    def checkpoint(self, version: str) -> None:
        self.skills[version] = self.skill
        self.version = version
        write_skill_file(self.skill_file, version, self.skill)

    def solver_at(self, version: str) -> SolverBackend:
        return SyntheticArithSolver(offset=self.skills[version], seed=self.seed + 7_777)

    def solver_toml(self) -> str:
        """The daemon's ``[solver]`` keys: the synthetic backend reading this learner's skill file."""
        return f'synthetic_skill_file = "{self.skill_file}"\n'


# ---- task sources for the baseline arms -------------------------------------------------------------
def base_tasks(generator: Path, n: int, seed: int, max_ops: int = 6) -> list[Task]:
    """``n`` distinct valid tasks sampled from the untrained (bootstrapped, no RL) generator."""
    from curriculum.rl.bootstrap import load_bootstrapped, sample_completions

    model, tok = load_bootstrapped(generator)
    return _valid_unique(lambda i: sample_completions(model, tok, 2 * n, seed=seed * 1_000 + i), n, max_ops)


def corpus_tasks(n: int, seed: int, max_ops: int = 6) -> list[Task]:
    """``n`` distinct tasks drawn from the bootstrap corpus (the generator's pre-training mix)."""
    from curriculum.rl.bootstrap import expression_batch

    rng = random.Random(10_000 + seed)
    return _valid_unique(lambda _: expression_batch(rng, 2 * n), n, max_ops)


def _valid_unique(draw: Any, n: int, max_ops: int) -> list[Task]:
    domain, out, seen = ArithDomain(max_ops=max_ops), [], set()
    for i in range(20):
        for v in domain.validate_batch(draw(i)):
            if v.valid and v.task.content_hash not in seen:
                seen.add(v.task.content_hash)
                out.append(v.task)
        if len(out) >= n:
            return out[:n]
    raise RuntimeError(f"only {len(out)} distinct valid tasks after 20 draws (wanted {n})")


def task_records(tasks: Sequence[Task], source: str, run: str) -> str:
    """JSONL that ``propel tasks import`` accepts (one TaskRecord per task)."""
    domain, now = ArithDomain(), datetime.now(UTC).isoformat()
    lines = []
    for t in tasks:
        lines.append(json.dumps({
            "domain": "arith", "text": t.text, "solver_prompt": domain.solver_prompt(t), "grading": t.payload,
            "predicted_in_band": 0.0, "spot_check": None, "topic": domain.topic(t), "band": [BAND.lo, BAND.hi],
            "k": BAND.k, "created_at": now,
            "provenance": {"generator_step": None, "adapter_hash": None, "probe_ensemble_id": None,
                           "reference_model": source, "run": run}}))
    return "\n".join(lines) + "\n"


# ---- the arms' servers --------------------------------------------------------------------------------
@dataclass
class ArmServer:
    url: str
    db_url: str
    proc: subprocess.Popen[bytes]
    log: Path
    run: str
    config: Path | None = None
    waited_s: float = 0.0  # trainer seconds spent waiting on this server (lease_batch, wait_cycles)
    queue_waited_s: float = 0.0  # of which on an empty queue (lease_batch)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) of the server process and its children, live and reaped."""
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return total

    def trials(self) -> int:
        """Solver trials the daemon has spent (every solver name it recorded)."""
        store = Store(self.db_url)
        try:
            with store.session() as s:
                return int(s.execute(select(func.count()).select_from(SolverTrial)).scalar_one())
        except OperationalError:
            return 0
        finally:
            store.dispose()

    def cycle(self) -> int:
        from sqlalchemy import text

        store = Store(self.db_url)
        try:
            with store.session() as s:
                row = s.execute(text("SELECT cycle FROM daemon_state")).first()
            return int(row[0]) if row else 0
        except OperationalError:
            return 0
        finally:
            store.dispose()


def propel(config: Path, *args: str, log: Path, wait: bool = True, cpu: bool = False) -> subprocess.Popen[bytes]:
    """Run ``propel --config CONFIG ARGS…`` as a user does (output appended to ``log``); ``cpu``: with no
    GPU visible (``CUDA_VISIBLE_DEVICES=""``, how a user keeps the daemon off a GPU box's card)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(config), *args],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    if wait and proc.wait() != 0:
        raise RuntimeError(f"propel {' '.join(args)} failed ({proc.returncode}): {log.read_text()[-3000:]}")
    return proc


def daemon_extra(arm: str, settings: LoopSettings, solver_toml: str) -> str:
    """The arm's daemon config: the continuous daemon spot-checks under the trainer's solver name (so
    announces and acks reach it); the static one under another name, with drift re-measurement off.
    ``solver_toml``: the learner's other ``[solver]`` keys (backend, model, skill file)."""
    if arm in ("continuous", FILTERED_ARM):  # primary refresh also after each round's worth of trainer outcomes
        # (default: on drift only, and a drift measurement outlasts a round here: the next announce opens a new one)
        name, frontier = SOLVER_NAME, f"refresh_every_labels = {settings.steps_per_round * settings.batch}\n"
    else:
        name, frontier = FROZEN_NAME, "drift_budget_share = 0.0\n"
    domain = f"[domain]\noptions = {{ max_ops = {settings.max_ops} }}\n" if settings.max_ops != 6 else ""
    if arm == FOLLOW_ARM:  # no solver.name, no skill file: the trainer's solver is known only from its acks
        lead = settings.follow_lead  # "1" is a number of solves in TOML, "auto" a string
        value = lead if lead is None or lead.isdigit() else json.dumps(lead)
        lead = "" if lead is None else f"[frontier]\ntrainer_band_lead = {value}\n"
        return f'[solver]\nfollow = "first_trainer"\n{domain}{lead}{settings.daemon_extra}'
    return f'[solver]\nname = "{name}"\n{solver_toml}[frontier]\n{frontier}{domain}{settings.daemon_extra}'


@contextmanager
def serve_arm(arm: str, workdir: Path, generator: Path, settings: LoopSettings, seed: int,
              solver_toml: str, tasks: Sequence[Task] | None = None) -> Iterator[ArmServer]:
    """Start the arm's server: ``propel run`` (daemon arms) or import + ``propel serve`` (the others;
    ``tasks``: what to import instead of the base/corpus draw)."""
    workdir.mkdir(parents=True, exist_ok=True)
    db_url, port, run = f"sqlite:///{workdir / 'propel.db'}", free_port(), f"cl-{arm}"
    extra = daemon_extra(arm, settings, solver_toml)
    keys = "\n".join([*([f"sample_size_max = {settings.sample_size_max}"] if settings.sample_size_max else []),
                      *(["emit_rollouts = true"] if settings.emit_rollouts else [])])
    cfg = write_config(workdir / "propel.toml", generator, workdir / "data", db_url, run, extra, port=port,
                       seed=seed, spot_budget=settings.spot_budget, daemon_keys=keys,
                       min_probability=settings.min_probability,
                       emission_keys="" if settings.follow_replay is None else f"replay_max = {settings.follow_replay}")
    log = workdir / "propel.log"
    if arm in DAEMON_ARMS:
        proc = propel(cfg, "run", log=log, wait=False, cpu=settings.daemon_device == "cpu")
    else:
        n = 2 * settings.rounds * settings.steps_per_round * settings.batch  # the trainer may read ahead
        if tasks is None:
            tasks = (base_tasks(generator, n, seed, settings.max_ops) if arm == "base"
                     else corpus_tasks(n, seed, settings.max_ops))
        (workdir / "tasks.jsonl").write_text(task_records(tasks, arm, run))
        propel(cfg, "db", "upgrade", log=log)
        propel(cfg, "tasks", "import", str(workdir / "tasks.jsonl"), "--create-run", log=log)
        proc = propel(cfg, "serve", log=log, wait=False, cpu=settings.daemon_device == "cpu")
    server = ArmServer(f"http://127.0.0.1:{port}", db_url, proc, log, run, cfg)
    try:
        yield server
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


# ---- the trainer loop ---------------------------------------------------------------------------------
def lease_batch(client: PropelClient, server: ArmServer, n: int, timeout_s: float) -> list[LeasedTask]:
    """Lease exactly ``n`` tasks, waiting for the daemon to emit them (the trainer blocks like a real one)."""
    got: list[LeasedTask] = []
    started = time.monotonic()
    deadline = started + timeout_s
    waited = False
    while len(got) < n:
        with contextlib.suppress(httpx.TransportError):  # the API is not up yet (connection refused)
            got += client.lease(n - len(got), lease_s=3_600, consumer="closed-loop-trainer")
        if len(got) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(got)}/{n} tasks after {timeout_s:.0f} s; log {server.log}")
            if server.proc.poll() is not None:
                raise RuntimeError(f"server exited ({server.proc.returncode}): {server.log.read_text()[-3000:]}")
            waited = True
            time.sleep(0.2)
    if waited:  # the batch was not ready at the first ask: the whole call was spent waiting on the queue
        server.waited_s += time.monotonic() - started
        server.queue_waited_s += time.monotonic() - started
    return got


def wait_up(client: PropelClient, server: ArmServer, timeout_s: float) -> None:
    """Block until the server answers (``propel serve`` takes seconds to start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.status()
            return
        except httpx.TransportError:
            if server.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server not up after {timeout_s:.0f} s; log {server.log}") from None
            time.sleep(0.5)


def wait_cycles(server: ArmServer, cycles: int, timeout_s: float) -> None:
    """Block until the daemon has finished ``cycles`` cycles (the trainer's time counts as waiting)."""
    started = time.monotonic()
    deadline = started + timeout_s
    while server.cycle() < cycles:
        if server.proc.poll() is not None:
            raise RuntimeError(f"daemon exited ({server.proc.returncode}): {server.log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"daemon at cycle {server.cycle()} < {cycles} after {timeout_s:.0f} s; log {server.log}")
        time.sleep(0.2)
    server.waited_s += time.monotonic() - started


@dataclass
class StepOutcome:
    """One trainer step: the tasks it trained on, their solves of ``group``, what else it cost."""

    tasks: list[Task]
    solved: list[int]
    filter_rollouts: int = 0  # rollouts of groups rolled out and then dropped (the filter arm)
    level: int | None = None  # the reasoning_gym arm's curriculum level after the step


Stepper = Callable[[PropelClient, str], StepOutcome]


def plain_step(learner: Learner, server: ArmServer, settings: LoopSettings) -> Stepper:
    """Lease a batch, train on every task of it, ack every outcome as ``version``."""
    def step(client: PropelClient, version: str) -> StepOutcome:
        leased = lease_batch(client, server, settings.batch, settings.lease_timeout_s)
        tasks = [task_of(t.message["grading"]) for t in leased]
        solved = learner.train_step(tasks)
        client.ack_many([Ack(t, solved=n, n=settings.group, solver=SOLVER_NAME, version=version or None)
                         for t, n in zip(leased, solved, strict=True)])
        return StepOutcome(tasks, solved)
    return step


def run_arm(arm: str, learner: Learner, server: ArmServer, settings: LoopSettings, seed: int,
            log: Any = print, step: Stepper | None = None) -> ArmResult:
    """R rounds of S trainer steps on the arm's served tasks; announce a checkpoint after each round.
    ``step``: how one trainer step gets its tasks (default :func:`plain_step`). The trainer's clock
    (``train_s``) excludes the held-out measurement and includes every wait on the server."""
    step = step or plain_step(learner, server, settings)
    result = ArmResult(arm, seed, heldout_accuracy(learner.solver_at(""), settings, seed))
    started, train_s, rollouts, dropped, level = time.monotonic(), 0.0, 0, 0, None
    with PropelClient(server.url, timeout_s=60) as client:
        wait_up(client, server, settings.lease_timeout_s)  # the trainer's clock starts once the API answers
        for r in range(settings.rounds):
            began = time.monotonic()
            if arm in DAEMON_ARMS:  # the trainer is slower than the daemon: it cycles while the trainer trains
                wait_cycles(server, (r + 1) * settings.cycles_per_round, settings.lease_timeout_s)
            version, served, groups, useful = learner.version, [], 0, 0
            for _ in range(settings.steps_per_round):
                out = paced(step, client, version, server, settings.step_s)
                served += [t.payload for t in out.tasks]
                groups += len(out.solved)
                useful += sum(0 < n < settings.group for n in out.solved)
                rollouts += settings.group * len(out.solved)
                dropped, level = dropped + out.filter_rollouts, out.level
            steps = (r + 1) * settings.steps_per_round
            learner.checkpoint(f"step-{steps}")
            client.announce(SOLVER_NAME, learner.version)
            train_s += time.monotonic() - began
            rec = RoundRecord(r, version, steps, served, groups, useful, server.trials(), server.cycle(),
                              time.monotonic() - started,
                              heldout_accuracy(learner.solver_at(learner.version), settings, seed),
                              rollouts=rollouts, filter_rollouts=dropped, level=level, train_s=round(train_s, 3),
                              wait_s=round(server.waited_s, 3), queue_wait_s=round(server.queue_waited_s, 3),
                              server_cpu_s=round(server.cpu_s(), 3))
            result.rounds.append(rec)
            log(f"[{arm} seed {seed}] round {r}: useful {useful}/{groups}, held-out {rec.heldout_accuracy:.3f}, "
                f"daemon trials {rec.daemon_trials}, cycle {rec.daemon_cycle}, rollouts {rollouts} "
                f"(+{dropped} dropped), trainer {train_s:.0f} s (waited {server.waited_s:.0f} s), "
                f"server CPU {rec.server_cpu_s:.0f} s")
    return result


def paced(step: Stepper, client: PropelClient, version: str, server: ArmServer, step_s: float) -> StepOutcome:
    """One trainer step that computes at least ``step_s`` seconds (the stated trainer pace: a real
    trainer's forward/backward; the synthetic learner's own update takes milliseconds). Time spent
    waiting on the server is not compute: the pace applies to the rest."""
    began, waited = time.monotonic(), server.waited_s
    out = step(client, version)
    compute = time.monotonic() - began - (server.waited_s - waited)
    if step_s > compute:
        time.sleep(step_s - compute)
    return out


# ---- measurement (outside every arm's budget) ---------------------------------------------------------
def heldout_set(settings: LoopSettings) -> list[Task]:
    """The fixed held-out arithmetic test set (the bootstrap corpus's mix, its own seed)."""
    return corpus_tasks(settings.heldout, seed=987_654)


def heldout_accuracy(solver: SolverBackend, settings: LoopSettings, seed: int) -> float:
    """Share of ``heldout_n`` attempts per held-out task the solver gets right (the domain's grader)."""
    domain, tasks = ArithDomain(), heldout_set(settings)
    comps = solver.generate([domain.solver_prompt(t) for t in tasks], settings.heldout_n, Sampling(seed=31 + seed))
    outcomes = [grade_outcome(domain, t, c.text) for t, row in zip(tasks, comps, strict=True) for c in row]
    return sum(o == "pass" for o in outcomes) / max(1, len(outcomes))


def measure_in_band(result: ArmResult, learner: Learner, settings: LoopSettings, max_tokens: int = 256) -> None:
    """Each round: a seeded sample of its served tasks, ``measure_k`` attempts by the round's checkpoint."""
    band = Band(settings.measure_k, 1, 3, min(BAND.min_valid_trials, settings.measure_k))
    for rec in result.rounds:
        rng = random.Random(result.seed * 1_009 + rec.round)
        sample = rng.sample(rec.served, min(settings.measure_tasks, len(rec.served)))
        labels = label_tasks(ArithDomain(), learner.solver_at(rec.version), [task_of(p) for p in sample], band,
                             Sampling(max_tokens=max_tokens, seed=5_000 + rec.round))
        rec.in_band = sum(bool(lab.in_band) for lab in labels) / max(1, len(labels))

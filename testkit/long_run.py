"""The long-run quality measurement (``benchmarks/long_run.py`` and its quick-mode test): the embedded
daemon as ``propel run --no-api`` runs it, observed cycle by cycle.

The run IS :func:`daemon.service.runtime.run` (what ``propel run`` calls: ``open_run``, ``build_engine``,
``assemble_driver`` with the service hooks, ``lifecycle.serve`` with leadership, heartbeat, the
APScheduler job at ``daemon.tick_interval_s``, the heap freezer and the real clock); its ``on_driver``
hook hands the built driver to the observer. Nothing about time is faked: the hourly spot-check
budget sees wall-clock seconds. The observer is the ``on_report`` callback ``propel run`` prints its
cycle lines from; after each emit phase it reads what the cycle stored (tasks, queue rows, metrics,
alerts, the driver state) and scores every valid task by its exact probability of landing in band
under the synthetic solver's *current* version.

The ``rising`` scenario announces a new solver version every ``rise_every`` cycles through
:func:`curriculum.store.solver_versions.register` (what ``POST /v1/solvers/{name}/versions`` calls), each one
``rise_step`` skill (logistic offset) above the last, via ``solver.synthetic_skill_by_version``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from sqlalchemy import select

from curriculum.store import lineage, queue, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import AlertRow, MetricPoint, QueueItem, TaskRow
from daemon.config import PropelConfig, load_config
from daemon.loop.driver import CycleReport, Driver
from daemon.loop.progress import Progress
from daemon.service.heap import rss_mib

#: per-cycle metrics copied from the daemon's metric table (its own validity, topic share, spending, timing)
CYCLE_METRICS = ("validity", "novel_share", "top_topic_share", "predicted_utility", "spotcheck_utility",
                 "spotcheck_dispatched", "solver_trials", "labelled", "false_positives", "emitted", "retrained",
                 "solver_budget_used", "rl_seconds", "sample_seconds", "spotcheck_seconds", "retrain_seconds",
                 "emit_seconds", "backpressure")
#: the always-on health signals (issue #34), recorded when the daemon writes them
HEALTH_METRICS = ("verified_utility", "verified_labels", "probes_suspect", "topic_js", "rolled_back",
                  "rollback_repeated", "emission_stalled", "emit_idle_cycles", "pause_emission", "spotcheck_tokens",
                  "solver_budget_left")
BASE_SAMPLE = 512  # completions of the untrained generator, measured once at start
CONSUMED_FOR_S = 365 * 86_400.0  # the consumer's lease: longer than any run, so a consumed task never comes back
BASE_SEED = 987_654_321  # its sampling seed (the sampler forks the RNG: the daemon's own stream is untouched)


@dataclass(frozen=True)
class Scenario:
    name: str  # "frozen" | "rising"
    cycles: int
    rise_every: int = 0  # rising: a new version every this many cycles (0: frozen)
    rise_step: float = 1.0  # skill added per version
    max_seconds: float | None = None  # stop the daemon (as SIGTERM would) after this much wall time
    consume: bool = True  # after each cycle a consumer leases every ready task for good (see Observer.consume)

    def versions(self, base_skill: float) -> dict[str, float]:
        """The announced versions and their skills (none when frozen)."""
        if not self.rise_every:
            return {}
        jumps = (self.cycles - 1) // self.rise_every
        return {f"v{i}": base_skill + i * self.rise_step for i in range(1, jumps + 1)}


def parse_override(item: str) -> tuple[str, str, Any]:
    """``SECTION.KEY=VALUE`` or, for a top-level setting, ``KEY=VALUE`` (section ``""``); the value read as
    JSON where it parses, else as a string → its three parts."""
    key, sep, value = item.partition("=")
    section, dot, name = key.strip().rpartition(".")
    if not sep or not name or (dot and not section):
        raise ValueError(f"{item!r}: write SECTION.KEY=VALUE (or KEY=VALUE for a top-level setting such "
                         "as seed), e.g. rl.topic_share_weight=0")
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return section, name, parsed


def parse_arm(item: str) -> tuple[str, tuple[str, ...]]:
    """``NAME`` or ``NAME:KEY=VALUE;KEY=VALUE`` (the arm's overrides, on top of ``--set``) → its parts."""
    name, _, rest = item.partition(":")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
        raise click.BadParameter(f"{item!r}: write NAME or NAME:KEY=VALUE;KEY=VALUE (NAME of letters, digits, "
                                 "_ . + -)", param_hint="--arm")
    return name, tuple(x.strip() for x in rest.split(";") if x.strip())


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``raw`` (a config dump) with each override set; an unknown section or key is an error."""
    for item in overrides:
        section, name, value = parse_override(item)
        where = raw.get(section) if section else raw
        if not isinstance(where, dict) or name not in where or (not section and isinstance(where[name], dict)):
            raise ValueError(f"{item!r}: the config has no setting {item.partition('=')[0].strip()}")
        where[name] = value
    return raw


def embedded_config(data_dir: Path, generator: str, scenario: Scenario, bootstrap_steps: int | None = None,
                    overrides: Sequence[str] = ()) -> PropelConfig:
    """The embedded default config (``propel run`` with no ``--config``, what ``make run`` uses) with its
    own data directory, the cached bootstrap generator, the API off (``--no-api``), ``overrides``
    (``SECTION.KEY=VALUE``, to measure a setting against the defaults) and, when rising, the skill of each
    announced version."""
    raw = apply_overrides(load_config(None).model_dump(mode="json"), overrides)
    raw["data_dir"] = str(data_dir)
    raw["generator"]["model"] = generator
    raw["generator"]["bootstrap_steps"] = bootstrap_steps
    raw["daemon"]["serve_api"] = False
    cfg = PropelConfig.model_validate(raw)
    from daemon.service.settings import build_configured_solver

    solver: Any = build_configured_solver(cfg)
    base = float(solver.base_offset)  # the synthetic solver's skill at start
    raw["solver"]["synthetic_skill_by_version"] = scenario.versions(base)
    return PropelConfig.model_validate(raw)


def cached_generator(cache_dir: Path, steps: int | None, say: Callable[[str], None]) -> str:
    """``bootstrap:arith`` resolved by the daemon's own function against the shared cache (``.propel``)."""
    from daemon.service.engine import resolve_model

    cfg = load_config(None)
    raw = cfg.model_dump(mode="json")
    raw["data_dir"], raw["generator"]["bootstrap_steps"] = str(cache_dir), steps
    return resolve_model("bootstrap:arith", PropelConfig.model_validate(raw), say)


class InBand:
    """Exact in-band probability of a task under the synthetic solver's current version."""

    def __init__(self, cfg: PropelConfig) -> None:
        from daemon.service.settings import band, build_configured_solver

        self.solver: Any = build_configured_solver(cfg)
        self.band = band(cfg)
        self.version = ""

    def serve(self, version: str) -> None:
        self.version = version
        self.solver.serve_version(version)

    def __call__(self, text: str) -> float:
        return float(self.band.probability(self.solver.success_probability(text)))


@dataclass
class CycleRecord:
    cycle: int
    version: str
    wall_s: float  # seconds since the daemon started driving
    valid_in_band: list[float]
    valid_texts: list[str]
    valid_topics: list[str | None]
    emitted_in_band: list[float]
    metrics: dict[str, float]
    alerts: list[dict[str, Any]]
    degraded: list[str]
    rss_mib: float
    observe_s: float = 0.0  # what this observation cost the daemon's loop (it runs between two phases)
    valid_scores: list[float | None] = field(default_factory=list)  # the probes' latest probability per valid task
    reference_in_band: list[float] = field(default_factory=list)  # valid candidates of the untrained generator
    emitted_reference: int = 0  # emitted tasks that came from the untrained generator (daemon.reference_share)
    consumed: int = 0  # ready tasks the run's consumer leased after this cycle (Scenario.consume)


@dataclass
class Observer(Progress):
    """``on_report`` of the run: prints the daemon's lines (as ``propel run``) and records each cycle."""

    in_band: InBand
    scenario: Scenario
    solver_name: str
    on_cycle: Callable[[CycleRecord, list[dict[str, Any]]], None]
    driver: Driver | None = None
    stop: threading.Event | None = None
    started: float = field(default_factory=time.perf_counter)
    last_queue_id: int = 0
    announced: list[dict[str, Any]] = field(default_factory=list)
    untrained_texts: list[str] = field(default_factory=list)  # rescored under each announced version
    timed_out: bool = False  # the daemon was stopped at ``scenario.max_seconds`` (not by a signal)

    def __post_init__(self) -> None:
        super().__init__()

    def __call__(self, report: CycleReport) -> None:
        super().__call__(report)
        if report.phase != "emit":
            return
        record, nxt = self.record(report.cycle), report.cycle + 1  # scored under the version it ran against
        if self.scenario.consume:
            record.consumed = self.consume()
        if self.scenario.rise_every and nxt % self.scenario.rise_every == 0 and nxt < self.scenario.cycles:
            self.announce(f"v{nxt // self.scenario.rise_every}", nxt)
        self.on_cycle(record, list(self.announced))
        if self.stop is not None and self.scenario.max_seconds is not None and \
                time.perf_counter() - self.started > self.scenario.max_seconds:
            self.say(f"long run: {self.scenario.max_seconds:.0f} s reached, stopping the daemon")
            self.timed_out = True
            self.stop.set()

    def attach(self, driver: Driver, stop: threading.Event) -> None:
        self.driver, self.stop, self.started = driver, stop, time.perf_counter()

    @property
    def store(self) -> Store:
        assert self.driver is not None, "the observer records once the driver is built"
        return self.driver.store

    def announce(self, version: str, cycle: int) -> None:
        """What a trainer does on a new checkpoint (the API's announce path)."""
        with self.store.session() as s:
            solver_versions.register(s, self.solver_name, version, source="announce")
        self.in_band.serve(version)
        base = [self.in_band(t) for t in self.untrained_texts]
        self.announced.append({"version": version, "before_cycle": cycle, "skill": self.in_band.solver.offset,
                               "untrained_in_band": sum(base) / len(base) if base else None})
        self.say(f"long run: announced solver version {version} before cycle {cycle}")

    def consume(self) -> int:
        """A trainer's pull without its outcomes: lease every ready task for good and never ack (an ack would be a
        trainer's label, and the embedded default follows the first trainer). Without it nothing leases here, and
        the queue fills to ``emission.high_water_mark`` (10,000): emission stops by backpressure (run 11, cycle
        184). Leased between two phases of the daemon's own loop, as a trainer's lease interleaves with it."""
        assert self.driver is not None, "the consumer leases once the driver is built"
        with self.store.session() as s:
            return len(queue.lease(s, 1_000_000, CONSUMED_FOR_S, "long-run-consumer", 1_000_000,
                                   run_id=self.driver.run_id))

    def record(self, cycle: int) -> CycleRecord:
        assert self.driver is not None, "the observer records once the driver is built"
        run_id, t0 = self.driver.run_id, time.perf_counter()
        with self.store.session() as s:
            rows = s.execute(select(TaskRow.id, TaskRow.text, TaskRow.topic, TaskRow.payload).where(
                TaskRow.run_id == run_id, TaskRow.cycle == cycle, TaskRow.valid)).all()
            tasks = [t for t in rows if not _extra(t.payload)]  # the policy's sample (what its metrics describe)
            scores = lineage.latest_scores(s, [t.id for t in tasks])
            queued = s.execute(select(QueueItem.id, TaskRow.text, TaskRow.payload)
                               .join(TaskRow, TaskRow.id == QueueItem.task_id)
                               .where(QueueItem.run_id == run_id, QueueItem.id > self.last_queue_id)).all()
            metrics = dict(s.execute(select(MetricPoint.name, MetricPoint.value).where(
                MetricPoint.run_id == run_id, MetricPoint.cycle == cycle)).tuples().all())
            alerts = s.execute(select(AlertRow.rule, AlertRow.mitigation, AlertRow.value).where(
                AlertRow.run_id == run_id, AlertRow.cycle_fired == cycle)).all()
        self.last_queue_id = max([self.last_queue_id, *(q.id for q in queued)])
        degraded = sorted(self.driver.state()[2].degraded)  # the driver state after the emit phase
        return CycleRecord(
            cycle=cycle, version=self.in_band.version, wall_s=time.perf_counter() - self.started,
            valid_in_band=[self.in_band(t.text) for t in tasks], valid_texts=[t.text for t in tasks],
            valid_topics=[t.topic for t in tasks], emitted_in_band=[self.in_band(q.text) for q in queued],
            valid_scores=[scores[t.id][1] if t.id in scores else None for t in tasks],
            metrics={k: float(v) for k, v in metrics.items() if k in CYCLE_METRICS or k in HEALTH_METRICS},
            alerts=[{"rule": a.rule, "mitigation": a.mitigation, "value": float(a.value)} for a in alerts],
            degraded=degraded, rss_mib=rss_mib(), observe_s=time.perf_counter() - t0,
            reference_in_band=[self.in_band(t.text) for t in rows if _extra(t.payload) == "reference"],
            emitted_reference=sum(_extra(q.payload) == "reference" for q in queued))


def _extra(payload: dict[str, Any] | None) -> str | None:
    """Where a candidate beside the policy's sample came from (``rl_rollout``, ``reference``), None for the sample."""
    return (payload or {}).get("generator")


def untrained_sample(engine: Any, in_band: InBand) -> dict[str, Any]:
    """The bootstrap generator before any RL step: in-band of its valid tasks and its texts (for the
    diversity baseline). The daemon's sampler forks the RNG, so this leaves the run's stream as it was."""
    checks = engine.domain.validate_batch(engine.sample(BASE_SAMPLE, seed=BASE_SEED))
    valid = [v.task for v in checks if v.valid]
    rates = [in_band(t.text) for t in valid]
    return {"samples": len(checks), "validity": len(valid) / max(1, len(checks)),
            "in_band": sum(rates) / len(rates) if rates else None,
            "texts": [t.text for t in valid], "topics": [engine.domain.topic(t) for t in valid]}


def run_scenario(cfg: PropelConfig, scenario: Scenario, on_start: Callable[[dict[str, Any]], None],
                 on_cycle: Callable[[CycleRecord, list[dict[str, Any]]], None]) -> tuple[int, bool]:
    """Run the daemon through :func:`daemon.service.runtime.run` (``propel run --no-api --cycles N``);
    ``on_start`` gets the untrained generator's sample once the driver is built, ``on_cycle`` every
    cycle's record. Returns the exit code and whether the time limit (not a signal) stopped it."""
    from daemon.service.runtime import run
    from daemon.service.settings import build_configured_solver

    in_band = InBand(cfg)
    solver_name = cfg.solver.name or build_configured_solver(cfg).solver_id
    observer = Observer(in_band=in_band, scenario=scenario, solver_name=solver_name, on_cycle=on_cycle)

    def attach(driver: Driver, stop: threading.Event) -> None:
        untrained = untrained_sample(driver.engine, in_band)
        observer.untrained_texts = untrained["texts"]
        on_start(untrained)
        observer.attach(driver, stop)

    code = run(cfg, cycles=scenario.cycles, until_cycle=None, serve_api=False, progress=observer, on_driver=attach)
    return code, observer.timed_out

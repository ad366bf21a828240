"""``propel run``: leadership, the APScheduler driver job, heartbeat, HTTP API, graceful shutdown.

Lifecycle: migrate the store → take the leader lease (or wait as a standby / refuse) → build the
engine (only the leader loads models) → start the API and the heartbeat → one APScheduler job
(``max_instances=1``, ``coalesce=True``) runs one phase per tick → on SIGTERM/SIGINT the current
phase finishes (RL stops between steps and checkpoints), the lease is released and the process
exits within ``daemon.shutdown_deadline_s``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import update

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, utcnow
from daemon.config import PropelConfig
from daemon.loop.driver import CycleReport, Driver
from daemon.loop.state import StateError
from daemon.service.lease import LeaderLease, make_lease
from daemon.service.priority import WorkPriority
from daemon.service.settings import build_store
from daemon.service.yielding import NoGate, WorkGate

log = logging.getLogger("propel.service")
EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 3


@dataclass
class RunOptions:
    cycles: int | None = None  # run this many more cycles, then exit
    until_cycle: int | None = None  # or run until the stored cycle counter reaches this
    max_consecutive_failures: int = 10
    work_nice: int = 0  # added to the niceness of the thread running phases (``api.work_nice`` with the API on)
    gate: WorkGate = field(default_factory=NoGate)  # held at phase start while the API is busy (``api.yield_to_api``)
    on_report: Callable[[CycleReport], None] = lambda r: None
    after_phase: Callable[[str], object] = lambda phase: None  # after each phase that ended well (the heap keeper)


@dataclass
class _Loop:
    driver: Driver
    stop: threading.Event
    target_cycle: int | None
    options: RunOptions
    failures: int = 0
    exit_code: int = EXIT_OK
    busy: threading.Lock = field(default_factory=threading.Lock)
    priority: WorkPriority = field(default_factory=lambda: WorkPriority(0))

    def job(self) -> None:
        """One scheduler tick: one phase (skipped when stopping), at the work priority, after the API's load."""
        if self.stop.is_set():
            return
        self.priority.apply()
        self.options.gate.wait()
        if self.stop.is_set():
            return
        with self.busy:
            try:
                report = self.driver.tick()
            except StateError as err:  # a newer daemon's state: retrying cannot help
                log.error("%s", err)
                self.exit_code = EXIT_FAILED
                self.stop.set()
                return
            except Exception:
                self.failures += 1
                log.exception("phase failed (%d in a row)", self.failures)
                if self.failures >= self.options.max_consecutive_failures:
                    self.exit_code = EXIT_FAILED
                    self.stop.set()
                else:
                    time.sleep(min(60.0, 0.5 * 2 ** self.failures))  # back off; the store may be restarting
                return
            self.failures = 0
            self.options.after_phase(report.phase)
            self.options.on_report(report)
            _, cycle, _ = self.driver.state()
            if self.target_cycle is not None and cycle >= self.target_cycle:
                self.stop.set()


def heartbeat(store: Store, run_id: int) -> None:
    with store.session() as s:
        s.execute(update(DaemonState).where(DaemonState.run_id == run_id).values(heartbeat_at=utcnow()))


def _heartbeat_loop(store: Store, run_id: int, lease: LeaderLease, every_s: float, stop: threading.Event) -> None:
    while not stop.wait(every_s):
        try:
            if not lease.renew():
                log.error("leadership lost: stopping (another daemon may now lead this run)")
                stop.set()
                return
            heartbeat(store, run_id)
        except Exception:  # the store may be restarting: keep beating, the lease decides
            log.warning("heartbeat failed", exc_info=True)


def acquire_leadership(lease: LeaderLease, cfg: PropelConfig, stop: threading.Event,
                       say: Callable[[str], None]) -> bool:
    """Lead now, or wait as a standby (``daemon.standby = "wait"``), or refuse."""
    if lease.try_acquire():
        return True
    if cfg.daemon.standby == "refuse":
        say(f"another daemon leads run {cfg.run_name!r}; refusing to start (daemon.standby = 'refuse')")
        return False
    say(f"another daemon leads run {cfg.run_name!r}; waiting as a standby")
    while not stop.wait(cfg.daemon.heartbeat_s):
        if lease.try_acquire():
            say("leader gone: this daemon now leads")
            return True
    return False


def install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, _frame: Any) -> None:
        log.warning("received %s: finishing the current phase, then exiting", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def run_loop(driver: Driver, cfg: PropelConfig, options: RunOptions, stop: threading.Event) -> int:
    """Drive phases with one APScheduler job until the target cycle, a signal or repeated failure."""
    _, start_cycle, _ = driver.state()
    target = options.until_cycle if options.until_cycle is not None else (
        start_cycle + options.cycles if options.cycles is not None else None)
    if target is not None and start_cycle >= target:
        return EXIT_OK
    loop = _Loop(driver, stop, target, options, priority=WorkPriority(options.work_nice))
    # a tick that finds the previous phase still running is skipped by design (max_instances=1):
    # APScheduler's warning for it would flood the terminal during every long RL chunk
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    scheduler = BackgroundScheduler(job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None})
    scheduler.add_job(loop.job, "interval", seconds=cfg.daemon.tick_interval_s, id="propel-driver",
                      next_run_time=_now_local())
    scheduler.start()
    try:
        stop.wait()
    finally:
        options.gate.close()  # a held phase goes on at once: shutdown is not delayed by the API's load
        scheduler.shutdown(wait=False)
        if not loop.busy.acquire(timeout=cfg.daemon.shutdown_deadline_s):  # let the running phase finish
            log.error("the running phase did not finish within %.0f s", cfg.daemon.shutdown_deadline_s)
            loop.exit_code = EXIT_FAILED
        else:
            loop.busy.release()
    return loop.exit_code


def _now_local() -> Any:
    from datetime import datetime

    return datetime.now().astimezone()


def serve(cfg: PropelConfig, store: Store, run_id: int, build_driver: Callable[[threading.Event], Driver],
          options: RunOptions, say: Callable[[str], None], start_api: Callable[[], Callable[[], None]] | None) -> int:
    """Everything after the store is migrated: leadership, heartbeat, API, the loop, shutdown."""
    stop = threading.Event()
    install_signal_handlers(stop)
    lease = make_lease(store, run_id, cfg.run_name, cfg.daemon.lease_ttl_s)
    if not acquire_leadership(lease, cfg, stop, say):
        return EXIT_REFUSED if not stop.is_set() else EXIT_OK
    stop_api: Callable[[], None] | None = None
    beat = threading.Thread(target=_heartbeat_loop, args=(store, run_id, lease, cfg.daemon.heartbeat_s, stop),
                            daemon=True, name="propel-heartbeat")
    try:
        heartbeat(store, run_id)
        beat.start()
        driver = build_driver(stop)
        if stop.is_set():  # a signal arrived while the models were loading
            return EXIT_OK
        stop_api = start_api() if start_api is not None else None
        return run_loop(driver, cfg, options, stop)
    finally:
        stop.set()
        if stop_api is not None:
            stop_api()
        lease.release()
        log.info("lease released")


def open_run(cfg: PropelConfig) -> tuple[Store, int]:
    """Migrate the store to head and get (or create) the run row."""
    import hashlib
    import json

    from migrations import upgrade

    upgrade(cfg.database_url)
    store = build_store(cfg)
    config = cfg.model_dump(mode="json", exclude={"api": {"token"}, "store": {"url"}, "broker": {"url"}})
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    with store.session() as s:
        run_id = repo.get_or_create_run(s, cfg.run_name, digest, config)
        repo.load_state(s, run_id)
    return store, run_id

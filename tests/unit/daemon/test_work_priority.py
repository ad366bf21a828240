"""``api.work_nice``: the run loop nices the thread that runs phases (and what it starts), not the API's threads.

Driven the way ``propel run`` does it: the API thread is started by ``start_api_thread`` from the main
thread, then ``run_loop`` runs a phase in its scheduler thread. Niceness is read per thread
(``os.getpriority(PRIO_PROCESS, tid)`` on Linux).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from daemon.config import PropelConfig
from daemon.loop.driver import CycleReport
from daemon.service.lifecycle import RunOptions, run_loop
from daemon.service.priority import MAX_NICE, WorkPriority, thread_nice

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux-only")


class _Driver:
    """One phase that records the niceness of its thread and of a thread it starts (as torch's pool would be)."""

    def __init__(self) -> None:
        self.cycle = 0
        self.seen: dict[str, int] = {}

    def state(self) -> tuple[str, int, Any]:
        return "rl", self.cycle, None

    def tick(self) -> CycleReport:
        self.seen["work"] = thread_nice()
        child = threading.Thread(target=lambda: self.seen.__setitem__("child", thread_nice()))
        child.start()
        child.join()
        self.cycle += 1
        return CycleReport("rl", self.cycle - 1, 0.0, {})


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            pass


def _api_thread() -> threading.Thread:
    return next(t for t in threading.enumerate() if t.name == "propel-api")


def test_run_loop_nices_the_work_thread_and_not_the_api_or_main_thread() -> None:
    from daemon.http.server import start_api_thread

    cfg = PropelConfig.model_validate({"api": {"port": 0}, "daemon": {"tick_interval_s": 0.05}})
    base = thread_nice()
    stop_api = start_api_thread(cfg, _app)
    try:
        driver = _Driver()
        code = run_loop(driver, cfg, RunOptions(cycles=1, work_nice=3), threading.Event())  # type: ignore[arg-type]
        api = _api_thread()
        assert code == 0
        assert driver.seen == {"work": min(MAX_NICE, base + 3), "child": min(MAX_NICE, base + 3)}
        assert api.native_id is not None and thread_nice(api.native_id) == base
        assert thread_nice() == base
    finally:
        stop_api()


def test_work_nice_zero_changes_nothing() -> None:
    driver = _Driver()
    cfg = PropelConfig.model_validate({"daemon": {"tick_interval_s": 0.05}})
    run_loop(driver, cfg, RunOptions(cycles=1, work_nice=0), threading.Event())  # type: ignore[arg-type]
    assert driver.seen == {"work": thread_nice(), "child": thread_nice()}


def test_apply_is_idempotent_and_capped() -> None:
    base = thread_nice()
    priority = WorkPriority(MAX_NICE + 5)
    seen: list[int] = []

    def work() -> None:
        priority.apply()
        priority.apply()
        seen.append(thread_nice())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert priority.target == MAX_NICE and seen == [MAX_NICE]
    assert thread_nice() == base

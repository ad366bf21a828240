"""The API first: a ``propel run`` that serves the API runs its training work at a lower CPU priority.

``api.work_nice`` (0 = off, the default) is added to the niceness of the threads that run the
daemon's phases — RL chunks, sampling, spot-checks, probe retraining, and every thread they start
(torch's OpenMP workers are started by the thread that first runs a parallel op, and a new thread
inherits its creator's niceness). The main thread, the heartbeat and the API's threads (uvicorn's
event loop and the request handlers it starts, with their database connections) keep the process's
priority, so a trainer leasing tasks is not queued behind an RL step on a busy machine.

Linux only: niceness is per thread there (``setpriority(PRIO_PROCESS, tid)``). Elsewhere it is a
process attribute, and niceing the process would slow the API too, so nothing is changed. An
unprivileged process cannot raise a thread's priority again: only work threads are niced, never
the main thread (which starts the API thread).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("propel.service")

MAX_NICE = 19


def thread_nice(native_id: int | None = None) -> int:
    """The niceness of a thread (default: the calling one). On Linux ``PRIO_PROCESS`` takes a thread id."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id() if native_id is None else native_id)


class WorkPriority:
    """Built in the main thread at start; :meth:`apply` is called by each work thread before it works."""

    def __init__(self, work_nice: int) -> None:
        self.work_nice = work_nice
        self.target: int | None = None
        if work_nice <= 0:
            return
        if not sys.platform.startswith("linux"):
            log.info("api.work_nice = %d: per-thread priority needs Linux; training work keeps the API's "
                     "priority here", work_nice)
            return
        base = thread_nice()
        self.target = min(MAX_NICE, base + work_nice)
        log.info("api.work_nice = %d: training work (driver phases: RL chunks, sampling, spot-checks, probe "
                 "retraining, and the threads they start, torch's included) runs at nice %d; the API's threads "
                 "and the heartbeat stay at nice %d", work_nice, self.target, base)

    def apply(self) -> None:
        """Nice the calling thread to the work priority (once per thread; later calls change nothing)."""
        if self.target is None:
            return
        tid = threading.get_native_id()
        if thread_nice(tid) < self.target:
            os.setpriority(os.PRIO_PROCESS, tid, self.target)
            log.debug("work thread %s (%d) niced to %d", threading.current_thread().name, tid, self.target)

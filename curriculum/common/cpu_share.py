"""How many torch threads a small CPU job may use, from what the *other* processes use right now.

The bootstrap's ops are small (~1M parameters, 64 × ~25 tokens). On an idle 2-core machine a second
intra-op thread makes a step 1.6× faster (``benchmarks/bootstrap_threads.py``: 0.093 s against 0.152 s),
but when another process wants a core, the two threads wait on each other at every op and a step becomes
up to 14× *slower* (8.3 s against 0.57 s at load 13). So the choice is made from a measurement, and made
again while the job runs:

* the CPU time the whole machine spent (``/proc/stat``) minus this process's own (``os.times``), over the
  last interval, is what the other processes use, in cores;
* a second thread is taken only while at least :data:`SPARE_FOR_SECOND` cores are otherwise idle, and
  more than :data:`MAX_AUTO_THREADS` are never taken (larger counts were never measured for these ops);
* where ``/proc/stat`` does not exist (macOS, Windows) the answer stays 1 thread, the old default;
* the cores counted are those this process may run on: its CPU affinity, and a cgroup v2 CPU quota
  (``cpu.max``, e.g. ``docker --cpus 1``) rounded down, so a container capped at one core of a large
  host takes one thread.

The 1-minute load average is not used: it lags by a minute, so right after ``pip install`` on an idle
machine it still reads ~1 and would refuse the second core.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

#: The most threads the automatic choice takes (two is what a 2-core machine measured).
MAX_AUTO_THREADS = 2
#: Cores that must be idle (besides this process) for a second thread: a little under 2, so a
#: background daemon at a few percent does not cost the speed-up, while half a busy core does.
SPARE_FOR_SECOND = 1.8
#: Seconds between re-measurements while a job runs.
RECHECK_S = 10.0
#: The cgroup v2 CPU quota of this process's container ("max PERIOD" when unlimited).
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cpus(cpu_max: Path = CPU_MAX) -> int:
    """Cores this process may use: its affinity, capped by the cgroup CPU quota (rounded down, ≥ 1)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota to read: the affinity stands
    return max(1, n)


@dataclass(frozen=True)
class CpuSample:
    """Cumulative seconds: ``busy`` by all processes, ``own`` by this one, at wall time ``wall``."""

    busy: float
    own: float
    wall: float


def read_sample() -> CpuSample | None:
    """The machine's and this process's CPU time now; None where ``/proc/stat`` is missing."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
    ticks = [int(x) for x in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    own = os.times()
    return CpuSample(busy / os.sysconf("SC_CLK_TCK"), own.user + own.system, time.monotonic())


def others_cores(before: CpuSample, after: CpuSample) -> float:
    """Cores the other processes kept busy between two samples (never negative)."""
    wall = after.wall - before.wall
    if wall <= 0:
        return 0.0
    return max(0.0, ((after.busy - before.busy) - (after.own - before.own)) / wall)


def choose_threads(cpus: int, others: float, max_threads: int = MAX_AUTO_THREADS) -> int:
    """Threads for a job when the other processes use ``others`` of ``cpus`` cores."""
    spare = cpus - others
    if spare < SPARE_FOR_SECOND:
        return 1
    return min(max_threads, cpus, max(2, int(spare + 0.2)))


class ThreadGovernor:
    """Sets torch's intra-op threads for a job from the others' CPU use; :meth:`tick` re-decides every
    :data:`RECHECK_S` seconds. ``fixed`` (``PROPEL_BOOTSTRAP_THREADS``) turns the measurement off.
    As a context manager it restores torch's previous thread count on exit."""

    def __init__(self, fixed: int | None = None, cpus: int | None = None,
                 reader: Callable[[], CpuSample | None] = read_sample, probe_s: float = 0.3) -> None:
        self._before = torch.get_num_threads()
        self.fixed, self.cpus, self.reader = fixed, cpus or available_cpus(), reader
        self.changes: list[tuple[int, float]] = []  # (threads, others' cores) at each decision
        self._last = reader()
        if fixed is None and self._last is not None and probe_s > 0:
            time.sleep(probe_s)  # the job has not started: what is busy now is somebody else
        self.threads = self._decide(force=True)

    def _decide(self, force: bool = False) -> int:
        if self.fixed is not None:
            threads, others = max(1, self.fixed), float("nan")
        else:
            now = self.reader()
            if now is None or self._last is None:
                threads, others = 1, float("nan")
            else:
                others = others_cores(self._last, now)
                threads, self._last = choose_threads(self.cpus, others), now
        if force or threads != self.threads:
            self.changes.append((threads, others))
            torch.set_num_threads(threads)
            log.info("torch threads: %d (other processes use %.1f of %d cores)", threads, others, self.cpus)
        return threads

    def __enter__(self) -> ThreadGovernor:
        return self

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self._before)

    def tick(self) -> None:
        """Re-decide if :data:`RECHECK_S` seconds have passed since the last measurement."""
        if self.fixed is None and self._last is not None and time.monotonic() - self._last.wall >= RECHECK_S:
            self.threads = self._decide()

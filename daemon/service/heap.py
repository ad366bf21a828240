"""The heap of a long-running process: start-up objects out of the collector's way, free pages back to the OS.

CPython's full (generation 2) collections walk every tracked object. A ``propel serve`` or ``propel run``
process holds hundreds of thousands of objects from its imports (FastAPI, pydantic, SQLAlchemy, and in a
run the models), almost all alive until exit, so each full collection stopped the API for about 200 ms
(measured: 4 consumers leasing at batch 64 saw lease p99 of 196–214 ms in some rounds, every consumer's
slow lease at the same moment; with the collector off, none over 60 ms and ~25 % more tasks/s).
:func:`freeze_startup_heap` collects once and moves every object alive then into the permanent
generation (``gc.freeze``): later collections scan only what was made after start-up, and objects of
the start-up heap are still freed by reference counting when released; only reference cycles among them
would stay until exit. The collector itself stays on.

A run's start-up does not end when its API starts: its first phases import what the models' code loads
lazily (TRL, datasets, accelerate; measured: ~930 modules, 130,000 objects after the first RL phase), and
each full collection walked them again, 60–85 ms every ~0.6 s under queue load. :class:`HeapKeeper`
freezes again after every phase that grew ``sys.modules``: the imports are done once, so it freezes a
bounded number of times (each pins only what is alive at the end of such a phase), and the collections
of a steady run stay a few milliseconds long.

The run's resident memory grew 14–16 % over 240 cycles in steps of 10–50 MiB (issue #34), and it was not
live objects. Measured at the end of two 120-cycle runs: glibc's allocator held 120–175 MiB of *free*
memory in its arenas, the peaks of earlier phases' transient tensors and batches that it had not handed
back to the OS (freed chunks below a live one at the top of an arena stay resident). Unfreezing and
collecting released 8,000 objects and 3 MiB; ``malloc_trim(0)`` released 112–115 MiB, RSS 735 → 620 MiB.
So at the end of every cycle :class:`HeapKeeper` calls :func:`trim_free_heap` (``daemon.trim_heap``), and RSS
follows what the process uses, not the highest peak it ever had. Once a cycle, not after every phase: what a
trim hands back the next phase faults in again (~1 ms per MiB on this 2-core host), and the phases of a cycle
reuse each other's freed pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import math
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from daemon.loop.phases import next_phase

log = logging.getLogger("propel.service")


def freeze_startup_heap(process: str, what: str = "start-up objects") -> int:
    """Collect, then freeze every object alive now (see the module docstring); returns how many are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d %s moved out of the garbage collector's scans (gc.freeze)", process, frozen, what)
    return frozen


def rss_mib() -> float:
    """This process's resident memory in MiB (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return math.nan


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS: nothing to trim this way)."""
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim_free_heap() -> bool | None:
    """Hand the allocator's free pages back to the OS (``malloc_trim(0)``, every arena); True when it released
    some, False when there was nothing to release, None where the C library cannot (then a no-op)."""
    fn = _malloc_trim()
    return None if fn is None else bool(fn(0))


@dataclass
class TrimTally:
    """What the trims at cycle ends cost and gave back (logged every ``HeapKeeper.report_every`` cycles)."""

    cycles: int = 0
    seconds: float = 0.0
    released_mib: float = 0.0  # RSS before the trim minus after (what the next phases fault in again)

    def line(self, process: str) -> str:
        each = max(1, self.cycles)
        return (f"{process}: heap trimmed after {self.cycles:,} cycles: {self.released_mib / each:.1f} MiB handed "
                f"back and {1000 * self.seconds / each:.1f} ms a cycle; RSS now {rss_mib():.0f} MiB (daemon.trim_heap)")


class HeapKeeper:
    """Freezes the start-up heap, then again after each phase that imported modules (lazy imports are start-up);
    after the last phase of every cycle, trims the allocator's free pages (``trim``; None: keep them, as glibc
    does by default)."""

    report_every = 100  # cycles between two tally log lines

    def __init__(self, process: str, modules: Callable[[], int] = lambda: len(sys.modules),
                 trim: Callable[[], bool | None] | None = trim_free_heap) -> None:
        self.process = process
        self._modules = modules
        self._trim = trim
        self._seen = 0
        self.freezes = 0
        self.tally = TrimTally()

    def freeze(self, what: str = "start-up objects") -> int:
        """Freeze now (the start-up heap); returns the permanent generation's size."""
        self._seen = self._modules()
        self.freezes += 1
        return freeze_startup_heap(self.process, what)

    def after_phase(self, phase: str) -> bool:
        """Freeze again when the phase that just ended imported modules (returns whether it did); when it
        ended a cycle, trim."""
        imported = self._modules() - self._seen
        if imported > 0:
            self.freeze(f"objects (a phase imported {imported} modules)")
        if self._trim is not None and next_phase(phase)[1]:
            before, t0 = rss_mib(), time.perf_counter()
            self._trim()
            tally = self.tally
            tally.cycles, tally.seconds = tally.cycles + 1, tally.seconds + time.perf_counter() - t0
            tally.released_mib += max(0.0, before - rss_mib())
            if tally.cycles % self.report_every == 0:
                log.info("%s", tally.line(self.process))
        return imported > 0

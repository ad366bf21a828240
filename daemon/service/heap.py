"""Start-up objects out of the cyclic garbage collector's way, in the processes that serve the API.

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
each full collection walked them again, 60–85 ms every ~0.6 s under queue load. :class:`HeapFreezer`
freezes again after every phase that grew ``sys.modules``: the imports are done once, so it freezes a
bounded number of times (each pins only what is alive at the end of such a phase), and the collections
of a steady run stay a few milliseconds long.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("propel.service")


def freeze_startup_heap(process: str, what: str = "start-up objects") -> int:
    """Collect, then freeze every object alive now (see the module docstring); returns how many are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d %s moved out of the garbage collector's scans (gc.freeze)", process, frozen, what)
    return frozen


class HeapFreezer:
    """Freezes the start-up heap, then again after each phase that imported modules (lazy imports are start-up)."""

    def __init__(self, process: str, modules: Callable[[], int] = lambda: len(sys.modules)) -> None:
        self.process = process
        self._modules = modules
        self._seen = 0
        self.freezes = 0

    def freeze(self, what: str = "start-up objects") -> int:
        """Freeze now (the start-up heap); returns the permanent generation's size."""
        self._seen = self._modules()
        self.freezes += 1
        return freeze_startup_heap(self.process, what)

    def after_phase(self) -> bool:
        """Freeze again when the phase that just ended imported modules; returns whether it did."""
        imported = self._modules() - self._seen
        if imported <= 0:
            return False
        self.freeze(f"objects (a phase imported {imported} modules)")
        return True

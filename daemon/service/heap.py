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
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("propel.service")


def freeze_startup_heap(process: str) -> int:
    """Collect, then freeze every object alive now (see the module docstring); returns how many are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d start-up objects moved out of the garbage collector's scans (gc.freeze)", process, frozen)
    return frozen

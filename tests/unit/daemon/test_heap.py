"""The heap keeper: freezes the start-up heap, and again after phases that imported modules (issue #19); trims
the allocator's free pages at the end of every cycle (issue #34)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.service.heap import HeapKeeper, trim_free_heap


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()  # hand the test process's heap back to the collector


def test_freezes_again_only_after_a_phase_that_imported_modules() -> None:
    modules = [100]
    heap = HeapKeeper("test", modules=lambda: modules[0], trim=None)
    frozen = heap.freeze()
    # the permanent generation only shrinks after the freeze (frozen objects that another thread of the
    # test process releases are freed by reference counting), never grows without another gc.freeze
    assert frozen >= gc.get_freeze_count() > 0.99 * frozen
    assert not heap.after_phase("rl")  # nothing imported: the collector keeps its young generations
    modules[0] += 3
    kept = {id(x): x for x in ([i] for i in range(10))}  # made after the first freeze, alive at the phase's end
    assert sum(id(o) in kept for o in gc.get_objects()) == 10  # scanned by full collections
    before = gc.get_freeze_count()
    assert heap.after_phase("rl") and gc.get_freeze_count() > before and heap.freezes == 2
    assert sum(id(o) in kept for o in gc.get_objects()) == 0  # now out of every collection's scan
    assert not heap.after_phase("rl")  # the same imports do not freeze twice


def test_trims_at_the_end_of_every_cycle_and_only_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def trim() -> bool | None:
        calls.append(1)
        return len(calls) == 1  # released memory once, then nothing left to release

    heap = HeapKeeper("test", modules=lambda: 0, trim=trim)
    heap.report_every = 2
    with caplog.at_level("INFO", logger="propel.service"):
        for _ in range(3):  # three cycles; no imports: no freeze
            assert not any(heap.after_phase(phase) for phase in ("rl", "sample", "spotcheck", "retrain", "emit"))
    assert len(calls) == 3 and heap.tally.cycles == 3 and heap.tally.seconds >= 0  # after each emit phase only
    [line] = [r.getMessage() for r in caplog.records if "heap trimmed" in r.getMessage()]  # every 2 cycles
    assert line.startswith("test: heap trimmed after 2 cycles:") and "MiB handed back" in line
    kept = HeapKeeper("test", modules=lambda: 0, trim=None)  # daemon.trim_heap = false
    kept.after_phase("emit")
    assert kept.tally.cycles == 0 and len(calls) == 3


# A phase's transient memory: 64 MiB of 64 KiB buffers (malloc'd from an arena, not mmap'd), each followed by a
# small buffer that outlives the phase, so the freed ones are holes the arena cannot shrink away. It runs in a
# fresh interpreter: in the test process, earlier tests' heap (free holes the buffers land in, a raised mmap
# threshold) decides where they go, and CI once saw 30 MiB handed back where a fresh process hands back ~60.
_PHASE = """
import json
from daemon.service.heap import rss_mib, trim_free_heap
base = rss_mib()
pairs = [(bytearray(b"x") * 65_536, bytearray(b"y") * 1_024) for _ in range(1024)]
peak = rss_mib()
kept = [small for _, small in pairs]
del pairs
held = rss_mib()  # glibc keeps the freed pages resident: they are the RSS steps of the long run
trimmed = trim_free_heap()
print(json.dumps({"base": base, "peak": peak, "held": held, "after": rss_mib(), "trimmed": trimmed,
                  "kept": len(kept), "y": kept[-1][0]}))
"""


def test_trim_hands_the_freed_pages_of_a_phase_back_to_the_os() -> None:
    if trim_free_heap() is None:
        pytest.skip("this C library has no malloc_trim (not glibc): the daemon's trim is a no-op here")
    out = subprocess.run([sys.executable, "-c", _PHASE], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[3], timeout=120)
    r = json.loads(out.stdout)
    assert r["peak"] - r["base"] > 56  # the phase's 64 MiB were resident
    assert r["held"] - r["base"] > 48, "freeing them kept them resident (else there is nothing to trim)"
    assert r["trimmed"] is True
    assert r["held"] - r["after"] > 48, "malloc_trim should hand back most of the 64 MiB just freed"
    assert r["kept"] == 1024 and r["y"] == ord("y")  # the small buffers that outlive the phase are intact


def test_run_loop_calls_after_phase_after_each_phase_that_ended_well() -> None:
    from daemon.config import PropelConfig
    from daemon.loop.driver import CycleReport
    from daemon.service.lifecycle import RunOptions, run_loop

    calls: list[int] = []

    class Driver:
        cycle = 0

        def state(self) -> tuple[str, int, None]:
            return "rl", self.cycle, None

        def tick(self) -> CycleReport:
            self.cycle += 1
            if self.cycle == 2:
                raise RuntimeError("a failed phase is not followed by a freeze")
            return CycleReport("rl", self.cycle - 1, 0.0, {})

    cfg = PropelConfig.model_validate({"daemon": {"tick_interval_s": 0.05}})
    options = RunOptions(cycles=3, after_phase=lambda phase: calls.append(Driver.cycle), max_consecutive_failures=3)
    assert run_loop(Driver(), cfg, options, threading.Event()) == 0  # type: ignore[arg-type]
    assert len(calls) == 2  # phases 1 and 3 ended well, phase 2 failed

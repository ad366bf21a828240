"""The API first, cooperatively: the training work of a ``propel run`` that serves the API pauses while
trainers are using the queue (``api.yield_to_api``).

The API marks every answered queue request (but an empty lease) on an
:class:`~daemon.http.pressure.ApiPressure`. The work calls
:meth:`YieldGate.wait` at its checkpoints: at the start of every phase and before every forward
pass of the generator and the frozen reference (:func:`gate_models`: a forward pre-hook, so RL
generation, GRPO's forward passes, sampling, probe scoring and feature extraction all yield between
passes). ``wait`` returns at once when no queue request was answered in the last ``api.yield_idle_ms``;
else it sleeps in short slices until the API is that idle. It never holds the work longer than
``api.yield_max_s`` in a row: then the work runs without yielding for
``yield_max_s × yield_floor / (1 − yield_floor)`` seconds, so under API load that never pauses the
training still gets a ``yield_floor`` share of the wall time (it is slowed, never starved).

Disabled (the option off, or ``propel run --no-api``) the gate is :class:`NoGate` and no hook is
installed. Held time is counted in ``propel_work_yielded_seconds_total`` and logged at most every
``LOG_EVERY_S`` seconds.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Any, Protocol

from daemon.http.pressure import ApiPressure

log = logging.getLogger("propel.service")

#: Longest single sleep while holding (the gate re-checks the API and the stop signal at least this often).
SLICE_S = 0.05
LOG_EVERY_S = 30.0


class WorkGate(Protocol):
    def wait(self) -> float:
        """Hold the calling work thread while the API is busy; returns the seconds held."""
        ...

    def close(self) -> None:
        """Release every hold now and never hold again (shutdown)."""
        ...


class NoGate:
    """The gate when yielding is off: never holds."""

    def wait(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


class YieldGate:
    """Holds work while ``pressure`` shows a queue request answered within the last ``idle_s``; see the module
    docstring.

    ``clock`` and ``sleep`` are injectable (tests); ``sleep`` defaults to waiting on the close event, so
    :meth:`close` wakes a held thread at once. ``on_held(seconds)`` is called after every hold."""

    def __init__(self, pressure: ApiPressure, idle_s: float, max_hold_s: float, floor: float, *,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], Any] | None = None,
                 on_held: Callable[[float], None] = lambda s: None) -> None:
        if not (idle_s > 0 and max_hold_s > 0 and 0 < floor < 1):
            raise ValueError("need idle_s > 0, max_hold_s > 0 and 0 < floor < 1")
        self.pressure, self.idle_s, self.max_hold_s = pressure, idle_s, max_hold_s
        self.run_s = max_hold_s * floor / (1 - floor)  # free running after a hold of max_hold_s
        self.clock = clock or pressure.clock
        self._closed = threading.Event()
        self._sleep = sleep or self._closed.wait
        self.on_held = on_held
        self._run_until = -math.inf
        self._lock = threading.Lock()
        self.held_s = self.holds = 0.0  # totals since start
        self._logged_at, self._logged_s, self._logged_holds = self.clock(), 0.0, 0.0

    def wait(self) -> float:
        now = self.clock()
        if self._closed.is_set() or now < self._run_until or self.pressure.idle_for(now) >= self.idle_s:
            return 0.0
        start = now
        while not self._closed.is_set():
            idle = self.pressure.idle_for(now)
            if idle >= self.idle_s:
                break
            if now - start >= self.max_hold_s:  # held long enough: let the work run for its floor share
                self._run_until = now + self.run_s
                break
            self._sleep(min(self.idle_s - idle, start + self.max_hold_s - now, SLICE_S))
            now = self.clock()
        held = now - start
        self._account(held, now)
        return held

    def close(self) -> None:
        self._closed.set()

    def _account(self, held: float, now: float) -> None:
        self.on_held(held)
        with self._lock:
            self.held_s += held
            self.holds += 1
            if now - self._logged_at < LOG_EVERY_S:
                return
            since, self._logged_at = now - self._logged_at, now
            window_s, window_holds = self.held_s - self._logged_s, self.holds - self._logged_holds
            self._logged_s, self._logged_holds = self.held_s, self.holds
        log.info("api.yield_to_api: training yielded %.1f s to the API in %d holds over the last %.0f s "
                 "(%.1f s since start)", window_s, window_holds, since, self.held_s)


def gate_models(gate: WorkGate, *models: Any) -> list[Any]:
    """A forward pre-hook calling ``gate.wait()`` on every ``transformers`` model inside each of ``models``
    (the outer model and its inner backbone: PEFT calls the outer ``forward`` directly in training, so the
    backbone's hook is the one that fires there). Nothing for :class:`NoGate`. Returns the hook handles."""
    if isinstance(gate, NoGate):
        return []
    from transformers import PreTrainedModel

    def hook(_module: Any, _args: Any) -> None:
        gate.wait()

    handles = []
    for model in models:
        targets = [m for m in model.modules() if isinstance(m, PreTrainedModel)] or [model]
        handles += [m.register_forward_pre_hook(hook) for m in targets]
    return handles

"""``/metrics`` for an API process that does not drive cycles (``propel serve``).

The daemon exports its metrics as it records them; ``propel serve`` runs in another process, so it
reads the same values back from the store on each scrape and feeds them through the same export
functions, giving the same ``propel_`` series: the run totals saved in the driver state (the
counters), the latest value of every gauge, each stored phase duration once (the histogram), queue
depths, alert states and the degraded reasons.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from sqlalchemy import select

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, Run
from daemon.loop import health
from daemon.loop.state import load_state
from daemon.ops.metrics import (
    PHASES,
    PropelMetrics,
    export_degraded,
    export_gauges,
    export_queue_depths,
    export_totals,
    observe_phase,
)
from daemon.ops.replay import load_history, stored_intervals


class StoreMetrics:
    """Refreshes ``metrics`` from the store of ``run_name``; call :meth:`refresh` before rendering."""

    def __init__(self, store: Store, run_name: str, metrics: PropelMetrics) -> None:
        self.store, self.run_name, self.metrics = store, run_name, metrics
        self._fired: set[tuple[str, int]] = set()
        self._observed: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        export_degraded(metrics, [], health.REASONS)

    def refresh(self) -> None:
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        with self.store.session() as s:
            run_id = s.scalars(select(Run.id).where(Run.name == self.run_name)).first()
            row = s.scalars(select(DaemonState).where(DaemonState.run_id == run_id)).first() if run_id else None
            export_queue_depths(self.metrics, repo.queue_depths(s, run_id) if run_id else {})
        if run_id is None or row is None:
            return
        state = load_state(dict(row.counters or {}), datetime.now(UTC))
        export_totals(self.metrics, {**state.totals.model_dump(), "cycles": row.cycle})
        self.metrics.cycle.set(row.cycle)
        latest: dict[str, float] = {}
        history = load_history(self.store, run_id)
        for cycle in sorted(history):
            latest.update(history[cycle])
            for phase in PHASES:
                seconds = history[cycle].get(f"{phase}_seconds")
                if seconds is not None and (cycle, phase) not in self._observed:
                    self._observed.add((cycle, phase))
                    observe_phase(self.metrics, phase, seconds)
        export_gauges(self.metrics, latest)
        for a in stored_intervals(self.store, run_id):
            self.metrics.alert_active.labels(rule=a.rule, severity=a.severity).set(1 if a.cycle_resolved is None else 0)
            if (a.rule, a.cycle_fired) not in self._fired:
                self._fired.add((a.rule, a.cycle_fired))
                self.metrics.alerts_fired.labels(rule=a.rule, severity=a.severity).inc()
        export_degraded(self.metrics, state.degraded, health.REASONS)

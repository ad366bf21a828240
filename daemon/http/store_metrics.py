"""``/metrics`` for an API process that does not drive cycles (``propel serve``).

The daemon exports its metrics as it records them; ``propel serve`` runs in another process, so it
reads the same values back from the store on each scrape and feeds them through the same export
functions, giving the same ``propel_`` series: every completed cycle once (counters add each cycle
exactly once), the running cycle's gauges, queue depths, alert states and the degraded reasons.
"""

from __future__ import annotations

import threading

from sqlalchemy import select

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, Run
from daemon.loop import health
from daemon.ops.metrics import (
    COUNTERS,
    PropelMetrics,
    export_cycle,
    export_degraded,
    export_queue_depths,
)
from daemon.ops.replay import load_history, stored_intervals


class StoreMetrics:
    """Refreshes ``metrics`` from the store of ``run_name``; call :meth:`refresh` before rendering."""

    def __init__(self, store: Store, run_name: str, metrics: PropelMetrics) -> None:
        self.store, self.run_name, self.metrics = store, run_name, metrics
        self._fired: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        export_degraded(metrics, [], health.REASONS)

    def refresh(self) -> None:
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        with self.store.session() as s:
            run_id = s.scalars(select(Run.id).where(Run.name == self.run_name)).first()
            state = s.scalars(select(DaemonState).where(DaemonState.run_id == run_id)).first() if run_id else None
            export_queue_depths(self.metrics, repo.queue_depths(s))
        if run_id is None or state is None:
            return
        history = load_history(self.store, run_id)
        last = self.metrics.last_cycle if self.metrics.last_cycle is not None else -1
        for cycle in sorted(c for c in history if last < c < state.cycle):  # completed cycles, once each
            export_cycle(self.metrics, history[cycle], cycle=cycle)
        running = {k: v for k, v in history.get(state.cycle, {}).items() if k not in COUNTERS}
        export_cycle(self.metrics, running)  # gauges only: its counters are added once it completes
        for a in stored_intervals(self.store, run_id):
            self.metrics.alert_active.labels(rule=a.rule, severity=a.severity).set(1 if a.cycle_resolved is None else 0)
            if (a.rule, a.cycle_fired) not in self._fired:
                self._fired.add((a.rule, a.cycle_fired))
                self.metrics.alerts_fired.labels(rule=a.rule, severity=a.severity).inc()
        export_degraded(self.metrics, dict(state.counters or {}).get("degraded", {}), health.REASONS)

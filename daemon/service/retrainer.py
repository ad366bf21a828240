"""Aux-probe retrain dispatchers: in-process (embedded mode) or Celery (distributed mode).

Both run :func:`curriculum.probing.retrain.carry_out`; the outcome lands on the job's store row and
the driver activates a finished probe on its next retrain phase. A dispatch that cannot reach the
broker raises :class:`daemon.loop.ports.DispatchError` and the driver retries it next cycle (the Celery
task id is the job name and the job is idempotent, so a second delivery changes nothing).
"""

from __future__ import annotations

from curriculum.domains.base import Domain
from curriculum.probing.retrain import RetrainSpec, carry_out
from curriculum.store.artifacts import ArtifactStore
from curriculum.store.db import Store
from daemon.loop.ports import DispatchError
from probes import FeatureExtractor


class InProcessRetrainer:
    """Embedded mode: train now, on the leader's already-loaded frozen reference."""

    def __init__(self, store: Store, domain: Domain, extractor: FeatureExtractor, artifacts: ArtifactStore) -> None:
        self.store, self.domain, self.extractor, self.artifacts = store, domain, extractor, artifacts

    def submit(self, spec: RetrainSpec) -> None:
        carry_out(self.store, spec, self.domain, lambda _reference: self.extractor, lambda: self.artifacts)


class CeleryRetrainer:
    """Distributed mode: the spec goes to ``propel.<run>.retrain``; a worker trains and records it."""

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name

    def submit(self, spec: RetrainSpec) -> None:
        from kombu.exceptions import OperationalError

        from workers.tasks import dispatch_retrain

        try:
            dispatch_retrain(spec.to_json(), self.run_name)
        except (OperationalError, ConnectionError, OSError) as err:
            raise DispatchError(f"broker unreachable, retrain {spec.name} deferred: {err}") from err

"""What a worker process needs, as plain data, and the per-process resources built from it.

``propel worker`` (in ``daemon/``) turns the validated config into :class:`WorkerSettings` and calls
:func:`configure` before Celery forks its pool. Resources (store engine, domain, solver) are built
lazily in each child on first use — never before the fork, so no CUDA context or database
connection is ever shared across processes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.base import Domain, get_domain
from curriculum.solvers import build_solver
from curriculum.store.artifacts import ArtifactStore, is_cas_uri, open_artifacts
from curriculum.store.db import Store
from probes import FeatureExtractor, FrozenReference


@dataclass(frozen=True)
class WorkerSettings:
    database_url: str
    broker_url: str
    run_name: str = "default"
    domain: str = "arith"
    domain_options: dict[str, Any] = field(default_factory=dict)
    solver: dict[str, Any] = field(default_factory=lambda: {"backend": "synthetic"})
    sampling: dict[str, Any] = field(default_factory=dict)
    visibility_timeout_s: int = 3600
    task_time_limit_s: int = 1800
    artifacts_url: str = "db"  # the content-addressed artifact store (probes, reference models)
    artifacts_cache: str = ".propel/cache/artifacts"  # where fetched artifacts are materialised


@dataclass
class Resources:
    """Built on first use in each process; the solver and the reference only when a task needs them."""

    store: Store
    domain: Domain
    sampling: Sampling
    _solver: SolverBackend | None = None
    _extractors: dict[str, FeatureExtractor] = field(default_factory=dict)
    _artifacts: ArtifactStore | None = None

    @property
    def artifacts(self) -> ArtifactStore:
        if self._artifacts is None:
            s = settings()
            self._artifacts = open_artifacts(s.artifacts_url, self.store, s.artifacts_cache)
        return self._artifacts

    @property
    def solver(self) -> SolverBackend:
        if self._solver is None:
            self._solver = build_solver(**settings().solver)
        return self._solver

    def extractor(self, reference: str) -> FeatureExtractor:
        """A feature extractor on the frozen reference ``reference`` (a hub id, or a content address
        fetched from the artifact store; loaded once per process)."""
        if reference not in self._extractors:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"  # in the child: no CUDA before the fork
            local = str(self.artifacts.fetch_tree(reference)) if is_cas_uri(reference) else reference
            self._extractors[reference] = FeatureExtractor(FrozenReference.load(local, device=device))
        return self._extractors[reference]


_settings: WorkerSettings | None = None
_resources: tuple[int, Resources] | None = None


def configure(settings: WorkerSettings) -> None:
    global _settings, _resources
    _settings, _resources = settings, None


def settings() -> WorkerSettings:
    if _settings is None:
        raise RuntimeError("worker not configured: start workers with `propel worker`")
    return _settings


def resources() -> Resources:
    """This process's store, domain, solver and references (rebuilt after a fork: keyed by pid)."""
    global _resources
    pid = os.getpid()
    if _resources is None or _resources[0] != pid:
        s = settings()
        res = Resources(store=Store(s.database_url), domain=get_domain(s.domain, **s.domain_options),
                        sampling=Sampling(**s.sampling))
        _resources = (pid, res)
    return _resources[1]


def preload_model_libraries() -> None:
    """Import the transformers model machinery in the worker's parent process (~7 s on a small CPU box):
    forked pool children inherit it, so a retrain job's time limit covers loading the reference
    and training, not library imports. Initialises no CUDA context (safe before fork)."""
    import transformers.modeling_utils  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def settings_dict(s: WorkerSettings) -> dict[str, Any]:
    return asdict(s)

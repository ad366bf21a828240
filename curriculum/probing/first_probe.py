"""The first probe's corpus: base-policy tasks labelled offline by the solver, and its registration.

One definition shared by the daemon (:class:`daemon.service.engine.PropelEngine` trains a run's first
primary probes with it) and the toy benchmark (``benchmarks/toy_propel.py`` builds its probes with
it, then runs the daemon's engine and driver on them): validate the generator's completions and drop
duplicates (:func:`distinct_valid_tasks`: one task labelled once), run ``band.k`` solver attempts per task
(:func:`curriculum.labelling.spotcheck.label_tasks`: offline solver trials; with ``sequential``, a task's attempts
stop once its label is settled — same labels, fewer trials), keep the tasks whose label is usable
(enough valid trials), and refuse a corpus with one class only. ``solver_trials`` counts the attempts
actually run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.base import Domain, Task
from curriculum.labelling.active_labelling import head_fitter, label_actively
from curriculum.labelling.spotcheck import LabelValue, label_tasks
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactStore
from curriculum.store.db import Store
from probes import Probe, save_probe
from probes.band import Band


class OneClassCorpus(RuntimeError):
    """The labelled corpus holds in-band tasks only or none: a probe needs both classes."""


@dataclass(frozen=True)
class LabelledCorpus:
    """Usable labelled tasks: ``texts`` are their reference texts (what the probe reads)."""

    tasks: list[Task]
    texts: list[str]
    labels: list[LabelValue]
    solver_trials: int  # every attempt actually run, unusable labels included

    @property
    def y(self) -> np.ndarray:
        return np.array([int(bool(lab.in_band)) for lab in self.labels], dtype=int)

    @property
    def positives(self) -> list[str]:
        return [t for t, lab in zip(self.texts, self.labels, strict=True) if lab.in_band]


def task_groups(domain: Domain, tasks: Sequence[Task]) -> list[str | None] | None:
    """Each task's validation group for ``probes.validation = "grouped"`` (SWE: its repository), from the
    domain's optional ``validation_group(task)``; ``None`` when the domain has no groups."""
    group = getattr(domain, "validation_group", None)
    return None if group is None else [group(t) for t in tasks]


def distinct_valid_tasks(domain: Domain, completions: Sequence[str]) -> list[Task]:
    """The valid tasks among generator ``completions``, each once (first occurrence order)."""
    checks = [v for v in domain.validate_batch(list(completions)) if v.valid]
    return list({v.task.content_hash: v.task for v in checks}.values())


def label_corpus(domain: Domain, solver: SolverBackend, tasks: Sequence[Task], band: Band, sampling: Sampling,
                 progress: Callable[[int], None] | None = None, sequential: bool = False) -> LabelledCorpus:
    """Label ``tasks`` (``band.k`` attempts each; fewer with ``sequential``) and keep the usable labels;
    raises :class:`OneClassCorpus` when one class is missing. ``progress(n)`` after each solver chunk."""
    labels = label_tasks(domain, solver, tasks, band, sampling, progress=progress, sequential=sequential)
    keep = [i for i, lab in enumerate(labels) if lab.in_band is not None]
    return _corpus(domain, [tasks[i] for i in keep], [labels[i] for i in keep], attempts_run(labels, band))


def attempts_run(labels: Sequence[LabelValue], band: Band) -> int:
    """The solver attempts behind ``labels`` (``band.k`` for a label that does not say)."""
    return sum(band.k if lab.attempts is None else lab.attempts for lab in labels)


def label_corpus_actively(domain: Domain, solver: SolverBackend, pool: Sequence[Task], features: np.ndarray,
                          band: Band, sampling: Sampling, settings: ActiveSettings,
                          say: Callable[[str], None] | None = None) -> tuple[LabelledCorpus, np.ndarray]:
    """Label ``settings.budget`` tasks of ``pool`` chosen by
    :func:`curriculum.labelling.active_labelling.label_actively` (a random seed set, then the tasks the
    probe ensemble is least sure of); ``features`` are the pool's probe features, row for row.
    Returns the corpus and its feature rows."""
    def label(indices: list[int]) -> list[LabelValue]:
        return label_tasks(domain, solver, [pool[i] for i in indices], band, sampling, sequential=settings.sequential)

    result = label_actively(features, label, budget=settings.budget, seed_share=settings.seed_share,
                            rounds=settings.rounds, members=settings.members, fit=head_fitter(settings.arch),
                            seed=settings.seed, progress=say)
    rows = [n for n, lab in enumerate(result.labels) if lab.in_band is not None]
    idx = [result.indices[n] for n in rows]
    corpus = _corpus(domain, [pool[i] for i in idx], [result.labels[n] for n in rows],
                     attempts_run(result.labels, band))
    return corpus, features[np.array(idx, dtype=int)]


@dataclass(frozen=True)
class ActiveSettings:
    """``probes.corpus_labelling = "active"``: tasks to label, seed share, rounds, ensemble members;
    ``sequential``: each task's attempts stop once its label is settled (``spotcheck.sequential``)."""

    budget: int
    seed_share: float = 0.5
    rounds: int = 4
    members: int = 3
    arch: str = "mlp"
    seed: int = 0
    sequential: bool = False


def _corpus(domain: Domain, tasks: list[Task], labels: list[LabelValue], trials: int) -> LabelledCorpus:
    pos = sum(1 for lab in labels if lab.in_band)
    if pos == 0 or pos == len(labels):
        raise OneClassCorpus(f"the offline probe set has {pos} in-band tasks of {len(labels)}: both classes are "
                             "needed; change spotcheck.band_lo/band_hi or probes.train_samples")
    return LabelledCorpus(tasks, [domain.reference_text(t) for t in tasks], labels, trials)


def register_primaries(store: Store, run_id: int, artifacts: ArtifactStore, probes: Sequence[Probe], folder: Path,
                       reference_fingerprint: str) -> list[int]:
    """Save each probe under ``folder/<name>``, put it in the artifact store, register it as a
    primary of the run and make exactly these the run's active probes. Returns their ids."""
    ids = []
    for probe in probes:
        uri = artifacts.put_tree(save_probe(probe, folder / probe.name))
        with store.session() as s:
            ids.append(repo.register_probe(s, probe.name, "primary", uri, reference_fingerprint,
                                           {"metrics": probe.metrics, "training": probe.training}, run_id=run_id))
    with store.session() as s:
        repo.set_active_probes(s, ids, run_id)
    return ids

"""The phase driver on the real store with a hand-written engine fake (no model: the model side is
covered by the end-to-end runs) and the real in-process spot-check pipeline + synthetic solver."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlalchemy import func, select

from curriculum.domains.arith import ArithDomain, complexity, random_expression
from curriculum.domains.base import Task
from curriculum.solvers import build_solver
from curriculum.solvers.base import Sampling
from curriculum.spotcheck import Band
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import FalsePositive, Label, MetricPoint, ProbeRow, QueueItem, TaskRow
from daemon.driver import Driver, DriverSettings
from daemon.engine_api import LabelledSample, NewProbe, Scored
from daemon.schema import FrontierTask
from daemon.spot import DispatchError, InProcessSpotChecker

pytestmark = pytest.mark.integration


class FakeEngine:
    """Samples random arith expressions; 'probability' is a fixed function of complexity."""

    def __init__(self) -> None:
        self.domain = ArithDomain()
        self.step = 0
        self.loaded: list[tuple[list[str], list[str]]] = []
        self.kl_factors: list[float] = []

    def rl_chunk(self, steps: int, should_stop: Callable[[], bool], kl_factor: float) -> dict[str, float]:
        self.step += steps
        self.kl_factors.append(kl_factor)
        return {"reward_mean": 0.1 * self.step, "steps": float(steps)}

    def sample(self, n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        return [random_expression(rng, rng.randint(1, 6)) if i % 10 else "12+" for i in range(n)]

    def score(self, texts: Sequence[str]) -> Scored:
        probs = [min(0.99, complexity(Task("arith", t.removeprefix("Q:"))) / 12) for t in texts]
        return Scored([p * 10 - 5 for p in probs], probs)

    def rewards(self, completions: Sequence[str]) -> list[float]:
        return [float(len(c) % 5) for c in completions]

    def provenance(self) -> dict[str, Any]:
        return {"generator_step": self.step, "adapter_hash": f"a{self.step}", "probe_ensemble_id": "ens1",
                "reference_fingerprint": "sha256:ref"}

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        self.loaded.append((list(artifact_uris), list(aux_uris)))

    def train_aux(self, samples: Sequence[LabelledSample], negatives_topic: str | None,
                  false_positive_ids: set[int], name: str) -> NewProbe | None:
        assert false_positive_ids and samples
        return NewProbe(name, f"file:///aux/{name}", "sha256:ref", {"negatives": len(false_positive_ids)})


def make_driver(store: Store, **kw: Any) -> tuple[Driver, FakeEngine]:
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "drv", "h", {})
        pid = repo.register_probe(s, "primary", "primary", "file:///p", "sha256:ref", {})
        repo.set_active_probes(s, [pid])
    engine = FakeEngine()
    spot = InProcessSpotChecker(store, engine.domain, build_solver("synthetic", seed=1), Sampling())
    settings = DriverSettings(run_name="drv", sample_size=40, band=Band(8, 1, 3, 6), budget_per_cycle=20,
                              retrain_min_false_positives=3, min_probability=0.3, max_topic_share=0.5,
                              diversity_sample_size=32, **kw)
    return Driver(store, run_id, engine, spot, settings), engine


def test_three_cycles(store: Store) -> None:
    driver, engine = make_driver(store)
    phases = [driver.tick().phase for _ in range(15)]
    assert phases == ["rl", "sample", "spotcheck", "retrain", "emit"] * 3
    phase, cycle, counters = driver.state()
    assert (phase, cycle) == ("rl", 3)
    with store.session() as s:
        tasks = s.execute(select(func.count()).select_from(TaskRow)).scalar_one()
        invalid = s.execute(select(func.count()).select_from(TaskRow).where(~TaskRow.valid)).scalar_one()
        labels = s.execute(select(func.count()).select_from(Label)).scalar_one()
        fps = s.execute(select(func.count()).select_from(FalsePositive)).scalar_one()
        aux = s.scalars(select(ProbeRow).where(ProbeRow.role == "aux")).all()
        msgs = [q.message for q in s.scalars(select(QueueItem))]
        metric_names = set(s.scalars(select(MetricPoint.name).where(MetricPoint.cycle == 2)))
    assert tasks > 60 and invalid >= 1 and labels >= 40
    assert fps >= 3 and aux and engine.loaded and engine.loaded[-1][1] == [aux[-1].artifact_uri]
    assert counters["emitted_total"] == len(msgs) > 0
    assert len({m["id"] for m in msgs}) == len(msgs)
    for m in msgs:
        FrontierTask.model_validate(m)
        assert m["spot_check"] is None or m["spot_check"]["in_band"] is not False
    assert {"validity", "self_bleu3", "distinct3", "top_topic_share", "reward_var", "emitted",
            "spotcheck_utility", "probe_precision", "solver_budget_used"} <= metric_names


def test_rerunning_a_phase_duplicates_nothing(store: Store) -> None:
    driver, _ = make_driver(store)
    for _ in range(5):
        driver.tick()
    with store.session() as s:
        before = (s.execute(select(func.count()).select_from(TaskRow)).scalar_one(),
                  s.execute(select(func.count()).select_from(QueueItem)).scalar_one())
    # a crash right after the emit phase's writes but "before" the transition: replay cycle 0's phases
    for phase in ("sample", "spotcheck", "emit"):
        with store.session() as s:
            repo.save_state(s, driver.run_id, phase=phase, cycle=0, counters=driver.state()[2])
        driver.tick()
    with store.session() as s:
        after = (s.execute(select(func.count()).select_from(TaskRow)).scalar_one(),
                 s.execute(select(func.count()).select_from(QueueItem)).scalar_one())
        ids = s.scalars(select(QueueItem.task_id)).all()
    assert after[0] == before[0] and len(ids) == len(set(ids))


class DownBroker:
    solver_id = "synthetic:down"

    def __init__(self) -> None:
        self.calls = 0

    def dispatch(self, task_ids: Sequence[int], k: int) -> None:
        self.calls += 1
        raise DispatchError("broker unreachable")


def test_broker_down_defers_spotchecks_and_rl_goes_on(store: Store) -> None:
    driver, _ = make_driver(store)
    driver.spot = DownBroker()
    for _ in range(10):
        driver.tick()
    _, cycle, counters = driver.state()
    assert cycle == 2 and counters["spotcheck_undispatched"] and driver.spot.calls == 2

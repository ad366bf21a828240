"""The daemon with the reward's diversity term on: a real ``Driver`` (the tests' fake engine with the real
hard-gate reward and a :class:`DiversityTerm`, real store, in-process spot-checks and retrains) records
``rl_diversity_penalty`` per RL chunk, feeds emitted tasks into the archive, and the dashboard shows it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from curriculum.reward.novelty import canonical_form
from curriculum.store.db import Store
from curriculum.store.models import MetricPoint, QueueItem, TaskRow
from daemon.config import PropelConfig
from daemon.http.dashboard import router
from daemon.service.settings import diversity_term, restored_diversity_term
from testkit.driver import FakeEngine, make_driver, tick_to
from testkit.servers import serve_app

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("measure", ["jaccard", "self_bleu"])
def test_driver_with_diversity_term_records_the_penalty_and_fills_the_archive(pg_store: Store, tmp_path: Path,
                                                                               measure: str) -> None:
    cfg = PropelConfig.model_validate({"rl": {"diversity_weight": 0.5, "diversity_archive_size": 32,
                                              "diversity_topic_quota": 0.25, "diversity_measure": measure}})
    term = diversity_term(cfg)
    assert term is not None
    driver, engine = make_driver(pg_store, tmp_path, engine=FakeEngine(diversity=term, group_size=4))
    tick_to(driver, "rl", 2)  # two full cycles: rl, sample, spot-check, retrain, emit
    assert engine.reward.diversity is term
    with pg_store.session() as s:
        points = s.execute(select(MetricPoint.cycle, MetricPoint.value).where(
            MetricPoint.run_id == driver.run_id, MetricPoint.name == "rl_diversity_penalty")
            .order_by(MetricPoint.cycle)).all()
        emitted = s.scalars(select(TaskRow.text).join(QueueItem, QueueItem.task_id == TaskRow.id)).all()
    assert [c for c, _ in points] == [0, 1] and all(0.0 <= v <= 1.0 for _, v in points)
    assert emitted, "nothing was emitted: the archive would stay empty"
    # every emitted task went into the archive (up to its size and the topic quota), and is now "seen"
    assert 0 < len(term) <= min(len({canonical_form("arith", t) for t in emitted}), 32)
    assert max(term.topic_counts().values()) <= term.per_topic == 8
    archived = [t for t in emitted if term.penalties([t], 1) == [1.0]]
    # jaccard: exactly the archived tasks are exact repeats; self_bleu: at least those (a task whose every
    # 1-3-gram occurs in the archive or the recent rollouts scores 1 too)
    assert len(archived) == len(term) if measure == "jaccard" else len(archived) >= len(term)
    restarted = restored_diversity_term(cfg, pg_store, driver.run_id)  # what a restarted engine starts with
    assert restarted is not None and restarted.topic_counts() == term.topic_counts() and len(restarted) == len(term)
    if measure == "jaccard":  # self_bleu also remembers its recent rollouts, which a restart does not restore
        assert restarted.penalties(emitted, 4) == term.penalties(emitted, 4)

    app = FastAPI()
    app.state.store, app.state.run_name = pg_store, "drv"
    app.include_router(router)
    with serve_app(app) as url:
        data = httpx.get(f"{url}/dashboard/data.json", timeout=30).json()
        page = httpx.get(f"{url}/dashboard", timeout=60).text
    assert data["metrics"]["rl_diversity_penalty"] == [[c, v] for c, v in points]
    collapse = page[page.index('id="metrics-collapse"'):page.index('id="metrics-generator"')]
    assert "rl_diversity_penalty (mean of the RL chunk)" in collapse and "rl_diversity_penalty: no data" not in collapse

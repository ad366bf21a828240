"""`propel run` with the reward's diversity term on (``rl.diversity_weight > 0``): the real engine builds
the term into its reward, the emit phase feeds its archive, and every RL chunk records
``rl_diversity_penalty`` — on the embedded defaults (SQLite, in-process spot-checks, synthetic solver), where
the topic-share term is on by default and records ``rl_topic_share_penalty`` the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import MetricPoint, QueueItem
from tests.e2e.conftest import run_state, start_daemon, write_config

pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_daemon_runs_with_the_diversity_term(tmp_path: Path, tiny_generator: Path) -> None:
    db = f"sqlite:///{tmp_path / 'propel.db'}"
    cfg = write_config(tmp_path / "c.toml", tiny_generator, tmp_path / "data", db, "div",
                       rl_extra="diversity_weight = 0.3\ndiversity_archive_size = 64\ndiversity_topic_quota = 0.5")
    log = tmp_path / "daemon.log"
    proc = start_daemon(cfg, log, "--cycles", "2", "--no-api")
    assert proc.wait(timeout=900) == 0, log.read_text()[-4000:]
    assert "Traceback" not in log.read_text()
    store = Store(db)
    try:
        assert run_state(store, "div")[:2] == ("rl", 2)
        with store.session() as s:
            points = s.execute(select(MetricPoint.cycle, MetricPoint.value)
                               .where(MetricPoint.name == "rl_diversity_penalty").order_by(MetricPoint.cycle)).all()
            topic = s.execute(select(MetricPoint.cycle, MetricPoint.value)
                              .where(MetricPoint.name == "rl_topic_share_penalty").order_by(MetricPoint.cycle)).all()
            emitted = s.scalars(select(QueueItem.id)).all()
        assert [c for c, _ in points] == [0, 1] and all(0.0 <= v <= 1.0 for _, v in points), points
        assert [c for c, _ in topic] == [0, 1] and all(0.0 <= v <= 1.0 for _, v in topic), topic
        assert emitted, "cycle 0 emitted nothing: cycle 1's chunk saw an empty archive"
    finally:
        store.dispose()

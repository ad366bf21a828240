"""``examples/arith_tasks.py``: ready-made tasks that ``propel tasks import`` takes (the trainer docs' step 1)."""

from __future__ import annotations

from pathlib import Path

from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import Task
from daemon.cli.tasks_io import read_records
from daemon.config import load_config
from examples import arith_tasks


def test_the_file_is_importable_distinct_checked_and_seeded(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "tasks.jsonl"
    assert arith_tasks.main(["--n", "20", "--out", str(out)]) == 0
    records, errors = read_records(out)
    assert errors == [] and len(records) == 20
    domain = ArithDomain()
    texts = [r.text for _, r in records]
    assert len(set(texts)) == 20
    for _, rec in records:
        assert rec.grading["answer"] == domain.check(Task("arith", rec.text or "")).task.payload["answer"]
        assert 0.0 <= rec.predicted_in_band <= 1.0 and rec.solver and rec.solver.startswith("synthetic:")
    again = arith_tasks.records(load_config(None), 20, 0)
    assert [r.text for r in again] == texts  # the same file every time

"""The toy PROPEL benchmark's ``--quick`` mode end to end: every row and column is present.

It checks the pipeline and the output schema, not the paper's goals (too few steps to show them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_quick_benchmark_writes_every_row_and_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from benchmarks import _common, toy_propel

    torch.set_num_threads(1)
    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    monkeypatch.setattr(toy_propel, "RESULTS", tmp_path)
    settings = toy_propel.Settings.quick()
    toy_propel.run(settings, tmp_path / "data", "toy_propel_quick")
    data = json.loads((tmp_path / "toy_propel_quick.json").read_text())
    assert data["rows"] == list(toy_propel.ROWS)
    assert set(data["table"]) == set(toy_propel.ROWS)
    for row in toy_propel.ROWS:
        entry = data["table"][row]
        assert set(toy_propel.COLUMNS) <= set(entry), row
        assert entry["seeds"] == settings.seeds
        assert 0.0 <= entry["utility_mean"] <= 1.0 and 0.0 <= entry["valid_mean"] <= 1.0
    table = data["table"]
    assert table["PROPEL"]["online_solver_trials"] == 0 and table["PROPEL"]["offline_solver_trials"] > 0
    assert table["SIL"]["online_solver_trials"] > 0 and table["SIL"]["offline_solver_trials"] == 0
    assert set(data["goals"]) >= {"propel_ratio_vs_base", "coevo_share_of_single_probe_lift"}
    assert (tmp_path / "toy_propel_quick.png").stat().st_size > 0
    assert "## toy_propel" in (tmp_path / "README.md").read_text()

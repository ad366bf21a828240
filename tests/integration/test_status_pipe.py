"""``propel status`` rendered to a pipe, as a user pipes it into a log or ``grep`` (issue #38 item 5):
every line within 80 columns, no name cut to ``…``, every announced version listed and the current
one marked, and a trainer's solver that is not followed named once with the setting (issue #36)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from curriculum.frontier.frontier_labels import TrainerOutcome, record_trainer_outcomes
from curriculum.store import repo, solver_versions
from curriculum.store.db import Store
from probes.band import Band
from testkit.seeding import seed

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TRAINER = "lab-grpo-policy/Qwen2.5-0.5B-Instruct-with-a-long-run-name"  # 58 characters


def _status(store: Store, tmp_path: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "PROPEL_CONFIG")}
    env.update(PROPEL_DATABASE_URL=store.url, PROPEL_DATA_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "daemon.cli.main", "status"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_in_a_pipe_fits_80_columns_with_full_names(store: Store, tmp_path: Path) -> None:
    ids = seed(store, 3, run="default")
    with store.session() as s:
        solver_versions.register(s, "first-policy", "step-1", source="announce")  # the default follows it
        for version in ("step-50", "step-100", "step-150"):
            solver_versions.register(s, TRAINER, version, source="announce")
        record_trainer_outcomes(s, [TrainerOutcome(t, TRAINER, "step-50", 2, 8, 0, None) for t in ids],
                                Band(8, 1, 3, 6), run_id=repo.get_or_create_run(s, "default", "h", {}))
    out = _status(store, tmp_path)
    lines = out.splitlines()
    assert [line for line in lines if len(line) > 80] == []
    assert "…" not in out
    versions = [line for line in lines if line.startswith(f"  {TRAINER} ")]
    assert versions == [f"  {TRAINER} step-150 * · age 0", f"  {TRAINER} step-100 · age 1",
                        f"  {TRAINER} step-50 · age 2"]  # the new current version has no labels yet
    flat = " ".join(line.strip() for line in lines)  # wrapped lines read as one text
    assert "trainer labels 3 (in band 100%)" in flat and "drift never measured" in flat
    notes = [i for i, line in enumerate(lines) if line.startswith("note: ")]
    assert len(notes) == 1  # once per name, not per version
    note = " ".join(line.strip() for line in lines[notes[0]:])
    assert f"solver '{TRAINER}' is not followed" in note and f'solver.name = "{TRAINER}"' in note
    assert "following solver 'first-policy' (known only through its trainer's acks and announces)" in flat

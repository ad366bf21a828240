"""Helpers shared by the benchmarks: a scratch PostgreSQL database and result writing."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Where results go (``PROPEL_BENCH_RESULTS`` redirects them, e.g. for a test of a benchmark's quick mode).
RESULTS = Path(os.environ.get("PROPEL_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
PG_ADMIN_URL = os.environ.get("PROPEL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def scratch_postgres() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, dropped afterwards; yields its URL."""
    import sqlalchemy as sa

    from migrations import upgrade

    name = f"propel_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def git_commit() -> str:
    """The commit the numbers come from (``+dirty`` when the work tree has uncommitted changes), or
    ``PROPEL_BENCH_COMMIT`` when set: a copy of the tree on a lent GPU machine carries the ``.git`` of the
    session's start, not the commit the copy holds (seen: a run at c0b9b4b recorded ed18ace+dirty)."""
    root = Path(__file__).resolve().parents[1]
    if os.environ.get("PROPEL_BENCH_COMMIT"):
        print(f"benchmarks: recording commit {os.environ['PROPEL_BENCH_COMMIT']} from PROPEL_BENCH_COMMIT, "
              "not git", file=sys.stderr)
        return os.environ["PROPEL_BENCH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        # results written by an earlier benchmark of the same batch do not make the code dirty
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


#: The code this process runs: taken when the benchmark starts (a long run must not record a commit
#: made while it was running, nor be marked dirty by an edit made meanwhile).
COMMIT_AT_START = git_commit()


def gpu_info() -> dict[str, Any]:
    """The visible GPU's name and torch/CUDA versions, when this process has loaded torch and sees one."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {}
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``benchmarks/results/NAME.json`` with the commit the run started on, machine info and a timestamp."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"benchmark": name, "commit": COMMIT_AT_START,
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform(), **gpu_info()}, **data}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path

"""`propel run --domain swe` on a real PyPI project, embedded on CPU, as a user runs it.

Runs ``propel --config examples/swe.toml run --cycles N --no-api`` as a subprocess (its data_dir and
repositories replaced), then reads the run back from its store: seconds per phase and cycle, the
share of RL and sampled completions that are valid (verified) bugs, spot-check labels and utility
(synthetic SWE solver: a benchmark instrument), emitted tasks, and one emitted message graded with
``propel_sdk.grading.grade`` (the reverse patch must pass, an empty diff must not). Start-up (model
load, bootstrap when not cached, first-probe labelling) is the wall time outside the cycles.
By default the run starts from a cold task memo (a fresh SWE cache that shares the fetched trees and
preflights, so every bug is verified again); ``--warm`` keeps the cache's verified-task memo.

    propel swe fetch --only inflection
    python -m benchmarks.swe_daemon --repos inflection --cycles 2 [--data-dir DIR: reuse its bootstrap]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks._common import write_result

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("rl", "sample", "spotcheck", "retrain", "emit")


def write_config(data_dir: Path, repos: list[str]) -> Path:
    text = (ROOT / "examples" / "swe.toml").read_text()
    text = text.replace('data_dir = ".propel"', f'data_dir = "{data_dir}"')
    text = re.sub(r"^repos = \[.*?\]", f"repos = {repos!r}".replace("'", '"'), text, flags=re.MULTILINE)
    path = data_dir / "swe.toml"
    path.write_text(text)
    return path


def cold_cache(source: Path, target: Path) -> Path:
    """A SWE cache with ``source``'s trees and preflights and an empty verified-task memo."""
    target.mkdir(parents=True, exist_ok=True)
    for folder in ("names", "preflight"):
        shutil.copytree(source / folder, target / folder, dirs_exist_ok=True)
    if not (target / "repos").exists():
        (target / "repos").symlink_to(source / "repos")
    return target


def read_run(db: str) -> tuple[dict[int, dict[str, float]], list[dict[str, Any]]]:
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import MetricPoint, QueueItem

    store = Store(db)
    try:
        with store.session() as s:
            per_cycle: dict[int, dict[str, float]] = defaultdict(dict)
            for m in s.scalars(select(MetricPoint)):
                per_cycle[m.cycle][m.name] = m.value
            messages = [q.message for q in s.scalars(select(QueueItem))]
    finally:
        store.dispose()
    return dict(per_cycle), messages


def grade_one(message: dict[str, Any]) -> dict[str, Any]:
    from propel_sdk.grading import grade

    started = time.perf_counter()
    fixed = grade(message, f"```diff\n{message['grading']['reference_fix']}```")
    mid = time.perf_counter()
    empty = grade(message, "")
    return {"reverse_patch_solves": fixed, "empty_diff_solves": empty, "grade_s": round(mid - started, 2),
            "fields": sorted(message["grading"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repos", nargs="+", default=["inflection"])
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=None, help="reuse a bootstrap cached here")
    parser.add_argument("--warm", action="store_true", help="keep the SWE cache's verified-task memo")
    args = parser.parse_args(argv)
    from curriculum.domains.swe.cache import RepoCache

    swe_cache = RepoCache(None).root
    if not args.warm:
        swe_cache = cold_cache(swe_cache, Path(tempfile.mkdtemp(prefix="swe-cold-cache-")))
        os.environ["PROPEL_SWE_CACHE"] = str(swe_cache)  # the daemon, its solver and grade_one below
    data_dir = (args.data_dir or Path(tempfile.mkdtemp(prefix="swe-daemon-"))).absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "propel.db").unlink(missing_ok=True)  # a fresh run; only the bootstrap cache is reused
    for stale in ("runs", "artifacts", "cache"):
        shutil.rmtree(data_dir / stale, ignore_errors=True)
    config = write_config(data_dir, args.repos)
    log = data_dir / "daemon.log"
    started = time.perf_counter()
    with open(log, "wb") as fh:
        code = subprocess.call([sys.executable, "-m", "daemon.cli.main", "--config", str(config), "run", "--cycles",
                                str(args.cycles), "--no-api"], stdout=fh, stderr=subprocess.STDOUT,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"})
    wall = time.perf_counter() - started
    if code != 0:
        print(log.read_text()[-3000:])
        return code
    per_cycle, messages = read_run(f"sqlite:///{data_dir / 'propel.db'}")
    cycles = [{"cycle": c, **{f"{p}_s": round(v.get(f"{p}_seconds", 0.0), 2) for p in PHASES},
               "rl_validity": v.get("rl_validity"), "sample_validity": v.get("validity"),
               "labelled": v.get("labelled"), "spotcheck_utility": v.get("spotcheck_utility"),
               "predicted_utility": v.get("predicted_utility"), "emitted": v.get("emitted")}
              for c, v in sorted(per_cycle.items())]
    in_cycles = sum(sum(c[f"{p}_s"] for p in PHASES) for c in cycles)  # type: ignore[misc]
    out = log.read_text()
    boot = re.search(r"valid \((?:trained in (\d+) s|reused)\)", out)
    result = {
        "repos": args.repos, "cycles": cycles, "wall_s": round(wall, 1), "startup_s": round(wall - in_cycles, 1),
        "bootstrap_train_s": float(boot.group(1)) if boot and boot.group(1) else None,
        "emitted": len(messages), "grading": grade_one(messages[0]) if messages else None,
        "task_memo": "warm" if args.warm else "cold",
        "solver": "synthetic:swe-logistic (SYNTHETIC benchmark instrument, not a model)",
        "generator": "bootstrap:swe (char-level tiny Qwen2 on spec lines), CPU",
    }
    path = write_result("swe_daemon", result)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A file of ready-made arith frontier tasks, to try a trainer against ``propel serve`` in a minute.

    python -m examples.arith_tasks --n 64 --out tasks.jsonl
    propel db upgrade && propel tasks import tasks.jsonl --create-run && propel serve

The daemon (``propel run``) writes its first tasks after bootstrapping its generator (minutes). This
writes tasks of the same shape at once: random expressions with 1–6 operators, checked by the arith
domain, in the message format the daemon emits (one ``TaskRecord`` per line, what ``propel tasks
import`` reads). They are *not* a frontier: nothing selected them. ``predicted_in_band`` is the
synthetic solver's exact probability of landing in the band (what the daemon's probes estimate for
the solver it follows), and ``solver`` is the configured solver's name (``--config`` / ``PROPEL_CONFIG``).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

from curriculum.domains.arith import ArithDomain, random_expression
from curriculum.domains.base import Task
from curriculum.solvers.synthetic import SyntheticArithSolver
from daemon.config import PropelConfig, load_config
from probes.band import Band
from propel_sdk.schema import Provenance, TaskRecord


def records(cfg: PropelConfig, n: int, seed: int) -> list[TaskRecord]:
    """``n`` distinct valid arith tasks as import records (seeded: the same file every time)."""
    rng, domain, solver = random.Random(seed), ArithDomain(), SyntheticArithSolver(seed=cfg.seed)
    spot = cfg.spotcheck
    band = Band(k=spot.k, lo=spot.band_lo, hi=spot.band_hi)
    name = _solver_name(cfg, solver)
    out: dict[str, TaskRecord] = {}
    while len(out) < n:
        checked = domain.check(Task("arith", random_expression(rng, rng.randint(domain.min_ops, domain.max_ops))))
        if not checked.valid or checked.task.text in out:
            continue
        task = checked.task
        out[task.text] = TaskRecord(
            domain=task.domain, text=task.text, solver_prompt=domain.solver_prompt(task), grading=dict(task.payload),
            predicted_in_band=round(float(band.probability(solver.success_probability(task.text))), 4),
            spot_check=None, solver=name, topic=domain.topic(task), band=(spot.band_lo, spot.band_hi), k=spot.k,
            created_at=datetime.now(UTC),
            provenance=Provenance(generator_step=None, adapter_hash=None, probe_ensemble_id=None,
                                  reference_model="examples.arith_tasks", run=cfg.run_name))
    return list(out.values())


def _solver_name(cfg: PropelConfig, solver: SyntheticArithSolver) -> str:
    """The name the daemon follows (``solver.name``, else the synthetic solver's id), read without
    building the configured backend; another backend without ``solver.name``: this script's name."""
    if cfg.solver.name:
        return cfg.solver.name
    return solver.solver_id if cfg.solver.backend == "synthetic" else "examples.arith_tasks"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64, help="tasks to write (default 64)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0: the same file every time)")
    ap.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    ap.add_argument("--config", type=Path, default=None,
                    help="daemon config whose band, run and solver name the tasks carry (default: PROPEL_CONFIG, "
                         "else the built-in defaults)")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be ≥ 1")
    path = args.config or (Path(os.environ["PROPEL_CONFIG"]) if os.environ.get("PROPEL_CONFIG") else None)
    cfg = load_config(path)
    lines = [r.model_dump_json(exclude={"id"}) for r in records(cfg, args.n, args.seed)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} arith tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The end-to-end tests' tiny bootstrapped arith generator, trained once per test run.

``make test`` runs the suite on two pytest-xdist workers. Every e2e test needs the same small generator
(300 bootstrap steps, ~90 s on 2 cores). :func:`cached_generator` trains it under a file lock in a cache
that all workers share, so one process trains and the others find it done. The xdist controller starts
that training in the background as the run begins (``python -m testkit.e2e_generator CACHE``, see
``tests/conftest.py``), so no worker sits idle waiting for it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Training steps of the tiny generator: enough for mostly-valid arith, seconds not minutes.
E2E_BOOTSTRAP_STEPS = int(os.environ.get("PROPEL_E2E_BOOTSTRAP_STEPS", "300"))


def cached_generator(cache: Path, steps: int = E2E_BOOTSTRAP_STEPS) -> Path:
    """The bootstrapped generator in ``cache``, trained there first if no process has yet."""
    from filelock import FileLock

    from curriculum.rl.bootstrap import bootstrap

    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache) + ".lock"):
        return bootstrap("arith", data_dir=cache, steps=steps, show_progress=False).path


if __name__ == "__main__":
    print(cached_generator(Path(sys.argv[1])))

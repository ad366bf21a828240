"""Start and stop ``propel worker`` processes on this machine (tests, benchmarks, local demos)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def start_worker(config: Path, log: Path, concurrency: int = 2, loglevel: str = "WARNING",
                 queues: str = "spotcheck,retrain", cwd: Path | None = None,
                 wrapper: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """A worker in its own process group (so :func:`stop` reaches its pool children too).

    ``cwd``: its working directory; ``wrapper``: a command prefix (e.g. a bubblewrap mount namespace
    that hides directories from it)."""
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [*wrapper, sys.executable, "-m", "daemon.cli.main", "--config", str(config), "worker",
             "-c", str(concurrency), "-l", loglevel, "-Q", queues],
            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
    """Signal the whole process group and wait; escalates to SIGKILL after ``timeout_s``."""
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=timeout_s)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)

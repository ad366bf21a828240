"""Private PostgreSQL clusters and Redis servers for fault tests (never the shared ones).

Each is started on a free port, owned by the test that asked for it, and torn down in ``finally``
even when the test fails. A missing capability (no ``initdb``, no ``redis-server``, not root and no
``postgres`` user) skips locally with the reason and fails under ``CI`` (``require_service``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testkit.servers import free_port
from tests.conftest import port_open, require_service

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in PG_BIN_DIRS:
        if (d / name).exists():
            return str(d / name)
    return None


def _as_postgres() -> list[str]:
    """Prefix that runs a command as the ``postgres`` user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class PrivatePostgres:
    datadir: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str, check: bool = True) -> None:
        cmd = [*_as_postgres(), str(_pg_bin("pg_ctl")), "-D", str(self.datadir), "-l", str(self.log), "-w", *args]
        subprocess.run(cmd, check=check, capture_output=True, timeout=60)

    def start(self) -> None:
        self._ctl("-o", f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop", check=False)

    def is_up(self) -> bool:
        return port_open("127.0.0.1", self.port, 0.5)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A throw-away PostgreSQL cluster (``initdb`` into a temp dir, trust auth, own port), migrated."""
    initdb = _pg_bin("initdb")
    has_user = _user_exists("postgres") or os.geteuid() != 0
    require_service("private PostgreSQL (initdb)", bool(initdb and _pg_bin("pg_ctl") and has_user),
                    "needs initdb/pg_ctl and, as root, a 'postgres' user")
    root = Path(tempfile.mkdtemp(prefix="propel-pgfault-"))
    datadir, log = root / "data", root / "pg.log"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    subprocess.run([*_as_postgres(), str(initdb), "-D", str(datadir), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True, timeout=120)
    pg = PrivatePostgres(datadir, free_port(), log)
    try:
        pg.start()
        from migrations import upgrade

        upgrade(pg.url)
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@dataclass
class PrivateRedis:
    port: int
    password: str | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not port_open("127.0.0.1", self.port, 0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@contextmanager
def private_redis(password: str | None = None) -> Iterator[PrivateRedis]:
    """A ``redis-server`` subprocess on a free port, no persistence; stopped afterwards."""
    require_service("private Redis (redis-server)", shutil.which("redis-server") is not None,
                    "redis-server is not installed (apt-get install redis-server)")
    server = PrivateRedis(free_port(), password)
    try:
        server.start()
        yield server
    finally:
        server.stop()

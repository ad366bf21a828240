"""Shared fixtures: real services (skip locally when absent, fail under CI), stores, tiny models."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from curriculum.store.db import Store
from curriculum.store.models import Base

PG_ADMIN_URL = os.environ.get("PROPEL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("PROPEL_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
AMQP_URL = os.environ.get("PROPEL_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
IN_CI = bool(os.environ.get("CI"))
_PREBUILD: subprocess.Popen[bytes] | None = None


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin has set up its factory
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its sandbox runs draw uids from a slot of their own
        os.environ["PROPEL_SANDBOX_UID_SLOT"] = str(1 + int(config.workerinput["workerid"].removeprefix("gw")))
    elif config.getoption("numprocesses", None) and not (config.option.collectonly or config.option.help):
        _start_prebuild(config)


def _start_prebuild(config: pytest.Config) -> None:
    """The xdist controller (``make test``) trains the e2e tests' generator in the background from the start,
    into a cache its workers share (:mod:`testkit.e2e_generator`): ``PROPEL_E2E_CACHE`` when the user set it,
    else ``PROPEL_E2E_RUN_CACHE`` under this run's temp root (set here for the workers)."""
    global _PREBUILD
    cache = os.environ.get("PROPEL_E2E_CACHE") or os.environ.setdefault(
        "PROPEL_E2E_RUN_CACHE", str(config._tmp_path_factory.getbasetemp() / "e2e-models"))
    Path(cache).mkdir(parents=True, exist_ok=True)
    with open(cache + ".log", "wb") as log:
        _PREBUILD = subprocess.Popen([sys.executable, "-m", "testkit.e2e_generator", cache], stdout=log,
                                     stderr=subprocess.STDOUT, cwd=config.rootpath,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PREBUILD is not None and _PREBUILD.poll() is None:  # a run that never needed it
        _PREBUILD.terminate()
        _PREBUILD.wait(timeout=30)


def require_service(name: str, available: bool, detail: str = "") -> None:
    """Skip (locally) or fail (under CI) when a real service the test needs is not reachable."""
    if available:
        return
    msg = f"{name} is not reachable{': ' + detail if detail else ''}"
    if IN_CI:
        pytest.fail(f"{msg} (CI is set: integration tests must not skip)")
    pytest.skip(msg)


def port_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _pg_available() -> tuple[bool, str]:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
        return True, ""
    except Exception as err:  # any driver/connection error means "not available"
        return False, str(err).split("\n", 1)[0]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head, dropped at the end."""
    import sqlalchemy as sa

    ok, detail = _pg_available()
    require_service("PostgreSQL", ok, detail)
    name = f"propel_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    from migrations import upgrade

    upgrade(url)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _clean(store: Store) -> None:
    import sqlalchemy as sa

    names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = Store(pg_url)
    _clean(store)
    yield store
    store.dispose()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    from migrations import upgrade

    url = f"sqlite:///{tmp_path / 'propel.db'}"
    upgrade(url)
    store = Store(url)
    yield store
    store.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest) -> Store:
    """The store suite runs on both databases."""
    name = "sqlite_store" if request.param == "sqlite" else "pg_store"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def redis_url() -> str:
    require_service("Redis", port_open("127.0.0.1", 6379), "127.0.0.1:6379")
    return REDIS_URL


@pytest.fixture(scope="session")
def amqp_url() -> str:
    require_service("RabbitMQ", port_open("127.0.0.1", 5672), "127.0.0.1:5672")
    return AMQP_URL


@pytest.fixture
def hanging_url() -> Iterator[str]:
    """A TCP server that accepts connections (kernel backlog) but never answers: a stuck webhook."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    finally:
        sock.close()


@pytest.fixture(scope="session")
def char_tokenizer():  # type: ignore[no-untyped-def]
    from curriculum.common.tinymodels import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture
def tiny_model(char_tokenizer):  # type: ignore[no-untyped-def]
    from curriculum.common.tinymodels import tiny_qwen2

    return tiny_qwen2(char_tokenizer, hidden_size=64, num_layers=2, seed=0)

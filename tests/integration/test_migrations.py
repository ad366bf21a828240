"""Migrations round-trip (upgrade → downgrade base → upgrade) on both databases with no drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from curriculum.store.db import Store
from curriculum.store.models import Base
from daemon.cli_db import downgrade, upgrade

pytestmark = pytest.mark.integration


def _drift(url: str) -> list[object]:
    store = Store(url)
    try:
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        store.dispose()


def _tables(url: str) -> set[str]:
    store = Store(url)
    try:
        return set(inspect(store.engine).get_table_names()) - {"alembic_version"}
    finally:
        store.dispose()


def _round_trip(url: str) -> None:
    upgrade(url)
    assert _tables(url) == set(Base.metadata.tables)
    assert _drift(url) == []
    downgrade(url, "base")
    assert _tables(url) == set()
    upgrade(url)
    assert _drift(url) == []


def test_sqlite_round_trip(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'm.db'}")


def test_postgres_round_trip(pg_url: str) -> None:
    _round_trip(pg_url)

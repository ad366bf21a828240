"""Alembic migrations for the store (PostgreSQL and SQLite), driven by ``propel db``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from curriculum.store.db import Store

MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at this package's scripts and at ``url``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def current_revision(store: Store) -> str | None:
    with store.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def _migrate(url: str, step: Callable[[Config, str], None], revision: str) -> None:
    store = Store(url)
    try:
        cfg = alembic_config(url)
        with store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            step(cfg, revision)
    finally:
        store.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the store at ``url`` to ``revision`` (creates the SQLite file if needed)."""
    _migrate(url, command.upgrade, revision)


def downgrade(url: str, revision: str) -> None:
    """Revert the store at ``url`` to ``revision`` (``base`` drops every table)."""
    _migrate(url, command.downgrade, revision)

"""Alembic migrations for the store (PostgreSQL and SQLite), driven by ``propel db``."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at this package's scripts and at ``url``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg

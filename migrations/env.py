"""Alembic environment: the ORM metadata, batch mode on SQLite, the shared naming convention."""

from __future__ import annotations

from alembic import context

from curriculum.store.db import make_engine
from curriculum.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=bool(url and url.startswith("sqlite")))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(str(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


def _run(connection: object) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,  # type: ignore[arg-type]
                      render_as_batch=connection.dialect.name == "sqlite",  # type: ignore[attr-defined]
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

"""Engines, sessions and the one dialect-aware primitive the repositories need: insert-ignore."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Engine,
    Float,
    Integer,
    String,
    Table,
    bindparam,
    create_engine,
    event,
    exc,
    func,
    make_url,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.types import TypeDecorator


class StoreError(Exception):
    """The store cannot be used (bad URL, unreachable server, schema not migrated)."""


def make_engine(url: str, pool_size: int = 5, echo: bool = False) -> Engine:
    """Create an engine; SQLite gets WAL, foreign keys and a busy timeout; PostgreSQL connections
    idle for more than ``PING_IDLE_S`` are pinged before use.

    A missing parent directory of a SQLite file is created. ``postgresql://`` URLs use psycopg 3.
    """
    try:
        parsed = make_url(url)
    except Exception as err:  # sqlalchemy raises ArgumentError with a terse message
        raise StoreError(f"invalid database URL: {err}") from None
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            try:
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise StoreError(f"cannot create the SQLite directory of {parsed.database}: {err.strerror}") from None
        engine = create_engine(parsed, echo=echo, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(parsed, echo=echo, pool_size=pool_size)
    _ping_when_idle(engine)
    return engine


#: A pooled connection idle longer than this is pinged before use (a restarted server's leftovers
#: are replaced); one in steady use is not, which saves a round trip per transaction on the hot
#: queue path (``pool_pre_ping`` pings on every checkout).
PING_IDLE_S = 2.0


def _ping_when_idle(engine: Engine) -> None:
    def checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since <= PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as err:  # any failure means a dead connection: the pool reconnects and retries
            raise exc.DisconnectionError(f"idle connection failed its ping: {err}") from err

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


class Store:
    """An engine plus a session factory; the handle every repository function takes."""

    def __init__(self, url: str, pool_size: int = 5, echo: bool = False) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=pool_size, echo=echo)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._autocommit = sessionmaker(self.engine.execution_options(isolation_level="AUTOCOMMIT"),
                                        expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on any exception."""
        with self._sessions() as sess, sess.begin():
            yield sess

    @contextmanager
    def autocommit(self) -> Iterator[Session]:
        """A session whose statements each commit on their own (no ``BEGIN``/``COMMIT`` round trips),
        for work that is a single atomic statement, such as a queue lease."""
        with self._autocommit() as sess:
            yield sess

    def dispose(self) -> None:
        self.engine.dispose()


def insert_ignore(sess: Session, model: type[Any], rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> int:
    """``INSERT … ON CONFLICT (keys) DO NOTHING`` into ``model``'s table; returns rows inserted.

    Works on PostgreSQL and SQLite (≥ 3.35 for RETURNING). On PostgreSQL, rows of scalar columns go
    as one array per column (``INSERT … SELECT FROM unnest(…)``): one short statement whatever the
    row count, compiled once and prepared by the driver, where a multi-row ``VALUES`` list is new SQL
    text for the driver to parse on every call (measured: most of a batched ack's server time).
    """
    if not rows:
        return 0
    table: Table = model.__table__
    dialect = sess.get_bind().dialect.name
    cols = tuple(rows[0])
    pk = next(iter(table.primary_key.columns))
    if dialect == "postgresql" and all(_scalar(table.c[c].type) for c in cols):
        params = {f"u_{c}": [r[c] for r in rows] for c in cols}
        return len(sess.execute(_pg_unnest_insert(table, tuple(keys), cols), params).all())
    if dialect == "postgresql":
        stmt: Any = pg_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    elif dialect == "sqlite":
        stmt = sqlite_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    else:
        raise StoreError(f"unsupported database dialect {dialect!r}: use PostgreSQL or SQLite")
    # rowcount is unreliable for multi-row inserts (psycopg batches them); count RETURNING rows.
    # Rows go as executemany parameters: SQLAlchemy compiles the statement once per table.
    return len(sess.execute(stmt.returning(pk), [dict(r) for r in rows]).all())


def _scalar(col_type: Any) -> bool:
    """Whether PostgreSQL arrays carry the column's values as they are (JSON columns do not)."""
    if isinstance(col_type, TypeDecorator):
        col_type = col_type.impl_instance
    return isinstance(col_type, Integer | String | Boolean | Float | DateTime)


@cache
def _pg_unnest_insert(table: Table, keys: tuple[str, ...], cols: tuple[str, ...]) -> Any:
    u = func.unnest(*[bindparam(f"u_{c}", type_=ARRAY(table.c[c].type)) for c in cols]).table_valued(
        *cols).render_derived(name="u")
    pk = next(iter(table.primary_key.columns))
    return (pg_insert(table).from_select(list(cols), select(*[u.c[c] for c in cols]))
            .on_conflict_do_nothing(index_elements=list(keys)).returning(pk))

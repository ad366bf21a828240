"""Passwords in database/broker URLs and the API token never reach output: ``mask_url``,
``propel config show``, ``propel status`` (reachable and unreachable store), the dashboard (HTML and
JSON), the driver's broker-down message and a real Celery worker's log."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from curriculum.store.db import Store
from daemon.cli.main import cli
from daemon.config import mask_url
from daemon.http.api import ApiContext, create_app
from daemon.loop.ports import DispatchError
from daemon.service.spot import CelerySpotChecker
from testkit.servers import free_port, serve_app

pytestmark = pytest.mark.integration
DB_PW, BROKER_PW, TOKEN = "dbS3cretPw", "brokerS3cretPw", "apiTok3nS3cret"


def _with_password(url: str) -> str:
    """The test PostgreSQL URL with a password added (trust auth ignores it, output must hide it)."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{DB_PW}@{host}"


def _clean(text: str) -> None:
    for secret in (DB_PW, BROKER_PW, TOKEN):
        assert secret not in text, f"secret {secret[:3]}… leaked in:\n{text[:2000]}"


@pytest.mark.parametrize("url", [
    f"postgresql+psycopg://propel:{DB_PW}@db:5432/propel",
    f"postgresql://propel:{DB_PW}@db/propel?sslmode=require",
    f"postgresql://propel:p@ss:{DB_PW}@db/propel",
    f"redis://:{BROKER_PW}@cache:6379/0",
    f"amqp://guest:{BROKER_PW}@mq:5672//",
    f"postgresql://propel@db/propel?password={DB_PW}&sslmode=require",
    f"postgresql://db/propel?sslmode=require&password={DB_PW}",
])
def test_mask_url_hides_every_password_form(url: str) -> None:
    masked = mask_url(url)
    _clean(masked)
    assert "***" in masked


def test_config_show_masks_urls_and_token() -> None:
    env = {"PROPEL_DATABASE_URL": f"postgresql://propel:{DB_PW}@db:5432/propel",
           "PROPEL_BROKER_URL": f"redis://:{BROKER_PW}@cache:6379/0", "PROPEL_API_TOKEN": TOKEN}
    out = CliRunner().invoke(cli, ["config", "show"], env=env)
    assert out.exit_code == 0, out.output
    _clean(out.output)
    assert "***@db:5432" in out.output and "***@cache:6379" in out.output


def test_status_masks_the_store_url(pg_url: str) -> None:
    out = CliRunner().invoke(cli, ["status"], env={"PROPEL_DATABASE_URL": _with_password(pg_url)})
    assert out.exit_code == 0, out.output
    _clean(out.output)
    assert ":***@" in out.output


def test_unreachable_store_error_is_masked() -> None:
    url = f"postgresql://propel:{DB_PW}@127.0.0.1:{free_port()}/propel"
    for args in (["status"], ["check"]):
        out = CliRunner().invoke(cli, args, env={"PROPEL_DATABASE_URL": url})
        assert out.exit_code != 0
        _clean(out.output + str(out.exception or ""))


def test_dashboard_masks_the_store_url(pg_store: Store, pg_url: str) -> None:
    store = Store(_with_password(pg_url))
    try:
        with serve_app(create_app(ApiContext(store=store, run_name="secrets", token=TOKEN))) as base:
            pages = [httpx.get(f"{base}{p}", timeout=30) for p in ("/dashboard", "/dashboard/data.json")]
    finally:
        store.dispose()
    assert [p.status_code for p in pages] == [200, 200]
    for page in pages:
        _clean(page.text)
    assert ":***@" in pages[1].text


def test_broker_down_message_is_masked() -> None:
    from workers.app import configure_app
    from workers.runtime import WorkerSettings

    configure_app(WorkerSettings(database_url="sqlite://", broker_url=f"redis://:{BROKER_PW}@127.0.0.1:{free_port()}/0",
                                 run_name="secrets"))
    with pytest.raises(DispatchError) as err:
        CelerySpotChecker("synthetic:x", "secrets", 4).dispatch([1, 2, 3], 8)
    _clean(str(err.value))


@pytest.mark.slow
def test_worker_log_masks_broker_and_store(tmp_path: Path, pg_url: str) -> None:
    from tests.e2e.faults._private import private_redis
    from workers.local import start_worker, stop

    log = tmp_path / "worker.log"
    with private_redis(password=BROKER_PW) as redis:
        cfg = tmp_path / "worker.toml"
        cfg.write_text(f'run_name = "secrets"\ndata_dir = "{tmp_path}"\n[store]\nurl = "{_with_password(pg_url)}"\n'
                       f'[broker]\nurl = "{redis.url}"\nvisibility_timeout_s = 8\ntask_time_limit_s = 6\n'
                       '[solver]\nbackend = "synthetic"\n')
        worker = start_worker(cfg, log, concurrency=1, loglevel="INFO")
        try:
            deadline = time.monotonic() + 60
            while "ready" not in log.read_text() and time.monotonic() < deadline and worker.poll() is None:
                time.sleep(0.3)
        finally:
            stop(worker)
    text = log.read_text()
    assert "ready" in text, text[-2000:]
    _clean(text)


def test_token_comparison_is_constant_time() -> None:
    """The bearer token is compared with ``hmac.compare_digest`` (no early-exit ``==`` on secrets)."""
    import ast
    import inspect

    from daemon.http import api

    src = inspect.getsource(api.require_token)
    calls = {ast.unparse(n.func) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)}
    assert "hmac.compare_digest" in calls
    compares = [ast.unparse(n) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Compare)]
    assert not [c for c in compares if "token" in c and "==" in c], compares

"""Serving the API app with uvicorn in a background thread of the daemon."""

from __future__ import annotations

import threading
from collections.abc import Callable

from daemon.config import PropelConfig


def start_api_thread(cfg: PropelConfig, app: object) -> Callable[[], None]:
    """Serve ``app`` with uvicorn in a background thread; returns a function that stops it."""
    import uvicorn

    # as ``propel serve``: no access log (uvicorn would build each request's log record only to drop it)
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.api.host, port=cfg.api.port, log_level="warning",  # type: ignore[arg-type]
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True, name="propel-api")
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return stop

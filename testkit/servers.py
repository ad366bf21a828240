"""Real local servers for integration tests: `transformers serve` and a scriptable HTTP server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            httpx.get(url, timeout=2.0)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@contextmanager
def transformers_serve(model_dir: Path, log_path: Path) -> Iterator[str]:
    """Run `transformers serve MODEL_DIR` on a free port; yields the OpenAI base URL (…/v1)."""
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(exe), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
                                 "--device", "cpu", "--default-seed", "0"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", 120, proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


Responder = Callable[[dict[str, object], int], tuple[int, dict[str, object]]]


@contextmanager
def scripted_server(respond: Responder, models: Sequence[str] | None = None
                    ) -> Iterator[tuple[str, list[dict[str, object]]]]:
    """A real HTTP server whose answer to the i-th POST is ``respond(body, i)``; yields (url, requests).

    ``models``: ``GET /v1/models`` lists them (OpenAI shape); without, GETs answer 404."""
    seen: list[dict[str, object]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            known = models is not None and self.path.rstrip("/").endswith("/models")
            data = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models or []]}
                              if known else {"error": "not found"}).encode()
            self.send_response(200 if known else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            with lock:
                seen.append(body)
                idx = len(seen) - 1
            status, payload = respond(body, idx)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_app(app: object, port: int | None = None) -> Iterator[str]:
    """Run an ASGI app under a real uvicorn server on ``port`` (default: a free one) in a thread;
    yields its base URL."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_http(f"http://127.0.0.1:{port}/openapi.json", 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class RestartableServer:
    """An ASGI app served on one fixed port that a test can stop and start again (a daemon restart).

    ``restart_after(event)`` starts it again in a thread once ``event`` is set (e.g. by the client's
    first retry), so a test can show a client waiting through the outage without sleeping."""

    def __init__(self, make_app: Callable[[], object]) -> None:
        self.make_app = make_app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._up = threading.Event()
        self._thread: threading.Thread | None = None

    def _serve(self, when: threading.Event | None) -> None:
        if when is not None:
            when.wait(60)
        with serve_app(self.make_app(), self.port):
            self._up.set()
            self._stop.wait()

    def start(self, when: threading.Event | None = None) -> None:
        """Serve now (``when`` None: returns once it answers) or once ``when`` is set (returns at once)."""
        self._stop.clear()
        self._up.clear()
        self._thread = threading.Thread(target=self._serve, args=(when,), daemon=True)
        self._thread.start()
        if when is None and not self._up.wait(30):
            raise TimeoutError(f"{self.url} did not start")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None


class ServeProcess:
    """A real ``propel serve`` process for ``run`` on ``store_url``, with the interface of
    :class:`RestartableServer`: ``stop()`` kills it (SIGKILL: a crash), ``start()`` spawns a fresh one
    on the same port with the token ``token()`` gives at that moment (a rotation is a restart)."""

    def __init__(self, run: str, store_url: str, workdir: Path, token: Callable[[], str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token, self.workdir = token, workdir
        self.config = workdir / f"serve-{run}.toml"
        self.config.write_text(f'run_name = "{run}"\ndata_dir = "{workdir}"\n[store]\nurl = "{store_url}"\n'
                               f"pool_size = 4\n[api]\nport = {self.port}\n")
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def _spawn(self, when: threading.Event | None) -> None:
        if when is not None:
            when.wait(60)
        with open(self.workdir / f"{self.config.stem}.log", "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli.main", "--config", str(self.config), "serve"], stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PROPEL_API_TOKEN": self.token()})
        wait_http(f"{self.url}/openapi.json", 60, self._proc)

    def start(self, when: threading.Event | None = None) -> None:
        """Serve now (returns once it answers) or once ``when`` is set (returns at once)."""
        if when is None:
            self._spawn(None)
            return
        self._thread = threading.Thread(target=self._spawn, args=(when,), daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None or (self._proc is not None and self._proc.poll() is None)

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=90)
            self._thread = None
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=30)
        self._proc = None

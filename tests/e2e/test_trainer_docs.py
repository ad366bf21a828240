"""The trainer docs, followed as a user would (#36: "0 questions that need the source").

Every block marked ``<!-- run: trainer-docs -->`` in docs/QUEUE.md, then in README.md, runs as
written, in order: shell blocks through bash, Python blocks as scripts of the venv's Python, the
``serve`` block (``propel serve``) in the background for all the blocks after it. Each must exit 0
and print what the ``<!-- output: trainer-docs -->`` block after it shows (``testkit.docblocks``).

What the test does for the user, and nothing else: the venv on ``PATH`` (the docs' ``source
.venv/bin/activate``), the ``export`` lines of the ``env`` block, the repository on ``PYTHONPATH``
(the docs run from its root; the blocks run in a scratch directory), a scratch data directory
(``PROPEL_DATA_DIR``) and a free port instead of 8787 (a config with ``api.port``; ``8787`` in the
blocks is replaced by it), so that it runs beside other daemons.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.docblocks import Block, blocks, exports, missing_lines
from testkit.servers import free_port, wait_http
from tests.conftest import require_service

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # ~20 s CPU; 85-105 s wall at load 13

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "QUEUE.md", ROOT / "README.md")
NAME = "trainer-docs"
BLOCK_TIMEOUT_S = 180


def _all_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path, NAME)]


@pytest.fixture
def user_env(tmp_path: Path) -> tuple[dict[str, str], int]:
    """The environment a user following the docs has (see the module docstring), and the API's port."""
    port = free_port()
    config = tmp_path / "propel.toml"
    config.write_text(f'[api]\nhost = "127.0.0.1"\nport = {port}\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROPEL_")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
               PROPEL_CONFIG=str(config), PROPEL_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", COLUMNS="80")
    return env, port


def _run(block: Block, env: dict[str, str], cwd: Path, port: int) -> str:
    text = block.text.replace("127.0.0.1:8787", f"127.0.0.1:{port}")
    if block.lang == "python":
        script = cwd / f"block_{block.path.stem}_{block.line}.py"
        script.write_text(text, encoding="utf-8")
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-eo", "pipefail", "-c", text]
    got = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S, check=False)
    out = got.stdout + got.stderr
    if got.returncode != 0:
        pytest.fail(f"{block.where} exited {got.returncode}:\n{text}\n--- output ---\n{out[-4000:]}")
    return got.stdout + "\n" + got.stderr


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:  # Ctrl-C, as the docs say; then make sure
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass


def test_the_trainer_docs_run_as_written(tmp_path: Path, user_env: tuple[dict[str, str], int],
                                         servers: list[subprocess.Popen[bytes]]) -> None:
    require_service("curl", shutil.which("curl") is not None, "the docs call the API with it")
    env, port = user_env
    work = tmp_path / "work"
    work.mkdir()
    todo = _all_blocks()
    assert [b.role for b in todo].count("serve") == 1 and todo[0].role == "env", [b.where for b in todo]
    for block in todo:
        if block.role == "env":
            env.update(exports(block))
            continue
        if block.role == "serve":
            with open(tmp_path / "serve.log", "wb") as log:  # the server keeps its own copy of the file
                servers.append(subprocess.Popen(["bash", "-c", block.text], cwd=work, env=env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True))
            try:
                wait_http(f"http://127.0.0.1:{port}/healthz", BLOCK_TIMEOUT_S, servers[-1])
            except (RuntimeError, TimeoutError) as err:
                pytest.fail(f"{block.where}: {err}\n{(tmp_path / 'serve.log').read_text()[-4000:]}")
            continue
        started = time.monotonic()
        out = _run(block, env, work, port)
        print(f"{block.where}: {time.monotonic() - started:.1f} s")
        if block.expected is not None:
            expected = block.expected.replace("127.0.0.1:8787", f"127.0.0.1:{port}")
            missing = missing_lines(expected, out)
            assert not missing, f"{block.where}: the docs show lines it did not print: {missing}\n--- output ---\n{out}"

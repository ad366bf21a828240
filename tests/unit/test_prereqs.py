"""`scripts/prereqs` (run by `make run` / `make test`): one line naming a missing package and its fix."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prereqs"


def _fake_python(tmp: Path, has_venv: bool, version_ok: bool = True) -> Path:
    exe = tmp / "python-fake"
    exe.write_text(f"""#!/bin/sh
case "$2" in
  *version_info\\ \\<*) exit {0 if version_ok else 1} ;;
  *"import venv"*) exit {0 if has_venv else 1} ;;
  *print*) echo 3.11 ;;
esac
[ "$1" = -V ] && echo "Python 3.9.2"
exit 0
""")
    exe.chmod(0o755)
    return exe


def _run(python: Path | str, target: str = "run") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(python), "PROPEL_NO_APT": "1"}
    return subprocess.run(["sh", str(SCRIPT), target], capture_output=True, text=True, env=env, timeout=30,
                          check=False)


def test_missing_venv_module_stops_with_one_line(tmp_path: Path) -> None:
    res = _run(_fake_python(tmp_path, has_venv=False))
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip() == ("prereqs: missing python3.11-venv — install it with: sudo apt-get install -y "
                                  "python3.11-venv (then re-run make run)")


def test_old_python_and_missing_python_stop_with_one_line(tmp_path: Path) -> None:
    old = _run(_fake_python(tmp_path, has_venv=True, version_ok=False))
    assert old.returncode == 1 and len(old.stderr.strip().splitlines()) == 1 and ">= 3.11" in old.stderr
    absent = _run(tmp_path / "no-such-python")
    assert absent.returncode == 1 and len(absent.stderr.strip().splitlines()) == 1 and "missing" in absent.stderr


def test_a_working_python_passes(tmp_path: Path) -> None:
    res = _run(_fake_python(tmp_path, has_venv=True), "test")
    assert res.returncode == 0 and res.stderr == ""
    assert all(line.startswith("prereqs: optional") for line in res.stdout.splitlines())

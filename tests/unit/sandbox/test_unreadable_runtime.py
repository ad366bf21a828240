"""A venv the sandbox user cannot read is a one-line infrastructure error naming the fix, not a run that
silently starts without the venv's packages ("No module named pytest" in a 0700 checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from curriculum.sandbox.backends import PythonRuntime, run_uid, unreadable_runtime

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A world-enterable directory under /tmp (pytest's own base directory is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="propel-unreadable-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        path.chmod(0o700)
        shutil.rmtree(path, ignore_errors=True)


def runtime_at(prefix: Path) -> PythonRuntime:
    return PythonRuntime(str(prefix / "bin" / "python"), ("-I",), (sys.base_prefix, str(prefix)))


def test_a_private_parent_is_named_with_its_mode_and_the_fix(open_dir: Path) -> None:
    private, env = open_dir / "private", open_dir / "private" / "venv"
    env.mkdir(parents=True)
    private.chmod(0o700)
    why = unreadable_runtime(runtime_at(env), ancestors=True)
    assert why is not None and f"{private} has mode 0700" in why and f"chmod o+rx {private}" in why
    assert "\n" not in why


def test_bubblewrap_makes_the_parents_so_only_the_venv_itself_counts(open_dir: Path) -> None:
    private, env = open_dir / "private", open_dir / "private" / "venv"
    env.mkdir(parents=True)
    private.chmod(0o700)
    env.chmod(0o755)
    assert unreadable_runtime(runtime_at(env), ancestors=False) is None
    env.chmod(0o750)
    why = unreadable_runtime(runtime_at(env), ancestors=False)
    assert why is not None and f"{env} has mode 0750" in why


def test_a_readable_venv_and_the_base_interpreter_pass(open_dir: Path) -> None:
    env = open_dir / "venv"
    env.mkdir()
    env.chmod(0o755)
    assert unreadable_runtime(runtime_at(env), ancestors=True) is None
    # the base prefix is never judged: an unreadable one falls back to the system's standard library
    assert unreadable_runtime(PythonRuntime(sys.executable, (), (sys.base_prefix,)), ancestors=True) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root run drops to another uid (the sandbox user)")
def test_a_run_from_a_venv_in_a_private_directory_fails_with_the_fix(open_dir: Path) -> None:
    """The product's rlimit backend, started from a venv inside a 0700 directory (as a checkout under
    ``mktemp -d`` would be), as a separate interpreter the way a user's daemon is."""
    private = open_dir / "checkout"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(private / ".venv")
    private.chmod(0o700)
    code = ("from curriculum.sandbox.backends import RlimitSandbox\n"
            "r = RlimitSandbox().run_python('print(1)', site_packages=True)\n"
            "print(r.status, r.meta.get('infra'), r.reason, sep='|')\n")
    out = subprocess.run([str(private / ".venv" / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=True).stdout
    status, infra, reason = out.strip().splitlines()[-1].split("|")
    assert (status, infra) == ("error", "True")
    assert f"{private} has mode 0700" in reason and f"chmod o+rx {private}" in reason


def test_run_uids_come_from_the_slot_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sandboxing processes on one host with different ``PROPEL_SANDBOX_UID_SLOT`` draw disjoint run uids;
    a bad slot is one error naming the setting."""
    from curriculum.sandbox.backends import UID_SLOT_SIZE, UID_SLOTS, uid_slot
    from curriculum.sandbox.forkserver import SANDBOX_UID_MIN

    monkeypatch.delenv("PROPEL_SANDBOX_UID_SLOT", raising=False)
    assert uid_slot() == (SANDBOX_UID_MIN, SANDBOX_UID_MIN + UID_SLOT_SIZE)
    monkeypatch.setenv("PROPEL_SANDBOX_UID_SLOT", "2")
    lo, hi = uid_slot()
    assert (lo, hi) == (SANDBOX_UID_MIN + 2 * UID_SLOT_SIZE, SANDBOX_UID_MIN + 3 * UID_SLOT_SIZE)
    uid = run_uid()  # as root with a full uid map a per-run uid, which must come from the slot
    assert uid is None or uid < SANDBOX_UID_MIN or lo <= uid < hi
    for bad in ("-1", "x", str(UID_SLOTS)):
        monkeypatch.setenv("PROPEL_SANDBOX_UID_SLOT", bad)
        with pytest.raises(ValueError, match="PROPEL_SANDBOX_UID_SLOT must be an integer from 0 to 63"):
            uid_slot()

"""The checkpoint directory fills up or turns read-only while a chunk is being committed: the
commit fails with an ``OSError`` naming the cause (ENOSPC / EROFS), ``LATEST`` still names the
previous checkpoint, that checkpoint's files are byte-identical, and nothing half-written is left
under a ``checkpoint-*`` name.

Uses a REAL tiny tmpfs (``mount -t tmpfs -o size=64k``) and a real read-only remount — no
simulated errors. Needs root (or CAP_SYS_ADMIN); otherwise skips locally and fails under CI.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from curriculum.rl.checkpoints import CheckpointStore
from tests.conftest import require_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _mount(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["mount", *args], capture_output=True, timeout=30)


@contextmanager
def tiny_tmpfs(path: Path, size: str = "64k") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = _mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)])
    require_service("tmpfs mount", done.returncode == 0,
                    f"mount -t tmpfs failed ({done.stderr.decode().strip()}): needs root / CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def _stage(store: CheckpointStore, step: int, payload: bytes) -> Path:
    staged = store.new_staging_dir()
    (staged / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (staged / "adapter_model.safetensors").write_bytes(payload)
    return staged


def _snapshot(ckpt: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(ckpt.iterdir())}


def _fill(root: Path) -> None:
    """Write until the filesystem answers ENOSPC (a real full disk)."""
    try:
        with open(root / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 1024)
                fh.flush()
                os.fsync(fh.fileno())
    except OSError as err:
        assert err.errno == errno.ENOSPC


def _assert_previous_intact(store: CheckpointStore, before: dict[str, bytes]) -> None:
    latest = store.latest()
    assert latest is not None and latest.name == "checkpoint-10"
    assert _snapshot(latest) == before
    assert store.global_step() == 10
    assert [p.name for p in store.checkpoints()] == ["checkpoint-10"]
    assert not [p for p in store.root.iterdir() if p.name.startswith(".LATEST.")], "temp file left behind"


def test_disk_full_during_commit_keeps_previous_checkpoint(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "ckpt") as root:
        store = CheckpointStore(root)
        first = store.commit(_stage(store, 10, b"a" * 4096), {"adapter_hash": "a1"})
        before = _snapshot(first)
        staged = _stage(store, 20, b"b" * 4096)
        _fill(root)
        with pytest.raises(OSError) as err:
            store.commit(staged, {"adapter_hash": "b2", "pad": "x" * 8192})
        assert err.value.errno == errno.ENOSPC and "No space left" in str(err.value)
        _assert_previous_intact(store, before)
        (root / "filler").unlink()  # space comes back: the same staged chunk now commits
        assert store.commit(staged, {"adapter_hash": "b2"}).name == "checkpoint-20"
        assert store.global_step() == 20


def test_read_only_directory_keeps_previous_checkpoint(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "ckpt", size="1m") as root:
        store = CheckpointStore(root)
        first = store.commit(_stage(store, 10, b"a" * 4096), {"adapter_hash": "a1"})
        before = _snapshot(first)
        staged = _stage(store, 20, b"b" * 4096)
        assert _mount(["-o", "remount,ro", str(root)]).returncode == 0
        try:
            with pytest.raises(OSError) as err:
                store.commit(staged, {"adapter_hash": "b2"})
            assert err.value.errno == errno.EROFS and "Read-only file system" in str(err.value)
            with pytest.raises(OSError) as err2:
                store.new_staging_dir()
            assert err2.value.errno == errno.EROFS
            _assert_previous_intact(store, before)
        finally:
            _mount(["-o", "remount,rw", str(root)])
        assert store.latest() == first

"""A content-addressed cache of repository source trees.

Layout under the cache directory (default ``.propel/swe-cache``, or ``$PROPEL_SWE_CACHE``)::

    sdists/<file>                   downloaded source distributions
    repos/<sha256>/                 one unpacked tree per content hash (never modified after unpacking)
    names/<name>.json               which hash a registry name resolved to (and its label)
    preflight/<sha256>.json         preflight results (see :mod:`.preflight`)

The hash of a ``pypi`` repository is the sha256 of its sdist (checked against the registry's pin);
a ``path`` or ``git`` repository is hashed over its files (relative path + content, sorted).
Unpacking goes to a temporary directory renamed into place, so a crash never leaves a half tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from curriculum.domains.swe.registry import RepoSpec

DEFAULT_CACHE_DIR = Path(".propel") / "swe-cache"
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".tox", ".nox", ".venv", ".mypy_cache"}


def default_cache_dir() -> Path:
    return Path(os.environ.get("PROPEL_SWE_CACHE", str(DEFAULT_CACHE_DIR)))


class FetchError(RuntimeError):
    """A repository could not be fetched or unpacked (one line saying why)."""


@dataclass(frozen=True)
class RepoCheckout:
    """A cached, unpacked repository."""

    spec: RepoSpec
    root: Path
    content_hash: str


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_hash(root: Path) -> str:
    """sha256 over (relative path, file sha256) of every file, sorted; caches and VCS dirs skipped."""
    digest = hashlib.sha256()
    for path in sorted(iter_files(root)):
        digest.update(f"{path.relative_to(root).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place (no torn files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def iter_files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        out += [Path(dirpath) / f for f in filenames if not f.endswith(".pyc")]
    return out


class RepoCache:
    """Fetches registry entries into ``root`` and finds them again by name or hash."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = (Path(root) if root is not None else default_cache_dir()).resolve()

    def tree(self, content_hash: str) -> Path:
        return self.root / "repos" / content_hash

    def lookup(self, spec: RepoSpec) -> RepoCheckout | None:
        """The cached checkout of ``spec`` if it was fetched before (no network)."""
        record = self.root / "names" / f"{spec.name}.json"
        if not record.is_file():
            return None
        data = json.loads(record.read_text())
        if data.get("label") != spec.label or (spec.sha256 and data.get("hash") != spec.sha256):
            return None
        if spec.source == "path" and Path(spec.path).is_dir() and tree_hash(Path(spec.path)) != data["hash"]:
            return None  # the lab's directory changed since it was cached
        tree = self.tree(data["hash"])
        return RepoCheckout(spec, tree, data["hash"]) if tree.is_dir() else None

    def fetch(self, spec: RepoSpec) -> RepoCheckout:
        """Download/copy and unpack ``spec`` unless cached; raises :class:`FetchError`."""
        cached = self.lookup(spec)
        if cached is not None:
            return cached
        if spec.source == "pypi":
            content_hash, staged = self._stage_pypi(spec)
        elif spec.source == "path":
            content_hash, staged = self._stage_tree(spec, Path(spec.path))
        else:
            content_hash, staged = self._stage_git(spec)
        tree = self.tree(content_hash)
        if tree.is_dir():
            shutil.rmtree(staged, ignore_errors=True)
        else:
            tree.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, tree)
        names = self.root / "names"
        names.mkdir(parents=True, exist_ok=True)
        write_atomic(names / f"{spec.name}.json", json.dumps({"label": spec.label, "hash": content_hash}))
        return RepoCheckout(spec, tree, content_hash)

    def _staging(self) -> Path:
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="stage-", dir=self.root / "tmp"))

    def _stage_pypi(self, spec: RepoSpec) -> tuple[str, Path]:
        sdists = self.root / "sdists"
        sdists.mkdir(parents=True, exist_ok=True)
        sdist = _existing_sdist(sdists, spec) or download_sdist(spec, sdists)
        digest = sha256_file(sdist)
        if spec.sha256 and digest != spec.sha256:
            raise FetchError(f"{spec.label}: sdist sha256 {digest} does not match the registry pin {spec.sha256}")
        staged = self._staging()
        unpack_sdist(sdist, staged)
        return digest, staged

    def _stage_tree(self, spec: RepoSpec, source: Path) -> tuple[str, Path]:
        if not source.is_dir():
            raise FetchError(f"{spec.label}: path {source} is not a directory")
        staged = self._staging()
        target = staged / "t"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_SKIP_DIRS, "*.pyc"), symlinks=True)
        for item in target.iterdir():
            os.replace(item, staged / item.name)
        target.rmdir()
        return tree_hash(staged), staged

    def _stage_git(self, spec: RepoSpec) -> tuple[str, Path]:
        clone = Path(tempfile.mkdtemp(prefix="clone-"))
        try:
            steps = (("clone", ["git", "clone", "--quiet", spec.url, str(clone)]),
                     ("checkout", ["git", "-C", str(clone), "checkout", "--quiet", spec.commit]))
            for step, argv in steps:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise FetchError(f"{spec.label}: git {step} failed: {done.stderr.strip()[:300]}")
            return self._stage_tree(spec, clone)
        finally:
            shutil.rmtree(clone, ignore_errors=True)


def _existing_sdist(directory: Path, spec: RepoSpec) -> Path | None:
    if not spec.sha256:
        return None
    for path in directory.iterdir():
        if path.is_file() and sha256_file(path) == spec.sha256:
            return path
    return None


def download_sdist(spec: RepoSpec, directory: Path, timeout_s: float = 600.0) -> Path:
    """``pip download --no-binary :all: --no-deps name==version`` into ``directory``."""
    with tempfile.TemporaryDirectory(prefix="pipdl-") as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                "-d", tmp, f"{spec.name}=={spec.version}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise FetchError(f"{spec.label}: pip download timed out after {timeout_s:.0f}s") from None
        files = list(Path(tmp).iterdir())
        if done.returncode != 0 or len(files) != 1:
            tail = (done.stderr.strip().splitlines() or ["no file downloaded"])[-1]
            raise FetchError(f"{spec.label}: pip download failed: {tail[:300]}")
        target = directory / files[0].name
        shutil.move(str(files[0]), target)
        return target


def unpack_sdist(sdist: Path, target: Path) -> None:
    """Unpack an sdist's single top-level directory into ``target`` (no paths outside it)."""
    scratch = Path(tempfile.mkdtemp(prefix="unpack-", dir=target.parent))
    try:
        if sdist.name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
            with tarfile.open(sdist) as tar:
                tar.extractall(scratch, filter="data")
        elif sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise FetchError(f"{sdist.name}: unsafe path {member!r} in the archive")
                zf.extractall(scratch)
        else:
            raise FetchError(f"{sdist.name}: unknown sdist format")
        tops = list(scratch.iterdir())
        inner = tops[0] if len(tops) == 1 and tops[0].is_dir() else scratch
        for item in inner.iterdir():
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

"""A content-addressed artifact store for probes, generator checkpoints and local reference models.

Artifacts are directories (a probe is ``probe.json`` + ``probe.safetensors``; a checkpoint is an
adapter with its optimizer and trainer state). :meth:`ArtifactStore.put_tree` stores every file as
a blob named by its sha256 plus a canonical JSON manifest (relative path → sha256 and size) and
returns ``cas://sha256/<manifest sha256>``: the address covers every byte of every file (a Merkle
tree of depth one). :meth:`ArtifactStore.fetch_tree` materialises an address into a local cache
directory, verifying the manifest and each file against their hashes; a missing or altered blob is
an :class:`ArtifactError` naming the address and the store — never a silently different artifact.

Blob backends (``artifacts.url``):

* ``db`` — the ``artifacts`` table of the store database (the default with a broker: a worker on
  another machine needs only the database and broker URLs);
* a path or ``file://`` URL — a local directory (the default embedded: ``<data_dir>/artifacts``);
* any other fsspec URL (``s3://bucket/prefix``, ``gs://…``, ``memory://…`` in tests) — the
  filesystem's own package (``s3fs``, ``gcsfs``) must be installed.

Blobs are written once and never changed; putting an existing blob is a no-op, so daemon and
workers may share a store without coordination.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import delete as sa_delete
from sqlalchemy import select

from curriculum.common.fsutil import atomic_write
from curriculum.store.db import Store, insert_ignore
from curriculum.store.models import Artifact, utcnow

CAS_PREFIX = "cas://sha256/"
MANIFEST_FORMAT = "propel-tree"
_HEX = frozenset("0123456789abcdef")


class ArtifactError(ValueError):
    """An artifact cannot be stored or fetched; the message names the address, the store and the cause."""


class BlobBackend(Protocol):
    """Where blobs live: write-once bytes under a sha256 hex name."""

    location: str

    def put(self, digest: str, data: bytes) -> None: ...

    def get(self, digest: str) -> bytes | None: ...

    def has(self, digest: str) -> bool: ...

    def delete(self, digest: str) -> None: ...


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_cas_uri(uri: str) -> bool:
    return uri.startswith(CAS_PREFIX)


def is_digest(value: str) -> bool:
    return len(value) == 64 and set(value) <= _HEX


def parse_cas_uri(uri: str) -> str:
    """The manifest digest of a ``cas://sha256/<64 hex>`` address."""
    digest = uri[len(CAS_PREFIX):] if is_cas_uri(uri) else ""
    if not is_digest(digest):
        raise ArtifactError(f"{uri!r} is not a content address (cas://sha256/<64 hex digits>)")
    return digest


class DatabaseBlobs:
    """Blobs in the store database's ``artifacts`` table."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.location = "the store database (artifacts table)"

    def put(self, digest: str, data: bytes) -> None:
        with self.store.session() as s:
            insert_ignore(s, Artifact, [{"sha256": digest, "size": len(data), "data": data,
                                         "created_at": utcnow()}], ["sha256"])

    def get(self, digest: str) -> bytes | None:
        with self.store.session() as s:
            data = s.scalars(select(Artifact.data).where(Artifact.sha256 == digest)).first()
        return None if data is None else bytes(data)

    def has(self, digest: str) -> bool:
        with self.store.session() as s:
            return s.scalars(select(Artifact.sha256).where(Artifact.sha256 == digest)).first() is not None

    def delete(self, digest: str) -> None:
        with self.store.session() as s:
            s.execute(sa_delete(Artifact).where(Artifact.sha256 == digest))


class LocalBlobs:
    """Blobs as files ``<root>/<2 hex>/<62 hex>``, written atomically (temp file + rename)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)

    def get(self, digest: str) -> bytes | None:
        path = self._path(digest)
        return path.read_bytes() if path.is_file() else None

    def has(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)


class FsspecBlobs:
    """Blobs under any fsspec URL prefix (``s3://bucket/propel``, ``memory://x``…)."""

    def __init__(self, url: str) -> None:
        import fsspec

        self.fs, root = fsspec.core.url_to_fs(url)
        self.root = root.rstrip("/")
        self.location = url

    def _path(self, digest: str) -> str:
        return f"{self.root}/{digest[:2]}/{digest[2:]}"

    def put(self, digest: str, data: bytes) -> None:
        if not self.fs.exists(self._path(digest)):
            self.fs.pipe_file(self._path(digest), data)

    def get(self, digest: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(digest)))
        except FileNotFoundError:
            return None

    def has(self, digest: str) -> bool:
        return bool(self.fs.exists(self._path(digest)))

    def delete(self, digest: str) -> None:
        if self.fs.exists(self._path(digest)):
            self.fs.rm_file(self._path(digest))


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    sha256: str
    size: int


class ArtifactStore:
    """Content-addressed trees over a :class:`BlobBackend`; fetched trees are cached under ``cache_dir``."""

    def __init__(self, blobs: BlobBackend, cache_dir: str | Path) -> None:
        self.blobs = blobs
        self.cache_dir = Path(cache_dir)

    @property
    def location(self) -> str:
        return self.blobs.location

    # ---- blobs ---------------------------------------------------------------------------------
    def put_bytes(self, data: bytes) -> str:
        digest = sha256_hex(data)
        if not self.blobs.has(digest):
            self.blobs.put(digest, data)
        return digest

    def get_bytes(self, digest: str, what: str) -> bytes:
        if not is_digest(digest):  # never a path: a forged manifest must not read outside the store
            raise ArtifactError(f"{what}: {digest[:80]!r} is not a sha256 digest")
        data = self.blobs.get(digest)
        if data is None:
            raise ArtifactError(f"{what}: blob {digest[:16]}… is not in {self.location} (daemon and workers must "
                                "use the same artifacts.url)")
        if sha256_hex(data) != digest:
            raise ArtifactError(f"{what}: blob {digest[:16]}… in {self.location} is corrupt (sha256 differs)")
        return data

    # ---- trees ---------------------------------------------------------------------------------
    def put_tree(self, directory: str | Path) -> str:
        """Store every regular file under ``directory``; returns its ``cas://sha256/…`` address."""
        root = Path(directory)
        if not root.is_dir():
            raise ArtifactError(f"cannot store {root}: not a directory")
        entries = []
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            data = path.read_bytes()
            entries.append({"path": path.relative_to(root).as_posix(), "sha256": self.put_bytes(data),
                            "size": len(data)})
        manifest = json.dumps({"format": MANIFEST_FORMAT, "version": 1, "files": entries}, sort_keys=True,
                              separators=(",", ":")).encode()
        return CAS_PREFIX + self.put_bytes(manifest)

    def manifest(self, uri: str) -> list[ManifestEntry]:
        digest = parse_cas_uri(uri)
        raw = self.get_bytes(digest, uri)
        try:
            data: dict[str, Any] = json.loads(raw)
            if data.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {data.get('format')!r}")
            entries = [ManifestEntry(str(e["path"]), str(e["sha256"]), int(e["size"])) for e in data["files"]]
        except (ValueError, KeyError, TypeError) as err:
            raise ArtifactError(f"{uri}: not a {MANIFEST_FORMAT} manifest ({err})") from err
        for entry in entries:
            _check_relative(uri, entry.path)
        return entries

    def fetch_tree(self, uri: str) -> Path:
        """The tree at ``uri`` as a local directory (``<cache_dir>/<digest>``), every file verified."""
        digest = parse_cas_uri(uri)
        target = self.cache_dir / digest
        if target.is_dir():
            return target
        entries = self.manifest(uri)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        staging = self.cache_dir / f".staging-{uuid.uuid4().hex[:12]}"
        try:
            for entry in entries:
                data = self.get_bytes(entry.sha256, f"{uri} file {entry.path}")
                if len(data) != entry.size:
                    raise ArtifactError(f"{uri} file {entry.path}: {len(data)} bytes, the manifest says {entry.size}")
                dest = staging / entry.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            staging.mkdir(parents=True, exist_ok=True)  # an empty tree
            try:
                os.rename(staging, target)
            except OSError:  # another process materialised it first: theirs is identical
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def local_path(self, uri: str) -> Path:
        """A local directory for a registry URI: fetched when content-addressed, else the legacy path itself."""
        return self.fetch_tree(uri) if is_cas_uri(uri) else Path(uri.removeprefix("file://"))

    def has_tree(self, uri: str) -> bool:
        return is_cas_uri(uri) and self.blobs.has(parse_cas_uri(uri))


def _check_relative(uri: str, path: str) -> None:
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts:
        raise ArtifactError(f"{uri}: manifest entry {path!r} escapes the artifact directory")


def open_blobs(url: str, store: Store | None) -> BlobBackend:
    """The backend of ``artifacts.url``: ``db``, a path / ``file://`` URL, or another fsspec URL."""
    if url == "db":
        if store is None:
            raise ArtifactError("artifacts.url = 'db' needs the store database")
        return DatabaseBlobs(store)
    if "://" not in url or url.startswith("file://"):
        return LocalBlobs(url.removeprefix("file://"))
    try:
        return FsspecBlobs(url)
    except (ImportError, ValueError) as err:
        raise ArtifactError(f"artifacts.url {url!r}: {err} (install the fsspec implementation of that "
                            "protocol, e.g. s3fs for s3://)") from err


def open_artifacts(url: str, store: Store | None, cache_dir: str | Path) -> ArtifactStore:
    return ArtifactStore(open_blobs(url, store), cache_dir)


def publish_model(artifacts: ArtifactStore, model: str) -> str:
    """A local model directory as its content address (so a worker without the directory can fetch it);
    a hub id or an address is returned unchanged."""
    return artifacts.put_tree(model) if not is_cas_uri(model) and Path(model).is_dir() else model

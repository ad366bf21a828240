"""The content-addressed artifact store on a local directory and on an fsspec URL (``memory://``):
round trips, and refusal of what must not load (altered or missing blobs, forged manifests, bad addresses)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from curriculum.store.artifacts import (
    CAS_PREFIX,
    ArtifactError,
    ArtifactStore,
    FsspecBlobs,
    LocalBlobs,
    open_artifacts,
    parse_cas_uri,
    publish_model,
    sha256_hex,
)


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "probe.json").write_text('{"a": 1}\n')
    (root / "sub" / "w.bin").write_bytes(bytes(range(256)) * 4)
    (root / "empty").write_bytes(b"")
    return root


@pytest.fixture(params=["local", "memory"])
def artifacts(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    blobs = LocalBlobs(tmp_path / "blobs") if request.param == "local" else FsspecBlobs(
        f"memory://propel-{uuid.uuid4().hex}")
    return ArtifactStore(blobs, tmp_path / "cache")


def test_a_tree_round_trips_and_its_address_is_its_content(artifacts: ArtifactStore, tmp_path: Path) -> None:
    uri = artifacts.put_tree(_tree(tmp_path / "a"))
    assert uri.startswith(CAS_PREFIX) and artifacts.put_tree(_tree(tmp_path / "b")) == uri  # same bytes, same address
    got = artifacts.fetch_tree(uri)
    assert (got / "sub" / "w.bin").read_bytes() == bytes(range(256)) * 4 and (got / "empty").read_bytes() == b""
    assert artifacts.fetch_tree(uri) == got  # cached
    (tmp_path / "b" / "probe.json").write_text('{"a": 2}\n')
    assert artifacts.put_tree(tmp_path / "b") != uri


def test_an_altered_blob_is_refused(artifacts: ArtifactStore, tmp_path: Path) -> None:
    uri = artifacts.put_tree(_tree(tmp_path / "a"))
    [entry] = [e for e in artifacts.manifest(uri) if e.path == "sub/w.bin"]
    artifacts.blobs.delete(entry.sha256)
    artifacts.blobs.put(entry.sha256, b"tampered")  # a backend that serves other bytes under the name
    with pytest.raises(ArtifactError, match="corrupt"):
        artifacts.fetch_tree(uri)
    assert not (artifacts.cache_dir / parse_cas_uri(uri)).exists(), "nothing half-written is left as the tree"


def test_a_missing_blob_names_the_store(artifacts: ArtifactStore, tmp_path: Path) -> None:
    uri = artifacts.put_tree(_tree(tmp_path / "a"))
    artifacts.blobs.delete(artifacts.manifest(uri)[0].sha256)
    with pytest.raises(ArtifactError, match=f"not in {artifacts.location}.*same artifacts.url"):
        artifacts.fetch_tree(uri)


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b"])
def test_a_forged_manifest_cannot_write_outside_the_cache(artifacts: ArtifactStore, tmp_path: Path,
                                                          path: str) -> None:
    data = b"x"
    manifest = json.dumps({"format": "propel-tree", "version": 1,
                           "files": [{"path": path, "sha256": artifacts.put_bytes(data), "size": 1}]}).encode()
    uri = CAS_PREFIX + artifacts.put_bytes(manifest)
    with pytest.raises(ArtifactError, match="escapes"):
        artifacts.fetch_tree(uri)
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("uri", ["cas://sha256/abc", "/some/path", "cas://sha256/" + "G" * 64, "s3://x"])
def test_a_bad_address_is_refused(uri: str) -> None:
    with pytest.raises(ArtifactError, match="not a content address"):
        parse_cas_uri(uri)


def test_a_blob_that_is_not_a_manifest_is_refused(artifacts: ArtifactStore) -> None:
    uri = CAS_PREFIX + artifacts.put_bytes(b"just bytes")
    with pytest.raises(ArtifactError, match="not a propel-tree manifest"):
        artifacts.fetch_tree(uri)


def test_open_and_publish(tmp_path: Path) -> None:
    store = open_artifacts(str(tmp_path / "blobs"), None, tmp_path / "cache")
    assert isinstance(store.blobs, LocalBlobs)
    assert isinstance(open_artifacts("file://" + str(tmp_path / "b2"), None, tmp_path / "c").blobs, LocalBlobs)
    assert isinstance(open_artifacts("memory://x", None, tmp_path / "c").blobs, FsspecBlobs)
    with pytest.raises(ArtifactError, match="needs the store database"):
        open_artifacts("db", None, tmp_path / "c")
    assert publish_model(store, "Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"  # a hub id stays as it is
    uri = publish_model(store, str(_tree(tmp_path / "model")))
    assert publish_model(store, uri) == uri and store.has_tree(uri)
    assert store.get_bytes(sha256_hex(b'{"a": 1}\n'), "x") == b'{"a": 1}\n'


def test_a_forged_manifest_digest_cannot_read_outside_the_store(artifacts: ArtifactStore, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s3cr3t")
    manifest = json.dumps({"format": "propel-tree", "version": 1, "files": [
        {"path": "x", "sha256": "../../secret", "size": 6}]}).encode()
    with pytest.raises(ArtifactError, match="not a sha256 digest"):
        artifacts.fetch_tree(CAS_PREFIX + artifacts.put_bytes(manifest))

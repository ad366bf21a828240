"""Registry parsing and splits, the content-addressed cache, sdist unpacking."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from curriculum.domains.swe.cache import FetchError, RepoCache, RepoCheckout, tree_hash, unpack_sdist
from curriculum.domains.swe.registry import (
    BUNDLED_REGISTRY,
    SPLITS,
    RegistryError,
    RepoSpec,
    assign_splits,
    load_registry,
    parse_registry,
)

from .conftest import FIXTURE, fixture_registry


def test_bundled_registry_pins_versions_and_hashes() -> None:
    specs = load_registry()
    assert len(specs) >= 8
    for spec in specs:
        assert spec.source == "pypi" and spec.version and len(spec.sha256) == 64 and spec.tests


@pytest.mark.parametrize(("text", "message"), [
    ('[[repo]]\nname = "x"\nsource = "svn"\n', "'source' must be one of"),
    ('[[repo]]\nname = "x"\nsource = "pypi"\n', "needs field 'version'"),
    ('[[repo]]\nname = "x"\nsource = "git"\nurl = "u"\n', "needs field 'commit'"),
    ('[[repo]]\nname = "a/b"\nsource = "path"\npath = "p"\n', "'name' must be"),
    ('[[repo]]\nname = "x"\nsource = "path"\npath = "p"\ncolour = "red"\n', "unknown field"),
    ('[[repo]]\nname = "x"\nsource = "path"\npath = "p"\ntests = "t"\n', "list of strings"),
    ('[[repo]]\nname = "x"\nsource = "path"\npath = "p"\nsplit = "dev"\n', "'split' must be one of"),
    ("[[repo]\n", "not valid TOML"),
])
def test_bad_registry_entries_name_the_field(text: str, message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        parse_registry(text, "lab.toml")


def test_lab_registry_adds_path_and_git_entries(tmp_path: Path) -> None:
    lab = fixture_registry(tmp_path)
    lab.write_text(lab.read_text() + '[[repo]]\nname = "mine"\nsource = "git"\nurl = "https://example.invalid/x.git"\n'
                   'commit = "0123456789abcdef"\npytest_args = ["-k", "fast"]\n')
    specs = {s.name: s for s in load_registry(lab)}
    assert specs["minicalc"].path == str(FIXTURE) and specs["minicalc"].split == "rl-train"
    assert specs["mine"].label == "mine@0123456789ab" and specs["mine"].pytest_args == ("-k", "fast")
    assert "parse" in specs  # bundled entries stay
    with pytest.raises(RegistryError, match="does not exist"):
        load_registry(tmp_path / "missing.toml")


def test_splits_are_disjoint_deterministic_and_respect_pins() -> None:
    specs = [RepoSpec(f"repo{i}", "path", path="p") for i in range(20)] + [
        RepoSpec("pinned", "path", path="p", split="held-out")]
    splits = assign_splits(specs)
    assert splits == assign_splits(list(reversed(specs)))  # order of the file does not matter
    assert set(splits.values()) == set(SPLITS) and splits["pinned"] == "held-out"
    counts = {s: list(splits.values()).count(s) for s in SPLITS}
    assert counts["probe-train"] in (10, 11) and counts["rl-train"] in (5, 6)
    bundled = assign_splits(load_registry())
    assert {bundled[n] for n in bundled} == set(SPLITS)
    with pytest.raises(ValueError, match="summing to 1"):
        assign_splits(specs, (0.5, 0.5, 0.5))


def test_path_source_is_content_addressed(tmp_path: Path) -> None:
    cache = RepoCache(tmp_path / "c")
    spec = RepoSpec("minicalc", "path", path=str(FIXTURE))
    checkout = cache.fetch(spec)
    assert checkout.content_hash == tree_hash(FIXTURE) == tree_hash(checkout.root)
    assert checkout.root == cache.root / "repos" / checkout.content_hash
    assert (checkout.root / "minicalc" / "core.py").read_text() == (FIXTURE / "minicalc" / "core.py").read_text()
    assert cache.lookup(spec) == checkout and cache.fetch(spec) == checkout
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURE, copy)
    moved = RepoSpec("minicalc", "path", path=str(copy))
    assert RepoCache(tmp_path / "c").lookup(moved) == RepoCheckout(moved, checkout.root, checkout.content_hash)
    (copy / "minicalc" / "core.py").write_text("# edited\n")
    assert cache.lookup(moved) is None  # a changed lab directory is fetched again, under a new hash
    assert cache.fetch(moved).content_hash != checkout.content_hash
    with pytest.raises(FetchError, match="not a directory"):
        cache.fetch(RepoSpec("gone", "path", path=str(tmp_path / "nope")))


def _sdist(tmp_path: Path, members: dict[str, bytes]) -> Path:
    path = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_sdist_strips_the_top_directory_and_refuses_escapes(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.mkdir()
    unpack_sdist(_sdist(tmp_path, {"pkg-1.0/pkg.py": b"x = 1\n", "pkg-1.0/tests/test_p.py": b""}), target)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*.py")) == ["pkg.py", "tests/test_p.py"]
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "x").mkdir()
    with pytest.raises(tarfile.TarError):
        unpack_sdist(_sdist(evil, {"../../escape.py": b"boom"}), evil / "x")
    assert not (tmp_path / "escape.py").exists()


def test_pypi_sha_pin_mismatch_is_refused(tmp_path: Path) -> None:
    cache = RepoCache(tmp_path / "c")
    (cache.root / "sdists").mkdir(parents=True)
    sdist = _sdist(tmp_path, {"pkg-1.0/pkg.py": b"x = 1\n"})
    os.replace(sdist, cache.root / "sdists" / sdist.name)
    from curriculum.domains.swe.cache import sha256_file

    good = RepoSpec("pkg", "pypi", version="1.0", sha256=sha256_file(cache.root / "sdists" / sdist.name))
    checkout = cache.fetch(good)  # found in sdists/ by hash: no download
    assert (checkout.root / "pkg.py").is_file() and checkout.content_hash == good.sha256


def test_bundled_registry_file_documents_its_format() -> None:
    text = BUNDLED_REGISTRY.read_text()
    for word in ("source", "pythonpath", "pytest_args", "split", "--registry"):
        assert word in text


def test_git_source_is_cloned_at_the_commit(tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "origin"
    shutil.copytree(FIXTURE, repo)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "one"]):
        subprocess.run(argv, cwd=repo, check=True, env=env)
    first = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "minicalc" / "core.py").write_text("# second commit\n")
    subprocess.run(["git", "commit", "-qam", "two"], cwd=repo, check=True, env=env)
    cache = RepoCache(tmp_path / "c")
    checkout = cache.fetch(RepoSpec("mini", "git", url=str(repo), commit=first))
    assert (checkout.root / "minicalc" / "core.py").read_text() == (FIXTURE / "minicalc" / "core.py").read_text()
    assert not (checkout.root / ".git").exists() and checkout.content_hash == tree_hash(FIXTURE)
    with pytest.raises(FetchError, match="checkout failed"):
        cache.fetch(RepoSpec("bad", "git", url=str(repo), commit="0" * 40))

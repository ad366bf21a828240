"""The repository registry: which real Python projects SWE bugs are injected into.

A registry is a TOML file with one ``[[repo]]`` table per repository (format documented at the top
of the bundled ``registry.toml``). Sources: ``pypi`` (an sdist at a pinned version, optionally
pinned by sha256), ``path`` (a local directory, for a lab's own code) and ``git`` (URL + commit).
Splits are repo-disjoint and deterministic from the registry: repositories are ordered by the
sha256 of their name and dealt into probe-train / rl-train / held-out by share, unless an entry
pins its ``split``.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUNDLED_REGISTRY = Path(__file__).with_name("registry.toml")
SPLITS = ("probe-train", "rl-train", "held-out")
#: Shares of repositories dealt to each split (in :data:`SPLITS` order).
DEFAULT_SPLIT_SHARES = (0.5, 0.25, 0.25)
SOURCES = ("pypi", "path", "git")


class RegistryError(ValueError):
    """A registry file that cannot be used (the message names the entry and field)."""


@dataclass(frozen=True)
class RepoSpec:
    """One registry entry."""

    name: str
    source: str
    version: str = ""
    sha256: str = ""
    path: str = ""
    url: str = ""
    commit: str = ""
    tests: tuple[str, ...] = ()
    pythonpath: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()
    split: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def label(self) -> str:
        """``name==version`` (pypi), ``name@commit`` (git) or ``name`` (path)."""
        if self.source == "pypi":
            return f"{self.name}=={self.version}"
        if self.source == "git":
            return f"{self.name}@{self.commit[:12]}"
        return self.name


_STR_FIELDS = ("name", "source", "version", "sha256", "path", "url", "commit", "split")
_LIST_FIELDS = ("tests", "pythonpath", "pytest_args")


def _spec_from_table(table: dict[str, Any], where: str) -> RepoSpec:
    unknown = set(table) - set(_STR_FIELDS) - set(_LIST_FIELDS)
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for key in _STR_FIELDS:
        if key in table and not isinstance(table[key], str):
            raise RegistryError(f"{where}: field {key!r} must be a string")
    for key in _LIST_FIELDS:
        if key in table and not (isinstance(table[key], list) and all(isinstance(v, str) for v in table[key])):
            raise RegistryError(f"{where}: field {key!r} must be a list of strings")
    name = table.get("name", "")
    if not name or any(c in name for c in "/\\ \t\n") or name.startswith("."):
        raise RegistryError(f"{where}: 'name' must be a non-empty name without slashes or spaces")
    source = table.get("source", "")
    if source not in SOURCES:
        raise RegistryError(f"{where} ({name}): 'source' must be one of {', '.join(SOURCES)}, got {source!r}")
    required = {"pypi": ("version",), "path": ("path",), "git": ("url", "commit")}[source]
    for key in required:
        if not table.get(key):
            raise RegistryError(f"{where} ({name}): source {source!r} needs field {key!r}")
    split = table.get("split", "")
    if split and split not in SPLITS:
        raise RegistryError(f"{where} ({name}): 'split' must be one of {', '.join(SPLITS)}, got {split!r}")
    fields: dict[str, Any] = {k: table[k] for k in _STR_FIELDS if k in table}
    fields.update({k: tuple(table[k]) for k in _LIST_FIELDS if k in table})
    return RepoSpec(**fields)


def parse_registry(text: str, origin: str = "<registry>", base_dir: Path | None = None) -> list[RepoSpec]:
    """Entries of one registry text; ``path`` sources are resolved against ``base_dir``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise RegistryError(f"{origin}: not valid TOML: {err}") from None
    tables = data.get("repo", [])
    if not isinstance(tables, list):
        raise RegistryError(f"{origin}: 'repo' must be an array of tables ([[repo]])")
    specs = []
    for i, table in enumerate(tables):
        spec = _spec_from_table(table, f"{origin} repo #{i + 1}")
        if spec.source == "path" and base_dir is not None and not Path(spec.path).is_absolute():
            spec = RepoSpec(**{**spec.__dict__, "path": str((base_dir / spec.path).resolve())})
        specs.append(spec)
    return specs


def load_registry(*paths: Path | str, bundled: bool = True) -> list[RepoSpec]:
    """The bundled registry (unless ``bundled=False``) plus lab files; later entries of the same
    name replace earlier ones. Raises :class:`RegistryError` with the file and entry on bad input."""
    files = ([BUNDLED_REGISTRY] if bundled else []) + [Path(p) for p in paths]
    merged: dict[str, RepoSpec] = {}
    for path in files:
        if not path.is_file():
            raise RegistryError(f"registry file {path} does not exist")
        for spec in parse_registry(path.read_text(), str(path), path.parent):
            merged[spec.name] = spec
    return list(merged.values())


def _name_key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def assign_splits(specs: list[RepoSpec], shares: tuple[float, float, float] = DEFAULT_SPLIT_SHARES
                  ) -> dict[str, str]:
    """Repository name -> split, repo-disjoint and deterministic in the registry's names.

    Pinned entries keep their split; the others are ordered by sha256(name) and dealt so that each
    split's count is as close as possible to its share of all repositories (pinned included).
    """
    if len(shares) != len(SPLITS) or any(s < 0 for s in shares) or abs(sum(shares) - 1.0) > 1e-9:
        raise ValueError(f"split shares must be {len(SPLITS)} non-negative numbers summing to 1, got {shares}")
    out = {s.name: s.split for s in specs if s.split}
    free = sorted((s.name for s in specs if not s.split), key=_name_key)
    total = len(specs)
    for name in free:
        counts = {split: sum(1 for v in out.values() if v == split) for split in SPLITS}
        # The split furthest below its target share of the repositories assigned so far (+1).
        deficits = [(shares[i] * (len(out) + 1) - counts[split], -i) for i, split in enumerate(SPLITS)]
        out[name] = SPLITS[-max(deficits)[1]]
    assert len(out) == total
    return out

#!/usr/bin/env python3
"""Rewrite the module paths of ``curriculum/`` from before issue #33 to its sub-packages.

For a branch that was cut before the move: after ``git merge`` (git follows the renamed files), run
``python scripts/curriculum_paths.py`` to rewrite every old path left in the tracked text files —
``curriculum.spotcheck`` → ``curriculum.labelling.spotcheck``, ``curriculum/refresh.py`` →
``curriculum/frontier/refresh.py``, ``from curriculum import drift, solver_versions`` → one import
per package — then ``ruff check --select I --fix`` to re-sort the imports. ``--check`` only lists
the old paths still there (exit 1 when any). ``FILE...`` limits it to those files.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

#: old module of ``curriculum`` → the sub-package it moved to (issue #33)
MOVES = {
    "fsutil": "common", "tinymodels": "common", "pretrain_corpus": "common",
    "frontier_labels": "frontier", "staleness": "frontier", "drift": "frontier", "refresh": "frontier",
    "frontier_view": "frontier",
    "spotcheck": "labelling", "active_labelling": "labelling",
    "rewards": "reward", "novelty": "reward", "diversity": "reward",
    "first_probe": "probing", "coevolution": "probing", "retrain": "probing", "evaluation": "probing",
    "artifacts": "store", "solver_versions": "store",
    "bootstrap": "rl",
}
#: old module → new module, for the one that also changed its name
RENAMED = {"solvers.base": "common.solver_api"}
_SKIP_SUFFIXES = {".json", ".png", ".safetensors", ".jsonl", ".gz"}


def _new_path(old: str) -> str:
    return RENAMED.get(old) or f"{MOVES[old]}.{old}"


def _old_modules() -> list[str]:
    return sorted([*MOVES, *RENAMED], key=len, reverse=True)


def _split_from_import(match: re.Match[str]) -> str:
    indent, names = match.group(1), [n.strip() for n in match.group(2).split(",") if n.strip()]
    groups: dict[str, list[str]] = {}
    for name in names:
        pkg = MOVES.get(name.split(" as ")[0].strip())
        groups.setdefault(f"curriculum.{pkg}" if pkg else "curriculum", []).append(name)
    return "\n".join(f"{indent}from {mod} import {', '.join(sorted(ns))}" for mod, ns in sorted(groups.items()))


def rewrite(text: str) -> str:
    """``text`` with every old ``curriculum`` module path (dotted, as a file path, or in a
    ``from curriculum import …`` line) replaced by its new one."""
    for old in _old_modules():
        new = _new_path(old)
        text = re.sub(rf"\bcurriculum\.{re.escape(old)}\b(?!\.py)", f"curriculum.{new}", text)
        slashed_old, slashed_new = old.replace(".", "/"), new.replace(".", "/")
        text = re.sub(rf"\bcurriculum/{re.escape(slashed_old)}\.py\b", f"curriculum/{slashed_new}.py", text)
    return re.sub(r"(?m)^([ \t]*)from curriculum import ([^\n(]+)$", _split_from_import, text)


def _tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    return [Path(f) for f in out]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = [Path(a) for a in argv if a != "--check"] or _tracked_files()
    changed = []
    for path in files:
        if path.suffix in _SKIP_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            changed.append(str(path))
            if not check:
                path.write_text(new)
    verb = "old curriculum paths in" if check else "rewrote"
    print(f"{verb} {len(changed)} file(s)" + "".join(f"\n  {f}" for f in changed))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

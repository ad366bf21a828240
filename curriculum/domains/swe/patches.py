"""Unified diffs: reading which files a patch touches, static patch rules, ``git apply``, making
diffs from file contents (and so reverse patches).

Static rules (checked before anything runs): a patch must be non-empty, text only (no ``GIT binary
patch``/``Binary files``), must not delete files, must not touch test files (``tests``/``test``
directories, ``test_*.py``, ``*_test.py``, ``conftest.py``) and must touch only ``.py`` files.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

_HEADER = re.compile(r"^(---|\+\+\+) (?:[ab]/)?(\S+)", re.MULTILINE)
_GIT_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
TEST_DIR_NAMES = {"test", "tests", "testing"}
NO_NEWLINE = "\\ No newline at end of file\n"


@dataclass(frozen=True)
class FileChange:
    path: str
    kind: str  # "modify" | "add" | "delete"


def is_test_path(path: str) -> bool:
    """Whether a repository-relative path is part of the test suite (never to be edited)."""
    p = PurePosixPath(path)
    name = p.name
    if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py") or name == "tests.py":
        return True
    return any(part in TEST_DIR_NAMES for part in p.parts[:-1])


def changed_files(patch: str) -> list[FileChange]:
    """Files a unified diff touches, in order, with whether they are added/deleted/modified."""
    out: dict[str, FileChange] = {}
    lines = patch.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("--- ") or i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            continue
        old = _path_of(line[4:])
        new = _path_of(lines[i + 1][4:])
        if old is None and new is not None:
            out[new] = FileChange(new, "add")
        elif new is None and old is not None:
            out[old] = FileChange(old, "delete")
        elif new is not None:
            out[new] = FileChange(new, "modify")
    for match in _GIT_HEADER.finditer(patch):
        path = match.group(2)
        if path not in out:
            out[path] = FileChange(path, "modify")
    return list(out.values())


def _path_of(field: str) -> str | None:
    name = field.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def static_problem(patch: str) -> str | None:
    """Why ``patch`` is rejected before applying it, or ``None``."""
    if not patch.strip():
        return "empty patch"
    if "GIT binary patch" in patch or re.search(r"^Binary files .* differ$", patch, re.MULTILINE):
        return "patch adds or changes binary files"
    if re.search(r"^deleted file mode", patch, re.MULTILINE):
        return "patch deletes files"
    files = changed_files(patch)
    if not files:
        return "not a unified diff (no ---/+++ file headers)"
    for change in files:
        if change.kind == "delete":
            return f"patch deletes {change.path}"
        if ".." in PurePosixPath(change.path).parts or change.path.startswith("/"):
            return f"patch path {change.path!r} leaves the repository"
        if is_test_path(change.path):
            return f"patch edits test file {change.path}"
        if not change.path.endswith(".py"):
            return f"patch touches non-Python file {change.path}"
    if not any(line.startswith(("+", "-")) and not line.startswith(("+++", "---")) for line in patch.splitlines()):
        return "patch changes no lines"
    return None


def git_apply(root: Path, patch: str, reverse: bool = False, check_only: bool = False) -> str | None:
    """``git apply`` (``--recount``) ``patch`` inside ``root``; the error line, or ``None`` on success."""
    argv = ["git", "apply", "--recount", "--whitespace=nowarn"]
    if reverse:
        argv.append("-R")
    if check_only:
        argv.append("--check")
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)}  # never an enclosing repository
    done = subprocess.run([*argv, "-"], input=patch, cwd=root, capture_output=True, text=True, timeout=60, env=env)
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return (lines[0] if lines else f"git apply exited {done.returncode}")[:300]


def unified_diff(path: str, before: str, after: str) -> str:
    """A ``git apply``-able diff of one file (``a/``/``b/`` prefixes, no-newline markers)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=3)
    out = [f"diff --git a/{path} b/{path}\n"]  # also ends the previous hunk for ``--recount``
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(out) if len(out) > 1 else ""


def diff_trees(root_before: Path, root_after: Path, paths: list[str]) -> str:
    """The patch taking ``paths`` from ``root_before`` to ``root_after`` (missing file = empty)."""
    parts = []
    for path in paths:
        before = (root_before / path).read_text() if (root_before / path).is_file() else ""
        after = (root_after / path).read_text() if (root_after / path).is_file() else ""
        if before != after:
            parts.append(unified_diff(path, before, after))
    return "".join(parts)

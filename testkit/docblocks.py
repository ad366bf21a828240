"""Runnable blocks of the docs: a fenced block after ``<!-- run: NAME [role] -->`` is run by a test,
and a fenced block after ``<!-- output: NAME -->`` is what the run block before it must print.

Roles: none (run it and wait), ``env`` (the ``export`` lines set the environment of every later block;
other lines may only be ``source`` lines, the venv activation the test does itself) and ``serve`` (a
server: started in the background, stopped at the end). Expected output is matched line by line, in
order, each expected line against a later line of the output (surrounding blanks ignored), where
``…`` stands for any text; a line that is only ``…`` stands for lines left out (any line may be).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

_MARK = re.compile(r"<!--\s*(run|output):\s*([\w-]+)((?:\s+\w+)?)\s*-->\s*\n")
_FENCE = re.compile(r"```(\w*)\n(.*?)\n```", re.S)
ROLES = ("", "env", "serve")


class DocBlockError(ValueError):
    """A marker that does not introduce a block the way this module reads it (names file and line)."""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    role: str  # "" | "env" | "serve"
    lang: str  # "bash" | "python"
    text: str
    expected: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def blocks(path: Path, name: str) -> list[Block]:
    """The run blocks of ``name`` in ``path``, in order, each with the output block that follows it."""
    text = path.read_text(encoding="utf-8")
    out: list[Block] = []
    for mark in _MARK.finditer(text):
        if mark.group(2) != name:
            continue
        line = text.count("\n", 0, mark.start()) + 1
        fence = _FENCE.match(text, mark.end())
        if fence is None:
            raise DocBlockError(f"{path.name}:{line}: the marker must be followed by a fenced block on the next line")
        kind, role, lang, body = mark.group(1), mark.group(3).strip(), fence.group(1), fence.group(2)
        if kind == "output":
            if not out or out[-1].expected is not None:
                raise DocBlockError(f"{path.name}:{line}: an output block must follow a run block")
            prev = out[-1]
            out[-1] = Block(prev.path, prev.line, prev.role, prev.lang, prev.text, body)
            continue
        if role not in ROLES or lang not in ("bash", "python"):
            raise DocBlockError(f"{path.name}:{line}: role {role!r} / language {lang!r}: roles are {ROLES[1:]}, "
                                "languages bash and python")
        out.append(Block(path, line, role, lang, body))
    return out


def exports(block: Block) -> dict[str, str]:
    """The variables an ``env`` block exports (``export NAME=VALUE``, comments allowed)."""
    env: dict[str, str] = {}
    for raw in block.text.splitlines():
        words = shlex.split(raw, comments=True)
        if not words or words[0] == "source":
            continue
        if words[0] != "export" or len(words) != 2 or "=" not in words[1]:
            raise DocBlockError(f"{block.where}: an env block holds only `export NAME=VALUE` and `source` lines, "
                                f"not {raw!r}")
        key, value = words[1].split("=", 1)
        env[key] = value
    return env


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.strip().split("…")))


def missing_lines(expected: str, actual: str) -> list[str]:
    """The expected lines not found in ``actual`` in order (empty: it matches). After the first miss
    the rest are not looked for: they are listed as missing too."""
    got = [line.strip() for line in actual.splitlines()]
    want = [line for line in expected.splitlines() if line.strip() and line.strip() != "…"]
    at = 0
    for i, line in enumerate(want):
        pattern = _pattern(line)
        while at < len(got) and not pattern.fullmatch(got[at]):
            at += 1
        if at == len(got):
            return want[i:]
        at += 1
    return []

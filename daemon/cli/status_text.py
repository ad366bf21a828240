"""``propel status`` as plain lines for a pipe: every line fits 80 columns, names are never cut.

A terminal gets rich tables; a pipe (a log, ``grep``, a CI job) gets these lines, where a long
solver name wraps onto the next line instead of ending in ``…`` (issue #38).
"""

from __future__ import annotations

import textwrap
from typing import Any

WIDTH = 80


def wrap(line: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``line`` wrapped to ``width`` (continuations indented two more); a word longer than a line is
    split, never cut."""
    return textwrap.wrap(line, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent.rstrip()]


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _drift(r: dict[str, Any]) -> str:
    if r["drift_score"] is None:
        return "drift measuring, no score yet" if r["drift_state"] == "measuring" else "drift never measured"
    state = " (measuring)" if r["drift_state"] == "measuring" else ""
    return f"drift {r['drift_score']:.2f} over {r['drift_measured']} re-measured tasks{state}"


def version_lines(summary: dict[str, Any]) -> list[str]:
    """One block per (solver, version), newest first, the current version marked ``*``."""
    rows = summary.get("versions", [])
    if not rows:
        return []
    out = ["solver versions (* current)"]
    for r in rows:
        version = (r["version"] or "(unversioned)") + (" *" if r["current"] else "")
        age = "–" if r["age"] is None else str(r["age"])
        out += wrap(f"{r['solver']} {version} · age {age}", "  ")
        out += wrap(f"spot-check labels {r['spotcheck_labels']} (in band {_pct(r['spotcheck_in_band_rate'])}) · "
                    f"trainer labels {r['trainer_labels']} (in band {_pct(r['trainer_in_band_rate'])}) · "
                    f"{_drift(r)}", "    ")
    return out


def following_lines(info: dict[str, Any]) -> list[str]:
    """The followed solver names, then once per trainer name that is not followed, its notice."""
    out: list[str] = []
    if info.get("line"):
        out += wrap(info["line"])
    for item in info.get("not_followed", []):
        out += wrap(f"note: {item['notice']}")
    return out

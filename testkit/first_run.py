"""What :mod:`benchmarks.first_run` reads off ``make run``'s output: the stages and their clock (issue #38).

Kept apart from the benchmark so tests check it without importing a benchmark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: (stage, the regular expression of the output line that ends it), in order.
MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("install", re.compile(r"bin/propel run\b")),
    ("startup", re.compile(r"bootstrapping the tiny \w+ generator")),
    ("bootstrap", re.compile(r"generator .* valid \((?:trained in|reused)")),
    ("first_probe", re.compile(r"reward \S+ over \d+ probe")),
    ("first_emission", re.compile(r"cycle [\d,]+ │ .*emitted (?!0\b)[\d,]+")),
)
STAGES = ("clone", *(name for name, _ in MARKERS))
#: Issue #38: fresh clone → first frontier task, install included.
GOAL_S, STRETCH_S = 300.0, 180.0
VALIDITY = re.compile(r"· ([\d.]+)% valid")
PIP_INSTALLED = re.compile(r"^Successfully installed (.*)$")


@dataclass
class StageClock:
    """Cuts a stream of (seconds, line) into :data:`STAGES`; ``start`` is when ``make run`` began."""

    clone_s: float = 0.0
    ends: dict[str, float] = field(default_factory=dict)
    lines: list[tuple[float, str]] = field(default_factory=list)

    def feed(self, t: float, line: str) -> str | None:
        """Record ``line`` at ``t`` seconds after ``make run`` started; returns the stage it ends, if any."""
        self.lines.append((round(t, 2), line))
        pending = [(name, rx) for name, rx in MARKERS if name not in self.ends]
        if pending and pending[0][1].search(line):
            self.ends[pending[0][0]] = t
            return pending[0][0]
        return None

    @property
    def done(self) -> bool:
        return "first_emission" in self.ends

    def stage_seconds(self) -> dict[str, float | None]:
        """Seconds per stage (``None`` for a stage not reached)."""
        out: dict[str, float | None] = {"clone": round(self.clone_s, 2)}
        prev = 0.0
        for name, _ in MARKERS:
            end = self.ends.get(name)
            out[name] = None if end is None else round(end - prev, 2)
            prev = end if end is not None else prev
        return out

    def total_s(self) -> float | None:
        end = self.ends.get("first_emission")
        return None if end is None else round(self.clone_s + end, 2)

    def bootstrap_validity(self) -> float | None:
        for _, line in self.lines:
            m = VALIDITY.search(line)
            if m:
                return float(m.group(1)) / 100
        return None

    def packages_installed(self) -> int | None:
        for _, line in self.lines:
            m = PIP_INSTALLED.match(line.strip())
            if m and "propel-curriculum" in m.group(1):
                return len(m.group(1).split())
        return None


def make_run_command(reuse_venv: Path | None) -> list[str]:
    if reuse_venv is None:
        return ["make", "run"]
    return ["make", "run", f"VENV={reuse_venv}", "RUN_STAMP="]  # no install step: the venv is taken as is

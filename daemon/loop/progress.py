"""Live output of ``propel run``: one line per phase, a summary row per cycle.

On a terminal it prints with rich (colours). Otherwise — a log file, docker, systemd — and in JSON
mode (``--log-format json``) every line goes to the ``propel.run`` logger (timestamped text, or one
JSON object with the values as fields), one row per line, never wrapped. Counts print with
thousands separators. Alerts are not printed here: the alert manager's log sink prints each fire
and resolve once.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict

from rich.console import Console

from daemon.loop.driver import CycleReport
from daemon.ops.logs import strip_markup

log = logging.getLogger("propel.run")

SUMMARY = (("rl_reward_mean", "RL reward", "{:+.2f}"), ("validity", "valid", "{:.0%}"),
           ("novel_share", "new", "{:.0%}"), ("predicted_utility", "pred. util", "{:.0%}"),
           ("verified_utility", "verified util", "{:.0%}"), ("spotcheck_utility", "spot util", "{:.0%}"),
           ("false_positives", "FPs", "{:,.0f}"), ("retrained", "aux+", "{:,.0f}"), ("emitted", "emitted", "{:,.0f}"),
           ("replayed", "replayed", "{:,.0f}"), ("queue_ready", "queue", "{:,.0f}"))


def fmt_value(value: float) -> str:
    """A metric value for a log line: whole numbers with thousands separators, else 3 significant digits."""
    if math.isfinite(value) and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.3g}"


def idle_reason(vals: dict[str, float]) -> str | None:
    """Why a cycle emitted nothing, in a few words (None: it emitted, or no reason the emit phase knows), or
    how many of its tasks a stalled emission served below the bar (daemon.loop.follow)."""
    if vals.get("emitted_below_bar"):
        return f"{vals['emitted_below_bar']:,.0f} below the bar: emission stalled"
    if vals.get("emitted", 1) > 0:
        return None
    if vals.get("backpressure"):
        return "queue at emission.high_water_mark: trainers lease slower than it fills"
    if vals.get("emission_paused"):
        return "paused by an escalation"
    return None


class Progress:
    def __init__(self, console: Console | None = None, json_mode: bool = False) -> None:
        """``json_mode`` (or no terminal): lines go to the ``propel.run`` logger instead of the console."""
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.to_log = json_mode or (console is None and not self.console.is_terminal)
        self.values: dict[int, dict[str, float]] = defaultdict(dict)

    def say(self, text: str) -> None:
        self._out(text)

    def _out(self, text: str, fields: dict[str, object] | None = None) -> None:
        if self.to_log:
            log.info(strip_markup(text), extra={"fields": fields} if fields else None)
        else:
            self.console.print(text, soft_wrap=True)

    def __call__(self, report: CycleReport) -> None:
        vals = self.values[report.cycle]
        vals.update({("rl_" + k if report.phase == "rl" else k): v for k, v in report.values.items()})
        brief = ", ".join(f"{k}={fmt_value(v)}" for k, v in list(report.values.items())[:4])
        self._out(f"[dim]cycle {report.cycle:,} {report.phase:<9} {report.seconds:6.2f}s  {brief}[/dim]",
                  {"cycle": report.cycle, "phase": report.phase, "seconds": report.seconds,
                   "values": dict(report.values)})
        if report.phase == "emit":
            cells = [f"{label} {fmt.format(vals[key])}" for key, label, fmt in SUMMARY if key in vals]
            if vals.get("verified_labels") == 0 and "predicted_utility" in vals:  # the probes' word alone
                cells = [c + " (unverified)" if c.startswith("pred. util") else c for c in cells]
            why = idle_reason(vals)
            cells = [c + f" ({why})" if why and c.startswith("emitted") else c for c in cells]
            self._out(f"[bold]cycle {report.cycle:,}[/bold] │ " + " │ ".join(cells),
                      {"cycle": report.cycle, "summary": {k: vals[k] for k, _, _ in SUMMARY if k in vals}})
            self.values.pop(report.cycle, None)

"""Live terminal progress of ``propel run``: one line per phase, a summary row per cycle."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console

from daemon.loop.driver import CycleReport

SUMMARY = (("rl_reward_mean", "RL reward", "{:+.2f}"), ("validity", "valid", "{:.0%}"),
           ("predicted_utility", "pred. util", "{:.0%}"), ("spotcheck_utility", "spot util", "{:.0%}"),
           ("false_positives", "FPs", "{:.0f}"), ("retrained", "aux+", "{:.0f}"), ("emitted", "emitted", "{:.0f}"),
           ("queue_ready", "queue", "{:.0f}"))


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.values: dict[int, dict[str, float]] = defaultdict(dict)

    def say(self, text: str) -> None:
        self.console.print(text)

    def __call__(self, report: CycleReport) -> None:
        vals = self.values[report.cycle]
        vals.update({("rl_" + k if report.phase == "rl" else k): v for k, v in report.values.items()})
        brief = ", ".join(f"{k}={v:.3g}" for k, v in list(report.values.items())[:4])
        self.console.print(f"[dim]cycle {report.cycle} {report.phase:<9} {report.seconds:6.2f}s  {brief}[/dim]")
        if report.phase == "emit":
            cells = [f"{label} {fmt.format(vals[key])}" for key, label, fmt in SUMMARY if key in vals]
            self.console.print(f"[bold]cycle {report.cycle}[/bold] │ " + " │ ".join(cells))
            self.values.pop(report.cycle, None)

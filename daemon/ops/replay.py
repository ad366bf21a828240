"""Replay candidate alert rules on a run's stored metric history, next to the alerts that did fire.

``propel alerts replay --rules FILE`` runs the same pure evaluator as the daemon
(:func:`daemon.ops.alerts.evaluation.evaluate`) over every stored cycle, starting with no open alert, so for the
rules the daemon ran it reproduces the ``alerts`` table exactly; for new thresholds it shows what
would have fired and when. Output: a ``rich`` table and an optional PNG timeline (metric lines,
thresholds, shaded firing intervals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from sqlalchemy import select

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import AlertRow, Run
from daemon.ops.alerts.evaluation import AlertEvent, evaluate
from daemon.ops.alerts.rules import AlertRule


class UnknownRunError(LookupError):
    """The named run is not in the store; ``known`` lists the runs that are."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name, self.known = name, list(known)
        hint = f"known runs: {', '.join(self.known)}" if self.known else "the store has no runs yet"
        super().__init__(f"no run named {name!r} in the store ({hint})")


@dataclass(frozen=True)
class AlertInterval:
    """One alert's lifetime: fired at ``cycle_fired``, resolved at ``cycle_resolved`` (``None``: open)."""

    rule: str
    metric: str
    severity: str
    threshold: float
    value: float
    cycle_fired: int
    cycle_resolved: int | None
    mitigation: str | None

    @property
    def key(self) -> tuple[str, int, int | None]:
        return (self.rule, self.cycle_fired, self.cycle_resolved)


@dataclass(frozen=True)
class ReplayResult:
    run_name: str
    run_id: int
    rules: tuple[AlertRule, ...]
    history: dict[int, dict[str, float]]
    events: list[AlertEvent]
    replayed: list[AlertInterval]
    stored: list[AlertInterval]

    def matches_stored(self) -> dict[str, bool]:
        """Per candidate rule: do the replayed intervals equal the stored ones of that rule name?"""
        return {r.name: sorted(i.key for i in self.replayed if i.rule == r.name)
                == sorted(i.key for i in self.stored if i.rule == r.name) for r in self.rules}


def find_run(store: Store, name: str) -> int:
    with store.session() as sess:
        run_id = sess.scalars(select(Run.id).where(Run.name == name)).first()
        if run_id is None:
            raise UnknownRunError(name, list(sess.scalars(select(Run.name).order_by(Run.name))))
    return int(run_id)


def load_history(store: Store, run_id: int, names: Sequence[str] | None = None) -> dict[int, dict[str, float]]:
    """cycle → {metric: value} of a run (all metrics, or only ``names``)."""
    history: dict[int, dict[str, float]] = {}
    with store.session() as sess:
        for p in repo.metric_history(sess, run_id, names):
            history.setdefault(p.cycle, {})[p.name] = p.value
    return history


def stored_intervals(store: Store, run_id: int) -> list[AlertInterval]:
    """The alerts the daemon fired for this run, from the ``alerts`` table."""
    with store.session() as sess:
        rows = sess.scalars(select(AlertRow).where(AlertRow.run_id == run_id)
                            .order_by(AlertRow.cycle_fired, AlertRow.id)).all()
        return [AlertInterval(r.rule, r.metric, r.severity, r.threshold, r.value, r.cycle_fired, r.cycle_resolved,
                              r.mitigation) for r in rows]


def intervals_from_events(events: Sequence[AlertEvent]) -> list[AlertInterval]:
    """Pair each fire with the resolve that follows it (or leave it open)."""
    out: list[AlertInterval] = []
    open_: dict[str, int] = {}
    for e in events:
        if e.kind == "fire" and e.spec is not None and e.value is not None:
            open_[e.rule] = len(out)
            out.append(AlertInterval(e.rule, e.spec.metric, e.spec.severity.value, e.spec.threshold, e.value,
                                     e.cycle, None, e.mitigation.kind.value if e.mitigation else None))
        elif e.kind == "resolve" and e.rule in open_:
            i = open_.pop(e.rule)
            old = out[i]
            out[i] = AlertInterval(old.rule, old.metric, old.severity, old.threshold, old.value, old.cycle_fired,
                                   e.cycle, old.mitigation)
    return out


def replay(store: Store, run_name: str, rules: Sequence[AlertRule]) -> ReplayResult:
    """Evaluate ``rules`` over the whole stored history of ``run_name``."""
    run_id = find_run(store, run_name)
    history = load_history(store, run_id)
    events = evaluate(rules, history, {})
    return ReplayResult(run_name, run_id, tuple(rules), history, events, intervals_from_events(events),
                        stored_intervals(store, run_id))


def _spans(intervals: Sequence[AlertInterval]) -> str:
    return ", ".join(f"{i.cycle_fired}→{'open' if i.cycle_resolved is None else i.cycle_resolved}"
                     for i in intervals) or "—"


def render_table(result: ReplayResult) -> Table:
    """Per rule: its condition, when it would fire (replay) and when it did fire (alerts table)."""
    cycles = sorted(result.history)
    span = f"cycles {cycles[0]}–{cycles[-1]}" if cycles else "no metrics stored"
    table = Table(title=f"alert replay — run {result.run_name} ({span})")
    for col in ("rule", "severity", "condition", "would fire (replay)", "did fire (stored)", "same"):
        table.add_column(col, overflow="fold")
    same = result.matches_stored()
    for rule in result.rules:
        replayed = [i for i in result.replayed if i.rule == rule.name]
        stored = [i for i in result.stored if i.rule == rule.name]
        mark = "[green]yes[/green]" if same[rule.name] else "[yellow]no[/yellow]"
        table.add_row(rule.name, rule.severity.value, rule.expression, _spans(replayed), _spans(stored), mark)
    for name in sorted({i.rule for i in result.stored} - {r.name for r in result.rules}):
        stored = [i for i in result.stored if i.rule == name]
        table.add_row(name, stored[0].severity, f"(not in rules file) {stored[0].metric}", "—", _spans(stored), "—")
    return table


def replay_json(result: ReplayResult) -> dict[str, Any]:
    return {"run": result.run_name, "cycles": sorted(result.history),
            "replayed": [i.__dict__ for i in result.replayed], "stored": [i.__dict__ for i in result.stored],
            "matches_stored": result.matches_stored()}


def plot_metric(ax: Any, history: dict[int, dict[str, float]], metric: str, rules: Sequence[AlertRule],
                replayed: Sequence[AlertInterval], stored: Sequence[AlertInterval]) -> None:
    """One metric over cycles with rule thresholds, replayed (shaded) and stored (top band) alerts."""
    cycles = [c for c in sorted(history) if metric in history[c]]
    ax.plot(cycles, [history[c][metric] for c in cycles], color="black", lw=1.2, label=metric,
            marker="." if len(cycles) <= 100 else None, ms=3)
    last = max(history) if history else 0
    colors = ["tab:red", "tab:orange", "tab:purple", "tab:blue", "tab:green", "tab:brown"]
    for k, rule in enumerate(r for r in rules if r.metric == metric):
        color = colors[k % len(colors)]
        ax.axhline(rule.threshold, color=color, ls="--", lw=1, label=f"{rule.name} {rule.comparator.value} "
                   f"{rule.threshold:g}")
        for i in (i for i in replayed if i.rule == rule.name):
            end = last + 0.5 if i.cycle_resolved is None else i.cycle_resolved
            ax.axvspan(i.cycle_fired, end, color=color, alpha=0.18, lw=0)
    for i in (i for i in stored if i.metric == metric):
        end = last + 0.5 if i.cycle_resolved is None else i.cycle_resolved
        ax.axvspan(i.cycle_fired, end, ymin=0.92, ymax=1.0, color="tab:gray", alpha=0.8, lw=0)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=7, framealpha=0.7)


def render_png(result: ReplayResult, path: Path) -> Path:
    """A timeline PNG: one panel per metric the candidate rules (or stored alerts) watch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(dict.fromkeys([r.metric for r in result.rules] + [i.metric for i in result.stored]))
    fig, axes = plt.subplots(max(len(metrics), 1), 1, figsize=(10, 2.2 * max(len(metrics), 1) + 0.6),
                             sharex=True, squeeze=False)
    for ax, metric in zip(axes[:, 0], metrics, strict=False):
        plot_metric(ax, result.history, metric, result.rules, result.replayed, result.stored)
    axes[-1, 0].set_xlabel("cycle")
    fig.suptitle(f"alert replay — run {result.run_name}: shaded = would fire (replay), "
                 "grey band = did fire (stored)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

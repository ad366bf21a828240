"""The dashboard's top panel: what the daemon is doing now, and whether it is degraded.

Phase, cycle, heartbeat age against the liveness limit, the leader, the solver budget used this
hour and a banner per degraded reason (see :mod:`daemon.loop.health`). Read from the same
``daemon_status`` as ``/v1/status``, so the page and the API never disagree.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from curriculum.store.db import Store
from daemon.config import mask_secrets
from daemon.http.run_status import daemon_status, live_problems


@dataclass
class StatusPanel:
    phase: str | None = None
    cycle: int = 0
    heartbeat_age_s: float | None = None
    stale_s: float = 30.0
    leader: str | None = None
    budget_used: float | None = None  # share of the hourly budget (last spot-check phase)
    budget_per_hour: int | None = None
    pace: str | None = None  # the spot-check pace line (daemon.loop.pacing.describe)
    utility: str | None = None  # predicted vs verified utility (daemon.loop.utility.describe)
    problems: list[str] = field(default_factory=list)
    degraded: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def collect_status(store: Store, run_name: str, stale_s: float, budget_per_hour: int | None,
                   history: dict[int, dict[str, float]]) -> StatusPanel:
    try:
        info = daemon_status(store, run_name, frontier=False)  # the page has its own frontier section
    except Exception as err:  # the page still renders, saying so
        return StatusPanel(error="store unreachable: " + mask_secrets(str(err).splitlines()[0][:200] if str(err)
                                                                      else repr(err)))
    used = next((history[c]["solver_budget_used"] for c in sorted(history, reverse=True)
                 if "solver_budget_used" in history[c]), None)
    return StatusPanel(phase=info["phase"], cycle=int(info["cycle"]), heartbeat_age_s=info["heartbeat_age_s"],
                       stale_s=stale_s, leader=info["leader"], budget_used=used, budget_per_hour=budget_per_hour,
                       pace=(info.get("spotcheck_pace") or {}).get("line"),
                       utility=(info.get("utility") or {}).get("line"),
                       problems=live_problems(info, datetime.now(UTC), stale_s),
                       degraded=list(info.get("degraded", [])))


def status_json(panel: StatusPanel) -> dict[str, Any]:
    return {"phase": panel.phase, "cycle": panel.cycle, "heartbeat_age_s": panel.heartbeat_age_s,
            "heartbeat_stale_s": panel.stale_s, "leader": panel.leader, "solver_budget_used": panel.budget_used,
            "budget_per_hour": panel.budget_per_hour, "spotcheck_pace": panel.pace, "utility": panel.utility,
            "live": not panel.problems and panel.error is None, "problems": panel.problems,
            "degraded": panel.degraded, "error": panel.error}


def _cell(key: str, label: str, value: str, cls: str = "") -> str:
    return (f'<div class="stat {cls}" data-stat="{key}"><span class="label">{html.escape(label)}</span>'
            f'<span class="value">{html.escape(value)}</span></div>')


def render_status(panel: StatusPanel) -> str:
    """The status strip and one banner per degraded reason (or liveness problem)."""
    esc = html.escape
    if panel.error is not None:
        return f'<section id="status"><div class="banner down" data-banner="store">{esc(panel.error)}</div></section>'
    age = "never" if panel.heartbeat_age_s is None else f"{panel.heartbeat_age_s:,.1f} s ago"
    budget = "–" if panel.budget_used is None else f"{panel.budget_used:.0%}"
    if panel.budget_per_hour is not None:
        budget += f" of {panel.budget_per_hour:,} tasks/hour"
    cells = [_cell("phase", "phase", panel.phase or "–"), _cell("cycle", "cycle", f"{panel.cycle:,}"),
             _cell("heartbeat", "heartbeat", f"{age} (limit {panel.stale_s:g} s)", "bad" if panel.problems else "ok"),
             _cell("leader", "leader", panel.leader or "none", "" if panel.leader else "bad"),
             _cell("budget", "solver budget used", budget)]
    if panel.pace is not None:
        cells.append(_cell("pace", "spot-check pace", panel.pace))
    if panel.utility is not None:
        cells.append(_cell("utility", "utility", panel.utility, "bad" if "unverified" in panel.utility else ""))
    banners = [f'<div class="banner down" data-banner="not-live">not live: {esc(p)}</div>' for p in panel.problems]
    for d in panel.degraded:
        since = f" (since {d.get('since')})" if d.get("since") else ""
        banners.append(f'<div class="banner degraded" data-banner="{esc(str(d["reason"]))}"><b>degraded: '
                       f'{esc(str(d["reason"]))}</b> — {esc(str(d.get("detail", "")))}{esc(since)}</div>')
    if not banners:
        banners.append('<div class="banner fine" data-banner="ok">live, not degraded</div>')
    return ('<section id="status"><div class="stats">' + "".join(cells) + "</div>" + "".join(banners)
            + "</section>")


STATUS_CSS = """.stats{display:flex;flex-wrap:wrap;gap:.6em;margin:.4em 0}.stat{border:1px solid #ccc;
border-radius:4px;padding:.3em .7em}.stat .label{display:block;font-size:.75em;color:#666}.stat .value{font-weight:600}
.stat.bad .value{color:#b00}.banner{padding:.45em .8em;margin:.3em 0;border-radius:4px}
.banner.degraded{background:#fff3cd;border:1px solid #e0b000}.banner.down{background:#f8d7da;border:1px solid #c00}
.banner.fine{background:#e8f5e9;border:1px solid #7a7}"""

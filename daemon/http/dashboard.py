"""The operator dashboard: ``GET /dashboard`` (one HTML page) and ``GET /dashboard/data.json``.

Everything is rendered on the server — plots are matplotlib figures inlined as SVG (text kept as
text), no JavaScript, no CDN — because the service often runs where nothing outside is reachable.
The page refreshes itself every 30 s.

The router reads ``request.app.state.store`` (a :class:`~curriculum.store.db.Store`),
``request.app.state.run_name`` and, optionally, ``request.app.state.alert_rules`` (the configured
rules, drawn as thresholds; default :data:`~daemon.ops.alerts.rules.DEFAULT_RULES`). Handlers are plain
``def`` so FastAPI runs the database reads and plotting in its thread pool, off the event loop;
figures use matplotlib's object API (no pyplot global state), which is safe across threads.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from matplotlib import rc_context
from matplotlib.dates import date2num
from matplotlib.figure import Figure
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from curriculum.frontier.frontier_view import frontier_summary
from curriculum.store.db import Store, StoreError
from curriculum.store.models import Label, ProbeRow, QueueItem, TaskRow
from daemon.config import mask_secrets, mask_url
from daemon.http import frontier_panel
from daemon.http.dashboard_status import STATUS_CSS, StatusPanel, collect_status, render_status, status_json
from daemon.ops.alerts.rules import DEFAULT_RULES, AlertRule
from daemon.ops.metrics import QUEUE_STATES
from daemon.ops.replay import AlertInterval, UnknownRunError, find_run, load_history, plot_metric, stored_intervals

router = APIRouter(tags=["dashboard"])

PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("collapse", "Collapse metrics", ("top_topic_share", "distinct3", "self_bleu3", "rl_diversity_penalty",
                                          "rl_topic_share_penalty")),
    ("generator", "Generator", ("validity", "novel_share", "reward_mean", "reward_var")),
    ("probes", "Probe quality and spot-checks",
     ("probe_precision", "false_positive_rate", "spotcheck_utility", "solver_budget_used")),
    ("utility", "Predicted vs verified utility", ("predicted_utility", "verified_utility", "topic_js")),
    ("throughput", "Throughput", ("emitted", "solver_trials", "queue_ready")),
)
#: metric → (y-axis unit, what one point is). Levels and per-cycle values are not cumulative; the
#: solver-trial count is a rolling one-hour window (it falls as old trials age out).
UNITS: dict[str, tuple[str, str]] = {
    "top_topic_share": ("share of valid tasks (0–1)", "per cycle"),
    "distinct3": ("unique / total 3-grams (0–1)", "per cycle"),
    "self_bleu3": ("Self-BLEU-3 (0–1)", "per cycle"),
    "rl_diversity_penalty": ("reward's repetition penalty (0–1)", "mean of the RL chunk"),
    "rl_topic_share_penalty": ("reward's topic-share penalty (0–1)", "mean of the RL chunk"),
    "validity": ("share of samples (0–1)", "per cycle"),
    "novel_share": ("valid samples new to the store (0–1)", "per cycle"),
    "reward_mean": ("reward (probe logit)", "per cycle"),
    "reward_var": ("reward variance (RVP)", "per cycle"),
    "probe_precision": ("share of probe-high (0–1)", "per cycle"),
    "false_positive_rate": ("share of probe-high (0–1)", "per cycle"),
    "spotcheck_utility": ("share in band (0–1)", "per cycle"),
    "solver_budget_used": ("share of hourly budget", "rolling 1 h"),
    "predicted_utility": ("mean probe score (0–1)", "per cycle"),
    "verified_utility": ("share in band (0–1)", "labels of probe-high tasks, last emission.verified_window_cycles"),
    "topic_js": ("JS divergence from cycle 0's topics (bits)", "per cycle"),
    "emitted": ("tasks", "per cycle, not cumulative"),
    "solver_trials": ("solver attempts", "rolling 1 h, not cumulative"),
    "queue_ready": ("ready tasks", "level after the cycle"),
}
#: What an empty panel says when "no data yet" would mislead (the metric exists only when switched on).
EMPTY: dict[str, str] = {
    "rl_diversity_penalty": "rl_diversity_penalty: no data\n(recorded when rl.diversity_weight > 0)",
    "rl_topic_share_penalty": "rl_topic_share_penalty: no data\n(recorded when rl.topic_share_weight > 0)",
    "verified_utility": "verified_utility: unverified\n(no label of a probe-high task in the window)"}
RECENT_PROBE_CHANGES = 10
_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)
_SEVERITY_COLOURS = {"critical": "tab:red", "warning": "tab:orange", "info": "tab:blue"}


@dataclass
class DashboardData:
    """Everything the page shows for one run."""

    run_name: str
    store_url: str
    run_id: int | None = None
    history: dict[int, dict[str, float]] = field(default_factory=dict)
    alerts: list[AlertInterval] = field(default_factory=list)
    queue: dict[str, int] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)
    spotcheck: list[dict[str, int]] = field(default_factory=list)
    frontier: dict[str, Any] = field(default_factory=dict)  # per solver version: labels, drift, champion
    status: StatusPanel = field(default_factory=StatusPanel)

    @property
    def last_cycle(self) -> int | None:
        return max(self.history) if self.history else None


def collect(store: Store, run_name: str, stale_s: float = 30.0, budget_per_hour: int | None = None) -> DashboardData:
    """Read the dashboard's data for ``run_name`` (an unknown run gives an empty page, not an error)."""
    data = DashboardData(run_name=run_name, store_url=mask_url(store.url))
    data.status = collect_status(store, run_name, stale_s, budget_per_hour, {})
    try:
        data.run_id = find_run(store, run_name)
    except UnknownRunError:
        return data
    data.history = load_history(store, data.run_id)
    data.alerts = stored_intervals(store, data.run_id)
    with store.session() as sess:
        rows = sess.execute(select(QueueItem.state, func.count()).where(QueueItem.run_id == data.run_id)
                            .group_by(QueueItem.state))
        data.queue = {state: 0 for state in QUEUE_STATES} | {str(s): int(n) for s, n in rows}
        data.probes = [_probe_dict(p) for p in sess.scalars(select(ProbeRow).where(ProbeRow.run_id == data.run_id)
                                                            .order_by(ProbeRow.created_at))]
        data.spotcheck = _spotcheck_by_cycle(sess, data.run_id)
        data.frontier = frontier_summary(sess, data.run_id)
    data.status = collect_status(store, run_name, stale_s, budget_per_hour, data.history)
    return data


def _probe_dict(p: ProbeRow) -> dict[str, Any]:
    metrics = p.meta.get("metrics", {}) if isinstance(p.meta, dict) else {}
    shown = {k: metrics[k] for k in ("balanced_accuracy", "f1", "ece", "auc", "rvp") if k in metrics}
    return {"id": p.id, "name": p.name, "role": p.role, "active": p.active,
            "created_at": p.created_at.isoformat(timespec="seconds"), "metrics": shown}


def _spotcheck_by_cycle(sess: Any, run_id: int) -> list[dict[str, int]]:
    q = (select(TaskRow.cycle, Label.in_band, func.count()).join(TaskRow, Label.task_id == TaskRow.id)
         .where(Label.run_id == run_id, Label.source == "spotcheck", TaskRow.cycle.is_not(None))
         .group_by(TaskRow.cycle, Label.in_band))
    by_cycle: dict[int, dict[str, int]] = {}
    for cycle, in_band, n in sess.execute(q):
        row = by_cycle.setdefault(int(cycle), {"cycle": int(cycle), "in_band": 0, "out_of_band": 0,
                                               "undetermined": 0})
        row["in_band" if in_band else "undetermined" if in_band is None else "out_of_band"] += int(n)
    return [by_cycle[c] for c in sorted(by_cycle)]


def data_json(data: DashboardData) -> dict[str, Any]:
    names = sorted({n for values in data.history.values() for n in values})
    return {
        "run": data.run_name, "run_found": data.run_id is not None, "store": data.store_url,
        "last_cycle": data.last_cycle, "cycles": sorted(data.history),
        "metrics": {n: [[c, v[n]] for c, v in sorted(data.history.items()) if n in v] for n in names},
        "alerts": [asdict(a) for a in data.alerts], "queue": data.queue, "probes": data.probes,
        "spotcheck": data.spotcheck, "frontier": data.frontier, "status": status_json(data.status),
    }


# -------------------------------------------------------------------------------------------- plots
def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return _METADATA.sub("", text[text.index("<svg"):])


def _empty(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def metrics_svg(data: DashboardData, names: Sequence[str], rules: Sequence[AlertRule]) -> str:
    """One small panel per metric over cycles, with rule thresholds and the stored alerts shaded."""
    fig = Figure(layout="constrained", figsize=(4.2 * len(names), 2.8))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        if any(name in v for v in data.history.values()):
            plot_metric(ax, data.history, name, rules, data.alerts, data.alerts)
            unit, kind = UNITS.get(name, ("value", "per cycle"))
            ax.set_title(f"{name} ({kind})", fontsize=10)
            ax.set_ylabel(unit, fontsize=8)
            ax.set_xlabel("cycle")
        else:
            _empty(ax, EMPTY.get(name, f"{name}: no data yet"))
    return _svg(fig)


def alert_timeline_svg(data: DashboardData) -> str:
    """One row per rule: bars from firing to resolving (open alerts run to the last cycle)."""
    rules = list(dict.fromkeys(a.rule for a in data.alerts))
    fig = Figure(layout="constrained", figsize=(12, 0.5 * max(len(rules), 2) + 1.0))
    ax = fig.subplots()
    if not rules:
        _empty(ax, "no alert has fired")
        return _svg(fig)
    end = (data.last_cycle or 0) + 1
    for row, rule in enumerate(rules):
        spans = [(a.cycle_fired, (a.cycle_resolved if a.cycle_resolved is not None else end) - a.cycle_fired)
                 for a in data.alerts if a.rule == rule]
        severity = next(a.severity for a in data.alerts if a.rule == rule)
        ax.broken_barh(spans, (row - 0.35, 0.7), color=_SEVERITY_COLOURS.get(severity, "tab:gray"), alpha=0.8)
    ax.set_yticks(range(len(rules)), rules)
    ax.set_xlim(left=min(data.history, default=0) - 0.5, right=end + 0.5)
    ax.set_xlabel("cycle")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("alert timeline (red critical, orange warning, blue info)", fontsize=10)
    return _svg(fig)


def queue_svg(data: DashboardData) -> str:
    fig = Figure(layout="constrained", figsize=(12, 2.8))
    left, right = fig.subplots(1, 2, width_ratios=(2, 1))
    cycles = [c for c in sorted(data.history) if "queue_ready" in data.history[c]]
    if cycles:
        left.plot(cycles, [data.history[c]["queue_ready"] for c in cycles], color="tab:blue", marker=".")
        left.set_xlabel("cycle")
        left.set_title("queue_ready (level after each cycle, not cumulative)", fontsize=10)
        left.set_ylabel("ready tasks", fontsize=8)
        left.grid(alpha=0.3)
    else:
        _empty(left, "queue_ready: no data yet")
    right.bar(list(data.queue) or list(QUEUE_STATES), [data.queue.get(s, 0) for s in data.queue or QUEUE_STATES],
              color=["tab:green", "tab:blue", "tab:gray", "tab:red"])
    right.set_title("queue depth by state (now)", fontsize=10)
    right.set_ylabel("tasks", fontsize=8)
    return _svg(fig)


def probes_svg(data: DashboardData) -> str:
    fig = Figure(layout="constrained", figsize=(12, 2.4))
    ax = fig.subplots()
    if not data.probes:
        _empty(ax, "no probe registered")
        return _svg(fig)
    roles = ["primary", "aux"]
    for p in data.probes:
        at = float(date2num(datetime.fromisoformat(p["created_at"])))
        y = roles.index(p["role"]) if p["role"] in roles else 2
        ax.scatter([at], [y], marker="*" if p["active"] else "o", s=160 if p["active"] else 50,
                   color="tab:green" if p["active"] else "tab:gray", zorder=3)
        ax.annotate(p["name"], (at, y), textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax.set_yticks(range(len(roles)), roles)
    ax.set_ylim(-0.6, len(roles) - 0.4)
    ax.set_title("probe versions (star = active)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.xaxis_date()
    fig.autofmt_xdate()
    return _svg(fig)


def spotcheck_svg(data: DashboardData) -> str:
    fig = Figure(layout="constrained", figsize=(12, 2.8))
    ax = fig.subplots()
    if not data.spotcheck:
        _empty(ax, "no spot-check label yet")
        return _svg(fig)
    cycles = [r["cycle"] for r in data.spotcheck]
    series = (("in_band", "tab:green"), ("out_of_band", "tab:red"), ("undetermined", "tab:gray"))
    if len(cycles) > 60:  # one bar patch per cycle and series gets slow to draw: stack areas instead
        ax.stackplot(cycles, *[[r[k] for r in data.spotcheck] for k, _ in series], colors=[c for _, c in series],
                     labels=[k.replace("_", " ") for k, _ in series], step="mid")
    else:
        bottom = [0] * len(cycles)
        for key, colour in series:
            values = [r[key] for r in data.spotcheck]
            ax.bar(cycles, values, bottom=bottom, color=colour, label=key.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xlabel("cycle")
    ax.set_ylabel("labelled tasks")
    ax.legend(fontsize=8)
    ax.set_title("spot-check outcomes per cycle (labels in band / out of band)", fontsize=10)
    return _svg(fig)


# --------------------------------------------------------------------------------------------- html
_CSS = """body{font-family:system-ui,sans-serif;margin:1.2em;color:#222}h1{margin:0 0 .2em}
.meta{color:#555;margin-bottom:1em}section{margin:1.4em 0}figure{margin:0;overflow-x:auto}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
figure svg{max-width:100%;height:auto}
th{background:#f3f3f3}.critical{color:#b00;font-weight:600}.warning{color:#b60}.open{font-weight:600}"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], row_class: str, empty: str,
           attrs: Sequence[str] | None = None) -> str:
    if not rows:
        return f'<p class="empty">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        f'<tr class="{row_class}"{(" " + attrs[i]) if attrs else ""}>'
        + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
        for i, row in enumerate(rows))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _alerts_table(alerts: Sequence[AlertInterval], limit: int = 200) -> str:
    """Open alerts first, then the most recent; at most ``limit`` rows (data.json has them all)."""
    ordered = sorted(alerts, key=lambda a: (a.cycle_resolved is not None, -a.cycle_fired))[:limit]
    rows = [(a.rule, a.severity, a.metric, f"{a.value:.4g}", f"{a.threshold:g}", a.cycle_fired,
             "open" if a.cycle_resolved is None else a.cycle_resolved, a.mitigation or "") for a in ordered]
    attrs = [f'data-rule="{html.escape(a.rule)}" data-severity="{html.escape(a.severity)}"' for a in ordered]
    return _table(("rule", "severity", "metric", "value", "threshold", "fired at cycle", "resolved at cycle",
                   "mitigation"), rows, "alert-row", "no alert has fired", attrs)


def _probe_tables(data: DashboardData) -> str:
    """The active probes, then the last few registrations (not one row per cycle forever)."""
    def row(p: dict[str, Any]) -> tuple[Any, ...]:
        return (p["name"], p["role"], "yes" if p["active"] else "", p["created_at"],
                ", ".join(f"{k}={v:.3g}" for k, v in p["metrics"].items()))

    headers = ("probe", "role", "active", "created", "metrics")
    active = [row(p) for p in data.probes if p["active"]]
    recent = [row(p) for p in sorted(data.probes, key=lambda p: (p["created_at"], p["id"]),
                                     reverse=True)[:RECENT_PROBE_CHANGES]]
    older = max(0, len(data.probes) - RECENT_PROBE_CHANGES)
    return ("<h3>Active probes</h3>" + _table(headers, active, "probe-row active-probe", "no active probe")
            + f"<h3>Last {RECENT_PROBE_CHANGES} probe changes (newest first)</h3>"
            + _table(headers, recent, "probe-row probe-change", "no probe registered")
            + (f'<p class="meta">{older:,} older probe version(s) in data.json</p>' if older else ""))


def render_page(data: DashboardData, rules: Sequence[AlertRule]) -> str:
    """The whole dashboard as one HTML document."""
    esc = html.escape
    open_n = sum(a.cycle_resolved is None for a in data.alerts)
    parts = [f"<h1>propel — run {esc(data.run_name)}</h1>",
             f'<div class="meta">store {esc(data.store_url)} · last cycle {data.last_cycle} · '
             f"{open_n} open alert(s) · rendered {datetime.now(UTC).isoformat(timespec='seconds')}</div>"]
    parts.append(STATUS_SLOT)
    if data.run_id is None:
        parts.append(f'<p class="empty">run {esc(data.run_name)!s} has not started yet: no metrics stored.</p>')
    parts.append('<section id="alerts"><h2>Alerts</h2>' + _alerts_table(data.alerts) + "</section>")
    parts.append(_figure("alert-timeline", "Alert timeline", alert_timeline_svg(data)))
    for key, title, names in PANELS:
        parts.append(_figure(f"metrics-{key}", title, metrics_svg(data, names, rules)))
    parts.append(_figure("queue", "Queue depth", queue_svg(data)))
    parts.append(_figure("spotcheck", "Spot-check outcomes", spotcheck_svg(data)))
    parts.append(frontier_panel.section_html(data.frontier))
    parts.append(_figure("probes", "Probe versions", probes_svg(data)).replace("</section>", _probe_tables(data)
                                                                                  + "</section>"))
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta http-equiv="refresh" content="30">'
            f"<title>propel dashboard — {esc(data.run_name)}</title><style>{_CSS}{STATUS_CSS}</style></head><body>"
            + "\n".join(parts) + '<p class="meta"><a href="/dashboard/data.json">data.json</a></p></body></html>')


def _figure(section_id: str, title: str, svg: str) -> str:
    return (f'<section id="{section_id}"><h2>{html.escape(title)}</h2>'
            f'<figure class="plot" data-plot="{section_id}">{svg}</figure></section>')


STATUS_SLOT = "<!--propel-status-->"


def _state(request: Request) -> tuple[Store, str, Sequence[AlertRule], float, int | None]:
    state = request.app.state
    ctx = getattr(state, "ctx", None)
    stale_s = float(getattr(ctx, "heartbeat_stale_s", 30.0))
    return (state.store, str(state.run_name), tuple(getattr(state, "alert_rules", DEFAULT_RULES)), stale_s,
            getattr(state, "budget_per_hour", None))


_PAGES: dict[tuple[int, str], tuple[str, str]] = {}
_PAGES_LOCK = threading.Lock()


def cached_page(store: Store, run_name: str, rules: Sequence[AlertRule], stale_s: float = 30.0,
                budget_per_hour: int | None = None) -> str:
    """The page; its plots are re-rendered only when their data changed (plotting takes seconds,
    reading takes ms), the status strip on every request (heartbeat age changes every second)."""
    data = collect(store, run_name, stale_s, budget_per_hour)
    plotted = {k: v for k, v in data_json(data).items() if k != "status"}
    payload = [plotted, [r.model_dump(mode="json") for r in rules]]
    fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    key = (id(store), run_name)
    with _PAGES_LOCK:
        hit = _PAGES.get(key)
    if hit is not None and hit[0] == fingerprint:
        page = hit[1]
    else:
        page = render_page(data, rules)
        with _PAGES_LOCK:
            _PAGES[key] = (fingerprint, page)
    return page.replace(STATUS_SLOT, render_status(data.status), 1)


def _store_down(err: Exception) -> StatusPanel:
    text = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
    return StatusPanel(error=f"store unreachable: {mask_secrets(text)}")


@router.get("/dashboard", response_class=HTMLResponse)
def dashboard(request: Request) -> HTMLResponse:
    """The operator dashboard: what the daemon does now, collapse metrics, alerts, queue, probes, spot-checks."""
    store, run_name, rules, stale_s, budget = _state(request)
    try:
        return HTMLResponse(cached_page(store, run_name, rules, stale_s, budget))
    except (SQLAlchemyError, StoreError) as err:  # say so on the page (it refreshes itself), not a 500
        body = render_status(_store_down(err))
        return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" '
                            f'content="30"><title>propel dashboard — {html.escape(run_name)}</title><style>{_CSS}'
                            f"{STATUS_CSS}</style></head><body><h1>propel — run {html.escape(run_name)}</h1>{body}"
                            "</body></html>", status_code=503)


@router.get("/dashboard/data.json")
def dashboard_data(request: Request) -> JSONResponse:
    """The dashboard's data: status, metric series per cycle, alerts, queue depths, probes, spot-check counts."""
    store, run_name, _, stale_s, budget = _state(request)
    try:
        return JSONResponse(data_json(collect(store, run_name, stale_s, budget)))
    except (SQLAlchemyError, StoreError) as err:
        return JSONResponse({"run": run_name, "status": status_json(_store_down(err))}, status_code=503)

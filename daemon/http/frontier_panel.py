"""The frontier panel: per solver version, labels and in-band rates of spot-checks and trainer
outcomes, drift, and the champion primary probe (for the dashboard and ``propel status``)."""

from __future__ import annotations

import html
from typing import Any

HEADERS = ("solver", "version", "age", "spot-check labels", "in band", "trainer labels", "in band",
           "drift", "re-measured")


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    """One text row per (solver, version), newest first; the current version is marked with ``*``."""
    out: list[tuple[str, ...]] = []
    for r in summary.get("versions", []):
        version = (r["version"] or "(unversioned)") + (" *" if r["current"] else "")
        drift = "–" if r["drift_score"] is None else f"{r['drift_score']:.2f}"
        if r["drift_state"] == "measuring":
            drift += " (measuring)"
        out.append((r["solver"], version, "–" if r["age"] is None else str(r["age"]), str(r["spotcheck_labels"]),
                    _pct(r["spotcheck_in_band_rate"]), str(r["trainer_labels"]), _pct(r["trainer_in_band_rate"]),
                    drift, "–" if r["drift_measured"] is None else str(r["drift_measured"])))
    return out


def champion_line(summary: dict[str, Any]) -> str:
    champ = summary.get("champion")
    stale = summary.get("stale_tasks", 0)
    if not champ:
        return f"champion primary probe: none · stale tasks: {stale}"
    why = f" ({champ['decision']})" if champ.get("decision") else ""
    return f"champion primary probe: {champ['probe']} since {champ['since']}{why} · stale tasks: {stale}"


def section_html(summary: dict[str, Any]) -> str:
    """The dashboard's ``<section id="frontier">``."""
    body = rows(summary)
    if body:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
        trs = "".join('<tr class="version-row">' + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                      for row in body)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>"
    else:
        table = '<p class="empty">no labels yet</p>'
    return (f'<section id="frontier"><h2>Solver versions and drift</h2><p class="meta">'
            f"{html.escape(champion_line(summary))}</p>{table}</section>")

"""``propel tasks stats``: the served mix of the run's queue by solver, from a running API
(``GET /v1/tasks/stats``), as plain lines within 80 columns or as JSON."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
import httpx

from daemon.cli.common import get_config
from daemon.cli.status_text import wrap
from daemon.cli.tasks import api_url, tasks_group, url_option

STATES = ("ready", "leased", "acked", "dead", "stale")


def _counts(counts: dict[str, int], total: int) -> str:
    return ", ".join(f"{k} {v} ({v / total:.0%})" for k, v in counts.items()) if total else "–"


def _quantiles(q: dict[str, float] | None, fmt: str) -> str:
    return "–" if not q else " · ".join(f"{k} {format(v, fmt)}" for k, v in q.items())


def mix_lines(answer: dict[str, Any]) -> list[str]:
    """The stats answer as lines of at most 80 characters, one block per solver."""
    out = wrap(f"served mix: {answer['tasks']} task(s) in {', '.join(answer['states'])} "
               f"(newest {answer['limit']})")
    for m in answer["solvers"]:
        n = m["tasks"]
        out += ["", *wrap(f"solver {m['solver'] or '(any: selected for no particular solver)'} · {n} task(s)")]
        out += wrap(f"states: {_counts(m['states'], n)}", "  ")
        out += wrap(f"domains: {_counts(m['domains'], n)}", "  ")
        out += wrap(f"topics: {_counts(m['topics'], n)}", "  ")
        pib = m["predicted_in_band"]
        out += wrap(f"predicted in band: {_quantiles(pib['quantiles'], '.2f')}", "  ")
        out += wrap("predicted in band bins: " + ", ".join(f"{k} {v}" for k, v in pib["bins"].items()), "  ")
        out += wrap(f"prompt chars: {_quantiles(m['prompt_chars'], '.0f')}", "  ")
        for name, counts in m["features"].items():
            out += wrap(f"{name}: {_counts(counts, n)}", "  ")
    return out


@tasks_group.command("stats")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES),
              help="queue states to count (repeatable; default: ready, leased, acked)")
@click.option("--solver", default=None, help="only tasks selected for this solver")
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True,
              help="newest queue rows to read")
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON answer")
@url_option
@click.pass_context
def stats_command(ctx: click.Context, states: tuple[str, ...], solver: str | None, limit: int, as_json: bool,
                  url: str | None) -> None:
    """What the trainer is fed: per solver, topics, predicted in-band, prompt lengths and the domain's
    extras (arith: operators, operator kinds, answer digits)."""
    cfg = get_config(ctx)
    base = api_url(cfg, url)
    token = os.environ.get("PROPEL_API_TOKEN") or cfg.api.token
    params: dict[str, Any] = {"limit": limit, **({"state": list(states)} if states else {}),
                              **({"solver": solver} if solver else {})}
    resp = httpx.get(f"{base}/v1/tasks/stats", params=params, timeout=60,
                     headers={"Authorization": f"Bearer {token}"} if token else {})
    if resp.status_code != 200:
        hint = " (set PROPEL_API_TOKEN to the API's token)" if resp.status_code == 401 else ""
        click.echo(f"error: {base} refused the request: HTTP {resp.status_code} {resp.text[:200]}{hint}", err=True)
        sys.exit(1)
    answer = resp.json()
    click.echo(json.dumps(answer, indent=2) if as_json else "\n".join(mix_lines(answer)))

"""What `propel run` prints: thousands separators, one row per line in a file, JSON lines for shippers,
each alert once (by the log sink, not the progress hook)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from rich.console import Console

from daemon.loop.driver import CycleReport
from daemon.loop.progress import Progress, fmt_value
from daemon.loop.state import DriverState
from daemon.ops.logs import JsonFormatter, configure_logging, strip_markup


def _file_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()  # not a terminal: rich would wrap at 80 columns by default
    return Console(file=buf, highlight=False, soft_wrap=True), buf


def _cycle(progress: Progress, cycle: int, **emit: float) -> None:
    progress(CycleReport("rl", cycle, 1.5, {"reward_mean": 0.25}))
    progress(CycleReport("sample", cycle, 0.5, {"validity": 0.97, "novel_share": 0.04, "predicted_utility": 0.4}))
    progress(CycleReport("spotcheck", cycle, 0.5, {"spotcheck_utility": 0.3, "false_positives": 1280.0}))
    progress(CycleReport("emit", cycle, 0.1, {"emitted": 1280.0, "queue_ready": 1_234_567.0, **emit}))


def test_summary_rows_have_separators_and_never_wrap() -> None:
    console, buf = _file_console()
    _cycle(Progress(console), 12_345)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 5  # 4 phase lines + 1 summary row, none wrapped although they are > 80 columns
    summary = lines[-1]
    assert len(summary) > 80 and summary.startswith("cycle 12,345 │ RL reward +0.25 │ valid 97% │ new 4%")
    assert "emitted 1,280" in summary and "queue 1,234,567" in summary and "FPs 1,280" in summary
    assert "e+0" not in buf.getvalue()
    assert "emitted=1,280" in lines[3] and "queue_ready=1,234,567" in lines[3]


def test_summary_says_how_many_were_served_below_the_bar() -> None:
    console, buf = _file_console()
    progress = Progress(console)
    _cycle(progress, 7, emitted_below_bar=61.0)
    _cycle(progress, 8, emitted_below_bar=0.0)
    below, normal = [line for line in buf.getvalue().splitlines() if "│" in line]
    assert "emitted 1,280 (61 below the bar: emission stalled)" in below
    assert "emitted 1,280 │" in normal and "below the bar" not in normal


@pytest.mark.parametrize(("value", "text"), [(1280.0, "1,280"), (0.25, "0.25"), (3.0, "3"), (1.5e-4, "0.00015")])
def test_fmt_value(value: float, text: str) -> None:
    assert fmt_value(value) == text


def test_json_mode_logs_every_line_with_fields() -> None:
    stream = io.StringIO()
    configure_logging("json", "INFO", stream)
    try:
        progress = Progress(json_mode=True)
        progress.say("propel · run [bold]demo[/bold]")
        _cycle(progress, 3)
        logging.getLogger("propel.alerts").warning("alert x FIRING")
    finally:
        configure_logging("text", "WARNING", io.StringIO())
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert records[0]["msg"] == "propel · run demo" and records[0]["level"] == "info"
    summary = next(r for r in records if "summary" in r)
    assert summary["cycle"] == 3 and summary["summary"]["emitted"] == 1280.0
    phases = [r for r in records if "phase" in r]
    assert [r["phase"] for r in phases] == ["rl", "sample", "spotcheck", "emit"]
    assert records[-1] == {**records[-1], "level": "warning", "logger": "propel.alerts", "msg": "alert x FIRING"}


def test_json_formatter_keeps_exceptions_and_progress_strips_markup() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        record = logging.LogRecord("celery", logging.ERROR, __file__, 1, "Task x[abc-123] failed", None,
                                   sys.exc_info())
    out = json.loads(JsonFormatter().format(record))
    assert out["msg"] == "Task x[abc-123] failed" and "ValueError: bad" in out["exc"]  # others' brackets stay
    assert strip_markup("[bold]cycle 3[/bold] │ [dim]x[/dim]") == "cycle 3 │ x"
    assert strip_markup("list [1, 2]") == "list [1, 2]"


def test_each_alert_is_printed_once(tmp_path: Path) -> None:
    """A firing rule shows up once in everything `propel run` writes (progress console + logs)."""
    from curriculum.store import repo
    from daemon.config import config_from_mapping
    from daemon.ops.metrics import build_metrics
    from daemon.service.runtime import ServiceHooks
    from daemon.service.settings import build_store
    from migrations import upgrade

    url = f"sqlite:///{tmp_path / 'p.db'}"
    upgrade(url)
    cfg = config_from_mapping({"store": {"url": url}, "alerts": {"rules": [
        {"name": "validity_floor", "metric": "validity", "comparator": "<", "threshold": 0.5}]}}, env={})
    store = build_store(cfg)
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "default", "h", {})
    console, out = _file_console()
    logs = io.StringIO()
    configure_logging("text", "INFO", logs)
    hooks = ServiceHooks(cfg, store, run_id, build_metrics(), Progress(console))
    try:
        hooks.alerts(0, {"validity": 0.1}, None, DriverState())
        hooks.alerts(1, {"validity": 0.9}, None, DriverState())
    finally:
        hooks.close()
        store.dispose()
        configure_logging("text", "WARNING", io.StringIO())
    text = out.getvalue() + logs.getvalue()
    assert text.count("validity_floor") == 2, text  # one line when it fires, one when it resolves
    assert "FIRING" in logs.getvalue() and "resolved" in logs.getvalue()


def test_without_a_terminal_lines_become_timestamped_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    logs = io.StringIO()
    configure_logging("text", "INFO", logs)
    try:
        progress = Progress()  # stdout is captured by pytest: not a terminal
        assert progress.to_log
        _cycle(progress, 2)
    finally:
        configure_logging("text", "WARNING", io.StringIO())
    lines = logs.getvalue().splitlines()
    assert capsys.readouterr().out == ""
    assert len(lines) == 5 and all(line[:8].count(":") == 2 and " INFO " in line for line in lines)  # HH:MM:SS
    assert lines[-1].endswith("cycle 2 │ RL reward +0.25 │ valid 97% │ new 4% │ pred. util 40% │ spot util 30% │ "
                              "FPs 1,280 │ emitted 1,280 │ queue 1,234,567")


@pytest.mark.parametrize(("emit", "note"), [
    ({"emitted": 0.0, "backpressure": 1.0, "emission_paused": 0.0},
     "emitted 0 (queue at emission.high_water_mark: trainers lease slower than it fills) │"),
    ({"emitted": 0.0, "backpressure": 0.0, "emission_paused": 1.0}, "emitted 0 (paused by an escalation) │"),
    ({"emitted": 0.0, "backpressure": 0.0, "emission_paused": 0.0}, "emitted 0 │"),
    ({"emitted": 3.0, "backpressure": 1.0, "emission_paused": 0.0}, "emitted 3 │"),  # the last tasks that fitted
])
def test_a_cycle_that_emits_nothing_says_why_in_its_summary(emit: dict[str, float], note: str) -> None:
    console, buf = _file_console()
    _cycle(Progress(console), 7, **emit)
    assert note in buf.getvalue().splitlines()[-1]

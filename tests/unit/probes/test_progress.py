"""The shared progress reporter: lines at a steady interval when output is not a terminal."""

from __future__ import annotations

import io
import logging

import pytest

from probes.progress import MAX_INTERVAL_S, ProgressReporter, format_duration, set_mode


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_lines_every_interval_with_percent_rate_eta_and_fields() -> None:
    clock, lines = FakeClock(), []
    stream = io.StringIO()  # not a terminal
    with ProgressReporter("bootstrap", 1800, unit="steps", interval_s=10, stream=stream, clock=clock,
                          emit=lines.append) as bar:
        for _ in range(1800):
            clock.t += 0.25  # 4 steps per second: a line every 40 steps
            bar.advance(1, loss=0.5)
    assert bar.mode == "lines" and stream.getvalue() == ""
    assert lines[0] == "bootstrap: started, 1,800 steps to do"
    assert lines[1] == "bootstrap: 40/1,800 (2%) · 4.0/s · ETA 7m 20s · loss 0.500"
    middle = lines[1:-1]
    assert len(middle) == 1800 // 40 - 1  # one per 10 s of fake time, none after the last step
    assert lines[-1] == "bootstrap: done, 1,800/1,800 in 7m 30s · 4.0/s · loss 0.500"


def test_interval_is_capped_at_30_s_and_a_failure_says_stopped() -> None:
    clock, lines = FakeClock(), []
    reporter = ProgressReporter("labelling", 10, interval_s=600, stream=io.StringIO(), clock=clock, emit=lines.append)
    assert reporter.interval_s == MAX_INTERVAL_S
    with pytest.raises(RuntimeError), reporter:
        for _ in range(3):
            clock.t += 31
            reporter.advance()
        raise RuntimeError("boom")
    assert len(lines) == 1 + 3 + 1 and lines[-1].startswith("labelling: stopped, 3/10")


def test_terminal_gets_a_bar_and_mode_can_be_forced() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    lines: list[str] = []
    tty = Tty()
    with ProgressReporter("sweep", 4, stream=tty, emit=lines.append) as bar:
        bar.advance(4)
    assert bar.mode == "bar" and lines == [] and "sweep" in tty.getvalue()
    set_mode("lines")  # what --log-format json does
    try:
        with ProgressReporter("sweep", 4, stream=Tty(), emit=lines.append) as bar:
            bar.advance(4)
        assert bar.mode == "lines" and lines[-1].startswith("sweep: done, 4/4")
    finally:
        set_mode("auto")


def test_default_lines_go_to_the_progress_logger_when_logging_is_configured(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="propel.progress"), ProgressReporter("x", 2, stream=io.StringIO()) as bar:
        bar.advance(2)
    assert [r.getMessage() for r in caplog.records][-1].startswith("x: done, 2/2")


@pytest.mark.parametrize(("seconds", "text"), [(5, "5s"), (75, "1m 15s"), (3725, "1h 02m"), (float("inf"), "?")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text

"""One progress reporter for every long piece of work (bootstrap, corpus labelling, probe sweeps).

On a terminal it draws a rich bar. When output is not a terminal (a log file, docker, systemd, CI)
it writes one plain line at the start, then one every ``interval_s`` (default 10 s or
``PROPEL_PROGRESS_INTERVAL_S``, never more than 30 s apart while work advances), and one at the end::

    bootstrap: 540/1,800 (30%) · 3.1/s · ETA 6m 44s · loss 0.812

Lines go to the ``propel.progress`` logger when logging is configured (``propel`` configures it,
in text or JSON), else straight to stderr. ``set_mode("lines")`` forces lines even on a terminal
(the CLI does so for ``--log-format json``). It lives in ``probes`` (the bottom layer) so every
package can use it; it knows nothing of what is being counted.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TextIO

log = logging.getLogger("propel.progress")
Mode = Literal["auto", "bar", "lines", "off"]
MAX_INTERVAL_S = 30.0
_MODE: dict[str, Mode] = {"mode": "auto"}


def set_mode(mode: Mode) -> None:
    """Process-wide: ``auto`` (bar on a terminal, lines otherwise), ``bar``, ``lines`` or ``off``."""
    _MODE["mode"] = mode


def current_mode() -> Mode:
    return _MODE["mode"]


def format_duration(seconds: float) -> str:
    """``75`` → ``1m 15s``; ``3725`` → ``1h 02m``; unknown → ``?``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def _field(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if math.isfinite(value) else "-"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def progress_note(line: str) -> None:
    """One line to the ``propel.progress`` logger when logging is configured, else to stderr (progress lines
    and the notes beside them)."""
    if logging.getLogger().handlers or log.handlers:
        log.info(line)
    else:
        print(line, file=sys.stderr, flush=True)


class ProgressReporter:
    """Counts ``done`` of ``total`` units; call :meth:`advance` as work completes.

    ``clock`` and ``emit`` are injectable (tests drive a fake clock and collect lines).
    """

    def __init__(self, description: str, total: int, *, unit: str = "", interval_s: float | None = None,
                 stream: TextIO | None = None, mode: Mode | None = None,
                 clock: Callable[[], float] = time.monotonic, emit: Callable[[str], None] | None = None) -> None:
        self.description, self.total, self.unit = description, max(0, int(total)), unit
        if interval_s is None:  # PROPEL_PROGRESS_INTERVAL_S, else 10 s; never above 30 s
            interval_s = float(os.environ.get("PROPEL_PROGRESS_INTERVAL_S") or 10.0)
        self.interval_s = min(max(0.0, interval_s), MAX_INTERVAL_S)
        self.clock, self.emit = clock, emit or progress_note
        self.stream = stream or sys.stderr
        chosen = mode or current_mode()
        if chosen == "auto":
            chosen = "bar" if self._is_tty() else "lines"
        self.mode: Mode = chosen
        self.done = 0
        self.fields: dict[str, Any] = {}
        self._start = self._last = clock()
        self._bar: Any = None
        self._task: Any = None

    def _is_tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> ProgressReporter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish(failed=exc[0] is not None)

    def start(self) -> None:
        self._start = self._last = self.clock()
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=Console(file=self.stream), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total or None, extra="")
        elif self.mode == "lines":
            self.emit(f"{self.description}: started, {self.total:,} {self.unit or 'steps'} to do")

    def advance(self, n: int = 1, **fields: Any) -> None:
        """``n`` more units done; ``fields`` (e.g. ``loss=0.8``) are shown with the next line."""
        self.done += n
        self.fields.update(fields)
        if self.mode == "bar" and self._bar is not None:
            self._bar.update(self._task, advance=n, extra=self._fields_text())
        elif self.mode == "lines":
            now = self.clock()
            if now - self._last >= self.interval_s and self.done < self.total:
                self._last = now
                self.emit(self.line(now))

    def finish(self, failed: bool = False) -> None:
        if self.mode == "bar" and self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.mode == "lines":
            now = self.clock()
            state = "stopped" if failed else "done"
            elapsed = now - self._start
            rate = self.done / elapsed if elapsed > 0 else float("nan")
            extra = self._fields_text()
            self.emit(f"{self.description}: {state}, {self.done:,}/{self.total:,} in {format_duration(elapsed)}"
                      + (f" · {rate:,.1f}/s" if math.isfinite(rate) else "") + (f" · {extra}" if extra else ""))

    # ---- text --------------------------------------------------------------------------------
    def _fields_text(self) -> str:
        return " · ".join(f"{k} {_field(v)}" for k, v in self.fields.items())

    def line(self, now: float | None = None) -> str:
        """The progress line: count, percent, rate, ETA and the latest fields."""
        now = self.clock() if now is None else now
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        parts = [f"{self.description}: {self.done:,}/{self.total:,} ({pct:.0f}%)", f"{rate:,.1f}/s",
                 f"ETA {format_duration(eta)}"]
        extra = self._fields_text()
        return " · ".join(parts + ([extra] if extra else []))


@contextmanager
def progress(description: str, total: int, **kwargs: Any) -> Iterator[Callable[..., None]]:
    """``with progress("labelling", n) as advance: … advance(k)`` — the reporter's ``advance``."""
    with ProgressReporter(description, total, **kwargs) as reporter:
        yield reporter.advance

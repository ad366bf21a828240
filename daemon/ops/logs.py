"""Logging for every ``propel`` command: plain text lines or one JSON object per line.

``propel --log-format json`` (or ``PROPEL_LOG_FORMAT=json``) is for log shippers (Loki, Vector,
CloudWatch, journald): every line the daemon prints — phase lines, cycle summaries, progress,
alerts, degraded-state changes — becomes ``{"ts", "level", "logger", "msg", ...fields}`` on
stderr, and no progress bar is drawn. Structured fields ride on the record's ``fields`` extra
(``log.info("…", extra={"fields": {"cycle": 3}})``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
_MARKUP = re.compile(r"\[/?[a-z][a-z0-9 _#.-]*\]")
_HANDLER_NAME = "propel"


def strip_markup(text: str) -> str:
    """``[bold]x[/bold]`` → ``x`` (rich markup is for terminals only)."""
    return _MARKUP.sub("", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                               "level": record.levelname.lower(), "logger": record.name,
                               "msg": record.getMessage()}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update({k: v for k, v in fields.items() if k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S")


class _StderrHandler(logging.StreamHandler):
    """stderr as it was when logging was configured, or the current one once that was closed (click's
    test runner swaps stderr per invocation). Not the current one always: a Celery worker replaces
    sys.stderr with a proxy that logs, and writing there from a log handler would loop."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self.stream, "closed", False):
            self.stream = sys.stderr
        super().emit(record)


def configure_logging(fmt: LogFormat = "text", level: int | str = logging.INFO, stream: TextIO | None = None) -> None:
    """Install one handler on the root logger (replacing an earlier one of ours)."""
    from probes.progress import set_mode

    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    # per-request and per-tick INFO lines; Celery's own loggers keep the worker's --loglevel
    for noisy in ("httpx", "httpcore", "urllib3", "alembic", "uvicorn.access", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger(noisy).level))
    if fmt == "json" or not (stream or sys.stderr).isatty():
        # Hugging Face's own tqdm bars ("Writing model shards", downloads) are terminal-only noise in a log
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
    logging.captureWarnings(True)  # library warnings become log lines (JSON lines under --log-format json)
    set_mode("lines" if fmt == "json" else "auto")

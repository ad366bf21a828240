"""Polling with a deadline, for tests that wait on another process or thread (a liveness bound, not a
timing assertion: the condition is what the test checks, the deadline only stops a hung test)."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(pred: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.02) -> bool:
    """Poll ``pred`` until it holds or ``timeout_s`` passed; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() >= deadline:
            return pred()
        time.sleep(interval_s)
    return True

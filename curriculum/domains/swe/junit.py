"""Reading pytest's JUnit XML report (``junit_family=xunit1``) into per-test outcomes.

A test's id is ``<file>::<classname>::<name>`` (stable across runs; not a pytest node id).
Outcomes: ``passed``, ``failed``, ``error``, ``skipped``, ``timeout`` (a pytest-timeout failure).
A collection error is reported by pytest as an ``error`` testcase whose message is
``collection failure``; it is returned separately, not as a test.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

OUTCOMES = ("passed", "failed", "error", "skipped", "timeout")


@dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest test class

    id: str
    file: str
    outcome: str
    message: str = ""
    time_s: float = 0.0


def _outcome(case: ET.Element) -> tuple[str, str]:
    for tag in ("failure", "error"):
        child = case.find(tag)
        if child is not None:
            message = child.get("message") or ""
            text = (child.text or "")[-2000:]
            if "Timeout" in message or "+++ Timeout +++" in text:
                return "timeout", message
            return ("failed" if tag == "failure" else "error"), message
    if case.find("skipped") is not None:
        return "skipped", (case.find("skipped").get("message") or "")  # type: ignore[union-attr]
    return "passed", ""


def parse_junit(text: str) -> tuple[dict[str, TestResult], list[str]] | str:
    """``(results by id, collection-error locations)`` or the reason the report is unreadable."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        return f"unreadable JUnit report: {err}"
    results: dict[str, TestResult] = {}
    collect_errors: list[str] = []
    for case in root.iter("testcase"):
        outcome, message = _outcome(case)
        name, classname, file = case.get("name", ""), case.get("classname", ""), case.get("file", "")
        if outcome == "error" and message == "collection failure":
            collect_errors.append(file or name)
            continue
        tid = f"{file}::{classname}::{name}"
        previous = results.get(tid)
        if previous is not None and previous.outcome != "passed":
            continue  # a teardown error reported as a second case keeps the first non-pass outcome
        try:
            time_s = float(case.get("time") or 0.0)
        except ValueError:
            time_s = 0.0
        results[tid] = TestResult(tid, file, outcome, message[:500], time_s)
    return results, collect_errors

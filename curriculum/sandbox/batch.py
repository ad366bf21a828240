"""Batched execution: many (function, input) pairs per sandbox start.

One sandboxed process runs :mod:`curriculum.sandbox.harness` over a list of programs, so a validity
check costs a fraction of a process start-up instead of one per call. When a program takes the whole
process down (crash, CPU/wall limit, memory), the programs finished before it keep their results,
the culprit is re-run alone so the failure is attributed to it, and the rest continue in a new
process. Determinism is checked by running the same batch in two separate processes (concurrently)
and comparing every output.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curriculum.sandbox.base import ExecutionResult, Limits, Sandbox

log = logging.getLogger(__name__)
HARNESS_SOURCE = Path(__file__).with_name("harness.py").read_text()


@dataclass(frozen=True)
class Program:
    """Code defining ``func`` and the inputs (argument-list text) to call it on."""

    id: str
    code: str
    inputs: tuple[str, ...]
    func: str = "f"


@dataclass(frozen=True)
class CallResult:
    status: str
    output: str | None
    error: str | None


@dataclass(frozen=True)
class ProgramResult:
    """``status`` is ``ok`` when the program ran to the end (individual calls may still fail),
    ``error`` when its definition failed, or the process status that killed it."""

    id: str
    status: str
    calls: tuple[CallResult, ...]
    reason: str | None = None
    infra: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def outputs(self) -> list[str | None]:
        return [c.output for c in self.calls]


class BatchRunner:
    """Runs batches of programs in a sandbox with per-call limits."""

    def __init__(self, sandbox: Sandbox, limits: Limits | None = None, call_timeout_s: float = 1.0,
                 max_output_chars: int = 1_000_000, stop_on_failure: bool = True) -> None:
        self.sandbox = sandbox
        self.limits = limits or Limits()
        self.call_timeout_s = call_timeout_s
        self.max_output_chars = max_output_chars
        self.stop_on_failure = stop_on_failure

    def _run_process(self, programs: list[Program]) -> tuple[ExecutionResult, dict[str, dict[str, Any]]]:
        payload = {
            "programs": [{"id": p.id, "code": p.code, "func": p.func, "inputs": list(p.inputs)} for p in programs],
            "call_timeout_s": self.call_timeout_s,
            "max_output_chars": self.max_output_chars,
            "stop_on_failure": self.stop_on_failure,
        }
        result = self.sandbox.run_python(HARNESS_SOURCE, json.dumps(payload).encode(), self.limits)
        return result, _collect(result.stdout, {p.id for p in programs})

    def run(self, programs: list[Program]) -> list[ProgramResult]:
        """Results in input order; a program is never silently dropped."""
        results: dict[str, ProgramResult] = {}
        remaining = list(programs)
        while remaining:
            proc, records = self._run_process(remaining)
            if proc.meta.get("infra"):
                for p in remaining:
                    results[p.id] = ProgramResult(p.id, "error", (), proc.reason, infra=True)
                break
            incomplete = []
            for p in remaining:
                if p.id in records and records[p.id]["done"]:
                    results[p.id] = _build(p, records[p.id])
                else:
                    incomplete.append(p)
            if not incomplete:
                break
            culprit = incomplete[0]
            if len(remaining) > 1:  # re-run the culprit alone so the failure is attributed to it
                proc, records = self._run_process([culprit])
            done = culprit.id in records and records[culprit.id]["done"]
            results[culprit.id] = _build(culprit, records[culprit.id]) if done else _failed(culprit, proc)
            remaining = incomplete[1:]
        return [results[p.id] for p in programs]

    def run_twice(self, programs: list[Program]) -> tuple[list[ProgramResult], list[ProgramResult]]:
        """The same batch in two separate processes, concurrently (for the determinism check)."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            first, second = pool.submit(self.run, programs), pool.submit(self.run, programs)
            return first.result(), second.result()


def _collect(stdout: str, ids: set[str]) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    bad = 0
    for line in stdout.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(rec, dict) or rec.get("id") not in ids:
            bad += rec.get("kind") != "done" if isinstance(rec, dict) else 1
            continue
        entry = records.setdefault(rec["id"], {"calls": {}, "done": False, "error": None})
        if rec.get("kind") == "call" and isinstance(rec.get("i"), int):
            entry["calls"][rec["i"]] = CallResult(str(rec.get("status")), rec.get("output"), rec.get("error"))
        elif rec.get("kind") == "program":
            entry["done"], entry["error"] = True, rec.get("error")
    if bad:
        log.warning("sandbox harness: ignored %d malformed or foreign result lines", bad)
    return records


def _build(program: Program, record: dict[str, Any]) -> ProgramResult:
    if record["error"]:
        return ProgramResult(program.id, "error", (), str(record["error"]))
    calls = record["calls"]
    missing = CallResult("error", None, "no result reported for this input")
    return ProgramResult(program.id, "ok", tuple(calls.get(i, missing) for i in range(len(program.inputs))))


def _failed(program: Program, proc: ExecutionResult) -> ProgramResult:
    status = proc.status if proc.status != "ok" else "error"
    reason = proc.reason or "harness ended without reporting this program"
    return ProgramResult(program.id, status, (), reason, infra=bool(proc.meta.get("infra")))


def compare_runs(first: ProgramResult, second: ProgramResult) -> str | None:
    """``None`` when two runs of one program agree call by call; otherwise the first difference."""
    if first.status != second.status:
        return f"runs disagree on program status: {first.status} vs {second.status}"
    for i, (a, b) in enumerate(zip(first.calls, second.calls, strict=False)):
        if (a.status, a.output) != (b.status, b.output):
            return (f"non-deterministic: input {i} gave {a.status} {str(a.output)[:60]!r}, "
                    f"then {b.status} {str(b.output)[:60]!r}")
    if len(first.calls) != len(second.calls):
        return "runs disagree on the number of results"
    return None

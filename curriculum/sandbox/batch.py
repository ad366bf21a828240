"""Batched execution: many (function, input) pairs per sandbox start, one fresh process per program.

One sandboxed process runs :mod:`curriculum.sandbox.forkserver`, which forks a fresh child per
program (the standard library is imported once, in the parent) and reads each child's results
from a pipe that only that child holds; results that name another program, repeat an input or are
malformed make the program ``tampering``. Programs therefore share no interpreter state, cannot
write each other's results, and every descendant of a program is killed before the next starts.
When the batch process itself dies (a program killed its parent, the wall clock ran out), the
programs finished before keep their results, the program that was running is re-run alone so the
failure is attributed to it, and the rest continue in a new process.

Determinism (:meth:`BatchRunner.run_twice`): the batch runs in two separate sandbox processes
(address layouts differ; the first uses the fixed hash seed that grading uses, the second a
random one), the second evaluating every program's inputs in the reverse order, so output that
depends on evaluation history or on the process is reported by :func:`compare_runs` as
``nondeterministic``. When hash-order dependence slips through (both seeds happen to give the same
order), grading still reproduces the gold outputs, because it runs with the gold run's seed.

Start-up cost per batch process: where the sandbox runs this host's interpreter
(``Sandbox.host_python``) the harness goes as :func:`bootstrap`, its code compiled once per host
process and marshalled, instead of source every sandboxed interpreter compiles again; and the hash
seed is passed to the backend (``run_python(hash_seed=...)``) so the interpreter starts with it
instead of re-executing itself for it (docker: source, and the re-execution).
"""

from __future__ import annotations

import functools
import json
import logging
import marshal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from curriculum.sandbox.base import ExecutionResult, Limits, Sandbox

log = logging.getLogger(__name__)
#: What runs in the sandbox: the evaluation code, then the fork server (its ``main`` runs).
HARNESS_SOURCE = "\n".join(Path(__file__).with_name(name).read_text() for name in ("harness.py", "forkserver.py"))
#: The longest ``-c`` program a backend takes (``backends.MAX_ARGV_CODE``).
MAX_BOOTSTRAP_CHARS = 100_000


@functools.cache
def bootstrap() -> str:
    """:data:`HARNESS_SOURCE` compiled here once per process (no inherited ``__future__`` flags;
    ``optimize=2`` drops the docstrings, and the harness has no ``assert``), marshalled and wrapped
    in a one-line program that loads and runs it: no compiler run in the sandbox, and nothing to
    import for it (hex text and ``bytes.fromhex``, not a compression module, which costs a library
    load per start). Only for the host's own interpreter: marshal data is specific to the Python
    version. :data:`HARNESS_SOURCE` itself where the result is too long for a command-line argument
    (a test checks it is not)."""
    code = compile(HARNESS_SOURCE, "<string>", "exec", dont_inherit=True, optimize=2)
    loader = f"import marshal;exec(marshal.loads(bytes.fromhex('{marshal.dumps(code).hex()}')))\n"
    return loader if len(loader) <= MAX_BOOTSTRAP_CHARS else HARNESS_SOURCE


#: The string-hash seed of grading and of validity's first (gold) run; the second run's is random.
GRADING_HASH_SEED = 0
PROGRAM_STATUSES = ("ok", "error", "timeout", "memory", "killed", "output_limit", "tampering")


@dataclass(frozen=True)
class Program:
    """Code defining ``func`` and the inputs (argument-list text) to call it on.

    ``order`` is the evaluation order (a permutation of the input indices; default: as given).
    """

    id: str
    code: str
    inputs: tuple[str, ...]
    func: str = "f"
    order: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.order is not None and sorted(self.order) != list(range(len(self.inputs))):
            raise ValueError(f"Program.order must be a permutation of the {len(self.inputs)} input indices")

    def evaluation_order(self) -> tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(len(self.inputs)))

    def reversed(self) -> Program:
        """The same program with its evaluation order reversed."""
        return replace(self, order=tuple(reversed(self.evaluation_order())))


@dataclass(frozen=True)
class CallResult:
    status: str
    output: str | None
    error: str | None


@dataclass(frozen=True)
class ProgramResult:
    """``status`` is ``ok`` when the program ran to the end (individual calls may still fail),
    ``error`` when its definition failed or its process died, ``tampering`` when it wrote results
    that are not its own, or the limit that ended it (``timeout``, ``memory``, ``killed``,
    ``output_limit``)."""

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

    def _run_process(self, programs: list[Program], hash_seed: int | None = 0
                     ) -> tuple[ExecutionResult, dict[str, dict[str, Any]]]:
        payload = {
            "hash_seed": hash_seed,
            "programs": [{"id": p.id, "code": p.code, "func": p.func, "inputs": list(p.inputs),
                          "order": list(p.evaluation_order())} for p in programs],
            "call_timeout_s": self.call_timeout_s,
            "max_output_chars": self.max_output_chars,
            "stop_on_failure": self.stop_on_failure,
        }
        code = bootstrap() if self.sandbox.host_python else HARNESS_SOURCE
        result = self.sandbox.run_python(code, json.dumps(payload).encode(), self.limits, hash_seed=hash_seed)
        return result, _collect(result.stdout, {p.id for p in programs})

    def run(self, programs: list[Program], hash_seed: int | None = GRADING_HASH_SEED) -> list[ProgramResult]:
        """Results in input order; a program is never silently dropped. ``hash_seed`` fixes the
        string-hash seed (the default, used by grading and the gold run, makes set orders
        reproducible); ``None`` leaves it random. Program ids must be distinct (ValueError)."""
        if len({p.id for p in programs}) != len(programs):
            raise ValueError("BatchRunner.run: program ids must be distinct (results are attributed by id)")
        results: dict[str, ProgramResult] = {}
        remaining = list(programs)
        while remaining:
            proc, records = self._run_process(remaining, hash_seed)
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
                proc, records = self._run_process([culprit], hash_seed)
            done = culprit.id in records and records[culprit.id]["done"]
            results[culprit.id] = _build(culprit, records[culprit.id]) if done else _failed(culprit, proc)
            remaining = incomplete[1:]
        return [results[p.id] for p in programs]

    def run_twice(self, programs: list[Program]) -> tuple[list[ProgramResult], list[ProgramResult]]:
        """The batch in two separate processes, concurrently, the second evaluating every program's
        inputs in reverse order (the determinism check); results are indexed by input either way."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = pool.submit(self.run, programs, GRADING_HASH_SEED)
            second = pool.submit(self.run, [p.reversed() for p in programs], None)
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
        entry = records.setdefault(rec["id"], {"calls": {}, "done": False, "error": None, "status": "error"})
        if rec.get("kind") == "call" and isinstance(rec.get("i"), int):
            entry["calls"][rec["i"]] = CallResult(str(rec.get("status")), rec.get("output"), rec.get("error"))
        elif rec.get("kind") == "program":
            status = rec.get("status")
            entry["done"], entry["error"] = True, rec.get("error")
            entry["status"] = status if status in PROGRAM_STATUSES else "error"
    if bad:
        log.warning("sandbox harness: ignored %d malformed or foreign result lines", bad)
    return records


def _build(program: Program, record: dict[str, Any]) -> ProgramResult:
    if record["status"] != "ok" or record["error"]:
        status = record["status"] if record["status"] != "ok" else "error"
        return ProgramResult(program.id, status, (), str(record["error"] or status))
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
        return f"nondeterministic: runs disagree on program status: {first.status} vs {second.status}"
    for i, (a, b) in enumerate(zip(first.calls, second.calls, strict=False)):
        if (a.status, a.output) != (b.status, b.output):
            return (f"nondeterministic: input {i} gave {a.status} {str(a.output)[:60]!r}, "
                    f"then {b.status} {str(b.output)[:60]!r}")
    if len(first.calls) != len(second.calls):
        return "nondeterministic: runs disagree on the number of results"
    return None

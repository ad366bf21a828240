"""Batch harness: runs inside the sandbox (standard library only) and evaluates many programs.

Protocol. stdin carries one JSON object::

    {"programs": [{"id": str, "code": str, "func": "f", "inputs": ["1, [2, 3]", ...]}, ...],
     "call_timeout_s": 1.0, "max_output_chars": 1000000, "stop_on_failure": true}

Each input is the text between the parentheses of a call, ``f(<input>)``, made of Python literals.
For every program the harness executes ``code`` in a fresh namespace (with a private copy of the
builtins), then calls ``func`` on each input under a per-call wall-clock timer, and writes one JSON
line per call, one ``program`` line when a program is finished and a final ``done`` line::

    {"kind": "call", "id": ..., "i": 0, "status": "ok", "output": "<canonical repr>", "error": null}
    {"kind": "program", "id": ..., "status": "ok" | "error", "error": ...}
    {"kind": "done"}

Call statuses: ``ok``, ``error`` (exception, incl. recursion), ``timeout``, ``memory``,
``unserialisable`` (not built from None/bool/int/float/complex/str/bytes/list/tuple/dict/set),
``output_limit`` (canonical repr longer than ``max_output_chars``; never truncated), ``skipped``
(not run because an earlier input of the same program failed and ``stop_on_failure`` is set).

Results go to a private duplicate of the original stdout; the code's own ``print`` output goes to
/dev/null. Code that deliberately introspects the harness could forge result lines; the host only
trusts lines for the program ids it sent, and a forged line can at most corrupt its own task.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


class CallTimeout(BaseException):
    """Raised by the per-call timer; a BaseException so ``except Exception`` does not swallow it."""


class Unserialisable(Exception):
    """The value is not built from plain, comparable types."""


class OutputTooLarge(Exception):
    """The canonical repr exceeds the output budget."""


def parse_call_args(src: str) -> tuple[list[Any], dict[str, Any]]:
    """Literal positional and keyword arguments from the text of ``f(<src>)`` (raises ValueError)."""
    try:
        node = ast.parse(f"f({src}\n)", mode="eval").body
    except (SyntaxError, RecursionError, MemoryError) as err:
        raise ValueError(f"input is not an argument list: {err}") from err
    if not isinstance(node, ast.Call):
        raise ValueError("input is not an argument list")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise ValueError("input may not use * or ** unpacking")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as err:
        raise ValueError(f"input is not made of literals: {err}") from err
    return args, kwargs


def canonical_repr(value: Any, max_chars: int) -> str:
    """A canonical, comparable text form (sets sorted by element repr); raises on other types."""
    parts: list[str] = []
    budget = [max_chars]

    def put(text: str) -> None:
        budget[0] -= len(text)
        if budget[0] < 0:
            raise OutputTooLarge(f"output longer than {max_chars} characters")
        parts.append(text)

    def walk(v: Any) -> None:
        kind = type(v)
        if kind in _SCALARS:
            try:
                put(repr(v))
            except ValueError as err:
                raise Unserialisable(str(err)) from err
        elif kind in (list, tuple):
            put("[" if kind is list else "(")
            for i, item in enumerate(v):
                if i:
                    put(", ")
                walk(item)
            put("]" if kind is list else ("," if len(v) == 1 else "") + ")")
        elif kind is dict:
            put("{")
            for i, (k, item) in enumerate(v.items()):
                put(", " if i else "")
                walk(k)
                put(": ")
                walk(item)
            put("}")
        elif kind in (set, frozenset):
            inner = sorted(canonical_repr(item, max_chars) for item in v)
            put(("{" if kind is set else "frozenset({") + ", ".join(inner) + ("}" if kind is set else "})"))
        else:
            raise Unserialisable(f"output of type {kind.__name__} is not serialisable")

    try:
        walk(value)
    except RecursionError as err:
        raise Unserialisable("output nested too deeply") from err
    return "".join(parts)


def _on_alarm(signum: int, frame: object) -> None:
    raise CallTimeout()


def run_call(func: Callable[..., Any], src: str, timeout_s: float, max_chars: int) -> dict[str, Any]:
    """Evaluate ``func(<src>)`` under the timer and return the call record (never raises Exception)."""
    try:
        args, kwargs = parse_call_args(src)
    except ValueError as err:
        return {"status": "error", "output": None, "error": f"bad input: {err}"}
    sys.setrecursionlimit(1000)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            output = canonical_repr(func(*args, **kwargs), max_chars)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CallTimeout:
        return {"status": "timeout", "output": None, "error": f"call exceeded {timeout_s}s"}
    except MemoryError:
        return {"status": "memory", "output": None, "error": "MemoryError"}
    except Unserialisable as err:
        return {"status": "unserialisable", "output": None, "error": str(err)}
    except OutputTooLarge as err:
        return {"status": "output_limit", "output": None, "error": str(err)}
    except RecursionError:
        return {"status": "error", "output": None, "error": "RecursionError: maximum recursion depth exceeded"}
    except BaseException as err:  # the code's own exception (incl. SystemExit) is the result
        return {"status": "error", "output": None, "error": f"{type(err).__name__}: {str(err)[:300]}"}
    return {"status": "ok", "output": output, "error": None}


def run_program(prog: dict[str, Any], timeout_s: float, max_chars: int,
                emit: Callable[[dict[str, Any]], None], stop_on_failure: bool = True) -> None:
    """Define ``prog['func']`` from ``prog['code']`` and run it on every input, emitting records.

    With ``stop_on_failure`` the remaining inputs are skipped after the first failing call (their
    records say so), so a looping program costs one call timeout, not one per input.
    """
    namespace: dict[str, Any] = {"__name__": "__task__", "__builtins__": dict(vars(builtins))}
    error = None
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            exec(compile(prog["code"], "<task>", "exec"), namespace)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        func: Any = namespace.get(prog.get("func", "f"))
        if not callable(func):
            error = f"code does not define a function {prog.get('func', 'f')!r}"
    except CallTimeout:
        error = f"defining the code took more than {timeout_s}s"
    except BaseException as err:  # a failing definition is the program's result
        error = f"{type(err).__name__}: {str(err)[:300]}"
    if error is None:
        failed = False
        for i, src in enumerate(prog["inputs"]):
            if failed:
                record = {"status": "skipped", "output": None, "error": "skipped after an earlier failure"}
            else:
                record = run_call(func, src, timeout_s, max_chars)
                failed = stop_on_failure and record["status"] != "ok"
            emit({"kind": "call", "id": prog["id"], "i": i, **record})
    emit({"kind": "program", "id": prog["id"], "status": "error" if error else "ok", "error": error})


def main() -> None:
    payload = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    result_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGALRM, _on_alarm)

    def emit(record: dict[str, Any]) -> None:
        data = memoryview((json.dumps(record) + "\n").encode())
        while data:
            data = data[os.write(result_fd, data):]

    for prog in payload["programs"]:
        run_program(prog, float(payload.get("call_timeout_s", 1.0)),
                    int(payload.get("max_output_chars", 1_000_000)), emit,
                    bool(payload.get("stop_on_failure", True)))
    emit({"kind": "done"})


if __name__ == "__main__":
    main()

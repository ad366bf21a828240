"""Evaluation of one program inside its sandboxed child process (standard library only).

:mod:`curriculum.sandbox.forkserver` forks one fresh child per program (per candidate) from a
pre-imported parent; the child calls :func:`run_program`, which compiles ``code`` once and then,
for every input, executes it again in a fresh namespace with a private copy of the builtins (so
globals, default arguments and closures start fresh for every evaluation), calls ``func`` under a
per-call wall-clock timer and emits one record per call and a final ``program`` record::

    {"kind": "call", "id": ..., "i": 0, "status": "ok", "output": "<canonical repr>", "error": null}
    {"kind": "program", "id": ..., "status": "ok" | "error", "error": ...}

Inputs are evaluated in ``order`` (a permutation of the input indices); ``i`` is always the index
in ``inputs``. Each input is the text between the parentheses of a call, ``f(<input>)``, made of
Python literals.

Call statuses: ``ok``, ``error`` (exception, incl. recursion), ``timeout``, ``memory``,
``unserialisable`` (not built from None/bool/int/float/complex/str/bytes/list/tuple/dict/set),
``output_limit`` (canonical repr longer than ``max_output_chars``; never truncated), ``skipped``
(not run because an earlier input of the same program failed and ``stop_on_failure`` is set).

What is NOT reset between the evaluations of one program (they share the child process): state
kept in imported modules or other interpreter-wide objects. The determinism check runs every
program twice, in fresh processes and in opposite orders, and grading repeats the validity run's
sequence exactly, so such state cannot make grading disagree with the stored outputs.
"""

import ast
import builtins
import json
import signal
import sys
from collections.abc import Callable
from json.encoder import encode_basestring_ascii

# Not ``typing``: importing it would grow the sandboxed parent and so every fork. No ``from
# __future__`` either: the rlimit backend puts its seccomp preamble in front of this source.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any
else:
    Any = object

_SCALARS = (type(None), bool, int, float, complex, str, bytes)
#: The builtins every evaluation gets a private copy of, taken once at import (in the fork server,
#: before any fork): copying a ready dict per evaluation, not rebuilding one from the module.
_BUILTINS = dict(vars(builtins))


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
            if kind in (str, bytes) and len(v) > budget[0]:  # fail fast, before a huge repr
                raise OutputTooLarge(f"output longer than {max_chars} characters")
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


def run_call(func: Callable[..., Any], src: str | tuple[list[Any], dict[str, Any]], timeout_s: float,
             max_chars: int) -> dict[str, Any]:
    """Evaluate ``func(<src>)`` under the timer and return the call record (never raises Exception);
    ``src`` may be the arguments already parsed (:func:`prepare`)."""
    try:
        args, kwargs = src if isinstance(src, tuple) else parse_call_args(src)
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


def _define(code_obj: Any, func_name: str, timeout_s: float) -> tuple[Any, str | None]:
    """Execute the compiled code in a fresh namespace; return ``func`` or the reason it failed."""
    namespace: dict[str, Any] = {"__name__": "__task__", "__builtins__": _BUILTINS.copy()}
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            exec(code_obj, namespace)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CallTimeout:
        return None, f"defining the code took more than {timeout_s}s"
    except BaseException as err:  # a failing definition is the program's result
        return None, f"{type(err).__name__}: {str(err)[:300]}"
    func = namespace.get(func_name)
    if not callable(func):
        return None, f"code does not define a function {func_name!r}"
    return func, None


def json_line(record: dict[str, Any]) -> str:
    """``json.dumps(record) + "\\n"``, the same text, built directly where every key is text and
    every value text, an int or None (the records of :func:`run_program` and the fork server):
    the forked child then touches far fewer objects than the json encoder machinery would.
    Anything else goes to ``json.dumps``. Readers still parse and check every line."""
    parts = []
    for key, value in record.items():
        kind = type(value)
        if kind is str:
            text = encode_basestring_ascii(value)
        elif value is None:
            text = "null"
        elif kind is int:
            text = int.__repr__(value)
        else:
            return json.dumps(record) + "\n"
        if type(key) is not str:
            return json.dumps(record) + "\n"
        parts.append(encode_basestring_ascii(key) + ": " + text)
    return "{" + ", ".join(parts) + "}\n"


#: Sources up to these sizes are compiled and parsed ahead (:func:`prepare`); larger ones in the child.
PREPARE_MAX_CODE, PREPARE_MAX_INPUT = 20_000, 4_000


def prepare(prog: dict[str, Any]) -> None:
    """Compile ``code`` and parse ``inputs`` into ``prog`` (keys ``compiled``, ``parsed``) where that
    succeeds, so every child starts from them (compiling is not running: the fork server does it
    for the whole batch before its first fork, which saves each child the pages the compiler and
    parser would write). Failures and large sources are left to the child, which reports them.
    Parsed arguments are copied into each child (copy-on-write): no evaluation sees another's."""
    code = prog["code"]
    if type(code) is not str or len(code) > PREPARE_MAX_CODE:
        return
    try:
        prog["compiled"] = compile(code, "<task>", "exec")
    except BaseException:  # the child compiles again and reports the error
        return
    parsed: list[Any] = []
    for src in prog["inputs"]:
        try:
            parsed.append(parse_call_args(src) if type(src) is str and len(src) <= PREPARE_MAX_INPUT else src)
        except (ValueError, RecursionError, MemoryError):
            parsed.append(src)
    prog["parsed"] = parsed


def run_program(prog: dict[str, Any], timeout_s: float, max_chars: int,
                emit: Callable[[dict[str, Any]], None], stop_on_failure: bool = True) -> None:
    """Define ``prog['func']`` afresh for every input of ``prog['inputs']`` (in ``prog['order']``)
    and call it, emitting records; never raises for the program's own failures.

    With ``stop_on_failure`` the remaining inputs are skipped after the first failing call (their
    records say so), so a looping program costs one call timeout, not one per input.
    """
    signal.signal(signal.SIGALRM, _on_alarm)
    inputs = list(prog.get("parsed") or prog["inputs"])
    order = list(prog.get("order") or range(len(inputs)))
    func_name = str(prog.get("func", "f"))
    error = None
    try:
        code_obj = prog["compiled"] if "compiled" in prog else compile(prog["code"], "<task>", "exec")
    except BaseException as err:  # syntax errors, nesting limits: the program's result
        error = f"{type(err).__name__}: {str(err)[:300]}"
    failed = False
    for i in order if error is None else []:
        if failed:
            emit({"kind": "call", "id": prog["id"], "i": i, "status": "skipped", "output": None,
                  "error": "skipped after an earlier failure"})
            continue
        func, error = _define(code_obj, func_name, timeout_s)
        if error is not None:
            break
        record = run_call(func, inputs[i], timeout_s, max_chars)
        failed = stop_on_failure and record["status"] != "ok"
        emit({"kind": "call", "id": prog["id"], "i": i, **record})
    emit({"kind": "program", "id": prog["id"], "status": "error" if error else "ok", "error": error})

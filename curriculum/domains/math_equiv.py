"""Answer extraction and symbolic equivalence for the math domain.

``\\boxed{}`` answers are converted from a LaTeX subset to sympy syntax on the host (pure string
work), compared exactly when both sides are plain numbers (no sympy needed), and otherwise compared
with sympy *inside the sandbox*: ``parse_expr`` evaluates text, and ``simplify`` can run for a
very long time, so each comparison runs under the harness' per-call timer and the sandbox's CPU,
memory and wall limits. A comparison that times out or fails to parse is ``None`` (undecided),
never a hang and never an exception.
"""

from __future__ import annotations

import re
from fractions import Fraction

from curriculum.sandbox.base import ExecutionResult, Limits, Sandbox
from curriculum.sandbox.batch import BatchRunner, Program

_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)(/-?\d+)?$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")

SYMPY_PROGRAM = '''
import sympy
from sympy.parsing.sympy_parser import (convert_xor, implicit_multiplication_application,
                                        parse_expr, standard_transformations)

_T = standard_transformations + (implicit_multiplication_application, convert_xor)

def _same(x, y):
    ex = parse_expr(x, transformations=_T, evaluate=True)
    ey = parse_expr(y, transformations=_T, evaluate=True)
    if ex == ey:
        return True
    diff = sympy.simplify(ex - ey)
    if diff == 0:
        return True
    verdict = ex.equals(ey)
    return bool(verdict) if verdict is not None else False

def f(xs, ys):
    return len(xs) == len(ys) and all(_same(x, y) for x, y in zip(xs, ys))
'''


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            content = text[start:i - 1].strip()
            return content or None
    return None


def _replace_command(text: str, command: str, n_args: int, template: str) -> str:
    """Replace ``\\command{a}{b}`` (balanced) with ``template.format(a, b)``."""
    pattern = "\\" + command
    while True:
        at = text.find(pattern + "{")
        if at < 0:
            return text
        args, i = [], at + len(pattern)
        for _ in range(n_args):
            if i >= len(text) or text[i] != "{":
                return text
            depth, j = 1, i + 1
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            if depth:
                return text
            args.append(text[i + 1:j - 1])
            i = j
        text = text[:at] + template.format(*args) + text[i:]


def latex_to_sympy(answer: str) -> str:
    """Best-effort conversion of a LaTeX answer to sympy's input syntax."""
    s = answer.strip().strip("$").strip()
    s = _replace_command(s, "text", 1, "{0}")
    s = _replace_command(s, "mathrm", 1, "{0}")
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\ ", ""),
                     ("\\displaystyle", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("^\\circ", ""),
                     ("^{\\circ}", ""), ("\\%", ""), ("%", ""), ("\\cdot", "*"), ("\\times", "*"),
                     ("\\div", "/"), ("\\pi", "pi"), ("\\infty", "oo"), ("\\le", "<="), ("\\ge", ">=")):
        s = s.replace(old, new)
    s = _replace_command(s, "frac", 2, "(({0})/({1}))")
    s = re.sub(r"\\sqrt\[([^\]]+)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", s)
    s = _replace_command(s, "sqrt", 1, "sqrt({0})")
    s = s.replace("^", "**").replace("{", "(").replace("}", ")").replace("\\", "")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s.strip().rstrip(".")


def split_top_level(text: str) -> list[str]:
    """Split a tuple/list answer on commas outside brackets (outer brackets removed)."""
    if len(text) >= 2 and text[0] in "([" and text[-1] in ")]" and _balanced_inside(text):
        text = text[1:-1]
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _balanced_inside(text: str) -> bool:
    depth = 0
    for ch in text[1:-1]:
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        if depth < 0:
            return False
    return depth == 0


def numeric_equal(a: str, b: str) -> bool | None:
    """Exact comparison when both sides are plain numbers; ``None`` when either is not."""
    if not (_NUMBER.match(a) and _NUMBER.match(b)):
        return None
    try:
        return Fraction(a) == Fraction(b)
    except (ValueError, ZeroDivisionError):
        return None


class Equivalence:
    """Decides whether answers are equal; sympy work runs batched in the sandbox."""

    def __init__(self, sandbox: Sandbox, timeout_s: float = 5.0, limits: Limits | None = None) -> None:
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.limits = limits or Limits(cpu_s=60, wall_s=60.0, memory_mb=2048)

    def many(self, pairs: list[tuple[str, str]]) -> list[bool | None]:
        """One verdict per pair: True, False, or None (undecided: timeout, parse error, infra)."""
        verdicts: list[bool | None] = []
        pending: list[tuple[int, list[str], list[str]]] = []
        for i, (a, b) in enumerate(pairs):
            xs, ys = split_top_level(latex_to_sympy(a)), split_top_level(latex_to_sympy(b))
            if xs == ys and xs:
                verdicts.append(True)
                continue
            quick = [numeric_equal(x, y) for x, y in zip(xs, ys, strict=False)] if len(xs) == len(ys) else [False]
            if xs and all(q is not None for q in quick):
                verdicts.append(all(quick))
                continue
            verdicts.append(None)
            pending.append((i, xs, ys))
        if pending:
            inputs = tuple(f"{xs!r}, {ys!r}" for _, xs, ys in pending)
            runner = BatchRunner(_SitePackages(self.sandbox), self.limits, self.timeout_s, 10_000,
                                 stop_on_failure=False)
            result = runner.run([Program("equiv", SYMPY_PROGRAM, inputs)])[0]
            for (i, _, _), call in zip(pending, result.calls, strict=False):
                verdicts[i] = {"True": True, "False": False}.get(call.output or "") if call.status == "ok" else None
        return verdicts

    def equal(self, a: str, b: str) -> bool | None:
        return self.many([(a, b)])[0]


class _SitePackages:
    """Adapter: the same sandbox, with the project's site-packages importable (for sympy)."""

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner
        self.name = inner.name
        self.isolates_fs_and_network = inner.isolates_fs_and_network
        self.host_python = inner.host_python

    def run_python(self, code: str, stdin: bytes = b"", limits: Limits | None = None,
                   site_packages: bool = True, hash_seed: int | None = None) -> ExecutionResult:
        return self.inner.run_python(code, stdin, limits, site_packages=True, hash_seed=hash_seed)

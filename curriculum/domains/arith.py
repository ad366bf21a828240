"""Integer arithmetic: the toy domain that lets the whole method run on a CPU.

Task format
    An expression over the integers with binary ``+ - *``, parentheses and numbers 0–999, e.g.
    ``12*(3+45)-7``. Single spaces between tokens are tolerated; nothing may follow the expression.

Generator prompt
    The fixed prefix :data:`GENERATOR_PROMPT` (``"Q:"``). The tiny character-level generator built
    by :mod:`curriculum.rl.bootstrap` completes it with one expression and then emits EOS. A leading
    ``Q:`` in a completion is stripped, so both the bare completion and prompt+completion parse.

Validity (cheap, no sandbox)
    Parses completely; parentheses balanced; 1–6 operators (configurable); every literal 0–999
    without leading zeros; every intermediate and the final value within ``max_abs_value``.

Topic
    Operator signature ``<dominant operator>:<operator count>``, e.g. ``mul:3``; ties between
    operators resolve in the order mul, sub, add.

Grading
    The last integer in the answer (``-?\\d+``) must equal the value of the expression.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from curriculum.domains.base import ParseResult, Task, Validity, validate_each

NAME = "arith"
GENERATOR_PROMPT = "Q:"
_OPS = {"+": "add", "-": "sub", "*": "mul"}
_TOPIC_ORDER = ("mul", "sub", "add")
_INT_RE = re.compile(r"-?\d+")
_MAX_TEXT_CHARS = 512


class ArithError(ValueError):
    """Raised inside the parser only; the public API turns it into a reason string."""


@dataclass(frozen=True)
class Analysis:
    """What the parser learns about an expression."""

    canonical: str
    value: int
    op_counts: dict[str, int]
    max_depth: int
    max_abs_intermediate: int

    @property
    def n_ops(self) -> int:
        return sum(self.op_counts.values())


class _Parser:
    """Recursive descent over ``expr := term (('+'|'-') term)*; term := atom ('*' atom)*``."""

    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0
        self.max_seen_depth = 0
        self.max_depth = max_depth
        self.op_counts = {"add": 0, "sub": 0, "mul": 0}
        self.max_abs = 0
        self.out: list[str] = []

    def _skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def _peek(self) -> str:
        self._skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _track(self, value: int) -> int:
        self.max_abs = max(self.max_abs, abs(value))
        return value

    def parse(self) -> int:
        value = self._expr()
        if self._peek():
            raise ArithError(f"trailing text at position {self.pos}: {self.text[self.pos:self.pos + 10]!r}")
        return value

    def _expr(self) -> int:
        value = self._term()
        while self._peek() in ("+", "-"):
            op = self.text[self.pos]
            self.pos += 1
            self.op_counts[_OPS[op]] += 1
            self.out.append(op)
            rhs = self._term()
            value = self._track(value + rhs if op == "+" else value - rhs)
        return value

    def _term(self) -> int:
        value = self._atom()
        while self._peek() == "*":
            self.pos += 1
            self.op_counts["mul"] += 1
            self.out.append("*")
            value = self._track(value * self._atom())
        return value

    def _atom(self) -> int:
        ch = self._peek()
        if ch == "(":
            self.pos += 1
            self.depth += 1
            if self.depth > self.max_depth:
                raise ArithError(f"parentheses nested deeper than {self.max_depth}")
            self.max_seen_depth = max(self.max_seen_depth, self.depth)
            self.out.append("(")
            value = self._expr()
            if self._peek() != ")":
                raise ArithError(f"unbalanced parentheses: expected ')' at position {self.pos}")
            self.pos += 1
            self.depth -= 1
            self.out.append(")")
            return value
        return self._number()

    def _number(self) -> int:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isdigit() and self.text[self.pos].isascii():
            self.pos += 1
        digits = self.text[start:self.pos]
        if not digits:
            found = self.text[start:start + 1] or "end of text"
            raise ArithError(f"expected a number or '(' at position {start}, found {found!r}")
        if len(digits) > 1 and digits[0] == "0":
            raise ArithError(f"leading zero in {digits!r}")
        if len(digits) > 3:
            raise ArithError(f"number {digits} outside 0-999")
        self.out.append(digits)
        return self._track(int(digits))


def analyse(text: str, max_depth: int = 6) -> Analysis:
    """Parse ``text`` (raises :class:`ArithError` with the reason)."""
    if len(text) > _MAX_TEXT_CHARS:
        raise ArithError(f"expression longer than {_MAX_TEXT_CHARS} characters")
    parser = _Parser(text, max_depth)
    value = parser.parse()
    return Analysis(
        canonical="".join(parser.out),
        value=value,
        op_counts=dict(parser.op_counts),
        max_depth=parser.max_seen_depth,
        max_abs_intermediate=parser.max_abs,
    )


def complexity(task: Task) -> float:
    """Difficulty proxy used by the synthetic solver and the benchmarks.

    ``1.0*add + 1.25*sub + 2.0*mul + 0.5*paren_depth + 0.25*digits(|value|)``: multiplications
    dominate (they are what a weak solver gets wrong), nesting and long answers add a little.
    Raises :class:`ArithError` if the task text is not an expression.
    """
    info = analyse(_strip_prompt(task.text))
    digits = len(str(abs(info.value)))
    counts = info.op_counts
    return (
        1.0 * counts["add"] + 1.25 * counts["sub"] + 2.0 * counts["mul"]
        + 0.5 * info.max_depth + 0.25 * digits
    )


def _strip_prompt(text: str) -> str:
    text = text.strip()
    return text[len(GENERATOR_PROMPT):].strip() if text.startswith(GENERATOR_PROMPT) else text


def extract_last_int(answer: str) -> int | None:
    """The last integer in ``answer`` (``None`` when there is none)."""
    found = _INT_RE.findall(answer[-4096:])
    return int(found[-1]) if found else None


class ArithDomain:
    """Integer arithmetic expressions (see the module docstring for the exact rules)."""

    name = NAME

    def __init__(self, min_ops: int = 1, max_ops: int = 6, max_abs_value: int = 10**12,
                 max_depth: int = 6) -> None:
        if not 1 <= min_ops <= max_ops:
            raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
        self.min_ops = min_ops
        self.max_ops = max_ops
        self.max_abs_value = max_abs_value
        self.max_depth = max_depth

    def generator_prompts(self, n: int, seed: int) -> list[str]:
        return [GENERATOR_PROMPT] * n

    def parse(self, completion: str) -> ParseResult:
        text = _strip_prompt(completion)
        if not text:
            return ParseResult.failure("empty expression")
        try:
            info = analyse(text, self.max_depth)
        except ArithError as err:
            return ParseResult.failure(f"parse error: {err}")
        except RecursionError:
            return ParseResult.failure("parse error: nesting too deep")
        return ParseResult.success(Task(NAME, info.canonical, {"expr": info.canonical}))

    def check(self, task: Task) -> Validity:
        try:
            info = analyse(_strip_prompt(task.text), self.max_depth)
        except (ArithError, RecursionError) as err:
            return Validity.invalid(task, f"parse error: {err}")
        if not self.min_ops <= info.n_ops <= self.max_ops:
            return Validity.invalid(task, f"{info.n_ops} operators, allowed {self.min_ops}-{self.max_ops}")
        if info.max_abs_intermediate > self.max_abs_value:
            return Validity.invalid(task, f"magnitude {info.max_abs_intermediate} > {self.max_abs_value}")
        payload = {"expr": info.canonical, "answer": info.value, "op_counts": info.op_counts}
        return Validity.ok(Task(NAME, info.canonical, payload))

    def reference_text(self, task: Task) -> str:
        return GENERATOR_PROMPT + _strip_prompt(task.text)

    def solver_prompt(self, task: Task) -> str:
        return f"Compute: {_strip_prompt(task.text)}\nAnswer with a single integer."

    def grade(self, task: Task, answer: str) -> bool | None:
        gold = task.payload.get("answer")
        if gold is None:
            try:
                gold = analyse(_strip_prompt(task.text)).value
            except ArithError:
                return None
        got = extract_last_int(answer)
        return got is not None and got == int(gold)

    def topic(self, task: Task) -> str:
        try:
            counts = analyse(_strip_prompt(task.text)).op_counts
        except ArithError:
            return "invalid"
        best = max(_TOPIC_ORDER, key=lambda op: (counts[op], -_TOPIC_ORDER.index(op)))
        return f"{best}:{sum(counts.values())}"

    def validate_batch(self, completions: list[str]) -> list[Validity]:
        return validate_each(self, completions)

    def mix_features(self, task: Task) -> dict[str, list[str]]:
        """What a trainer sees of the served mix (``/v1/tasks/stats``): the operator count, the operator
        kinds the task uses, and the answer's digits (sign excluded); empty for an unparsable task."""
        try:
            info = analyse(_strip_prompt(task.text))
        except ArithError:
            return {}
        return {"operators": [str(info.n_ops)], "operator kinds": sorted(k for k, n in info.op_counts.items() if n),
                "answer digits": [str(len(str(abs(info.value))))]}


def random_expression(rng: random.Random, n_ops: int, max_abs_value: int = 10**12) -> str:
    """A random valid expression with exactly ``n_ops`` operators (used for pretraining corpora)."""
    for _ in range(1000):
        text = _random_tree(rng, n_ops, top=True)
        info = analyse(text)
        if info.max_abs_intermediate <= max_abs_value:
            return text
    raise RuntimeError(f"could not build an expression with {n_ops} operators within {max_abs_value}")


def _random_number(rng: random.Random) -> str:
    digits = rng.choices((1, 2, 3), weights=(5, 4, 2))[0]
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return str(rng.randint(low, 10**digits - 1))


def _random_tree(rng: random.Random, n_ops: int, top: bool = False) -> str:
    if n_ops == 0:
        return _random_number(rng)
    left_ops = rng.randint(0, n_ops - 1)
    op = rng.choices(("+", "-", "*"), weights=(4, 3, 3))[0]
    left = _random_tree(rng, left_ops)
    right = _random_tree(rng, n_ops - 1 - left_ops)
    wrap_p = 0.0 if top else (0.6 if op in "+-" else 0.2)
    text = f"{left}{op}{right}"
    if rng.random() < wrap_p and not math.isclose(wrap_p, 0.0):
        return f"({text})"
    return text

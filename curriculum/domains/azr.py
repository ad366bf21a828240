"""AZR code induction (the function-induction format of Absolute Zero, as used by PROPEL).

Generator output format (exactly; anything outside fenced blocks is ignored)::

    ```python
    def f(words, k):
        ...
    ```
    ```input
    ["apple", "kiwi"], 2
    ```
    ... at least 10 ``input`` blocks in total ...
    ```message
    A natural-language hint about what f does.
    ```

Parsing rules: a block is a complete fence (opening ```` ```tag ```` line, closing ```` ``` ````);
an unclosed trailing fence is ignored. Tags are case-insensitive; ``python``/``py`` is the code.
The last complete code block and the last complete message block win; of the input blocks the
last 10 distinct ones are used (distinct after literal evaluation). Each input is the text that
goes between the parentheses of a call ``f(<input>)`` and must consist of Python literals
(positional and keyword arguments). The first 5 inputs are shown to the solver with their outputs
and the message; the last 5 are hidden and used for grading.

Validity: the code parses; exactly one top-level ``def`` (renamed to ``f``; only imports and a
docstring may sit beside it); no banned imports, names, dunder attributes or computed ``getattr``
(:mod:`curriculum.domains.azr_static`, configurable); every input runs in the sandbox within the
per-call limits; outputs are built from plain types (canonical repr, JSON-safe strings) and are
identical in two separate sandbox processes that evaluate the inputs in opposite orders (hash
randomisation and address layout differ between them; otherwise invalid with reason
``nondeterministic: ...``); a program that writes results that are not its own is invalid with
reason ``tampering: ...``. Every program runs in its own fresh process, with a fresh namespace for
every input (:mod:`curriculum.sandbox.forkserver`). Gold outputs are stored whole in
``payload["outputs"]``, never truncated; they come from the run that evaluates the hidden inputs
first, in order, exactly as grading evaluates them, so the gold code always re-grades perfectly.

Grading: the solver answers with a function (last complete ```python block, or the whole answer
if it contains ``def``); it must pass the same static policy, then runs on the 5 hidden inputs in
the sandbox and must reproduce every gold output. A solver function that crashes or times out is
a wrong answer (``False``); ``None`` means the sandbox itself failed (infrastructure).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from curriculum.domains.azr_static import StaticError, StaticPolicy, normalise_program, program_topic
from curriculum.domains.base import ParseResult, Task, Validity, unparsed_task
from curriculum.sandbox.backends import get_sandbox
from curriculum.sandbox.base import Limits, Sandbox
from curriculum.sandbox.batch import BatchRunner, Program, ProgramResult, compare_runs
from curriculum.sandbox.harness import parse_call_args

NAME = "azr"
N_INPUTS = 10
N_SHOWN = 5
MAX_INPUT_CHARS = 500
MAX_MESSAGE_CHARS = 2000
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)\r?\n?[ \t]*```", re.DOTALL)

_SEED_FUNCTIONS = (
    'def f(nums, k):\n    return sorted(nums)[-k:]',
    'def f(s):\n    out = []\n    for ch in s:\n        out.append(ch.upper() if ch in "aeiou" else ch)\n    '
    'return "".join(out)',
    'def f(d, key):\n    return {k: v * 2 for k, v in d.items() if k != key}',
    'def f(n):\n    total = 0\n    while n:\n        total += n % 10\n        n //= 10\n    return total',
)
_INSTRUCTION = (
    "Design a Python function f and inputs for a code-induction puzzle: a solver will see the "
    "message and 5 input/output pairs and must write f so that it reproduces the outputs of 5 "
    "hidden inputs. f must be deterministic, use only the standard library (no random, time, os, "
    "sys, I/O or threads), and take plain literal arguments.\n"
    "Answer with one ```python block defining f, at least 10 ```input blocks (each is the argument "
    "list of one call, e.g. [1, 2], 3), and one ```message block with a short hint.\n"
    "Here is a reference function for inspiration; write a different one:\n```python\n{seed}\n```\n"
)


@dataclass(frozen=True)
class ParsedBlocks:
    code: str
    inputs: list[str]
    message: str


def extract_blocks(text: str) -> ParsedBlocks | str:
    """The code, inputs and message of a generator completion, or the reason they are missing."""
    code, message, inputs = None, None, []
    for match in _FENCE.finditer(text):
        tag, body = match.group(1).lower(), match.group(2)
        if tag in ("python", "py"):
            code = body
        elif tag == "input":
            inputs.append(body.strip())
        elif tag == "message":
            message = body.strip()
    if code is None:
        return "no complete ```python block"
    if message is None or not message:
        return "no complete, non-empty ```message block"
    return ParsedBlocks(code, inputs, message)


def _distinct_inputs(inputs: list[str]) -> list[str] | str:
    seen: dict[str, str] = {}
    for src in inputs:
        if len(src) > MAX_INPUT_CHARS:
            return f"input longer than {MAX_INPUT_CHARS} characters"
        try:
            args, kwargs = parse_call_args(src)
        except ValueError as err:
            return f"bad input {src[:40]!r}: {err}"
        key = repr((args, sorted(kwargs.items())))
        seen.pop(key, None)
        seen[key] = src
    return list(seen.values())


def render(code: str, inputs: list[str], message: str) -> str:
    """The canonical task text (the generator format, normalised)."""
    parts = [f"```python\n{code}\n```"]
    parts += [f"```input\n{src}\n```" for src in inputs]
    parts.append(f"```message\n{message}\n```")
    return "\n".join(parts)


def extract_answer_code(answer: str) -> str | None:
    """The solver's function: the last complete ```python block, or the answer if it has a def."""
    blocks = [m.group(2) for m in _FENCE.finditer(answer) if m.group(1).lower() in ("python", "py", "")]
    if blocks:
        return blocks[-1]
    return answer if "def " in answer else None


class AzrDomain:
    """Code induction; validity and grading execute code in the sandbox (``sandbox`` option)."""

    name = NAME

    def __init__(self, sandbox: str | Sandbox = "auto", limits: Limits | None = None,
                 call_timeout_s: float = 1.0, policy: StaticPolicy | None = None,
                 max_output_chars: int = 1_000_000) -> None:
        self._sandbox_spec = sandbox
        self._sandbox: Sandbox | None = None if isinstance(sandbox, str) else sandbox
        self.limits = limits or Limits(cpu_s=20, wall_s=30.0)
        self.call_timeout_s = call_timeout_s
        self.policy = policy or StaticPolicy()
        self.max_output_chars = max_output_chars

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            spec = self._sandbox_spec
            self._sandbox = get_sandbox(spec if isinstance(spec, str) else "auto", self.limits)
        return self._sandbox

    def runner(self) -> BatchRunner:
        return BatchRunner(self.sandbox, self.limits, self.call_timeout_s, self.max_output_chars)

    def generator_prompts(self, n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        return [_INSTRUCTION.format(seed=rng.choice(_SEED_FUNCTIONS)) for _ in range(n)]

    def parse(self, completion: str) -> ParseResult:
        blocks = extract_blocks(completion)
        if isinstance(blocks, str):
            return ParseResult.failure(blocks)
        if len(blocks.message) > MAX_MESSAGE_CHARS:
            return ParseResult.failure(f"message longer than {MAX_MESSAGE_CHARS} characters")
        inputs = _distinct_inputs(blocks.inputs)
        if isinstance(inputs, str):
            return ParseResult.failure(inputs)
        if len(inputs) < N_INPUTS:
            return ParseResult.failure(f"need at least {N_INPUTS} distinct inputs, found {len(inputs)}")
        inputs = inputs[-N_INPUTS:]
        payload = {"code": blocks.code, "inputs": inputs, "message": blocks.message, "n_shown": N_SHOWN}
        return ParseResult.success(Task(NAME, render(blocks.code, inputs, blocks.message), payload))

    def _static(self, task: Task) -> Task | str:
        try:
            code = normalise_program(str(task.payload["code"]), self.policy)
        except StaticError as err:
            return str(err)
        payload = {**task.payload, "code": code}
        return Task(NAME, render(code, list(payload["inputs"]), str(payload["message"])), payload)

    def check(self, task: Task) -> Validity:
        return self._check_many([task])[0]

    def _check_many(self, tasks: list[Task]) -> list[Validity]:
        staged: list[Task | str] = [self._static(t) for t in tasks]
        programs = [Program(str(i), t.payload["code"], tuple(t.payload["inputs"]), order=grading_order(t))
                    for i, t in enumerate(staged) if isinstance(t, Task)]
        first, second = self.runner().run_twice(programs) if programs else ([], [])
        by_id = {a.id: (a, b) for a, b in zip(first, second, strict=True)}
        out: list[Validity] = []
        for i, (orig, t) in enumerate(zip(tasks, staged, strict=True)):
            if isinstance(t, str):
                out.append(Validity.invalid(orig, f"static check: {t}"))
            else:
                out.append(_judge(t, *by_id[str(i)]))
        return out

    def validate_batch(self, completions: list[str]) -> list[Validity]:
        parsed = [self.parse(c) for c in completions]
        tasks = [p.task for p in parsed if p.task is not None]
        checked = iter(self._check_many(tasks))
        return [next(checked) if p.task is not None
                else Validity.invalid(unparsed_task(NAME, c), p.reason or "parse error")
                for c, p in zip(completions, parsed, strict=True)]

    def reference_text(self, task: Task) -> str:
        return task.text

    def solver_prompt(self, task: Task) -> str:
        outputs = task.payload.get("outputs")
        if not outputs:
            raise ValueError("task has no gold outputs; run check() before building the solver prompt")
        shown = int(task.payload.get("n_shown", N_SHOWN))
        pairs = "\n".join(f"f({src}) == {out}" for src, out in zip(task.payload["inputs"][:shown], outputs[:shown],
                                                                      strict=True))
        return (f"Infer the Python function f from its examples.\nMessage: {task.payload['message']}\n"
                f"Examples:\n{pairs}\n"
                "Write f so that it reproduces these outputs and generalises to hidden inputs. "
                "Answer with a single ```python block defining f.")

    def grade(self, task: Task, answer: str) -> bool | None:
        outputs = task.payload.get("outputs")
        if not outputs:
            return None
        code = extract_answer_code(answer)
        if code is None:
            return False
        try:
            code = normalise_program(code, self.policy)
        except StaticError:
            return False
        shown = int(task.payload.get("n_shown", N_SHOWN))
        hidden = tuple(task.payload["inputs"][shown:])
        result = self.runner().run([Program("answer", code, hidden)])[0]
        if result.infra:
            return None
        return result.ok and all(c.status == "ok" for c in result.calls) and \
            [c.output for c in result.calls] == list(outputs[shown:])

    def topic(self, task: Task) -> str:
        return program_topic(str(task.payload.get("code", "")))


def grading_order(task: Task) -> tuple[int, ...]:
    """Hidden inputs first, in order (as :meth:`AzrDomain.grade` evaluates them), then the shown ones."""
    n, shown = len(task.payload["inputs"]), int(task.payload.get("n_shown", N_SHOWN))
    return (*range(shown, n), *range(shown))


def _judge(task: Task, first: ProgramResult, second: ProgramResult) -> Validity:
    """Validity of one program from its two sandbox runs."""
    if first.infra or second.infra:
        return Validity.invalid(task, f"sandbox infrastructure error: {first.reason or second.reason}")
    for run in (first, second):
        if run.status == "tampering":
            return Validity.invalid(task, f"tampering: {run.reason}")
    for run in (first, second):
        if not run.ok:
            return Validity.invalid(task, f"execution {run.status}: {run.reason}")
        failures = [(i, call) for i, call in enumerate(run.calls) if call.status != "ok"]
        if failures:  # report the call that failed, not one skipped after it
            i, call = next(((i, c) for i, c in failures if c.status != "skipped"), failures[0])
            return Validity.invalid(task, f"input {i} {call.status}: {call.error}")
    difference = compare_runs(first, second)
    if difference:
        return Validity.invalid(task, difference)
    return Validity.ok(Task(NAME, task.text, {**task.payload, "outputs": first.outputs}))

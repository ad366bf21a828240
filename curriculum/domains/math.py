"""Competition-style math problems with a final answer in ``\\boxed{}``.

Generator output format::

    Problem: <statement>
    Answer: \\boxed{<final answer>}

Parsing: the last ``\\boxed{...}`` (balanced braces) is the generator's answer; the statement is the
text before an ``Answer:``/``Solution:`` marker (or before that box), without a leading
``Problem:`` label. Validity needs a statement (at least 10 characters with a letter) and an
extractable answer of at most 200 characters.

Reference answers (oracle-agreement policy): with ``oracles`` configured (any
:class:`~curriculum.common.solver_api.SolverBackend`), each oracle answers the solver prompt
``oracle_attempts`` times and the task is valid only when *every* attempt yields a boxed answer
and all of them are equivalent; the first oracle answer becomes the reference. Any missing
completion or undecided comparison makes the task invalid with the reason. With **no oracles
configured, the generator's own boxed answer is the reference** (``reference_source="generator"``),
which is only as trustworthy as the generator.

Grading: the last ``\\boxed{}`` of the solver answer must be equivalent to the reference
(:mod:`curriculum.domains.math_equiv`: exact for plain numbers, sympy in the sandbox otherwise,
with a per-comparison timeout). ``None`` when the comparison could not be decided.
The reference model reads the problem statement only (``Problem: ...``), not the generator's answer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.base import ParseResult, Task, Validity, validate_each
from curriculum.domains.math_equiv import Equivalence, last_boxed
from curriculum.sandbox.backends import get_sandbox
from curriculum.sandbox.base import Sandbox

NAME = "math"
MAX_ANSWER_CHARS = 200
_MARKER = re.compile(r"(?im)^\s*(answer|solution|final answer)\s*:")
_LABEL = re.compile(r"(?i)^\s*problem\s*:\s*")

_EXAMPLES = (
    ("A baker sells 12 muffins per hour for 7 hours and then 5 muffins per hour for 3 hours. "
     "How many muffins does she sell in total?", "99"),
    ("What is the remainder when 2^{20} is divided by 7?", "4"),
    ("Find the sum of all real solutions of x^2 - 5x + 6 = 0.", "5"),
    ("A rectangle has perimeter 30 and area 56. What is the length of its diagonal?", "\\sqrt{113}"),
    ("How many positive divisors does 360 have?", "24"),
    ("Simplify \\frac{3}{4} + \\frac{5}{6}.", "\\frac{19}{12}"),
)
_TOPICS = (
    ("probability", ("probability", "random", "dice", "coin", "chance")),
    ("geometry", ("triangle", "circle", "rectangle", "area", "angle", "perimeter", "radius", "diagonal")),
    ("number_theory", ("remainder", "divisor", "prime", "divisible", "gcd", "modulo", "digit")),
    ("combinatorics", ("how many ways", "arrange", "choose", "permutation", "combination")),
    ("algebra", ("solve", "equation", "polynomial", "x^", "root", "solutions", "function")),
    ("arithmetic", ("sum", "total", "product", "simplify", "how many", "cost", "per")),
)


def split_completion(completion: str) -> tuple[str, str] | str:
    """(statement, answer) of a generator completion, or the reason it has none."""
    answer = last_boxed(completion)
    if answer is None:
        return "no \\boxed{} answer"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"answer longer than {MAX_ANSWER_CHARS} characters"
    marker = _MARKER.search(completion)
    cut = marker.start() if marker else completion.rfind("\\boxed")
    statement = _LABEL.sub("", completion[:cut]).strip()
    if len(statement) < 10 or not re.search(r"[A-Za-z]", statement):
        return "no problem statement"
    return statement, answer


class MathDomain:
    """Math word problems; see the module docstring for the oracle policy."""

    name = NAME

    def __init__(self, oracles: Sequence[SolverBackend] = (), oracle_attempts: int = 2,
                 sandbox: str | Sandbox = "auto", compare_timeout_s: float = 5.0,
                 oracle_sampling: Sampling | None = None) -> None:
        if oracle_attempts < 1:
            raise ValueError(f"oracle_attempts must be >= 1, got {oracle_attempts}")
        self.oracles = list(oracles)
        self.oracle_attempts = oracle_attempts
        self.oracle_sampling = oracle_sampling or Sampling(temperature=0.7, max_tokens=1024)
        self._sandbox_spec = sandbox
        self.compare_timeout_s = compare_timeout_s
        self._equivalence: Equivalence | None = None

    @property
    def equivalence(self) -> Equivalence:
        if self._equivalence is None:
            spec = self._sandbox_spec
            sandbox = get_sandbox(spec) if isinstance(spec, str) else spec
            self._equivalence = Equivalence(sandbox, self.compare_timeout_s)
        return self._equivalence

    def generator_prompts(self, n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        prompts = []
        for _ in range(n):
            shots = rng.sample(_EXAMPLES, 2)
            demo = "\n\n".join(f"Problem: {q}\nAnswer: \\boxed{{{a}}}" for q, a in shots)
            prompts.append("Write a new competition-style math problem with a single final answer, in the "
                           f"same format as these examples.\n\n{demo}\n\nProblem:")
        return prompts

    def parse(self, completion: str) -> ParseResult:
        split = split_completion(completion)
        if isinstance(split, str):
            return ParseResult.failure(split)
        statement, answer = split
        return ParseResult.success(Task(NAME, f"Problem: {statement}",
                                        {"statement": statement, "generator_answer": answer}))

    def check(self, task: Task) -> Validity:
        statement = str(task.payload.get("statement", "")).strip()
        answer = task.payload.get("generator_answer")
        if len(statement) < 10:
            return Validity.invalid(task, "no problem statement")
        if not answer:
            return Validity.invalid(task, "no extractable answer")
        if not self.oracles:
            return Validity.ok(Task(NAME, task.text, {**task.payload, "reference_answer": answer,
                                                      "reference_source": "generator"}))
        return self._oracle_check(task)

    def _oracle_check(self, task: Task) -> Validity:
        prompt = self.solver_prompt(task)
        answers: list[str] = []
        for oracle in self.oracles:
            try:
                completions = oracle.generate([prompt], self.oracle_attempts, self.oracle_sampling)[0]
            except Exception as err:  # a broken backend makes this task unverifiable, not the batch fail
                return Validity.invalid(task, f"oracle {oracle.solver_id} raised {type(err).__name__}: {err}")
            for completion in completions:
                if completion.text is None:
                    return Validity.invalid(task, f"oracle {oracle.solver_id} failed: {completion.error}")
                boxed = last_boxed(completion.text)
                if boxed is None:
                    return Validity.invalid(task, f"oracle {oracle.solver_id} gave no \\boxed{{}} answer")
                answers.append(boxed)
        verdicts = self.equivalence.many([(answers[0], other) for other in answers[1:]])
        if any(v is None for v in verdicts):
            return Validity.invalid(task, "oracle answers could not be compared (timeout/parse)")
        if not all(verdicts):
            return Validity.invalid(task, f"oracles disagree: {answers}")
        return Validity.ok(Task(NAME, task.text, {**task.payload, "reference_answer": answers[0],
                                                  "reference_source": "oracles", "oracle_answers": answers}))

    def reference_text(self, task: Task) -> str:
        return task.text

    def solver_prompt(self, task: Task) -> str:
        return (f"{task.payload.get('statement', task.text)}\n\n"
                "Solve the problem. Put your final answer in \\boxed{}.")

    def grade(self, task: Task, answer: str) -> bool | None:
        reference = task.payload.get("reference_answer")
        if not reference:
            return None
        got = last_boxed(answer)
        if got is None:
            return False
        return self.equivalence.equal(str(reference), got)

    def topic(self, task: Task) -> str:
        text = str(task.payload.get("statement", task.text)).lower()
        for topic, words in _TOPICS:
            if any(w in text for w in words):
                return topic
        return "other"

    def validate_batch(self, completions: list[str]) -> list[Validity]:
        return validate_each(self, completions)

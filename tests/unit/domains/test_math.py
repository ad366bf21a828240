"""Math domain: parsing, oracle-agreement policy, symbolic grading with timeouts, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.math import MathDomain
from curriculum.domains.math_equiv import Equivalence, last_boxed, latex_to_sympy, split_top_level
from curriculum.sandbox import get_sandbox

GOOD = "Problem: A box holds 3 red and 5 blue balls. How many balls are there?\nAnswer: \\boxed{8}"


class FakeOracle:
    """A hand-written SolverBackend returning fixed completions."""

    def __init__(self, name: str, texts: list[str | None]) -> None:
        self.solver_id = f"fake:{name}"
        self.texts = texts
        self.calls = 0

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        self.calls += 1
        return [[Completion(t, None if t else "server down") for t in self.texts[:n]] for _ in prompts]


@pytest.fixture(scope="module")
def equivalence() -> Equivalence:
    return Equivalence(get_sandbox("auto"), timeout_s=5.0)


def test_parse_and_generator_reference_without_oracles() -> None:
    domain = MathDomain()
    result = domain.validate_batch([GOOD])[0]
    assert result.valid
    assert result.task.payload["reference_answer"] == "8"
    assert result.task.payload["reference_source"] == "generator"
    assert domain.reference_text(result.task).startswith("Problem: A box")
    assert "\\boxed" in domain.solver_prompt(result.task) and "8}" not in domain.solver_prompt(result.task)
    assert domain.topic(result.task) == "arithmetic"


@pytest.mark.parametrize(
    ("text", "reason"),
    [("Problem: what is 2+2?", "no \\boxed{} answer"), ("\\boxed{4}", "no problem statement"),
     ("Problem: 1+1\nAnswer: \\boxed{2}", "no problem statement"),
     ("Problem: compute it please \\boxed{", "no \\boxed")],
)
def test_invalid_completions(text: str, reason: str) -> None:
    result = MathDomain().validate_batch([text])[0]
    assert not result.valid and reason in (result.reason or "")


def test_oracles_must_all_agree() -> None:
    agree = [FakeOracle("a", ["so \\boxed{8}", "\\boxed{8.0}"]), FakeOracle("b", ["\\boxed{8}", "\\boxed{16/2}"])]
    ok = MathDomain(oracles=agree, oracle_attempts=2).validate_batch([GOOD])[0]
    assert ok.valid and ok.task.payload["reference_source"] == "oracles"
    assert ok.task.payload["oracle_answers"] == ["8", "8.0", "8", "16/2"]
    disagree = [FakeOracle("a", ["\\boxed{8}", "\\boxed{8}"]), FakeOracle("b", ["\\boxed{8}", "\\boxed{9}"])]
    bad = MathDomain(oracles=disagree).validate_batch([GOOD])[0]
    assert not bad.valid and "oracles disagree" in (bad.reason or "")
    down = MathDomain(oracles=[FakeOracle("a", [None, None])]).validate_batch([GOOD])[0]
    assert not down.valid and "server down" in (down.reason or "")
    unboxed = MathDomain(oracles=[FakeOracle("a", ["eight", "eight"])]).validate_batch([GOOD])[0]
    assert not unboxed.valid and "no \\boxed" in (unboxed.reason or "")


def test_grading_uses_symbolic_equivalence() -> None:
    domain = MathDomain()
    task = domain.check(domain.parse("Problem: Find the diagonal of a 7 by 8 rectangle.\nAnswer: \\boxed{\\sqrt{113}}")
                        .task).task  # type: ignore[arg-type]
    assert domain.grade(task, "The diagonal is \\boxed{\\sqrt{113}}") is True
    assert domain.grade(task, "\\boxed{113^{1/2}}") is True
    assert domain.grade(task, "\\boxed{10.6}") is False
    assert domain.grade(task, "no box") is False


def test_equivalence_cases(equivalence: Equivalence) -> None:
    pairs = [("\\frac{1}{2}", "0.5"), ("2\\sqrt{2}", "\\sqrt{8}"), ("(1, 2)", "(1,2)"), ("x^2+2x+1", "(x+1)^2"),
             ("1,000", "1000"), ("3", "4"), ("\\pi", "3.14"), ("x+", "1")]
    assert equivalence.many(pairs) == [True, True, True, True, True, False, False, None]


def test_comparison_cannot_hang(equivalence: Equivalence) -> None:
    slow = Equivalence(equivalence.sandbox, timeout_s=0.5)
    verdict = slow.equal("2^{2^{2^{2^{2^{2}}}}}", "3^{3^{3^{3}}}")
    assert verdict in (None, False)


def test_helpers() -> None:
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{unclosed") is None
    assert latex_to_sympy("\\dfrac{3}{4}") == "((3)/(4))"
    assert split_top_level("(1, (2, 3))") == ["1", "(2, 3)"]


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_parse_fuzz_never_raises(text: str) -> None:
    parsed = MathDomain().parse(text)
    assert parsed.ok != bool(parsed.reason)


SOUP = ["Problem:", " how many", "\\boxed{", "}", "{", "Answer:", "\n", "x^2", "\\frac{1}{2}"]


@given(st.lists(st.sampled_from(SOUP), max_size=30))
@settings(max_examples=200, deadline=None)
def test_parse_fuzz_on_latex_soup(parts: list[str]) -> None:
    text = "".join(parts)
    parsed = MathDomain().parse(text)
    assert parsed.ok or (parsed.reason and isinstance(parsed.reason, str))
    latex_to_sympy(text)

"""The arith toy domain: parsing limits, topics, complexity, grading, fuzzing."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.domains.arith import ArithDomain, complexity, extract_last_int, random_expression
from curriculum.domains.base import Task

D = ArithDomain()


@pytest.mark.parametrize(
    ("text", "valid", "reason"),
    [
        ("1+2", True, None),
        ("Q:12*(3+4)", True, None),
        ("  7 - 3 * 2 ", True, None),
        ("0*5", True, None),
        ("01+2", False, "leading zero"),
        ("1000+1", False, "outside 0-999"),
        ("1+", False, "expected a number"),
        ("(1+2", False, "unbalanced"),
        ("1+2)", False, "trailing"),
        ("1+2 3", False, "trailing"),
        ("5", False, "0 operators"),
        ("1+1+1+1+1+1+1+1", False, "7 operators"),
        ("999*999*999*999*999", False, "magnitude"),
        ("1/2", False, "trailing"),
        ("-1+2", False, "expected a number"),
        ("", False, "empty"),
        ("((((((((1+2))))))))", False, "nested deeper"),
    ],
)
def test_validity_table(text: str, valid: bool, reason: str | None) -> None:
    result = D.validate_batch([text])[0]
    assert result.valid is valid
    if reason:
        assert reason in (result.reason or "")
    else:
        assert result.task.payload["answer"] == eval(text.replace("Q:", ""))


def test_topic_and_grading() -> None:
    task = D.check(Task("arith", "2*3*4+1")).task
    assert D.topic(task) == "mul:3"
    assert D.topic(Task("arith", "1+2-3")) == "sub:2"  # tie: sub before add
    assert D.grade(task, "The answer is 25.") is True
    assert D.grade(task, "I think 24, no wait, 25") is True
    assert D.grade(task, "26") is False
    assert D.grade(task, "no idea") is False
    assert D.solver_prompt(task).startswith("Compute: 2*3*4+1")
    assert D.reference_text(task) == "Q:2*3*4+1"


def test_complexity_grows_with_multiplications_and_nesting() -> None:
    simple = complexity(Task("arith", "1+2"))
    assert simple < complexity(Task("arith", "1*2")) < complexity(Task("arith", "(1*2)*3*4"))
    assert complexity(Task("arith", "12*(3+(4-5))")) > complexity(Task("arith", "12*3+4-5"))


def test_extract_last_int() -> None:
    assert extract_last_int("a -12 b 7") == 7
    assert extract_last_int("= -12") == -12
    assert extract_last_int("none") is None


def test_random_expressions_are_valid() -> None:
    rng = random.Random(0)
    for n_ops in range(1, 7):
        for _ in range(30):
            text = random_expression(rng, n_ops)
            result = D.check(Task("arith", text))
            assert result.valid, (text, result.reason)
            assert result.task.payload["answer"] == eval(text)


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_parse_never_raises_on_any_text(text: str) -> None:
    result = D.validate_batch([text])[0]
    assert result.valid or (result.reason and isinstance(result.reason, str))


@given(st.text(alphabet="0123456789+-*() Q:", max_size=40))
@settings(max_examples=400, deadline=None)
def test_parse_fuzz_on_expression_alphabet(text: str) -> None:
    parsed = D.parse(text)
    assert parsed.ok != bool(parsed.reason)
    result = D.validate_batch([text])[0]
    if result.valid:
        assert result.task.payload["answer"] == eval(result.task.text)
    else:
        assert result.reason

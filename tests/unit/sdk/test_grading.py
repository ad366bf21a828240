"""propel_sdk.grading: rewards from a frontier message alone, with the domains' own graders."""

from __future__ import annotations

import subprocess
import sys

import pytest

from curriculum.domains.arith import ArithDomain
from curriculum.domains.azr import AzrDomain
from curriculum.domains.math import MathDomain
from curriculum.sandbox import Limits
from propel_sdk.grading import GradingUnavailable, grade, reward
from testkit.messages import frontier_message


def _checked(domain: ArithDomain | MathDomain | AzrDomain, completion: str) -> dict[str, object]:
    validity = domain.validate_batch([completion])[0]
    assert validity.valid, validity.reason
    return frontier_message(domain, validity.task)


def test_import_is_torch_free() -> None:
    code = ("import sys, propel_sdk, propel_sdk.grading, propel_sdk.client, propel_sdk.aio, propel_sdk.schema\n"
            "bad = sorted(m for m in ('torch', 'transformers', 'sympy', 'curriculum') if m in sys.modules)\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_arith_from_message() -> None:
    msg = _checked(ArithDomain(), "12*(3+4)-7")
    assert "12*(3+4)-7" in str(msg["solver_prompt"])
    assert grade(msg, "The answer is 77") is True
    assert grade(msg, "76") is False
    assert grade(msg, "no idea") is False
    assert reward(msg, "= 77") == 1.0 and reward(msg, "78") == 0.0


def test_math_from_message() -> None:
    msg = _checked(MathDomain(), "Problem: What is the sum of the first ten positive integers?\n"
                                 "Answer: \\boxed{55}")
    assert grade(msg, "Adding them up gives \\boxed{55}.") is True
    assert grade(msg, "\\boxed{54}") is False
    assert grade(msg, "fifty-five") is False  # no boxed answer
    half = _checked(MathDomain(), "Problem: What is one half written as a fraction?\nAnswer: \\boxed{\\frac{1}{2}}")
    assert grade(half, "\\boxed{0.5}") is True  # sympy equivalence, in the sandbox


def test_azr_from_message() -> None:
    domain = AzrDomain(limits=Limits(cpu_s=10, wall_s=15.0, memory_mb=512), call_timeout_s=0.5)
    inputs = "".join(f"```input\n[{i}, {i + 3}, {2 * i}], {1 + i % 3}\n```\n" for i in range(10))
    msg = _checked(domain, f"```python\ndef f(nums, k):\n    return sorted(nums)[-k:]\n```\n{inputs}"
                           "```message\nKeeps the largest k values.\n```\n")
    assert grade(msg, "```python\ndef f(a, b):\n    return sorted(a)[-b:]\n```") is True
    assert grade(msg, "```python\ndef f(a, b):\n    return a[:b]\n```") is False
    assert reward(msg, "I give up") == 0.0


def test_swe_without_the_repository_names_the_fetch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PROPEL_SWE_CACHE", str(tmp_path / "empty-cache"))
    grading = {"repo": "parse", "label": "parse==1.20.2", "hash": "ab" * 32, "patch": "",
               "fail_to_pass": ["t::a"], "pass_to_pass": ["t::b"]}
    with pytest.raises(GradingUnavailable, match=r"task 7: repository parse==1\.20\.2 .*not in the local SWE "
                       r"cache: fetch it with `propel swe fetch --only parse`"):
        grade({"id": 7, "domain": "swe", "grading": grading}, "```diff\n```")
    with pytest.raises(GradingUnavailable, match="lacks label, hash, fail_to_pass, pass_to_pass"):
        grade({"domain": "swe", "grading": {"repo": "minicalc", "patch": ""}}, "```diff\n```")


def test_unknown_domain_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown domain 'chess'.*arith, azr, math, swe"):
        grade({"domain": "chess", "grading": {}}, "e4")


def test_domain_override_must_match() -> None:
    msg = _checked(ArithDomain(), "1+2")
    assert grade(msg, "3", domain=ArithDomain(max_ops=2)) is True
    with pytest.raises(ValueError, match="'arith' task but domain= is 'math'"):
        grade(msg, "3", domain=MathDomain())

"""AZR code induction: parsing, static policy, sandboxed validity, grading, topics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.domains.azr import AzrDomain, extract_blocks
from curriculum.domains.azr_static import StaticError, normalise_program, program_topic
from curriculum.sandbox import Limits

INPUTS = [f"[{i}, {i + 3}, {2 * i}], {1 + i % 3}" for i in range(10)]


def completion(code: str, inputs: list[str] = INPUTS, message: str = "Keeps the largest k values.") -> str:
    text = f"Sure!\n```python\n{code}\n```\n"
    text += "".join(f"```input\n{src}\n```\n" for src in inputs)
    return text + f"```message\n{message}\n```\n"


@pytest.fixture(scope="module")
def domain() -> AzrDomain:
    return AzrDomain(limits=Limits(cpu_s=10, wall_s=15.0, memory_mb=512), call_timeout_s=0.5)


def test_valid_task_has_whole_gold_outputs_and_solver_view(domain: AzrDomain) -> None:
    result = domain.validate_batch([completion("def top(nums, k):\n    return sorted(nums)[-k:]")])[0]
    assert result.valid, result.reason
    task = result.task
    assert task.payload["code"].startswith("def f(nums, k)")
    assert task.payload["outputs"][:3] == ["[3]", "[2, 4]", "[2, 4, 5]"]
    assert len(task.payload["outputs"]) == 10
    prompt = domain.solver_prompt(task)
    assert "Keeps the largest k values." in prompt and "f([0, 3, 0], 1) == [3]" in prompt
    assert INPUTS[7] not in prompt  # hidden inputs stay hidden
    assert domain.topic(task) == "sorting"
    assert domain.grade(task, "```python\ndef f(a, b):\n    return sorted(a)[-b:]\n```") is True
    assert domain.grade(task, "def g(a, b):\n    return sorted(a)[-b:]") is True
    assert domain.grade(task, "```python\ndef f(a, b):\n    return a[:b]\n```") is False
    assert domain.grade(task, "```python\ndef f(a, b):\n    while True:\n        pass\n```") is False
    assert domain.grade(task, "```python\nimport os\ndef f(a, b):\n    return a\n```") is False
    assert domain.grade(task, "I give up") is False


def test_large_outputs_are_stored_whole(domain: AzrDomain) -> None:
    inputs = [str(50_000 + i) for i in range(10)]
    result = domain.validate_batch([completion("def f(n):\n    return 'ab' * n", inputs)])[0]
    assert result.valid, result.reason
    assert len(result.task.payload["outputs"][0]) == 100_002


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("import os\ndef f(x, k):\n    return x", "banned import: os"),
        ("def f(x, k):\n    return __import__('os').getcwd()", "banned name: __import__"),
        ("def f(x, k):\n    return getattr(__builtins__, '__import__')('os')", "getattr on private/dunder"),
        ("def f(x, k):\n    return getattr(x, '_' + '_class__')", "computed attribute"),
        ("def f(x, k):\n    return ().__class__.__base__.__subclasses__()", "dunder attribute"),
        ("from subprocess import run\ndef f(x, k):\n    return x", "banned import: subprocess"),
        ("import os.path\ndef f(x, k):\n    return x", "banned import"),
        ("import codecs\ndef f(x, k):\n    return codecs.open('/tmp/x', 'w')", "banned import: codecs"),
        ("from _io import open as o\ndef f(x, k):\n    return x", "banned import: _io"),
        ("import timeit\ndef f(x, k):\n    return x", "banned import: timeit"),
        ("def f(x, k):\n    return eval('1')", "banned name: eval"),
        ("def f(x, k):\n    return open('/etc/passwd').read()", "banned name: open"),
        ("def f(x, k):\n    return x\ndef g(x):\n    return x", "exactly one top-level def"),
        ("x = 1\ndef f(x, k):\n    return x", "only imports and one function"),
        ("def f(x, k) return x", "does not parse"),
        ("def f(x, k):\n    return " + "+".join(["x"] * 1900), "nested too deeply"),
    ],
)
def test_static_policy_rejects_escapes(domain: AzrDomain, code: str, reason: str) -> None:
    result = domain.validate_batch([completion(code)])[0]
    assert not result.valid
    assert reason in (result.reason or ""), result.reason


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("def f(x, k):\n    return hash(str(x))", "nondeterministic"),
        ("def f(x, k):\n    return (i for i in x)", "unserialisable"),
        ("def f(x, k):\n    return f(x, k)", "RecursionError"),
        ("def f(x, k):\n    while True:\n        pass", "timeout"),
        ("def f(x, k):\n    return [0] * (10 ** 10)", "memory"),
        ("def f(x, k):\n    return x[10]", "IndexError"),
        ("def f(x, k):\n    return 'x' * (10 ** 8)", "output_limit"),
    ],
)
def test_runtime_failures_are_invalid_with_reason(domain: AzrDomain, code: str, reason: str) -> None:
    result = domain.validate_batch([completion(code)])[0]
    assert not result.valid
    assert reason in (result.reason or ""), result.reason


def test_batch_mixes_valid_and_invalid_in_order(domain: AzrDomain) -> None:
    batch = [
        completion("def f(x, k):\n    return sum(x) * k"),
        "no blocks at all",
        completion("def f(x, k):\n    return hash(str(x))"),
        completion("def f(x, k):\n    return max(x) - k"),
    ]
    results = domain.validate_batch(batch)
    assert [r.valid for r in results] == [True, False, False, True]
    assert results[1].reason == "no complete ```python block"


def test_parse_rules() -> None:
    text = completion("def f(x, k):\n    return x") + "```python\ndef f(x, k):\n    return k\n```\n```python\nunclosed"
    blocks = extract_blocks(text)
    assert not isinstance(blocks, str) and "return k" in blocks.code
    domain = AzrDomain()
    repeated = domain.parse(completion("def f(x):\n    return x", ["1"] * 12))
    assert "at least 10 distinct inputs" in (repeated.reason or "")
    assert "not made of literals" in (domain.parse(completion("def f(x):\n    return x", ["y"] * 10)).reason or "")
    assert "message" in (domain.parse(completion("def f(x):\n    return x", INPUTS, "")).reason or "")


def test_rename_and_topics() -> None:
    code = normalise_program("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)")
    assert "def f(n)" in code and "f(n - 1)" in code
    assert program_topic(code) == "recursion"
    assert program_topic("def f(s):\n    return s.upper().split()") == "string"
    assert program_topic("def f(d):\n    return {k: v for k, v in d.items()}") == "dict"
    assert program_topic("def f(a, b):\n    return a * b + 3") == "arithmetic"
    with pytest.raises(StaticError):
        normalise_program("import random\ndef f():\n    return random.random()")


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_parse_fuzz_never_raises(text: str) -> None:
    parsed = AzrDomain().parse(text)
    assert parsed.ok != bool(parsed.reason)


@given(st.lists(st.sampled_from(["```python\n", "```input\n", "```message\n", "```\n", "def f(x):\n", "  return x\n",
                                 "1, 2\n", "[1]\n", "hint\n", "((\n", "```py\n"]), max_size=40))
@settings(max_examples=200, deadline=None)
def test_parse_fuzz_on_fence_soup(parts: list[str]) -> None:
    parsed = AzrDomain().parse("".join(parts))
    assert parsed.ok or (parsed.reason and isinstance(parsed.reason, str))


def test_tampering_program_is_invalid_and_its_neighbour_keeps_real_outputs() -> None:
    from curriculum.domains.azr_static import StaticPolicy

    permissive = StaticPolicy(banned_modules=(), banned_calls=())  # as if a static check had been fooled
    domain = AzrDomain(limits=Limits(cpu_s=10, wall_s=15.0, memory_mb=512), call_timeout_s=1.0, policy=permissive)
    forger = ("import os\ndef f(x, k):\n"
              "    line = b'{\"kind\": \"call\", \"id\": \"1\", \"i\": 0, \"status\": \"ok\", \"output\": \"0\"}\\n'\n"
              "    for fd in range(3, 64):\n        try:\n            os.write(fd, line)\n"
              "        except OSError:\n            pass\n    return k\n")
    results = domain.validate_batch([completion(forger), completion("def f(x, k):\n    return sum(x) * k")])
    assert not results[0].valid and (results[0].reason or "").startswith("tampering"), results[0].reason
    assert results[1].valid, results[1].reason
    assert results[1].task.payload["outputs"][0] == str(sum([0, 3, 0]) * 1)

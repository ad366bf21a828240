"""Batched harness execution: per-call limits, attribution of crashes, determinism, canonical outputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.sandbox import BatchRunner, Limits, Program, compare_runs, get_sandbox
from curriculum.sandbox.harness import canonical_repr, json_line, parse_call_args

LIMITS = Limits(cpu_s=5, wall_s=8.0, memory_mb=512)


@pytest.fixture(scope="module")
def runner() -> BatchRunner:
    return BatchRunner(get_sandbox("auto", LIMITS), LIMITS, call_timeout_s=0.5)


def test_many_programs_in_one_process_with_failures_attributed(runner: BatchRunner) -> None:
    programs = [
        Program("ok", "def f(x, k=1):\n    return sorted(x)[:k]", ("[3, 1, 2]", "[5, 4], k=2")),
        Program("loop", "def f(x):\n    while True:\n        pass", ("1", "2")),
        Program("crash", "import os\ndef f(x):\n    os._exit(3)", ("1",)),
        Program("hog", "def f(x):\n    return bytearray(2 * 1024**3)", ("1",)),
        Program("lambda", "def f(x):\n    return lambda: x", ("1",)),
        Program("recursion", "def f(x):\n    return f(x)", ("1",)),
        Program("nodef", "x = 1", ("1",)),
        Program("after", "def f(x):\n    return {'b': x, 'a': {x, -x}}", ("2",)),
    ]
    results = {r.id: r for r in runner.run(programs)}
    assert results["ok"].outputs == ["[1]", "[4, 5]"]
    assert [c.status for c in results["loop"].calls] == ["timeout", "skipped"]
    assert results["crash"].status == "error" and results["crash"].reason
    assert results["hog"].calls[0].status == "memory"
    assert results["lambda"].calls[0].status == "unserialisable"
    assert "RecursionError" in (results["recursion"].calls[0].error or "")
    assert results["nodef"].status == "error" and "does not define" in (results["nodef"].reason or "")
    assert results["after"].outputs == ["{'b': 2, 'a': {-2, 2}}"]


def test_determinism_check_uses_two_processes(runner: BatchRunner) -> None:
    programs = [Program("hash", "def f(x):\n    return hash(str(x))", ("'abc'",)),
                Program("pure", "def f(x):\n    return x * 2", ("21",))]
    first, second = runner.run_twice(programs)
    assert compare_runs(first[0], second[0]) is not None
    assert "nondeterministic" in (compare_runs(first[0], second[0]) or "")
    assert compare_runs(first[1], second[1]) is None
    assert first[1].outputs == ["42"]


def test_large_output_is_stored_whole_or_rejected(runner: BatchRunner) -> None:
    big = runner.run([Program("big", "def f(n):\n    return 'x' * n", ("200000",))])[0]
    assert big.calls[0].status == "ok" and len(big.calls[0].output or "") == 200002
    small = BatchRunner(runner.sandbox, LIMITS, 0.5, max_output_chars=1000)
    capped = small.run([Program("big", "def f(n):\n    return 'x' * n", ("5000",))])[0]
    assert capped.calls[0].status == "output_limit"


def test_printing_does_not_corrupt_results(runner: BatchRunner) -> None:
    code = "def f(x):\n    print('{\"kind\": \"done\"}')\n    return x"
    result = runner.run([Program("p", code, ("7",))])[0]
    assert result.outputs == ["7"]


def test_parse_call_args_rejects_non_literals() -> None:
    assert parse_call_args("[1, 2], k=3") == ([[1, 2]], {"k": 3})
    for bad in ("__import__('os')", "*x", "1)", "x"):
        with pytest.raises(ValueError):
            parse_call_args(bad)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                    | st.frozensets(st.integers(), max_size=3), max_leaves=10))
@settings(max_examples=100, deadline=None)
def test_canonical_repr_round_trips_plain_values(value: object) -> None:
    text = canonical_repr(value, 100_000)
    assert canonical_repr(value, 100_000) == text
    if not isinstance(value, frozenset):
        assert text == repr(value) or "frozenset" in text or "{" in text


@given(st.dictionaries(st.text(max_size=6), st.none() | st.integers() | st.text() | st.booleans() | st.floats(),
                       max_size=6))
@settings(max_examples=200, deadline=None)
def test_json_line_is_json_dumps(record: dict[str, object]) -> None:
    """The children's fast record formatter writes exactly what ``json.dumps`` would."""
    import json

    assert json_line(record) == json.dumps(record) + "\n"


def test_the_precompiled_harness_fits_a_command_line_and_drops_only_docstrings() -> None:
    """``bootstrap()`` compiles with ``optimize=2``, which would also drop ``assert`` statements."""
    import ast

    from curriculum.sandbox.backends import MAX_ARGV_CODE
    from curriculum.sandbox.batch import HARNESS_SOURCE, bootstrap

    assert bootstrap() != HARNESS_SOURCE and len(bootstrap()) <= MAX_ARGV_CODE
    tree = ast.parse(HARNESS_SOURCE)
    assert not any(isinstance(node, ast.Assert) for node in ast.walk(tree))
    assert "__debug__" not in HARNESS_SOURCE and "__doc__" not in HARNESS_SOURCE


def test_program_ids_must_be_distinct_and_orders_permutations(runner: BatchRunner) -> None:
    with pytest.raises(ValueError, match="distinct"):
        runner.run([Program("a", "def f(x):\n    return x", ("1",)), Program("a", "def f(x):\n    return x", ("2",))])
    with pytest.raises(ValueError, match="permutation"):
        Program("a", "def f(x):\n    return x", ("1", "2"), order=(0, 0))

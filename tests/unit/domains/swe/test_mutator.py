"""The ast mutator: every operator's edit, sites, refusals with reasons, bug-spec text."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from curriculum.domains.swe.mutator import (
    OPERATORS,
    MutationError,
    enumerate_specs,
    mutate_source,
    mutation_patch,
    target_files,
)
from curriculum.domains.swe.spec import BugSpec, parse_spec

from .conftest import FIXTURE

SOURCE = '''\
class Box:
    def f(self, a, b, items):
        """Doc."""
        total = a + b * 2
        if a < b and not items:
            total -= 1
        else:
            total = b - a
        for x in items:
            total += x
        while False:
            pass
        flag: bool = True
        return total if a == b else (a ** 2) // 3
'''

EXPECTED = {
    "binop_change": "total = a - b * 2",
    "operand_swap": "total = b * 2 + a",
    "const_inc": "total = a + b * 3",
    "const_dec": "total = a + b * 1",
    "compare_flip": "if a >= b and not items:",
    "compare_boundary": "if a <= b and not items:",
    "boolop_swap": "if a < b or not items:",
    "bool_flip": "while True:",
    "remove_not": "if a < b and items:",
    "invert_if": "if not (a < b and (not items)):",
}


@pytest.mark.parametrize("operator", sorted(EXPECTED))
def test_expression_operators_edit_one_span(operator: str) -> None:
    out = mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", operator, 0))
    assert EXPECTED[operator] in out
    changed = [(a, b) for a, b in zip(SOURCE.splitlines(), out.splitlines(), strict=False) if a != b]
    assert len(changed) == 1 and len(out.splitlines()) == len(SOURCE.splitlines())
    ast.parse(out)


def test_statement_operators_remove_lines_or_leave_pass() -> None:
    loop = mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", "remove_loop", 0))
    assert "for x in items" not in loop and "total += x" not in loop
    lone = mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", "remove_assign", 1))  # total -= 1 alone in its block
    assert "total -= 1" not in lone and "        if a < b and not items:\n            pass\n" in lone
    cond = mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", "remove_if", 0))
    assert "if a < b" not in cond and "total = b - a" not in cond
    ann = mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", "remove_assign", 4))
    assert "flag: bool" not in ann


def test_every_operator_is_one_of_at_least_eight_and_has_a_description() -> None:
    assert len(OPERATORS) >= 8
    assert all(op.description and op.name == name for name, op in OPERATORS.items())


def test_refusals_are_reasons() -> None:
    with pytest.raises(MutationError, match="unknown operator"):
        mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", "explode", 0))
    with pytest.raises(MutationError, match="no function"):
        mutate_source(SOURCE, BugSpec("r", "m.py", "Box.g", "const_inc", 0))
    with pytest.raises(MutationError, match="site 99 does not exist"):
        mutate_source(SOURCE, BugSpec("r", "m.py", "Box.f", "const_inc", 99))
    with pytest.raises(MutationError, match="shares its line"):
        mutate_source("def f(x):\n    y = 1; return y\n", BugSpec("r", "m.py", "f", "remove_assign", 0))
    with pytest.raises(MutationError, match="test file"):
        mutation_patch(FIXTURE, BugSpec("minicalc", "tests/test_core.py", "test_mean", "const_inc", 0))
    with pytest.raises(MutationError, match="no file"):
        mutation_patch(FIXTURE, BugSpec("minicalc", "../etc/passwd.py", "f", "const_inc", 0))


def test_negative_constant_and_precedence_render_faithfully() -> None:
    out = mutate_source("def f(x):\n    return x[0]\n", BugSpec("r", "m.py", "f", "const_dec", 0))
    assert "return x[-1]" in out
    out = mutate_source("def f(a, b, c):\n    return a ^ b & c\n", BugSpec("r", "m.py", "f", "binop_change", 1))
    assert ast.dump(ast.parse(out).body[0].body[0].value) == ast.dump(  # type: ignore[attr-defined]
        ast.parse("a ^ (b | c)", mode="eval").body)


def test_enumerate_specs_on_fixture_covers_sources_only_and_all_apply() -> None:
    assert target_files(FIXTURE) == ["minicalc/__init__.py", "minicalc/core.py", "minicalc/text.py"]
    specs = enumerate_specs(FIXTURE, "minicalc")
    assert len(specs) > 50 and {s.operator for s in specs} == set(OPERATORS)
    for spec in specs:
        patch = mutation_patch(FIXTURE, spec).patch
        assert patch.startswith("diff --git a/") and "tests/" not in patch


def test_bug_spec_text_round_trip_and_errors() -> None:
    spec = BugSpec("minicalc", "minicalc/core.py", "clamp", "compare_flip", 1)
    assert parse_spec(f"noise\n{spec.render()}\nmore") == spec
    assert isinstance(parse_spec("minicalc core.py clamp"), str)


def test_patch_has_no_newline_marker_when_the_file_lacks_one(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(x):\n    return x + 1")
    patch = mutation_patch(tmp_path, BugSpec("r", "m.py", "f", "binop_change", 0)).patch
    assert patch.count("\\ No newline at end of file") == 2

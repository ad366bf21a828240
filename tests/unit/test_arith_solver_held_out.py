"""``examples.arith_solver.held_out_set``: the example trainer's fixed held-out sets (sums and the corpus mix)."""

from __future__ import annotations

import pytest

from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import Task
from examples import arith_solver
from examples.trl_trainer import parse_args


def test_the_mix_is_fixed_distinct_valid_and_within_the_served_operator_range() -> None:
    mix = arith_solver.held_out_set(300, kind="mix", max_ops=3)
    assert mix == arith_solver.held_out_set(300, kind="mix", max_ops=3)  # the same set every run
    assert len(mix) == len(set(mix)) == 300
    domain = ArithDomain(max_ops=3)
    assert all(domain.check(Task("arith", e)).valid for e in mix)
    assert any(not ArithDomain(max_ops=2).check(Task("arith", e)).valid for e in mix)  # 3-operator ones too
    assert len({e for e in mix if "*" in e}) > 0 and len({e for e in mix if "-" in e}) > 0  # not only sums
    assert not set(mix) & set(arith_solver.held_out_set(300))  # apart from the sums


def test_the_sums_are_the_two_digit_sums_they_always_were() -> None:
    sums = arith_solver.held_out_set(50)
    assert sums == arith_solver.held_out_set(50, kind="sums")
    assert all(len(a) == 2 and len(b) == 2 for a, b in (e.split("+") for e in sums))


def test_an_unknown_kind_is_refused_by_name_and_the_cli_offers_both() -> None:
    with pytest.raises(ValueError, match=r"unknown held-out kind 'hard'.*sums, mix"):
        arith_solver.held_out_set(5, kind="hard")
    assert parse_args(["--held-out-kind", "mix"]).held_out_kind == "mix"
    assert parse_args([]).held_out_kind == "sums"
    with pytest.raises(SystemExit):
        parse_args(["--held-out-kind", "hard"])

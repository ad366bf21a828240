"""Staleness policy, version ages and trainer labels: table tests of the pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from curriculum.frontier.frontier_labels import trainer_label
from curriculum.frontier.staleness import LabelRecord, StalenessPolicy, freshest_per_task, weigh
from curriculum.labelling.spotcheck import LabelValue
from curriculum.store.solver_versions import (
    SolverVersion,
    VersionError,
    ages,
    derive_order,
    qualified_id,
    resolve_order,
    split_solver_id,
)
from probes.band import Band

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("solver_id", "expected"), [
    ("policy@step-1200", ("policy", "step-1200")),
    ("synthetic:arith-logistic(slope=1,offset=6,seed=0)", ("synthetic:arith-logistic(slope=1,offset=6,seed=0)", "")),
    ("a@b@3", ("a@b", "3")),
    ("@3", ("@3", "")),
    ("openai:Qwen/Qwen2.5-3B@7", ("openai:Qwen/Qwen2.5-3B", "7")),
])
def test_split_solver_id(solver_id: str, expected: tuple[str, str]) -> None:
    assert split_solver_id(solver_id) == expected
    if expected[1]:
        assert qualified_id(*expected) == solver_id


@pytest.mark.parametrize(("version", "order"), [
    ("1200", 1200), ("step-1200", 1200), ("step_7", 7), ("v3", 3), ("ckpt500", 500), ("", -1),
    ("v1.2.10", None), ("rc-final", None), ("12b", None), ("-5", None), ("step--5", None),
])
def test_derive_order(version: str, order: int | None) -> None:
    assert derive_order(version) == order


def test_resolve_order_explicit_beats_derived_and_refuses_what_cannot_be_ordered() -> None:
    assert resolve_order("step-5", 9) == 9
    assert resolve_order("step-5", None) == 5
    with pytest.raises(VersionError, match="order"):
        resolve_order("v1.2.10", None)
    with pytest.raises(VersionError):
        resolve_order("x", -1)


def _v(version: str, order: int | None, minutes: int = 0) -> SolverVersion:
    return SolverVersion("p", version, order, "announce", T0 + timedelta(minutes=minutes))


def test_ages_follow_order_not_arrival_and_legacy_unordered_have_none() -> None:
    known = [_v("", -1), _v("10", 10, 1), _v("30", 30, 2), _v("20", 20, 3), _v("v1.2", None, 4), _v("s-30", 30, 5)]
    assert ages(known) == {"": 3, "10": 2, "30": 0, "20": 1, "v1.2": None, "s-30": 0}
    assert ages(known[1:]) == ages(known)  # the unversioned version ages whether registered or not
    assert ages([]) == {"": 0}


KEEP2 = StalenessPolicy(keep_versions=2)
KEEP1 = StalenessPolicy(keep_versions=1)
HALF = StalenessPolicy(mode="half_life", half_life_versions=1.0, min_weight=0.2)
HALF2 = StalenessPolicy(mode="half_life", half_life_versions=2.0, min_weight=0.0)


@pytest.mark.parametrize(("policy", "age", "weight"), [
    (KEEP2, 0, 1.0), (KEEP2, 1, 1.0), (KEEP2, 2, 0.0), (KEEP2, None, 0.0), (KEEP2, -1, 0.0),
    (KEEP1, 0, 1.0), (KEEP1, 1, 0.0),
    (HALF, 0, 1.0), (HALF, 1, 0.5), (HALF, 2, 0.25), (HALF, 3, 0.0), (HALF, None, 0.0),
    (HALF2, 2, 0.5), (HALF2, 4, 0.25), (HALF2, 40, 0.5 ** 20),
])
def test_policy_weight_table(policy: StalenessPolicy, age: int | None, weight: float) -> None:
    assert policy.weight(age) == pytest.approx(weight)


@pytest.mark.parametrize("kwargs", [{"mode": "forever"}, {"keep_versions": 0}, {"half_life_versions": 0},
                                    {"min_weight": 1.0}])
def test_policy_rejects_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        StalenessPolicy(**kwargs)  # type: ignore[arg-type]


def _lab(task: int, version: str, source: str = "spotcheck", name: str = "p", valid: int = 8,
         in_band: bool | None = True) -> LabelRecord:
    return LabelRecord(task, name, version, source, 2, valid, in_band)


def test_weigh_drops_other_names_old_versions_and_unknown_versions() -> None:
    labels = [_lab(1, "3"), _lab(2, "2"), _lab(3, "1"), _lab(4, "3", name="other"), _lab(5, "9"), _lab(6, "legacy")]
    age = {"3": 0, "2": 1, "1": 2, "legacy": None}
    kept = weigh(labels, "p", age, KEEP2)
    assert [(w.label.task_id, w.age, w.weight) for w in kept] == [(1, 0, 1.0), (2, 1, 1.0)]
    half = weigh(labels, "p", age, HALF)
    assert [(w.label.task_id, w.weight) for w in half] == [(1, 1.0), (2, 0.5), (3, 0.25)]
    assert weigh(labels, "other", {"3": 0}, KEEP2)[0].label.task_id == 4  # names never mix


def test_freshest_per_task_prefers_young_then_spotcheck_then_more_trials() -> None:
    age = {"3": 0, "2": 1}
    labels = [_lab(1, "2"), _lab(1, "3", "consumer"),           # younger version wins over source
              _lab(2, "3", "consumer"), _lab(2, "3"),            # same age: spot-check first
              _lab(3, "3", "consumer", valid=6), _lab(3, "3", "consumer", valid=16)]
    best = freshest_per_task(weigh(labels, "p", age, KEEP2))
    assert (best[1].label.solver_version, best[1].label.source) == ("3", "consumer")
    assert best[2].label.source == "spotcheck"
    assert best[3].label.valid_trials == 16


BAND = Band(k=8, lo=1, hi=3, min_valid_trials=6)


@pytest.mark.parametrize(("solved", "n", "errors", "label"), [
    (2, 8, 0, LabelValue(2, 8, True)),
    (0, 8, 0, LabelValue(0, 8, False)),
    (4, 8, 0, LabelValue(4, 8, False)),
    (3, 8, 2, LabelValue(3, 6, False)),   # 3 of 6 valid = 0.5 > 3/8: errors are not failures
    (2, 8, 2, LabelValue(2, 6, True)),
    (1, 8, 3, LabelValue(1, 5, None)),    # 5 valid < min_valid_trials
    (4, 16, 0, LabelValue(4, 16, True)),  # rate 1/4 in [1/8, 3/8]
    (7, 16, 0, LabelValue(7, 16, False)),
    (0, 8, 8, LabelValue(0, 0, None)),
])
def test_trainer_label_table(solved: int, n: int, errors: int, label: LabelValue) -> None:
    assert trainer_label(solved, n, errors, BAND) == label


@pytest.mark.parametrize(("solved", "n", "errors"), [(1, 8, 9), (5, 8, 4), (-1, 8, 0), (1, 8, -1)])
def test_trainer_label_refuses_impossible_counts(solved: int, n: int, errors: int) -> None:
    with pytest.raises(ValueError):
        trainer_label(solved, n, errors, BAND)

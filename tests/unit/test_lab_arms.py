"""The two non-daemon closed-loop arms (#35): online difficulty filtering with a scripted solver, and the
Reasoning Gym arm's level rule and grading (skipped, with the install line, where reasoning-gym is absent)."""

from __future__ import annotations

import pytest

from curriculum.domains.arith import ArithDomain, analyse
from testkit.lab_arms import RGSettings, filter_batch


class ScriptedSolver:
    """Solves of a group of 4 fixed per candidate: the candidate's own number modulo 5 (0..4)."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, cands: list[int]) -> list[int]:
        self.calls.append(list(cands))
        return [c % 5 for c in cands]


def pool_draw(pool: list[int]):
    def draw(n: int) -> list[int]:
        out = pool[:n]
        del pool[:n]
        return out
    return draw


def test_filter_keeps_only_groups_with_intermediate_accuracy_and_refills_to_the_batch() -> None:
    solver = ScriptedSolver()
    out = filter_batch(pool_draw(list(range(40))), solver, batch=6, group=4)
    assert len(out.kept) == 6
    assert all(0 < n < 4 for _, n in out.kept)
    assert all(n in (0, 4) for _, n in out.dropped)
    assert len(solver.calls) > 1  # the first draw of 6 cannot fill the batch: it refilled
    assert solver.calls[0] == [0, 1, 2, 3, 4, 5] and solver.calls[1] == [6, 7, 8]  # draws only the 3 missing
    rolled = sum(len(c) for c in solver.calls)
    assert out.stats.candidates == rolled == len(out.kept) + len(out.dropped)
    assert out.stats.rollouts == 4 * rolled  # every rollout counted, kept and dropped
    assert out.stats.dropped_rollouts == 4 * len(out.dropped)
    assert out.stats.too_hard == sum(n == 0 for _, n in out.dropped)
    assert out.stats.too_easy == sum(n == 4 for _, n in out.dropped)


def test_filter_returns_short_when_the_pool_runs_out_and_stops_at_the_candidate_limit() -> None:
    short = filter_batch(pool_draw([0, 4, 5, 1]), ScriptedSolver(), batch=3, group=4)
    assert [c for c, _ in short.kept] == [1] and short.stats.candidates == 4
    never = filter_batch(lambda n: [0] * n, ScriptedSolver(), batch=2, group=4, max_candidates=10)
    assert never.kept == [] and never.stats.candidates == 10 and never.stats.too_hard == 10


def test_filter_bounds_narrow_the_kept_accuracy() -> None:
    out = filter_batch(pool_draw(list(range(100))), ScriptedSolver(), batch=5, group=4, lo=0.3, hi=0.7)
    assert [n for _, n in out.kept] == [2] * 5


# ---- Reasoning Gym ----------------------------------------------------------------------------------
@pytest.fixture
def source():
    pytest.importorskip("reasoning_gym", reason="pip install reasoning-gym==0.1.25 (docs/FRONTIER.md)")
    from testkit.lab_arms import ReasoningGymSource

    return ReasoningGymSource(RGSettings(threshold=0.7, window=8), seed=3)


def test_rg_level_rises_only_when_the_window_accuracy_passes_the_threshold(source) -> None:
    assert source.level == 0
    assert not source.record([8] * 7, group=8) and source.level == 0  # the window (8 groups) is not full yet
    assert not source.record([4] * 8, group=8) and source.level == 0  # full window at 0.5 < 0.7
    assert source.record([6] * 8, group=8) and source.level == 1  # window now at 0.75 ≥ 0.7: raised
    cfg = source.config(4)
    assert (cfg.min_terms, cfg.max_terms, cfg.min_digits, cfg.max_digits) == (2, 3, 1, 2)  # RG's inclusive range
    assert not source.record([8] * 7, group=8) and source.level == 1  # the window restarts after a raise


def test_rg_digits_stay_within_what_the_arith_domain_represents(source) -> None:
    while source.record([8] * 8, group=8):
        pass
    cfg = source.config(4)
    assert (cfg.max_terms, cfg.max_digits) == (6, 3)  # terms reach RG's top level, digits stop at 3
    assert set(cfg.operators) == {"+", "-", "*"} and not cfg.allow_parentheses
    domain = ArithDomain()
    tasks = source.tasks(40)
    assert len(tasks) == 40 and all(domain.check(t).valid for t in tasks)
    assert max(analyse(t.text).n_ops for t in tasks) <= 5


def test_rg_tasks_graded_by_the_arith_grader_on_the_expression_not_by_rgs_answer(source) -> None:
    source.curriculum.set_attr_level("num_terms", 2)  # 2..4 terms
    rg = source.rg
    dataset = rg.BasicArithmeticDataset(source.config(60))
    domain, disagree = ArithDomain(), 0
    for item in dataset:
        expr = item["metadata"]["expression"]
        [v] = domain.validate_batch([expr])
        if not v.valid:
            continue
        value = str(analyse(expr).value)
        assert domain.grade(v.task, f"The answer is {value}") is True
        assert domain.grade(v.task, str(int(value) + 1)) is False
        if "*" not in expr:  # + and - only: RG's left-to-right answer is the value, and its scorer agrees
            assert item["answer"] == value and dataset.score_answer(value, item) == 1.0
        elif item["answer"] != value:  # RG 0.1.25 ignores precedence here; the arith grader does not
            disagree += 1
            assert domain.grade(v.task, item["answer"]) is False
    assert disagree > 0  # why the arm grades with the arith grader (testkit/lab_arms.py docstring)


def test_rg_batches_never_repeat_a_task(source) -> None:
    first, second = source.tasks(30), source.tasks(30)  # level 0: 2 one-digit terms, a small space
    hashes = [t.content_hash for t in first + second]
    assert len(set(hashes)) == 60 and source.drawn >= 60


class FakeArithmetic:
    """Stands in for ``reasoning_gym.arithmetic`` (runs without reasoning-gym): a curriculum at level 0 whose
    config is the defaults it is given, and a dataset of ``size`` distinct sums seeded by ``seed`` (or of
    ``bad``, an expression the arith domain rejects, when set)."""

    def __init__(self, bad: str | None = None) -> None:
        self.bad = bad

    class BasicArithmeticCurriculum:
        def get_max_level(self) -> int:
            return 0

        def generate_configuration(self, defaults: dict) -> dict:
            return defaults

    def BasicArithmeticDataset(self, cfg: dict) -> list[dict]:
        seed = cfg["seed"]
        return [{"metadata": {"expression": self.bad or f"{(seed + i) % 997 + 1} + {(seed + i) // 997 + 1}"}}
                for i in range(cfg["size"])]


def fake_source(monkeypatch: pytest.MonkeyPatch, fake: FakeArithmetic):
    import testkit.lab_arms as lab_arms

    monkeypatch.setattr(lab_arms, "require_reasoning_gym", lambda: fake)
    return lab_arms.ReasoningGymSource(RGSettings(), seed=0)


def test_rg_source_serves_past_a_thousand_calls_its_give_up_bound_is_per_call(monkeypatch) -> None:
    from testkit.lab_arms import RG_MAX_DRAWS

    src = fake_source(monkeypatch, FakeArithmetic())
    got = [src.tasks(1) for _ in range(RG_MAX_DRAWS + 50)]  # the reviewer's repro raised at call 1001
    assert all(len(t) == 1 for t in got)
    assert len({t.content_hash for [t] in got}) == RG_MAX_DRAWS + 50 and src.batches == RG_MAX_DRAWS + 50


def test_rg_source_gives_up_with_one_line_when_no_draw_is_valid(monkeypatch) -> None:
    from testkit.lab_arms import RG_MAX_DRAWS

    src = fake_source(monkeypatch, FakeArithmetic(bad="7 / 2"))  # the arith domain has no division
    with pytest.raises(RuntimeError, match=rf"RG produced only 0/3 valid arith tasks at level 0 in {RG_MAX_DRAWS}"):
        src.tasks(3)
    assert src.batches == RG_MAX_DRAWS and src.rejected == src.drawn > 0

"""The synthetic arith solver (benchmark instrument)."""

from __future__ import annotations

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import Task
from curriculum.solvers.synthetic import SyntheticArithSolver

D = ArithDomain()


def _rate(solver: SyntheticArithSolver, expr: str, n: int = 400) -> float:
    task = D.check(Task("arith", expr)).task
    answers = solver.generate([D.solver_prompt(task)], n, Sampling(seed=3))[0]
    return sum(bool(D.grade(task, a.text or "")) for a in answers) / n


def test_is_labelled_and_conforms() -> None:
    solver = SyntheticArithSolver(slope=1.5, offset=4, seed=9)
    assert isinstance(solver, SolverBackend)
    assert solver.solver_id.startswith("synthetic:")


def test_success_rate_follows_logistic_of_complexity() -> None:
    solver = SyntheticArithSolver(slope=1.0, offset=6.0)
    easy, hard = _rate(solver, "1+2"), _rate(solver, "12*34*(5+6)*7-8*9")
    assert easy > 0.9 and hard < 0.1
    assert abs(_rate(solver, "2*3+4") - solver.success_probability("2*3+4")) < 0.1


def test_is_deterministic_and_wrong_answers_are_off_by_something() -> None:
    solver = SyntheticArithSolver(slope=1.0, offset=0.0, seed=1)
    task = D.check(Task("arith", "7*8*9")).task
    prompt = D.solver_prompt(task)
    first = solver.generate([prompt], 20, Sampling(seed=2))[0]
    assert [c.text for c in first] == [c.text for c in solver.generate([prompt], 20, Sampling(seed=2))[0]]
    for completion in first:
        assert completion.text is not None
        value = int(completion.text.split()[-1].rstrip("."))
        assert value == 504 or 1 <= abs(value - 504) <= 10


def test_non_arith_prompt_is_a_missing_completion() -> None:
    out = SyntheticArithSolver().generate(["What is love?"], 2, Sampling())[0]
    assert all(c.text is None and c.error for c in out)


def test_skill_follows_the_served_version_and_the_name_stays() -> None:
    from curriculum.solvers.synthetic import SyntheticArithSolver

    solver = SyntheticArithSolver(offset=4.0, skill_by_version={"step-2": 9.0})
    name, hard = solver.solver_id, "(12+7)*(3+4)-5*6"
    weak = solver.success_probability(hard)
    solver.serve_version("step-2")
    strong = solver.success_probability(hard)
    solver.serve_version("")
    assert strong > weak and solver.success_probability(hard) == weak and solver.solver_id == name
    solver.set_skill(9.0)
    solver.serve_version("step-7")  # not in the map: the (new) base skill
    assert solver.success_probability(hard) == strong


def test_skill_file_is_reread_per_version_and_wins(tmp_path) -> None:
    from curriculum.solvers.synthetic import SyntheticArithSolver, write_skill_file

    path = tmp_path / "skills.json"
    solver = SyntheticArithSolver(offset=4.0, skill_by_version={"step-2": 9.0}, skill_file=path)
    solver.serve_version("step-2")  # no file yet: the config's map
    assert solver.offset == 9.0
    write_skill_file(path, "step-2", 5.5)
    write_skill_file(path, "step-4", 7.0)
    solver.serve_version("step-2")
    assert solver.offset == 5.5
    solver.serve_version("step-4")
    assert solver.offset == 7.0
    solver.serve_version("step-9")
    assert solver.offset == 4.0

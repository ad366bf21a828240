"""The ``swe`` Domain end to end on the fixture repository: spec and patch completions, validity
with reasons, issue text, synthetic solver trials, real grading, the SWE band."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curriculum.common.solver_api import Sampling
from curriculum.domains.base import Domain, Task, get_domain
from curriculum.domains.swe.cache import RepoCache
from curriculum.domains.swe.cli import fetch_and_preflight, main
from curriculum.domains.swe.domain import SWE_BAND, SweDomain, extract_diff, swe_band
from curriculum.domains.swe.preflight import preflight_repo
from curriculum.domains.swe.registry import load_registry
from curriculum.domains.swe.sandbox import RlimitSuiteRunner
from curriculum.domains.swe.synthetic import SyntheticSweSolver, difficulty
from curriculum.labelling.spotcheck import label_tasks

from .conftest import POLICY, fixture_registry


@pytest.fixture(scope="module")
def domain(tmp_path_factory: pytest.TempPathFactory) -> SweDomain:
    tmp = tmp_path_factory.mktemp("swe-domain")
    lab = fixture_registry(tmp)
    results = fetch_and_preflight(tmp / "cache", [lab], runner="rlimit", bundled_registry=False, policy=POLICY)
    assert [r.status for r in results] == ["ok"]
    built = get_domain("swe", cache_dir=tmp / "cache", registry=[lab], bundled_registry=False, runner="rlimit",
                       policy=POLICY)
    assert isinstance(built, SweDomain)
    return built


SPEC = "minicalc minicalc/core.py::running_total remove_assign 2"  # drops ``acc += v``


def test_is_a_domain_with_prompts(domain: SweDomain) -> None:
    assert isinstance(domain, Domain) and domain.name == "swe"
    prompts = domain.generator_prompts(3, seed=4)
    assert prompts == domain.generator_prompts(3, seed=4) and all("Repository: minicalc" in p for p in prompts)


def test_tiny_prompt_and_spec_corpus(domain: SweDomain) -> None:
    tiny = SweDomain(domain.cache.root, domain_registry(domain), bundled_registry=False, runner="rlimit",
                     prompt_style="tiny")
    assert tiny.generator_prompts(2, 0) == ["BUG: ", "BUG: "]
    corpus = tiny.spec_corpus(20, seed=1)
    assert corpus == tiny.spec_corpus(20, seed=1) and all(tiny.parse(line).ok for line in corpus)
    with pytest.raises(ValueError, match="prompt_style"):
        SweDomain(domain.cache.root, prompt_style="chat")


def domain_registry(domain: SweDomain) -> list[str | Path]:
    return [Path(domain.cache.root).parent / "lab.toml"]


def test_spec_completion_to_valid_task_with_issue_text(domain: SweDomain) -> None:
    parsed = domain.parse(f"I will break the running total.\n{SPEC}\n")
    assert parsed.task is not None and parsed.task.payload["operator"] == "remove_assign"
    assert "-        acc += v" in parsed.task.payload["patch"]
    validity = domain.check(parsed.task)
    assert validity.valid, validity.reason
    task = validity.task
    assert task.payload["fail_to_pass"] == ["tests/test_core.py::tests.test_core::test_running_total"]
    prompt = domain.solver_prompt(task)
    for secret in ("test_running_total", "running_total", "acc += v", "remove_assign", "core.py"):
        assert secret not in prompt, secret
    assert "minicalc" in prompt and "pytest" in prompt
    assert domain.topic(task) == "remove_assign"
    assert domain.grade(task, f"```diff\n{task.payload['reference_fix']}```") is True
    assert domain.grade(task, "no idea") is False
    assert domain.verify(parsed.task).valid  # memoised on disk
    assert (domain.cache.root / "tasks" / f"{task.content_hash}.json").is_file()
    assert task.content_hash in domain.grading_command(task)


def test_invalid_completions_have_reasons(domain: SweDomain) -> None:
    out = domain.validate_batch([
        "nothing here",
        "otherrepo minicalc/core.py::clamp const_inc 0",
        "minicalc minicalc/core.py::clamp const_inc 50",
        "minicalc minicalc/core.py::safe_div const_dec 1",  # safe_div(..., default=None): 0 -> -1 untested
        "repo: minicalc\n--- a/tests/test_core.py\n+++ b/tests/test_core.py\n@@ -1 +1 @@\n-import pytest\n+import os\n",
    ])
    reasons = [v.reason or "" for v in out]
    assert not any(v.valid for v in out)
    assert "no bug specification line" in reasons[0]
    assert "otherrepo" in reasons[1]
    assert "site 50 does not exist" in reasons[2]
    assert reasons[3].startswith("no_failing_test")
    assert reasons[4].startswith("edits_tests")


def test_patch_completion_form(domain: SweDomain) -> None:
    bug = domain.parse(SPEC).task
    assert bug is not None
    completion = f"repo: minicalc\n```diff\n{bug.payload['patch']}```\n"
    parsed = domain.parse(completion)
    assert parsed.task is not None and parsed.task.payload["operator"] == "patch"
    assert domain.check(parsed.task).valid
    assert not domain.parse("--- a/x.py\n+++ b/x.py\n").ok  # no repo line


def test_synthetic_solver_labels_with_the_swe_band(domain: SweDomain) -> None:
    task = domain.check(domain.parse(SPEC).task).task  # type: ignore[arg-type]
    solver = SyntheticSweSolver(domain.cache.root, seed=1)
    assert solver.solver_id.startswith("synthetic:")
    band = swe_band()
    assert (band.k, band.lo, band.hi, band.min_valid_trials) == (3, 1, 2, 2) == tuple(SWE_BAND.values())
    [label] = label_tasks(domain, solver, [task], band, Sampling(seed=3))
    answers = solver.generate([domain.solver_prompt(task)], 3, Sampling(seed=3))[0]
    assert label.valid_trials == 3
    assert label.solved == sum(1 for a in answers if a.meta["correct"])
    assert solver.generate(["not an swe prompt"], 1, Sampling())[0][0].text is None
    spent = set()
    for seed in range(3):  # sequential labelling: one attempt at a time gives the same answers and label
        prompt = domain.solver_prompt(task)
        row = solver.generate([prompt], 3, Sampling(seed=seed))[0]
        assert [c.text for c in solver.generate_attempts([prompt] * 3, [0, 1, 2], Sampling(seed=seed))] == [
            c.text for c in row]
        [full] = label_tasks(domain, solver, [task], band, Sampling(seed=seed))
        [seq] = label_tasks(domain, solver, [task], band, Sampling(seed=seed), sequential=True)
        assert seq.in_band == full.in_band and seq.side(band) == full.side(band)
        assert seq.attempts == (2 if [c.meta["correct"] for c in row[:2]] in ([True, False], [False, True]) else 3)
        spent.add(seq.attempts)
    assert spent == {2, 3}  # these seeds settle one task after 2 attempts and run 3 for the others


def test_build_solver_knows_the_synthetic_swe_solver(domain: SweDomain) -> None:
    from curriculum.solvers import build_solver

    solver = build_solver("synthetic-swe", seed=2, options={"cache_dir": domain.cache.root, "offset": 3.0})
    assert isinstance(solver, SyntheticSweSolver) and solver.solver_id.startswith("synthetic:swe-logistic(")
    assert "offset=3" in solver.solver_id and solver.tasks_dir == domain.cache.root / "tasks"


def test_difficulty_is_a_function_of_bug_features() -> None:
    patch = "-a\n+b\n"
    assert difficulty("remove_loop", patch, 1) < difficulty("const_inc", patch, 1)
    assert difficulty("const_inc", patch, 5) < difficulty("const_inc", patch, 1)


def test_extract_diff() -> None:
    assert extract_diff("text\n```diff\n--- a/x\n+++ b/x\n```") == "--- a/x\n+++ b/x\n"
    assert extract_diff("--- a/x\n+++ b/x\n") == "--- a/x\n+++ b/x\n"
    assert extract_diff("nothing") == ""


def test_unusable_domain_states_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = SweDomain(tmp_path / "c", [fixture_registry(tmp_path)], bundled_registry=False, runner="rlimit")
    with pytest.raises(ValueError, match="no fetched, preflighted SWE repository"):
        empty.generator_prompts(1, 0)
    assert "is not fetched" in (empty.parse(SPEC).reason or "")
    with pytest.raises(ValueError, match="unknown split"):
        SweDomain(tmp_path, split="dev")
    assert main(["--cache", str(tmp_path / "c"), "repos"]) == 1
    assert "no preflight recorded" in capsys.readouterr().out
    assert main(["--registry", str(tmp_path / "missing.toml"), "repos"]) == 2
    assert grade_missing(tmp_path) == 2


class OtherRunner(RlimitSuiteRunner):
    """The rlimit runner under another name: a host whose ``auto`` picks a different suite runner."""

    name = "other"


def test_a_preflight_of_another_suite_runner_is_not_graded_with_and_is_redone(tmp_path: Path) -> None:
    """Which tests pass depends on the runner's environment (six's ``test_move_items[dbm_ndbm]`` passes
    under rlimit and is skipped under bubblewrap): grading with another runner's pass-to-pass set would
    grade correct fixes unsolved, so the domain refuses it with the fix, and fetch redoes the preflight."""
    lab = fixture_registry(tmp_path)
    [first] = fetch_and_preflight(tmp_path / "c", [lab], runner="rlimit", bundled_registry=False, policy=POLICY)
    other = SweDomain(tmp_path / "c", [lab], bundled_registry=False, runner=OtherRunner(), policy=POLICY)
    reason = other.repo("minicalc")
    assert isinstance(reason, str) and "preflighted with the rlimit suite runner" in reason
    assert "propel swe --runner other fetch --only minicalc" in reason
    auto = SweDomain(tmp_path / "c", [lab], bundled_registry=False, runner="auto", policy=POLICY).repo("minicalc")
    assert not isinstance(auto, str) and auto.verifier.runner.name == "rlimit"  # auto adopts the preflight's
    [again] = fetch_and_preflight(tmp_path / "c", [lab], runner="rlimit", bundled_registry=False, policy=POLICY)
    assert again.created_at == first.created_at  # same runner: the stored result is reused
    cache = RepoCache(tmp_path / "c")
    [spec] = [s for s in load_registry(lab, bundled=False) if s.name == "minicalc"]
    redone = preflight_repo(cache, spec, OtherRunner(), POLICY)
    assert redone.runner == "other" and redone.ok and redone.created_at != first.created_at
    fresh = SweDomain(tmp_path / "c", [lab], bundled_registry=False, runner=OtherRunner(), policy=POLICY)
    assert not isinstance(fresh.repo("minicalc"), str)


def grade_missing(tmp_path: Path) -> int:
    return main(["--cache", str(tmp_path / "c"), "grade", "--repo", "minicalc", "--task", "0" * 64, "--fix", "x"])


def test_task_payload_is_json_serialisable(domain: SweDomain) -> None:
    import json

    task = domain.check(domain.parse(SPEC).task).task  # type: ignore[arg-type]
    assert isinstance(json.loads(json.dumps(task.payload)), dict)
    assert Task("swe", task.text).content_hash == task.content_hash


def test_message_grading_on_the_local_cache(domain: SweDomain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """An emitted message grades a fix with the SDK and `propel swe grade --message`, from the cache alone."""
    from propel_sdk.grading import GradingUnavailable, grade
    from testkit.messages import frontier_message

    task = domain.check(domain.parse(SPEC).task).task  # type: ignore[arg-type]
    msg = frontier_message(domain, task)
    assert msg["grading"]["grading_command"] == "propel swe grade --message task.json --fix fix.diff"
    monkeypatch.setenv("PROPEL_SWE_CACHE", str(domain.cache.root))
    monkeypatch.setenv("PROPEL_SWE_REGISTRY", str(domain_registry(domain)[0]))
    fix = f"```diff\n{task.payload['reference_fix']}```"
    assert grade(msg, fix) is True and grade(msg, "") is False and grade(msg, "no idea") is False
    (tmp_path / "task.json").write_text(json.dumps(msg))
    (tmp_path / "fix.diff").write_text(task.payload["reference_fix"])
    (tmp_path / "empty.diff").write_text("")
    assert main(["grade", "--message", str(tmp_path / "task.json"), "--fix", str(tmp_path / "fix.diff")]) == 0
    assert main(["grade", "--message", str(tmp_path / "task.json"), "--fix", str(tmp_path / "empty.diff")]) == 1
    assert capsys.readouterr().out.split() == ["solved", "not", "solved"]
    monkeypatch.delenv("PROPEL_SWE_REGISTRY")
    with pytest.raises(GradingUnavailable, match="'minicalc' is not in the SWE registry: pass its registry file"):
        grade(msg, fix)
    monkeypatch.setenv("PROPEL_SWE_CACHE", str(tmp_path / "empty"))
    assert main(["grade", "--message", str(tmp_path / "task.json"), "--fix", str(tmp_path / "fix.diff")]) == 2
    assert "not in the local SWE cache: fetch it with `propel swe fetch --only minicalc`" in capsys.readouterr().err

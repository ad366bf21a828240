"""Preflight verdicts (pure, from constructed runs, and real runs on fixture variants) and the
suite runners' command lines / container specs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from curriculum.domains.swe.cache import RepoCache, RepoCheckout
from curriculum.domains.swe.docker import dockerfile_for, image_tag, suite_container_spec
from curriculum.domains.swe.junit import TestResult
from curriculum.domains.swe.preflight import PreflightPolicy, PreflightResult, judge, load_preflight, preflight_repo
from curriculum.domains.swe.registry import RepoSpec
from curriculum.domains.swe.sandbox import (
    BubblewrapSuiteRunner,
    RlimitSuiteRunner,
    SuiteConfig,
    SuiteRun,
    SuiteRunner,
    pytest_argv,
)
from curriculum.sandbox.base import Limits

from .conftest import FIXTURE, POLICY

CHECKOUT = RepoCheckout(RepoSpec("r", "path", path="p"), Path("/x"), "h" * 64)


def run(outcomes: dict[str, str], messages: dict[str, str] | None = None, **kw: object) -> SuiteRun:
    results = {t: TestResult(t, "f.py", o, (messages or {}).get(t, "")) for t, o in outcomes.items()}
    return SuiteRun(kw.pop("status", "ok"), results, run_s=1.0, **kw)  # type: ignore[arg-type]


OK = {f"t{i}": "passed" for i in range(10)}


def test_judge_ok_and_grading_set() -> None:
    result = judge(CHECKOUT, run(OK), run(OK), PreflightPolicy())
    assert result.ok and result.test_count == 10 and len(result.grading_tests) == 10 and result.suite_s == 1.0


def test_judge_exclusions_have_reasons() -> None:
    policy = PreflightPolicy()
    cases = [
        (run({}, status="timeout", reason="wall-clock"), run(OK), "suite hangs"),
        (run({}, status="no_report", reason="boom"), run(OK), "baseline suite no_report"),
        (run(OK, collect_errors=("tests/test_x.py",)), run(OK), "collection errors in tests/test_x.py"),
        (run({"t0": "passed"}), run({"t0": "passed"}), "only 1 tests collected"),
        (run({**OK, "t0": "failed"}), run({**OK, "t0": "failed"}), "1 tests fail at baseline"),
        (run({**OK, "t0": "error"}, {"t0": "socket.gaierror: [Errno -3] Temporary failure in name resolution"}),
         run({**OK, "t0": "error"}, {"t0": "socket.gaierror"}), "needs the network"),
        (run({**OK, "t0": "failed"}), run(OK), "1 flaky tests"),
        (run({**OK, "odd[1]": "passed"}), run({**OK, "odd[2]": "passed"}), "2 test ids collected in only one"),
    ]
    for first, second, reason in cases:
        result = judge(CHECKOUT, first, second, policy)
        assert result.status == "excluded" and reason in (result.reason or ""), (reason, result.reason)
    unstable = judge(CHECKOUT, run({**OK, "odd[1]": "passed"}), run({**OK, "odd[2]": "passed"}), policy)
    assert "flaky" not in (unstable.reason or ""), unstable.reason  # was "0 flaky tests (more than 5%)"
    flaky = judge(CHECKOUT, run({**OK, "t0": "failed"}), run(OK), PreflightPolicy(max_flaky_share=0.5))
    assert flaky.ok and flaky.flaky == ["t0"] and "t0" not in flaky.grading_tests
    slow = judge(CHECKOUT, run(OK), run(OK), PreflightPolicy(max_suite_s=0.5))
    assert "suite takes" in (slow.reason or "")


def _variant(tmp_path: Path, name: str, test_body: str) -> RepoSpec:
    root = tmp_path / name
    shutil.copytree(FIXTURE, root)
    (root / "tests" / "test_extra.py").write_text(test_body)
    return RepoSpec(name, "path", path=str(root), tests=("tests",))


def test_real_preflight_records_and_excludes(tmp_path: Path, runner: SuiteRunner,
                                             mini_preflight: PreflightResult, swe_cache: RepoCache) -> None:
    assert mini_preflight.test_count == 10 and not mini_preflight.baseline_failures and not mini_preflight.flaky
    assert mini_preflight.isolation and mini_preflight.runner == "rlimit"
    assert load_preflight(swe_cache, mini_preflight.content_hash) == mini_preflight
    cache = RepoCache(tmp_path / "c")
    failing = preflight_repo(cache, _variant(tmp_path, "failing", "def test_broken():\n    assert 1 == 2\n"),
                             runner, POLICY)
    assert failing.status == "excluded" and "1 tests fail at baseline" in (failing.reason or "")
    hang = _variant(tmp_path, "hang", "def test_hang():\n    while True:\n        pass\n")
    hung = preflight_repo(cache, hang, runner, PreflightPolicy(test_timeout_s=60, limits=Limits(
        cpu_s=3, wall_s=3.0, memory_mb=2048, max_procs=64)))
    assert hung.status == "excluded" and (hung.reason or "").startswith("suite hangs")
    net = _variant(tmp_path, "net", "import socket\n\ndef test_net():\n"
                   "    socket.create_connection(('pypi.org', 443), timeout=3)\n")
    needs = preflight_repo(cache, net, runner, POLICY)
    assert needs.status == "excluded"
    if RlimitSuiteRunner().isolation.startswith("rlimits, no network"):
        assert "needs the network" in (needs.reason or "")


def test_pytest_argv_and_rlimit_command() -> None:
    config = SuiteConfig(tests=("tests",), pytest_args=("-k", "x"), test_timeout_s=7)
    argv = pytest_argv(config, "/r/junit.xml")
    assert "--timeout=7" in argv and "--junitxml=/r/junit.xml" in argv and argv[-3:] == ["-k", "x", "tests"]
    assert pytest_argv(config, "j", select=("tests/test_a.py",))[-1] == "tests/test_a.py"
    runner = RlimitSuiteRunner(unshare="/usr/bin/unshare")
    cmd = runner.argv(FIXTURE, config, "/r/junit.xml", ())
    if runner.as_root:
        assert cmd[:3] == ["/usr/bin/unshare", "--net", "--"] and "--reuid=65534" in cmd
    assert any(a.startswith("--cpu=") for a in cmd) and cmd[-2] == "-c" and "pytest.main" in cmd[-1]


def test_bubblewrap_command_binds_the_copy_at_repo() -> None:
    argv = BubblewrapSuiteRunner("bwrap").argv(FIXTURE, SuiteConfig(), ())
    at = argv.index("--bind")
    assert argv[at:at + 3] == ["--bind", str(FIXTURE), "/repo"]
    assert argv[argv.index("--chdir") + 1] == "/repo"
    assert "--unshare-net" in argv or "--unshare-all" in argv
    assert argv.index("--bind") < argv.index("--") and "'/repo'" in argv[-1]


def test_docker_image_and_container_spec() -> None:
    assert image_tag("More_Itertools", "ab" * 32) == "propel-swe/more_itertools:abababababab"
    text = dockerfile_for("8.3.0", "2.3.1", "3.11")
    assert text.startswith("FROM python:3.11-slim") and "pytest==8.3.0 pytest-timeout==2.3.1" in text
    spec = suite_container_spec("img", FIXTURE, SuiteConfig(limits=Limits(memory_mb=512, max_procs=32)))
    assert spec["network_disabled"] is True and spec["network_mode"] == "none" and spec["read_only"] is True
    assert spec["cap_drop"] == ["ALL"] and spec["user"] == "65534:65534" and spec["pids_limit"] == 32
    assert spec["mounts"][0]["Target"] == "/repo" and spec["mounts"][0]["Source"] == str(FIXTURE)
    assert spec["environment"]["PYTHONHASHSEED"] == "0" and "pytest.main" in spec["command"][-1]


def test_bubblewrap_runner_runs_the_fixture_suite_and_a_verdict(mini_preflight: PreflightResult) -> None:
    from curriculum.sandbox.backends import bwrap_probe

    ok, why = bwrap_probe()
    if not ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    from curriculum.domains.swe.sandbox import run_suite_in_copy
    from curriculum.domains.swe.verifier import Verifier

    runner = BubblewrapSuiteRunner()
    result = run_suite_in_copy(runner, FIXTURE, SuiteConfig(tests=("tests",), test_timeout_s=5))
    assert result.ok and result.backend == "bubblewrap", result.reason
    assert set(result.outcomes().values()) == {"passed"} and len(result.results) == 10
    verifier = Verifier(FIXTURE, mini_preflight.grading_tests, runner, SuiteConfig(tests=("tests",)))
    before = (FIXTURE / "minicalc/core.py").read_text()
    from curriculum.domains.swe.patches import unified_diff

    verdict = verifier.verify(unified_diff("minicalc/core.py", before, before.replace("acc += v", "acc -= v")))
    assert verdict.valid and len(verdict.fail_to_pass) == 1, verdict.reason


def test_episode_limits_scale_with_the_baseline() -> None:
    from curriculum.domains.swe.preflight import episode_config

    spec = RepoSpec("r", "path", path="p")
    fast = episode_config(spec, PreflightPolicy(), PreflightResult("r", "r", "h", "ok", suite_s=0.8))
    assert fast.limits.wall_s == 30.0 and fast.limits.cpu_s == 30
    slow = episode_config(spec, PreflightPolicy(), PreflightResult("r", "r", "h", "ok", suite_s=8.0))
    assert slow.limits.wall_s == 80.0
    capped = episode_config(spec, PreflightPolicy(), PreflightResult("r", "r", "h", "ok", suite_s=100.0))
    assert capped.limits.wall_s == PreflightPolicy().limits.wall_s

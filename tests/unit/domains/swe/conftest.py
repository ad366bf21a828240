"""Fixtures for the SWE domain: the committed mini repository, preflighted once per session in a
temporary cache, and a verifier over it (real sandboxed pytest runs, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curriculum.domains.swe.cache import RepoCache
from curriculum.domains.swe.preflight import PreflightPolicy, PreflightResult, preflight_repo, suite_config
from curriculum.domains.swe.registry import RepoSpec
from curriculum.domains.swe.sandbox import RlimitSuiteRunner, SuiteRunner
from curriculum.domains.swe.verifier import Verifier

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "swe_minirepo"
POLICY = PreflightPolicy(test_timeout_s=5)


def fixture_registry(tmp: Path) -> Path:
    """A lab registry file naming the fixture repository by path."""
    path = tmp / "lab.toml"
    path.write_text(f'[[repo]]\nname = "minicalc"\nsource = "path"\npath = "{FIXTURE}"\ntests = ["tests"]\n'
                    'split = "rl-train"\n')
    return path


@pytest.fixture(scope="session")
def runner() -> SuiteRunner:
    return RlimitSuiteRunner()


@pytest.fixture(scope="session")
def swe_cache(tmp_path_factory: pytest.TempPathFactory) -> RepoCache:
    return RepoCache(tmp_path_factory.mktemp("swe-cache"))


@pytest.fixture(scope="session")
def mini_spec() -> RepoSpec:
    return RepoSpec("minicalc", "path", path=str(FIXTURE), tests=("tests",))


@pytest.fixture(scope="session")
def mini_preflight(swe_cache: RepoCache, mini_spec: RepoSpec, runner: SuiteRunner) -> PreflightResult:
    result = preflight_repo(swe_cache, mini_spec, runner, POLICY)
    assert result.ok, result.reason
    return result


@pytest.fixture(scope="session")
def verifier(swe_cache: RepoCache, mini_spec: RepoSpec, mini_preflight: PreflightResult,
             runner: SuiteRunner) -> Verifier:
    checkout = swe_cache.fetch(mini_spec)
    return Verifier(checkout.root, mini_preflight.grading_tests, runner, suite_config(mini_spec, POLICY))

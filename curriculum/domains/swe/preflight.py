"""Preflight: run each repository's unmodified suite twice and decide whether it can host bugs.

Recorded per repository: test count, baseline failures, suite duration (mean of the two runs),
flaky tests (outcome differs between the runs; excluded from grading) and the grading set (tests
that passed in both runs). A repository is excluded, with the reason, when it cannot be fetched,
its suite does not produce a report, hangs (whole-suite limit), has collection errors, collects
fewer than ``min_tests`` tests, has more baseline failures than allowed (network errors are named
as "needs the network"), is slower than ``max_suite_s`` or has too many flaky tests.
Results are JSON files under ``<cache>/preflight/<content hash>.json``; :func:`write_summary`
writes ``<cache>/preflight.json`` with every repository's status and split (the record of splits).
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from curriculum.domains.swe.cache import FetchError, RepoCache, RepoCheckout, write_atomic
from curriculum.domains.swe.registry import RepoSpec, assign_splits
from curriculum.domains.swe.sandbox import (
    DEFAULT_SUITE_LIMITS,
    DEFAULT_TEST_TIMEOUT_S,
    SuiteConfig,
    SuiteRun,
    SuiteRunner,
    run_suite_in_copy,
)
from curriculum.sandbox.base import Limits

PREFLIGHT_VERSION = 2
_NETWORK_MARKERS = ("gaierror", "Temporary failure in name resolution", "Network is unreachable",
                    "Name or service not known", "ConnectionRefusedError", "urlopen error", "NewConnectionError")


@dataclass(frozen=True)
class PreflightPolicy:
    min_tests: int = 5
    max_baseline_failures: int = 0
    max_suite_s: float = 120.0
    max_flaky_share: float = 0.05
    test_timeout_s: int = DEFAULT_TEST_TIMEOUT_S
    limits: Limits = DEFAULT_SUITE_LIMITS
    #: Episode suites (verification, grading) may take this multiple of the baseline duration ...
    suite_time_factor: float = 10.0
    #: ... but never less than this many seconds (a hang at import time is not a per-test timeout).
    min_episode_wall_s: float = 30.0


@dataclass(frozen=True)
class PreflightResult:
    name: str
    label: str
    content_hash: str
    status: str  # "ok" | "excluded"
    reason: str | None = None
    test_count: int = 0
    baseline_failures: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    unstable_ids: list[str] = field(default_factory=list)
    grading_tests: list[str] = field(default_factory=list)
    suite_s: float = 0.0
    runner: str = ""
    isolation: str = ""
    python: str = field(default_factory=platform.python_version)
    version: int = PREFLIGHT_VERSION
    created_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, object]) -> PreflightResult:
        return PreflightResult(**data)  # type: ignore[arg-type]


def suite_config(spec: RepoSpec, policy: PreflightPolicy) -> SuiteConfig:
    return SuiteConfig(spec.tests, spec.pythonpath, spec.pytest_args, policy.test_timeout_s, policy.limits)


def episode_config(spec: RepoSpec, policy: PreflightPolicy, preflight: PreflightResult) -> SuiteConfig:
    """The suite config for episodes: the whole-suite wall/CPU limit scaled from the baseline."""
    wall_s = min(policy.limits.wall_s, max(policy.min_episode_wall_s, policy.suite_time_factor * preflight.suite_s))
    limits = replace(policy.limits, wall_s=wall_s, cpu_s=max(1, min(policy.limits.cpu_s, math.ceil(wall_s))))
    return replace(suite_config(spec, policy), limits=limits)


def _failing(run: SuiteRun) -> list[str]:
    return sorted(t for t, r in run.results.items() if r.outcome in ("failed", "error", "timeout"))


def judge(checkout: RepoCheckout, first: SuiteRun, second: SuiteRun, policy: PreflightPolicy) -> PreflightResult:
    """The preflight verdict from two baseline runs (pure)."""
    base: dict[str, Any] = {
            "name": checkout.spec.name, "label": checkout.spec.label, "content_hash": checkout.content_hash,
            "runner": first.backend, "isolation": first.isolation,
            "suite_s": round((first.run_s + second.run_s) / 2, 3)}
    for run in (first, second):
        if run.status == "timeout":
            return PreflightResult(status="excluded", reason=f"suite hangs: {run.reason}", **base)
        if not run.ok:
            return PreflightResult(status="excluded", reason=f"baseline suite {run.status}: {run.reason}", **base)
        if run.collect_errors:
            return PreflightResult(status="excluded", reason="baseline collection errors in "
                                   + ", ".join(run.collect_errors[:3]), **base)
    one, two = first.outcomes(), second.outcomes()
    flaky = sorted(t for t in set(one) & set(two) if one[t] != two[t])
    unstable = sorted(set(one) ^ set(two))  # ids seen in one run only: never graded
    failures = sorted((set(_failing(first)) & set(_failing(second))) - set(flaky))
    grading = sorted(t for t, o in one.items() if o == "passed" and two.get(t) == "passed")
    stats: dict[str, Any] = {**base, "test_count": len(one), "baseline_failures": failures, "flaky": flaky,
             "unstable_ids": unstable, "grading_tests": grading}
    network = [t for t in failures if any(m in first.results[t].message or m in second.results[t].message
                                          for m in _NETWORK_MARKERS)]
    reason = None
    if len(one) < policy.min_tests:
        reason = f"only {len(one)} tests collected (need {policy.min_tests})"
    elif network:
        reason = f"needs the network: {len(network)} tests fail with network errors (e.g. {network[0]})"
    elif len(failures) > policy.max_baseline_failures:
        reason = f"{len(failures)} tests fail at baseline (allowed {policy.max_baseline_failures}), e.g. {failures[0]}"
    elif base["suite_s"] > policy.max_suite_s:
        reason = f"suite takes {base['suite_s']}s (limit {policy.max_suite_s}s)"
    elif len(flaky) + len(unstable) > policy.max_flaky_share * len(one):
        reason = _unstable_reason(flaky, unstable, len(one), policy.max_flaky_share)
    elif not grading:
        reason = "no test passes at baseline"
    return PreflightResult(status="excluded" if reason else "ok", reason=reason, **stats)


def _unstable_reason(flaky: list[str], unstable: list[str], tests: int, max_share: float) -> str:
    """Why a suite is too unstable, naming what is: tests whose outcome changed between the runs
    (flaky) and/or test ids collected in one run only (e.g. parametrised ids built from the clock)."""
    parts = [f"{len(flaky)} flaky tests (outcome differs between the two runs)"] if flaky else []
    if unstable:
        parts.append(f"{len(unstable)} test ids collected in only one of the two runs (e.g. {unstable[0]})")
    return f"{' and '.join(parts)}: more than {max_share:.0%} of {tests} tests"


def preflight_path(cache: RepoCache, content_hash: str) -> Path:
    return cache.root / "preflight" / f"{content_hash}.json"


def load_preflight(cache: RepoCache, content_hash: str) -> PreflightResult | None:
    path = preflight_path(cache, content_hash)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return PreflightResult.from_json(data) if data.get("version") == PREFLIGHT_VERSION else None


def preflight_repo(cache: RepoCache, spec: RepoSpec, runner: SuiteRunner, policy: PreflightPolicy | None = None,
                   force: bool = False) -> PreflightResult:
    """Fetch ``spec`` (if needed) and preflight it (unless a stored result of the same suite runner exists
    and not ``force``: which tests pass can depend on the runner's environment, so another runner's
    result is redone)."""
    policy = policy or PreflightPolicy()
    try:
        checkout = cache.fetch(spec)
    except FetchError as err:
        return PreflightResult(spec.name, spec.label, "", "excluded", f"fetch failed: {err}")
    stored = None if force else load_preflight(cache, checkout.content_hash)
    if stored is not None and stored.runner in ("", runner.name):
        return stored
    config = suite_config(spec, policy)
    first = run_suite_in_copy(runner, checkout.root, config)
    second = run_suite_in_copy(runner, checkout.root, config)
    result = judge(checkout, first, second, policy)
    write_atomic(preflight_path(cache, checkout.content_hash), json.dumps(result.to_json(), indent=1))
    return result


def write_summary(cache: RepoCache, specs: list[RepoSpec], results: list[PreflightResult]) -> Path:
    """``<cache>/preflight.json``: per repository its status, reason, numbers and split."""
    splits = assign_splits(specs)
    rows = [{"name": r.name, "label": r.label, "hash": r.content_hash, "status": r.status, "reason": r.reason,
             "split": splits.get(r.name, ""), "tests": r.test_count, "grading_tests": len(r.grading_tests),
             "baseline_failures": len(r.baseline_failures), "flaky": len(r.flaky), "suite_s": r.suite_s}
            for r in results]
    path = cache.root / "preflight.json"
    write_atomic(path, json.dumps({"repos": rows}, indent=1))
    return path

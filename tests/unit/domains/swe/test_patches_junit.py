"""Patch parsing and static rules, git apply round trips, JUnit report parsing."""

from __future__ import annotations

import shutil
from pathlib import Path

from curriculum.domains.swe.junit import parse_junit
from curriculum.domains.swe.patches import (
    changed_files,
    diff_trees,
    git_apply,
    is_test_path,
    static_problem,
    unified_diff,
)

from .conftest import FIXTURE


def test_is_test_path() -> None:
    for path in ("tests/x.py", "pkg/tests/helpers.py", "test_a.py", "pkg/a_test.py", "conftest.py", "test/data.py"):
        assert is_test_path(path), path
    for path in ("pkg/core.py", "pkg/testing_utils.py", "contest.py"):
        assert not is_test_path(path), path


def test_changed_files_kinds() -> None:
    patch = ("--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
             "--- a/pkg/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
             "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert [(c.path, c.kind) for c in changed_files(patch)] == [
        ("pkg/new.py", "add"), ("pkg/old.py", "delete"), ("pkg/m.py", "modify")]
    assert static_problem(patch) == "patch deletes pkg/old.py"
    assert static_problem("--- a/../x.py\n+++ b/../x.py\n@@ -1 +1 @@\n-a\n+b\n") == \
        "patch path '../x.py' leaves the repository"


def test_apply_reverse_and_diff_trees(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    shutil.copytree(FIXTURE, repo)
    before = (repo / "minicalc/core.py").read_text()
    patch = unified_diff("minicalc/core.py", before, before.replace("acc += v", "acc -= v"))
    assert git_apply(repo, patch, check_only=True) is None
    assert git_apply(repo, patch) is None and "acc -= v" in (repo / "minicalc/core.py").read_text()
    assert git_apply(repo, patch) is not None  # already applied: an error line, not an exception
    fix = diff_trees(repo, FIXTURE, ["minicalc/core.py"])
    assert git_apply(repo, fix) is None and (repo / "minicalc/core.py").read_text() == before


JUNIT = """<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="tests.test_a" name="test_ok" file="tests/test_a.py" time="0.1"/>
<testcase classname="tests.test_a" name="test_bad" file="tests/test_a.py">
<failure message="assert 1 == 2">x</failure></testcase>
<testcase classname="tests.test_a.TestK" name="test_err" file="tests/test_a.py"><error message="boom"/></testcase>
<testcase classname="tests.test_a" name="test_skip" file="tests/test_a.py"><skipped message="no"/></testcase>
<testcase classname="tests.test_a" name="test_slow" file="tests/test_a.py">
<failure message="Failed: Timeout &gt;2.0s"/></testcase>
<testcase classname="" name="tests.test_b"><error message="collection failure">ImportError</error></testcase>
</testsuite></testsuites>"""


def test_parse_junit_outcomes_and_collection_errors() -> None:
    parsed = parse_junit(JUNIT)
    assert not isinstance(parsed, str)
    results, collect = parsed
    assert {t.split("::")[-1]: r.outcome for t, r in results.items()} == {
        "test_ok": "passed", "test_bad": "failed", "test_err": "error", "test_skip": "skipped", "test_slow": "timeout"}
    assert "tests/test_a.py::tests.test_a.TestK::test_err" in results
    assert collect == ["tests.test_b"]
    assert results["tests/test_a.py::tests.test_a::test_bad"].message == "assert 1 == 2"
    assert isinstance(parse_junit("<not xml"), str)

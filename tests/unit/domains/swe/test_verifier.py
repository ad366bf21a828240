"""Every verifier rule on the committed fixture repository (real sandboxed pytest runs)."""

from __future__ import annotations

import dataclasses

from curriculum.domains.swe.mutator import mutation_patch
from curriculum.domains.swe.patches import unified_diff
from curriculum.domains.swe.sandbox import SuiteConfig
from curriculum.domains.swe.spec import BugSpec
from curriculum.domains.swe.verifier import Verifier, digest_of_tests
from curriculum.sandbox.base import Limits

from .conftest import FIXTURE


def edit(path: str, old: str, new: str) -> str:
    before = (FIXTURE / path).read_text()
    assert old in before
    return unified_diff(path, before, before.replace(old, new, 1))


BUG_CORE = edit("minicalc/core.py", "    if value < low:", "    if value <= low - 1:")  # clamp(-3,0,10) still ok
REAL_BUG = edit("minicalc/core.py", "        acc += v", "        acc -= v")


def test_valid_bug_has_fail_and_pass_sets_and_reverse_patch_fix(verifier: Verifier) -> None:
    verdict = verifier.verify(REAL_BUG)
    assert verdict.valid and verdict.code == "ok", verdict.reason
    assert verdict.fail_to_pass == ("tests/test_core.py::tests.test_core::test_running_total",)
    assert len(verdict.pass_to_pass) == 9
    assert verdict.inverse == {"minicalc/core.py": "implied"}
    assert "-        acc -= v" in verdict.reference_fix and "+        acc += v" in verdict.reference_fix
    assert verifier.grade_fix(REAL_BUG, verdict.reference_fix, list(verdict.fail_to_pass),
                              list(verdict.pass_to_pass)) is True


def test_behaviour_preserving_patch_has_no_failing_test(verifier: Verifier) -> None:
    verdict = verifier.verify(BUG_CORE)
    assert not verdict.valid and verdict.code == "no_failing_test"
    assert verdict.reason == "no previously passing test fails"


def test_static_rules_reject_with_reasons(verifier: Verifier) -> None:
    cases = {
        "": "empty",
        "--- a/minicalc/core.py\n+++ b/minicalc/core.py\n@@ -1 +1 @@\n": "empty",
        edit("tests/test_core.py", "== 5", "== 6"): "edits_tests",
        "diff --git a/minicalc/core.py b/minicalc/core.py\ndeleted file mode 100644\n--- a/minicalc/core.py\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-x\n": "deletes",
        "diff --git a/minicalc/logo.png b/minicalc/logo.png\nnew file mode 100644\nGIT binary patch\nliteral 3\n"
        "Kc${NkU;qFB0RR91\n": "binary",
        edit("pyproject.toml", 'version = "0.1.0"', 'version = "0.2.0"'): "not_python",
        "just some prose, no diff": "not_a_diff",
    }
    for patch, code in cases.items():
        verdict = verifier.verify(patch)
        assert not verdict.valid and verdict.code == code and verdict.reason, (code, verdict)


def test_patch_that_does_not_apply(verifier: Verifier) -> None:
    stale = edit("minicalc/core.py", "acc += v", "acc -= v").replace(" acc = start", " acc = begin")
    verdict = verifier.verify(stale)
    assert verdict.code == "apply" and verdict.reason and verdict.reason.startswith("patch does not apply")


def test_suite_that_no_longer_collects(verifier: Verifier) -> None:
    verdict = verifier.verify(edit("minicalc/core.py", "def mean(values):", "def mean(values)"))
    assert verdict.code == "collect" and "tests/test_core.py" in (verdict.reason or "")


def test_per_test_timeout_rejects(verifier: Verifier) -> None:
    looping = edit("minicalc/text.py", "    i = 0\n", "    i = 0\n    while cleaned is not None:\n        pass\n")
    verdict = verifier.verify(looping)
    assert verdict.code == "test_timeout", verdict


def test_whole_suite_timeout_rejects(verifier: Verifier) -> None:
    config = dataclasses.replace(verifier.config, test_timeout_s=600, limits=Limits(cpu_s=4, wall_s=4.0,
                                                                                   memory_mb=2048, max_procs=64))
    slow = Verifier(verifier.root, list(verifier.grading), verifier.runner, config)
    looping = edit("minicalc/text.py", "    i = 0\n", "    i = 0\n    while cleaned is not None:\n        pass\n")
    assert slow.verify(looping).code == "suite_timeout"


def test_no_passing_test_left(verifier: Verifier) -> None:
    narrow = Verifier(verifier.root, ["tests/test_core.py::tests.test_core::test_running_total"], verifier.runner,
                      verifier.config)
    verdict = narrow.verify(REAL_BUG)
    assert verdict.code == "no_passing_test" and verdict.fail_to_pass and not verdict.pass_to_pass


def test_inverse_mutation_rule_per_changed_file(verifier: Verifier) -> None:
    harmless = edit("minicalc/text.py", '"""Text helpers."""', '"""Text helpers (tidied)."""')
    verdict = verifier.verify(REAL_BUG + harmless)
    assert verdict.code == "inverse" and "minicalc/text.py" in (verdict.reason or "")
    assert verdict.inverse == {"minicalc/core.py": "fixes", "minicalc/text.py": "no failing test passes"}
    second = edit("minicalc/text.py", "return len(words)", "return len(words) + 1")
    both = verifier.verify(REAL_BUG + second)
    assert both.valid, both.reason
    assert both.inverse == {"minicalc/core.py": "fixes", "minicalc/text.py": "fixes"}
    assert len(both.fail_to_pass) == 2


def test_test_file_digest_sees_test_edits(tmp_path) -> None:
    import shutil

    shutil.copytree(FIXTURE, tmp_path / "r")
    before = digest_of_tests(tmp_path / "r")
    (tmp_path / "r" / "minicalc" / "core.py").write_text("# library edits do not count\n")
    assert digest_of_tests(tmp_path / "r") == before
    (tmp_path / "r" / "tests" / "test_core.py").write_text("def test_x():\n    pass\n")
    assert digest_of_tests(tmp_path / "r") != before


def test_grading_a_fix(verifier: Verifier) -> None:
    verdict = verifier.verify(mutation_patch(verifier.root, BugSpec("minicalc", "minicalc/text.py", "initials",
                                                                    "const_dec", 0)).patch)
    assert verdict.valid, verdict.reason
    args = (list(verdict.fail_to_pass), list(verdict.pass_to_pass))
    bug = mutation_patch(verifier.root, BugSpec("minicalc", "minicalc/text.py", "initials", "const_dec", 0)).patch
    assert verifier.grade_fix(bug, verdict.reference_fix, *args) is True
    assert verifier.grade_fix(bug, "", *args) is False  # no diff at all
    wrong = edit("minicalc/core.py", "        acc += v", "        acc += v  # unrelated")
    assert verifier.grade_fix(bug, wrong, *args) is False
    assert verifier.grade_fix(bug, edit("tests/test_text.py", '"A.L."', '"L.L."'), *args) is False


def test_config_is_a_suite_config(verifier: Verifier) -> None:
    assert isinstance(verifier.config, SuiteConfig) and verifier.config.tests == ("tests",)

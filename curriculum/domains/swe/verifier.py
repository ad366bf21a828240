"""The bug verifier and the fix grader.

A bug patch is valid iff (each rule's rejection code in brackets):

1. it passes the static patch rules of :mod:`.patches` [``empty``, ``binary``, ``deletes``,
   ``edits_tests``, ``not_python``, ``not_a_diff``, ``outside``];
2. it applies with ``git apply`` to a fresh copy [``apply``];
3. every test file is byte-identical afterwards [``tests_changed``];
4. the suite still runs and collects [``suite_error``, ``suite_timeout``, ``collect``] with no
   per-test timeout [``test_timeout``];
5. at least one grading test (passed in both preflight runs, not flaky) now fails or is missing —
   the fail-to-pass set [``no_failing_test``] — and at least one still passes — the pass-to-pass
   set [``no_passing_test``];
6. for every changed file, reverting that file alone makes at least one fail-to-pass test pass
   [``inverse``]. With a single changed file the reverted tree *is* the preflighted tree, whose
   grading tests passed twice, so the rule holds without another run (recorded as ``implied``).

``infra`` marks a sandbox that could not run (not the bug's fault). The reference fix is the
reverse patch (a diff from the bugged files back to the originals).

A candidate fix is graded on a fresh copy with the bug applied: it must pass the static rules
(it may not touch tests), apply, and then every fail-to-pass and pass-to-pass test must pass.
Grading returns ``None`` only when the sandbox itself failed (a null trial).
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from curriculum.domains.swe.patches import changed_files, diff_trees, git_apply, is_test_path, static_problem
from curriculum.domains.swe.sandbox import SuiteConfig, SuiteRun, SuiteRunner, Workspace

_STATIC_CODES = (("empty", "empty"), ("no lines", "empty"), ("binary", "binary"), ("deletes", "deletes"),
                 ("test file", "edits_tests"), ("non-Python", "not_python"), ("not a unified", "not_a_diff"),
                 ("leaves the repository", "outside"))
FAILING = ("failed", "error", "timeout")


@dataclass(frozen=True)
class BugVerdict:
    valid: bool
    code: str  # "ok" or a rejection code (see the module docstring)
    reason: str | None = None
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    reference_fix: str = ""
    inverse: dict[str, str] = field(default_factory=dict)
    failure_messages: tuple[str, ...] = ()
    copy_s: float = 0.0
    run_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"valid": self.valid, "code": self.code, "reason": self.reason,
                "fail_to_pass": list(self.fail_to_pass), "pass_to_pass": list(self.pass_to_pass),
                "changed": list(self.changed), "reference_fix": self.reference_fix, "inverse": self.inverse,
                "failure_messages": list(self.failure_messages), "copy_s": round(self.copy_s, 4),
                "run_s": round(self.run_s, 4)}

    @staticmethod
    def from_json(data: dict[str, object]) -> BugVerdict:
        return BugVerdict(bool(data["valid"]), str(data["code"]), data.get("reason"),  # type: ignore[arg-type]
                          tuple(data.get("fail_to_pass", ())), tuple(data.get("pass_to_pass", ())),  # type: ignore[arg-type]
                          tuple(data.get("changed", ())), str(data.get("reference_fix", "")),  # type: ignore[arg-type]
                          dict(data.get("inverse", {})),  # type: ignore[call-overload]
                          tuple(data.get("failure_messages", ())),  # type: ignore[arg-type]
                          float(data.get("copy_s", 0.0)),  # type: ignore[arg-type]
                          float(data.get("run_s", 0.0)))  # type: ignore[arg-type]


def static_code(reason: str) -> str:
    return next((code for marker, code in _STATIC_CODES if marker in reason), "static")


def digest_of_tests(root: Path) -> str:
    """sha256 over every test file of the tree (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if is_test_path(rel) and not rel.startswith(".propel"):
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def suite_problem(run: SuiteRun) -> tuple[str, str] | None:
    """(code, reason) when a run cannot be used to judge a bug."""
    if run.status == "infra":
        return "infra", f"sandbox infrastructure error: {run.reason}"
    if run.status == "timeout":
        return "suite_timeout", f"suite timed out: {run.reason}"
    if not run.ok:
        return "suite_error", f"suite did not run: {run.reason}"
    if run.collect_errors:
        return "collect", f"suite no longer collects: {', '.join(run.collect_errors[:3])}"
    timeouts = [t for t, r in run.results.items() if r.outcome == "timeout"]
    if timeouts:
        return "test_timeout", f"{len(timeouts)} tests time out (e.g. {timeouts[0]})"
    return None


class Verifier:
    """Verifies bug patches against one preflighted repository tree."""

    def __init__(self, root: Path, grading_tests: list[str], runner: SuiteRunner, config: SuiteConfig) -> None:
        self.root = root
        self.grading = tuple(grading_tests)
        self.runner = runner
        self.config = config
        self._test_digest = digest_of_tests(root)

    def _applied(self, patch: str) -> tuple[Workspace, str | None]:
        ws = Workspace(self.root)
        problem = git_apply(ws.root, patch)
        return ws, problem

    def verify(self, patch: str) -> BugVerdict:
        problem = static_problem(patch)
        if problem is not None:
            return BugVerdict(False, static_code(problem), problem)
        changed = tuple(c.path for c in changed_files(patch))
        ws, problem = self._applied(patch)
        try:
            if problem is not None:
                return BugVerdict(False, "apply", f"patch does not apply: {problem}", changed=changed,
                                  copy_s=ws.copy_s)
            if digest_of_tests(ws.root) != self._test_digest:
                return BugVerdict(False, "tests_changed", "test files differ after applying the patch",
                                  changed=changed, copy_s=ws.copy_s)
            fix = diff_trees(ws.root, self.root, list(changed))
            run = self.runner.run(ws.root, self.config)
        finally:
            ws.close()
        timing = {"copy_s": ws.copy_s, "run_s": run.run_s, "changed": changed}
        bad = suite_problem(run)
        if bad is not None:
            return BugVerdict(False, bad[0], bad[1], **timing)  # type: ignore[arg-type]
        outcomes = run.outcomes()
        f2p = tuple(t for t in self.grading if outcomes.get(t, "missing") != "passed")
        p2p = tuple(t for t in self.grading if outcomes.get(t) == "passed")
        messages = tuple(dict.fromkeys(run.results[t].message for t in f2p if t in run.results
                                       and run.results[t].message))[:3]
        sets = {"fail_to_pass": f2p, "pass_to_pass": p2p, "reference_fix": fix, "failure_messages": messages,
                **timing}
        if not f2p:
            return BugVerdict(False, "no_failing_test", "no previously passing test fails", **sets)  # type: ignore[arg-type]
        if not p2p:
            return BugVerdict(False, "no_passing_test", "no test passes any more", **sets)  # type: ignore[arg-type]
        inverse, extra_copy, extra_run = self._inverse(patch, changed, f2p)
        sets.update(copy_s=ws.copy_s + extra_copy, run_s=run.run_s + extra_run)
        failed = [path for path, state in inverse.items() if state not in ("implied", "fixes")]
        if failed:
            why = inverse[failed[0]]
            return BugVerdict(False, "infra" if why.startswith("infra") else "inverse",
                              f"reverting {failed[0]} alone fixes no failing test ({why})", inverse=inverse,
                              **sets)  # type: ignore[arg-type]
        return BugVerdict(True, "ok", None, inverse=inverse, **sets)  # type: ignore[arg-type]

    def _inverse(self, patch: str, changed: tuple[str, ...], f2p: tuple[str, ...]
                 ) -> tuple[dict[str, str], float, float]:
        """Per changed file: revert it alone and run the test files holding fail-to-pass tests."""
        if len(changed) == 1:
            return {changed[0]: "implied"}, 0.0, 0.0
        select = tuple(sorted({t.split("::", 1)[0] for t in f2p if t.split("::", 1)[0]}))
        out: dict[str, str] = {}
        copy_s = run_s = 0.0
        for path in changed:
            ws, problem = self._applied(patch)
            try:
                copy_s += ws.copy_s
                if problem is not None:
                    out[path] = f"infra: re-applying failed: {problem}"
                    continue
                original = self.root / path
                if original.is_file():
                    shutil.copy2(original, ws.root / path)
                else:
                    (ws.root / path).unlink(missing_ok=True)
                run = self.runner.run(ws.root, self.config, select)
                run_s += run.run_s
            finally:
                ws.close()
            if run.status == "infra":
                out[path] = f"infra: {run.reason}"
            elif not run.ok:
                out[path] = f"suite {run.status}: {run.reason}"
            else:
                fixed = [t for t in f2p if run.outcomes().get(t) == "passed"]
                out[path] = "fixes" if fixed else "no failing test passes"
        return out, copy_s, run_s

    def grade_fix(self, bug_patch: str, fix: str, fail_to_pass: list[str], pass_to_pass: list[str]) -> bool | None:
        """Whether ``fix`` repairs the bug: all fail-to-pass and pass-to-pass tests pass. ``None``:
        the sandbox failed (or the bug no longer applies: an infrastructure problem, not the solver's)."""
        problem = static_problem(fix)
        if problem is not None:
            return False
        ws, applied = self._applied(bug_patch)
        try:
            if applied is not None:
                return None
            if git_apply(ws.root, fix) is not None or digest_of_tests(ws.root) != self._test_digest:
                return False
            run = self.runner.run(ws.root, self.config)
        finally:
            ws.close()
        if run.status == "infra":
            return None
        if not run.ok or run.collect_errors:
            return False
        outcomes = run.outcomes()
        return all(outcomes.get(t) == "passed" for t in (*fail_to_pass, *pass_to_pass))

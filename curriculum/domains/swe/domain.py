"""The ``swe`` domain: bug-injection tasks on preflighted real repositories.

Generator output, either form (the first line that matches wins):

* a **bug spec** (the CPU/tiny-generator form, applied by the procedural mutator)::

      minicalc minicalc/core.py::clamp compare_flip 1

* a **patch** (an agent's or a lab's diff): a line ``repo: NAME`` followed by a unified diff.

``check`` runs the :class:`~curriculum.domains.swe.verifier.Verifier` (seconds: one or more suite
runs in a fresh sandboxed copy) and memoises the verdict on disk by the task's content hash under
``<cache>/tasks/``; a valid task's payload gains the fail-to-pass / pass-to-pass sets, the reference
fix (reverse patch) and the issue text. The solver sees the issue text and answers with a diff;
``grade`` applies the bug, then the answer, and runs the suite (``None``: the sandbox failed).
The label band for SWE is :data:`SWE_BAND` (k=3, in band with 1–2 solves of ≥ 2 valid trials).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curriculum.domains.base import ParseResult, Task, Validity, validate_each
from curriculum.domains.swe.cache import RepoCache, RepoCheckout, write_atomic
from curriculum.domains.swe.mutator import OPERATORS, MutationError, enumerate_specs, mutation_patch
from curriculum.domains.swe.preflight import PreflightPolicy, PreflightResult, episode_config, load_preflight
from curriculum.domains.swe.registry import SPLITS, assign_splits, load_registry
from curriculum.domains.swe.runners import get_suite_runner
from curriculum.domains.swe.sandbox import SuiteRunner
from curriculum.domains.swe.spec import BugSpec, parse_spec
from curriculum.domains.swe.tasktext import issue_text
from curriculum.domains.swe.verifier import BugVerdict, Verifier
from curriculum.sandbox.backends import bwrap_probe

NAME = "swe"
#: The SWE utility band (paper): k=3 trials, positive at 1–2 solves, at least 2 valid trials.
SWE_BAND: dict[str, int] = {"k": 3, "lo": 1, "hi": 2, "min_valid_trials": 2}
#: The fixed prompt of the tiny CPU generator (it writes one spec line, then EOS).
TINY_PROMPT = "BUG: "
#: ``instruct``: a chat model's instructions; ``tiny``: :data:`TINY_PROMPT`, the generator writes the whole
#: spec line (it picks the repository); ``tiny-repo``: :data:`TINY_PROMPT` + a repository name of the
#: domain's split + a space, the generator writes ``FILE::FUNCTION OPERATOR SITE`` for that repository;
#: ``tiny-func``: :data:`TINY_PROMPT` + ``REPO FILE::FUNCTION `` (a mutable function of the split), the generator
#: writes ``OPERATOR SITE`` (the bug, not the place: it transfers to repositories whose names it never learned).
PROMPT_STYLES = ("instruct", "tiny", "tiny-repo", "tiny-func")
#: The tiny styles whose prompt carries the start of the spec line after :data:`TINY_PROMPT`.
_PREFIXED_STYLES = ("tiny-repo", "tiny-func")
#: How a trainer grades a candidate fix for an emitted task: the message (or its ``grading`` object)
#: saved as task.json, the candidate diff as fix.diff; the repository must be in the local cache.
GRADING_COMMAND = "propel swe grade --message task.json --fix fix.diff"
_REPO_LINE = re.compile(r"^\s*repo:\s*([A-Za-z0-9_.\-]+)\s*$", re.MULTILINE)
_DIFF_BLOCK = re.compile(r"```(?:diff|patch)?[ \t]*\n(.*?)```", re.DOTALL)


def swe_band() -> Any:
    """:class:`probes.band.Band` with :data:`SWE_BAND` (imported lazily: the ``probes`` package loads torch)."""
    from probes.band import Band

    return Band(**SWE_BAND)


def extract_diff(text: str) -> str:
    """The diff in an answer: the last fenced diff block, else the text from the first header on."""
    blocks = [b for b in _DIFF_BLOCK.findall(text) if "--- " in b or "diff --git" in b]
    if blocks:
        return blocks[-1]
    for marker in ("diff --git", "--- "):
        at = text.find(marker)
        if at >= 0 and (at == 0 or text[at - 1] == "\n"):
            return text[at:]
    return ""


@dataclass
class RepoState:
    checkout: RepoCheckout
    preflight: PreflightResult
    verifier: Verifier


class SweDomain:
    """Bug-injection tasks on the preflighted repositories of one split (see the module docstring)."""

    name = NAME

    def __init__(self, cache_dir: str | Path | None = None, registry: list[str | Path] | None = None,
                 split: str | None = "rl-train", repos: list[str] | None = None, runner: str | SuiteRunner = "auto",
                 bundled_registry: bool = True, policy: PreflightPolicy | None = None,
                 prompt_style: str = "instruct") -> None:
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt_style {prompt_style!r}; choose one of {', '.join(PROMPT_STYLES)}")
        self.prompt_style = prompt_style
        self._targets: dict[str, list[str]] = {}
        if split is not None and split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)} (or None for all)")
        self.cache = RepoCache(cache_dir)
        self.specs = {s.name: s for s in load_registry(*(registry or []), bundled=bundled_registry)}
        unknown = sorted(set(repos or []) - set(self.specs))
        if unknown:
            raise ValueError(f"repositories not in the registry: {', '.join(unknown)}")
        splits = assign_splits(list(self.specs.values()))
        self.repo_names = list(repos) if repos else [n for n in self.specs if split is None or splits[n] == split]
        self.split = split
        self.policy = policy or PreflightPolicy()
        self._runner_spec = runner
        self._runner: SuiteRunner | None = None if isinstance(runner, str) else runner
        self._repos: dict[str, RepoState | str] = {}

    @property
    def runner(self) -> SuiteRunner:
        if self._runner is None:
            self._runner = get_suite_runner(str(self._runner_spec))
        return self._runner

    def repo(self, name: str) -> RepoState | str:
        """The cached, preflighted repository ``name``, or why it cannot be used."""
        if name not in self._repos:
            self._repos[name] = self._load(name)
        return self._repos[name]

    def _load(self, name: str) -> RepoState | str:
        spec = self.specs.get(name)
        if spec is None or name not in self.repo_names:
            return f"repository {name!r} is not in this domain's split ({self.split})"
        checkout = self.cache.lookup(spec)
        if checkout is None:
            return f"repository {name!r} is not fetched (`propel swe fetch`)"
        pf = load_preflight(self.cache, checkout.content_hash)
        if pf is None:
            return f"repository {name!r} has no preflight (`propel swe fetch`)"
        if not pf.ok:
            return f"repository {name!r} was excluded at preflight: {pf.reason}"
        runner = self._runner_for(pf.runner)
        if runner is None:
            return (f"repository {name!r} was preflighted with the {pf.runner} suite runner and this domain grades "
                    f"with {self.runner.name}: re-run `propel swe --runner {self.runner.name} fetch --only {name}` "
                    f"(or grade with --runner {pf.runner})")
        verifier = Verifier(checkout.root, pf.grading_tests, runner, episode_config(spec, self.policy, pf))
        return RepoState(checkout, pf, verifier)

    def _runner_for(self, preflighted: str) -> SuiteRunner | None:
        """The runner to verify and grade with: the tests a repository passes depend on the runner's
        environment (six's ``test_move_items[dbm_ndbm]`` passes under rlimit, is skipped under
        bubblewrap), so grading uses the preflight's runner. ``auto`` adopts it where it works here;
        an explicit other runner gets ``None`` (the caller says how to redo the preflight)."""
        if not preflighted or preflighted == self.runner.name:
            return self.runner
        if self._runner_spec == "auto" and (preflighted == "rlimit" or (preflighted == "bubblewrap" and
                                                                       bwrap_probe()[0])):
            return get_suite_runner(preflighted)
        return None

    def usable_repos(self) -> list[str]:
        return [n for n in self.repo_names if isinstance(self.repo(n), RepoState)]

    def generator_prompts(self, n: int, seed: int) -> list[str]:
        """Spec-writing prompts: ``instruct`` names a repository, a few of its functions and the
        operators; ``tiny`` is the fixed :data:`TINY_PROMPT` (the tiny generator writes the repo too);
        ``tiny-repo`` is :data:`TINY_PROMPT` + ``"REPO "``, a usable repository of this domain's split
        drawn uniformly (seeded) per prompt (:meth:`generation_text` puts it back in front of the
        completion); ``tiny-func`` adds ``FILE::FUNCTION `` of that repository, drawn uniformly among the
        functions the mutator can change. The tiny generator's pretraining lines (``TINY_PROMPT`` + a whole
        spec line) fit every tiny style: they only move the end of the prompt along the spec line."""
        usable = self.usable_repos()
        if not usable:
            raise ValueError(f"no fetched, preflighted SWE repository in split {self.split!r}; run "
                             "`propel swe fetch`")
        if self.prompt_style == "tiny":
            return [TINY_PROMPT] * n
        rng = random.Random(seed)
        if self.prompt_style == "tiny-repo":
            return [f"{TINY_PROMPT}{rng.choice(usable)} " for _ in range(n)]
        if self.prompt_style == "tiny-func":
            return [self._function_prompt(rng, usable) for _ in range(n)]
        prompts = []
        for _ in range(n):
            name = rng.choice(usable)
            state = self.repo(name)
            assert isinstance(state, RepoState)
            targets = sorted({f"{s.file}::{s.function}" for s in self.spec_space(name)})
            shown = rng.sample(targets, min(5, len(targets)))
            prompts.append(f"Repository: {name}\nFunctions: {' '.join(shown)}\n"
                           f"Operators: {' '.join(sorted(OPERATORS))}\n"
                           "Write one bug spec line: REPO FILE::FUNCTION OPERATOR SITE\n")
        return prompts

    def _function_prompt(self, rng: random.Random, usable: list[str]) -> str:
        """A ``tiny-func`` prompt: a repository drawn uniformly, then one of its mutable functions."""
        name = rng.choice(usable)
        targets = self._targets.get(name)
        if targets is None:
            targets = self._targets[name] = sorted({f"{s.file}::{s.function}" for s in self.spec_space(name)})
        if not targets:
            raise ValueError(f"repository {name!r} has no function the mutator can change; remove it from the "
                             "split (docs/SWE.md) or use prompt_style 'tiny-repo'")
        return f"{TINY_PROMPT}{name} {rng.choice(targets)} "

    def generation_text(self, prompt: str, completion: str) -> str:
        """What :meth:`parse` reads of one generation: a ``tiny-repo`` / ``tiny-func`` prompt's start of the
        spec line followed by the completion (``"BUG: six "`` + ``"six.py::f const_inc 0"`` →
        ``"six six.py::f const_inc 0"``); the completion alone for the other styles (their completions name
        the repository themselves)."""
        if self.prompt_style in _PREFIXED_STYLES and prompt.startswith(TINY_PROMPT):
            return prompt[len(TINY_PROMPT):] + completion
        return completion

    def spec_space(self, name: str) -> list[BugSpec]:
        """Every spec the mutator can apply in repository ``name`` (the procedural generator's space)."""
        state = self.repo(name)
        if isinstance(state, str):
            raise ValueError(state)
        return enumerate_specs(state.checkout.root, name)

    def spec_corpus(self, n: int, seed: int) -> list[str]:
        """``n`` spec lines drawn uniformly (seeded) from the usable repositories' spec spaces: the
        pretraining corpus of the tiny generator and the procedural generator's output."""
        spaces = {name: self.spec_space(name) for name in self.usable_repos()}
        rng = random.Random(seed)
        names = sorted(n_ for n_, space in spaces.items() if space)
        return [rng.choice(spaces[rng.choice(names)]).render() for _ in range(n)]

    def parse(self, completion: str) -> ParseResult:
        if "--- " in completion or "diff --git" in completion:
            return self._parse_patch(completion)
        spec = parse_spec(completion)
        if isinstance(spec, str):
            return ParseResult.failure(spec)
        state = self.repo(spec.repo)
        if isinstance(state, str):
            return ParseResult.failure(state)
        try:
            mutation = mutation_patch(state.checkout.root, spec)
        except MutationError as err:
            return ParseResult.failure(f"bug spec not applicable: {err}")
        payload = {"repo": spec.repo, "label": state.checkout.spec.label, "hash": state.checkout.content_hash,
                   "spec": spec.render(), "operator": spec.operator, "patch": mutation.patch}
        return ParseResult.success(Task(NAME, f"{spec.render()}\n{mutation.patch}", payload))

    def _parse_patch(self, completion: str) -> ParseResult:
        match = _REPO_LINE.search(completion)
        if match is None:
            return ParseResult.failure("a patch needs a 'repo: NAME' line")
        state = self.repo(match.group(1))
        if isinstance(state, str):
            return ParseResult.failure(state)
        patch = extract_diff(completion[match.end():])
        if not patch.strip():
            return ParseResult.failure("empty patch")
        payload = {"repo": match.group(1), "label": state.checkout.spec.label, "hash": state.checkout.content_hash,
                   "spec": None, "operator": "patch", "patch": patch}
        return ParseResult.success(Task(NAME, f"repo: {match.group(1)}\n{patch}", payload))

    def _memo(self, task: Task) -> Path:
        return self.cache.root / "tasks" / f"{task.content_hash}.json"

    def verify(self, task: Task) -> BugVerdict:
        """The verifier's verdict for a parsed task (memoised on disk by content hash)."""
        memo = self._memo(task)
        if memo.is_file():
            return BugVerdict.from_json(json.loads(memo.read_text())["verdict"])
        state = self.repo(str(task.payload["repo"]))
        if isinstance(state, str):
            return BugVerdict(False, "repo", state)
        verdict = state.verifier.verify(str(task.payload["patch"]))
        if verdict.code != "infra":
            write_atomic(memo, json.dumps({"payload": task.payload, "verdict": verdict.to_json()}))
        return verdict

    def check(self, task: Task) -> Validity:
        verdict = self.verify(task)
        if not verdict.valid:
            return Validity.invalid(task, f"{verdict.code}: {verdict.reason}")
        state = self.repo(str(task.payload["repo"]))
        assert isinstance(state, RepoState)
        spec = state.checkout.spec
        text = issue_text(spec.name, spec.version, list(verdict.fail_to_pass), list(verdict.failure_messages),
                          len(state.preflight.grading_tests))
        payload = {**task.payload, "version": spec.version, "fail_to_pass": list(verdict.fail_to_pass),
                   "pass_to_pass": list(verdict.pass_to_pass), "reference_fix": verdict.reference_fix,
                   "issue": text, "changed": list(verdict.changed), "grading_command": GRADING_COMMAND}
        return Validity.ok(Task(NAME, task.text, payload))

    def validate_batch(self, completions: list[str]) -> list[Validity]:
        return validate_each(self, completions)

    def reference_text(self, task: Task) -> str:
        """What the probes read: the bug spec line for a mutator bug (the tiny generator's own output),
        else the ``repo:`` line and the patch."""
        spec = task.payload.get("spec")
        return str(spec) if spec else task.text

    def solver_prompt(self, task: Task) -> str:
        issue = task.payload.get("issue")
        if not issue:
            raise ValueError("task has no issue text; run check() before building the solver prompt")
        return (f"{issue}\n\nRepository: {task.payload['label']}\nTask: {task.content_hash[:16]}\n"
                "Fix the bug in the library code (do not edit tests). Answer with a unified diff in a "
                "```diff block, paths relative to the repository root (a/... b/...).")

    def grade(self, task: Task, answer: str) -> bool | None:
        state = self.repo(str(task.payload.get("repo", "")))
        if isinstance(state, str) or "fail_to_pass" not in task.payload:
            return None
        return state.verifier.grade_fix(str(task.payload["patch"]), extract_diff(answer),
                                        list(task.payload["fail_to_pass"]), list(task.payload["pass_to_pass"]))

    def topic(self, task: Task) -> str:
        return str(task.payload.get("operator") or "patch")

    def validation_group(self, task: Task) -> str | None:
        """The probe-validation group (``probes.validation = "grouped"``): the bug's repository."""
        repo = task.payload.get("repo")
        return None if repo is None else str(repo)

    def grading_command(self, task: Task) -> str:
        """A shell command that grades a candidate fix (``fix.diff``) for this task locally, where the
        daemon's task memo is (``GRADING_COMMAND`` grades from an emitted message anywhere)."""
        return (f"python -m curriculum.domains.swe grade --repo {task.payload['repo']} "
                f"--task {task.content_hash} --fix fix.diff")


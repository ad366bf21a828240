"""Grade a candidate fix for an emitted SWE task from its message, on this machine's repository cache.

A ``swe`` message's ``grading`` object names the repository (``repo``, ``label`` = name==version,
``hash`` = the content hash of the tree the bug was verified on), the bug ``patch`` and the tests to
grade with (``fail_to_pass``, ``pass_to_pass``). Grading applies the bug and the candidate diff to a
fresh sandboxed copy of the cached tree and runs those tests (the verifier's ``grade_fix``, the code
the spot-checks use). The tree must be in the local cache (``propel swe fetch``; lab repositories
need their registry file: ``registry=`` or ``$PROPEL_SWE_REGISTRY``, paths separated by ``os.pathsep``).

:func:`local_grader` says why it cannot grade as a one-line reason (the trainer SDK raises it as
``GradingUnavailable``); ``propel swe grade --message FILE --fix DIFF`` and
``propel_sdk.grading.grade`` both come through here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curriculum.domains.swe.cache import RepoCache
from curriculum.domains.swe.domain import RepoState, SweDomain
from curriculum.domains.swe.registry import RegistryError

REGISTRY_ENV = "PROPEL_SWE_REGISTRY"
GRADING_FIELDS = ("repo", "label", "hash", "patch", "fail_to_pass", "pass_to_pass")


def grading_of(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``grading`` object of a message, or ``message`` itself when it is one already."""
    inner = message.get("grading")
    return inner if isinstance(inner, Mapping) else message


def _registries(registry: list[str | Path] | None) -> tuple[str, ...]:
    if registry is not None:
        return tuple(str(p) for p in registry)
    return tuple(p for p in os.environ.get(REGISTRY_ENV, "").split(os.pathsep) if p)


def local_grader(grading: Mapping[str, Any], cache_dir: str | Path | None = None,
                 registry: list[str | Path] | None = None, runner: str = "auto") -> SweDomain | str:
    """A :class:`SweDomain` that can grade this task here, or the one-line reason it cannot."""
    missing = [f for f in GRADING_FIELDS if f not in grading]
    if missing:
        return f"the message's grading object lacks {', '.join(missing)} (not a verified swe task)"
    name, label = str(grading["repo"]), str(grading["label"])
    cache = RepoCache(cache_dir)
    fetch = f"fetch it with `propel swe fetch --only {name}` (cache {cache.root}; $PROPEL_SWE_CACHE sets it)"
    if not (cache.tree(str(grading["hash"]))).is_dir():
        return f"repository {label} (tree {str(grading['hash'])[:12]}) is not in the local SWE cache: {fetch}"
    try:  # built per call: milliseconds next to the suite run, and a fetch in between is seen
        domain = SweDomain(cache.root, list(_registries(registry)), split=None, runner=runner)
    except RegistryError as err:
        return f"SWE registry: {err}"
    if name not in domain.specs:
        return (f"repository {name!r} is not in the SWE registry: pass its registry file (registry= or "
                f"${REGISTRY_ENV})")
    state = domain.repo(name)
    if isinstance(state, str):
        return state
    assert isinstance(state, RepoState)
    if state.checkout.content_hash != grading["hash"]:
        return (f"the cached {state.checkout.spec.label} is tree {state.checkout.content_hash[:12]}, the task was "
                f"verified on {str(grading['hash'])[:12]}: {fetch.replace('--only', '--force --only')}")
    return domain


def grade_message(message: Mapping[str, Any], completion: str, cache_dir: str | Path | None = None,
                  registry: list[str | Path] | None = None, runner: str = "auto") -> bool | str | None:
    """``True``/``False``: the candidate fix in ``completion`` solves the task or not; ``None``: the
    sandbox failed; a ``str``: why it cannot be graded here (see :func:`local_grader`)."""
    from curriculum.domains.base import Task

    grading = grading_of(message)
    domain = local_grader(grading, cache_dir, registry, runner)
    if isinstance(domain, str):
        return domain
    return domain.grade(Task("swe", "", dict(grading)), completion)

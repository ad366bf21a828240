"""The domain contract: what every task format provides, and the registry that selects one by name.

A domain turns generator text into a :class:`Task`, decides cheaply whether it is valid, renders
what the frozen reference model reads and what the solver sees, grades a solver answer and names
the task's topic. Expected failures are values: ``parse`` returns a :class:`ParseResult` with a
reason, ``check`` a :class:`Validity`, ``grade`` ``None`` when grading itself could not happen
(sandbox infrastructure error, comparison timeout). ``validate_batch`` never raises.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Task:
    """One generated task. ``payload`` is JSON-serialisable and holds whatever grading needs."""

    domain: str
    text: str
    payload: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def content_hash(self) -> str:
        """sha256 hex of the domain name and the canonical text (whitespace-normalised)."""
        canonical = "\n".join(line.rstrip() for line in self.text.strip().splitlines())
        return hashlib.sha256(f"{self.domain}\x00{canonical}".encode()).hexdigest()


@dataclass(frozen=True)
class ParseResult:
    """Either ``task`` (parsed) or ``reason`` (why the completion is not a task)."""

    task: Task | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.task is not None

    @staticmethod
    def success(task: Task) -> ParseResult:
        return ParseResult(task=task, reason=None)

    @staticmethod
    def failure(reason: str) -> ParseResult:
        return ParseResult(task=None, reason=reason)


@dataclass(frozen=True)
class Validity:
    """Result of the cheap validity check; ``task`` may carry an enriched payload (gold outputs)."""

    valid: bool
    reason: str | None
    task: Task

    @staticmethod
    def ok(task: Task) -> Validity:
        return Validity(valid=True, reason=None, task=task)

    @staticmethod
    def invalid(task: Task, reason: str) -> Validity:
        return Validity(valid=False, reason=reason, task=task)


@runtime_checkable
class Domain(Protocol):
    """A task format. One module per domain in ``curriculum/domains/``."""

    name: str

    def generator_prompts(self, n: int, seed: int) -> list[str]:
        """``n`` prompts for the generator, deterministic in ``seed``."""
        ...

    def parse(self, completion: str) -> ParseResult:
        """Turn generator text into a task, or say why not. Never raises."""
        ...

    def check(self, task: Task) -> Validity:
        """Cheap validity (may run the sandbox); may enrich the payload."""
        ...

    def reference_text(self, task: Task) -> str:
        """The text the frozen reference model reads."""
        ...

    def solver_prompt(self, task: Task) -> str:
        """The prompt the solver sees."""
        ...

    def grade(self, task: Task, answer: str) -> bool | None:
        """True/False for a graded answer; None when grading could not happen."""
        ...

    def topic(self, task: Task) -> str:
        """A short topic label (for the top-topic share metric)."""
        ...

    def validate_batch(self, completions: list[str]) -> list[Validity]:
        """Parse + check every completion, in order; parse errors are invalid-with-reason."""
        ...


def generation_text(domain: Domain, prompt: str, completion: str) -> str:
    """What ``domain.parse`` reads of one generation. A domain whose prompt carries part of the task
    (SWE's ``tiny-repo`` style names the repository in the prompt) defines
    ``generation_text(prompt, completion)``; for every other domain it is the completion."""
    join = getattr(domain, "generation_text", None)
    return completion if join is None else str(join(prompt, completion))


def unparsed_task(domain: str, completion: str) -> Task:
    """The placeholder task attached to a Validity when the completion did not parse."""
    return Task(domain=domain, text=completion, payload={})


def validate_each(domain: Domain, completions: list[str]) -> list[Validity]:
    """Default ``validate_batch``: parse and check one at a time."""
    out: list[Validity] = []
    for completion in completions:
        parsed = domain.parse(completion)
        if parsed.task is None:
            out.append(Validity.invalid(unparsed_task(domain.name, completion), parsed.reason or "parse"))
        else:
            out.append(domain.check(parsed.task))
    return out


#: name -> "module:factory"; imported lazily so that selecting ``arith`` never imports sympy.
_REGISTRY: dict[str, str] = {
    "arith": "curriculum.domains.arith:ArithDomain",
    "azr": "curriculum.domains.azr:AzrDomain",
    "math": "curriculum.domains.math:MathDomain",
    "swe": "curriculum.domains.swe.domain:SweDomain",
}


def available_domains() -> list[str]:
    """Names accepted by :func:`get_domain`, sorted."""
    return sorted(_REGISTRY)


def get_domain(name: str, **options: Any) -> Domain:
    """Build the domain registered as ``name`` with keyword ``options`` (its constructor's)."""
    target = _REGISTRY.get(name)
    if target is None:
        raise ValueError(f"unknown domain {name!r}; known domains: {', '.join(available_domains())}")
    module_name, _, attr = target.partition(":")
    factory: Callable[..., Domain] = getattr(importlib.import_module(module_name), attr)
    return factory(**options)

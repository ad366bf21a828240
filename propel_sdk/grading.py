"""Grade a solver completion against a frontier-task message alone (the trainer's reward).

    from propel_sdk.grading import grade, reward
    r = reward(task.message, completion)      # 1.0 correct, 0.0 wrong or ungradeable

The grading code is the domain's own (``curriculum.domains.<name>``: the same ``grade`` the
spot-checks use), imported lazily on the first call for that domain so that ``import propel_sdk``
stays torch-free and cheap. The message's ``grading`` field is the task's payload, which carries
what the domain needs:

* ``arith``: the gold value (pure Python, no sandbox);
* ``math``: the reference answer, compared with the domain's equivalence check (exact for plain
  numbers, sympy in the sandbox otherwise; ``None`` when the comparison times out);
* ``azr``: the hidden inputs and gold outputs; the solver's function runs in the sandbox (``None``
  when the sandbox itself failed);
* ``swe``: the bug patch and the candidate diff are applied to a fresh sandboxed copy of the
  repository tree the bug was verified on, and the message's fail-to-pass and pass-to-pass tests run
  (``curriculum.domains.swe.grading``). The tree must be in this machine's SWE cache (``propel swe
  fetch``; ``$PROPEL_SWE_CACHE``; lab repositories also need ``$PROPEL_SWE_REGISTRY``), else
  :class:`GradingUnavailable` says what to fetch. ``domain=SweDomain(...)`` grades with one you built.

Domain objects are built once per process and domain name with their default options; pass
``domain=`` to grade with one you configured (another sandbox, a SWE repository cache).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from curriculum.domains.base import Domain

#: domains whose messages carry everything grading needs
GRADABLE_FROM_MESSAGE = ("arith", "azr", "math")

_domains: dict[str, Domain] = {}
_lock = threading.Lock()


class GradingUnavailable(ValueError):
    """The task cannot be graded on this machine (swe: its repository is not in the local cache); the
    text says what to fetch or set."""


def _known_domains() -> list[str]:
    from curriculum.domains.base import available_domains

    return available_domains()


def _default_domain(name: str) -> Domain:
    if name not in GRADABLE_FROM_MESSAGE:
        raise ValueError(f"unknown domain {name!r} in message; known domains: {', '.join(_known_domains())}")
    with _lock:
        if name not in _domains:
            from curriculum.domains.base import get_domain

            _domains[name] = get_domain(name)
        return _domains[name]


def grade(message: Mapping[str, Any], completion: str, *, domain: Domain | None = None) -> bool | None:
    """``True`` when ``completion`` answers the task of ``message`` correctly, ``False`` when it is
    wrong, ``None`` when grading could not happen (sandbox failure, undecidable comparison).

    ``message`` is a frontier-task message (``LeasedTask.message`` or a ``FrontierTask`` dumped to a
    dict); ``domain`` overrides the default-built domain (it must have the message's domain name).
    Raises :class:`ValueError` for an unknown domain and :class:`GradingUnavailable` for ``swe``
    when the task's repository is not in the local SWE cache (the text says what to fetch)."""
    name = str(message.get("domain", ""))
    grading = message.get("grading")
    if not isinstance(grading, Mapping):
        raise ValueError(f"message {message.get('id')!r} has no 'grading' object")
    if domain is None and name == "swe":
        from curriculum.domains.swe.grading import local_grader  # lazily: the SDK imports no domain code

        found = local_grader(grading)
        if isinstance(found, str):
            raise GradingUnavailable(f"task {message.get('id')!r}: {found}")
        domain = found
    if domain is None:
        domain = _default_domain(name)
    elif domain.name != name:
        raise ValueError(f"message is a {name!r} task but domain= is {domain.name!r}")
    from curriculum.domains.base import Task

    # The message has no task text; every domain grades from the payload (arith falls back to the
    # text only for payloads older than its check(), which messages never carry).
    return domain.grade(Task(name, "", dict(grading)), completion)


def reward(message: Mapping[str, Any], completion: str, *, domain: Domain | None = None) -> float:
    """1.0 for a correct completion, 0.0 otherwise (wrong, or ungradeable: ``grade`` returned ``None``)."""
    return 1.0 if grade(message, completion, domain=domain) else 0.0

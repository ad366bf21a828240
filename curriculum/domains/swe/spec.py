"""The compact bug specification the CPU generator writes and the mutator applies.

One line: ``REPO FILE::FUNCTION OPERATOR SITE``, for example::

    minicalc minicalc/core.py::clamp compare_flip 1

``REPO`` is a registry name, ``FILE`` a repository-relative path, ``FUNCTION`` a qualified name
(``Class.method``), ``OPERATOR`` one of :data:`curriculum.domains.swe.mutator.OPERATORS` and
``SITE`` the 0-based index of the operator's match inside the function, in source order.
The first line of a completion that matches is used; anything else is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPEC = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s+([\w./\-]+\.py)::([A-Za-z_][\w.]*)\s+([a-z_]+)\s+(\d{1,4})\s*$",
                   re.MULTILINE)


@dataclass(frozen=True)
class BugSpec:
    repo: str
    file: str
    function: str
    operator: str
    site: int

    def render(self) -> str:
        return f"{self.repo} {self.file}::{self.function} {self.operator} {self.site}"


def parse_spec(text: str) -> BugSpec | str:
    """The first spec line in ``text``, or the reason there is none."""
    match = _SPEC.search(text)
    if match is None:
        return "no bug specification line (expected 'REPO FILE::FUNCTION OPERATOR SITE')"
    repo, file, function, operator, site = match.groups()
    return BugSpec(repo, file, function, operator, int(site))

"""Issue-style task text for a verified bug, from templates (an LM writer is not built yet).

The text names the repository and the observed failure (assertion/exception messages of the
failing tests, with test names masked) and says how to reproduce (run the suite). It never names
the changed file, function, operator, the fix or any test name.
"""

from __future__ import annotations

import hashlib
import re

_TITLES = (
    "Regression in {repo}: results no longer match the documented behaviour",
    "{repo} returns wrong results after the latest change",
    "Unexpected behaviour in {repo}",
)
_MAX_MESSAGE = 300


def mask_test_names(message: str, test_ids: list[str]) -> str:
    """``message`` with every test function/class name and test file path replaced."""
    names: set[str] = set()
    for tid in test_ids:
        file, _, rest = tid.partition("::")
        classname, _, name = rest.partition("::")
        names.update(n for n in (file, name.split("[")[0], *classname.split(".")) if n and len(n) > 3)
    for name in sorted(names, key=len, reverse=True):
        message = message.replace(name, "<test>")
    return re.sub(r"\s+", " ", message).strip()[:_MAX_MESSAGE]


def issue_text(repo: str, version: str, fail_to_pass: list[str], messages: list[str], n_tests: int) -> str:
    """The issue the solver reads (deterministic in its inputs)."""
    pick = int(hashlib.sha256("|".join(fail_to_pass).encode()).hexdigest(), 16)
    title = _TITLES[pick % len(_TITLES)].format(repo=repo)
    observed = [mask_test_names(m, fail_to_pass) for m in messages if m.strip()]
    lines = [f"# {title}", "",
             f"Package: {repo} {version}".rstrip(), "",
             f"After a recent change, {len(fail_to_pass)} of the project's {n_tests} tests fail.",
             ""]
    if observed:
        lines.append("Observed failures:")
        lines += [f"- {m}" for m in observed]
    else:
        lines.append("The failing tests report wrong results or unexpected exceptions.")
    lines += ["", "How to reproduce: run the project's test suite (`python -m pytest`) from the repository root.",
              "", "Expected: the whole suite passes again, without changing any test."]
    return "\n".join(lines)

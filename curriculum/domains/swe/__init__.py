"""The SWE domain: bug injection on real Python repositories, verified by their own test suites.

Pieces: :mod:`.registry` (which repositories, splits), :mod:`.cache` (content-addressed trees),
:mod:`.sandbox` / :mod:`.docker` (episode copies, suite runs), :mod:`.preflight`, :mod:`.patches`,
:mod:`.mutator` + :mod:`.spec` (procedural bugs, bug specs), :mod:`.verifier`, :mod:`.tasktext`,
:mod:`.synthetic` (benchmark solver), :mod:`.domain` (the ``swe`` Domain), :mod:`.cli`
(``python -m curriculum.domains.swe fetch|repos|grade``). See docs/SWE.md.
"""

from curriculum.domains.swe.cli import fetch_and_preflight

__all__ = ["fetch_and_preflight"]

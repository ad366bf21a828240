"""Choosing a suite runner by name: bubblewrap, rlimit (+netns as root) or Docker (one image per repository)."""

from __future__ import annotations

from curriculum.domains.swe.docker import DockerSuiteRunner
from curriculum.domains.swe.sandbox import SUITE_RUNNERS, BubblewrapSuiteRunner, RlimitSuiteRunner, SuiteRunner
from curriculum.sandbox.backends import bwrap_probe


def get_suite_runner(name: str = "auto") -> SuiteRunner:
    """``auto``: bubblewrap when ``bwrap`` works here, else rlimit (+netns as root)."""
    if name == "rlimit":
        return RlimitSuiteRunner()
    if name == "bubblewrap":
        return BubblewrapSuiteRunner()
    if name == "docker":
        return DockerSuiteRunner()
    if name != "auto":
        raise ValueError(f"unknown SWE suite runner {name!r}; choose one of {', '.join(SUITE_RUNNERS)}")
    return BubblewrapSuiteRunner() if bwrap_probe()[0] else RlimitSuiteRunner()

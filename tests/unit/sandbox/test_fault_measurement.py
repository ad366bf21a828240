"""The fault micro-benchmark (``benchmarks/sandbox_faults.py``, through :mod:`testkit.fork_faults`) measures
the product's fork server as it runs: the same source the sandbox runs, with a few reporting lines in place
of its main call."""

from __future__ import annotations

import pytest

from curriculum.sandbox.batch import HARNESS_SOURCE
from testkit.fork_faults import instrumented, per_program


def test_faults_and_cpu_are_counted_per_program_for_server_and_children() -> None:
    row = per_program(instrumented(HARNESS_SOURCE), programs=6, repeats=1)
    assert row["server"] > 0 and row["child"] > 0  # every program is one fork: both sides write pages
    assert row["zygote"] == 0  # the fork server forks its candidates itself
    assert row["total"] == row["server"] + row["children"]


def test_a_source_without_its_main_call_is_refused() -> None:
    with pytest.raises(ValueError, match="main"):
        instrumented("print('no fork server here')")

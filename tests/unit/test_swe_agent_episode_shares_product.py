"""``benchmarks/swe_agent_episode.py`` times the product's agent roles (issue #21): the generator episode
is ``generate_bug`` (the daemon's ``AgentBugSupply`` runs it), verification is ``SweDomain.check``, the
trials are the ``swe-agent`` backend built as the daemon builds it, graded and labelled by the spot-check
functions; only the model is scripted. Read as source (tests do not import benchmarks)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "swe_agent_episode.py"
SHARED = {("curriculum.domains.swe.agent_roles", "generate_bug"),
          ("curriculum.domains.swe.agent_backends", "build_agent_solver"),
          ("curriculum.domains.swe.agent_backends", "agent_limits"),
          ("curriculum.spotcheck", "grade_outcome"), ("curriculum.spotcheck", "compute_label"),
          ("curriculum.spotcheck", "bind_tasks"), ("testkit.servers", "scripted_server")}
#: the agent loop, its tools and the verifier must not be driven directly (they run inside the roles)
LOOP_INTERNALS = ("run_agent", "Toolbox", "Verifier", "Workspace", "git_apply", "grade_fix")


def test_benchmark_drives_the_agent_roles_and_copies_none() -> None:
    tree = ast.parse(BENCHMARK.read_text())
    imported = {(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert imported >= SHARED, sorted(SHARED - imported)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert not defined & {name for _, name in SHARED}, "the benchmark redefines a shared function"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & set(LOOP_INTERNALS), sorted(names & set(LOOP_INTERNALS))
    source = BENCHMARK.read_text()
    assert "domain.check(parsed.task)" in source and "solver.generate(prompts, k" in source

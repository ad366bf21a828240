"""``benchmarks/swe_agent_episode.py`` times the product's agent roles (issue #21): the generator episode
is ``generate_bug`` (the daemon's ``AgentBugSupply`` runs it), verification is ``SweDomain.check``, the
trials are the ``swe-agent`` backend built as the daemon builds it, graded and labelled by the spot-check
functions; only the model is scripted. Read as source (tests do not import benchmarks)."""

from __future__ import annotations

from testkit.benchmark_source import assert_drives_product

SHARED = {("curriculum.domains.swe.agent_roles", "generate_bug"),
          ("curriculum.domains.swe.agent_backends", "build_agent_solver"),
          ("curriculum.domains.swe.agent_backends", "agent_limits"),
          ("curriculum.labelling.spotcheck", "grade_outcome"), ("curriculum.labelling.spotcheck", "compute_label"),
          ("curriculum.labelling.spotcheck", "bind_tasks"), ("testkit.servers", "scripted_server")}
#: the agent loop, its tools and the verifier must not be driven directly (they run inside the roles)
LOOP_INTERNALS = ("run_agent", "Toolbox", "Verifier", "Workspace", "git_apply", "grade_fix")


def test_benchmark_drives_the_agent_roles_and_copies_none() -> None:
    source = assert_drives_product("swe_agent_episode", SHARED, LOOP_INTERNALS)
    assert "domain.check(parsed.task)" in source and "solver.generate(prompts, k" in source

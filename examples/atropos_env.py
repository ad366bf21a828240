"""Example Atropos environment: frontier tasks from a running daemon, graded by the domain grader.

Three processes besides the daemon (``propel serve`` or ``propel run``), as in any Atropos setup:

    run-api --host 127.0.0.1 --port 8000                      # Atropos's trajectory API
    vllm serve my-policy --port 9001                          # any OpenAI-compatible server
    python -m examples.atropos_env serve \\
        --env.propel_url http://127.0.0.1:8787 --env.solver_name my-policy \\
        --env.tokenizer_name my-policy --env.group_size 8 \\
        --openai.base_url http://127.0.0.1:9001/v1 --openai.model_name my-policy

and the trainer (it registers with run-api and pulls ``/batch``). ``process`` writes scored groups to a
JSONL file instead (no trainer; ``--env.data_path_to_save_groups``), ``evaluate`` grades a held-out
set (``--env.eval_path held_out.jsonl``, written by ``propel tasks export --state acked``).
``python -m examples.atropos_env serve --help`` lists every option. See docs/adapters/atropos.md.
"""

from __future__ import annotations

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from propel_sdk.atropos import PropelEnv, PropelEnvConfig


class ArithPropelEnv(PropelEnv):
    """:class:`PropelEnv` with defaults for the daemon's default ``arith`` run: short answers, groups of 8."""

    name = "propel-arith"

    @classmethod
    def config_init(cls) -> tuple[PropelEnvConfig, list[APIServerConfig]]:
        env, servers = super().config_init()
        return env.model_copy(update={"group_size": 8, "max_tokens": 32, "domains": {"arith": 1.0}}), servers


if __name__ == "__main__":
    ArithPropelEnv.cli()

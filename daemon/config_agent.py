"""Config sections of the SWE tool-calling agent (``[solver.agent]`` and ``[generator.agent]``).

The agent is the multi-turn loop of :mod:`curriculum.domains.swe.agent` over an OpenAI-compatible
chat endpoint (vLLM, SGLang). As a **solver** (``solver.backend = "swe-agent"``) it takes
``solver.base_url`` / ``solver.model`` and these limits. As a **generator** it is a second source
of bug tasks beside the trained policy: ``[generator.agent]`` names its own endpoint and how many
agent bugs each cycle adds (see docs/SWE.md, "The agent generator").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AgentLimitsConfig(BaseModel):
    """How one agent episode ends (each end is recorded: ``max_steps``, ``time``, ``loop``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int = Field(default=25, ge=1, description="model turns per episode")
    wall_s: float = Field(default=900.0, gt=0, description="wall-clock budget of one episode")
    repeat_limit: int = Field(default=3, ge=2, description="the same tool call this many times in a row ends "
                              "the episode as a loop")
    tool_output_chars: int = Field(default=4000, ge=100, description="tool results are cut to this length")
    tool_timeout_s: float = Field(default=60.0, gt=0, description="wall-clock limit of one bash tool call")

    def as_options(self) -> dict[str, Any]:
        """Plain keyword arguments of :func:`curriculum.domains.swe.agent_backends.agent_limits`."""
        return self.model_dump()


class GeneratorAgentConfig(AgentLimitsConfig):
    """The agent generator: ``per_cycle`` agent-written bugs join each cycle's sample (0: off)."""

    base_url: str | None = Field(default=None, description="OpenAI-compatible server of the agent, e.g. "
                                 "http://vllm:8000/v1")
    model: str | None = Field(default=None, description="the served model that writes bugs")
    per_cycle: int = Field(default=0, ge=0, description="agent bugs added to each cycle's sample (0: off); "
                           "episodes run in the background, a cycle takes those that have finished")
    concurrency: int = Field(default=1, ge=1, le=64, description="agent episodes running at once")
    timeout_s: float = Field(default=300.0, gt=0, description="per chat request")
    temperature: float = Field(default=0.7, ge=0)
    max_tokens: int = Field(default=2048, ge=1, description="per model turn")

    @model_validator(mode="after")
    def _endpoint(self) -> GeneratorAgentConfig:
        if self.per_cycle > 0:
            if not self.base_url:
                raise ValueError("generator.agent.base_url is required when generator.agent.per_cycle > 0 "
                                 "(the agent's OpenAI-compatible server, e.g. http://vllm:8000/v1)")
            if not self.model:
                raise ValueError("generator.agent.model is required when generator.agent.per_cycle > 0")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("generator.agent.base_url must start with http:// or https://")
        return self

    @property
    def enabled(self) -> bool:
        return self.per_cycle > 0

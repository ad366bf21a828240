"""What a trajectory probe reads for an SWE bug: one span per generated agent turn.

An agent generator episode (``[generator.agent]``) is stored turn by turn in ``agent_turns``
(role ``generator``; :func:`curriculum.store.trajectories.episode_turns`), each turn the dict
``{"content", "tool_calls", "tool_results"}``. :func:`episode_trajectory` renders such turns as one
text in which each assistant turn (its text and its tool calls, ``name(arguments)``) is a span and
the tool results follow it as context; with ``FeatureSpec(layer, pooling, turn_pooling)`` the
extractor pools each span's tokens, then aggregates the per-turn vectors with the turn pooling
(``probes.pooling.TURN_POOLINGS``: mean, last, last_half, attention).

The embedded spec generator writes one line per bug: :func:`bug_probe_input` gives its reference
text as a plain string, which the extractor treats as a single turn (every turn pooling then
returns that turn's vector), so one probe configuration covers both generators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from curriculum.domains.base import Domain, Task
from probes.inputs import TextInput, Trajectory

#: Characters of each tool result kept in the rendered trajectory (long test logs would crowd out
#: the turns themselves under the reference's token limit, which keeps the end).
TOOL_RESULT_CHARS = 600


def _call_text(call: Mapping[str, Any]) -> str:
    fn = call.get("function") or {}
    return f"{fn.get('name', '?')}({fn.get('arguments') or ''})"


def turn_text(turn: Mapping[str, Any]) -> str:
    """An assistant turn as the probe reads it: its text, then one ``name(arguments)`` line per tool call."""
    lines = [str(turn.get("content") or "").strip()]
    lines += [_call_text(call) for call in turn.get("tool_calls") or []]
    return "\n".join(line for line in lines if line) or "(empty turn)"


def episode_trajectory(turns: Sequence[Mapping[str, Any]], prompt: str | None = None) -> Trajectory:
    """The probe input of an episode: assistant turns as spans, tool results (cut to
    :data:`TOOL_RESULT_CHARS`) and the optional opening ``prompt`` as context between them."""
    if not turns:
        raise ValueError("an episode trajectory needs at least one turn")
    messages = [{"role": "user", "content": prompt}] if prompt else []
    for turn in turns:
        messages.append({"role": "assistant", "content": turn_text(turn)})
        messages += [{"role": "tool", "content": str(result)[:TOOL_RESULT_CHARS]}
                     for result in turn.get("tool_results") or []]
    return Trajectory.from_messages(messages)


def bug_probe_input(domain: Domain, task: Task, turns: Sequence[Mapping[str, Any]] | None = None) -> TextInput:
    """A bug's probe input: the generator episode's trajectory when it has stored turns (agent
    generator), else the domain's reference text (spec generator: one turn)."""
    return episode_trajectory(turns) if turns else domain.reference_text(task)


"""Agent trajectories in the store: one ``agent_turns`` row per model turn, idempotent on
``(task, role, agent, attempt, turn)`` (a redelivered spot-check writes nothing twice).

A turn is the dict an agent episode records (:class:`curriculum.domains.swe.agent.Episode`):
``content`` (the assistant text), ``tool_calls`` (OpenAI tool-call objects) and ``tool_results``
(one string per call)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from curriculum.store.db import insert_ignore
from curriculum.store.models import AgentTurn, utcnow

ROLES = ("solver", "generator")


def add_turns(sess: Session, task_id: int, role: str, agent_id: str, attempt: int,
              turns: Sequence[Mapping[str, Any]]) -> int:
    """Store an episode's turns in order; returns rows inserted."""
    if role not in ROLES:
        raise ValueError(f"agent turn role must be one of {ROLES}, got {role!r}")
    now = utcnow()
    rows = [{"task_id": task_id, "role": role, "agent_id": agent_id, "attempt": attempt, "turn": i,
             "content": str(t.get("content") or ""), "tool_calls": list(t.get("tool_calls") or []),
             "tool_results": list(t.get("tool_results") or []), "created_at": now} for i, t in enumerate(turns)]
    return insert_ignore(sess, AgentTurn, rows, ["task_id", "role", "agent_id", "attempt", "turn"])


def episode_turns(sess: Session, task_id: int, role: str, agent_id: str, attempt: int = 0) -> list[dict[str, Any]]:
    """The stored turns of one episode, in order (the shape :func:`add_turns` took)."""
    rows = sess.scalars(select(AgentTurn).where(
        AgentTurn.task_id == task_id, AgentTurn.role == role, AgentTurn.agent_id == agent_id,
        AgentTurn.attempt == attempt).order_by(AgentTurn.turn)).all()
    return [{"content": r.content, "tool_calls": r.tool_calls, "tool_results": r.tool_results} for r in rows]

"""The daemon as an Atropos environment: :class:`PropelEnv`, a ``BaseEnv`` from ``atroposlib``.

    python -m examples.atropos_env serve --env.propel_url http://127.0.0.1:8787 \\
        --openai.base_url http://127.0.0.1:9001/v1 --openai.model_name my-policy

* ``get_next_item`` leases (an :class:`~propel_sdk.aio.AsyncTaskStream`: the :class:`~propel_sdk.ledger.Ledger`
  rules of TRL's ``TaskStream``; leases renewed).
* ``collect_trajectories`` samples ``group_size`` completions, grades each with the domain grader and
  reports the group **once** as ``solver_name`` at the current version (``solved`` of ``n``, ungradeable
  ones as ``errors``), acked ``ack_every`` at a time; a group Atropos drops (equal scores) is acked too.
* Versions: ``step-N`` (order N), N the trainer's step: announced at start and at each Atropos checkpoint;
  ``solver_version`` acks as one fixed version instead.
* ``evaluate`` grades one greedy completion per task of a held-out JSONL (``eval_path``, e.g. written by
  ``propel tasks export --state acked``); nothing is leased.
* Shutdown (end of ``serve``/``process``, SIGTERM, Ctrl-C): in-flight acks land, every task leased and
  not reported is nacked (read-ahead ones untried): nothing stays leased.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx
from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from pydantic import Field

from propel_sdk.aio import AsyncPropelClient, AsyncTaskStream
from propel_sdk.grading import GradingUnavailable, grade
from propel_sdk.ledger import CloseSummary
from propel_sdk.protocol import LeasedTask, PropelClientError, describe

log = logging.getLogger("propel_sdk.atropos")
R = TypeVar("R")
Item = dict[str, Any]


class PropelEnvError(RuntimeError):
    """A setup problem the user fixes (token, URL, held-out file): printed as one line by ``cli``."""


class PropelEnvConfig(BaseEnvConfig):
    """``BaseEnvConfig`` plus where the daemon is and how to lease from it (``--env.<field>``)."""

    use_wandb: bool = Field(default=False, description="Whether to use wandb")
    propel_url: str = Field(default=os.environ.get("PROPEL_API_URL", "http://127.0.0.1:8787"),
                            description="the daemon's API (propel serve)")
    propel_token: str | None = Field(default=None, description="API token (default: $PROPEL_API_TOKEN)")
    solver_name: str = Field(default="atropos-policy", description="solver name to ack and announce as "
                             "(the daemon's solver.name to make it follow this policy)")
    solver_version: str | None = Field(default=None, description="ack as this fixed version (default: "
                                       "step-N, the trainer's step, announced at each checkpoint)")
    consumer: str = Field(default="atropos-env", description="consumer name on leases")
    lease_s: float = Field(default=600.0, gt=0, description="lease length; leases are renewed every lease_s/3")
    lease_batch: int = Field(default=8, ge=1, description="tasks leased per request (read-ahead)")
    ack_every: int = Field(default=8, ge=1, description="reported groups per ack request")
    idle_timeout_s: float = Field(default=5.0, ge=0, description="get_next_item waits this long for a task "
                                  "before answering None (serve asks again; process stops)")
    poll_s: float = Field(default=1.0, gt=0, description="poll interval while the queue is empty")
    domains: dict[str, float] | None = Field(default=None, description="lease only these domains (weights)")
    max_tokens: int = Field(default=256, ge=1, description="completion length cap per rollout")
    temperature: float = Field(default=1.0, ge=0, description="sampling temperature of rollouts")
    eval_path: str | None = Field(default=None, description="held-out JSONL of frontier messages for evaluate")
    eval_limit: int = Field(default=256, ge=1, description="held-out tasks graded per evaluate")


class PropelEnv(BaseEnv):
    """Frontier tasks from a running daemon as Atropos items; the domain grader as the reward."""

    name = "propel"
    env_config_cls = PropelEnvConfig

    def __init__(self, config: PropelEnvConfig, server_configs: Any, slurm: bool = False,
                 testing: bool = False) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.config: PropelEnvConfig = config
        self.client: AsyncPropelClient | None = None
        self.stream: AsyncTaskStream | None = None
        self.version: str | None = None
        self.summary: CloseSummary | None = None
        self._tasks: Any = None  # the stream's async iterator while it yields
        self._background: set[asyncio.Task[Any]] = set()
        self._announce_due: int | None = None
        self._signalled = False

    @classmethod
    def config_init(cls) -> tuple[PropelEnvConfig, list[APIServerConfig]]:
        # wandb_name is also the name run-api registers the environment under (it refuses none)
        server = APIServerConfig(model_name="policy", base_url="http://127.0.0.1:9001/v1", api_key="x")
        return PropelEnvConfig(wandb_name=cls.name), [server]

    # ---- start-up: connect, check the token, announce ------------------------------------------
    async def setup(self) -> None:
        if self.stream is not None:
            return
        cfg = self.config
        token = cfg.propel_token or os.environ.get("PROPEL_API_TOKEN")
        self.client = AsyncPropelClient(cfg.propel_url, token=token, max_retries=3)
        self.stream = AsyncTaskStream(
            self.client, solver=cfg.solver_name, batch=cfg.lease_batch, lease_s=cfg.lease_s,
            consumer=cfg.consumer, ack_every=cfg.ack_every, poll_s=cfg.poll_s, idle_timeout_s=cfg.idle_timeout_s,
            selection={"domains": cfg.domains} if cfg.domains else None)
        await self._announce(self.curr_step)  # also checks the URL and the token, before any lease

    async def _announce(self, step: int) -> None:
        """Announce ``step-<step>`` (or the fixed ``solver_version``, once) and ack as it from now on."""
        assert self.client is not None and self.stream is not None
        fixed = self.config.solver_version
        version = fixed or f"step-{step}"
        if version == self.version:
            return
        try:
            await self.client.announce(self.config.solver_name, version, order=None if fixed else step)
        except PropelClientError as err:
            if err.status in (401, 403):
                raise PropelEnvError(f"the daemon at {self.config.propel_url} refused the API token (HTTP "
                                     f"{err.status}): pass --env.propel_token or set PROPEL_API_TOKEN") from None
            raise PropelEnvError(f"announcing {self.config.solver_name}@{version} failed: {err}") from None
        except httpx.TransportError as err:
            raise PropelEnvError(f"cannot reach the daemon at {self.config.propel_url} ({describe(err)}): start "
                                 "`propel serve`, or pass --env.propel_url") from None
        self.version = version
        self.stream.set_version(version)
        log.info("announced %s@%s: outcomes are acked as it from now on", self.config.solver_name, version)

    async def register_env(self) -> None:
        await super().register_env()
        await self._announce(self.curr_step)  # a resumed trainer starts past step 0

    def save_checkpoint(self, step: int, data: Any = None) -> None:
        super().save_checkpoint(step, data)
        self._announce_due = step  # announced by env_step_checks (this hook is synchronous)

    async def env_step_checks(self) -> None:
        await super().env_step_checks()
        if self._announce_due is not None:
            step, self._announce_due = self._announce_due, None
            try:
                await self._announce(step)
            except PropelEnvError as err:
                log.error("%s: acks keep version %s", err, self.version)

    # ---- items and groups ----------------------------------------------------------------------
    async def get_next_item(self) -> Item | None:
        """The next leased task as ``{"task_id", "prompt", "domain"}``; None when the queue stayed empty
        for ``idle_timeout_s``."""
        assert self.stream is not None
        if self._tasks is None:
            self._tasks = self.stream.__aiter__()
        try:
            task: LeasedTask = await anext(self._tasks)
        except StopAsyncIteration:
            self._tasks = None
            return None
        return {"task_id": task.id, "prompt": task.message["solver_prompt"], "domain": task.message.get("domain")}

    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Item]]:
        """``group_size`` completions of the task, graded; the group's outcome is reported once."""
        assert self.stream is not None
        chat = [{"role": "user", "content": item["prompt"]}]
        try:
            completion = await self.server.chat_completion(messages=chat, n=self.config.group_size,
                                                           max_tokens=self.config.max_tokens,
                                                           temperature=self.config.temperature)
        except Exception as err:  # the inference server failed: the task goes back to Atropos's backlog
            log.warning("task %s: inference failed (%s): retried later", item["task_id"], describe(err))
            return None, [item]
        texts = [c.message.content or "" for c in completion.choices]
        verdicts = await asyncio.to_thread(self._grade_all, item["task_id"], texts)
        solved, errors = sum(v is True for v in verdicts), sum(v is None for v in verdicts)
        try:
            await self._shielded(self.stream.report(item["task_id"], solved=solved, n=len(texts), errors=errors))
        except PropelClientError as err:  # kept pending by the ledger; the rollouts still train
            log.error("task %s: ack refused (%s): the outcome stays pending", item["task_id"], describe(err))
        group = ScoredDataGroup(tokens=[], masks=[], scores=[1.0 if v else 0.0 for v in verdicts], messages=[])
        for text in texts:  # messages too: process's HTML report reads them
            tokens, masks = self.tokenize(chat, text)
            group["tokens"].append(tokens)
            group["masks"].append(masks)
            group["messages"].append([*chat, {"role": "assistant", "content": text}])
        return group, []

    def tokenize(self, chat: list[dict[str, str]], completion: str) -> tuple[list[int], list[int]]:
        """Tokens of the chat plus the completion, and the trainer's mask (-100 on the prompt). Atropos's
        ``tokenize_for_trainer`` takes a list from ``apply_chat_template``, which transformers 5 no
        longer returns by default (a ``BatchEncoding``): asked for here with ``return_dict=False``."""
        prompt = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
        tokens = self.tokenizer.apply_chat_template([*chat, {"role": "assistant", "content": completion}],
                                                    return_dict=False)
        return list(tokens), [-100] * len(prompt) + list(tokens[len(prompt):])

    def _grade_all(self, task_id: int, texts: list[str]) -> list[bool | None]:
        assert self.stream is not None
        message = self.stream.message(task_id)
        try:
            return [grade(message, t) for t in texts]
        except (GradingUnavailable, ValueError) as err:
            log.warning("task %d: cannot grade here (%s): the group is acked as errors", task_id, err)
            return [None] * len(texts)

    async def _shielded(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` to its end even when Atropos cancels the worker (eval, timeout, shutdown): an ack
        cut in flight would leave its outcome unsent. Shutdown waits for these."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return await asyncio.shield(task)

    # ---- evaluation ----------------------------------------------------------------------------
    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Accuracy of one greedy completion per held-out task (``eval_path``); nothing is leased or acked."""
        if not self.config.eval_path:
            log.info("evaluate: no --env.eval_path: skipped")
            return {}
        messages = read_held_out(Path(self.config.eval_path), self.config.eval_limit)
        gate = asyncio.Semaphore(self.config.max_eval_workers)

        async def one(message: dict[str, Any]) -> bool | None:
            async with gate:
                done = await self.server.chat_completion(
                    messages=[{"role": "user", "content": message["solver_prompt"]}], n=1,
                    max_tokens=self.config.max_tokens, temperature=0.0, split="eval")
            return await asyncio.to_thread(grade, message, done.choices[0].message.content or "")

        verdicts = await asyncio.gather(*(one(m) for m in messages))
        graded = [v for v in verdicts if v is not None]
        metrics = {"eval/accuracy": sum(graded) / len(graded) if graded else 0.0,
                   "eval/tasks": float(len(messages)), "eval/ungradeable": float(len(messages) - len(graded))}
        log.info("evaluate: accuracy %.3f on %d held-out tasks", metrics["eval/accuracy"], len(messages))
        await self.evaluate_log(metrics, task_name=f"{self.name}_held_out", verbose=False)
        return metrics

    # ---- lifetimes: every mode ends with the stream closed -------------------------------------
    async def env_manager(self) -> None:
        await self._until_stopped(super().env_manager())

    async def process_manager(self) -> None:
        await self._until_stopped(super().process_manager())

    async def _run_evaluate(self) -> None:
        """``evaluate``: grade the held-out set. The daemon is not contacted (nothing to lease or ack)."""
        if not self.config.eval_path:
            raise PropelEnvError("evaluate needs a held-out set: pass --env.eval_path (write one with `propel "
                                 "tasks export --state acked --out held_out.jsonl`)")
        await self._until_stopped(self.evaluate())

    async def _until_stopped(self, main: Awaitable[Any]) -> None:
        """Run ``main``; SIGTERM/SIGINT stop it. Either way, :meth:`shutdown` gives every unreported task back."""
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        assert me is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop, me)
        try:
            await main
        except asyncio.CancelledError:
            if not self._signalled:
                raise
            me.uncancel()
            log.warning("stopped by a signal: sending acks and returning unreported tasks")
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.shutdown()

    def _stop(self, main: asyncio.Task[Any]) -> None:
        self._signalled = True
        main.cancel()

    async def shutdown(self) -> CloseSummary | None:
        """Cancel rollouts, let in-flight acks land, flush, nack what is left (idempotent)."""
        for worker in [*self.workers, *([self.eval_runner] if self.eval_runner else [])]:
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._tasks is not None:
            with contextlib.suppress(Exception):
                await self._tasks.aclose()
            self._tasks = None
        if self.stream is not None and self.summary is None:
            self.summary = await self.stream.close()
            s = self.summary
            log.warning("propel: %d outcomes stored, %d refused, %d unsent; %d tasks returned to the queue",
                        s.stored, len(s.refused), len(s.unsent), s.nacked)
        if self.client is not None:
            await self.client.aclose()
        return self.summary

    @classmethod
    def cli(cls) -> None:
        """Atropos's CLI (``serve``, ``process``, ``evaluate``); a setup problem is one line, exit code 2."""
        try:
            super().cli()
        except PropelEnvError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)


def read_held_out(path: Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` frontier messages of a JSONL file (``propel tasks export`` records are messages)."""
    if not path.is_file():
        raise PropelEnvError(f"held-out set {path} not found: write one with `propel tasks export --state "
                             "acked --out held_out.jsonl`, or pass --env.eval_path")
    out = []
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            message = json.loads(line)
            if not {"solver_prompt", "grading", "domain"} <= message.keys():
                raise PropelEnvError(f"{path}:{n} is not a frontier message (needs solver_prompt, grading, domain)")
            out.append(message)
            if len(out) >= limit:
                break
    return out

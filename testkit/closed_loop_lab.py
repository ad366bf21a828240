"""The closed loop's two arms a lab would use instead of this service (#35), served through the product.

Both arms serve their tasks with ``propel tasks import`` + ``propel serve`` and the trainer leases and acks
them with :mod:`propel_sdk`, like the base and corpus arms; no daemon runs, so they spend no daemon trials.

* ``reasoning_gym`` — every trainer step imports one batch from Reasoning Gym's generator at its
  curriculum's current level (:class:`testkit.lab_arms.ReasoningGymSource`), leases it and trains on it;
  the step's groups feed the curriculum's level rule. Graded by the arith grader on the expression.
* ``filter`` — a static pool (the corpus arm's distribution, ``LoopSettings.filter_pool`` tasks) is
  imported once; every trainer step leases candidates, rolls out the trainer's own group for each, keeps
  the groups with 0 < accuracy < 1 and leases again until the batch is full
  (:func:`testkit.lab_arms.filter_batch`), then trains on the kept groups' rollouts. Every leased candidate
  is acked with its outcome; the dropped groups' rollouts are counted in ``filter_rollouts``.

The synthetic learner only (:class:`testkit.closed_loop.SyntheticLearner`): the tiny-LM row's trainer
(``examples/trl_trainer.py``) has no hook yet to filter its groups or to import between its steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from curriculum.domains.base import Task
from propel_sdk.client import Ack, LeasedTask, PropelClient
from testkit.closed_loop import (
    FILTERED_ARM,
    SOLVER_NAME,
    ArmServer,
    LoopSettings,
    StepOutcome,
    Stepper,
    SyntheticLearner,
    corpus_tasks,
    lease_batch,
    task_of,
    task_records,
)
from testkit.lab_arms import ReasoningGymSource, RGSettings, filter_batch

CONSUMER = "closed-loop-trainer"


def first_tasks(arm: str, settings: LoopSettings, seed: int, source: ReasoningGymSource | None) -> list[Task]:
    """What the arm's server imports before it starts: RG's first batch, or the filter's whole pool."""
    if arm == "reasoning_gym":
        assert source is not None
        return source.tasks(settings.batch)
    pool = settings.filter_pool or 16 * settings.rounds * settings.steps_per_round * settings.batch
    return corpus_tasks(pool, seed + 50_000, settings.max_ops)  # not the corpus arm's own draw


def import_tasks(server: ArmServer, tasks: Sequence[Task], source: str, tag: str) -> None:
    """``propel tasks import`` into the running server's store and run (as a user adds tasks), in this
    process: the CLI's own command, without a Python start per step (a lab's generator is in-process;
    a subprocess per step charged the arm ~4-15 s of interpreter start-up a step on this machine)."""
    from daemon.cli.main import cli

    assert server.config is not None
    path = server.config.parent / f"tasks-{tag}.jsonl"
    path.write_text(task_records(tasks, source, server.run))
    cli.main(["--config", str(server.config), "--log-level", "warning", "tasks", "import", str(path)],
             prog_name="propel", standalone_mode=False)


def rg_step(learner: SyntheticLearner, server: ArmServer, settings: LoopSettings,
            source: ReasoningGymSource) -> Stepper:
    """Import a batch at the curriculum's level (the first came with the server), lease it, train, ack,
    and let the curriculum see the groups."""
    steps = [0]

    def step(client: PropelClient, version: str) -> StepOutcome:
        if steps[0]:
            import_tasks(server, source.tasks(settings.batch), "reasoning-gym", f"rg-{steps[0]}")
        steps[0] += 1
        leased = lease_batch(client, server, settings.batch, settings.lease_timeout_s)
        tasks = [task_of(t.message["grading"]) for t in leased]
        solved = learner.train_step(tasks)
        _ack(client, version, settings, list(zip(leased, solved, strict=True)))
        source.record(solved, settings.group)
        return StepOutcome(tasks, solved, level=source.level)
    return step


def filter_step(learner: SyntheticLearner, server: ArmServer, settings: LoopSettings, daemon: bool = False) -> Stepper:
    """Lease candidates, roll out, keep 0 < accuracy < 1, refill; train on the kept. From the static pool
    (an empty answer: the pool is spent), or with ``daemon`` from the daemon's queue (the
    ``continuous_filter`` arm: an empty queue is waited on, and charged to the trainer, like any lease)."""
    def step(client: PropelClient, version: str) -> StepOutcome:
        def draw(n: int) -> list[LeasedTask]:
            if daemon:
                return lease_batch(client, server, n, settings.lease_timeout_s)
            return client.lease(n, lease_s=3_600, consumer=CONSUMER)

        def rollout(cands: list[LeasedTask]) -> list[int]:
            return learner.rollout([task_of(t.message["grading"]) for t in cands])

        out = filter_batch(draw, rollout, settings.batch, settings.group)
        _ack(client, version, settings, out.kept + out.dropped)  # every candidate was rolled out
        if len(out.kept) < settings.batch:
            raise RuntimeError(f"filter arm: {len(out.kept)}/{settings.batch} groups kept after "
                               f"{out.stats.candidates} candidates, the pool ran out; raise filter_pool "
                               f"(now {settings.filter_pool or 'the default'}); log {server.log}")
        learner.learn([n for _, n in out.kept])
        return StepOutcome([task_of(t.message["grading"]) for t, _ in out.kept], [n for _, n in out.kept],
                           filter_rollouts=out.stats.dropped_rollouts)
    return step


def _ack(client: PropelClient, version: str, settings: LoopSettings, outcomes: list[tuple[LeasedTask, int]]) -> None:
    client.ack_many([Ack(t, solved=n, n=settings.group, solver=SOLVER_NAME, version=version or None)
                     for t, n in outcomes])


def lab_stepper(arm: str, learner: SyntheticLearner, server: ArmServer, settings: LoopSettings,
                source: ReasoningGymSource | None) -> Stepper:
    if arm == "reasoning_gym":
        assert source is not None
        return rg_step(learner, server, settings, source)
    return filter_step(learner, server, settings, daemon=arm == FILTERED_ARM)


def rg_source(arm: str, seed: int, settings: LoopSettings, rg: RGSettings | None = None) -> ReasoningGymSource | None:
    """The RG arm's source (one line naming the install when reasoning-gym is missing); None otherwise."""
    return ReasoningGymSource(rg or RGSettings(), seed, settings.max_ops) if arm == "reasoning_gym" else None


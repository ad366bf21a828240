"""The loop's part of following a trainer's solver (issue #36): a solver known only through acks and announces.

When the followed solver (:mod:`curriculum.frontier.followed`) is a trainer's, there is no endpoint to
spot-check, so the spot-check phase becomes :func:`trainer_round`:

* **false positives from acks** — the trainer's new labels of probe-high tasks that landed outside the
  band are recorded as false positives (the aux retrain's negatives), as a spot-check harvest would;
* **drift from its labels** — on a new announced version the drift measurement's sampled tasks (already
  acked by an older version) are served again (:func:`curriculum.store.queue.serve_again`, message field
  ``"remeasure": true``); the trainer's acks of them under the new version are the measurement;
* **probe refresh** — the primary and aux probes train on its labels (the retrain and refresh jobs read
  the followed solver's labels); the primary is refreshed every ``frontier.refresh_every_trainer_labels``
  new labels (:func:`frontier_settings`).

Emission adds an **exploration share** (:func:`explore_picks`): ``emission.explore_share`` of what is
emitted is drawn unfiltered and marked ``"explore": true``, so the probes learn from labels that their
own selection did not bias. It is a share of what the probes select, never a filler: when they select
nothing, nothing is explored either.

A **stalled emission** (``emission_stalled``: nothing passed the gate for ``emission.stall_cycles`` cycles)
cannot be answered with spot-checks, as it is for the configured solver (:mod:`daemon.loop.emission_watch`):
the trainer's acks are its only labels. So while the stall stands and the queue holds no ready task, the
top :data:`BELOW_BAR_SHARE` of the emit window's candidates by score are served below the bar, marked
``"below_bar": true`` (:func:`below_bar_plan`), with the exploration share beside them. Their acks refresh
the probes; the stall ends when a task passes the gate again. Without it, a weak trainer whose probe scored
no task above ``emission.min_probability`` waited for good (480 of 486 cycles emitted nothing).

**Frontier replay** (:func:`replay`, opt-in): a task whose ack by the trainer's current version landed in band is the
surest frontier task there is, measured on exactly the solver that matters. It is served again (message
``"replay": true``, ``"replays": n``), at most ``emission.replay_max`` times and only while its newest ack stays
in band, as prioritized level replay does for RL environments. A replay's ack of the same version overwrites
that version's label of the task (one label per task and version): the newest outcome stands.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import select

from curriculum.frontier.followed import CONFIG_WHY, Followed, FollowMode, follows_line, resolve
from curriculum.labelling.spotcheck import LabelValue, false_positives
from curriculum.store import lineage, queue
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, TaskRow
from daemon.loop import health
from daemon.loop.frontier import FrontierSettings, FrontierTracker
from daemon.loop.phases import Candidate, emission_plan
from daemon.loop.state import DriverState
from probes.band import Band, Side

log = logging.getLogger("propel.driver")

#: Message fields of a task served unfiltered, of one served again to measure drift, and of one served below
#: the emission bar while the emission is stalled.
EXPLORE, REMEASURE, BELOW_BAR = "explore", "remeasure", "below_bar"
#: Message fields of a task served again because the trainer's newest ack of it landed in band, and how often.
REPLAY, REPLAYS = "replay", "replays"
#: An in-band ack older than this is not replayed: the verdict of a moving solver ages.
REPLAY_WINDOW_S = 900.0
#: A stalled emission to a trainer serves this top share of the emit window's candidates below the bar.
BELOW_BAR_SHARE = 0.25


class _Settings(Protocol):
    @property
    def frontier_threshold(self) -> float: ...
    @property
    def band(self) -> Band: ...
    @property
    def seed(self) -> int: ...
    @property
    def explore_share(self) -> float: ...
    @property
    def replay_max(self) -> int: ...


class Driver(Protocol):
    """What following needs of :class:`daemon.loop.driver.Driver` (a protocol: no import cycle)."""

    store: Store
    run_id: int
    clock: Callable[[], datetime]

    @property
    def s(self) -> _Settings: ...

    @property
    def frontier(self) -> FrontierTracker: ...

    def _health(self, state: DriverState, checks: dict[str, health.Degradation | None]) -> None: ...


def followed(store: Store, configured: str, mode: FollowMode) -> Followed:
    """The solver the loop follows now (read from the store: an announce switches it without a restart)."""
    if mode == "config":
        return Followed(configured, CONFIG_WHY)
    with store.session() as s:
        return resolve(s, configured, mode)


def switch(now: Followed, state: DriverState) -> bool:
    """Note the followed solver in ``state``; on a change (the first trainer announced) log it once and forget
    the previous solver's version, so no drift measurement opens across two solvers. True on a change."""
    before, state.followed = state.followed, now.name
    if before == now.name or (before is None and not now.trainer):
        return False
    state.solver_version = None
    log.warning("%s", follows_line(now), extra={"fields": {"followed": now.name}})
    return True


def frontier_settings(settings: FrontierSettings, trainer: bool) -> FrontierSettings:
    """A trainer's solver refreshes the primary every ``refresh_every_trainer_labels`` of its labels, on its
    newest ``refresh_trainer_label_window`` labels when that is set (0, the default: all usable ones), with the
    band lowered by ``trainer_band_lead`` solves."""
    if not trainer:
        return settings
    return replace(settings, refresh_every_labels=settings.refresh_every_trainer_labels,
                   refresh_recent_labels=settings.refresh_trainer_label_window,
                   band_lead=settings.trainer_band_lead)


def trainer_round(driver: Driver, cycle: int, state: DriverState) -> dict[str, float]:
    """The spot-check phase of a followed trainer: mine its new labels, serve drift re-measurements, observe drift."""
    values = mine_acks(driver, state)
    served = remeasure(driver, cycle, state)
    replayed = replay(driver, state)
    values |= driver.frontier.observe_drift(cycle)
    values |= {"spotcheck_dispatched": 0.0, "drift_remeasured": float(len(served)), "replayed": float(len(replayed))}
    state.totals.drift_remeasured += len(served)
    # no spot-check endpoint: the budget, worker and broker reasons are not this solver's to raise
    driver._health(state, {health.BUDGET: None, health.WORKERS: None, health.BROKER: None})
    return values


def mine_acks(driver: Driver, state: DriverState) -> dict[str, float]:
    """The followed trainer's labels written since the last look: false positives among the probe-high ones
    (what a spot-check harvest records), and their in-band share and the probes' precision as metrics."""
    name, band = driver.frontier.name, driver.s.band
    with driver.store.session() as s:
        rows = s.execute(select(Label.id, Label.task_id, Label.solved, Label.valid_trials, Label.in_band, Label.explore)
                         .join(TaskRow, TaskRow.id == Label.task_id)
                         .where(Label.run_id == driver.run_id, Label.solver_name == name, Label.source == "consumer",
                                Label.id > state.follow_label_cursor, TaskRow.valid)
                         .order_by(Label.id)).all()
        if not rows:
            return {"trainer_labels": 0.0}
        state.follow_label_cursor = int(rows[-1].id)
        scores = lineage.latest_scores(s, [int(r.task_id) for r in rows])
        labelled = [(int(r.task_id), True, scores[r.task_id][1] if r.task_id in scores else 0.0,
                     LabelValue(int(r.solved), int(r.valid_trials), r.in_band)) for r in rows]
        fps = false_positives(labelled, driver.s.frontier_threshold, band)
        lineage.add_false_positives(s, [(t, scores[t][0], side, solved, k, p) for t, side, solved, k, p in fps
                                        if t in scores])
    known = [r for r in rows if r.in_band is not None]
    high = [lab for t, _, p, lab in labelled if p >= driver.s.frontier_threshold and lab.in_band is not None]
    out = {"trainer_labels": float(len(rows)), "false_positives": float(len(fps)),
           "trainer_explore_labels": float(sum(1 for r in rows if r.explore))}
    if known:
        out["trainer_utility"] = sum(1 for r in known if r.in_band) / len(known)
        # above the band: the served mix is behind the trainer's solver (benchmarks/follow_pool.py)
        out["trainer_too_easy"] = sum(1 for r in known if band.side(int(r.solved), int(r.valid_trials))
                                      is Side.TOO_EASY) / len(known)
    if high:
        out["probe_precision"] = sum(1 for lab in high if lab.in_band) / len(high)
        out["false_positive_rate"] = (len(high) - sum(1 for lab in high if lab.in_band)) / len(high)
    return out


def remeasure(driver: Driver, cycle: int, state: DriverState) -> list[int]:
    """Serve again the open drift measurement's tasks the current version has not labelled yet."""
    frontier = driver.frontier
    todo = frontier.plan_drift(cycle, state, budget=10**9)  # a trainer's acks cost no spot-check budget
    if not todo:
        return []
    sid = frontier.serving_id()
    with driver.store.session() as s:
        done = set(s.scalars(select(Label.task_id).where(Label.run_id == driver.run_id, Label.solver_id == sid,
                                                          Label.task_id.in_(todo))))
        return queue.serve_again(s, driver.run_id, [t for t in todo if t not in done],
                                 {REMEASURE: True, REPLAY: False, "remeasure_version": frontier.current_version()})


def replay(driver: Driver, state: DriverState) -> list[int]:
    """Frontier replay: serve again the settled tasks whose newest ack, by the followed trainer's current version
    in the last :data:`REPLAY_WINDOW_S`, landed in band and that were replayed fewer than
    ``emission.replay_max`` times (none while an escalation pauses emission, none of a paused topic)."""
    limit = driver.s.replay_max
    if limit <= 0 or state.emission_paused_by:
        return []
    sid, since = driver.frontier.serving_id(), driver.clock() - timedelta(seconds=REPLAY_WINDOW_S)
    with driver.store.session() as s:
        rows = s.execute(select(QueueItem.task_id, QueueItem.message, QueueItem.topic)
                         .join(Label, (Label.task_id == QueueItem.task_id) & (Label.run_id == QueueItem.run_id)
                               & (Label.solver_id == sid) & (Label.source == "consumer"))
                         .join(TaskRow, TaskRow.id == QueueItem.task_id)
                         .where(QueueItem.run_id == driver.run_id, QueueItem.state == "acked",
                                QueueItem.outcome_solver == sid, QueueItem.acked_at >= since,
                                Label.in_band.is_(True), TaskRow.valid)).all()
        due: dict[int, list[int]] = {}  # replays after this one → task ids
        for r in rows:
            n = int(dict(r.message).get(REPLAYS, 0))
            if n < limit and r.topic not in state.paused_topics:
                due.setdefault(n + 1, []).append(int(r.task_id))
        served: list[int] = []
        for n, ids in sorted(due.items()):
            served += queue.serve_again(s, driver.run_id, sorted(ids), {REPLAY: True, REPLAYS: n, REMEASURE: False,
                                                                         EXPLORE: False, BELOW_BAR: False})
    return sorted(served)


def explore_picks(cands: Sequence[Candidate], plan: Sequence[int], share: float, paused: frozenset[str],
                  seed: int) -> list[int]:
    """Unfiltered tasks to emit beside the probe-selected ``plan``: ``share`` of the total emitted
    (``ceil(len(plan) × share / (1 − share))``, none when the plan is empty), drawn uniformly from the
    other candidates (paused topics excepted), deterministic in ``seed``."""
    if not plan or share <= 0:
        return []
    n = math.ceil(len(plan) * share / (1 - share))
    chosen = set(plan)
    rest = sorted(c.task_id for c in cands if c.task_id not in chosen and c.topic not in paused)
    return random.Random(seed).sample(rest, min(n, len(rest)))


def below_bar_plan(cands: Sequence[Candidate], *, stalled: bool, ready: int, paused: frozenset[str],
                   max_topic_share: float) -> list[int]:
    """A followed trainer's stall response: while ``stalled`` and no task is ready in the queue, the top
    :data:`BELOW_BAR_SHARE` of ``cands`` by score (at least one), whatever the bar; out-of-band verdicts,
    paused topics and the topic cap still apply (:func:`daemon.loop.phases.emission_plan`)."""
    if not stalled or ready > 0 or not cands:
        return []
    n = math.ceil(BELOW_BAR_SHARE * len(cands))
    return emission_plan(cands, min_probability=0.0, max_topic_share=max_topic_share, high_water_mark=n,
                         ready_now=0, paused_topics=paused)


def mark(message: dict[str, Any], explore: bool, below_bar: bool = False) -> dict[str, Any]:
    """A message marked as served unfiltered (``"explore": true``) or below the bar (``"below_bar": true``)."""
    if explore:
        return {**message, EXPLORE: True}
    return {**message, BELOW_BAR: True} if below_bar else message

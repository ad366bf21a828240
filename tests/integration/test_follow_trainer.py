"""A daemon follows a trainer it knows only through acks and announces (issue #36): the loop's driver (fake
generator, real store, real retrains on a tiny reference) with ``solver.follow = "first_trainer"``, and a
``propel serve`` subprocess on the same store that the trainer talks to over HTTP, as a user's trainer would.

Once the trainer announces, the driver stops spot-checking, emits tasks for the trainer's solver (``lease(solver=…)``
works), with a capped share of them unfiltered and marked ``explore`` (and so are their labels), mines false
positives from the acks, refreshes the primary on the trainer's labels, and measures drift after the next
announce by serving labelled tasks again (``remeasure``) — all said by ``/v1/status``."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from curriculum.frontier import drift
from curriculum.frontier.followed import resolve
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store.db import Store
from curriculum.store.models import FalsePositive, Label, MetricPoint, RetrainJob, SolverTrial, TaskRow
from daemon.loop import escalation, health
from daemon.loop.driver import Driver
from daemon.loop.frontier import FrontierSettings
from propel_sdk.client import Ack, LeasedTask, PropelClient
from testkit.closed_loop import task_of
from testkit.driver import make_driver, tick_to
from testkit.servers import free_port, wait_http

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # ~45 s per database unloaded, ~100 s on a busy machine
ROOT = Path(__file__).resolve().parents[2]
TRAINER = "my-policy"


@pytest.fixture
def serve(store: Store, tmp_path: Path) -> Iterator[str]:
    """``propel serve`` of run ``drv`` on the test's store (the default solver settings: follow the first trainer)."""
    port = free_port()
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'run_name = "drv"\nseed = 1\n[api]\nport = {port}\n')
    env = {k: v for k, v in os.environ.items() if k != "PROPEL_CONFIG"}
    env.update(PROPEL_DATABASE_URL=store.url, PROPEL_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), "serve"], env=env,
                                cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/status", 120, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _train(client: PropelClient, driver: Driver, version: str, solver: str | None = TRAINER) -> list[LeasedTask]:
    """One emit's worth: lease what is served for the trainer's solver, ack each once as ``version``
    (rolled out by a weaker synthetic solver than the daemon's own)."""
    tick_to(driver, "rl", driver.state()[1] + 1)
    leased = client.lease(n=64, lease_s=600, consumer="trainer", solver=solver)
    policy = SyntheticArithSolver(offset=4.0, seed=3)
    acks = []
    for t in leased:
        p = policy.success_probability(task_of(t.message["grading"]).text)
        acks.append(Ack(t, solved=round(8 * p), n=8, solver=TRAINER, version=version))
    assert set(client.ack_many(acks).values()) <= {"acked"}
    return leased


def test_a_daemon_follows_the_first_trainer_through_its_acks(store: Store, tmp_path: Path, serve: str) -> None:
    frontier = FrontierSettings(refresh_every_trainer_labels=40, drift_per_stratum=4, refresh_trainer_label_window=60,
                                trainer_band_lead=1)
    driver, _ = make_driver(store, tmp_path, follow="first_trainer", explore_share=0.25, frontier=frontier)
    tick_to(driver, "rl", 1)  # a cycle before any trainer: the daemon's own solver, spot-checked
    with store.session() as s:
        spot_trials = s.scalar(select(func.count()).select_from(SolverTrial))
    assert spot_trials and not driver.followed.trainer

    with PropelClient(serve, token=None) as client:
        got = client.announce(TRAINER, "step-0")
        assert got["followed"] is True and "notice" not in got and f"'{TRAINER}'" in got["following"]
        assert driver.followed.name == TRAINER and driver.followed.trainer
        served: list[LeasedTask] = []
        for _ in range(3):
            served += _train(client, driver, "step-0", solver=TRAINER if served else None)
        assert served and {t.message["solver"] for t in served[-10:]} == {TRAINER}  # lease(solver=…) selects them
        explored = [t for t in served if t.message.get("explore")]
        assert explored and len(explored) <= 0.25 * len(served) + 4  # a capped share, never a filler
        client.announce(TRAINER, "step-1")
        after = [t for _ in range(2) for t in _train(client, driver, "step-1")]
        remeasured = [t for t in after if t.message.get("remeasure")]
        status = client.status()["following"]
    tick_to(driver, "rl", driver.state()[1] + 1)  # a trainer round mines the last acks

    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(SolverTrial)) == spot_trials  # no spot-check since
        assert s.scalar(select(func.count()).select_from(SolverTrial).where(SolverTrial.solver_name == TRAINER)) == 0
        labels = s.execute(select(Label.solver_version, Label.explore).where(Label.solver_name == TRAINER)).all()
        fps = s.scalar(select(func.count()).select_from(FalsePositive))
        jobs = s.scalars(select(RetrainJob.spec)).all()
        measured = drift.measurements(s, driver.run_id, TRAINER, "done") + drift.measurements(
            s, driver.run_id, TRAINER, "measuring")
        mined = s.scalars(select(MetricPoint.value).where(MetricPoint.name == "trainer_labels")).all()
        too_easy = _per_cycle(s, driver.run_id, "trainer_too_easy", "trainer_labels")
        above = s.scalar(select(func.count()).select_from(Label).where(  # every ack here has n = k, all valid
            Label.run_id == driver.run_id, Label.solver_name == TRAINER, Label.source == "consumer",
            Label.solved > driver.s.band.hi))
        assert resolve(s, "configured", "first_trainer").name == TRAINER  # from the store: a restart keeps it
    explored_all = {t.id for t in served + after if t.message.get("explore")}
    assert sum(1 for _, e in labels if e) >= len(explored_all) > 0  # the explore flag is on the stored labels
    assert fps > 0 and sum(mined) >= len(served)  # false positives mined from the acks
    assert above and sum(share * n for share, n in too_easy) == pytest.approx(above)  # every ack above the band
    refreshes = [j for j in jobs if j.get("role") == "primary" and j.get("solver") == TRAINER]
    assert refreshes and {j["recent_labels"] for j in refreshes} == {60}  # on its newest labels
    assert {(j["band_lo"], j["band_hi"], j["band_lead"]) for j in refreshes} == {(0, 2, 1)}  # a solve below 1-3
    assert remeasured and {t.message.get("remeasure_version") for t in remeasured} == {"step-1"}
    assert [(m.new_version, m.measured > 0) for m in measured] == [("step-1", True)]  # from the trainer's acks
    assert status["followed"] == [TRAINER] and status["trainer"] is True and "first_trainer" in status["why"]


def _per_cycle(s: Session, run_id: int, share: str, count: str) -> list[tuple[float, float]]:
    """(share, count) of the run's cycles that recorded both metrics, in cycle order."""
    rows = s.execute(select(MetricPoint.cycle, MetricPoint.name, MetricPoint.value)
                     .where(MetricPoint.run_id == run_id, MetricPoint.name.in_([share, count]))
                     .order_by(MetricPoint.cycle)).all()
    by: dict[int, dict[str, float]] = {}
    for cycle, name, value in rows:
        by.setdefault(cycle, {})[name] = value
    return [(v[share], v[count]) for v in by.values() if share in v and count in v]


def test_a_stalled_emission_serves_the_trainer_below_the_bar(store: Store, tmp_path: Path, serve: str) -> None:
    """No task can pass the bar (1.0; the fake scores stop at 0.99). A spot-check daemon would verify the
    top-scored; a trainer's acks are its only labels. So after ``emission.stall_cycles`` idle cycles the stall is
    raised, and while the queue is empty the top quarter of the window is served marked ``below_bar`` (with the
    exploration share beside it). The trainer's acks of them are stored labels; the stall stands meanwhile,
    and nothing more is served below the bar while tasks are still ready."""
    driver, _ = make_driver(store, tmp_path, follow="first_trainer", min_probability=1.0, emission_stall_cycles=2,
                            explore_share=0.25)
    with PropelClient(serve, token=None) as client:
        client.announce(TRAINER, "step-0")
        tick_to(driver, "rl", 4)  # idle at cycles 0 and 1: stalled; served at 2; still ready at 3
        with store.session() as s:
            below = _per_cycle(s, driver.run_id, "emitted_below_bar", "emitted")
            candidates = s.scalar(select(func.count()).select_from(TaskRow).where(
                TaskRow.run_id == driver.run_id, TaskRow.valid, TaskRow.cycle >= 0, TaskRow.cycle <= 2))
        assert [n for n, _ in below] == [0, 0, math.ceil(candidates / 4), 0], below
        detail = driver.state()[2].degraded[health.EMISSION_STALLED]["detail"]
        assert "no task passed the gate" in detail and '"below_bar": true' in detail
        leased = client.lease(n=500, lease_s=600, consumer="trainer", solver=TRAINER)
        marked = [t for t in leased if t.message.get("below_bar")]
        explored = [t for t in leased if t.message.get("explore")]
        assert len(marked) == below[2][0] and len(marked) + len(explored) == len(leased)
        assert 0 < len(explored) <= math.ceil(len(marked) / 3)  # the share beside them, not a filler
        assert max(t.message["predicted_in_band"] for t in marked) < 1.0  # below the bar, the top of the window
        assert min(t.message["predicted_in_band"] for t in marked) >= max(t.message["predicted_in_band"]
                                                                          for t in explored)
        policy = SyntheticArithSolver(offset=4.0, seed=3)
        acks = [Ack(t, solved=round(8 * policy.success_probability(task_of(t.message["grading"]).text)), n=8,
                    solver=TRAINER, version="step-0") for t in leased]
        assert set(client.ack_many(acks).values()) == {"acked"}
    tick_to(driver, "rl", 5)  # the acks are mined; the queue is empty again: served below the bar again
    with store.session() as s:
        labelled = set(s.scalars(select(Label.task_id).where(Label.solver_name == TRAINER)))
        again = _per_cycle(s, driver.run_id, "emitted_below_bar", "emitted")[-1][0]
    assert {t.id for t in leased} <= labelled and again > 0
    assert health.EMISSION_STALLED in driver.state()[2].degraded  # only a task that passes the gate ends it


def test_a_trainers_ack_measured_alert_does_not_pause_its_emission(store: Store, tmp_path: Path,
                                                                    serve: str) -> None:
    """An escalation whose next level pauses emission on a metric the trainer's acks measure
    (``probe_precision``) is not taken while a trainer is followed: the pause would stop the acks that measure
    it. The same record pauses emission while the configured solver is followed (spot-checks go on)."""
    driver, _ = make_driver(store, tmp_path, follow="first_trainer", escalate_after_cycles=20)
    record = escalation.Applied(rule="probe_precision_low", kind="retrain_aux_topic", topic="mul:1",
                                metric="probe_precision", comparator="<", threshold=0.3, value=0.0, cycle=0, level=1)
    state = driver.state()[2]
    state.mitigations = [record]
    driver._escalate(30, state, {"probe_precision": 0.1}, trainer=driver.followed.trainer)
    assert state.emission_paused_by == ["probe_precision_low"]  # no trainer yet: the configured solver's pause
    state.mitigations, state.emission_paused_by = [record], []
    with PropelClient(serve, token=None) as client:
        client.announce(TRAINER, "step-0")
    driver._escalate(30, state, {"probe_precision": 0.1}, trainer=driver.followed.trainer)
    assert state.emission_paused_by == [] and health.EMISSION_PAUSED not in state.degraded
    assert [(a.level, a.cycle, a.value) for a in state.mitigations] == [(1, 30, 0.1)]  # measured again later



def _ack_as(client: PropelClient, leased: list[LeasedTask], version: str, in_band: set[int]) -> None:
    """Ack each leased task once as ``version``: 2 of 8 (in band) for the ids in ``in_band``, else 0 of 8."""
    acks = [Ack(t, solved=2 if t.id in in_band else 0, n=8, solver=TRAINER, version=version) for t in leased]
    assert set(client.ack_many(acks).values()) == {"acked"}


def _next_cycle(client: PropelClient, driver: Driver) -> list[LeasedTask]:
    """One cycle of the driver, then everything served to the trainer's solver."""
    tick_to(driver, "rl", driver.state()[1] + 1)
    return client.lease(n=500, lease_s=600, consumer="trainer", solver=TRAINER)


def test_a_trainers_in_band_task_is_replayed_while_it_stays_in_band(store: Store, tmp_path: Path,
                                                                    serve: str) -> None:
    """Frontier replay, two tasks followed through acks, a daemon restart and a new version: a task whose ack
    by the current version lands in band is served again (``replay``, ``replays`` 1, 2), at most
    ``emission.replay_max`` times and only while its newest ack stays in band; one label per task and version
    holds the newest outcome; an in-band ack of the previous version is not replayed to the new one."""
    kw = {"follow": "first_trainer", "replay_max": 2, "explore_share": 0.0}
    driver, engine = make_driver(store, tmp_path, **kw)
    with PropelClient(serve, token=None) as client:
        client.announce(TRAINER, "step-0")
        first = _next_cycle(client, driver)
        keep, drop = first[0].id, first[1].id
        _ack_as(client, first, "step-0", {keep, drop})  # the rest out of band: never replayed
        seen: list[tuple[int, object]] = []
        for restart in (False, True, False):  # the replay count lives in the queue: a restarted daemon goes on
            if restart:
                driver, _ = make_driver(store, tmp_path, engine=engine, **kw)
            leased = _next_cycle(client, driver)
            seen += [(t.id, t.message.get("replays")) for t in leased if t.message.get("replay")]
            _ack_as(client, leased, "step-0", {keep})  # `drop` leaves the band on its first replay
        fresh = [t for t in _next_cycle(client, driver) if not t.message.get("replay")]
        _ack_as(client, fresh, "step-0", {fresh[0].id})  # in band for step-0, then step-1 is announced
        client.announce(TRAINER, "step-1")
        late = [t.id for t in _next_cycle(client, driver) if t.message.get("replay")]
    with store.session() as s:
        labels = s.execute(select(Label.solver_version, Label.solved, Label.in_band).where(
            Label.task_id == drop, Label.solver_name == TRAINER, Label.source == "consumer")).all()
        replayed = s.scalars(select(MetricPoint.value).where(MetricPoint.name == "replayed")).all()
    assert seen == [(keep, 1), (drop, 1), (keep, 2)]  # the limit: no third replay of `keep`
    assert [tuple(r) for r in labels] == [("step-0", 0, False)]  # one label of step-0: the newest outcome
    assert late == [] and sum(replayed) == 3  # step-0's verdict is not replayed to step-1


def test_an_auto_lead_aims_ahead_only_while_the_trainers_acks_lie_above_the_band(
        store: Store, tmp_path: Path, serve: str, caplog: pytest.LogCaptureFixture) -> None:
    """``frontier.trainer_band_lead = "auto"``: a trainer that fails every served task (a weak LM: 0 of 8) is
    aimed at the band itself (a lead would count its failures as in band); once its newest acks lie above the
    band (8 of 8), the next refresh aims one solve ahead. Each refresh's job and log line say which and why."""
    frontier = FrontierSettings(refresh_every_trainer_labels=40, trainer_band_lead="auto")
    driver, _ = make_driver(store, tmp_path, follow="first_trainer", explore_share=0.0, frontier=frontier)
    caplog.set_level("INFO", logger="propel.frontier")
    with PropelClient(serve, token=None) as client:
        client.announce(TRAINER, "step-0")
        for solved in (0, 0, 0, 8, 8, 8):
            leased = _next_cycle(client, driver)
            acks = [Ack(t, solved=solved, n=8, solver=TRAINER, version="step-0") for t in leased]
            assert acks and set(client.ack_many(acks).values()) == {"acked"}
        tick_to(driver, "rl", driver.state()[1] + 2)  # the last acks mined; their refresh started
    with store.session() as s:
        jobs = s.scalars(select(RetrainJob.spec).order_by(RetrainJob.id)).all()
    aimed = [(j["band_lo"], j["band_hi"], j["band_lead"]) for j in jobs if j.get("role") == "primary"]
    assert aimed[0] == (1, 3, 0) and aimed[-1] == (0, 2, 1), aimed  # the band itself, then one solve ahead
    assert set(aimed) == {(1, 3, 0), (0, 2, 1)}
    said = [r.getMessage() for r in caplog.records if "primary-probe refresh" in r.getMessage()]
    assert "(the band itself: frontier.trainer_band_lead = auto: 0 of the newest" in said[0]
    assert "(aimed 0-2 solves: frontier.trainer_band_lead = auto: " in said[-1]

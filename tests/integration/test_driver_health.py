"""Always-on health through the real driver and store (#34): the spot-check budget is paced over the
window and survives a restart; a stalled emission is said (degraded reason and alert, with why) and acted on."""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest
from click.testing import CliRunner
from rich.console import Console
from sqlalchemy import select

from curriculum.store import lineage
from curriculum.store.db import Store
from curriculum.store.models import Label, ProbeScore, QueueItem, TaskRow
from daemon.cli.main import cli
from daemon.config import config_from_mapping
from daemon.http.dashboard_status import collect_status, render_status
from daemon.http.run_status import daemon_status
from daemon.loop import hacking, health
from daemon.loop.driver import Driver
from daemon.loop.hacking import SuspectLimits
from daemon.loop.phases import top_share_threshold
from daemon.loop.progress import Progress
from daemon.loop.rollback import RollbackRule
from daemon.ops.metrics import build_metrics
from daemon.service.runtime import ServiceHooks
from testkit.driver import make_driver

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


class Clock:
    """The driver's injected ``now``, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _dispatched_in_cycle(driver: Driver) -> float:
    """Tick one whole cycle; the spot-check phase's dispatch count."""
    got = 0.0
    for _ in range(5):
        report = driver.tick()
        if report.phase == "spotcheck":
            got = report.values["spotcheck_dispatched"]
    return got


def _restarted(driver: Driver, clock: Callable[[], datetime]) -> Driver:
    """A new driver on the same store and run, as a restarted daemon builds it (state read from the store)."""
    return Driver(driver.store, driver.run_id, driver.engine, driver.spot, driver.retrainer, driver.s, clock=clock)


def test_the_budget_is_paced_over_the_window_and_the_pace_survives_a_restart(store: Store, tmp_path: Path) -> None:
    # burst 6; 3,606 tasks/hour: the bucket refills one task a second (the per-cycle cap of 20 never binds)
    driver, _ = make_driver(store, tmp_path, budget_per_cycle=20, budget_per_hour=3_606, spot_burst=6,
                            retrain_min_false_positives=10**6)
    clock = Clock()
    driver.clock = clock
    assert _dispatched_in_cycle(driver) == 6  # a full bucket
    clock.now += timedelta(seconds=3)
    assert _dispatched_in_cycle(driver) == 3  # three seconds of refill
    clock.now += timedelta(seconds=0.5)
    assert _dispatched_in_cycle(driver) == 0  # half a token: nothing this cycle …
    driver = _restarted(driver, clock)
    clock.now += timedelta(seconds=1.5)
    assert _dispatched_in_cycle(driver) == 2  # … and the half is kept across the restart
    _, _, state = driver.state()
    assert state.spot_bucket is not None and state.spot_bucket.tokens == pytest.approx(0.0)
    assert health.BUDGET not in state.degraded
    status = daemon_status(store, "drv", frontier=False)
    pace = status["spotcheck_pace"]
    assert pace["paced"] and pace["burst"] == 6 and pace["rate_per_min"] == pytest.approx(60.0)
    assert pace["used_this_hour"] == 11 and "11/3,606 tasks used this hour" in pace["line"]
    # verified utility: the labels of the window's probe-high tasks (score ≥ min_probability 0.3), in band or not
    util, labels = status["utility"], _labelled(store)
    high = [t for t, p in labels.items() if p >= 0.3]
    assert util["labels"] == len(high) > 0 and not util["unverified"] and 0.0 <= util["verified"] <= 1.0
    assert util["predicted"] is not None and f"verified {util['verified']:.0%} ({len(high)} labels" in util["line"]
    if store.engine.url.get_backend_name() == "sqlite":  # the same lines in `propel status` and the dashboard
        cfg = tmp_path / "p.toml"
        cfg.write_text(f'run_name = "drv"\n[store]\nurl = "{store.engine.url.render_as_string(False)}"\n')
        out = CliRunner().invoke(cli, ["--config", str(cfg), "status"], env={})
        assert out.exit_code == 0, out.output
        text = " ".join(out.output.split())
        assert "budget spot-check pace 60 tasks/min (burst 6" in text and "utility predicted" in text, text
        strip = render_status(collect_status(store, "drv", 30.0, 3_606, {}))
        assert 'data-stat="pace"' in strip and 'data-stat="utility"' in strip and "11/3,606 tasks" in strip



def _cycle_values(driver: Driver) -> dict[str, float]:
    """Tick one whole cycle; every phase's values."""
    values: dict[str, float] = {}
    for _ in range(5):
        values |= driver.tick().values
    return values


def _labelled(store: Store) -> dict[int, float]:
    """Spot-checked task → its probe score."""
    with store.session() as s:
        rows = s.execute(select(Label.task_id, ProbeScore.probability).join(
            ProbeScore, lineage.latest_score_of(Label.task_id))).all()
    return {int(t): float(p) for t, p in rows}


def test_a_stalled_emission_is_said_with_why_and_acted_on(store: Store, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """No unverified task clears the threshold and time stands still after the first burst: three idle cycles
    raise emission_stalled (degraded + the default alert, both saying why); then the spot-checks go to the
    window's top-scored candidates and their verified in-band labels are emitted, which ends the stall."""
    driver, _ = make_driver(store, tmp_path, budget_per_cycle=20, budget_per_hour=3_608, spot_burst=4,
                            min_probability=0.999, emission_stall_cycles=3, retrain_min_false_positives=10**6)
    clock = Clock()
    driver.clock = clock
    hooks = ServiceHooks(config_from_mapping({}, env={}), store, driver.run_id, build_metrics(),
                         Progress(Console(file=io.StringIO())))
    driver.hooks = hooks
    try:
        with caplog.at_level(logging.WARNING):
            idle = [_cycle_values(driver)["emit_idle_cycles"] for _ in range(4)]
            assert idle[-1] >= 3 and idle[-2] >= 2, idle
            state = driver.state()[2]
            detail = state.degraded[health.EMISSION_STALLED]["detail"]
            assert "against the emission bar 0.999" in detail and "best unverified candidate scored" in detail
            assert "valid candidates" in detail and "gate: probe predictions" in detail
            status = daemon_status(store, "drv", frontier=False)
            assert [d["reason"] for d in status["degraded"]] == [health.EMISSION_STALLED]
            assert status["utility"]["unverified"] and "unverified" in status["utility"]["line"]  # nothing ≥ 0.999
            before = _labelled(store)
            emitted, cycles = 0.0, 0
            while emitted == 0 and cycles < 8:  # tokens refill; each cycle checks the window's top-scored tasks
                clock.now += timedelta(seconds=10)
                values = _cycle_values(driver)
                emitted, cycles = values["emitted"], cycles + 1
                if cycles == 1:
                    fired = [r.getMessage() for r in caplog.records
                             if "alert emission_stalled FIRING" in r.getMessage()]
                    assert len(fired) == 1 and "no task emitted for" in fired[0], fired
                    new = {t: p for t, p in _labelled(store).items() if t not in before}
                    assert len(new) == 4 and min(new.values()) >= 0.5  # the top of the window, not a random slice
        assert emitted > 0, "verified in-band labels were emitted"
        assert health.EMISSION_STALLED not in driver.state()[2].degraded
        assert any(r.getMessage().startswith(f"recovered: {health.EMISSION_STALLED}") for r in caplog.records)
    finally:
        hooks.close()


@pytest.mark.parametrize("response", ["tighten", "verified_only"])
def test_a_probe_the_solver_contradicts_is_suspect_and_emission_tightens(
        sqlite_store: Store, tmp_path: Path, response: Literal["tighten", "verified_only"]) -> None:
    """The fake probe says ~60 % in band where the synthetic solver finds ~25 %: the gap trips, the probes are
    suspect (degraded, with the numbers). From then on, by default (``tighten``) emission goes on above the raised
    threshold (min_probability 0.3 + 0.1); under ``verified_only`` every emitted task carries an in-band spot-check."""
    limits = SuspectLimits(max_topic_js=1.0, max_top_topic_share=1.0, max_gap=0.2, min_labels=10, hold_cycles=3,
                           response=response, raise_by=0.1)
    driver, _ = make_driver(sqlite_store, tmp_path, suspect=limits, retrain_min_false_positives=10**6)
    for _ in range(3):
        values = _cycle_values(driver)
        if values.get("probes_suspect"):
            break
    state = driver.state()[2]
    assert health.PROBES_SUSPECT in state.degraded, values
    detail = state.degraded[health.PROBES_SUSPECT]["detail"]
    assert "predicted utility" in detail and hacking.acting(limits) in detail
    suspect_from = driver.state()[1]
    _cycle_values(driver)
    with sqlite_store.session() as s:
        later = [q.message for q in s.scalars(select(QueueItem).join(TaskRow, TaskRow.id == QueueItem.task_id)
                                              .where(TaskRow.cycle >= suspect_from))]
    assert later
    if response == "verified_only":
        assert all(m["spot_check"] and m["spot_check"]["in_band"] for m in later)
    else:
        assert all(m["predicted_in_band"] >= 0.4 or (m["spot_check"] or {}).get("in_band") for m in later)


def test_a_validity_collapse_rolls_the_generator_back_to_the_last_healthy_step(
        sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rule = RollbackRule(validity=0.3, cycles=2, healthy_validity=0.8)
    driver, engine = make_driver(sqlite_store, tmp_path, rollback=rule, retrain_min_false_positives=10**6)
    for _ in range(2):  # healthy: ~90 % valid; the policy is at step 10, then 20
        _cycle_values(driver)
    assert driver.state()[2].healthy_step == 20
    engine.validity_override = 0.05  # the policy collapses
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        values = [_cycle_values(driver) for _ in range(2)]
    assert [v.get("rolled_back") for v in values] == [None, 1.0] and engine.rollbacks == [20]
    assert 20 in engine.pinned  # the rl phases kept the target from being pruned
    said = [r.getMessage() for r in caplog.records if "rolled back" in r.getMessage()]
    assert said == ["validity below 30% for 2 cycles in a row (last 5%): generator rolled back from step 40 to "
                    "step 20, the last cycle with validity ≥ 80%"]
    state = driver.state()[2]
    assert state.totals.rollbacks == 1 and state.low_validity_cycles == 0
    engine.validity_override = 0.05  # collapses again with no healthy cycle since: not back to step 20 again
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        again = [_cycle_values(driver) for _ in range(2)]
    assert [v.get("rollback_repeated") for v in again] == [None, 1.0] and engine.rollbacks == [20]
    assert any("not rolling the generator back to step 20 again" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="propel.driver"):  # the collapse lasts: counted, not said again
        more = [_cycle_values(driver) for _ in range(2)]
    assert more[-1].get("rollback_repeated") == 1.0
    assert not any("not rolling" in r.getMessage() for r in caplog.records)
    engine.validity_override = None
    assert _cycle_values(driver)["validity"] > 0.8  # healthy again: a new target
    assert driver.state()[2].healthy_step not in (None, 20)


def test_a_topic_collapse_rolls_the_generator_back_to_the_last_mixed_step(
        sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Valid but one topic (the long run's collapse): no healthy step while collapsed, a rollback after
    ``cycles`` cycles above the limit, to the last step whose sample was valid *and* mixed."""
    rule = RollbackRule(validity=0.3, cycles=2, healthy_validity=0.8, top_topic_share=0.45,
                        healthy_top_topic_share=0.3)
    driver, engine = make_driver(sqlite_store, tmp_path, rollback=rule, retrain_min_false_positives=10**6)
    for _ in range(2):  # ~90 % valid, many topics: healthy at step 10, then 20
        assert _cycle_values(driver)["top_topic_share"] <= 0.3
    assert driver.state()[2].healthy_step == 20
    engine.topic_collapse = True  # still ~90 % valid, all mul:3
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        values = [_cycle_values(driver) for _ in range(2)]
    assert [v["top_topic_share"] for v in values] == [1.0, 1.0] and [v["validity"] > 0.8 for v in values] == [True] * 2
    assert [v.get("rolled_back") for v in values] == [None, 1.0] and engine.rollbacks == [20]
    said = [r.getMessage() for r in caplog.records if "rolled back" in r.getMessage()]
    assert said == ["top-topic share above 45% for 2 cycles in a row (last 100%): generator rolled back from step 40 "
                    "to step 20, the last cycle with validity ≥ 80% and top-topic share ≤ 30%"]
    state = driver.state()[2]
    assert state.totals.rollbacks == 1 and state.high_topic_cycles == 0 and state.healthy_step == 20
    assert _cycle_values(driver)["top_topic_share"] <= 0.3  # mixed again: a new target
    assert driver.state()[2].healthy_step == 30


def test_a_policy_that_repeats_stored_tasks_is_rolled_back_to_the_last_step_that_sampled_new_ones(
        sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Valid and mixed, but the same tasks every cycle (the followed LM trainer's starved daemon): each cycle
    records the share of its valid sample new to the store; a repeating cycle is no rollback target, and
    ``cycles`` of them in a row roll the generator back to the last step that sampled new tasks."""
    rule = RollbackRule(validity=0.3, cycles=2, healthy_validity=0.8, novelty=0.1, healthy_novelty=0.3)
    driver, engine = make_driver(sqlite_store, tmp_path, rollback=rule, retrain_min_false_positives=10**6)
    for _ in range(2):  # random expressions: all new, healthy at step 10, then 20
        assert _cycle_values(driver)["novel_share"] == 1.0
    engine.repeat_collapse = True  # the same sample from now on: new once (step 30), then nothing new
    first = _cycle_values(driver)
    assert first["novel_share"] == 1.0 and driver.state()[2].healthy_step == 30
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        values = [_cycle_values(driver) for _ in range(2)]
    assert [v["novel_share"] for v in values] == [0.0, 0.0] and all(v["validity"] > 0.8 for v in values)
    assert [v.get("rolled_back") for v in values] == [None, 1.0] and engine.rollbacks == [30]
    said = [r.getMessage() for r in caplog.records if "rolled back" in r.getMessage()]
    assert said == ["new tasks below 10% of the valid sample for 2 cycles in a row (last 0%: the generator repeats "
                    "stored tasks): generator rolled back from step 50 to step 30, the last cycle with validity ≥ "
                    "80% and new tasks ≥ 30%"]
    state = driver.state()[2]
    assert state.totals.rollbacks == 1 and state.low_novelty_cycles == 0 and state.healthy_step == 30
    assert _cycle_values(driver)["novel_share"] == 1.0  # new tasks again: a new target
    assert driver.state()[2].healthy_step == 40


def test_a_repetition_collapse_after_new_tasks_came_back_rolls_back_to_the_same_step_again(
        sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Rolled back for repeating itself, the generator samples new tasks again, but on one topic (no healthy
    cycle, no new target), then repeats itself again: a new collapse, rolled back to the same step. Without it
    the followed LM trainer's daemon refused every rollback for 200+ cycles at ~1 % new tasks and starved its
    trainer (closed_loop seed 3, 400 steps, 53fdeb1). Repeating right after that rollback, with no new tasks in
    between, is refused (the rollback is not working)."""
    rule = RollbackRule(validity=0.3, cycles=2, healthy_validity=0.8, healthy_top_topic_share=0.3, novelty=0.1,
                        healthy_novelty=0.3)
    driver, engine = make_driver(sqlite_store, tmp_path, rollback=rule, retrain_min_false_positives=10**6)
    for _ in range(2):
        _cycle_values(driver)
    engine.repeat_collapse = True  # new once (step 30, healthy), then the same tasks
    assert [_cycle_values(driver).get("rolled_back") for _ in range(3)] == [None, None, 1.0]
    assert engine.rollbacks == [30]
    engine.topic_collapse = True  # new tasks again, all mul:3: the novelty is back, the mix is not
    assert _cycle_values(driver)["novel_share"] == 1.0 and driver.state()[2].healthy_step == 30
    engine.repeat_collapse = True  # now the same mul:3 tasks every cycle
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        values = [_cycle_values(driver) for _ in range(3)]
    assert [v["novel_share"] for v in values] == [1.0, 0.0, 0.0] and engine.rollbacks == [30, 30]
    assert any("new tasks below 10%" in r.getMessage() and "rolled back from step" in r.getMessage()
               for r in caplog.records)
    engine.topic_collapse = engine.repeat_collapse = True  # repeats at once after that rollback: not again
    again = [_cycle_values(driver) for _ in range(2)]
    assert [v["novel_share"] for v in again] == [0.0, 0.0]
    assert again[-1].get("rollback_repeated") == 1.0 and engine.rollbacks == [30, 30]


def test_a_validity_collapse_after_a_topic_rollback_rolls_back_again(
        sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Rolled back for its topic mix, the generator samples valid tasks again (still on one topic: no healthy
    cycle, no new target), then collapses to ~0 % valid: a new collapse, rolled back to the same step; a second
    collapse right after that rollback, with no valid cycle between, is refused (the rollback is not working)."""
    rule = RollbackRule(validity=0.3, cycles=2, healthy_validity=0.8, top_topic_share=0.45,
                        healthy_top_topic_share=0.3)
    driver, engine = make_driver(sqlite_store, tmp_path, rollback=rule, retrain_min_false_positives=10**6)
    for _ in range(2):
        _cycle_values(driver)
    engine.topic_collapse = True
    assert [_cycle_values(driver).get("rolled_back") for _ in range(2)] == [None, 1.0] and engine.rollbacks == [20]
    engine.topic_collapse = True  # valid again, still one topic: validity is back, the mix is not
    assert _cycle_values(driver)["validity"] > 0.8 and driver.state()[2].healthy_step == 20
    engine.validity_override = 0.05
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        values = [_cycle_values(driver) for _ in range(2)]
    assert [v.get("rolled_back") for v in values] == [None, 1.0] and engine.rollbacks == [20, 20]
    assert any("validity below 30% for 2 cycles in a row" in r.getMessage() and "rolled back from step" in
               r.getMessage() for r in caplog.records)
    engine.validity_override = 0.05  # collapses at once after that rollback: not again
    again = [_cycle_values(driver) for _ in range(2)]
    assert [v.get("rollback_repeated") for v in again] == [None, 1.0] and engine.rollbacks == [20, 20]


def test_a_mitigation_that_does_not_work_escalates_to_rollback_then_to_pausing_emission(
        sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rule the fake policy keeps breaking (validity < 0.95; it is ~0.9) with raise_kl: after 2 cycles the
    mitigation escalates to a rollback, after 2 more to pausing emission; once validity is back, it worked
    and emission resumes — each step one readable line."""
    driver, engine = make_driver(sqlite_store, tmp_path, escalate_after_cycles=2, retrain_min_false_positives=10**6,
                                 rollback=RollbackRule(validity=0.01, cycles=99, healthy_validity=0.85))
    cfg = config_from_mapping({"alerts": {"rules": [{"name": "validity_dip", "metric": "validity", "comparator": "<",
                                                     "threshold": 0.95, "mitigation": {"kind": "raise_kl",
                                                                                       "factor": 3.0}}]}}, env={})
    hooks = ServiceHooks(cfg, sqlite_store, driver.run_id, build_metrics(), Progress(Console(file=io.StringIO())))
    driver.hooks = hooks
    try:
        with caplog.at_level(logging.INFO, logger="propel"):
            emitted = [_cycle_values(driver)["emitted"]]  # step 10 at ~90 % valid: healthy (judged on validity)
            engine.validity_override = 0.82  # below healthy (0.85), still breaking the rule (< 0.95)
            emitted += [_cycle_values(driver)["emitted"] for _ in range(4)]
            state = driver.state()[2]
            assert [a.level for a in state.mitigations] == [2] and state.emission_paused_by == ["validity_dip"]
            assert engine.rollbacks == [10] and emitted[4] == 0 and all(e > 0 for e in emitted[:4]), emitted
            assert state.totals.rollbacks == 1  # counted, and the same metrics as a validity rollback
            assert {k: driver._cycle_metrics(2).get(k) for k in ("rolled_back", "rollback_step")} == {
                "rolled_back": 1.0, "rollback_step": 10.0}
            assert any(r.getMessage() == "alert validity_dip escalated: generator rolled back from step 30 to step "
                       "10, the last cycle with validity ≥ 85%" for r in caplog.records)
            assert "emission paused by escalation" in state.degraded[health.EMISSION_PAUSED]["detail"]
            engine.validity_override = 1.0  # the policy recovers
            assert _cycle_values(driver)["emitted"] > 0  # measured in the spot-check phase: resumed the same cycle
        lines = [r.getMessage() for r in caplog.records if "alert validity_dip" in r.getMessage()]
        assert any("mitigation: raise the KL coefficient ×3 for the next RL chunk" in line for line in lines)
        assert [line.split(": escalating to ")[-1] for line in lines if "escalating" in line] == [
            "a generator rollback", "pausing emission"]
        # the alert resolved: the hook drops its escalation record, so the pause is lifted the same cycle (#34)
        assert any(line.startswith("alert validity_dip resolved") for line in lines), lines
        assert driver.state()[2].mitigations == [] and health.EMISSION_PAUSED not in driver.state()[2].degraded
    finally:
        hooks.close()


def _paused_by_validity_dip(store: Store, tmp_path: Path, **kw: object) -> tuple[Driver, ServiceHooks]:
    """A driver whose ``validity_dip`` escalation paused emission (no rollback: off)."""
    driver, engine = make_driver(store, tmp_path, escalate_after_cycles=1, retrain_min_false_positives=10**6,
                                 **kw)  # type: ignore[arg-type]
    engine.validity_override = 0.82
    hooks = _hooks(store, driver, [{"name": "validity_dip", "metric": "validity", "comparator": "<",
                                    "threshold": 0.95, "mitigation": {"kind": "raise_kl", "factor": 3.0}}])
    for _ in range(3):
        _cycle_values(driver)
    assert driver.state()[2].emission_paused_by == ["validity_dip"]
    return driver, hooks


def _hooks(store: Store, driver: Driver, rules: list[dict[str, object]]) -> ServiceHooks:
    cfg = config_from_mapping({"alerts": {"rules": rules}}, env={})
    driver.hooks = ServiceHooks(cfg, store, driver.run_id, build_metrics(), Progress(Console(file=io.StringIO())))
    return driver.hooks


def test_a_rule_removed_from_the_config_lifts_the_pause_it_set(sqlite_store: Store, tmp_path: Path) -> None:
    """The rule leaves the config (a restart): its alert resolves, and the hook drops its escalation record —
    before, the record kept its old threshold and emission stayed paused for ever."""
    driver, hooks = _paused_by_validity_dip(sqlite_store, tmp_path, max_paused_cycles=0)
    hooks.close()
    hooks = _hooks(sqlite_store, driver, [{"name": "v", "metric": "validity", "comparator": "<", "threshold": 0.1}])
    try:
        assert _cycle_values(driver)["emitted"] > 0  # validity still 0.82: only the rule's removal lifts it
        state = driver.state()[2]
        assert state.mitigations == [] and state.emission_paused_by == []
    finally:
        hooks.close()


def test_an_emission_pause_ends_after_max_paused_cycles(sqlite_store: Store, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    driver, hooks = _paused_by_validity_dip(sqlite_store, tmp_path, max_paused_cycles=2)
    try:
        with caplog.at_level(logging.WARNING, logger="propel"):
            values = [_cycle_values(driver) for _ in range(3)]
        # paused at cycle 1: ended at cycle 3, and not paused again while the alert stays open
        assert [v["emission_pause_expired"] for v in values] == [1.0, 0.0, 0.0]
        assert all(v["emitted"] > 0 for v in values) and driver.state()[2].emission_paused_by == []
        assert any("the pause ends (health.max_paused_cycles)" in r.getMessage() for r in caplog.records)
    finally:
        hooks.close()


def test_top_share_emits_only_the_cycles_best_scored_unverified_tasks(sqlite_store: Store, tmp_path: Path) -> None:
    """emission.top_share = 0.25: every unverified task emitted in a cycle scores at least the bar the cycle's
    own valid samples set (its top quarter), while verified in-band tasks go out whatever their score; the
    bar is what holds the rest back (min_probability is 0 here)."""
    driver, _ = make_driver(sqlite_store, tmp_path, top_share=0.25, min_probability=0.0,
                            retrain_min_false_positives=10**6)
    for _ in range(3):
        _cycle_values(driver)
    with sqlite_store.session() as s:
        rows = s.execute(select(TaskRow.cycle, ProbeScore.probability, QueueItem.task_id, QueueItem.message)
                         .select_from(TaskRow).join(ProbeScore, lineage.latest_score_of(TaskRow.id))
                         .join(QueueItem, QueueItem.task_id == TaskRow.id, isouter=True)
                         .where(TaskRow.valid, TaskRow.run_id == driver.run_id)).all()
    emitted = 0
    for cycle in {r.cycle for r in rows}:
        scores = [r.probability for r in rows if r.cycle == cycle]
        bar = top_share_threshold(scores, 0.25)
        assert bar > 0.0, "a quarter of a cycle's samples sets a bar above 0"
        mine = [r for r in rows if r.cycle == cycle and r.task_id is not None]
        emitted += len(mine)
        assert all(r.probability >= bar or (r.message["spot_check"] or {}).get("in_band") for r in mine)
        assert len([r for r in mine if not (r.message["spot_check"] or {}).get("in_band")]) <= \
            math.ceil(0.25 * len(scores)) + sum(1 for x in scores if x == bar)
    assert 0 < emitted <= len(rows) / 2, "with the share off, min_probability 0 would emit nearly every task"

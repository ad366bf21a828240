"""The driver's state between phases: a typed, versioned model stored in ``daemon_state.counters``.

Written with the phase transition (``repo.save_state``), read at the start of every phase, so a
restarted daemon continues where it stopped. ``version`` says how to read a stored row:

* version 1 (no ``version`` key): the untyped dict of the first daemon — ``spotcheck_pending`` a
  list of task ids, ``emitted_total``, ``fp_since_retrain`` (now counted from the
  ``false_positives`` table), and the solver-version keys (``solver_version``, ``refresh_*``,
  ``champion``, ``spotcheck_pending_sid`` → each pending check's ``solver_id``) — converted by
  :func:`load_state`;
* version 2: this model.

``totals`` are the run's monotonic counts (tasks emitted, solver trials, aux retrains activated,
spot-checks re-dispatched and abandoned, primary refreshes promoted, stale tasks retired, drift
re-measurements). They change only in a phase whose state is saved after its
own writes (the emit phase in the same transaction as its queue rows), so a phase re-run after a
crash counts once; the Prometheus counters are exported from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.loop.escalation import Applied
from daemon.loop.pacing import Bucket
from daemon.loop.utility import UtilityView

STATE_VERSION = 2


class PendingCheck(BaseModel):
    """A dispatched spot-check whose label has not landed yet."""

    model_config = ConfigDict(extra="forbid")
    dispatched_at: datetime
    redispatches: int = 0
    solver_id: str | None = None  # name@version the check was dispatched against (None: the unversioned solver)


class Totals(BaseModel):
    """Monotonic per-run counts; every Prometheus ``_total`` counter of the driver is one of these."""

    model_config = ConfigDict(extra="forbid")
    emitted: int = 0
    solver_trials: int = 0
    retrains: int = 0
    spotchecks_redispatched: int = 0
    spotchecks_abandoned: int = 0
    primary_refreshes: int = 0
    stale_retired: int = 0
    drift_remeasured: int = 0
    rollbacks: int = 0


class Champion(BaseModel):
    """The challenger primary probe promoted last (``propel status``: "champion primary probe: … since …")."""

    model_config = ConfigDict(extra="forbid")
    probe: str
    cycle: int
    at: datetime


class DriverState(BaseModel):
    """What the driver carries from one phase to the next (besides the phase and cycle columns)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    version: Literal[2] = 2  # STATE_VERSION
    kl_factor: float = Field(1.0, gt=0, description="KL multiplier for the next RL chunk (raise_kl mitigation)")
    force_retrain: bool = False
    dominant_topic: str | None = None
    paused_topics: list[str] = Field(default_factory=list)
    paused_by: dict[str, list[str]] = Field(default_factory=dict, description="alert rule → topics it paused")
    spotcheck_pending: dict[int, PendingCheck] = Field(default_factory=dict)
    spotcheck_undispatched: list[int] = Field(default_factory=list)
    retrain_job: str | None = None
    retrain_undispatched: bool = False
    totals: Totals = Field(default_factory=Totals)
    degraded: dict[str, dict[str, Any]] = Field(default_factory=dict, description="reason → detail, since, until "
                                                "(daemon.loop.health)")
    retrain_failures: int = Field(0, ge=0, description="retrain jobs failed in a row")
    retrain_last_error: str | None = None
    solver_version: str | None = Field(None, description="the solver version spot-checks last ran on (a change "
                                       "opens a drift measurement)")
    refresh_job: str | None = None  # the pending champion/challenger primary refresh
    refresh_undispatched: bool = False
    refresh_drift_seen: list[int] = Field(default_factory=list, description="drift measurements that already "
                                          "triggered a refresh")
    refresh_labels_at: int = Field(0, ge=0, description="labels written (every version) at the last refresh")
    refresh_retry: str | None = Field(None, description="a refresh skipped for want of data (why it was due): "
                                      "tried again once enough new labels are written")
    refresh_retry_labels_at: int = Field(0, ge=0, description="labels written when that refresh was skipped")
    champion: Champion | None = None
    emit_idle_cycles: int = Field(0, ge=0, description="emit phases in a row that emitted nothing (queue not "
                                  "full): daemon.loop.emission_watch")
    utility: UtilityView | None = Field(None, description="predicted and verified utility of the last "
                                        "spot-check phase (daemon.loop.utility)")
    topic_baseline: dict[str, float] = Field(default_factory=dict, description="topic counts of the first sampled "
                                             "cycles under the current probes: the hacking signal's reference "
                                             "(daemon.loop.hacking)")
    topic_baseline_cycles: int = Field(0, ge=0, description="sampled cycles summed into the topic baseline")
    topic_baseline_probes: str = Field("", description="the probe ensemble the baseline was taken under")
    suspect_until: int = Field(-1, description="the probes are suspect through this cycle")
    suspect_why: str = ""
    healthy_step: int | None = Field(None, description="generator step of the last healthy cycle (validity, topic "
                                     "mix): "
                                     "the rollback target, pinned (daemon.loop.rollback)")
    rolled_back_to: int | None = Field(None, description="the step of the last rollback: not rolled back to "
                                       "again until a healthy cycle gives a new target")
    valid_since_rollback: bool = Field(False, description="a cycle since the last rollback had validity at the "
                                       "healthy level: a validity collapse after it may roll back to the same step")
    novel_since_rollback: bool = Field(False, description="a cycle since the last rollback had a share of new tasks at "
                                       "the healthy level: a repetition collapse after it may roll back to the same "
                                       "step")
    refusal_said: int | None = Field(None, description="the step whose refused rollback was last logged: said once "
                                     "until a rollback happens (the rollback_repeated metric counts each)")
    low_validity_cycles: int = Field(0, ge=0, description="cycles in a row with validity below the rollback limit")
    high_topic_cycles: int = Field(0, ge=0, description="cycles in a row with the top-topic share above the "
                                   "rollback limit")
    low_novelty_cycles: int = Field(0, ge=0, description="cycles in a row with the sample's share of new tasks below "
                                    "the rollback limit")
    mitigations: list[Applied] = Field(default_factory=list, description="mitigations applied by alerts, measured "
                                       "and escalated (daemon.loop.escalation)")
    emission_paused_by: list[str] = Field(default_factory=list, description="alert rules whose escalation paused "
                                          "emission until their metric is back")
    followed: str | None = Field(None, description="the solver name the loop followed at its last spot-check "
                                 "phase (daemon.loop.follow): a change starts its versions afresh")
    follow_label_cursor: int = Field(0, ge=0, description="the last label id of a followed trainer already mined "
                                     "for false positives (daemon.loop.follow)")
    spot_bucket: Bucket | None = Field(None, description="the spot-check budget's token bucket (daemon.loop.pacing)")

    def stored(self) -> dict[str, Any]:
        """The JSON written to ``daemon_state.counters``."""
        return self.model_dump(mode="json")


class StateError(ValueError):
    """A stored state this daemon cannot read (a newer version, or a corrupt row); the message says which."""


def load_state(stored: Mapping[str, Any], now: datetime) -> DriverState:
    """Read a stored row: version 2 as it is, version 1 converted (pending checks count from ``now``)."""
    data = dict(stored)
    version = data.get("version", 1)
    if version == 1:
        data = _from_v1(data, now)
    elif version != STATE_VERSION:
        raise StateError(f"daemon_state holds driver state version {version}; this daemon reads 1 and "
                         f"{STATE_VERSION}: run the newer propel version, or reset the run's daemon_state row")
    try:
        return DriverState.model_validate(data)
    except ValidationError as err:
        raise StateError(f"daemon_state holds an unreadable driver state: {err}") from err


def _from_v1(old: dict[str, Any], now: datetime) -> dict[str, Any]:
    keep = ("kl_factor", "force_retrain", "dominant_topic", "paused_topics", "paused_by", "spotcheck_undispatched",
            "retrain_job", "retrain_undispatched", "degraded", "retrain_failures", "retrain_last_error",
            "solver_version", "refresh_job", "refresh_undispatched", "refresh_drift_seen", "refresh_labels_at",
            "champion")
    new: dict[str, Any] = {k: old[k] for k in keep if k in old}
    sids = old.get("spotcheck_pending_sid", {})  # frontier rows: the version each pending check was sent to
    new["spotcheck_pending"] = {int(t): {"dispatched_at": now, "solver_id": sids.get(str(t))}
                                for t in old.get("spotcheck_pending", [])}
    new["totals"] = {"emitted": int(old.get("emitted_total", 0))}
    new["version"] = STATE_VERSION
    return new

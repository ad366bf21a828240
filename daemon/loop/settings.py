"""The driver's settings (what :func:`daemon.service.settings.driver_settings` builds from the config).

Its own module so that the driver's helpers (:mod:`daemon.loop.watch`) can name it without importing
the driver; :mod:`daemon.loop.driver` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from curriculum.frontier.followed import FollowMode
from curriculum.labelling.spotcheck import Band
from daemon.loop import hacking, rollback
from daemon.loop.frontier import FrontierSettings


@dataclass(frozen=True)
class DriverSettings:
    run_name: str
    seed: int = 0
    steps_per_chunk: int = 10
    sample_size: int = 64
    sample_size_max: int = 0  # demand: up to this many while the queue runs dry (phases.demand_sample_size; 0: off)
    emit_rollouts: bool = False  # the RL chunk's rollouts join the cycle's candidates (driver._store_extra)
    reference_share: float = 0.0  # this share of the sample size more candidates from the untrained generator
    band: Band = field(default_factory=Band)
    budget_per_cycle: int = 32
    budget_per_hour: int = 512
    spot_burst: int | None = None  # the pacing bucket's capacity (daemon.loop.pacing); None: no pacing
    probe_high_share: float = 0.75
    frontier_threshold: float = 0.5
    retrain_min_false_positives: int = 8
    min_probability: float = 0.5
    max_topic_share: float = 0.4
    top_share: float = 1.0  # unverified tasks also need a score in this top share of the cycle's samples
    high_water_mark: int = 10_000
    emit_lookback_cycles: int = 3
    diversity_sample_size: int = 256
    reference_model: str = ""
    probe_arch: str = "mlp"
    retrain_timeout_s: float = 3600.0  # a pending retrain with no outcome after this is marked failed
    frontier: FrontierSettings = field(default_factory=FrontierSettings)  # solver versions, drift, refresh
    spotcheck_deadline_s: float = 3600.0  # a dispatched spot-check with no label after this is sent again …
    spotcheck_redispatches: int = 1  # … this many times, then abandoned (and counted)
    worker_silence_s: float = 600.0  # spot-checks pending with no trial landing this long: workers are missing
    unverified_grace_s: float = 3600.0  # labels missing this long: emit spot-check-verified tasks only
    emission_stall_cycles: int = 10  # cycles without an emitted task → emission_stalled (0: never)
    verified_window_cycles: int = 30  # verified utility: labels of probe-high tasks of the last N cycles
    suspect: hacking.SuspectLimits = field(default_factory=hacking.SuspectLimits.off)  # when the probes are suspect
    rollback: rollback.RollbackRule = field(default_factory=rollback.RollbackRule)  # validity collapse (off: 0)
    escalate_after_cycles: int = 20  # a mitigation whose metric is not back after this many cycles escalates
    max_paused_cycles: int = 30  # an emission pause ends after this many cycles (0: never)
    follow: FollowMode = "config"  # solver.follow: the configured solver, or the first trainer's (daemon.loop.follow)
    explore_share: float = 0.15  # following a trainer: share of the emitted tasks drawn unfiltered
    replay_max: int = 0  # following a trainer: times an in-band task is served again (0: off; follow.replay)

"""Prometheus metrics of the daemon, on a private :class:`CollectorRegistry` (never the global one).

Names are namespaced ``propel_`` and carry base units (``_seconds``, ``_total``, ``_ratio`` for
0–1 values). The driver exports three kinds of values, each from the place that holds the truth:

* **gauges** — the values a phase records in the ``metrics`` table (:func:`export_gauges`), e.g.
  ``self_bleu3`` → ``propel_self_bleu3_ratio``, ``retrain_pending`` → ``propel_retrain_pending``,
  ``drift_score`` → ``propel_drift_score_ratio`` (latest drift measurement of the solver's newest
  version; NaN until a drift was measured, see :data:`UNMEASURED_NAN`); see :data:`GAUGES`;
* **totals** — the run's monotonic counts kept in ``DriverState.totals`` (:func:`export_totals`):
  ``propel_tasks_emitted_total``, ``propel_solver_trials_total``, ``propel_aux_retrains_total``,
  ``propel_primary_refreshes_total`` (challengers promoted), ``propel_stale_tasks_total`` (ready
  tasks retired as stale), ``propel_drift_remeasured_total`` (tasks re-measured on a new solver
  version), …; see :data:`TOTALS`;
* **queue depths** — ``propel_queue_depth{state}`` for ready, leased, acked, dead and stale rows
  (:func:`export_queue_depths`).

Plus ``propel_cycle``, ``propel_alerts_fired_total{rule,severity}``, ``propel_alert_active{rule,severity}``,
``propel_degraded{reason}``, the histogram ``propel_phase_duration_seconds{phase}`` and
``propel_work_yielded_seconds_total`` (training held while trainers used the queue, ``api.yield_to_api``),
and the standard ``process_*`` series of the process (``process_resident_memory_bytes``, open fds, CPU
seconds; Linux): an always-on daemon's memory is watched where its other signals are (#34).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

QUEUE_STATES = ("ready", "leased", "acked", "dead", "stale")

GAUGES: dict[str, tuple[str, str]] = {
    "self_bleu3": ("propel_self_bleu3_ratio", "Self-BLEU-3 of a fixed-size sample of this cycle's tasks"),
    "distinct3": ("propel_distinct3_ratio", "Distinct-3 (unique/total 3-grams) of the fixed-size sample"),
    "top_topic_share": ("propel_top_topic_share_ratio", "Share of the most common topic among valid tasks"),
    "validity": ("propel_validity_ratio", "Share of sampled generator outputs that are valid tasks"),
    "novel_share": ("propel_novel_share_ratio", "Share of the sample's valid tasks that are new to the store"),
    "reward_mean": ("propel_reward_mean", "Mean probe reward of the last RL chunk"),
    "reward_var": ("propel_reward_variance", "Reward variance on current-policy samples (RVP)"),
    "probe_precision": ("propel_probe_precision_ratio", "Spot-checked probe-high tasks that were in band"),
    "false_positive_rate": ("propel_false_positive_ratio", "Spot-checked probe-high tasks outside the band"),
    "spotcheck_utility": ("propel_spotcheck_utility_ratio", "Spot-checked tasks (all) that were in band"),
    "solver_budget_used": ("propel_solver_budget_used_ratio", "Spot-check solver budget used this hour"),
    "solver_budget_left": ("propel_solver_budget_left_tasks", "Spot-check tasks left of this hour's budget"),
    "spotcheck_tokens": ("propel_spotcheck_tokens", "Spot-check tasks the pacing bucket holds after the last "
                         "spot-check phase"),
    "retrain_pending": ("propel_retrain_pending", "1 while an aux-probe retrain job has no outcome yet"),
    "verified_utility": ("propel_verified_utility_ratio", "In-band share of the spot-check labels of probe-high "
                         "tasks of the last emission.verified_window_cycles cycles (absent: unverified)"),
    "verified_labels": ("propel_verified_labels", "Labels the verified utility is over (0: unverified)"),
    "probes_suspect": ("propel_probes_suspect", "1 while hacking signals say the probes are not trustworthy "
                       "(degraded: probes_suspect; emission per health.suspect_response)"),
    "topic_js": ("propel_topic_js_divergence", "JS divergence (bits) of the cycle's valid-task topics from the "
                 "baseline of the first health.suspect_baseline_cycles cycles under the current probes"),
    "emission_stalled": ("propel_emission_stalled", "1 while no task passed the emission gate for "
                         "emission.stall_cycles cycles (degraded: emission_stalled)"),
    "emitted_below_bar": ("propel_emitted_below_bar", "Tasks the last emit phase served below the bar: a followed "
                          "trainer's stalled emission, message \"below_bar\": true (docs/OPERATIONS.md)"),
    "replayed": ("propel_replayed", "Tasks the last spot-check phase served again because the followed "
                 "trainer's newest ack put them in band: frontier replay, message \"replay\": true (docs/FRONTIER.md)"),
    "emission_pause_expired": ("propel_emission_pause_expired", "Emission pauses that ran past "
                               "health.max_paused_cycles and were ended this cycle"),
    "trainer_utility": ("propel_trainer_utility_ratio", "In-band share of the followed trainer's outcomes (acks) "
                        "of the last cycle that mined new ones (NaN before the first)"),
    "trainer_too_easy": ("propel_trainer_too_easy_ratio", "Share above the band of the followed trainer's outcomes "
                         "of the last cycle that mined new ones: the served mix is behind the trainer (NaN before "
                         "the first)"),
    "drift_score": ("propel_drift_score_ratio", "Share of formerly in-band tasks that left the band on the "
                    "solver's newest version (latest drift measurement)"),
}
TOTALS: dict[str, tuple[str, str]] = {
    "emitted": ("propel_tasks_emitted", "Tasks emitted to the downstream queue"),
    "solver_trials": ("propel_solver_trials", "Solver attempts (spot-check trials) stored for the run"),
    "retrains": ("propel_aux_retrains", "Aux probes trained and activated"),
    "spotchecks_redispatched": ("propel_spotchecks_redispatched", "Spot-checks sent again after their deadline"),
    "spotchecks_abandoned": ("propel_spotchecks_abandoned", "Spot-checks given up after their last deadline"),
    "cycles": ("propel_cycles", "Daemon cycles completed"),
    "primary_refreshes": ("propel_primary_refreshes", "Challenger primary probes promoted over the champion"),
    "stale_retired": ("propel_stale_tasks", "Ready queue tasks retired as stale after a primary refresh"),
    "drift_remeasured": ("propel_drift_remeasured", "Labelled tasks re-measured on a new solver version"),
    "rollbacks": ("propel_generator_rollbacks", "Generator rollbacks to the last healthy checkpoint (validity, "
                  "topic or repetition collapse, or an escalated alert)"),
}
#: Gauges that read NaN until first measured: a 0 there would read as "measured, nothing found".
UNMEASURED_NAN: tuple[str, ...] = ("drift_score", "trainer_utility", "trainer_too_easy")
QUEUE_METRIC = "queue_ready"
PER_PHASE_COUNTS: tuple[str, ...] = ("emitted", "solver_trials", "retrained", "spotchecks_abandoned",
                                     "primary_refreshed", "stale_retired", "drift_remeasured")
METRIC_TABLE_NAMES: tuple[str, ...] = (*GAUGES, QUEUE_METRIC, *PER_PHASE_COUNTS)
PHASES = ("rl", "sample", "spotcheck", "retrain", "emit")


@dataclass
class PropelMetrics:
    """The daemon's collectors, all registered on :attr:`registry`."""

    registry: CollectorRegistry
    gauges: dict[str, Gauge]
    totals: dict[str, Counter]
    queue_depth: Gauge
    cycle: Gauge
    alerts_fired: Counter
    alert_active: Gauge
    phase_duration: Histogram
    degraded: Gauge
    work_yielded: Counter
    exported: dict[str, float] = field(default_factory=dict)  # what this process added to each total


def build_metrics(registry: CollectorRegistry | None = None) -> PropelMetrics:
    """Create every ``propel_`` collector on ``registry`` (a fresh private registry by default)."""
    reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
    gauges = {key: Gauge(name, doc, registry=reg) for key, (name, doc) in GAUGES.items()}
    totals = {key: Counter(name, doc, registry=reg) for key, (name, doc) in TOTALS.items()}
    metrics = PropelMetrics(
        registry=reg,
        gauges=gauges,
        totals=totals,
        queue_depth=Gauge("propel_queue_depth", "Downstream queue rows by state", ["state"], registry=reg),
        cycle=Gauge("propel_cycle", "The cycle the daemon is in", registry=reg),
        alerts_fired=Counter("propel_alerts_fired", "Alerts fired", ["rule", "severity"], registry=reg),
        alert_active=Gauge("propel_alert_active", "1 while an alert is open", ["rule", "severity"], registry=reg),
        phase_duration=Histogram(
            "propel_phase_duration_seconds", "Wall time of one daemon phase", ["phase"], registry=reg,
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)),
        degraded=Gauge("propel_degraded", "1 while the daemon is degraded for this reason (see /v1/status)",
                       ["reason"], registry=reg),
        work_yielded=Counter("propel_work_yielded_seconds", "Seconds the training work was held while "
                             "trainers used the queue API (api.yield_to_api)", registry=reg),
    )
    ProcessCollector(registry=reg)  # process_resident_memory_bytes & co. (the private registry has none)
    for key in UNMEASURED_NAN:  # "never measured" is NaN, never 0.0 ("no drift")
        gauges[key].set(math.nan)
    for phase in PHASES:  # every phase's series exists (at zero) from the first scrape
        metrics.phase_duration.labels(phase=phase)
    for state in QUEUE_STATES:
        metrics.queue_depth.labels(state=state)
    return metrics


def export_gauges(registry_obj: PropelMetrics, values: Mapping[str, float]) -> list[str]:
    """Set the gauges of a phase's metric-table values; returns the names that are not gauges (to log)."""
    other: list[str] = []
    for name, value in values.items():
        if name in registry_obj.gauges:
            registry_obj.gauges[name].set(float(value))
        elif name == QUEUE_METRIC:
            registry_obj.queue_depth.labels(state="ready").set(float(value))
        else:
            other.append(name)
    return other


def export_totals(registry_obj: PropelMetrics, totals: Mapping[str, float]) -> None:
    """Bring each ``_total`` counter up to the stored run total (it only ever grows).

    Called after every saved phase transition with the saved totals: a phase re-run after a crash
    saved nothing the first time, so nothing is counted twice; a restarted process's first call
    adds the whole stored total.
    """
    for key, value in totals.items():
        if key not in registry_obj.totals:
            continue
        delta = float(value) - registry_obj.exported.get(key, 0.0)
        if delta > 0:
            registry_obj.totals[key].inc(delta)
            registry_obj.exported[key] = float(value)


def export_queue_depths(registry_obj: PropelMetrics, depths: Mapping[str, int]) -> None:
    """Set ``propel_queue_depth{state}`` for every state (``repo.queue_depths``; absent states → 0)."""
    for state in QUEUE_STATES:
        registry_obj.queue_depth.labels(state=state).set(float(depths.get(state, 0)))


def export_degraded(registry_obj: PropelMetrics, active: Iterable[str], reasons: Iterable[str]) -> None:
    """``propel_degraded{reason}``: 1 for each ``active`` reason, 0 for the other known ``reasons``."""
    on = set(active)
    for reason in {*reasons, *on}:
        registry_obj.degraded.labels(reason=reason).set(1.0 if reason in on else 0.0)


def observe_phase(registry_obj: PropelMetrics, phase: str, seconds: float) -> None:
    registry_obj.phase_duration.labels(phase=phase).observe(seconds)


def render(registry_obj: PropelMetrics) -> tuple[bytes, str]:
    """The text exposition and its content type, for the API's ``GET /metrics``."""
    return generate_latest(registry_obj.registry), CONTENT_TYPE_LATEST

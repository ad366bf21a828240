"""Long-run quality of the daemon left alone on its defaults (issue #34, item 4).

The embedded default config (what ``make run`` runs: arith, the bootstrapped tiny generator, SQLite,
in-process spot-checks with the synthetic solver), driven as ``propel run --no-api --cycles N`` drives it
(the product's wiring, APScheduler loop and real clock: see ``testkit/long_run.py``), in two scenarios:

* ``frozen`` — the synthetic solver never changes;
* ``rising`` — a new solver version every ``--rise-every`` cycles, ``--rise-step`` more skill each,
  announced through the product's announce path.

After each cycle a consumer leases every ready task for good and never acks it (``--no-consumer``: none), as a
trainer's pull would: without one the queue fills to ``emission.high_water_mark`` and emission stops there
(run 11 at cycle 184). It acks nothing: an ack is a trainer's label, and the embedded default follows the
first trainer that acks.

Per block of ``--block`` cycles: the exact in-band probability of the emitted tasks and of every valid
sampled task under the solver version current at the time, validity, Self-BLEU-3, Distinct-3, top-topic
share, alerts and mitigations, degraded reasons, solver trials, spot-checks per cycle, emitted count,
RSS and phase times; the untrained generator's in-band and diversity once at start; each goal of the
issue met or not, and ``supply_ge_1_per_cycle`` (no 10-cycle window under a task a cycle with room in the queue:
a trickle the stall goal does not see, run 13). ``benchmarks/results/long_run.json`` is rewritten after every
block (an interrupted run keeps its data); ``--plot-only`` re-renders the PNG from it.

    python -m benchmarks.long_run                       # 500 cycles, frozen then rising (hours)
    python -m benchmarks.long_run --quick               # a few cycles: checks the wiring
    python -m benchmarks.long_run --plot-only           # the PNG from the JSON
    python -m benchmarks.long_run --set rl.topic_share_weight=0 --name long_run_no_topic   # a setting vs the defaults
    python -m benchmarks.long_run --set seed=1 --name long_run_seed1                      # another seed
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click
import torch
from pydantic import ValidationError

from benchmarks._common import RESULTS, write_result
from daemon.config import PropelConfig, load_config
from daemon.ops.logs import configure_logging
from testkit import long_run_report as report
from testkit.long_run import (
    CycleRecord,
    Scenario,
    apply_overrides,
    cached_generator,
    embedded_config,
    parse_arm,
    run_scenario,
)

TIME_NOTE = ("real wall clock: the daemon's own APScheduler loop at daemon.tick_interval_s, its clock and the "
             "store's timestamps are not scaled, so the hourly spot-check budget is paced by real seconds")
WIRING_NOTE = ("daemon.service.runtime.run as `propel run --no-api --cycles N` calls it, on the embedded default "
               "config (load_config(None)) with its own data_dir and the cached bootstrap generator")


class Recorder:
    """Holds the results of every scenario and rewrites the JSON after every block."""

    def __init__(self, name: str, block: int, settings: dict[str, Any]) -> None:
        self.name, self.block = name, block
        self.data: dict[str, Any] = {"settings": settings, "time": TIME_NOTE, "wiring": WIRING_NOTE,
                                     "load_average_start": list(os.getloadavg()), "scenarios": {}}
        self.records: list[CycleRecord] = []
        self.current: dict[str, Any] = {}

    def start(self, scenario: Scenario, config: dict[str, Any]) -> None:
        self.records = []
        self.current = {"scenario": asdict(scenario), "config": config, "status": "starting", "cycles_done": 0,
                        "untrained": None, "announced": [], "blocks": [], "goals": {}}
        self.data["scenarios"][scenario.name] = self.current
        self.write()

    def untrained(self, sample: dict[str, Any]) -> None:
        self.current["untrained"] = report.baseline(sample)
        self.current["status"] = "running"
        self.write()

    def cycle(self, record: CycleRecord, announced: list[dict[str, Any]]) -> None:
        self.records.append(record)
        self.current["cycles_done"] = len(self.records)
        self.current["announced"] = announced
        if len(self.records) % self.block == 0:
            self._close_block(self.records[-self.block:])

    def _close_block(self, records: list[CycleRecord], partial: bool = False) -> None:
        t0 = time.perf_counter()
        b = report.block(records) | {"partial": partial, "load_average": list(os.getloadavg())}
        self.current["blocks"].append(b)
        self.current["goals"] = report.goals(self.current["blocks"], self.records, self.current["untrained"] or {},
                                             self.current["announced"])
        b["close_s"] = time.perf_counter() - t0  # the block's diversity metrics and goals (between two phases)
        self.write()
        click.echo(f"block {b['cycles']}: emitted {b['emitted']} in band {_f(b['emitted_in_band'])}, all valid "
                   f"{_f(b['valid_in_band'])}, validity {_f(b['validity_mean'])}, new {_f(b.get('novel_share_mean'))}, "
                   f"top topic "
                   f"{_f(b['top_topic_share_max'])}, Self-BLEU-3 {_f(b['self_bleu3'])}, trials "
                   f"{b['solver_trials']:.0f}, RSS {b['rss_mib']:.0f} MiB"
                   + (f"; untrained candidates in band {_f(b['reference_in_band'])}, emitted share "
                      f"{_f(b['emitted_reference_share'])}" if b["reference_in_band"] is not None else ""))

    def finish(self, code: int, cycles: int, timed_out: bool) -> None:
        rest = len(self.records) % self.block
        if rest:
            self._close_block(self.records[-rest:], partial=True)
        done = len(self.records)
        why = "at --max-minutes" if timed_out else "by a signal or failure"
        self.current["status"] = "done" if done >= cycles else f"stopped {why} after {done} of {cycles} cycles"
        self.current["exit_code"] = code
        self.current["spot_gap"] = dict(zip(("cycles", "seconds"), report.spot_gaps(self.records), strict=True))
        self.current["summary"] = report.summary(self.current["blocks"])
        self.write()

    def write(self) -> None:
        self.data["load_average_now"] = list(os.getloadavg())
        write_result(self.name, self.data)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def plot(data: dict[str, Any], path: Path) -> None:
    """The block series of every scenario: in-band (emitted, all valid, untrained), validity and top-topic
    share, Self-BLEU-3, solver trials and emitted per block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = data["scenarios"]
    fig, axes = plt.subplots(len(scenarios) or 1, 4, figsize=(15, 3.4 * max(1, len(scenarios))), squeeze=False)
    for row, (name, sc) in zip(axes, scenarios.items(), strict=False):
        blocks = sc["blocks"]
        x = [b["cycles"][0] for b in blocks]

        def series(key: str, blocks: list[dict[str, Any]] = blocks) -> list[float]:
            return [float("nan") if b.get(key) is None else b[key] for b in blocks]

        row[0].plot(x, series("emitted_in_band"), marker="o", ms=3, label="emitted")
        row[0].plot(x, series("valid_in_band"), marker="o", ms=3, label="all valid sampled")
        if all("top_quarter_margin" in b for b in blocks):  # results written before it lack the key
            top = [v + (b["top_quarter_margin"] or float("nan")) for v, b in zip(series("valid_in_band"), blocks,
                                                                                 strict=True)]
            row[0].plot(x, top, ls="--", lw=1, label="top quarter by probe score")
        if sc.get("untrained") and sc["untrained"].get("in_band") is not None:  # under each version's skill
            steps = [(0, sc["untrained"]["in_band"])] + [(a["before_cycle"], a["untrained_in_band"])
                                                         for a in sc.get("announced", [])]
            end = blocks[-1]["cycles"][1] if blocks else 0
            row[0].step([c for c, _ in steps] + [end], [v for _, v in steps] + [steps[-1][1]],
                        where="post", color="gray", ls=":", label="untrained generator")
        for a in sc.get("announced", []):
            for ax in row:
                ax.axvline(a["before_cycle"], color="gray", ls="--", lw=0.8)
        row[0].set_ylabel(f"{name}: exact P(in band)", fontsize=8)
        row[1].plot(x, series("validity_mean"), marker="o", ms=3, label="validity")
        row[1].plot(x, series("top_topic_share_max"), marker="o", ms=3, label="max top-topic share")
        row[1].plot(x, series("novel_share_mean"), marker="o", ms=3, label="new valid tasks (mean share)")
        row[2].plot(x, series("self_bleu3"), marker="o", ms=3, label="Self-BLEU-3")
        if sc.get("untrained") and sc["untrained"].get("self_bleu3") is not None:
            row[2].axhline(sc["untrained"]["self_bleu3"], color="gray", ls=":", label="untrained Self-BLEU-3")
        row[2].plot(x, series("distinct3"), marker="o", ms=3, label="Distinct-3")
        row[3].plot(x, series("solver_trials"), marker="o", ms=3, label="solver trials")
        row[3].plot(x, series("emitted"), marker="o", ms=3, label="emitted tasks")
        for ax in row:
            ax.set_xlabel("cycle (block start)", fontsize=8)
            ax.legend(fontsize=7)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"Long run on the embedded defaults ({data.get('commit', '?')[:10]}; synthetic arith solver; "
                 f"blocks of {data['settings']['block']} cycles)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(data: dict[str, Any]) -> str:
    """The block table and the goals of every scenario, as Markdown (for the results README)."""
    lines = []
    for name, sc in data["scenarios"].items():
        base = sc.get("untrained") or {}
        lines += [f"{name}: {sc['status']}, {sc['cycles_done']} cycles; untrained in-band {_f(base.get('in_band'))}, "
                  f"Self-BLEU-3 {_f(base.get('self_bleu3'))}; announced "
                  + (", ".join(f"{a['version']} (skill {a['skill']:g}) before {a['before_cycle']}"
                               for a in sc["announced"]) or "none"), "",
                  "| cycles | spot-checks | emitted (n) | emitted in band | all valid in band | margin | probe ρ | "
                  "top-¼ gain | validity min / mean | new min / mean | max top topic | Self-BLEU-3 | Distinct-3 | "
                  "trials | alerts | degraded | RSS MiB |",
                  "|" + "---|" * 17]
        for b in sc["blocks"]:
            spots = b["spotchecks_per_cycle"]
            lines.append(f"| {b['cycles'][0]}–{b['cycles'][1]} | {sum(spots)} ({sum(1 for x in spots if x)}/"
                         f"{len(spots)} cycles) | {b['emitted']} | {_f(b['emitted_in_band'])} | "
                         f"{_f(b['valid_in_band'])} | {_f(b['gate_margin'])} | {_f(b.get('probe_spearman'))} | "
                         f"{_f(b.get('top_quarter_margin'))} | {_f(b['validity_min'])} / "
                         f"{_f(b['validity_mean'])} | {_f(b.get('novel_share_min'))} / "
                         f"{_f(b.get('novel_share_mean'))} | "
                         f"{_f(b['top_topic_share_max'])} | {_f(b['self_bleu3'])} | "
                         f"{_f(b['distinct3'])} | {b['solver_trials']:.0f} | {', '.join(sorted(set(b['alerts'])))} | "
                         f"{', '.join(b['degraded'])} | {b['rss_mib']:.0f} |")
        if sc.get("summary"):
            lines += ["", "after the first block: " + ", ".join(f"{k} {_f(v)}" for k, v in sc["summary"].items())]
        lines += ["", "goals: " + "; ".join(f"{k} {'met' if g['met'] else 'NOT met' if g['met'] is False else 'n/a'}"
                                            for k, g in sc["goals"].items()), ""]
    return "\n".join(lines)


def check_overrides(overrides: tuple[str, ...], hint: str = "--set") -> None:
    """Overrides the embedded config accepts, or a one-line usage error naming the bad one."""
    try:
        PropelConfig.model_validate(apply_overrides(load_config(None).model_dump(mode="json"), overrides))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise click.BadParameter(f"{where}: {first['msg']}", param_hint=hint) from None
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=hint) from None


def scenarios(which: str, cycles: int, rise_every: int, rise_step: float, max_minutes: float | None,
              consume: bool = True) -> list[Scenario]:
    limit = None if max_minutes is None else 60.0 * max_minutes
    out = []
    if which in ("frozen", "both"):
        out.append(Scenario("frozen", cycles, max_seconds=limit, consume=consume))
    if which in ("rising", "both"):
        out.append(Scenario("rising", cycles, rise_every=rise_every, rise_step=rise_step, max_seconds=limit,
                            consume=consume))
    return out


@click.command()
@click.option("--cycles", type=click.IntRange(1), default=500, show_default=True, help="cycles per scenario")
@click.option("--scenario", type=click.Choice(["frozen", "rising", "both"]), default="both", show_default=True)
@click.option("--block", type=click.IntRange(1), default=8, show_default=True, help="cycles per block")
@click.option("--rise-every", type=click.IntRange(1), default=None,
              help="rising: cycles between solver versions (default: cycles / 5)")
@click.option("--rise-step", type=float, default=1.0, show_default=True, help="rising: skill added per version")
@click.option("--max-minutes", type=float, default=None, help="stop each scenario's daemon after this long")
@click.option("--quick", is_flag=True, help="4 cycles per scenario, blocks of 2, a 60-step bootstrap: the wiring")
@click.option("--bootstrap-steps", type=click.IntRange(1), default=None,
              help="bootstrap the generator with this many steps instead of the default recipe's (recorded in the "
                   "JSON; a different generator: compare only runs made with the same one)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True,
              help="where the bootstrapped generator is cached (the same cache `propel run` uses)")
@click.option("--work-dir", type=click.Path(path_type=Path), default=None,
              help="where each scenario's run lives (default: a temporary directory)")
@click.option("--name", default="long_run", show_default=True, help="result file name under benchmarks/results")
@click.option("--plot-only", is_flag=True, help="re-render the PNG from the JSON, print the block table, exit")
@click.option("--arm", "arms", multiple=True, metavar="NAME[:KEY=VALUE;...]",
              help="run every scenario once per arm, side by side in one JSON (scenario key 'frozen[NAME]'), each "
                   "with its own settings on top of --set, e.g. --arm defaults --arm "
                   "'paced2k:spotcheck.budget_per_hour=2048;emission.top_share=0.25' --arm 'defaults-s1:seed=1'")
@click.option("--consumer/--no-consumer", "consume", default=True, show_default=True,
              help="after each cycle lease every ready task for good, never acked (a trainer's pull without its "
                   "outcomes); without it the queue fills to emission.high_water_mark and emission stops there "
                   "(by backpressure, said every cycle), so emitted quality is measured only until then")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="change one setting of the embedded defaults (repeatable; VALUE read as JSON, else a string), "
                   "e.g. --set rl.topic_share_weight=0, or --set seed=1 (a top-level setting); recorded in the JSON")
def main(cycles: int, scenario: str, block: int, rise_every: int | None, rise_step: float,
         max_minutes: float | None, quick: bool, data_dir: Path, work_dir: Path | None, name: str,
         plot_only: bool, overrides: tuple[str, ...], bootstrap_steps: int | None, arms: tuple[str, ...],
         consume: bool) -> None:
    """The daemon on its defaults for N cycles: emitted in-band, diversity, spending and RSS per block."""
    result = RESULTS / f"{name}.json"
    if plot_only:
        if not result.exists():
            raise click.UsageError(f"{result} does not exist: run the benchmark first")
        data = json.loads(result.read_text())
        plot(data, RESULTS / f"{name}.png")
        click.echo(table(data))
        return
    configure_logging("text", logging.INFO)  # as the `propel` root group does
    steps = 60 if quick else bootstrap_steps
    if quick:
        cycles, block, rise_every = 4, 2, 2
    rise_every = rise_every or max(1, cycles // 5)
    plan_arms = [parse_arm(a) for a in arms] or [("", ())]
    check_overrides(overrides)
    for _, extra in plan_arms:
        check_overrides(overrides + extra, "--arm")  # before the bootstrap: a typo fails at once
    plan = [(replace(sc, name=f"{sc.name}[{arm}]") if arm else sc, overrides + extra) for arm, extra in plan_arms
            for sc in scenarios(scenario, cycles, rise_every, rise_step, max_minutes, consume)]
    rec = Recorder(name, block, {"cycles": cycles, "block": block, "rise_every": rise_every, "rise_step": rise_step,
                                 "max_minutes": max_minutes, "quick": quick, "bootstrap_steps": steps,
                                 "consumer": consume,
                                 "torch_threads": torch.get_num_threads(), "overrides": list(overrides),
                                 "arms": {arm: list(extra) for arm, extra in plan_arms if arm}})
    generator = cached_generator(data_dir, steps, click.echo)
    with tempfile.TemporaryDirectory(prefix="long_run_") as tmp:
        root = work_dir or Path(tmp)
        for sc, settings in plan:
            cfg = embedded_config(root / sc.name, generator, sc, steps, settings)
            rec.start(sc, cfg.model_dump(mode="json"))
            started = time.perf_counter()
            code, timed_out = run_scenario(cfg, sc, rec.untrained, rec.cycle)
            rec.finish(code, sc.cycles, timed_out)
            click.echo(f"{sc.name}: {rec.current['status']} in {time.perf_counter() - started:.0f} s (exit {code})")
            if rec.current["cycles_done"] < sc.cycles and not timed_out:
                break  # a signal stopped the daemon: do not start the next scenario
    plot(json.loads((RESULTS / f"{name}.json").read_text()), RESULTS / f"{name}.png")  # as written: with its commit


if __name__ == "__main__":
    main()

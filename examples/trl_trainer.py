"""Example trainer: GRPO (TRL) on a tiny local arith solver, fed with frontier tasks from a running daemon.

    python -m examples.trl_trainer --api http://127.0.0.1:8787 --checkpoint-dir .propel/trainer/ckpt

1. Pretrain a character-level tiny Qwen2 on easy arithmetic (cached), save it as
   ``<checkpoint-dir>/step-0`` and announce version ``step-0`` of ``--solver-name``.
2. Stream leased tasks (:class:`propel_sdk.torch_data.TaskStream`) into TRL's ``GRPOTrainer``; the reward
   of a completion is the domain grader (:func:`propel_sdk.grading.grade`); after each group the
   task's ``solved`` of ``num_generations`` is acked as the current version.
3. Every ``--announce-every`` steps save ``<checkpoint-dir>/step-N``, announce ``step-N`` (the daemon's
   ``hf`` solver with ``model = "<checkpoint-dir>/{version}"`` spot-checks on it) and measure held-out
   accuracy. Progress lines go to stdout, and as JSON lines to ``--metrics-out``.

Ctrl-C stops training: pending acks are sent and every leased, unreported task is nacked (back to the
queue at once). :func:`train` is the importable entry point (benchmarks call it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from examples import arith_solver
from propel_sdk.client import PropelClient, PropelClientError
from propel_sdk.grading import grade
from propel_sdk.torch_data import TaskStream

log = logging.getLogger("examples.trl_trainer")


@dataclass
class TrainerConfig:
    api: str = "http://127.0.0.1:8787"
    token: str | None = None
    solver_name: str = "tiny-arith"
    steps: int = 300
    announce_every: int = 50
    checkpoint_dir: Path = Path(".propel/trainer/checkpoints")
    pretrain_steps: int = 3500
    pretrain_cache: Path = Path(".propel/trainer/pretrained")
    seed: int = 0
    held_out: int = 200  # held-out expressions (0: no held-out accuracy)
    held_out_kind: str = "sums"  # arith_solver.HELD_OUT_KINDS: two-digit sums, or the corpus mix (≤ 3 operators)
    prompts_per_step: int = 4
    num_generations: int = 8
    max_completion_length: int = 8
    learning_rate: float = 1e-4
    temperature: float = 1.0
    lease_s: float = 600.0
    log_every: int = 10
    metrics_out: Path | None = None
    consumer: str = "example-trl-trainer"
    threads: int = 1  # torch intra-op threads (the daemon shares the CPU)
    extra_grpo: dict[str, Any] = field(default_factory=dict)


class Metrics:
    """Progress lines on stdout and JSON lines in ``--metrics-out``; every record is kept in ``records``."""

    def __init__(self, path: Path | None, say: Callable[[str], None] = print) -> None:
        self.path, self.say = path, say
        self.records: list[dict[str, Any]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def emit(self, event: str, line: str, **fields: Any) -> None:
        record = {"event": event, "time": round(time.time(), 3), **fields}
        self.records.append(record)
        self.say(line)
        if self.path is not None:
            with self.path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")


def with_retries(fn: Callable[[], Any], what: str, attempts: int = 5) -> Any:
    """``fn()`` retried while the daemon is unreachable (restarting); ``None`` if it never answered."""
    for attempt in range(attempts):
        try:
            return fn()
        except (httpx.TransportError, PropelClientError) as err:
            if isinstance(err, PropelClientError) and err.status < 500:
                raise
            log.warning("%s failed (%s), attempt %d/%d", what, err, attempt + 1, attempts)
            time.sleep(min(2.0 ** attempt, 10.0))
    return None


class Reporter:
    """The GRPO reward function: grades each completion and reports each task's group to the stream."""

    __name__ = "domain_grader"

    def __init__(self, stream: TaskStream) -> None:
        self.stream = stream
        self.groups = self.groups_with_signal = 0

    def __call__(self, prompts: list[Any], completions: list[Any], task_id: list[int], **_: Any) -> list[float]:
        verdicts = [grade(self.stream.message(t), _text(c)) for t, c in zip(task_id, completions, strict=True)]
        by_task: dict[int, list[bool | None]] = defaultdict(list)
        for t, v in zip(task_id, verdicts, strict=True):
            by_task[t].append(v)
        for t, vs in by_task.items():
            solved, errors = sum(v is True for v in vs), sum(v is None for v in vs)
            self.stream.report(t, solved=solved, n=len(vs), errors=errors)
            self.groups += 1
            self.groups_with_signal += 0 < solved < len(vs) - errors
        return [1.0 if v else 0.0 for v in verdicts]


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""  # conversational format


class Announcer:
    """Saves checkpoints, announces versions, measures held-out accuracy, logs progress (a TRL callback)."""

    def __init__(self, cfg: TrainerConfig, client: PropelClient, stream: TaskStream, reporter: Reporter,
                 metrics: Metrics, tokenizer: Any, held_out: list[str]) -> None:
        self.cfg, self.client, self.stream, self.reporter = cfg, client, stream, reporter
        self.metrics, self.tokenizer, self.held_out = metrics, tokenizer, held_out
        self.started = time.perf_counter()
        self.window: list[dict[str, float]] = []
        self.last_accuracy: float | None = None

    def publish(self, model: Any, step: int) -> None:
        version = f"step-{step}"
        path = arith_solver.save_checkpoint(model, self.tokenizer, self.cfg.checkpoint_dir / version)
        with_retries(lambda: self.client.announce(self.cfg.solver_name, version, order=step), f"announce {version}")
        self.stream.set_version(version)
        self.last_accuracy = arith_solver.accuracy(model, self.tokenizer, self.held_out) if self.held_out else None
        acc = "n/a" if self.last_accuracy is None else f"{self.last_accuracy:.1%}"
        self.metrics.emit("announce", f"announced {self.cfg.solver_name}@{version} ({path}) · held-out {acc}",
                          step=step, version=version, held_out_accuracy=self.last_accuracy)

    def on_log(self, logs: dict[str, float]) -> None:
        if "reward" in logs:
            self.window.append(logs)

    def on_step(self, model: Any, step: int) -> None:
        if step % self.cfg.announce_every == 0:
            self.publish(model, step)
        if step % self.cfg.log_every == 0 or step % self.cfg.announce_every == 0:
            self.progress(step)

    def progress(self, step: int) -> None:
        w, self.window = self.window, []
        reward = sum(x["reward"] for x in w) / len(w) if w else float("nan")
        signal = 1 - sum(x.get("frac_reward_zero_std", 0.0) for x in w) / len(w) if w else float("nan")
        elapsed = time.perf_counter() - self.started
        acc = "" if self.last_accuracy is None else f" · held-out {self.last_accuracy:.1%}"
        self.metrics.emit("progress", f"step {step}/{self.cfg.steps} · reward {reward:.3f} · groups with signal "
                          f"{signal:.0%} · {step / elapsed:.2f} steps/s · acked {self.stream.acked}{acc}",
                          step=step, reward_mean=reward, signal_share=signal, steps_per_s=step / elapsed,
                          acked=self.stream.acked, held_out_accuracy=self.last_accuracy)


def _callback(announcer: Announcer) -> Any:
    from transformers import TrainerCallback

    class _Hooks(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            announcer.on_log(logs or {})

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            announcer.on_step(model, int(state.global_step))

    return _Hooks()


def grpo_args(cfg: TrainerConfig, output_dir: str) -> Any:
    """GRPO settings for a stream: ``max_steps``, no shuffle buffer, CPU, no reporting, no saving."""
    from trl import GRPOConfig

    return GRPOConfig(**{
        "output_dir": output_dir, "max_steps": cfg.steps, "shuffle_dataset": False, "use_cpu": True,
        "report_to": [], "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True, "seed": cfg.seed,
        "per_device_train_batch_size": cfg.prompts_per_step * cfg.num_generations,
        "num_generations": cfg.num_generations, "max_completion_length": cfg.max_completion_length,
        "learning_rate": cfg.learning_rate, "temperature": cfg.temperature, "beta": 0.0, "bf16": False,
        "dataloader_num_workers": 0, **cfg.extra_grpo})


def train(cfg: TrainerConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Pretrain (cached), announce ``step-0``, GRPO ``cfg.steps`` steps on streamed tasks; the summary."""
    import torch
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    torch.set_num_threads(cfg.threads)
    metrics = Metrics(cfg.metrics_out, say)
    base = arith_solver.pretrained(arith_solver.PretrainSettings(steps=cfg.pretrain_steps, seed=cfg.seed),
                                   cfg.pretrain_cache, say)
    model, tokenizer = arith_solver.load(base)
    held_out = arith_solver.held_out_set(cfg.held_out, kind=cfg.held_out_kind)
    with PropelClient(cfg.api, token=cfg.token) as client, \
            TaskStream(client, solver=cfg.solver_name, version="step-0", batch=cfg.prompts_per_step,
                       ack_every=cfg.prompts_per_step, lease_s=cfg.lease_s, consumer=cfg.consumer) as stream:
        reporter = Reporter(stream)
        announcer = Announcer(cfg, client, stream, reporter, metrics, tokenizer, held_out)
        announcer.publish(model, 0)
        before = announcer.last_accuracy
        with tempfile.TemporaryDirectory(prefix="propel-trl-") as out:
            trainer = GRPOTrainer(model=model, reward_funcs=[cast(Any, reporter)], args=grpo_args(cfg, out),
                                  train_dataset=stream.hf_dataset(), processing_class=tokenizer,
                                  callbacks=[_callback(announcer)])
            trainer.remove_callback(PrinterCallback)
            started = time.perf_counter()
            trainer.train()
            wall_s = time.perf_counter() - started
        steps = int(trainer.state.global_step)
        if steps % cfg.announce_every:
            announcer.publish(model, steps)
    summary: dict[str, Any] = {"steps": steps, "wall_s": wall_s, "steps_per_s": steps / wall_s if wall_s else 0.0,
               "held_out_before": before, "held_out_after": announcer.last_accuracy, "groups": reporter.groups,
               "groups_with_signal": reporter.groups_with_signal, "acked": stream.acked, "nacked": stream.nacked,
               "version": f"step-{steps}", "config": {k: str(v) for k, v in asdict(cfg).items()}}
    metrics.emit("done", f"done: {steps} steps in {wall_s:.0f} s · held-out {before} → {announcer.last_accuracy} · "
                 f"acked {stream.acked}, nacked {stream.nacked}", **{k: v for k, v in summary.items() if k != "config"})
    summary["records"] = metrics.records
    return summary


def parse_args(argv: list[str] | None = None) -> TrainerConfig:
    d = TrainerConfig()
    p = argparse.ArgumentParser(prog="python -m examples.trl_trainer", description=__doc__.split("\n\n")[0])
    p.add_argument("--api", default=d.api, help="the daemon's API (default %(default)s)")
    p.add_argument("--token", default=os.environ.get("PROPEL_API_TOKEN"), help="API token (PROPEL_API_TOKEN)")
    p.add_argument("--solver-name", default=d.solver_name, help="name to ack and announce as (the daemon's "
                   "solver.name; default %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="GRPO steps (default %(default)s)")
    p.add_argument("--announce-every", type=int, default=d.announce_every, help="save + announce a version "
                   "every N steps (default %(default)s)")
    p.add_argument("--checkpoint-dir", type=Path, default=d.checkpoint_dir, help="where step-N folders go "
                   "(default %(default)s)")
    p.add_argument("--pretrain-steps", type=int, default=d.pretrain_steps, help="supervised steps on easy "
                   "arithmetic before GRPO, cached (default %(default)s)")
    p.add_argument("--pretrain-cache", type=Path, default=d.pretrain_cache, help="default %(default)s")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--held-out", type=int, default=d.held_out, help="held-out expressions scored at each "
                   "announce (0: off; default %(default)s)")
    p.add_argument("--held-out-kind", choices=arith_solver.HELD_OUT_KINDS, default=d.held_out_kind,
                   help="sums: two-digit sums (the pretraining's hard slice); mix: the arith corpus mix of at most "
                   "3 operators, the range the daemon serves (default %(default)s)")
    p.add_argument("--learning-rate", type=float, default=d.learning_rate)
    p.add_argument("--log-every", type=int, default=d.log_every, help="progress line every N steps")
    p.add_argument("--metrics-out", type=Path, default=None, help="JSON lines of progress and announces")
    a = p.parse_args(argv)
    if a.steps < 1 or a.announce_every < 1 or a.pretrain_steps < 1 or a.log_every < 1:
        p.error("--steps, --announce-every, --pretrain-steps and --log-every must be ≥ 1")
    return TrainerConfig(api=a.api, token=a.token, solver_name=a.solver_name, steps=a.steps,
                         announce_every=a.announce_every, checkpoint_dir=a.checkpoint_dir,
                         pretrain_steps=a.pretrain_steps, pretrain_cache=a.pretrain_cache, seed=a.seed,
                         held_out=a.held_out, held_out_kind=a.held_out_kind, learning_rate=a.learning_rate,
                         log_every=a.log_every,
                         metrics_out=a.metrics_out)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        train(cfg, say=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("interrupted: pending acks sent, unreported tasks returned to the queue", file=sys.stderr)
        return 130
    except httpx.ConnectError as err:
        print(f"error: cannot reach the daemon at {cfg.api} ({err}): start it, or pass --api", file=sys.stderr)
        return 2
    except PropelClientError as err:
        print(f"error: the daemon refused a request: {err} (a token? pass --token or set PROPEL_API_TOKEN)",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

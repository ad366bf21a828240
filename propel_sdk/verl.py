"""verl adapter: the daemon as verl's data source and reward, through verl's documented extension points.

    data:
      train_files: propel://queue                  # lease from the daemon's queue
      val_files: ~/data/held_out.parquet           # any verl parquet: read by verl's own RLHFDataset
      dataloader_num_workers: 0                    # rows are leased in the process that checkpoints
      custom_cls: {path: pkg://propel_sdk.verl, name: PropelDataset}
      propel: {api: "http://propel:8787", solver: my-policy, group_size: ${actor_rollout_ref.rollout.n}}
    reward:
      num_workers: 1                               # a task's whole group is graded in one process
      custom_reward_function: {path: pkg://propel_sdk.verl, name: compute_score}

(``examples/verl/propel_grpo.yaml`` is a complete config; ``docs/adapters/verl.md`` the page.)

Where each part runs, and who holds a task's lease (:class:`propel_sdk.ledger.Ledger`, shared with TRL):

* :class:`PropelDataset` (the trainer's driver process): a :class:`~propel_sdk.torch_data.TaskStream`
  leases ``train_batch_size`` tasks at a time and renews them. Each row carries its lease and the
  version that will make the rollouts in ``extra_info["propel"]``. After each step (verl's
  ``on_batch_end`` hook, and again when the first row of the next batch is asked for) the step's
  tasks are rolled out and graded: they are released (no nack; the reward side holds them now).
  :meth:`PropelDataset.close` (also at exit) nacks what was leased and never handed out
  (``tried=False``).
* :func:`compute_score` (verl's reward loop worker, a Ray actor): the first completion of a task
  adopts its lease (:meth:`~propel_sdk.ledger.Ledger.adopt`: renewed until its ack is stored); each
  completion is graded by the domain grader (:func:`propel_sdk.grading.grade`); when the group's
  ``group_size`` completions are in, the task's outcome is reported once, as the row's version,
  and acked in a batch whenever no adopted group is open (or every ``ack_every`` outcomes), so a
  step's outcomes are stored by the end of its grading.
* The checkpoint hook is verl's own: ``_save_checkpoint`` saves the data loader's state, which asks
  the dataset for :meth:`PropelDataset.state_dict`; the dataset then announces ``step-N`` (N: rows
  handed out / ``train_batch_size`` = verl's ``global_steps`` with the default ``sync`` trainer) and
  labels later rows with it. Resuming restores the count.

Rows of ``val_files`` (a path, not ``propel://``) are verl's own; their rewards are verl's
``default_compute_score``. The token comes from ``$PROPEL_API_TOKEN`` in both processes (Ray workers
inherit the driver's environment).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from verl.utils.dataset.rl_dataset import RLHFDataset

from propel_sdk.client import LeasedTask, PropelClient
from propel_sdk.grading import grade
from propel_sdk.ledger import CloseSummary
from propel_sdk.torch_data import Row, TaskStream

log = logging.getLogger("propel_sdk.verl")
#: ``data.train_files`` that leases from the daemon (any ``propel://…``)
QUEUE_SCHEME = "propel://"
#: the key of ``extra_info`` that carries a row's lease
INFO_KEY = "propel"


@dataclass(frozen=True)
class VerlSettings:
    """``data.propel`` of the verl config; ``batch``: rows per loader fetch (``data.gen_batch_size`` or
    ``train_batch_size``: leased at once, released together), ``step_rows``: ``train_batch_size``."""

    api: str
    solver: str
    group_size: int
    batch: int
    step_rows: int
    consumer: str = "verl-trainer"
    lease_s: float = 600.0
    ack_every: int = 256
    max_tasks: int = 1_000_000  # the dataset's length (verl's sampler and total steps read it)
    poll_s: float = 2.0
    idle_timeout_s: float | None = None  # raise after this long without a task (None: wait)
    version_format: str = "step-{step}"  # "global_step_{step}" names verl's checkpoint folders
    selection: dict[str, Any] = field(default_factory=dict)  # lease filters: domains, topics, solver …

    def version(self, step: int) -> str:
        """The solver version announced at verl's global step ``step``."""
        return self.version_format.format(step=step)

    @classmethod
    def from_config(cls, data_config: Mapping[str, Any]) -> VerlSettings:
        block = data_config.get(INFO_KEY)
        if not block:
            raise ValueError("data.propel is missing: set data.propel.api, data.propel.solver and "
                             "data.propel.group_size (= actor_rollout_ref.rollout.n); see docs/adapters/verl.md")
        known = {f.name for f in fields(cls)} - {"batch", "step_rows"}
        given = {k: _plain(v) for k, v in dict(block).items()}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"data.propel: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        missing = [k for k in ("api", "solver", "group_size") if given.get(k) in (None, "")]
        if missing:
            raise ValueError(f"data.propel.{missing[0]} is required (see docs/adapters/verl.md)")
        if "{step}" not in str(given.get("version_format", "{step}")):
            raise ValueError("data.propel.version_format must contain {step} (e.g. step-{step})")
        step_rows = int(data_config.get("train_batch_size") or 0)
        if step_rows < 1:
            raise ValueError("data.train_batch_size must be ≥ 1")
        return cls(batch=int(data_config.get("gen_batch_size") or step_rows), step_rows=step_rows, **given)


def _plain(value: Any) -> Any:
    """An OmegaConf node as plain Python (dicts and lists), anything else as is."""
    try:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        return value


def _token() -> str | None:
    return os.environ.get("PROPEL_API_TOKEN") or None


def lease_info(task: LeasedTask) -> dict[str, Any]:
    """A leased task as plain data (it crosses to the reward worker inside the row)."""
    return {"id": task.id, "lease_token": task.lease_token, "lease_until": task.lease_until,
            "attempts": task.attempts, "message": task.message}


def verl_row(task: LeasedTask, settings: VerlSettings, version: str | int | None) -> Row:
    """The row verl's ``RLHFDataset.__getitem__`` would give (``raw_prompt`` as chat, ``dummy_tensor``,
    ``index`` …), its lease and the version that rolls it out in ``extra_info["propel"]``."""
    domain = str(task.message.get("domain", ""))
    chat = [{"role": "user", "content": task.message["solver_prompt"]}]
    info = {"task": lease_info(task), "api": settings.api, "solver": settings.solver, "version": version,
            "group_size": settings.group_size}
    return {"data_source": f"propel/{domain}", "ability": domain, "prompt": chat, "raw_prompt": chat,
            "reward_model": {"style": "rule", "ground_truth": f"propel-task-{task.id}"},
            "extra_info": {"index": task.id, INFO_KEY: info}, "index": task.id, "tools_kwargs": {},
            "interaction_kwargs": {}, "dummy_tensor": torch.tensor([0], dtype=torch.uint8)}


class PropelDataset(RLHFDataset):
    """verl's ``data.custom_cls``: rows leased from the daemon when ``data_files`` is ``propel://…``,
    verl's own ``RLHFDataset`` otherwise (a held-out parquet for validation)."""

    def __init__(self, data_files: str | list[str], tokenizer: Any, config: Any, processor: Any = None,
                 max_samples: int = -1) -> None:
        files = [data_files] if isinstance(data_files, str) else list(data_files)
        self.from_queue = any(str(f).startswith(QUEUE_SCHEME) for f in files)
        if not self.from_queue:
            super().__init__(data_files, tokenizer, config, processor, max_samples)
            return
        if len(files) != 1:
            raise ValueError(f"data files {files}: {QUEUE_SCHEME}… must be the only train file")
        self.tokenizer, self.processor, self.config = tokenizer, processor, config
        self.settings = VerlSettings.from_config(config)
        if int(config.get("dataloader_num_workers", 0) or 0) != 0:
            raise ValueError("data.dataloader_num_workers must be 0 with propel://: rows leased in a loader "
                             "worker are never released, reported or nacked by the process that checkpoints")
        _check_reward_workers(config)
        self.handed = 0
        self.version: str | int | None = self.settings.version(0)
        self._stream: TaskStream | None = None
        self._rows: Iterator[Row] | None = None
        self._finalizer: Any = None
        self._opened_at = 0  # rows handed out before this process's stream (a resumed run)

    # ---- verl's Dataset interface --------------------------------------------------------------------
    def __len__(self) -> int:
        return self.settings.max_tasks if self.from_queue else super().__len__()

    def __getitem__(self, item: int) -> Row:
        if not self.from_queue:
            return super().__getitem__(item)
        rows = self._open()
        if self.handed and self.handed % self.settings.batch == 0:
            self.release_handed()  # the previous batch is rolled out and graded: its leases are the reward side's
        try:
            row = next(rows)
        except StopIteration:
            s = self.settings
            if self._stream is not None and self._stream.leased + self._opened_at >= s.max_tasks:
                raise RuntimeError(f"data.propel.max_tasks ({s.max_tasks}) tasks leased: raise it to at least "
                                   "train_batch_size × total_training_steps") from None
            raise RuntimeError(f"the Propel queue at {s.api} gave no task for {s.idle_timeout_s} s "
                               "(data.propel.idle_timeout_s): is the daemon running and emitting? "
                               "(`propel status`)") from None
        self.handed += 1
        return row

    def __getstate__(self) -> dict[str, Any]:
        if not self.from_queue:
            return super().__getstate__()
        state = self.__dict__.copy()  # the stream holds a connection pool and threads: rebuilt on first use
        state.update(_stream=None, _rows=None, _finalizer=None)
        return state

    # ---- the checkpoint hook (torchdata's Stateful protocol, called by verl's _save_checkpoint) ------
    def state_dict(self) -> dict[str, Any]:
        """Called when verl saves a checkpoint (with the data loader's state): announces ``step-N``."""
        if not self.from_queue:
            return {}
        self.announce(self.handed // self.settings.step_rows)
        return {"handed": self.handed, "version": self.version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resuming from a verl checkpoint: the step count and the version go on from there."""
        if self.from_queue and state:
            self.handed = int(state["handed"])
            self.version = state["version"]
            if self._stream is not None:
                self._stream.set_version(self.version)

    def announce(self, step: int) -> None:
        """Announce ``step-<step>`` (``data.propel.version_format``) of the solver, ordered by ``step``;
        rows handed out from now on are rolled out by it. A failure is logged and training goes on at
        the previous version."""
        version = self.settings.version(step)
        try:
            self._client().announce(self.settings.solver, version, order=step)
        except Exception as err:  # the checkpoint is saved whatever the daemon answers
            log.error("announcing %s@%s failed (%s): later outcomes stay labelled %s", self.settings.solver,
                      version, err, self.version)
            return
        self.version = version
        if self._stream is not None:
            self._stream.set_version(version)
        log.info("announced %s@%s", self.settings.solver, version)

    def on_batch_end(self, batch: Any = None) -> None:
        """verl's per-step dataset hook: the step's rows are graded, their leases are the reward side's."""
        if self.from_queue:
            self.release_handed()

    # ---- leases --------------------------------------------------------------------------------------
    def release_handed(self) -> int:
        """Release every handed-out task (its lease travelled with its row); answers how many."""
        if self._stream is None:
            return 0
        ids = self._stream.ledger.handed_out()
        for tid in ids:
            self._stream.release(tid)
        return len(ids)

    def close(self) -> CloseSummary | None:
        """Release the handed-out tasks and nack the ones leased and never handed out (``tried=False``)."""
        if self._stream is None:
            return None
        self._finalizer.detach()
        summary = _close_at_exit(self._stream)
        self._stream = self._rows = None
        return summary

    def _client(self) -> PropelClient:
        if self._stream is None:
            self._open()
        assert self._stream is not None
        return self._stream.client

    def _open(self) -> Iterator[Row]:
        if self._rows is None:
            s = self.settings
            client = PropelClient(s.api, token=_token())
            if self.version == s.version(0):
                client.announce(s.solver, s.version(0), order=0)
            self._stream = TaskStream(client, solver=s.solver, version=self.version, batch=s.batch,
                                      lease_s=s.lease_s, consumer=s.consumer, ack_every=s.ack_every,
                                      poll_s=s.poll_s, idle_timeout_s=s.idle_timeout_s,
                                      max_tasks=max(s.max_tasks - self.handed, 0),  # a resumed run goes on
                                      row=lambda task: verl_row(task, s, self.version), selection=s.selection)
            self._rows, self._opened_at = iter(self._stream), self.handed
            self._finalizer = weakref.finalize(self, _close_at_exit, self._stream)
        return self._rows


def _check_reward_workers(data_config: Any) -> None:
    """With several reward workers a task's completions are split between processes: no group would
    ever be complete, and no outcome acked. The data config is a node of verl's whole config."""
    try:
        from omegaconf import OmegaConf

        root = data_config._get_root() if OmegaConf.is_config(data_config) else None
        workers = OmegaConf.select(root, "reward.num_workers", default=None) if root is not None else None
    except Exception:  # not verl's config object: nothing to check
        return
    if workers is not None and int(workers) != 1:
        raise ValueError(f"reward.num_workers is {workers}: set reward.num_workers=1 with propel://, a task's "
                         "completions must be graded in one process to be acked once")


def _close_at_exit(stream: TaskStream) -> CloseSummary:
    for tid in stream.ledger.handed_out():
        stream.release(tid)
    summary = stream.close()
    stream.client.close()
    return summary


class GroupReporter:
    """The reward side of one (daemon, solver): adopts leases, grades, reports each group once."""

    def __init__(self, api: str, solver: str, ack_every: int = 256) -> None:
        self.stream = TaskStream(PropelClient(api, token=_token()), solver=solver, ack_every=ack_every,
                                 consumer="verl-reward")
        self._votes: dict[tuple[int, str], list[bool | None]] = {}
        self._lock = threading.Lock()
        self.graded = self.groups = 0

    def score(self, info: Mapping[str, Any], completion: str) -> float:
        """Grade one completion of a leased task; the group's outcome is reported when it is complete."""
        task = LeasedTask(**info["task"])
        verdict = grade(task.message, completion)
        key = (task.id, task.lease_token)
        with self._lock:
            self.stream.adopt(task)  # False after the first completion of the group: already held
            votes = self._votes.setdefault(key, [])
            votes.append(verdict)
            complete = len(votes) >= int(info["group_size"])
            if complete:
                del self._votes[key]
                self.groups += 1
            self.graded += 1
        if complete:
            solved, errors = sum(v is True for v in votes), sum(v is None for v in votes)
            self.stream.report(task.id, solved=solved, n=len(votes), errors=errors, version=info["version"])
            if self.stream.unreported == 0:  # every adopted group is in (the step's grading is done): one request
                self.stream.flush()
        return 1.0 if verdict else 0.0

    def close(self) -> CloseSummary:
        """Send pending acks; nack the tasks whose group never completed (as tried)."""
        summary = self.stream.close()
        self.stream.client.close()
        return summary


_reporters: dict[tuple[str, str], GroupReporter] = {}
_reporters_lock = threading.Lock()


def reporter(api: str, solver: str) -> GroupReporter:
    """This process's reporter for ``solver`` at ``api`` (one per process: groups must meet in one)."""
    with _reporters_lock:
        if (api, solver) not in _reporters:
            _reporters[(api, solver)] = GroupReporter(api, solver)
        return _reporters[(api, solver)]


def close_reporters() -> list[CloseSummary]:
    """Close every reporter of this process (also run at exit)."""
    with _reporters_lock:
        done, _reporters_copy = [], list(_reporters.values())
        _reporters.clear()
    for r in _reporters_copy:
        done.append(r.close())
    return done


atexit.register(close_reporters)


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  **_: Any) -> float:
    """verl's ``custom_reward_function``: 1.0 when the domain grader accepts the completion, else 0.0.
    Rows leased from the daemon are reported as groups (see the module docs); other rows (a held-out
    parquet) are scored by verl's ``default_compute_score``."""
    info = (extra_info or {}).get(INFO_KEY)
    if not info:
        from verl.utils.reward_score import default_compute_score

        return float(default_compute_score(data_source, solution_str, ground_truth, extra_info))
    return reporter(str(info["api"]), str(info["solver"])).score(info, solution_str)

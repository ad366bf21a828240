"""Stream frontier tasks into a torch / TRL training loop and report each task's outcome as an ack.

    client = PropelClient("http://propel:8787", token=...)
    stream = TaskStream(client, solver="my-policy", version="step-0", batch=16)
    for row in stream:                         # {"prompt": ..., "task_id": ..., "domain": ...}
        solved = train_on(row["prompt"], stream.message(row["task_id"]))   # your code
        stream.report(row["task_id"], solved=solved, n=8)
    stream.close()                             # flush acks, nack the rest

With TRL's ``GRPOTrainer`` pass ``stream.hf_dataset()`` (a ``datasets.IterableDataset``) as the
train dataset, with ``max_steps`` set and ``shuffle_dataset=False`` (TRL's shuffle buffer would
lease about a thousand tasks ahead); call :meth:`TaskStream.report` from the reward function.

Semantics (the rules are :class:`propel_sdk.ledger.Ledger`'s, shared with the async stream)
    * Tasks are leased ``batch`` at a time, when the rows already leased are used up; an empty queue
      is polled every ``poll_s`` (``idle_timeout_s``: stop after that long without a task).
    * Every lease the stream holds is renewed every ``lease_s / 3`` in a background thread: rows read
      ahead, rows handed out, and **reported tasks until their ack is stored**. A renew answered
      ``lease_lost`` twice in a row stops renewing that task; its report is still sent and the
      server's answer decides. A renew refused for another reason (401 after a token rotation) keeps
      every task and report, logs an ERROR and sets :attr:`TaskStream.renew_error`; fix the token
      with ``client.set_token(...)``.
    * :meth:`report` acks each task **once**, as ``solver`` at the stream's current ``version``
      (:meth:`set_version` after announcing a checkpoint). Acks go in batches of ``ack_every``
      (at most 1,000 per request). An outcome leaves the pending list only when the server answered
      for it: unreachable -> kept and retried at the next flush; **refused** (``lease_lost``, a 422
      such as ``solved + errors > n`` or an unannounced version, a 500 on that outcome alone) -> that
      outcome alone becomes a :class:`~propel_sdk.ledger.Refusal` naming the task, in
      :attr:`TaskStream.refused` (and ``on_refused(refusal)`` when given, and a WARNING); the others
      are stored. After ``invalid`` / ``server_error`` the stream still holds the task: report it
      again, or :meth:`close` nacks it.
    * :meth:`message` answers from the lease until the task is nacked, and after a report for the
      last ``keep_messages`` reported tasks (a second reward function may grade after the first
      reported).
    * :meth:`close` sends the pending acks and **nacks every task that was leased but not reported**:
      rows handed out and never reported (a run stopped with Ctrl-C) as *tried* (a delivery attempt
      spent, as a lease expiry would), rows read ahead and never handed out with ``tried=false`` (the
      server gives the attempt back). Use the stream as a context manager to be sure. It returns a
      :class:`~propel_sdk.ledger.CloseSummary` (stored, refused, unsent, nacked).
    * Iterate in the process that reports: a data loader with worker processes would lease in the
      workers, where reports never arrive (``num_workers=0``; TRL enforces it for iterable sets).

``propel_sdk`` modules that import torch: this one and :mod:`propel_sdk.verl` (which also imports
verl); ``import propel_sdk`` and the client, ledger and grading modules stay torch-free.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import torch.utils.data

from propel_sdk.client import LeasedTask, PropelClient, PropelClientError
from propel_sdk.ledger import CURRENT, CloseSummary, Ledger, Refusal, _Current
from propel_sdk.protocol import Flow, T, describe, transient

log = logging.getLogger("propel_sdk.torch_data")

Row = dict[str, Any]


def default_row(task: LeasedTask) -> Row:
    """The row a trainer sees: the solver prompt, the task id (to report and to look the message up)
    and the domain. Grading data stays in :meth:`TaskStream.message` (its shape differs per domain)."""
    return {"prompt": task.message["solver_prompt"], "task_id": task.id, "domain": task.message.get("domain", "")}


class TaskStream(torch.utils.data.IterableDataset[dict[str, Any]]):
    """Leased tasks as rows; :meth:`report` acks an outcome; :meth:`close` nacks the unreported rest."""

    def __init__(self, client: PropelClient, *, solver: str, version: str | int | None = None,
                 batch: int = 16, lease_s: float = 600.0, consumer: str = "torch-trainer", ack_every: int = 16,
                 poll_s: float = 1.0, idle_timeout_s: float | None = None, max_tasks: int | None = None,
                 row: Callable[[LeasedTask], Row] = default_row, selection: Mapping[str, Any] | None = None,
                 on_refused: Callable[[Refusal], None] | None = None, keep_messages: int = 4096) -> None:
        super().__init__()
        if batch < 1 or ack_every < 1:
            raise ValueError("batch and ack_every must be ≥ 1")
        self.client, self.batch, self.consumer = client, batch, consumer
        self.poll_s, self.idle_timeout_s, self.max_tasks = poll_s, idle_timeout_s, max_tasks
        self.row, self.selection = row, dict(selection or {})
        self.ledger = Ledger(client.operations, solver, version, lease_s=lease_s, ack_every=ack_every,
                             keep_messages=keep_messages, on_refused=on_refused)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._key = next(_KEYS)
        _LIVE[self._key] = self

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        # ``datasets`` fingerprints generator arguments by pickling them: a stream pickles as a reference
        # to the live object (it holds locks and a connection pool), valid in this process only.
        return _live_stream, (self._key,)

    def _run(self, flow: Flow[T]) -> T:
        return self.client.run(flow)

    # ---- counters (the ledger's) -------------------------------------------------------------------
    solver = property(lambda self: self.ledger.solver)
    version = property(lambda self: self.ledger.version)
    lease_s = property(lambda self: self.ledger.lease_s)
    ack_every = property(lambda self: self.ledger.ack_every)
    leased = property(lambda self: self.ledger.leased, doc="tasks leased so far")
    acked = property(lambda self: self.ledger.acked, doc="outcomes stored as acked or late")
    nacked = property(lambda self: self.ledger.nacked, doc="tasks given back by close")
    statuses = property(lambda self: self.ledger.statuses, doc="ack answer -> count")
    refused = property(lambda self: self.ledger.refused, doc="outcomes refused (Refusal, naming the task)")
    renew_error = property(lambda self: self.ledger.renew_error, doc="the last non-transient renew refusal")

    # ---- reading -------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Row]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("TaskStream must be read in the training process (DataLoader num_workers=0): "
                               "reports of tasks leased in a worker process never reach it")
        self._start_renewer()
        idle_since = time.monotonic()
        while not self._stop.is_set():
            task = self.ledger.next_task()
            if task is not None:
                idle_since = time.monotonic()
                yield self.row(task)
                continue
            if self.max_tasks is not None and self.ledger.leased >= self.max_tasks:
                return
            if self._lease():
                continue
            if self.idle_timeout_s is not None and time.monotonic() - idle_since >= self.idle_timeout_s:
                log.info("no task for %.0f s: the stream ends", self.idle_timeout_s)
                return
            self._stop.wait(self.poll_s)

    def _lease(self) -> int:
        n = self.batch if self.max_tasks is None else min(self.batch, self.max_tasks - self.ledger.leased)
        try:
            return self._run(self.ledger.lease(n, self.consumer, self.selection))
        except (httpx.TransportError, PropelClientError) as err:
            if not transient(err):
                raise
            log.warning("lease failed (%s): retrying in %.0f s", describe(err), self.poll_s)
            return 0

    def message(self, task_id: int) -> dict[str, Any]:
        """The task's message (``solver_prompt``, ``grading`` …): while leased, reported, and for the last
        ``keep_messages`` reported tasks after their ack; a ``KeyError`` naming the task otherwise."""
        return self.ledger.message(task_id)

    def hf_dataset(self) -> Any:
        """This stream as a ``datasets.IterableDataset`` (what TRL's trainers take)."""
        import datasets

        return datasets.IterableDataset.from_generator(_rows, gen_kwargs={"stream": self})

    # ---- reporting -----------------------------------------------------------------------------
    def set_version(self, version: str | int | None) -> None:
        """Outcomes reported from now on are acked as made by ``version`` (announce it first: a version
        string with no step number that was never announced is refused, each outcome as a Refusal)."""
        self.ledger.version = version

    def report(self, task_id: int, solved: int, n: int, errors: int = 0,
               version: str | int | _Current | None = CURRENT) -> bool:
        """Record ``solved`` of ``n`` attempts (``errors`` lost to infrastructure) for a leased task, made by
        the stream's current version (or ``version``); acked in the next batch. ``False`` when the
        stream does not hold the task (already reported, or never leased by it). A refused outcome
        shows up in :attr:`refused`, naming the task. The outcome is recorded before a due flush runs:
        a 401 that flush raises loses nothing (set the new token)."""
        if not self.ledger.report(task_id, solved, n, errors, version):
            return False
        if self.ledger.due:
            self.flush()
        return True

    def flush(self) -> bool:
        """Send the pending acks now; ``False`` (and they stay pending) when the daemon is unreachable.
        A 401/403 raises :class:`PropelClientError`; the outcomes stay pending."""
        return self._run(self.ledger.flush())

    def adopt(self, task: LeasedTask) -> bool:
        """Hold a task another process leased (its lease travels with the row): renewed from now on,
        reported once, nacked by :meth:`close` if never reported. ``False`` if already held or reported."""
        if not self.ledger.adopt(task):
            return False
        self._start_renewer()
        return True

    def release(self, task_id: int) -> LeasedTask | None:
        """Stop holding a handed-out task without nacking it (whoever adopted it reports it)."""
        return self.ledger.release(task_id)

    def take_refused(self) -> list[Refusal]:
        """The refused outcomes since the last call (each names its task)."""
        return self.ledger.take_refused()

    @property
    def unreported(self) -> int:
        """Tasks leased and not reported (read ahead or handed out)."""
        return len(self.ledger.held)

    # ---- shutdown ------------------------------------------------------------------------------
    def close(self, flush_attempts: int = 3) -> CloseSummary:
        """Stop renewing, send pending acks (``flush_attempts`` tries), nack every unreported task."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        return self._run(self.ledger.close(flush_attempts))

    def __enter__(self) -> TaskStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_renewer(self) -> None:
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="propel-lease-renewer")
            self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ledger.lease_s / 3):
            try:
                self._run(self.ledger.renew())
            except (httpx.TransportError, PropelClientError) as err:
                level = logging.WARNING if transient(err) else logging.ERROR
                log.log(level, "renewing leases failed (%s): every task and report is kept; next try in %.0f s",
                        describe(err), self.ledger.lease_s / 3)


_KEYS = itertools.count()
_LIVE: weakref.WeakValueDictionary[int, TaskStream] = weakref.WeakValueDictionary()


def _live_stream(key: int) -> TaskStream:
    return _LIVE[key]


def _rows(stream: TaskStream) -> Iterator[Row]:
    yield from stream

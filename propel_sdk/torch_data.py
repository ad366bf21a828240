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

Semantics
    * Tasks are leased ``batch`` at a time, when the rows already leased are used up; an empty queue
      is polled every ``poll_s`` (``idle_timeout_s``: stop after that long without a task).
    * Leases of tasks handed out and not yet reported are renewed every ``lease_s / 3`` in a
      background thread. A lease the server refuses to renew (it expired and another consumer got
      the task) is dropped: a later report of that task is ignored.
    * :meth:`report` acks each task **once**, as ``solver`` at the stream's current ``version``
      (:meth:`set_version` after announcing a checkpoint). Acks go in batches of ``ack_every``
      through ``ack_many``; a batch that cannot be sent (daemon restarting) is kept and retried.
    * :meth:`close` sends the pending acks and **nacks every task that was leased but not reported**
      (rows a data loader read ahead, a run stopped with Ctrl-C): they go back to the queue at once,
      without waiting for their lease to expire. Use the stream as a context manager to be sure.
    * Iterate in the process that reports: a data loader with worker processes would lease in the
      workers, where reports never arrive (``num_workers=0``; TRL enforces it for iterable sets).

This is the only ``propel_sdk`` module that imports torch.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import torch.utils.data

from propel_sdk.client import Ack, LeasedTask, PropelClient, PropelClientError

log = logging.getLogger("propel_sdk.torch_data")

Row = dict[str, Any]


def default_row(task: LeasedTask) -> Row:
    """The row a trainer sees: the solver prompt, the task id (to report and to look the message up)
    and the domain. Grading data stays in :meth:`TaskStream.message` (its shape differs per domain)."""
    return {"prompt": task.message["solver_prompt"], "task_id": task.id, "domain": task.message.get("domain", "")}


def _transient(err: Exception) -> bool:
    """A failure worth retrying: the daemon is unreachable or restarting."""
    return isinstance(err, httpx.TransportError) or (isinstance(err, PropelClientError) and err.status >= 500)


class TaskStream(torch.utils.data.IterableDataset[dict[str, Any]]):
    """Leased tasks as rows; :meth:`report` acks an outcome; :meth:`close` nacks the unreported rest."""

    def __init__(self, client: PropelClient, *, solver: str, version: str | int | None = None,
                 batch: int = 16, lease_s: float = 600.0, consumer: str = "torch-trainer", ack_every: int = 16,
                 poll_s: float = 1.0, idle_timeout_s: float | None = None, max_tasks: int | None = None,
                 row: Callable[[LeasedTask], Row] = default_row, selection: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if batch < 1 or ack_every < 1:
            raise ValueError("batch and ack_every must be ≥ 1")
        self.client, self.solver, self.version = client, solver, version
        self.batch, self.lease_s, self.consumer, self.ack_every = batch, lease_s, consumer, ack_every
        self.poll_s, self.idle_timeout_s, self.max_tasks = poll_s, idle_timeout_s, max_tasks
        self.row, self.selection = row, dict(selection or {})
        self._held: dict[int, LeasedTask] = {}  # leased, not yet reported
        self._pending: list[Ack] = []  # reported, not yet sent
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.leased = self.acked = self.nacked = 0
        self.statuses: dict[str, int] = {}  # ack status → count (acked, late, already_acked, lease_lost …)
        self._key = next(_KEYS)
        _LIVE[self._key] = self

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        # ``datasets`` fingerprints generator arguments by pickling them: a stream pickles as a reference
        # to the live object (it holds locks and a connection pool), valid in this process only.
        return _live_stream, (self._key,)

    # ---- reading -------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Row]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("TaskStream must be read in the training process (DataLoader num_workers=0): "
                               "reports of tasks leased in a worker process never reach it")
        self._start_renewer()
        buffer: deque[LeasedTask] = deque()
        idle_since = time.monotonic()
        while not self._stop.is_set():
            if self.max_tasks is not None and self.leased >= self.max_tasks and not buffer:
                return
            if not buffer:
                buffer.extend(self._lease())
            if buffer:
                idle_since = time.monotonic()
                yield self.row(buffer.popleft())
                continue
            if self.idle_timeout_s is not None and time.monotonic() - idle_since >= self.idle_timeout_s:
                log.info("no task for %.0f s: the stream ends", self.idle_timeout_s)
                return
            self._stop.wait(self.poll_s)

    def _lease(self) -> list[LeasedTask]:
        n = self.batch if self.max_tasks is None else min(self.batch, self.max_tasks - self.leased)
        try:
            tasks = self.client.lease(n, self.lease_s, self.consumer, **self.selection)
        except (httpx.TransportError, PropelClientError) as err:
            if not _transient(err):
                raise
            log.warning("lease failed (%s): retrying in %.0f s", err, self.poll_s)
            return []
        with self._lock:
            self._held.update((t.id, t) for t in tasks)
            self.leased += len(tasks)
        return tasks

    def message(self, task_id: int) -> dict[str, Any]:
        """The leased task's message (``solver_prompt``, ``grading`` …) until it is reported."""
        with self._lock:
            return self._held[task_id].message

    def hf_dataset(self) -> Any:
        """This stream as a ``datasets.IterableDataset`` (what TRL's trainers take)."""
        import datasets

        return datasets.IterableDataset.from_generator(_rows, gen_kwargs={"stream": self})

    # ---- reporting -----------------------------------------------------------------------------
    def set_version(self, version: str | int | None) -> None:
        """Outcomes reported from now on are acked as made by ``version`` (announce it first)."""
        self.version = version

    def report(self, task_id: int, solved: int, n: int, errors: int = 0) -> bool:
        """Record ``solved`` of ``n`` attempts (``errors`` lost to infrastructure) for a leased task; acked
        in the next batch. ``False`` when the task is not held (already reported, or its lease was lost)."""
        with self._lock:
            task = self._held.pop(task_id, None)
            if task is None:
                return False
            self._pending.append(Ack(task, solved=solved, n=n, solver=self.solver, errors=errors,
                                     version=self.version))
            due = len(self._pending) >= self.ack_every
        if due:
            self.flush()
        return True

    def flush(self) -> bool:
        """Send the pending acks now; ``False`` (and they stay pending) when the daemon is unreachable."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return True
        try:
            statuses = self.client.ack_many(batch)
        except (httpx.TransportError, PropelClientError) as err:
            if not _transient(err):
                raise
            log.warning("ack of %d outcomes failed (%s): kept for the next flush", len(batch), err)
            with self._lock:
                self._pending = batch + self._pending
            return False
        for status in statuses.values():
            self.statuses[status] = self.statuses.get(status, 0) + 1
        self.acked += sum(1 for s in statuses.values() if s in ("acked", "late"))
        return True

    @property
    def unreported(self) -> int:
        with self._lock:
            return len(self._held)

    # ---- shutdown ------------------------------------------------------------------------------
    def close(self, flush_attempts: int = 3) -> None:
        """Stop renewing, send pending acks (``flush_attempts`` tries), nack every unreported task."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        for attempt in range(flush_attempts):
            if self.flush():
                break
            time.sleep(min(2.0 ** attempt, 5.0))
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for task in held:
            try:
                self.client.nack(task)
                self.nacked += 1
            except (httpx.TransportError, PropelClientError) as err:
                log.warning("nack of task %d failed (%s): it returns when its lease expires", task.id, err)

    def __enter__(self) -> TaskStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_renewer(self) -> None:
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="propel-lease-renewer")
            self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self._lock:
                held = list(self._held.values())
            for task in held:
                try:
                    self.client.renew(task, self.lease_s)
                except (httpx.TransportError, PropelClientError) as err:
                    if _transient(err):
                        continue
                    with self._lock:  # lease lost or task gone: a later report is ignored
                        self._held.pop(task.id, None)


_KEYS = itertools.count()
_LIVE: weakref.WeakValueDictionary[int, TaskStream] = weakref.WeakValueDictionary()


def _live_stream(key: int) -> TaskStream:
    return _LIVE[key]


def _rows(stream: TaskStream) -> Iterator[Row]:
    yield from stream

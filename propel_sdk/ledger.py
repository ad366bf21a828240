"""The trainer-side rules of a task stream, written once and free of I/O: which leased tasks are held,
handed to the trainer, reported, stored or refused; how reports become batched acks; what is
renewed; what ``close`` gives back. :class:`propel_sdk.torch_data.TaskStream` (threads) and
:class:`propel_sdk.aio.AsyncTaskStream` (asyncio) only run its flows (:mod:`propel_sdk.protocol`).

A task's life in a stream::

    leased (read ahead) -> handed to the trainer -> reported (pending) -> stored (acked / late / already_acked)
                                                                      \\-> refused (a Refusal naming the task)
    close: pending acks are sent; held tasks are nacked (never handed: ``tried=False``)

Across processes (verl: the dataset leases in the driver, a Ray reward worker grades): the row
carries the lease; the worker's ledger :meth:`Ledger.adopt` s it (held, handed: renewed, reported
once, nacked on close if never reported) and the leasing ledger :meth:`Ledger.release` s it (no
nack: the lease is the adopter's now, or lapses and the task is delivered again).

Rules (issue #37):

* A reported task stays **renewed until its ack is stored**: the outcome waits for its batch, the
  lease does not lapse meanwhile.
* A flush never drops a batch. Outcomes leave the pending list only when the server answered for
  them. A refused item fails alone (422 naming it, a version the server cannot order, a 500 that
  ``/v1/status`` shows is not an outage) and becomes a :class:`Refusal` naming the task; the rest are
  stored. More than :data:`~propel_sdk.protocol.MAX_ACK_BATCH` pending outcomes go in several requests.
* A connection error or 502/503/504 is retried with backoff by the transport, then the outcomes stay
  pending (``flush`` answers False); 401/403 raise, the outcomes stay pending.
* A renew answered ``lease_lost`` / ``not_found`` is not believed once (#37 defect 9: two renews
  racing on the server); after :data:`LOST_AFTER` such answers in a row the task is no longer
  renewed. It is never forgotten: its report is still sent, and the ack's answer (stored or refused)
  is what the caller sees.
* An outcome refused as ``invalid`` or ``server_error`` leaves the lease with the stream: the task
  is held again (renewed), so a corrected :meth:`Ledger.report` may follow; ``close`` nacks it
  otherwise. After ``lease_lost`` / ``not_leased`` / ``not_found`` the task is gone.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from propel_sdk.protocol import (
    FLOW_ERRORS,
    LOST_STATUSES,
    MAX_ACK_BATCH,
    Ack,
    Flow,
    LeasedTask,
    Operations,
    PropelClientError,
    Sleep,
    describe,
    transient,
)

log = logging.getLogger("propel_sdk.stream")
#: ack answers that mean the outcome is stored (``already_acked``: a retried request whose first try landed)
STORED = frozenset({"acked", "late", "already_acked"})
#: refusals of the outcome, not of the lease: the task stays held (renewed; a new report or close's nack)
KEPT_ON_REFUSAL = frozenset({"invalid", "server_error"})
#: renew answers saying the lease is gone, in a row, before the stream stops renewing the task
LOST_AFTER = 2


class _Current:
    """The ledger's current version (``Ledger.report``'s default)."""

    def __repr__(self) -> str:
        return "CURRENT"


CURRENT = _Current()


@dataclass(frozen=True)
class Refusal:
    """An outcome the server did not store, and why; handed to the caller, never dropped silently.

    ``status``: the ack answer (``lease_lost``, ``not_leased``, ``not_found``), ``invalid`` (a 422:
    e.g. ``solved + errors > n``, or a version with no step number that was never announced) or
    ``server_error`` (the server failed on this outcome while it answered others)."""

    task_id: int
    status: str
    detail: str
    outcome: Ack

    def __str__(self) -> str:
        return f"task {self.task_id}: outcome refused ({self.status}): {self.detail}"


@dataclass
class Held:
    """A task this stream holds a lease on."""

    task: LeasedTask
    handed: bool = False  # given to the trainer (a nack then costs a delivery attempt)
    lost_answers: int = 0  # renew answers in a row that said the lease is gone

    @property
    def renewing(self) -> bool:
        return self.lost_answers < LOST_AFTER


@dataclass
class CloseSummary:
    """What :meth:`Ledger.close` did: outcomes stored, refused, still unsent, tasks given back."""

    stored: int
    refused: list[Refusal]
    unsent: list[int]
    nacked: int
    nacked_untried: int


@dataclass
class Ledger:
    """The state of one stream and its flows (lease, report, flush, renew, close)."""

    ops: Operations
    solver: str
    version: str | int | None = None
    lease_s: float = 600.0
    ack_every: int = 16
    max_batch: int = MAX_ACK_BATCH
    keep_messages: int = 4096
    on_refused: Callable[[Refusal], None] | None = None
    held: dict[int, Held] = field(default_factory=dict)  # leased, not reported (insertion = lease order)
    pending: dict[int, tuple[Ack, Held]] = field(default_factory=dict)  # reported, answer not yet received
    refused: list[Refusal] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)  # ack answer -> count
    leased: int = 0
    acked: int = 0  # stored as acked or late
    nacked: int = 0
    nacked_untried: int = 0
    renew_error: PropelClientError | None = None  # the last non-transient renew refusal (e.g. 401)
    _in_flight: set[int] = field(default_factory=set)
    _server_ok: bool = False  # /v1/status answered during this flush
    _due_at: int = 0  # after a failed flush: the next one is due at this many pending outcomes
    _messages: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- leasing and handing out ---------------------------------------------------------------
    def lease(self, n: int, consumer: str, selection: Mapping[str, Any]) -> Flow[int]:
        """Lease up to ``n`` more tasks into the read-ahead; answers how many came."""
        tasks = yield from self.ops.lease(n, self.lease_s, consumer, **selection)
        with self._lock:
            self.held.update((t.id, Held(t)) for t in tasks)
            self.leased += len(tasks)
        return len(tasks)

    def next_task(self) -> LeasedTask | None:
        """The oldest leased task not yet handed out, now marked as handed to the trainer."""
        with self._lock:
            for h in self.held.values():
                if not h.handed:
                    h.handed = True
                    return h.task
        return None

    def adopt(self, task: LeasedTask) -> bool:
        """Hold a task another process leased (its lease token travels with it, e.g. in a verl row that
        a Ray reward worker grades): from now on this ledger renews it, reports it once, and ``close``
        nacks it if it is never reported. ``False`` when this ledger already holds or reported it."""
        with self._lock:
            if task.id in self.held or task.id in self.pending:
                return False
            self.held[task.id] = Held(task, handed=True)
        return True

    def release(self, task_id: int) -> LeasedTask | None:
        """Stop holding a task without nacking it: its lease now belongs to whoever :meth:`adopt` ed it
        (or lapses, and the task is delivered again). ``None`` when the task is not held."""
        with self._lock:
            h = self.held.pop(task_id, None)
        return None if h is None else h.task

    def handed_out(self) -> list[int]:
        """Held tasks already handed to the trainer (not reported), in lease order."""
        with self._lock:
            return [tid for tid, h in self.held.items() if h.handed]

    def message(self, task_id: int) -> dict[str, Any]:
        """The task's message while it is leased, reported, and for the last ``keep_messages`` stored or
        refused reports (a second reward function may grade after the first reported)."""
        with self._lock:
            if task_id in self.held:
                return self.held[task_id].task.message
            if task_id in self.pending:
                return self.pending[task_id][1].task.message
            if task_id in self._messages:
                return self._messages[task_id]
        raise KeyError(f"task {task_id} is not leased by this stream (or was reported more than "
                       f"{self.keep_messages} reports ago): nothing to look up")

    # ---- reporting -----------------------------------------------------------------------------
    def report(self, task_id: int, solved: int, n: int, errors: int = 0,
               version: str | int | _Current | None = CURRENT) -> bool:
        """Queue the outcome of a held task (as ``solver`` at the current version, or at ``version`` when
        given: the version that made the attempts, carried by the row). ``False`` when this stream does
        not hold the task (already reported, never leased, or nacked)."""
        with self._lock:
            h = self.held.pop(task_id, None)
            if h is None:
                return False
            made_by = self.version if isinstance(version, _Current) else version
            self.pending[task_id] = (Ack(h.task, solved=solved, n=n, solver=self.solver, errors=errors,
                                         version=made_by), h)
            self._messages[task_id] = h.task.message
            while len(self._messages) > self.keep_messages:
                self._messages.popitem(last=False)
        return True

    @property
    def due(self) -> bool:
        """Enough unsent outcomes for a batch (after a failed flush: ``ack_every`` more reports, so an
        outage does not cost a failed request per report)."""
        with self._lock:
            unsent = len(self.pending) - len(self._in_flight)
            return unsent >= self.ack_every and len(self.pending) >= self._due_at

    def flush(self) -> Flow[bool]:
        """Send every pending outcome (batches of at most ``max_batch``). True when none is left unsent;
        False when the API stayed unreachable (they stay pending). 401/403 raise (they stay pending)."""
        self._server_ok = False
        while True:
            batch = self._take()
            if not batch:
                self._due_at = 0
                return True
            try:
                yield from self._send(batch, isolate=False)
                if any(self._id(a) in self.pending and self._id(a) not in self._in_flight for a in batch):
                    return False  # the server did not answer for some: they stay pending, no loop on them
            except FLOW_ERRORS as err:
                with self._lock:
                    self._in_flight.difference_update(self._id(a) for a in batch)
                if not transient(err):
                    raise
                log.warning("ack of %d outcomes failed (%s): kept for the next flush", len(batch), describe(err))
                with self._lock:
                    self._due_at = len(self.pending) + self.ack_every
                return False

    def _take(self) -> list[Ack]:
        with self._lock:
            batch = [a for tid, (a, _) in self.pending.items() if tid not in self._in_flight][:self.max_batch]
            self._in_flight.update(self._id(a) for a in batch)
        return batch

    @staticmethod
    def _id(a: Ack) -> int:
        return a.task.id if isinstance(a.task, LeasedTask) else a.task

    def _send(self, batch: list[Ack], *, isolate: bool) -> Flow[None]:
        """Send ``batch``; when the server refuses the whole request, find the items that caused it."""
        if not batch:
            return
        try:
            answers = yield from self.ops.ack_many_detailed(batch, retry_server_errors=not isolate)
        except PropelClientError as err:
            if err.status not in (422, 500):
                raise
            yield from self._isolate(batch, err)
            return
        self._settle(batch, answers)

    def _isolate(self, batch: list[Ack], err: PropelClientError) -> Flow[None]:
        """Which items of ``batch`` made the request fail (422 or 500): refuse those, store the rest. A 500
        counts against items only while ``/v1/status`` answers (else it is an outage: all stay pending)."""
        status = "invalid" if err.status == 422 else "server_error"
        if err.status == 500 and not self._server_ok and not (yield from self._healthy()):
            raise PropelClientError(503, f"ack answered 500 and /v1/status does not answer: {err.detail}")
        named = _invalid_items(err.raw, len(batch))
        if named:
            for i, why in named.items():
                self._refuse(batch[i], status, why)
            yield from self._send([a for i, a in enumerate(batch) if i not in named], isolate=True)
            return
        if len(batch) == 1:
            self._refuse(batch[0], status, err.detail)
            return
        groups: dict[tuple[str, str, int | None], list[Ack]] = {}
        for a in batch:
            groups.setdefault((a.solver, str(a.version), a.version_order), []).append(a)
        if len(groups) > 1:  # one request per solver version: a version the server cannot order fails alone
            for group in groups.values():
                yield from self._send(group, isolate=True)
            return
        if err.status == 422 and err.detail.startswith("version:"):  # the cause is the group's version itself
            for a in batch:
                self._refuse(a, status, err.detail)
            return
        half = len(batch) // 2
        yield from self._send(batch[:half], isolate=True)
        yield from self._send(batch[half:], isolate=True)

    def _healthy(self) -> Flow[bool]:
        try:
            yield from self.ops.status()
        except FLOW_ERRORS:
            return False
        self._server_ok = True  # for the rest of this flush
        return True

    def _settle(self, batch: list[Ack], answers: Mapping[int, tuple[str, str]]) -> None:
        for a in batch:
            tid = self._id(a)
            if tid not in answers:  # not answered for: stays pending
                with self._lock:
                    self._in_flight.discard(tid)
                continue
            status, detail = answers[tid]
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status in STORED:
                self.acked += status != "already_acked"
                self._done(tid)
            else:  # lease_lost …, or ``invalid`` with the server's detail (a per-item refusal)
                self._refuse(a, status, detail or f"ack answered {status}")

    def _refuse(self, outcome: Ack, status: str, detail: str) -> None:
        refusal = Refusal(self._id(outcome), status, detail, outcome)
        with self._lock:
            entry = self.pending.get(refusal.task_id)
            if entry is not None and status in KEPT_ON_REFUSAL:  # the lease is still ours: report again, or close nacks
                self.held[refusal.task_id] = entry[1]
        self._done(refusal.task_id)
        self.refused.append(refusal)
        log.warning("%s", refusal)
        if self.on_refused is not None:
            self.on_refused(refusal)

    def _done(self, task_id: int) -> None:
        with self._lock:
            self.pending.pop(task_id, None)
            self._in_flight.discard(task_id)

    def take_refused(self) -> list[Refusal]:
        """The refusals since the last call (and forget them)."""
        with self._lock:
            out, self.refused = self.refused, []
        return out

    # ---- renewing ------------------------------------------------------------------------------
    def renew(self) -> Flow[int]:
        """Renew every lease this stream holds: read ahead, handed out, and reported but not yet stored.
        Answers how many were renewed; a non-transient refusal (401) is raised, nothing is dropped."""
        with self._lock:
            targets = [h for h in self.held.values() if h.renewing]
            targets += [h for tid, (_, h) in self.pending.items() if h.renewing]
        renewed = 0
        for h in targets:
            try:
                yield from self.ops.renew(h.task, self.lease_s)
            except PropelClientError as err:
                if err.status not in LOST_STATUSES:
                    self.renew_error = err
                    raise
                h.lost_answers += 1
                if not h.renewing:
                    log.warning("task %d: renew answered %s %d times in a row: no longer renewed; its report "
                                "is still sent and the server's answer decides", h.task.id, err.detail, LOST_AFTER)
                continue
            h.lost_answers = 0
            renewed += 1
        self.renew_error = None
        return renewed

    # ---- closing -------------------------------------------------------------------------------
    def close(self, flush_attempts: int = 3) -> Flow[CloseSummary]:
        """Send the pending outcomes (``flush_attempts`` tries), then nack every held task: a handed-out
        one as tried, a read-ahead one as ``tried=False`` (no delivery attempt spent). Outcomes that
        could not be sent are listed (``unsent``), logged, and their tasks left leased: their lease
        expires and they are delivered again."""
        for attempt in range(flush_attempts):
            try:
                if (yield from self.flush()):
                    break
            except PropelClientError as err:
                log.error("close: pending outcomes refused (%s)", describe(err))
                break
            yield Sleep(min(2.0 ** attempt, 5.0))
        with self._lock:
            held, self.held = list(self.held.values()), {}
            unsent = list(self.pending)
        for h in held:
            try:
                yield from self.ops.nack(h.task, tried=h.handed)
            except FLOW_ERRORS as err:
                log.warning("nack of task %d failed (%s): it returns when its lease expires", h.task.id, describe(err))
                continue
            self.nacked += 1
            self.nacked_untried += not h.handed
        if unsent:
            log.error("close: %d reported outcomes were not stored (the API did not take them): tasks %s; they "
                      "return to the queue when their leases expire", len(unsent), unsent[:20])
        return CloseSummary(self.acked, list(self.refused), unsent, self.nacked, self.nacked_untried)


def _invalid_items(raw: Any, size: int) -> dict[int, str]:
    """Batch indices a 422 names (``loc``: ``body, outcomes, i, …``) with the message of each."""
    named: dict[int, str] = {}
    if not isinstance(raw, list):
        return named
    for e in raw:
        loc = e.get("loc", []) if isinstance(e, dict) else []
        if len(loc) > 2 and loc[:2] == ["body", "outcomes"] and str(loc[2]).isdigit() and int(loc[2]) < size:
            named.setdefault(int(loc[2]), f"{'.'.join(str(x) for x in loc[3:]) or 'outcome'}: {e.get('msg', '')}")
    return named

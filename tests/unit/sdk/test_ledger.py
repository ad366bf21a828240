"""The SDK core's rules, run without I/O: flows of :mod:`propel_sdk.protocol` and
:class:`propel_sdk.ledger.Ledger` driven by a scripted server (a function of the request), which is
what sans-I/O buys: each rule is checked on exact request sequences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from propel_sdk.ledger import LOST_AFTER, Ledger
from propel_sdk.protocol import (
    MAX_ACK_BATCH,
    SERVER_ERROR_RETRIES,
    Ack,
    Call,
    LeasedTask,
    Operations,
    PropelClientError,
    Retry,
    Sleep,
    drive,
    steps,
)

Answer = Callable[[Call], dict[str, Any]]


def _task(i: int) -> dict[str, Any]:
    return {"lease_token": f"tok{i}", "lease_until": "2026-01-01T00:00:00+00:00", "attempts": 1, "task": {"id": i}}


class Server:
    """Records every call; answers leases from ``ids`` and everything else with ``answer``."""

    def __init__(self, ids: list[int], answer: Answer) -> None:
        self.ids, self.answer, self.calls = ids, answer, []  # type: list[int], Answer, list[Call]

    def __call__(self, call: Call) -> dict[str, Any]:
        self.calls.append(call)
        if call.path == "/v1/tasks/lease":
            got, self.ids = self.ids[:call.body["n"]], self.ids[call.body["n"]:]  # type: ignore[index]
            return {"tasks": [_task(i) for i in got]}
        return self.answer(call)

    def paths(self, prefix: str = "/v1/tasks/") -> list[str]:
        return [c.path for c in self.calls if c.path.startswith(prefix) and c.path != "/v1/tasks/lease"]


def _ok(call: Call) -> dict[str, Any]:
    if call.path == "/v1/tasks/ack":
        return {"results": [{"id": o["id"], "status": "acked"} for o in call.body["outcomes"]]}  # type: ignore[index]
    return {"status": "renewed" if call.path.endswith("/renew") else "returned"}


def _ledger(server: Server, n: int, **kw: Any) -> Ledger:
    ledger = Ledger(Operations(), "pol", "step-1", **kw)
    assert drive(ledger.lease(n, "c", {}), server) == n
    return ledger


def test_a_single_lease_lost_renew_answer_does_not_forget_the_task() -> None:
    lost = {"count": 0}

    def answer(call: Call) -> dict[str, Any]:
        if call.path.endswith("/renew") and lost["count"] < LOST_AFTER - 1:
            lost["count"] += 1
            raise PropelClientError(409, "lease_lost")
        return _ok(call)

    server = Server([1], answer)
    ledger = _ledger(server, 1)
    assert drive(ledger.renew(), server) == 0  # one ambiguous answer (#37 defect 9): kept, renewed again
    assert drive(ledger.renew(), server) == 1
    assert ledger.held[1].renewing


def test_repeated_lease_lost_stops_renewing_but_the_report_is_still_sent_and_refused() -> None:
    def answer(call: Call) -> dict[str, Any]:
        if call.path.endswith("/renew"):
            raise PropelClientError(409, "lease_lost")
        return {"results": [{"id": 1, "status": "lease_lost"}]}

    server = Server([1], answer)
    ledger = _ledger(server, 1)
    for _ in range(LOST_AFTER + 1):
        drive(ledger.renew(), server)
    assert server.paths().count("/v1/tasks/1/renew") == LOST_AFTER  # not renewed once it is lost
    ledger.next_task()
    assert ledger.report(1, 1, 2)
    assert drive(ledger.flush(), server)
    assert [(r.task_id, r.status) for r in ledger.refused] == [(1, "lease_lost")]


def test_a_reported_task_is_renewed_until_stored() -> None:
    server = Server([1, 2], _ok)
    ledger = _ledger(server, 2)
    ledger.next_task()
    ledger.report(1, 1, 2)
    drive(ledger.renew(), server)
    assert sorted(server.paths()) == ["/v1/tasks/1/renew", "/v1/tasks/2/renew"]
    drive(ledger.flush(), server)
    server.calls.clear()
    drive(ledger.renew(), server)
    assert server.paths() == ["/v1/tasks/2/renew"]


def test_a_renew_refused_with_401_raises_and_drops_nothing() -> None:
    def answer(call: Call) -> dict[str, Any]:
        raise PropelClientError(401, "missing or invalid bearer token")

    server = Server([1, 2], answer)
    ledger = _ledger(server, 2)
    with pytest.raises(PropelClientError):
        drive(ledger.renew(), server)
    assert ledger.renew_error is not None and sorted(ledger.held) == [1, 2]


def test_close_nacks_read_ahead_untried_and_falls_back_when_the_server_rejects_the_field() -> None:
    def answer(call: Call) -> dict[str, Any]:
        if call.body and "tried" in call.body:
            raise PropelClientError(422, "[{'loc': ['body', 'tried'], 'msg': 'Extra inputs are not permitted'}]")
        return _ok(call)

    server = Server([1, 2, 3], answer)
    ledger = _ledger(server, 3)
    ledger.next_task()  # task 1 handed out: tried
    summary = drive(ledger.close(), server, sleep=None)
    bodies = [(c.path, dict(c.body or {})) for c in server.calls if c.path.endswith("/nack")]
    assert bodies == [("/v1/tasks/1/nack", {"lease_token": "tok1"}),
                      ("/v1/tasks/2/nack", {"lease_token": "tok2", "tried": False}),
                      ("/v1/tasks/2/nack", {"lease_token": "tok2"}),  # the field is refused: plain nack
                      ("/v1/tasks/3/nack", {"lease_token": "tok3"})]  # and not sent again
    assert (summary.nacked, summary.nacked_untried) == (3, 2)


def test_flush_sends_at_most_the_batch_limit_per_request() -> None:
    server = Server(list(range(1, 8)), _ok)
    ledger = _ledger(server, 7, max_batch=3)
    for i in range(1, 8):
        ledger.next_task()
        ledger.report(i, 1, 2)
    assert drive(ledger.flush(), server)
    assert [len(c.body["outcomes"]) for c in server.calls if c.path == "/v1/tasks/ack"] == [3, 3, 1]  # type: ignore[index]
    assert ledger.acked == 7 and not ledger.pending


def test_a_500_on_one_outcome_is_isolated_when_the_server_is_healthy() -> None:
    def answer(call: Call) -> dict[str, Any]:
        if call.path == "/v1/status":
            return {}
        outcomes = call.body["outcomes"]  # type: ignore[index]
        if any(o["id"] == 4 for o in outcomes):
            raise PropelClientError(500, "Internal Server Error")
        return _ok(call)

    server = Server(list(range(1, 7)), answer)
    ledger = _ledger(server, 6)
    for i in range(1, 7):
        ledger.next_task()
        ledger.report(i, 1, 2)
    assert drive(ledger.flush(), server, Retry(backoff_s=0), sleep=None)
    assert [(r.task_id, r.status) for r in ledger.refused] == [(4, "server_error")]
    assert ledger.acked == 5 and not ledger.pending


def test_a_500_during_an_outage_keeps_every_outcome() -> None:
    def answer(call: Call) -> dict[str, Any]:
        raise PropelClientError(500 if call.path == "/v1/tasks/ack" else 503, "down")

    server = Server([1, 2], answer)
    ledger = _ledger(server, 2)
    for i in (1, 2):
        ledger.next_task()
        ledger.report(i, 1, 2)
    assert not drive(ledger.flush(), server, Retry(max_retries=1, backoff_s=0), sleep=None)
    assert sorted(ledger.pending) == [1, 2] and not ledger.refused


def test_retry_bounds_500_and_never_retries_other_refusals() -> None:
    retry = Retry(max_retries=5)
    call = Call("POST", "/v1/tasks/ack")
    assert [retry.should_retry(i, PropelClientError(500, "x"), call) for i in range(4)] == \
        [i < SERVER_ERROR_RETRIES for i in range(4)]
    assert not retry.should_retry(0, PropelClientError(500, "x"), Call("POST", "/x", retry_server_errors=False))
    assert not retry.should_retry(0, PropelClientError(422, "x"), call)
    assert retry.should_retry(4, PropelClientError(503, "x"), call)
    assert not retry.should_retry(5, PropelClientError(503, "x"), call)


def test_steps_yield_a_sleep_between_retries() -> None:
    def flow() -> Any:
        return (yield Call("GET", "/v1/status"))

    machine = steps(flow(), Retry(max_retries=2, backoff_s=1.0))
    assert isinstance(next(machine), Call)
    wait = machine.send(PropelClientError(503, "restarting"))
    assert isinstance(wait, Sleep) and 0.9 <= wait.seconds <= 1.1
    assert isinstance(machine.send(None), Call)
    with pytest.raises(StopIteration) as done:
        machine.send({"ok": 1})
    assert done.value.value == {"ok": 1}


def test_message_is_kept_after_report_and_a_missing_one_names_the_task() -> None:
    server = Server([1, 2], _ok)
    ledger = _ledger(server, 2, keep_messages=1)
    for i in (1, 2):
        ledger.next_task()
        ledger.report(i, 1, 2)
    drive(ledger.flush(), server)
    assert ledger.message(2) == {"id": 2}
    with pytest.raises(KeyError, match="task 1 is not leased"):
        ledger.message(1)  # beyond keep_messages


def test_a_leased_task_object_is_what_the_ledger_hands_out() -> None:
    server = Server([5], _ok)
    ledger = _ledger(server, 1)
    task = ledger.next_task()
    assert isinstance(task, LeasedTask) and task.id == 5 and ledger.next_task() is None


def test_ack_many_splits_at_the_api_limit() -> None:
    server = Server([], _ok)
    outcomes = [Ack(i, solved=1, n=2, solver="pol", lease_token=f"tok{i}") for i in range(1, 2002)]
    statuses = drive(Operations().ack_many(outcomes), server)
    assert [len(c.body["outcomes"]) for c in server.calls] == [MAX_ACK_BATCH, MAX_ACK_BATCH, 1]  # type: ignore[index]
    assert len(statuses) == 2001 and set(statuses.values()) == {"acked"}

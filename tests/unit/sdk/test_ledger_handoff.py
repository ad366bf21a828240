"""A lease moving between two ledgers (verl: leased by the dataset in the driver, graded and reported
by a Ray reward worker): ``release`` gives it up without a nack, ``adopt`` takes it over (renewed,
reported once with the row's version, nacked on close if never reported). Sans-I/O, on the
scripted server of ``test_ledger``."""

from __future__ import annotations

from propel_sdk.ledger import Ledger
from propel_sdk.protocol import Operations, drive
from tests.unit.sdk.test_ledger import Server, _ledger, _ok


def _acked(server: Server) -> list[dict[str, object]]:
    return [o for c in server.calls if c.path == "/v1/tasks/ack" for o in c.body["outcomes"]]  # type: ignore[index]


def test_released_tasks_are_not_renewed_nor_nacked_by_the_leasing_ledger() -> None:
    server = Server([1, 2, 3], _ok)
    leasing = _ledger(server, 3)
    first = leasing.next_task()
    assert first is not None and leasing.handed_out() == [1]
    assert leasing.release(1) == first and leasing.release(1) is None
    drive(leasing.renew(), server)
    summary = drive(leasing.close(), server, sleep=None)
    assert sorted(server.paths()) == ["/v1/tasks/2/nack", "/v1/tasks/2/renew", "/v1/tasks/3/nack",
                                      "/v1/tasks/3/renew"]
    assert (summary.nacked, summary.nacked_untried) == (2, 2)  # 2 and 3 were never handed out


def test_an_adopted_task_is_renewed_reported_once_with_its_version_and_acked_with_its_token() -> None:
    server = Server([7], _ok)
    leasing = _ledger(server, 1)
    task = leasing.next_task()
    assert task is not None and leasing.release(task.id) is not None
    grading = Ledger(Operations(), "pol", "step-9")  # another process: its own ledger, same server
    assert grading.adopt(task) and not grading.adopt(task)
    drive(grading.renew(), server)
    assert grading.report(7, solved=2, n=4, version="step-3")
    assert not grading.adopt(task) and not grading.report(7, solved=4, n=4)  # pending: reported once
    assert drive(grading.flush(), server)
    [outcome] = _acked(server)
    assert (outcome["id"], outcome["lease_token"], outcome["solved"], outcome["n"]) == (7, "tok7", 2, 4)
    assert outcome["solver"] == "pol" and outcome["version"] == "step-3"  # the row's version, not the ledger's
    assert server.paths().count("/v1/tasks/7/renew") == 1 and grading.acked == 1


def test_report_without_a_version_uses_the_ledgers_current_one_and_none_is_kept_as_given() -> None:
    server = Server([1, 2], _ok)
    ledger = _ledger(server, 2)
    ledger.report(1, 1, 2)
    ledger.report(2, 1, 2, version=None)
    drive(ledger.flush(), server)
    assert [o.get("version") for o in _acked(server)] == ["step-1", None]


def test_an_adopted_task_never_reported_is_nacked_as_tried_on_close() -> None:
    server = Server([5], _ok)
    task = _ledger(server, 1).next_task()
    assert task is not None
    grading = Ledger(Operations(), "pol")
    grading.adopt(task)
    server.calls.clear()
    summary = drive(grading.close(), server, sleep=None)
    [nack] = [c for c in server.calls if c.path.endswith("/nack")]
    assert nack.path == "/v1/tasks/5/nack" and (summary.nacked, summary.nacked_untried) == (1, 0)

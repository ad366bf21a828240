"""The message schema check: an unknown schema_version fails loudly with one line naming the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from curriculum.domains.arith import ArithDomain
from propel_sdk.client import LeasedTask
from propel_sdk.schema import SCHEMA_VERSION, FrontierTask, SchemaVersionError, parse_message
from testkit.messages import frontier_message


def _message() -> dict[str, object]:
    domain = ArithDomain()
    return frontier_message(domain, domain.check(domain.parse("2*3+1").task).task, task_id=7)  # type: ignore[arg-type]


def test_parse_message_gives_the_typed_task() -> None:
    task = parse_message(_message())
    assert isinstance(task, FrontierTask)
    assert (task.id, task.domain, task.schema_version, task.grading["answer"]) == (7, "arith", SCHEMA_VERSION, 7)
    leased = LeasedTask(7, "tok", "2030-01-01T00:00:00+00:00", 1, _message())
    assert leased.frontier_task.grading["expr"] == "2*3+1"


def test_newer_version_names_the_upgrade() -> None:
    with pytest.raises(SchemaVersionError) as err:
        parse_message({**_message(), "schema_version": SCHEMA_VERSION + 1})
    assert str(err.value) == (f"task 7: message schema_version {SCHEMA_VERSION + 1} is newer than this SDK "
                              f"(supports {SCHEMA_VERSION}): upgrade propel-curriculum")
    assert err.value.version == SCHEMA_VERSION + 1


@pytest.mark.parametrize("version", [0, None, "1", True, 1.5])
def test_other_unknown_versions_are_refused(version: object) -> None:
    with pytest.raises(SchemaVersionError, match="is not one this SDK reads"):
        parse_message({**_message(), "schema_version": version})


def test_a_message_without_the_field_is_version_1() -> None:
    msg = {k: v for k, v in _message().items() if k != "schema_version"}
    assert parse_message(msg).schema_version == 1


def test_known_version_with_bad_fields_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        parse_message({"schema_version": SCHEMA_VERSION, "id": 1})

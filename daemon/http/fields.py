"""Request-field types shared by the API's routers (queue, solvers)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field


def printable(value: str) -> str:
    """Reject NUL bytes and lone surrogates (PostgreSQL cannot store them): a 422, not a 500."""
    if "\x00" in value:
        raise ValueError("must not contain NUL bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid UTF-8 text") from None
    return value


Text = Annotated[str, AfterValidator(printable)]
VersionText = Annotated[Text, Field(min_length=1, max_length=128, pattern=r"^[^@\s]+$",
                                    description="version string (no '@' or whitespace)")]

"""Request-field types shared by the API's routers (queue, solvers)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field


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
def _step_as_text(value: Any) -> Any:
    """A checkpoint step sent as a JSON number (``"version": 1200``) is the version ``"1200"``."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


VersionText = Annotated[Text, BeforeValidator(_step_as_text),
                        Field(min_length=1, max_length=128, pattern=r"^[^@\s]+$",
                              description="version string or checkpoint step (no '@' or whitespace)")]

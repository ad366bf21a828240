"""Task domains: one module per task format behind :class:`~curriculum.domains.base.Domain`."""

from curriculum.domains.base import (
    Domain,
    ParseResult,
    Task,
    Validity,
    available_domains,
    get_domain,
)

__all__ = ["Domain", "ParseResult", "Task", "Validity", "available_domains", "get_domain"]

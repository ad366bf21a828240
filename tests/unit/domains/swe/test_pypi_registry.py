"""Fetching a real registry repository from PyPI and preflighting it (network; marked slow)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from curriculum.domains.swe.cli import fetch_and_preflight


def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_fetch_and_preflight_parse_from_pypi(tmp_path: Path) -> None:
    if not _pypi_reachable():
        if os.environ.get("CI"):
            pytest.fail("PyPI is not reachable and CI is set")
        print("PyPI is not reachable: skipping the registry download test")
        pytest.skip("PyPI is not reachable")
    [result] = fetch_and_preflight(tmp_path, only=["parse"], runner="rlimit")
    assert result.ok, result.reason
    assert result.content_hash == "b41d604d16503c79d81af5165155c0b20f6c8d6c559efa66b4b695c3e5a0a0ce"
    assert result.test_count >= 90 and not result.baseline_failures

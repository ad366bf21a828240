"""Domain registry and the shared task/validity values."""

from __future__ import annotations

import pytest

from curriculum.domains.base import Domain, Task, available_domains, get_domain


def test_available_domains() -> None:
    assert available_domains() == ["arith", "azr", "math", "swe"]


@pytest.mark.parametrize("name", ["arith", "azr", "math"])
def test_get_domain_builds_protocol_conforming_domains(name: str) -> None:
    domain = get_domain(name)
    assert isinstance(domain, Domain)
    assert domain.name == name
    prompts = domain.generator_prompts(3, seed=1)
    assert len(prompts) == 3 and all(isinstance(p, str) and p for p in prompts)
    assert prompts == domain.generator_prompts(3, seed=1)


def test_unknown_domain_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="arith, azr, math, swe"):
        get_domain("sql")


def test_options_are_passed_to_the_domain() -> None:
    domain = get_domain("arith", max_ops=2)
    assert not domain.check(Task("arith", "1+2+3+4")).valid


def test_content_hash_is_stable_and_domain_scoped() -> None:
    a = Task("arith", "1+2", {"x": 1})
    assert a.content_hash == Task("arith", "1+2  \n", {}).content_hash
    assert a.content_hash != Task("azr", "1+2").content_hash
    assert len(a.content_hash) == 64

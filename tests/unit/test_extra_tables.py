"""``closed_loop --daemon-set``: SECTION.KEY=VALUE pairs become TOML tables a daemon config accepts."""

from __future__ import annotations

import tomllib

import pytest

from daemon.config import config_from_mapping
from testkit.configs import extra_tables


def test_pairs_become_tables_the_daemon_config_reads() -> None:
    text = extra_tables(["health.rollback_novelty=0", "health.healthy_novelty = 0.2", "solver_x.mode=first"])
    parsed = tomllib.loads(text)
    assert parsed == {"health": {"rollback_novelty": 0, "healthy_novelty": 0.2}, "solver_x": {"mode": "first"}}
    cfg = config_from_mapping({"health": parsed["health"]})
    assert (cfg.health.rollback_novelty, cfg.health.healthy_novelty) == (0, 0.2)
    assert extra_tables([]) == ""


@pytest.mark.parametrize(("pair", "says"), [
    ("health.rollback_novelty", "write SECTION.KEY=VALUE"),
    ("emission.replay_max=2", "[emission] is written by the benchmark itself"),
    ("seed=3", "[top level] is written by the benchmark itself"),
])
def test_a_bad_pair_is_one_line_naming_the_fix(pair: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        extra_tables([pair])
    assert says in str(err.value) and "\n" not in str(err.value)

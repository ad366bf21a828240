"""Small, fast daemon configs for end-to-end tests and benchmarks."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

#: Tables :func:`write_config` (and the closed loop's arm config) write themselves: a second one is a TOML error.
WRITTEN_TABLES = frozenset({"store", "generator", "daemon", "alerts", "probes", "rl", "spotcheck", "emission", "api",
                            "solver", "frontier", "domain"})


def extra_tables(pairs: Sequence[str]) -> str:
    """``SECTION.KEY=VALUE`` settings (read as :func:`testkit.long_run.parse_override` reads them: JSON where it
    parses, else a string) as TOML tables to append to a :func:`write_config` config; a ``ValueError`` says in one
    line what is wrong with a pair."""
    from testkit.long_run import parse_override

    tables: dict[str, list[str]] = defaultdict(list)
    for pair in pairs:
        section, name, value = parse_override(pair)
        if not section or section in WRITTEN_TABLES:
            raise ValueError(f"{pair!r}: [{section or 'top level'}] is written by the benchmark itself; use its own "
                             "option")
        tables[section].append(f"{name} = {json.dumps(value)}")
    return "".join(f"[{section}]\n" + "".join(f"{line}\n" for line in lines) for section, lines in tables.items())


def write_config(path: Path, generator: Path, data_dir: Path, db_url: str, run: str, extra: str = "",
                 port: int = 0, seed: int = 0, spot_budget: int = 12, rl_extra: str = "",
                 spot_extra: str = "", daemon_keys: str = "", min_probability: float = 0.2,
                 emission_keys: str = "") -> Path:
    """A small, fast daemon config (the embedded defaults shrunk for CPU tests); ``extra`` is appended
    (new tables), ``rl_extra`` goes into the ``[rl]`` table, ``spot_extra`` into ``[spotcheck]``,
    ``daemon_keys`` into ``[daemon]`` and ``emission_keys`` into ``[emission]``. ``min_probability``: the
    emission bar (0.2 here, so that a short test run emits; the product's default is 0.5)."""
    path.write_text(f'''data_dir = "{data_dir}"
run_name = "{run}"
seed = {seed}
[store]
url = "{db_url}"
[generator]
model = "{generator}"
[daemon]
sample_size = 32
tick_interval_s = 0.05
heartbeat_s = 1.0
lease_ttl_s = 4.0
retrain_min_false_positives = 4
shutdown_deadline_s = 60
{daemon_keys}
[alerts]
sample_size = 24
[probes]
train_samples = 192
[rl]
steps_per_chunk = 2
batch_size = 8
num_generations = 4
{rl_extra}
[spotcheck]
budget_per_cycle = {spot_budget}
{spot_extra}
[emission]
min_probability = {min_probability}
{emission_keys}
[api]
port = {port}
{extra}
''')
    return path

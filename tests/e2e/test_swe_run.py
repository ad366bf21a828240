"""`propel run --domain swe` on the committed fixture repository, embedded on CPU: the tiny spec
generator (bootstrapped on the fixture's spec lines), the verifier's real sandboxed suite runs, the
synthetic SWE solver; one full cycle emits verified bug tasks whose messages carry what a trainer
needs, and ``propel_sdk.grading.grade`` grades a fix against the local repository cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.domains.swe.cli import fetch_and_preflight
from curriculum.rl.bootstrap import BootstrapSettings, bootstrap
from curriculum.store.db import Store
from curriculum.store.models import QueueItem
from propel_sdk.grading import GradingUnavailable, grade
from propel_sdk.schema import parse_message
from tests.e2e.conftest import run_state, start_daemon

pytestmark = [pytest.mark.slow, pytest.mark.long]  # 50-80 s on the shared 2-core box: `make test-long`

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "swe_minirepo"
#: a small generator: the fixture's spec space is a few hundred lines
TINY = BootstrapSettings(steps=150, batch_size=32, hidden_size=64, num_layers=2, eval_samples=32, max_new_tokens=64)


def _setup(tmp: Path) -> tuple[Path, dict[str, object]]:
    lab = tmp / "lab.toml"
    lab.write_text(f'[[repo]]\nname = "minicalc"\nsource = "path"\npath = "{FIXTURE}"\ntests = ["tests"]\n'
                   'split = "rl-train"\n')
    options = {"cache_dir": str(tmp / "swe-cache"), "registry": [str(lab)], "bundled_registry": False}
    [pf] = fetch_and_preflight(tmp / "swe-cache", [lab], bundled_registry=False)
    assert pf.ok, pf.reason
    return lab, options


def _config(tmp: Path, generator: Path, options: dict[str, object], db: str) -> Path:
    path = tmp / "swe.toml"
    path.write_text(f'''data_dir = "{tmp / 'data'}"
run_name = "swe"
[store]
url = "{db}"
[domain.options]
cache_dir = "{options['cache_dir']}"
registry = {json.dumps(options['registry'])}
bundled_registry = false
[generator]
model = "{generator}"
max_new_tokens = 64
[daemon]
sample_size = 32
tick_interval_s = 0.05
heartbeat_s = 1.0
lease_ttl_s = 4.0
[alerts]
sample_size = 8
[probes]
train_samples = 48
[rl]
steps_per_chunk = 1
batch_size = 4
num_generations = 2
[spotcheck]
budget_per_cycle = 4
[emission]
min_probability = 0.0
max_topic_share = 1.0
''')
    return path


def test_propel_run_domain_swe_emits_gradeable_bug_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab, options = _setup(tmp_path)
    gen = bootstrap("swe", tmp_path / "models", settings=TINY, show_progress=False, domain_options=options)
    assert gen.validity > 0.2, gen.validity  # applicable spec lines among its samples
    db = f"sqlite:///{tmp_path / 'propel.db'}"
    log = tmp_path / "daemon.log"
    proc = start_daemon(_config(tmp_path, gen.path, options, db), log, "--cycles", "1", "--no-api",
                        "--domain", "swe")
    assert proc.wait(timeout=600) == 0, log.read_text()[-4000:]
    out = log.read_text()
    assert "domain swe · solver synthetic-swe" in out and "Traceback" not in out
    store = Store(db)
    try:
        assert run_state(store, "swe")[:2] == ("rl", 1)
        with store.session() as s:
            messages = [q.message for q in s.scalars(select(QueueItem))]
    finally:
        store.dispose()
    assert messages, "no task was emitted"
    for m in messages:
        task = parse_message(m)
        g = task.grading
        assert task.domain == "swe" and (task.k, task.band) == (3, (1, 2))
        assert (g["repo"], g["label"], g["version"]) == ("minicalc", "minicalc", "")
        assert g["patch"].startswith("diff --git") and g["fail_to_pass"] and g["pass_to_pass"]
        assert g["issue"] in task.solver_prompt and g["grading_command"].startswith("propel swe grade --message")
    msg = messages[0]
    monkeypatch.setenv("PROPEL_SWE_CACHE", options["cache_dir"])  # type: ignore[arg-type]
    monkeypatch.setenv("PROPEL_SWE_REGISTRY", str(lab))
    assert grade(msg, f"```diff\n{msg['grading']['reference_fix']}```") is True  # the reverse patch fixes it
    assert grade(msg, "") is False  # an empty diff leaves the bug in
    monkeypatch.setenv("PROPEL_SWE_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(GradingUnavailable, match="not in the local SWE cache: fetch it with `propel swe fetch"):
        grade(msg, "")

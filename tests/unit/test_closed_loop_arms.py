"""The closed loop's daemon configs per arm: what each daemon is told about the trainer's solver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.config import PropelConfig, load_config
from testkit.closed_loop import FOLLOW_ARM, SOLVER_NAME, LoopSettings, daemon_extra, propel, stop_process
from testkit.configs import write_config
from testkit.servers import free_port

SKILL = 'synthetic_skill_file = "/tmp/skills.json"\n'


def config(tmp_path: Path, arm: str, settings: LoopSettings | None = None) -> PropelConfig:
    path = write_config(tmp_path / f"{arm}.toml", tmp_path / "gen", tmp_path / "data", "sqlite://", f"cl-{arm}",
                        daemon_extra(arm, settings or LoopSettings(), SKILL))
    return load_config(path)


def test_trainer_labels_daemon_knows_the_trainer_only_through_its_acks(tmp_path: Path) -> None:
    cfg = config(tmp_path, FOLLOW_ARM)
    assert cfg.solver.follow == "first_trainer" and cfg.solver.name != SOLVER_NAME
    assert cfg.solver.synthetic_skill_file in (None, "")  # no oracle of the trainer's skill
    assert cfg.frontier.refresh_every_labels == 0  # the product's defaults, nothing tuned for the arm
    assert cfg.frontier.trainer_band_lead == "auto"


def test_trainer_labels_daemon_takes_a_lead_in_solves_or_auto(tmp_path: Path) -> None:
    """``--follow-lead 1`` and ``--follow-lead auto`` reach the daemon's config as a number and as the string."""
    assert config(tmp_path, FOLLOW_ARM, LoopSettings(follow_lead="1")).frontier.trainer_band_lead == 1
    assert config(tmp_path, FOLLOW_ARM, LoopSettings(follow_lead="auto")).frontier.trainer_band_lead == "auto"


def test_continuous_daemon_spot_checks_under_the_trainers_name_with_its_skill_file(tmp_path: Path) -> None:
    cfg = config(tmp_path, "continuous")
    assert cfg.solver.name == SOLVER_NAME and str(cfg.solver.synthetic_skill_file) == "/tmp/skills.json"


def test_an_arm_server_started_for_the_cpu_sees_no_gpu(tmp_path: Path, monkeypatch: Any) -> None:
    """``--daemon-device cpu``: the server process is started with ``CUDA_VISIBLE_DEVICES=""`` (read from
    the running process), and with the caller's value otherwise."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    path = write_config(tmp_path / "serve.toml", tmp_path / "gen", tmp_path / "data", f"sqlite:///{tmp_path}/p.db",
                        "cl-static", "", port=free_port())
    log = tmp_path / "propel.log"
    propel(path, "db", "upgrade", log=log)
    seen = {}
    for cpu in (True, False):
        proc = propel(path, "serve", log=log, wait=False, cpu=cpu)
        try:  # Popen returns once the child has exec'd: its environ is the one it was given
            env = dict(v.split(b"=", 1) for v in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0") if v)
            seen[cpu] = env.get(b"CUDA_VISIBLE_DEVICES")
        finally:
            stop_process(proc)
    assert seen == {True: b"", False: b"0"}

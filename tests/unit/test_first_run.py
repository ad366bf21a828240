"""First run (issue #38 item 4): `make run` installs the runtime set only and `make test` the dev set
(stamp files), the first-run benchmark cuts a log into its stages, and the recipe benchmark picks the
fastest recipe that holds the validity goal on every seed."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from daemon.loop.driver import CycleReport
from daemon.loop.progress import Progress
from testkit.bootstrap_recipe import VALIDITY_GOAL, Recipe, choose, summarise
from testkit.first_run import STAGES, StageClock, make_run_command

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


# ---- Makefile: two stamps ------------------------------------------------------------------------
@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """The Makefile and pyproject.toml in a scratch directory, with a venv python that exists (so
    `make -n` prints only the install and run steps)."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    return tmp_path


def dry_run(checkout: Path, target: str) -> str:
    """The commands `make TARGET` would run (make's own dependency logic, nothing executed)."""
    out = subprocess.run(["make", "-n", target], cwd=checkout, capture_output=True, text=True, check=True)
    return out.stdout


def age(path: Path, seconds: int) -> None:
    stat = path.stat()
    os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def test_make_run_installs_the_runtime_set_and_make_test_the_dev_set(checkout: Path) -> None:
    run = dry_run(checkout, "run")
    assert "-e ." in run and "[dev]" not in run and "--progress-bar off" in run
    assert "bin/propel run" in run
    test = dry_run(checkout, "test")
    assert "-e '.[dev]'" in test and "pytest" in test


def test_dev_install_counts_for_make_run_but_not_the_reverse(checkout: Path) -> None:
    age(checkout / "pyproject.toml", 60)
    age(checkout / "Makefile", 60)
    (checkout / ".venv" / ".installed-run").touch()
    assert "pip" not in dry_run(checkout, "run")
    assert "-e '.[dev]'" in dry_run(checkout, "test")  # runtime set only: the tests need the dev extras
    (checkout / ".venv" / ".installed").touch()
    (checkout / ".venv" / ".installed-adapters").touch()
    assert "pip" not in dry_run(checkout, "test")
    (checkout / ".venv" / ".installed-run").unlink()
    assert "pip" not in dry_run(checkout, "test")


def test_a_changed_pyproject_reinstalls(checkout: Path) -> None:
    for stamp in (".installed-run", ".installed"):
        (checkout / ".venv" / stamp).touch()
        age(checkout / ".venv" / stamp, 60)
    assert "-e ." in dry_run(checkout, "run")
    assert "-e '.[dev]'" in dry_run(checkout, "test")


def test_reuse_venv_command_skips_the_install(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    venv = tmp_path_factory.mktemp("venv")
    (venv / "bin").mkdir()
    commands = subprocess.run(["make", "-n", *make_run_command(venv)[1:]], cwd=checkout, capture_output=True,
                              text=True, check=True).stdout
    assert "pip" not in commands and f"{venv}/bin/propel run" in commands


# ---- the first-run benchmark's stage clock ----------------------------------------------------
def summary_row(cycle: int, emitted: int) -> str:
    """A cycle summary row exactly as `propel run` prints it in a log."""
    buf = io.StringIO()
    progress = Progress(console=Console(file=buf, width=300, highlight=False, soft_wrap=True))
    progress(CycleReport("rl", cycle, 1.0, {"reward_mean": 0.1}))
    progress(CycleReport("emit", cycle, 1.0, {"emitted": float(emitted), "queue_ready": float(emitted)}))
    rows = [line for line in buf.getvalue().splitlines() if "│" in line]
    assert len(rows) == 1
    return rows[0]


def test_stage_clock_cuts_a_first_run_log() -> None:
    log = [
        (1.0, "Collecting torch==2.13.0"),
        (60.0, "Successfully installed alembic-1.16 propel-curriculum-0.1.0 torch-2.13.0"),
        (61.0, ".venv/bin/propel run "),
        (66.0, "02:50:01 INFO    propel · run default · store sqlite:///.propel/propel.db · domain arith"),
        (67.0, "02:50:02 INFO    bootstrapping the tiny arith generator in .propel (cached after the first run)…"),
        (150.0, "02:51:25 INFO    generator .propel/bootstrap/arith/ab · 905,344 params · 96.1% valid "
                "(trained in 80 s)"),
        (160.0, "02:51:35 INFO    labelling 480 base-policy tasks × k=8 with synthetic …"),
        (170.0, "02:51:45 INFO    reward hard_gate over 1 probe(s) (mean) + 0 aux constraint(s)"),
        (180.0, summary_row(0, 0)),
        (190.0, summary_row(1, 3)),
        (200.0, summary_row(2, 5)),
    ]
    clock = StageClock(clone_s=2.0)
    ended = [clock.feed(t, line) for t, line in log]
    assert [s for s in ended if s] == list(STAGES[1:])
    assert clock.done
    assert clock.stage_seconds() == {"clone": 2.0, "install": 61.0, "startup": 6.0, "bootstrap": 83.0,
                                     "first_probe": 20.0, "first_emission": 20.0}
    assert clock.total_s() == 192.0
    assert clock.bootstrap_validity() == pytest.approx(0.961)
    assert clock.packages_installed() == 3


def test_stage_clock_reports_stages_not_reached() -> None:
    clock = StageClock(clone_s=1.0)
    clock.feed(5.0, ".venv/bin/propel run")
    assert not clock.done and clock.total_s() is None
    stages = clock.stage_seconds()
    assert stages["install"] == 5.0 and stages["bootstrap"] is None and stages["first_emission"] is None


# ---- the recipe benchmark's choice ------------------------------------------------------------
def arm(recipe: Recipe, seed: int, validity: float, train_s: float) -> dict[str, object]:
    return {"recipe": {"steps": recipe.steps, "lr": recipe.lr, "warmup_steps": recipe.warmup_steps},
            "seed": seed, "validity": validity, "train_s": train_s}


def test_recipe_choice_needs_the_goal_on_every_seed() -> None:
    short, mid, long_ = Recipe(400, 3e-3, 30), Recipe(500, 4e-3, 30), Recipe(600, 4e-3, 30)
    arms = [arm(short, 0, 0.965, 80), arm(short, 1, 0.924, 80),  # passes on one seed only
            arm(mid, 0, 0.96, 100), arm(mid, 1, 0.955, 100),
            arm(long_, 0, 0.97, 120), arm(long_, 1, 0.97, 120)]
    summary = summarise(arms, [short, mid, long_], seeds=[1, 0])  # type: ignore[arg-type]
    assert [s["holds_goal_every_seed"] for s in summary] == [False, True, True]
    assert summary[0]["min_validity"] == 0.924 < VALIDITY_GOAL
    chosen = choose(summary)
    assert chosen is not None and chosen["recipe"]["steps"] == 500
    assert choose(summary[:1]) is None


def test_a_recipe_with_seeds_skipped_after_a_miss_is_not_chosen() -> None:
    recipe = Recipe(400, 5e-3, 30)
    summary = summarise([arm(recipe, 1, 0.97, 80)], [recipe], seeds=[1, 0])  # type: ignore[list-item]
    assert summary[0]["seeds_skipped"] == [0] and not summary[0]["holds_goal_every_seed"]
    assert choose(summary) is None


# ---- the daemon's torch threads ----------------------------------------------------------------
def test_daemon_torch_threads_default_one_and_rejects_negative(tmp_path: Path) -> None:
    from daemon.config import ConfigError, load_config

    assert load_config(None).daemon.torch_threads == 1
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\ntorch_threads = -1\n")
    with pytest.raises(ConfigError, match=r"daemon\.torch_threads"):
        load_config(bad)

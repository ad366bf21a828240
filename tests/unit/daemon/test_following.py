"""The "not followed" line, the followed name of a config, the served-mix arithmetic and the
80-column wrapping of ``propel status`` / ``propel tasks stats`` (issues #36, #38)."""

from __future__ import annotations

from curriculum.frontier.followed import CONFIG_WHY, Followed, follows_line
from daemon.cli.status_text import wrap
from daemon.config import load_config
from daemon.http.following import notice
from daemon.http.task_stats import bins, quantiles
from daemon.service.settings import build_configured_solver, followed_names, followed_solver_name


def test_notice_names_the_followed_solver_why_and_the_setting() -> None:
    ours = Followed("synthetic:x", CONFIG_WHY)
    line = notice("trl-policy", ours)
    assert line is not None and "'synthetic:x'" in line and 'solver.name = "trl-policy"' in line
    assert 'solver.follow = "config"' in line and CONFIG_WHY in line
    assert notice("synthetic:x", ours) is None
    assert notice("anything", None) is None  # a process that does not know what it follows says nothing
    trainer = Followed("my-policy", "first", trainer=True)
    assert "'my-policy'" in follows_line(trainer) and "acks and announces" in follows_line(trainer)


def test_follow_mode_defaults_to_the_first_trainer_only_for_an_unnamed_synthetic_solver() -> None:
    cfg = load_config(None)
    assert cfg.solver.follow_mode == "first_trainer"  # `make run` + an outside trainer just works
    named = cfg.solver.model_copy(update={"name": "my-policy"})
    assert named.follow_mode == "config"
    hf = cfg.solver.model_copy(update={"backend": "hf", "model": "m"})
    assert hf.follow_mode == "config"
    assert cfg.solver.model_copy(update={"follow": "config"}).follow_mode == "config"


def test_followed_name_is_the_spot_checkers_name() -> None:
    cfg = load_config(None)
    assert followed_solver_name(cfg) == build_configured_solver(cfg).solver_id  # as daemon.service.runtime
    named = cfg.model_copy(update={"solver": cfg.solver.model_copy(update={"name": "my-policy"})})
    assert followed_solver_name(named) == "my-policy"
    hf = cfg.model_copy(update={"solver": cfg.solver.model_copy(update={"backend": "hf", "model": "ck/{version}"})})
    assert followed_solver_name(hf) == build_configured_solver(hf).solver_id == "hf:ck/{version}"  # nothing loads
    unbuildable = cfg.model_copy(update={"solver": cfg.solver.model_copy(update={"backend": "hf", "model": None})})
    assert followed_names(unbuildable) == ()  # status and the API then say nothing about following
    assert followed_names(named) == ("my-policy",)


def test_quantiles_and_bins() -> None:
    assert quantiles([]) is None
    q = quantiles([0.9, 0.1, 0.5, 0.3, 0.7])
    assert q is not None and (q["min"], q["p50"], q["max"]) == (0.1, 0.5, 0.9)
    assert bins([0.0, 0.19, 0.2, 0.99, 1.0]) == {"0.0-0.2": 2, "0.2-0.4": 1, "0.4-0.6": 0, "0.6-0.8": 0,
                                                  "0.8-1.0": 2}


def test_wrap_keeps_every_character_within_80_columns() -> None:
    name = "x" * 200
    lines = wrap(f"solver {name} step-1 *", "  ")
    assert all(len(line) <= 80 for line in lines)
    assert "".join(line.strip() for line in lines).replace("solver", "", 1).count("x") == 200

"""The toy table's "PROPEL (active corpus)" row (issue #22 item 5) is PROPEL with the first probe's corpus
labelled actively: its run config sets ``probes.corpus_labelling = "active"`` with ``train_samples`` =
``--active-share`` of the uniform corpus's solver trials (÷ k), the daemon's :func:`active_settings`
read from that config give the labelling budget, and the row is charged the active corpus's offline
trials, not the uniform corpus's. ``tests/e2e/test_toy_propel_quick.py`` runs the row end to end.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from daemon.service.settings import active_pool_samples, active_settings
from testkit.toy_rows import (
    ACTIVE_ROW,
    BAND,
    ActiveCorpus,
    Settings,
    Shared,
    active_probes_section,
    pair_specs,
    row_config,
    run_name,
)

UNIFORM_TRIALS = 11968  # the uniform corpus of the current toy table (1,496 tasks × k = 8)


def _shared(tmp_path: Path, active_trials: int | None = None) -> Shared:
    shared = Shared(tmp_path / "gen", "fingerprint", {}, {}, UNIFORM_TRIALS, 1.0)
    if active_trials is not None:
        shared.active = ActiveCorpus(active_trials, {})
    return shared


@pytest.mark.parametrize(("share", "tasks"), [(0.4, 598), (0.75, 1122)])
def test_the_rows_config_labels_actively_with_the_share_of_uniform_trials(tmp_path: Path, share: float,
                                                                          tasks: int) -> None:
    settings = replace(Settings(), active_share=share)
    shared = _shared(tmp_path, active_trials=tasks * BAND.k)
    (spec,) = [s for s in pair_specs(shared, settings) if s.names[0] == ACTIVE_ROW]
    cfg = row_config(shared, settings, tmp_path, run_name(ACTIVE_ROW, 2), 2, 30, spec.rl, spec.probes)
    assert cfg.probes.corpus_labelling == "active"
    assert cfg.probes.train_samples == tasks == round(share * UNIFORM_TRIALS / BAND.k)
    assert active_settings(cfg).budget * BAND.k == pytest.approx(share * UNIFORM_TRIALS, abs=BAND.k)
    assert active_pool_samples(cfg) == int(cfg.probes.active_pool_factor * tasks)
    # everything else is PROPEL's: same probe settings, steps, RL section
    propel = next(s for s in pair_specs(shared, settings) if s.names[0] == "PROPEL")
    propel_cfg = row_config(shared, settings, tmp_path, run_name("PROPEL", 2), 2, 30, propel.rl, propel.probes)
    assert propel_cfg.probes.corpus_labelling == "uniform"
    assert cfg.probes.model_dump(exclude={"corpus_labelling", "train_samples"}) == \
        propel_cfg.probes.model_dump(exclude={"corpus_labelling", "train_samples"})
    assert cfg.rl == propel_cfg.rl and spec.steps == propel.steps


def test_the_row_is_charged_the_active_corpus_trials_not_the_uniform_ones(tmp_path: Path) -> None:
    settings = Settings()
    shared = _shared(tmp_path, active_trials=4784)
    specs = {s.names[0]: s for s in pair_specs(shared, settings)}
    assert specs[ACTIVE_ROW].offline == 4784 and specs[ACTIVE_ROW].members == ["mlp_active"]
    assert specs["PROPEL"].offline == UNIFORM_TRIALS and specs["PROPEL"].members == ["mlp"]
    assert specs[ACTIVE_ROW].names[1] == ""  # no co-evolution fork of this row


def test_no_active_row_without_its_corpus(tmp_path: Path) -> None:
    assert ACTIVE_ROW not in {s.names[0] for s in pair_specs(_shared(tmp_path), Settings())}


def test_the_share_keeps_the_configs_minimum(tmp_path: Path) -> None:
    section = active_probes_section(_shared(tmp_path), replace(Settings(), active_share=0.001))
    assert section == {"corpus_labelling": "active", "train_samples": 16}

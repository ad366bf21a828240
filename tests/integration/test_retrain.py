"""Aux-probe retrain jobs on the real store: in-process, and through a real Celery worker process
consuming the run's ``retrain`` queue on Redis with PostgreSQL."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from curriculum.domains.arith import ArithDomain
from curriculum.probing.retrain import RetrainSpec, carry_out, create_job, job_outcome, run_retrain
from curriculum.store import lineage, repo
from curriculum.store.artifacts import open_artifacts
from curriculum.store.db import Store
from curriculum.store.models import FalsePositive, ProbeRow, RetrainJob
from probes import FeatureExtractor, load_probe
from testkit.driver import LeaderEngine, QueuedRetrainer, make_driver, tick_to
from testkit.retrain_data import artifacts_for, seed_labelled_run, spec_for, tiny_reference
from tests.conftest import require_service
from workers.local import start_worker, stop

pytestmark = pytest.mark.integration


def test_retrain_registers_an_inactive_aux_probe_once(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store)
    ref = tiny_reference()
    spec = spec_for(run_id, ref)
    out = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), artifacts_for(store, tmp_path))
    assert out.state == "done" and out.probe_id is not None and out.false_positive_ids
    again = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref),  # a redelivered message
                        artifacts_for(store, tmp_path))
    assert again == out
    with store.session() as s:
        probes = s.scalars(select(ProbeRow).where(ProbeRow.role == "aux")).all()
    assert len(probes) == 1 and not probes[0].active
    assert probes[0].meta["training"]["false_positives"] == len(out.false_positive_ids)
    assert probes[0].artifact_uri.startswith("cas://sha256/")
    probe = load_probe(artifacts_for(store, tmp_path / "elsewhere").fetch_tree(probes[0].artifact_uri))
    assert probe.reference_fingerprint == ref.fingerprint and probe.name == spec.name


def test_retrain_without_labels_is_skipped_with_the_reason(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store, n_tasks=4, fp_threshold=1.01)  # no false positive recorded
    ref = tiny_reference()
    out = run_retrain(store, spec_for(run_id, ref), ArithDomain(), FeatureExtractor(ref),
                      artifacts_for(store, tmp_path))
    assert out.state == "skipped" and out.probe_id is None
    assert out.reason is not None and "both classes" in out.reason


def test_a_different_reference_fails_the_job(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store, n_tasks=8)
    ref = tiny_reference()
    out = run_retrain(store, spec_for(run_id, ref, reference_fingerprint="sha256:other"), ArithDomain(),
                      FeatureExtractor(ref), artifacts_for(store, tmp_path))
    assert out.state == "failed" and out.reason is not None and "fingerprint" in out.reason


def test_carry_out_records_an_error_instead_of_raising(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store, n_tasks=8)

    def cannot_load(reference: str) -> FeatureExtractor:
        raise OSError(f"{reference} is not a model directory")

    out = carry_out(store, spec_for(run_id, tiny_reference(), reference_path="/gone"), ArithDomain(),
                    cannot_load, lambda: artifacts_for(store, tmp_path))
    assert out.state == "failed" and out.reason == "OSError: /gone is not a model directory"


def test_spec_round_trip_and_bad_spec() -> None:
    spec = spec_for(1, tiny_reference())
    assert RetrainSpec.from_json(spec.to_json()) == spec
    bad = spec.to_json() | {"surprise": 1}
    del bad["layer"]
    with pytest.raises(ValueError, match=r"unknown \['surprise'\], missing \['layer'\]"):
        RetrainSpec.from_json(bad)


def _wait_finished(store: Store, names: list[str], proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with store.session() as s:
            pending = s.execute(select(func.count()).select_from(RetrainJob).where(
                RetrainJob.name.in_(names), RetrainJob.state == "pending")).scalar_one()
        if pending == 0:
            return
        if proc.poll() is not None:
            pytest.fail(f"worker exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"retrain jobs still pending after 180 s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_a_worker_without_the_daemons_data_dir_trains_a_probe_the_leader_activates(
        tmp_path: Path, pg_store: Store, pg_url: str, redis_url: str) -> None:
    """Distributed mode with no shared filesystem: the worker runs in its own working and data
    directory, in a mount namespace where the daemon's data directory is an empty tmpfs; it gets the
    reference model and hands the probe back through the database (the default artifact store with a
    broker), knowing only the database and broker URLs."""
    from daemon.config import config_from_mapping
    from daemon.service.retrainer import CeleryRetrainer
    from daemon.service.settings import build_artifacts, worker_settings
    from workers import runtime
    from workers.app import configure_app

    bwrap = shutil.which("bwrap")
    require_service("bubblewrap", bwrap is not None, "apt-get install -y bubblewrap (hides the daemon's directory)")
    assert bwrap is not None
    daemon_dir, worker_dir = tmp_path / "daemon", tmp_path / "worker"
    worker_dir.mkdir()
    leader_cfg = config_from_mapping({"run_name": "drv", "data_dir": str(daemon_dir), "store": {"url": pg_url},
                                      "broker": {"url": redis_url, "visibility_timeout_s": 60,
                                                 "task_time_limit_s": 50}}, env={})
    assert leader_cfg.artifacts_url == "db"
    ref = tiny_reference(save_to=daemon_dir / "reference")
    settings = worker_settings(leader_cfg)
    runtime.configure(settings)
    configure_app(settings)
    driver, _ = make_driver(pg_store, daemon_dir, retrainer=CeleryRetrainer("drv"))
    engine = LeaderEngine(build_artifacts(leader_cfg, pg_store), daemon_dir / "reference", ref.fingerprint)
    driver.engine = engine
    tick_to(driver, "emit", 0)  # the retrain phase of cycle 0 sent a job to propel.drv.retrain
    job = driver.state()[2].retrain_job
    assert job is not None and not driver.state()[2].retrain_undispatched
    bogus = spec_for(driver.run_id, ref, name="drv-aux-bogus", reference_path="cas://sha256/" + "0" * 64)
    create_job(pg_store, bogus)
    CeleryRetrainer("drv").submit(bogus)

    config = worker_dir / "worker.toml"  # only the database and broker URLs
    config.write_text(f'run_name = "drv"\ndata_dir = "{worker_dir}"\n[store]\nurl = "{pg_url}"\n'
                      f'[broker]\nurl = "{redis_url}"\nvisibility_timeout_s = 60\ntask_time_limit_s = 50\n')
    log = worker_dir / "worker.log"
    hide = [bwrap, "--dev-bind", "/", "/", "--tmpfs", str(daemon_dir), "--"]
    worker = start_worker(config, log, concurrency=1, queues="retrain", cwd=worker_dir, wrapper=hide)
    try:
        _wait_finished(pg_store, [job, bogus.name], worker, log)
    finally:
        stop(worker)
    done, failed = job_outcome(pg_store, job), job_outcome(pg_store, bogus.name)
    assert done is not None and done.state == "done" and done.probe_id is not None, log.read_text()[-3000:]
    assert failed is not None and failed.state == "failed" and "not in the store database" in (failed.reason or "")
    fetched = list((worker_dir / "cache" / "artifacts").iterdir())
    assert fetched, "the worker fetched the reference from the artifact store"
    tick_to(driver, "sample", 1)  # the leader's next rl phase activates the worker's probe
    with pg_store.session() as s:
        aux = s.scalars(select(ProbeRow).where(ProbeRow.role == "aux")).all()
    assert [(p.name, p.active) for p in aux] == [(job, True)] and aux[0].artifact_uri.startswith("cas://sha256/")
    assert [p.name for p in engine.probes] == [job], "the leader fetched, verified and loaded it"
    assert engine.probes[0].reference_fingerprint == ref.fingerprint


def test_retrain_takes_its_negatives_from_the_false_positives_table(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store)
    with store.session() as s:
        recorded = lineage.false_positive_tasks(s, run_id)
        dropped = recorded[0]  # a false positive the table no longer holds is not re-mined from its label
        s.execute(delete(FalsePositive).where(FalsePositive.task_id == dropped))
    ref = tiny_reference()
    out = run_retrain(store, spec_for(run_id, ref), ArithDomain(), FeatureExtractor(ref),
                      artifacts_for(store, tmp_path))
    assert out.state == "done" and sorted(out.false_positive_ids) == recorded[1:]


def test_a_probe_the_leader_cannot_fetch_is_rejected_not_activated(store: Store, tmp_path: Path) -> None:
    queued = QueuedRetrainer()
    driver, _ = make_driver(store, tmp_path, retrainer=queued)
    ref = tiny_reference(save_to=tmp_path / "reference")
    driver.engine = LeaderEngine(artifacts_for(store, tmp_path / "leader"), tmp_path / "reference", ref.fingerprint)
    tick_to(driver, "emit", 0)
    [spec] = queued.specs
    worker_only = open_artifacts(str(tmp_path / "worker-only-blobs"), None, tmp_path / "worker-cache")
    assert run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), worker_only).state == "done"
    tick_to(driver, "rl", 1)
    report = driver.tick()  # activation: the leader's store (the database) does not hold the probe
    outcome = job_outcome(store, spec.name)
    assert report.values["retrain_failed"] == 1.0 and outcome is not None and outcome.state == "failed"
    assert "activation failed" in (outcome.reason or "") and "same artifacts.url" in (outcome.reason or "")
    with store.session() as s:
        active = [p.role for p in repo.active_probes(s, driver.run_id)]
        consumed = s.scalars(select(func.count()).select_from(FalsePositive).where(FalsePositive.consumed)).one()
    assert active == ["primary"] and consumed == 0 and driver.state()[2].totals.retrains == 0

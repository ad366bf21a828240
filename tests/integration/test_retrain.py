"""Aux-probe retrain jobs on the real store: in-process, and through a real Celery worker process
consuming the run's ``retrain`` queue on Redis with PostgreSQL."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from curriculum.domains.arith import ArithDomain
from curriculum.retrain import RetrainSpec, carry_out, create_job, job_outcome, run_retrain
from curriculum.store import lineage
from curriculum.store.db import Store
from curriculum.store.models import FalsePositive, ProbeRow, RetrainJob
from probes import FeatureExtractor, load_probe
from tests.integration.retrain_data import seed_labelled_run, spec_for, tiny_reference
from workers.local import start_worker, stop

pytestmark = pytest.mark.integration


def test_retrain_registers_an_inactive_aux_probe_once(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store)
    ref = tiny_reference()
    spec = spec_for(run_id, ref, tmp_path)
    out = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref))
    assert out.state == "done" and out.probe_id is not None and out.false_positive_ids
    again = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref))  # a redelivered message
    assert again == out
    with store.session() as s:
        probes = s.scalars(select(ProbeRow).where(ProbeRow.role == "aux")).all()
    assert len(probes) == 1 and not probes[0].active
    assert probes[0].meta["training"]["false_positives"] == len(out.false_positive_ids)
    probe = load_probe(probes[0].artifact_uri)
    assert probe.reference_fingerprint == ref.fingerprint and probe.name == spec.name


def test_retrain_without_labels_is_skipped_with_the_reason(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store, n_tasks=4, fp_threshold=1.01)  # no false positive recorded
    ref = tiny_reference()
    out = run_retrain(store, spec_for(run_id, ref, tmp_path), ArithDomain(), FeatureExtractor(ref))
    assert out.state == "skipped" and out.probe_id is None
    assert out.reason is not None and "both classes" in out.reason


def test_a_different_reference_fails_the_job(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store, n_tasks=8)
    ref = tiny_reference()
    out = run_retrain(store, spec_for(run_id, ref, tmp_path, reference_fingerprint="sha256:other"), ArithDomain(),
                      FeatureExtractor(ref))
    assert out.state == "failed" and out.reason is not None and "fingerprint" in out.reason


def test_carry_out_records_an_error_instead_of_raising(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store, n_tasks=8)

    def cannot_load(reference: str) -> FeatureExtractor:
        raise OSError(f"{reference} is not a model directory")

    out = carry_out(store, spec_for(run_id, tiny_reference(), tmp_path, reference_path="/gone"), ArithDomain(),
                    cannot_load)
    assert out.state == "failed" and out.reason == "OSError: /gone is not a model directory"


def test_spec_round_trip_and_bad_spec() -> None:
    spec = spec_for(1, tiny_reference(), Path("/tmp/x"))
    assert RetrainSpec.from_json(spec.to_json()) == spec
    bad = spec.to_json() | {"surprise": 1}
    del bad["layer"]
    with pytest.raises(ValueError, match=r"unknown \['surprise'\], missing \['layer'\]"):
        RetrainSpec.from_json(bad)


def _worker_config(tmp_path: Path, pg_url: str, redis_url: str, run: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(f'run_name = "{run}"\ndata_dir = "{tmp_path}"\n[store]\nurl = "{pg_url}"\n'
                    f'[broker]\nurl = "{redis_url}"\nvisibility_timeout_s = 60\ntask_time_limit_s = 50\n')
    return path


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
def test_celery_worker_trains_and_reports_failures(tmp_path: Path, pg_store: Store, pg_url: str,
                                                   redis_url: str) -> None:
    from daemon.config import load_config
    from daemon.service.retrainer import CeleryRetrainer
    from daemon.service.settings import worker_settings
    from workers import runtime
    from workers.app import configure_app

    run_id, _ = seed_labelled_run(pg_store, name="wrt")
    ref = tiny_reference(save_to=tmp_path / "reference")
    cfg = _worker_config(tmp_path, pg_url, redis_url, "wrt")
    good = spec_for(run_id, ref, tmp_path / "probes", name="wrt-aux-c0", reference_path=str(tmp_path / "reference"))
    missing = spec_for(run_id, ref, tmp_path / "probes", name="wrt-aux-c1", reference_path=str(tmp_path / "nope"))
    settings = worker_settings(load_config(cfg))
    runtime.configure(settings)
    configure_app(settings)
    retrainer = CeleryRetrainer("wrt")
    for spec in (good, missing):
        create_job(pg_store, spec)
        retrainer.submit(spec)
    log = tmp_path / "worker.log"
    worker = start_worker(cfg, log, concurrency=1, queues="retrain")
    try:
        _wait_finished(pg_store, [good.name, missing.name], worker, log)
    finally:
        stop(worker)
    done, failed = job_outcome(pg_store, good.name), job_outcome(pg_store, missing.name)
    assert done is not None and done.state == "done" and done.probe_id is not None, log.read_text()[-3000:]
    assert (tmp_path / "probes" / good.name).exists()
    assert failed is not None and failed.state == "failed" and failed.reason and "nope" in failed.reason


def test_retrain_takes_its_negatives_from_the_false_positives_table(store: Store, tmp_path: Path) -> None:
    run_id, _ = seed_labelled_run(store)
    with store.session() as s:
        recorded = lineage.false_positive_tasks(s, run_id)
        dropped = recorded[0]  # a false positive the table no longer holds is not re-mined from its label
        s.execute(delete(FalsePositive).where(FalsePositive.task_id == dropped))
    ref = tiny_reference()
    out = run_retrain(store, spec_for(run_id, ref, tmp_path), ArithDomain(), FeatureExtractor(ref))
    assert out.state == "done" and sorted(out.false_positive_ids) == recorded[1:]

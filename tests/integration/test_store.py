"""The store suite: every repository function on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from curriculum.store import lineage, queue, repo
from curriculum.store.db import Store
from curriculum.store.models import ProbeEnsembleRow, ProbeScore, SolverTrial, TaskRow

pytestmark = pytest.mark.integration


def _tasks(n: int, start: int = 0, domain: str = "arith") -> list[repo.NewTask]:
    return [repo.NewTask(domain=domain, content_hash=f"h{i:04d}", text=f"{i}+1", valid=i % 5 != 0,
                         payload={"answer": i + 1}, topic=f"add:{i % 3}")
            for i in range(start, start + n)]


def _run(store: Store) -> int:
    with store.session() as s:
        return repo.get_or_create_run(s, "r1", "cfg", {"a": 1})


def test_run_is_created_once(store: Store) -> None:
    first = _run(store)
    assert _run(store) == first


def test_add_tasks_is_idempotent_and_returns_ids_in_order(store: Store) -> None:
    run_id = _run(store)
    with store.session() as s:
        ids = repo.add_tasks(s, run_id, _tasks(10))
    with store.session() as s:
        again = repo.add_tasks(s, run_id, list(reversed(_tasks(12))))
        count = s.execute(select(func.count()).select_from(TaskRow)).scalar_one()
    assert count == 12
    assert list(reversed(again))[:10] == ids
    # same content hash in another domain is another task
    with store.session() as s:
        other = repo.add_tasks(s, run_id, _tasks(1, domain="azr"))
    assert other[0] not in ids


def test_new_task_keys_are_the_distinct_tasks_add_tasks_would_insert(store: Store) -> None:
    """The sample's novel share counts these: a task stored before is not new, a repeat within the sample counts
    once, and the domain is part of the key."""
    run_id = _run(store)
    with store.session() as s:
        repo.add_tasks(s, run_id, _tasks(600))  # more than one 500-hash chunk is looked up
    sample = _tasks(4, start=598) + _tasks(2, start=600) + _tasks(1, start=5, domain="azr")
    with store.session() as s:
        new = repo.new_task_keys(s, sample)
        inserted = len(repo.add_tasks(s, None, sample))
        count = s.execute(select(func.count()).select_from(TaskRow)).scalar_one()
    assert new == {("arith", "h0600"), ("arith", "h0601"), ("azr", "h0005")}
    assert inserted == 7 and count == 600 + len(new)


def test_trials_unique_per_task_solver_attempt(store: Store) -> None:
    with store.session() as s:
        (tid,) = repo.add_tasks(s, None, _tasks(1))
    trials = [repo.NewTrial(tid, "synthetic:arith", a, "pass" if a % 2 else "fail") for a in range(8)]
    with store.session() as s:
        assert repo.add_trials(s, trials) == 8
    with store.session() as s:
        assert repo.add_trials(s, [*trials, repo.NewTrial(tid, "other", 0, "null", reason="timeout")]) == 1
        assert s.execute(select(func.count()).select_from(SolverTrial)).scalar_one() == 9
    with pytest.raises(ValueError, match="outcome"), store.session() as s:
        repo.add_trials(s, [repo.NewTrial(tid, "x", 0, "maybe")])


def test_label_upsert_overwrites(store: Store) -> None:
    with store.session() as s:
        run = repo.get_or_create_run(s, "labels", "h", {})
        (tid,) = repo.add_tasks(s, None, _tasks(1))
        repo.upsert_label(s, tid, "sol", "spotcheck", run_id=run, k=8, solved=0, valid_trials=8,
                          band=(1, 3), in_band=False)
    with store.session() as s:
        repo.upsert_label(s, tid, "sol", "spotcheck", run_id=run, k=8, solved=2, valid_trials=8,
                          band=(1, 3), in_band=True)
        repo.upsert_label(s, tid, "sol", "consumer", run_id=run, k=4, solved=4, valid_trials=4,
                          band=(1, 3), in_band=False)
    from curriculum.store.models import Label

    with store.session() as s:
        rows = {r.source: r for r in s.scalars(select(Label))}
    assert rows["spotcheck"].solved == 2 and rows["spotcheck"].in_band is True
    assert rows["consumer"].k == 4


def test_batched_label_upsert_writes_new_and_overwrites_existing(store: Store) -> None:
    """A batch where one label exists already (the slow path) and one is new: both end as given."""
    from curriculum.store.models import Label

    with store.session() as s:
        run = repo.get_or_create_run(s, "labels", "h", {})
        a, b = repo.add_tasks(s, None, _tasks(2))
        repo.upsert_labels(s, [repo.NewLabel(a, run, "sol@1", "consumer", 8, 0, 8, (1, 3), False)])
    with store.session() as s:
        repo.upsert_labels(s, [repo.NewLabel(a, run, "sol@1", "consumer", 8, 2, 7, (1, 3), True, errors=1),
                               repo.NewLabel(b, run, "sol@1", "consumer", 8, 8, 8, (1, 3), False, sampling={"t": 1.0})])
    with store.session() as s:
        rows = {r.task_id: r for r in s.scalars(select(Label))}
    assert (rows[a].solved, rows[a].valid_trials, rows[a].in_band, rows[a].errors) == (2, 7, True, 1)
    got = (rows[b].solved, rows[b].solver_name, rows[b].solver_version, rows[b].sampling)
    assert got == (8, "sol", "1", {"t": 1.0})
    assert len(rows) == 2


def test_probes_scores_false_positives(store: Store) -> None:
    with store.session() as s:
        ids = repo.add_tasks(s, None, _tasks(4))
        p1 = repo.register_probe(s, "p1", "primary", "file:///p1", "fp", {"layer": 1})
        p2 = repo.register_probe(s, "aux1", "aux", "file:///a1", "fp", {})
        assert repo.register_probe(s, "p1", "primary", "file:///other", "fp", {}) == p1
        repo.set_active_probes(s, [p1, p2])
        ens = lineage.record_ensemble(s, None, lineage.EnsembleSpec("min", ("file:///p1",), ("file:///a1",)))
        assert lineage.record_ensemble(s, None, lineage.EnsembleSpec("min", ("file:///p1",), ("file:///a1",))) == ens
        assert lineage.record_probe_scores(s, ens, [(i, 1.5, 0.8) for i in ids]) == 4
        assert lineage.record_probe_scores(s, ens, [(ids[0], 9.0, 0.9)]) == 0
        assert lineage.add_false_positives(s, [(ids[0], ens, "too_easy", 8, 8, 2.0)]) == 1
        assert lineage.add_false_positives(s, [(ids[0], ens, "too_easy", 8, 8, 2.0)]) == 0
        row = s.get(ProbeEnsembleRow, ens)
        assert row is not None and [m["probe_id"] for m in row.members] == [p1] and row.aux[0]["name"] == "aux1"
    with store.session() as s:
        assert [p.name for p in repo.active_probes(s)] == ["p1", "aux1"]
        repo.set_active_probes(s, [p2])
        assert [p.name for p in repo.active_probes(s)] == ["aux1"]
        assert s.scalars(select(ProbeScore.logit).where(ProbeScore.task_id == ids[0])).one() == 1.5
    with pytest.raises(ValueError, match="role"), store.session() as s:
        repo.register_probe(s, "bad", "judge", "x", "fp", {})


def test_active_probes_are_per_run(store: Store) -> None:
    with store.session() as s:
        a, b = (repo.get_or_create_run(s, name, "h", {}) for name in ("run-a", "run-b"))
        pa = repo.register_probe(s, "a-primary", "primary", "file:///a", "fp", {}, run_id=a)
        pb = repo.register_probe(s, "b-primary", "primary", "file:///b", "fp", {}, run_id=b)
        repo.set_active_probes(s, [pa], a)
        repo.set_active_probes(s, [pb], b)  # run b's swap leaves run a's probe active
        aux = repo.register_probe(s, "a-aux", "aux", "file:///x", "fp", {}, run_id=a)
        repo.set_active_probes(s, [pa, aux], a)
    with store.session() as s:
        assert [p.name for p in repo.active_probes(s, a)] == ["a-primary", "a-aux"]
        assert [p.name for p in repo.active_probes(s, b)] == ["b-primary"]
        assert repo.primary_probe_id(s, b) == pb and repo.primary_probe_id(s, a) == pa


def test_checkpoints_metrics_alerts_state(store: Store) -> None:
    run_id = _run(store)
    with store.session() as s:
        repo.add_checkpoint(s, run_id, 10, "abc", "cas://sha256/10")
        repo.add_checkpoint(s, run_id, 20, "def", "cas://sha256/20")
        repo.add_checkpoint(s, run_id, 20, "zzz", "cas://sha256/dup")
        repo.record_metrics(s, run_id, 1, {"validity": 0.9, "distinct_3": 0.4})
        repo.record_metrics(s, run_id, 1, {"validity": 0.1})
        aid = repo.fire_alert(s, run_id, rule="topic", severity="warning", metric="top_topic_share",
                              value=0.8, threshold=0.6, cycle=1)
    with store.session() as s:
        ck = repo.latest_checkpoint(s, run_id)
        assert ck is not None and (ck.step, ck.adapter_hash) == (20, "def")
        hist = {m.name: m.value for m in repo.metric_history(s, run_id)}
        assert hist == {"validity": 0.9, "distinct_3": 0.4}
        assert [a.id for a in repo.open_alerts(s, run_id)] == [aid]
        repo.resolve_alert(s, aid, cycle=3)
        assert repo.open_alerts(s, run_id) == []
        st = repo.load_state(s, run_id)
        assert (st.phase, st.cycle) == ("rl", 0)
        repo.save_state(s, run_id, phase="emit", cycle=4, counters={"emitted": 7})
    with store.session() as s:
        st = repo.load_state(s, run_id)
        assert (st.phase, st.cycle, st.counters) == ("emit", 4, {"emitted": 7})
        counts = repo.table_counts(s)
    assert counts["generator_checkpoints"] == 2 and counts["alerts"] == 1


def test_naive_datetime_is_rejected(store: Store) -> None:
    from datetime import datetime

    run_id = _run(store)
    with pytest.raises(Exception, match="naive"), store.session() as s:
        queue.lease(s, 1, 60, "c", max_attempts=2, run_id=run_id, now=datetime(2026, 1, 1))

"""The bootstrap's thread choice: from the other processes' CPU use, re-decided as it changes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from curriculum.common import cpu_share
from curriculum.common.cpu_share import CpuSample, ThreadGovernor, choose_threads, others_cores


@pytest.mark.parametrize(("cpus", "others", "want"), [
    (2, 0.0, 2), (2, 0.15, 2), (2, 0.5, 1), (2, 1.0, 1), (2, 1.9, 1),  # a busy half core costs the 2nd
    (1, 0.0, 1),                                                          # one core: never two threads
    (16, 0.0, 2), (16, 13.0, 2), (16, 14.5, 1),                          # never above MAX_AUTO_THREADS
])
def test_choose_threads(cpus: int, others: float, want: int) -> None:
    assert choose_threads(cpus, others) == want


def test_others_cores_subtracts_this_process() -> None:
    before, after = CpuSample(busy=100.0, own=10.0, wall=0.0), CpuSample(busy=103.0, own=12.0, wall=2.0)
    assert others_cores(before, after) == pytest.approx(0.5)  # 3 s busy, 2 of them ours, over 2 s
    assert others_cores(after, after) == 0.0
    assert others_cores(before, CpuSample(busy=100.5, own=11.0, wall=1.0)) == 0.0  # never negative


class Script:
    """A reader that plays back CPU samples: the machine as the test says, no clock needed."""

    def __init__(self, samples: list[CpuSample | None]) -> None:
        self.samples = samples

    def __call__(self) -> CpuSample | None:
        return self.samples.pop(0)


def test_governor_drops_to_one_thread_when_another_process_arrives_and_back(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(cpu_share.time, "monotonic", lambda: clock[0])
    before = torch.get_num_threads()
    try:
        # idle at the start; then another process takes a core; then it leaves
        samples: list[CpuSample | None] = [CpuSample(0, 0, 0), CpuSample(0.02, 0, 0.3),
                   CpuSample(30.02, 20, 10.3), CpuSample(40.02, 30, 20.3)]
        gov = ThreadGovernor(cpus=2, reader=Script(samples), probe_s=0)
        assert gov.threads == 2 and torch.get_num_threads() == 2
        clock[0] = 5.0
        gov.tick()  # before RECHECK_S: no new measurement
        assert gov.threads == 2
        clock[0] = 10.3
        gov.tick()  # 30 s busy in 10 s, 20 ours: the others use 1 core
        assert gov.threads == 1 and torch.get_num_threads() == 1
        clock[0] = 20.3
        gov.tick()  # 20 s busy, 10 ours (one thread, one core): the others use none
        assert gov.threads == 2
        assert [t for t, _ in gov.changes] == [2, 1, 2]
    finally:
        torch.set_num_threads(before)


def test_governor_without_proc_stat_keeps_one_thread_and_override_wins() -> None:
    before = torch.get_num_threads()
    try:
        gov = ThreadGovernor(cpus=2, reader=lambda: None, probe_s=0)
        assert gov.threads == 1 and math.isnan(gov.changes[0][1])
        gov.tick()
        assert gov.threads == 1
        assert ThreadGovernor(fixed=2, cpus=2, reader=lambda: None).threads == 2
    finally:
        torch.set_num_threads(before)


def test_read_sample_on_this_machine_only_moves_forward() -> None:
    first = cpu_share.read_sample()
    if first is None:
        pytest.skip("no /proc/stat on this platform: the governor keeps one thread (tested above)")
    second = first
    for _ in range(200):  # spin until our own CPU time moves on (its clock ticks in 10 ms steps)
        sum(i * i for i in range(50_000))
        now = cpu_share.read_sample()
        assert now is not None
        second = now
        if second.own > first.own:
            break
    assert second.busy >= first.busy and second.own > first.own >= 0 and second.wall > first.wall


@pytest.mark.parametrize(("cpu_max", "cap"), [
    ("max 100000\n", None),          # no quota: the affinity
    ("100000 100000\n", 1),          # docker --cpus 1
    ("150000 100000\n", 1),          # 1.5 cores: one whole one
    ("50000 100000\n", 1),           # half a core: still one thread, never zero
    ("garbage\n", None),             # unreadable: the affinity
])
def test_available_cpus_honours_the_cgroup_quota(tmp_path: Path, cpu_max: str, cap: int | None) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    affinity = cpu_share.available_cpus(tmp_path / "missing")
    assert cpu_share.available_cpus(tmp_path / "cpu.max") == (affinity if cap is None else min(cap, affinity))

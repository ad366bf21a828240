"""Memory and processes of all of a run's processes together: one cgroup per sandbox run.

Every attack runs on every backend twice: with the cgroup the host offers (``cgroup=True``) and
with cgroups switched off (``cgroup=False``). Where a cgroup is in force the attack must end with
``memory``; where none is (no writable hierarchy, or switched off) the test asserts the documented
fallback verdict instead (docs/SANDBOX.md: the bound is ``max_procs x memory_mb``). After every
test no run cgroup directory, sandbox process or sandbox file is left.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from curriculum.sandbox import (
    BatchRunner,
    BubblewrapSandbox,
    Limits,
    Program,
    ProgramResult,
    RlimitSandbox,
    containment,
)
from curriculum.sandbox.base import Sandbox
from curriculum.sandbox.cgroup import (
    PREFIX,
    CgroupSupport,
    RunCgroup,
    detect,
    host_support,
    leftover_cgroups,
    limit_files,
    oom_kill_count,
    parse_mountinfo,
    parse_proc_cgroup,
)
from testkit.waiting import eventually
from tests.unit.sandbox.test_escapes import BWRAP_OK, BWRAP_REASON, IS_ROOT
from tests.unit.sandbox.test_hostile_batch import _sandbox_leftovers

LIMITS = Limits(cpu_s=5, wall_s=20.0, memory_mb=256, max_procs=10, file_size_mb=16, tmpfs_mb=8)
PURE = "def f(x):\n    return x * x"
SUPPORT = host_support()
BACKENDS = [pytest.param("bubblewrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap: {BWRAP_REASON}")),
            "rlimit"]
CGROUP = [pytest.param(True, id="cgroup"), pytest.param(False, id="no_cgroup")]

#: Six processes of 120 MiB each: every one is under RLIMIT_AS (256 MiB), together 720 MiB.
MANY_PROCESSES = """import os, time
def f(x):
    pids = []
    for _ in range(x):
        pid = os.fork()
        if pid == 0:
            data = b'x' * (120 << 20)
            time.sleep(0.5)
            os._exit(0)
        pids.append(pid)
    return sum(os.waitpid(p, 0)[1] != 0 for p in pids)
"""
#: 40 files of 15 MiB (each under RLIMIT_FSIZE) in /dev/shm: 600 MiB outside any address space.
SHM_FILES = """import os
def f(x):
    names = []
    try:
        for i in range(x):
            names.append(f'/dev/shm/propel-hostile-{os.getpid()}-{i}')
            with open(names[-1], 'wb') as fh:
                fh.write(b'x' * (15 << 20))
        return len(names)
    finally:
        for name in names:
            try:
                os.unlink(name)
            except OSError:
                pass
"""


def make(backend: str, cgroup: bool) -> Sandbox:
    return BubblewrapSandbox(LIMITS, cgroup=cgroup) if backend == "bubblewrap" else RlimitSandbox(LIMITS, cgroup=cgroup)


def in_force(cgroup: bool) -> bool:
    return cgroup and SUPPORT.usable


@pytest.fixture(autouse=True)
def _nothing_leaks() -> Iterator[None]:
    yield
    assert leftover_cgroups() == [], "run cgroups were not removed"
    if IS_ROOT:
        eventually(lambda: not _sandbox_leftovers()[0], timeout_s=3, interval_s=0.05)
        assert _sandbox_leftovers() == ([], []), "sandbox processes or files outlived the run"
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith("propel-hostile-")]


def _batch(backend: str, cgroup: bool, hostile: Program) -> list[ProgramResult]:
    runner = BatchRunner(make(backend, cgroup), LIMITS, call_timeout_s=5.0)
    results = runner.run([Program("before", PURE, ("3",)), hostile, Program("after", PURE, ("4",))])
    assert results[0].outputs == ["9"] and results[2].outputs == ["16"], results
    return results


@pytest.mark.parametrize("cgroup", CGROUP)
@pytest.mark.parametrize("backend", BACKENDS)
def test_many_processes_are_stopped_by_the_cgroup_or_get_the_fallback_verdict(backend: str, cgroup: bool) -> None:
    hostile = _batch(backend, cgroup, Program("hostile", MANY_PROCESSES, ("6",)))[1]
    if in_force(cgroup):
        assert hostile.status == "memory" and "cgroup" in (hostile.reason or ""), hostile
    else:  # fallback: each process is within RLIMIT_AS, so all six run to the end
        assert hostile.status == "ok" and hostile.outputs == ["0"], hostile


@pytest.mark.parametrize("cgroup", CGROUP)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_memory_files_are_stopped_by_the_cgroup_or_get_the_fallback_verdict(backend: str, cgroup: bool) -> None:
    hostile = _batch(backend, cgroup, Program("hostile", SHM_FILES, ("40",)))[1]
    if backend == "bubblewrap":  # /dev/shm is an empty read-only tmpfs there, cgroup or not
        assert hostile.calls[0].status == "error" and "Read-only" in str(hostile.calls[0].error), hostile
    elif in_force(cgroup):
        assert hostile.status == "memory" and "cgroup" in (hostile.reason or ""), hostile
    else:  # fallback: each file is within RLIMIT_FSIZE; nothing bounds their number
        assert hostile.status == "ok" and hostile.outputs == ["40"], hostile


#: Leave the run's cgroup (move into its parent) and raise its own memory limit, in every hierarchy.
ESCAPE_THE_CGROUP = """import os
def f(x):
    outcomes = []
    for line in open('/proc/self/cgroup').read().splitlines():
        _, controllers, path = line.split(':', 2)
        if controllers not in ('memory', 'pids', ''):
            continue
        own = '/sys/fs/cgroup/' + (controllers + '/' if controllers else 'unified/') + path.lstrip('/')
        for target, text in ((os.path.dirname(own.rstrip('/')) + '/cgroup.procs', str(os.getpid())),
                             (own + '/memory.limit_in_bytes', str(1 << 40)), (own + '/memory.max', 'max'),
                             (own + '/pids.max', 'max')):
            try:
                with open(target, 'w') as fh:
                    fh.write(text)
                outcomes.append('WROTE ' + target)
            except OSError as err:
                outcomes.append(type(err).__name__)
    return sorted(set(outcomes))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_candidate_cannot_leave_its_cgroup_or_raise_its_limits(backend: str) -> None:
    hostile = _batch(backend, True, Program("hostile", ESCAPE_THE_CGROUP, ("1",)))[1]
    assert hostile.status == "ok" and hostile.calls[0].status == "ok", hostile
    assert "WROTE" not in str(hostile.outputs[0]), hostile


@pytest.mark.parametrize("backend", BACKENDS)
def test_memfd_is_denied_before_any_cgroup_is_needed(backend: str) -> None:
    code = "import os\ndef f(x):\n    fd = os.memfd_create('m')\n    os.write(fd, b'x' * (64 << 20))\n    return 1"
    hostile = _batch(backend, True, Program("hostile", code, ("1",)))[1]
    assert hostile.calls[0].status == "error" and "PermissionError" in str(hostile.calls[0].error), hostile


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_single_run_reports_oom_kills_of_its_processes(backend: str) -> None:
    result = make(backend, True).run_python(MANY_PROCESSES + "print(f(6))\n")
    if SUPPORT.usable:
        kills = int(str(result.meta["cgroup_oom_kills"]))
        assert kills > 0 and result.stdout.strip() not in ("", "0"), result.log_view()
    else:
        assert "cgroup_oom_kills" not in result.meta and result.stdout.strip() == "0", result.log_view()


@pytest.mark.skipif(not SUPPORT.usable, reason=f"no writable cgroup here: {SUPPORT.reason}")
def test_run_cgroup_has_the_limits_and_is_removed_with_its_processes() -> None:
    cgroup = RunCgroup.create(LIMITS)
    assert cgroup is not None
    try:
        for directory, name, value in limit_files(SUPPORT, LIMITS):
            path = os.path.join(cgroup.memory_dir if directory == SUPPORT.memory_parent else cgroup.dirs[-1], name)
            assert Path(path).read_text().strip() == value
        assert oom_kill_count(Path(cgroup.oom_file).read_text()) == 0
    finally:
        cgroup.remove()
    assert not any(os.path.exists(d) for d in cgroup.dirs)


def test_containment_says_whether_a_cgroup_is_in_force() -> None:
    provided = {p.name: p.provided for p in containment("rlimit")}
    assert provided["memory_all_processes_together"] is SUPPORT.usable
    off = {p.name: p.provided for p in containment(RlimitSandbox(LIMITS, cgroup=False))}
    assert off["memory_all_processes_together"] is False


# --- detection and limits, from the files the kernel shows (pure) -----------------------------

V1_MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,relatime shared:13 - cgroup cgroup rw,pids
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw
40 1 8:1 / / rw,relatime - ext4 /dev/vda rw
"""
V1_PROC = "8:pids:/\n4:memory:/session/abc\n0::/\n"


def test_mountinfo_and_proc_cgroup_are_parsed() -> None:
    mounts = parse_mountinfo(V1_MOUNTINFO)
    assert [(m[1], m[2]) for m in mounts] == [("/sys/fs/cgroup/memory", "cgroup"), ("/sys/fs/cgroup/pids", "cgroup"),
                                              ("/sys/fs/cgroup/unified", "cgroup2")]
    assert "memory" in mounts[0][3]
    assert parse_proc_cgroup(V1_PROC) == {"pids": "/", "memory": "/session/abc", "": "/"}


def test_a_delegated_v2_directory_is_used_and_an_undelegated_one_explains_why(tmp_path: Path) -> None:
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    found = detect(str(tmp_path))
    assert found.usable and found.version == 2 and found.pids_parent == str(tmp_path)
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    refused = detect(str(tmp_path))
    assert not refused.usable and "subtree_control" in refused.reason
    assert not detect("off").usable and "off" in detect("off").reason
    v2_only = "32 25 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert not detect("auto", mountinfo=v2_only, proc_cgroup="0::/no-such-cgroup-here\n").usable


def test_limit_files_per_version() -> None:
    v2 = CgroupSupport(2, "/cg", "/cg", "v2")
    assert limit_files(v2, LIMITS) == [("/cg", "memory.max", str(256 << 20)), ("/cg", "memory.swap.max", "0"),
                                       ("/cg", "pids.max", "14")]
    v1 = CgroupSupport(1, "/m", "/p", "v1")
    assert limit_files(v1, LIMITS) == [("/m", "memory.limit_in_bytes", str(256 << 20)),
                                       ("/m", "memory.memsw.limit_in_bytes", str(256 << 20)), ("/p", "pids.max", "14")]
    assert oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    assert oom_kill_count("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n") == 1
    assert PREFIX == "propel-sbx-"


#: The candidate's own descriptors, as /proc/self/fd lists them (the listing's own directory descriptor is
#: closed again by the time it is read: it shows as gone and is left out).
OWN_DESCRIPTORS = """import os
def f(x):
    held = {}
    for name in os.listdir('/proc/self/fd'):
        try:
            held[int(name)] = os.readlink('/proc/self/fd/' + name)
        except FileNotFoundError:
            pass
    return sorted(held.items())
"""


@pytest.mark.parametrize("cgroup", CGROUP)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_candidate_holds_its_result_pipe_and_nothing_else(backend: str, cgroup: bool) -> None:
    """The fork server's contract (#37): stdin/stdout/stderr on /dev/null, its own result pipe, no other
    descriptor — also where the host has many files open, so that the run cgroup's OOM counter it passes
    in has a number above the sandbox's descriptor limit (it stayed open in every candidate on cgroup v1)."""
    spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(LIMITS.open_files + 40)]
    try:
        result = _batch(backend, cgroup, Program("fds", OWN_DESCRIPTORS, ("1",)))[1]
    finally:
        for fd in spare:
            os.close(fd)
    assert result.status == "ok" and result.calls[0].status == "ok", result
    held = dict(ast.literal_eval(str(result.outputs[0])))
    pipes = [fd for fd, target in held.items() if target.startswith("pipe:")]
    assert {fd: held[fd] for fd in (0, 1, 2)} == dict.fromkeys((0, 1, 2), "/dev/null"), held
    assert len(pipes) == 1 and set(held) == {0, 1, 2, *pipes}, held

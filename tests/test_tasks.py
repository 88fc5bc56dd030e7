"""A kernel's processes and threads are bounded (attnlab.grading.sandbox.tasks), so a fork bomb in one notebook
cannot starve the kernels of the other grading slots: the cgroup path (root), the RLIMIT_NPROC path
(an account other than root, one user namespace per sandbox) and where each is chosen."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attnlab.grading.kernel import limits
from attnlab.grading.sandbox import tasks

BOMB = """
import threading
threading.stack_size(64 * 1024)
hold, n = threading.Event(), 0
try:
    while n < 3000:
        threading.Thread(target=hold.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
print("STARTED", n)
"""


def _fake_cgroupfs(root, proc_cgroup: str, v1: bool, v2_subtree: dict[str, str]):
    if v1:
        (root / "pids").mkdir()
        (root / "pids" / "pids.max").write_text("max")
    if v2_subtree:
        (root / "cgroup.controllers").write_text("cpu pids memory")
        for path, control in v2_subtree.items():
            folder = root / path.lstrip("/")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cgroup.subtree_control").write_text(control)
    return proc_cgroup


def test_parent_candidates_follow_the_graders_own_cgroup(tmp_path):
    proc = "12:pids:/grading/a\n0::/grading/a\n"
    _fake_cgroupfs(tmp_path, proc, v1=True, v2_subtree={})
    assert tasks.parent_candidates(tmp_path, proc) == [tmp_path / "pids" / "grading" / "a"]


def _cgroupfs_writes(path, text):
    """Stand-in for tasks.write_control on a fake cgroupfs, with cgroup v2's rule: a cgroup that holds processes
    cannot hand out controllers (EBUSY); writing a pid into a leaf's cgroup.procs moves it there."""
    path = Path(path)
    if path.name == "cgroup.subtree_control" and (path.parent / "cgroup.procs").exists() \
            and (path.parent / "cgroup.procs").read_text().split():
        raise OSError(errno.EBUSY, "the cgroup holds processes")
    if path.name == "cgroup.procs":
        source = path.parent.parent / "cgroup.procs"
        source.write_text("\n".join(p for p in source.read_text().split() if p != text))
        text = (path.read_text() + "\n" + text).strip() if path.exists() else text
    path.write_text(text)


@pytest.mark.parametrize("own, subtree, expected", [
    ("/", {"/": "cpu pids"}, [""]),                                   # a container's own cgroup namespace
    (f"/grading/{tasks.LEAF}", {"/": "cpu pids", "/grading": "pids"}, ["grading"]),  # our leaf: its parent is ours
    ("/system.slice/grader.service", {"/": "cpu pids", "/system.slice": "pids"}, []),  # never beside: not ours
    ("/user.slice/s", {"/": "cpu pids", "/user.slice": "memory"}, []),     # never the root: the grader's limits stay
    ("/job/step", {"/": "cpu pids", "/job": "memory", "/job/step": ""}, ["job/step"]),  # its processes move to a leaf
    ("/", {"/": "memory"}, []),
])
def test_parent_candidates_on_cgroup_v2(tmp_path, monkeypatch, own, subtree, expected):
    proc = f"0::{own}\n"
    _fake_cgroupfs(tmp_path, proc, v1=False, v2_subtree=subtree)
    monkeypatch.setattr(tasks, "write_control", _cgroupfs_writes)
    if own == "/job/step":  # a cgroup with pids available and its own processes
        mine = tmp_path / "job" / "step"
        (mine / "cgroup.controllers").write_text("cpu pids")
        (mine / "cgroup.procs").write_text("101\n102\n")
        assert tasks.parent_candidates(tmp_path, proc) == []  # nothing is moved unless autograde asks
    assert tasks.parent_candidates(tmp_path, proc, prepare=True) == [tmp_path / p if p else tmp_path for p in expected]
    if own == "/job/step":  # both processes now sit in the leaf, and the cgroup hands out pids
        assert (mine / tasks.LEAF / "cgroup.procs").read_text().split() == ["101", "102"]
        assert (mine / "cgroup.procs").read_text().split() == [] and "pids" in (mine / "cgroup.subtree_control").read_text()


def test_a_malformed_cgroup_listing_gives_no_candidate(tmp_path):
    assert tasks.parent_candidates(tmp_path, "garbage\n") == []


def test_enter_runs_nothing_when_the_move_fails(tmp_path):
    """The shell moves itself into the cgroup first: where it cannot (no such cgroup), nothing starts."""
    marker = tmp_path / "ran"
    proc = subprocess.run(tasks.enter(tmp_path / "no-such-cgroup", ["touch", str(marker)]), capture_output=True)
    assert proc.returncode != 0 and not marker.exists()


def test_create_writes_the_limit_and_enter_moves_the_command_in(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks, "write_control", _cgroupfs_writes)  # a plain folder: its pids.max is a new file
    folder = tasks.create(77, candidates=[tmp_path / "missing", tmp_path])
    assert folder.parent == tmp_path and (folder / "pids.max").read_text() == "77"
    cmd = tasks.enter(folder, ["bwrap", "--", "python"])
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[3] == str(folder) and cmd[-3:] == ["bwrap", "--", "python"]
    assert tasks.enter(None, ["x"]) == ["x"] and tasks.create(0, candidates=[tmp_path]) is None


def test_no_rlimit_in_the_graders_own_user_namespace():
    """Where the kernel shares the grader's user namespace, RLIMIT_NPROC would count the grader's and
    every other kernel's tasks too (or nothing, for root): the guard leaves it alone."""
    assert limits.limit_in_kernel(64, limits.user_namespace()) == 0
    assert limits.limit_in_kernel(64, "") == 0


def _bwrap(*cmd: str) -> list[str]:
    return ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--", *cmd]


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _python_for_nobody() -> str | None:
    """An interpreter the account `nobody` may run (this venv's may live under root's 0700 home)."""
    for exe in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        if subprocess.run([*AS_NOBODY, *_bwrap(exe, "-c", "pass")], capture_output=True).returncode == 0:
            return exe
    return None


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv") or not shutil.which("bwrap"),
                    reason="needs root (to run as another account) and setpriv and bwrap")
def test_rlimit_bounds_each_sandbox_of_an_account_other_than_root_on_its_own():
    """As `nobody`, bwrap gives each sandbox a user namespace, and the guard's RLIMIT_NPROC (set by
    limit_in_kernel, as in a kernel) counts that sandbox alone: with the limit at 64 in both, one bomb
    stops below 64 while the other sandbox of the same account holds its own 50 threads at the same
    time (together over 64: a per-account count would have stopped the second)."""
    if not limits.per_namespace_counts():
        pytest.skip("this Linux does not count RLIMIT_NPROC per user namespace (before 5.14)")
    exe = _python_for_nobody()
    if exe is None:
        pytest.skip("no Python that the account nobody may run")
    grader_ns = subprocess.run([*AS_NOBODY, exe, "-c", "import os; print(os.readlink('/proc/self/ns/user'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    shared = tempfile.mkdtemp(prefix="attnlab-tasks-test-")
    os.chmod(shared, 0o777)
    barrier = os.path.join(shared, "go")
    # the module alone, from its file: the interpreter may be one without the course installed
    load = (f"import importlib.util as u, os, time\ns = u.spec_from_file_location('limits', {limits.__file__!r})\n"
            "limits = u.module_from_spec(s)\ns.loader.exec_module(limits)\n")
    hold = (f"\nimport sys\nsys.stdout.flush()\nwhile not os.path.exists({barrier!r}):\n    time.sleep(0.05)\n")

    def sandbox(count: int):
        code = (load + f"print('LIMIT', limits.limit_in_kernel(64, {grader_ns!r}))\n"
                + BOMB.replace("n < 3000", f"n < {count}") + hold)
        return subprocess.Popen([*AS_NOBODY, *_bwrap(exe, "-c", code)], stdout=subprocess.PIPE, text=True)

    try:
        runs = [sandbox(3000), sandbox(50)]
        lines = [[p.stdout.readline(), p.stdout.readline()] for p in runs]  # LIMIT, STARTED: both now hold
        open(barrier, "w").close()
        for p in runs:
            p.wait(timeout=60)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert [ln[0].split() for ln in lines] == [["LIMIT", "64"], ["LIMIT", "64"]], lines
    started = [int(ln[1].split()[1]) for ln in lines]
    assert started[0] < 64 and started[1] == 50, started


def test_a_sandboxed_kernel_gets_at_most_max_tasks():
    """The kernel manager the grader uses: a thread bomb in the kernel stops below the bound, the
    cgroup is gone afterwards, and without a bound (0) the same bomb runs to its end."""
    bounded, line = tasks.describe()
    if not bounded or os.getuid() != 0:
        pytest.skip(line if not bounded else "the cgroup path needs root here (RLIMIT path: test above)")
    from attnlab.grading.sandbox import check

    from .kernel_runner import in_kernel

    if not check()[0]:
        pytest.skip(check()[1])

    async def its_cgroup(km):
        return km.cgroup

    def run(max_tasks: int) -> tuple[str, object]:
        out, _, folder = asyncio.run(in_kernel(BOMB, after=its_cgroup, timeout=120, max_tasks=max_tasks))
        return out, folder

    out, cgroup = run(128)
    assert cgroup is not None and not cgroup.exists()
    assert 0 < int(out.split("STARTED")[1]) < 128, out
    out, cgroup = run(0)
    assert cgroup is None and int(out.split("STARTED")[1]) > 128, out


def test_sweep_removes_only_dead_graders_cgroups_of_this_pid_namespace(tmp_path, monkeypatch):
    """A cgroup named after a live process (this one), after a pid whose start time differs (reused), and
    after another pid namespace (another container under the same parent): only the second goes."""
    monkeypatch.setattr(tasks, "parent_candidates", lambda **kw: [tmp_path])
    removed = []
    monkeypatch.setattr(tasks, "remove", lambda folder, wait_s=2.0: removed.append(folder.name) or True)
    ns, pid, start = tasks.owner_tag().split("-")
    names = {"live": f"{tasks.CGROUP_PREFIX}{ns}-{pid}-{start}-aaaa", "reused": f"{tasks.CGROUP_PREFIX}{ns}-{pid}-1-bbbb",
             "other-ns": f"{tasks.CGROUP_PREFIX}1-{pid}-1-cccc", "not-ours": "some-other-cgroup"}
    for name in names.values():
        (tmp_path / name).mkdir()
    assert tasks.sweep() == 1 and removed == [names["reused"]]


def test_a_root_grader_without_a_pids_cgroup_bounds_each_kernel_account(monkeypatch):
    """Root in a container whose cgroup offers no pids controller (the H200 host, a Kubernetes pod): the
    kernels' own accounts make RLIMIT_NPROC count one kernel each, unless kernels are kept at uid 0."""
    from attnlab.grading import sandbox

    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(tasks, "create", lambda n, candidates=None: None)
    monkeypatch.setattr(tasks, "own_v2_cgroup", lambda root=None: None)
    monkeypatch.delenv(sandbox.KERNEL_ACCOUNT_ENV, raising=False)
    monkeypatch.delenv(tasks.MAX_TASKS_ENV, raising=False)
    tasks.describe.cache_clear()
    try:
        bounded, line = tasks.describe()
        assert bounded and "own account" in line, line
        monkeypatch.setenv(sandbox.KERNEL_ACCOUNT_ENV, "root")
        tasks.describe.cache_clear()
        bounded, line = tasks.describe()
        assert not bounded and "ATTNLAB_KERNEL_ACCOUNT=root" in line, line
    finally:
        tasks.describe.cache_clear()

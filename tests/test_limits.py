"""Limits a kernel cannot step around (issue 30, item 4): its memory is counted as a whole (children,
memfd and shared memory included), its scratch folder has a size, its folders go whatever it made in
them, the host's cgroups are out of its sight, and the out-of-memory killer takes kernels before the
grader. Memory figures are small (a 512 MiB kernel, a 64 MiB scratch folder) for 2-core CI machines."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attnlab.core.outcome import notes_of
from attnlab.grading import sandbox
from attnlab.grading.sandbox import tasks

from .kernel_runner import in_kernel

MIB = 2**20
#: What the kernels of these tests may hold, and their scratch folder's size.
KERNEL_MEMORY, SCRATCH = 512 * MIB, 64 * MIB


def _nested(top: Path, depth: int) -> Path:
    """``depth`` nested folders under ``top`` (made through relative paths: no path grows too long)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
            f.write(b"x" * MIB)
        os.fchmod(fd, 0)  # the deepest folder closed to all, its owner included
    finally:
        os.close(fd)
    return top


def test_removal_goes_through_any_depth_closed_folders_and_links(tmp_path):
    """2,500 nested folders stop shutil.rmtree (RecursionError, which ignore_errors does not catch); closed
    folders and links to what lies outside must neither stop the removal nor reach through it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the kernel's")
    deep = tmp_path / "run"
    deep.mkdir()
    _nested(deep, 2500)
    closed = deep / "closed"
    closed.mkdir()
    (closed / "inner").mkdir()
    (closed / "inner" / "f").write_text("x")
    os.chmod(closed / "inner", 0)
    os.chmod(closed, 0)
    (deep / "to-outside").symlink_to(outside)
    (deep / "to-keep").symlink_to(outside / "keep")
    with pytest.raises(RecursionError):  # the finding, as Python does it here
        shutil.rmtree(deep, ignore_errors=True)
    assert sandbox.remove_tree(str(deep)) and not deep.exists()
    assert (outside / "keep").read_text() == "not the kernel's"
    assert sandbox.remove_tree(str(deep))  # gone already: nothing to do
    (tmp_path / "file").write_text("x")
    assert sandbox.remove_tree(str(tmp_path / "file")) and not (tmp_path / "file").exists()


def test_removal_of_closed_folders_as_their_owner(tmp_path):
    """A grader that is not root owns its kernels' folders but may not enter one closed to all (chmod 000):
    it opens them again for itself on the way down."""
    if os.geteuid() != 0:
        pytest.skip("runs the removal as another account (needs root)")
    base = Path(tempfile.mkdtemp(prefix="attnlab-test-owner-"))  # a folder the other account may pass
    try:
        top = base / "run"
        top.mkdir()
        _nested(top, 50)
        os.chmod(base, 0o755)
        subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
        code = f"import sys; sys.path[:0] = {sys.path!r}; from attnlab.grading import sandbox; " \
               f"print(sandbox.remove_tree({str(top)!r}))"
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                              code], capture_output=True, text=True)
        assert out.stdout.strip() == "True" and not top.exists(), out.stderr[-2000:]
    finally:
        subprocess.run(["rm", "-rf", str(base)])


# ------------------------------------------------------------------------- in a sandboxed kernel
def _sandboxed():
    if not sandbox.check()[0]:
        pytest.skip(sandbox.check()[1])


def _run(code: str, fork_server: bool = False, after=None, timeout: float = 120) -> tuple[str, object]:
    out, _, extra = asyncio.run(in_kernel(code, fork_server=fork_server, after=after, timeout=timeout,
                                          memory_bytes=KERNEL_MEMORY, scratch_size=SCRATCH))
    return out, extra


#: 2,500 nested folders with a file at the bottom, then files until the system refuses (bounded at
#: 256 MiB, so that a machine without the limit survives the test).
DEEP_AND_FULL = r"""
import os
top = os.open(".", os.O_RDONLY)
fd = top
for _ in range(2500):
    os.mkdir("d", dir_fd=fd)
    fd = os.open("d", os.O_RDONLY, dir_fd=fd)
with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
    f.write(b"x" * 2**20)
os.fchmod(fd, 0)
written, chunk = 0, b"x" * 2**20
try:
    with open("fill", "wb") as f:
        while written < 256 * 2**20:
            f.write(chunk)
            f.flush()
            written += len(chunk)
except OSError as exc:
    print("REFUSED", type(exc).__name__)
print("WRITTEN", written >> 20)
"""


def _recording_folders(monkeypatch) -> list[str]:
    """The folders of the kernel managers made from now on (the temporary folder is shared with other
    graders: only these are judged, and removed)."""
    folders = []
    made = sandbox.SandboxedKernelManager.__init__
    monkeypatch.setattr(sandbox.SandboxedKernelManager, "__init__",
                        lambda self, *a, **kw: (made(self, *a, **kw), folders.append(self.folder))[0])
    return folders


def test_the_scratch_folder_has_a_size_and_leaves_nothing_behind(monkeypatch):
    """Past its size the kernel's writes fail (ENOSPC) and nothing reaches the grader's disk: the folders it
    nested 2,500 deep are gone with the sandbox, and the grader's temporary folder holds nothing of it."""
    _sandboxed()
    folders = _recording_folders(monkeypatch)
    try:
        out, _ = _run(DEEP_AND_FULL)
    finally:
        left = [f for f in folders if os.path.exists(f)]
        for folder in left:  # today's failure leaves 2,500 folders and 256 MiB
            subprocess.run(["rm", "-rf", folder])
    assert "REFUSED OSError" in out and int(out.split("WRITTEN")[1]) < SCRATCH // MIB, out
    assert folders and left == []


def _may_lower_oom_scores() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE (root mostly does; the 2-core VM's root does not): only
    then may it lower an oom_score_adj below 0, and what it sets is a floor for the process."""
    caps = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")]
    return bool(caps) and bool(int(caps[0], 16) >> 24 & 1)


#: What a kernel can learn about the host's cgroups, and whether it may lower its own oom_score_adj.
CGROUP_VIEW = r"""
import os
found = []
for folder, dirs, files in os.walk("/sys/fs/cgroup"):
    found += [os.path.join(folder, n) for n in dirs + files]
print("CGROUPFS", len(found), [p for p in found if "attnlab" in p][:3])
print("OWN", open("/proc/self/cgroup").read().replace("\n", " | "))
print("OOM", open("/proc/self/oom_score_adj").read().strip())
try:
    open("/proc/self/oom_score_adj", "w").write("0")
    print("LOWERED")
except OSError as exc:
    print("NOT LOWERED", type(exc).__name__)
"""


@pytest.mark.parametrize("fork_server", [False, True], ids=["bwrap", "forked"])
def test_the_hosts_cgroups_are_out_of_sight_and_the_kernel_goes_first(fork_server):
    _sandboxed()
    if fork_server and (os.geteuid() != 0 or sandbox.kernel_accounts()):
        pytest.skip("the fork server serves root graders whose kernels have accounts of their own")

    async def cgroups(km):
        return [str(c) for c in km.cgroups]

    out, cgroups = _run(CGROUP_VIEW, fork_server=fork_server, after=cgroups)
    assert "CGROUPFS 0 []" in out, out
    own = out.split("OWN")[1].split("\n")[0]
    assert "attnlab" not in own and all(line.rstrip().endswith(":/") for line in own.split("|") if line.strip()), own
    assert "OOM 1000" in out, out
    if _may_lower_oom_scores():  # set by a process holding CAP_SYS_RESOURCE, it is also the kernel's floor
        assert "NOT LOWERED" in out, out
    for cgroup in cgroups:
        assert Path(cgroup).name not in out


#: A child that maps a memfd and fills it (768 MiB), then four children that hold 256 MiB each, one after
#: the other: none of it is the kernel's own address space.
MEMORY_HOGS = r"""
import os, subprocess, sys
MEMFD = '''
import mmap, os
size = 768 * 2**20
fd = os.memfd_create("hog")
os.ftruncate(fd, size)
m = mmap.mmap(fd, size)
for held in range(0, size, 2**24):
    m[held:held + 2**24] = b"x" * 2**24
    print((held >> 20) + 16, flush=True)
'''
p = subprocess.run([sys.executable, "-c", MEMFD], capture_output=True, text=True)
print("MEMFD", (p.stdout.split() or ["0"])[-1], "RC", p.returncode)
CHILDREN = '''
import os, time
kids = []
for i in range(4):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        buf = bytearray(256 * 2**20)
        for j in range(0, len(buf), 4096):
            buf[j] = 1
        os.write(w, b"1")
        time.sleep(5)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    kids.append(pid)
print(*[os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids])
'''
p = subprocess.run([sys.executable, "-c", CHILDREN], capture_output=True, text=True)
print("CHILDREN", p.stdout.strip())
"""


def _oom_record(cgroup: Path) -> tuple[int, int]:
    """(out-of-memory kills, peak bytes) of a memory cgroup, v2 or v1."""
    v2 = (cgroup / "memory.events").exists()
    counters = (cgroup / ("memory.events" if v2 else "memory.oom_control")).read_text().split()
    kills = int(counters[counters.index("oom_kill") + 1]) if "oom_kill" in counters else 0
    peak = cgroup / ("memory.peak" if v2 else "memory.max_usage_in_bytes")
    return kills, int(peak.read_text()) if peak.exists() else 0


@pytest.mark.parametrize("fork_server", [False, True], ids=["bwrap", "forked"])
def test_memory_of_children_and_memfd_counts_for_the_kernel(fork_server, monkeypatch):
    """Under a 512 MiB kernel, a memfd's 768 MiB and four children's 256 MiB each are out-of-memory kills
    in its memory cgroup, which never held more than 512 MiB. Which process dies is the kernel's choice:
    on cgroup v1 the largest (the memfd's holder, the children), on v2 the whole sandbox (memory.oom.group),
    which grading restarts like any dead kernel; the grader lives on either way."""
    import queue

    _sandboxed()
    bounded, line = tasks.describe_memory()
    if not bounded:
        pytest.skip(line)
    if fork_server and (os.geteuid() != 0 or sandbox.kernel_accounts()):
        pytest.skip("the fork server serves root graders whose kernels have accounts of their own")
    records = []
    remove = sandbox.SandboxedKernelManager.remove_folders

    def record_then_remove(self):  # read the cgroup's counters before it goes
        if self.memory_cgroup is not None and self.memory_cgroup.exists():
            records.append(_oom_record(self.memory_cgroup))
        remove(self)

    monkeypatch.setattr(sandbox.SandboxedKernelManager, "remove_folders", record_then_remove)
    try:
        out, _ = _run(MEMORY_HOGS, fork_server=fork_server, timeout=90)
    except queue.Empty:  # the kernel was killed with its children (v2's memory.oom.group)
        out = ""
    assert records, "no memory cgroup was read"
    kills, peak = records[0]
    assert kills >= 1 and 0 < peak <= KERNEL_MEMORY, (kills, peak, out)
    if out:  # the kernel lived: its hogs did not
        held = out.split("MEMFD")[1].split()
        assert int(held[0]) < KERNEL_MEMORY // MIB and held[2] == "-9", out
        assert "-9" in out.split("CHILDREN")[1].split(), out


def test_the_grader_asks_the_out_of_memory_killer_to_spare_it():
    """``attnlab autograde`` (tasks.prepare) lowers its own oom_score_adj, and what it starts inherits it;
    a kernel's sandbox starts at KERNEL_OOM_SCORE (tasks.enter)."""
    code = ("from attnlab.grading.sandbox import tasks; import subprocess; tasks.protect_grader(); "
            "print(open('/proc/self/oom_score_adj').read().strip(), "
            "subprocess.run(['cat', '/proc/self/oom_score_adj'], capture_output=True, text=True).stdout.strip(), "
            "subprocess.run(tasks.enter(None, ['cat', '/proc/self/oom_score_adj'], 1000), capture_output=True, "
            "text=True).stdout.strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()
    low = str(tasks.GRADER_OOM_SCORE) if _may_lower_oom_scores() else "0"
    assert out == [low, low, "1000"], out


# ------------------------------------------------------------------- where the controllers are
def _fake_writes(path, text):
    Path(path).write_text(text)


def test_memory_cgroups_on_v1_and_v2(tmp_path, monkeypatch):
    """v1: a memory cgroup of its own under the grader's, memory + swap held to the same figure (no swap);
    v2: the kernel's one cgroup gets memory.max, no swap and group-wide OOM kills, where it offers memory."""
    monkeypatch.setattr(tasks, "write_control", _fake_writes)
    v1 = tmp_path / "v1"
    v1.mkdir()
    folder = tasks.create_memory(256 * MIB, None, candidates=[v1])
    assert folder.parent == v1 and (folder / "memory.limit_in_bytes").read_text() == str(256 * MIB)
    assert (folder / "memory.memsw.limit_in_bytes").read_text() == str(256 * MIB)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("memory pids")
    (v2 / "memory.max").write_text("max")
    assert tasks.create_memory(256 * MIB, v2, candidates=[v1]) == v2
    assert [(v2 / n).read_text() for n in ("memory.max", "memory.swap.max", "memory.oom.group")] == \
        [str(256 * MIB), "0", "1"]
    (v2 / "cgroup.controllers").write_text("pids")  # a v2 cgroup without memory: nothing (one cgroup only)
    assert tasks.create_memory(256 * MIB, v2, candidates=[v1]) is None
    assert tasks.create_memory(0, None, candidates=[v1]) is None


def test_without_a_memory_controller_doctor_and_grading_say_so(monkeypatch):
    from attnlab.tools import doctor

    monkeypatch.setattr(tasks, "create_memory", lambda limit, shared=None, candidates=None: None)
    monkeypatch.setattr(tasks, "own_v2_cgroup", lambda root=None: None)
    tasks.describe_memory.cache_clear()
    try:
        bounded, line = tasks.describe_memory()
        assert not bounded and "memfd" in line and "Fix:" in line, line
        if sandbox.check()[0]:
            check = doctor.check_sandbox()
            assert check.status == doctor.NOTE and line in check.detail
    finally:
        tasks.describe_memory.cache_clear()


#: Through the grader: the files handed in were copied into the scratch tmpfs; the grader's copies and the
#: socket folder (on the grader's disk) take no write; /dev/shm is the sandbox's own.
THROUGH_THE_GRADER = r"""
import json, os
def attempt(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "WRITTEN"
    except OSError as exc:
        return type(exc).__name__
here = os.getcwd()
print(json.dumps({"copied": open("03_flash_backward.ipynb").read(), "given": attempt(os.path.join(here, ".given", "x")),
                  "ipc": attempt(os.path.join(os.path.dirname(here), "ipc", "x")),
                  "scratch": attempt("x"), "shm": attempt("/dev/shm/x")}))
"""


def test_through_the_grader_only_the_sandboxs_own_memory_folders_take_writes(tmp_path, monkeypatch):
    _sandboxed()
    folders = _recording_folders(monkeypatch)
    import json

    import nbformat

    from attnlab.grading.worker import execute

    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "03_flash_backward.ipynb").write_text("{}")
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells.append(nbformat.v4.new_code_cell(THROUGH_THE_GRADER))
    grader = execute.GradingExecute(timeout=60, prewarm=False, guard=True)
    out, _ = grader.preprocess(nb, {"unique_key": "03_flash_backward", "metadata": {"path": str(folder)}})
    seen = json.loads(out.cells[-1].outputs[0]["text"])
    assert seen["copied"] == "{}" and seen["scratch"] == seen["shm"] == "WRITTEN", seen
    assert seen["given"] == "OSError", seen  # EROFS: a read-only bind
    if os.geteuid() == 0 and not sandbox.kernel_accounts():  # the socket folder is taken back from the account
        assert seen["ipc"] == "PermissionError", seen
    assert folders and not any(os.path.exists(f) for f in folders)


def test_without_libseccomp_bindings_doctor_and_grading_say_so(monkeypatch):
    """No bindings (or no libseccomp2): kernels start without the filter, and the grader says so."""
    import builtins

    real_import = builtins.__import__

    def no_seccomp(name, *args, **kw):
        if name in ("seccomp", "pyseccomp"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_seccomp)
    sandbox.seccomp_filter.cache_clear()
    try:
        filtered, line = sandbox.describe_seccomp()
        assert not filtered and sandbox.seccomp_program() == "" and "pyseccomp" in line and "keyring" in line, line
        assert "-c" in sandbox.wrap(["true"], "/tmp/x", None, account=None, hidden=[])  # still starts, unfiltered
    finally:
        monkeypatch.undo()
        sandbox.seccomp_filter.cache_clear()
    assert sandbox.describe_seccomp()[0]


#: keyctl, add_key and request_key through ctypes (what the red team did through numpy's ctypes), then
#: torch at work, as every notebook needs it.
KEYRINGS = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {"x86_64": (250, 248, 249), "aarch64": (219, 217, 218)}[os.uname().machine]
keyctl, add_key, request_key = calls
results = [libc.syscall(keyctl, 0, -4, 1),  # KEYCTL_GET_KEYRING_ID of the user keyring, made if missing
           libc.syscall(add_key, b"user", b"attnlab-note", b"secret", 6, -4),  # into the user keyring
           libc.syscall(request_key, b"user", b"attnlab-note", None, 0)]
print("KEYS", *[errno.errorcode.get(ctypes.get_errno(), "?") if r < 0 else "ALLOWED" for r in results[:1]],
      *["ALLOWED" if r >= 0 else "DENIED" for r in results[1:]])
errs = []
for nr, args in ((keyctl, (0, -4, 1)), (add_key, (b"user", b"n", b"s", 1, -4)), (request_key, (b"user", b"n", None, 0))):
    ctypes.set_errno(0)
    libc.syscall(nr, *args)
    errs.append(errno.errorcode.get(ctypes.get_errno(), "OK"))
print("ERRNO", *errs)
import torch
print("TORCH", float(torch.arange(4.0).sum()))
"""


@pytest.mark.parametrize("how", ["bwrap", "forked", "grader-account"])
def test_kernels_may_not_use_the_kernel_keyrings(how, monkeypatch):
    """Keys live per uid, not per sandbox: a key one kernel adds to its user keyring is there for the next
    kernel of that uid (red team, 2026-12-02). keyctl, add_key and request_key fail with EPERM (a seccomp
    filter, libseccomp's), in kernels started by bwrap, forked by the fork server, and running as the
    grader's own account (a grader that is not root; here ATTNLAB_KERNEL_ACCOUNT=root); torch still works."""
    _sandboxed()
    assert sandbox.describe_seccomp()[0], sandbox.describe_seccomp()[1]
    if how == "forked" and (os.geteuid() != 0 or sandbox.kernel_accounts()):
        pytest.skip("the fork server serves root graders whose kernels have accounts of their own")
    if how == "grader-account":
        monkeypatch.setenv(sandbox.KERNEL_ACCOUNT_ENV, "root")
    out, _ = _run(KEYRINGS, fork_server=how == "forked")
    assert "ERRNO EPERM EPERM EPERM" in out, out
    assert "TORCH 6.0" in out, out


#: Grades a notebook whose cell prints 3 x 256 MiB, then another student's, in one process (GradingExecute
#: as autograde runs it); prints the cells' outputs and notes as JSON, and the process's peak RSS.
FLOOD_GRADER = r"""
import json, resource, sys, tempfile
import nbformat
from attnlab.grading.worker.execute import GradingExecute

def graded(cells):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    for i, (source, test) in enumerate(cells):
        meta = {"nbgrader": {"grade_id": f"t{i}", "grade": True, "locked": True, "solution": False, "points": 1,
                             "schema_version": 3}} if test else {}
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata=meta))
    nb, _ = GradingExecute(timeout=240, prewarm=False, guard=False).preprocess(nb, {"metadata": {"path": tempfile.mkdtemp()}})
    return {"outputs": [[{k: str(o.get(k, ""))[:300] for k in ("output_type", "name", "text", "ename")} for o in c.outputs]
                        for c in nb.cells if c.cell_type == "code"], "notes": nb.metadata.get("attnlab", {}).get("notes", [])}

def peak_mib():
    # VmHWM, this process's own peak since its exec: ru_maxrss also keeps the peak of the process it was
    # forked from (the pytest worker: 929 MiB in a full run, before a single cell was graded)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) >> 10

before = peak_mib()
flood = graded([("x = 1", True),
                ("import sys\nfor _ in range(3):\n    sys.stdout.write('x' * (256 << 20))\n    sys.stdout.flush()", False),
                ("print('still here'); assert x == 1", True),
                ("import sys\nsys.stdout.write('y' * (20 << 20))\nsys.stdout.flush()\nassert x == 2, 'wrong x'", True)])
after_flood = peak_mib()
honest = graded([("print('next student'); assert 1 + 1 == 2", True)])
import os
print(json.dumps({"flood": flood, "honest": honest, "maxrss_mib": peak_mib(),  # the grading process's peak
                  "peaks_mib": {"before": before, "after the flood": after_flood},  # where a failure happened
                  "env": {k: v for k, v in os.environ.items() if k.startswith(("ATTNLAB", "JUPYTER", "ZMQ", "PY"))}}))
"""


def test_a_flood_of_output_never_lands_whole_in_the_grader():
    """A cell printing 3 x 256 MiB took the grader to 1.1 GiB (each message received whole, then cut to
    100,000 characters). The grader's iopub socket refuses a message over its cap (16 MiB) unread and
    connects again: the grading process stays under 400 MiB, the cell's output says it was truncated, the
    notebook's other cells are graded (a failing one still fails), and the next student's notebook is
    untouched."""
    import json

    _sandboxed()
    proc = subprocess.run([sys.executable, "-c", FLOOD_GRADER], capture_output=True, text=True, timeout=560)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    flood, honest = result["flood"], result["honest"]
    texts = ["".join(o["text"] for o in outs) for outs in flood["outputs"]]
    notes = " ".join(n.text for n in notes_of(flood["notes"]))
    assert "Output truncated" in texts[1] and "dropped unread" in notes, flood
    assert "still here" in texts[2], flood
    # the error a test cell raised right after a message over the cap (its message may be lost while the
    # socket connects again) still fails the cell: the kernel's reply says "error"
    assert [[o["ename"] for o in outs if o["ename"]] for outs in flood["outputs"]] == [[], [], [], ["AssertionError"]], flood
    assert "next student" in honest["outputs"][0][0]["text"] and not honest["notes"], honest
    assert result["maxrss_mib"] < 400, {k: result[k] for k in ("maxrss_mib", "peaks_mib", "env")} | {"flood": flood}

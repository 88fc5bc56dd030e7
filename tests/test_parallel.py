"""Grading a class: workers side by side (--jobs), their GPUs and threads, the shared gradebook,
and the synthetic class."""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import asdict

import pytest

from attnlab.grading.host import autograde, parallel
from attnlab.grading.worker import gradebook
from attnlab.grading.host.build import generate_assignment
from attnlab.grading.course import Course, tool_env
from attnlab.grading.host.synthetic import KINDS, format_class, plan_class, write_class

from .conftest import copy_course


# ------------------------------------------------------------------------- the plan (unit level)
def test_workers_take_gpus_round_robin_and_share_the_cores():
    plan = parallel.Plan(jobs=5, cpus=16, gpus=("0", "1"))
    assert [plan.gpu_of(i) for i in range(5)] == ["0", "1", "0", "1", "0"]
    env = plan.env(3, {"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["OMP_NUM_THREADS"] == "3" and env["PATH"] == "/bin"
    assert plan.env(0, {"OMP_NUM_THREADS": "7"})["OMP_NUM_THREADS"] == "7"  # the instructor's choice stays
    cpu_only = parallel.Plan(jobs=4, cpus=2, gpus=())
    assert cpu_only.threads == 1 and "CUDA_VISIBLE_DEVICES" not in cpu_only.env(2, {})
    assert "4 grading workers" in cpu_only.describe() and "no GPU" in cpu_only.describe()


def test_kernels_get_one_thread_per_pool_whatever_the_worker_has(monkeypatch):
    """A grading kernel's tensors are tiny: its thread pools get kernel_threads (1), not the worker's
    share of the cores (a second thread only spin-waits: notes/grading/2026-12-01/profile.md)."""
    from traitlets.config import Config

    from attnlab.grading.worker.execute import GradingExecute

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = GradingExecute()._kernel_env()
    assert all(env[var] == "1" for var in parallel.THREAD_VARS) and env["PATH"] == os.environ["PATH"]
    config = Config()
    config.GradingExecute.kernel_threads = 0  # the instructor's way back to the worker's own setting
    assert GradingExecute(config=config)._kernel_env() is None


def test_grading_byte_compiles_the_package_for_the_kernels():
    """Kernels import the package in a sandbox that writes no .pyc: the grader compiles it first."""
    import importlib.util

    import attnlab.verify
    from attnlab.grading.host.bytecode import compile_package

    pyc = importlib.util.cache_from_source(attnlab.verify.__file__)
    if os.path.exists(pyc):
        os.remove(pyc)
    assert compile_package()
    assert os.path.getmtime(pyc) >= os.path.getmtime(attnlab.verify.__file__)


def test_grading_byte_compiles_kernel_imports_installed_without_byte_code(tmp_path, monkeypatch):
    """A package installed without .pyc (uv's default) is compiled once; one with byte code, or
    read-only (for a user other than root), is left alone."""
    import importlib.util
    import sys

    from attnlab.grading.host.bytecode import compile_kernel_imports

    for name in ("nopyc_pkg", "readonly_pkg"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("X = 1\n")
        (tmp_path / name / "sub.py").write_text("Y = 2\n")
    os.chmod(tmp_path / "readonly_pkg", 0o555)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # find_spec imports nothing either way
    try:
        readonly = [] if os.geteuid() != 0 else ["readonly_pkg"]  # root may write anywhere
        assert compile_kernel_imports(("nopyc_pkg", "readonly_pkg", "no_such_pkg")) == ["nopyc_pkg", *readonly]
        assert os.path.exists(importlib.util.cache_from_source(str(tmp_path / "nopyc_pkg" / "sub.py")))
        assert compile_kernel_imports(("nopyc_pkg",)) == []  # has its byte code now
        assert "nopyc_pkg" not in sys.modules
    finally:
        os.chmod(tmp_path / "readonly_pkg", 0o755)


def test_visible_gpus_are_cuda_ordinals_not_device_minors(tmp_path):
    for name in ("nvidia0", "nvidia2", "nvidia10", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / name).touch()
    assert parallel.visible_gpus({}, dev=tmp_path, table=[]) == ["0", "1", "2"]  # three GPUs, whatever their minors
    assert parallel.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, dev=tmp_path) == ["2", "3"]
    assert parallel.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, dev=tmp_path) == []
    assert parallel.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, dev=tmp_path) == []
    uuid = "GPU-8b7c6d5e-0000-1111-2222-333344445555"
    plan = parallel.plan(3, env={"CUDA_VISIBLE_DEVICES": f"{uuid},7"}, mem_gib=1024)
    assert [plan.gpu_of(i) for i in range(3)] == [uuid, "7", uuid]


def _gpu_host(tmp_path):
    """A host with two GPUs whose device minors (5, 2) are not their indices (nvidia-smi, /proc)."""
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    dev.mkdir()
    for bus, uuid, minor in (("0000:3b:00.0", "GPU-aaaa", 5), ("0000:86:00.0", "GPU-bbbb", 2)):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(f"Model: H200\nGPU UUID: {uuid}\nDevice Minor: {minor}\n")
        (dev / f"nvidia{minor}").touch()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (dev / name).touch()
    return parallel.gpu_table(_SMI_L, proc=proc, dev=dev), dev


#: ``nvidia-smi -L`` of that host.
_SMI_L = ("GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\n"
          "GPU 1: NVIDIA H200 (UUID: GPU-bbbb)\n")


def test_each_worker_gets_its_own_gpu_node_and_cores(tmp_path):
    from attnlab.grading import sandbox

    table, dev = _gpu_host(tmp_path)
    assert [(g.index, g.device) for g in table] == [("0", str(dev / "nvidia5")), ("1", str(dev / "nvidia2"))]
    plan = parallel.Plan(jobs=2, cpus=8, gpus=("0", "1"), cores=tuple(range(8)), table=tuple(table))
    env = plan.env(1, {"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb" and env[sandbox.GPU_DEVICE_ENV] == str(dev / "nvidia2")
    assert sandbox.gpu_nodes(dev, env) == [str(dev / n) for n in ("nvidia2", "nvidiactl", "nvidia-uvm",
                                                                   "nvidia-uvm-tools")]
    assert sandbox.gpu_nodes(dev, {}) == [str(dev / n) for n in ("nvidia-uvm", "nvidia-uvm-tools", "nvidia2",
                                                                 "nvidia5", "nvidiactl")]  # unknown: every GPU
    assert [plan.cores_of(i) for i in range(2)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert env["OMP_NUM_THREADS"] == "4" and "own GPU's device node" in plan.describe()
    unknown = parallel.Plan(jobs=3, cpus=2, gpus=("0",), cores=(0, 1))  # more workers than cores: shared
    assert unknown.env(2, {})["CUDA_VISIBLE_DEVICES"] == "0" and sandbox.GPU_DEVICE_ENV not in unknown.env(2, {})
    assert [unknown.cores_of(i) for i in range(3)] == [(0,), (1,), (0,)]
    (dev / "nvidia2").unlink()  # the driver's minor names no node here: that GPU is not pinned to a node
    assert [g.uuid for g in parallel.gpu_table(_SMI_L, proc=tmp_path / "proc", dev=dev)] == ["GPU-aaaa"]


def test_mig_instances_are_the_cuda_devices_named_by_their_uuid(tmp_path):
    """A GPU in MIG mode is no CUDA device: its instances are, by MIG- UUID (CUDA ignores the parent's),
    each with the parent's device node; a GPU beside it without MIG stays as it is."""
    _, dev = _gpu_host(tmp_path)
    smi = ("GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\n"
           "  MIG 3g.71gb     Device  0: (UUID: MIG-1111)\n"
           "  MIG 3g.71gb     Device  1: (UUID: MIG-2222)\n"
           "GPU 1: NVIDIA H200 (UUID: GPU-bbbb)\n")
    table = parallel.gpu_table(smi, proc=tmp_path / "proc", dev=dev)
    assert [(g.index, g.uuid, g.device) for g in table] == [
        ("0:0", "MIG-1111", str(dev / "nvidia5")), ("0:1", "MIG-2222", str(dev / "nvidia5")),
        ("1", "GPU-bbbb", str(dev / "nvidia2"))]
    gpus = parallel.visible_gpus({}, dev=dev, table=table)
    assert gpus == ["0:0", "0:1", "1"]
    plan = parallel.Plan(jobs=3, cpus=6, gpus=tuple(gpus), cores=tuple(range(6)), table=tuple(table))
    assert [plan.env(i, {})["CUDA_VISIBLE_DEVICES"] for i in range(3)] == ["MIG-1111", "MIG-2222", "GPU-bbbb"]
    assert "MIG instances by UUID" in plan.describe()


def test_notebooks_without_gpu_cases_get_no_gpu_node_and_no_cuda_device(tmp_path, monkeypatch):
    """01-03 and 06 check everything on the CPU: their sandbox binds no GPU node and their environment
    names no CUDA device, so they grade as on a CPU host; the spare follows the submission's next notebook."""
    from attnlab.grading.worker import execute
    from attnlab.grading import sandbox
    from attnlab.grading.course import uses_gpu
    from attnlab.grading.sandbox import bwrap

    assert [uses_gpu(n) for n in ("01_online_softmax", "02_flash_forward", "03_flash_backward",
                                  "06_scaling_sweep")] == [False] * 4
    assert all(uses_gpu(n) for n in ("04_triton_softmax", "05_triton_flash", "09_tuning_and_fp8",
                                     "99_triton_probe", "notes", ""))
    monkeypatch.setattr(bwrap, "gpu_nodes", lambda *a, **k: ["/dev/nvidia0", "/dev/nvidiactl"])  # as wrap finds it
    assert "/dev/nvidia0" in sandbox.wrap(["python"], str(tmp_path), None, hidden=[])
    assert "/dev/nvidia0" not in sandbox.wrap(["python"], str(tmp_path), None, hidden=[], gpu=False)
    for name in ("01_online_softmax", "03_flash_backward", "04_triton_softmax", "06_scaling_sweep"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    ep = execute.GradingExecute()
    plan = {name: ep._gpu_plan({"unique_key": name, "metadata": {"path": str(tmp_path)}})
            for name in ("01_online_softmax", "03_flash_backward", "04_triton_softmax", "06_scaling_sweep")}
    assert plan == {"01_online_softmax": (False, False), "03_flash_backward": (False, True),
                    "04_triton_softmax": (True, False), "06_scaling_sweep": (False, False)}  # then the next student's 01
    assert ep._gpu_plan({}) == (True, True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")
    monkeypatch.delenv("ATTNLAB_DEVICE", raising=False)
    hidden, shown = ep._kernel_env(False), ep._kernel_env(True)
    assert hidden["CUDA_VISIBLE_DEVICES"] == "" and hidden["ATTNLAB_DEVICE"] == "cpu"
    assert shown["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa" and "ATTNLAB_DEVICE" not in shown


def test_default_jobs_one_per_gpu_and_capped_by_kernel_memory():
    assert parallel.default_jobs(cpus=64, gpus=4, mem_gib=512, kernel_gib=8) == 4  # one per GPU
    assert parallel.default_jobs(cpus=64, gpus=8, mem_gib=40, kernel_gib=8) == 5   # 5 x 8 GiB fit in 40
    assert parallel.default_jobs(cpus=16, gpus=0, mem_gib=64, kernel_gib=8) == 8   # CPU host: per core, capped
    assert parallel.default_jobs(cpus=2, gpus=0, mem_gib=8, kernel_gib=0) == 2     # no limit: 2 GiB each
    assert parallel.default_jobs(cpus=1, gpus=0, mem_gib=1, kernel_gib=8) == 1
    capped = parallel.plan(16, env={parallel.KERNEL_MEMORY_ENV: "8", "CUDA_VISIBLE_DEVICES": ""}, mem_gib=20)
    assert capped.jobs == 2 and "--jobs 16 capped to 2" in capped.note and "8 GiB" in capped.note
    assert parallel.plan(2, env={"CUDA_VISIBLE_DEVICES": ""}, mem_gib=20).note == ""
    with pytest.raises(ValueError, match="at least 1"):
        parallel.plan(0)


@pytest.mark.parametrize("cores,jobs", [(7, 4), (5, 2), (3, 2), (8, 3), (6, 6)])
def test_odd_core_counts_leave_no_core_idle(cores, jobs):
    """Each worker gets a disjoint slice and together they cover every core (7 cores, 4 workers:
    2+2+2+1, not 1 each with three cores idle); slices differ by one core at most."""
    mask = tuple(range(0, 2 * cores, 2))  # a taskset mask with gaps
    plan = parallel.Plan(jobs=jobs, cpus=cores, gpus=(), cores=mask)
    slices = [plan.cores_of(i) for i in range(jobs)]
    assert sorted(c for s in slices for c in s) == list(mask)
    assert max(map(len, slices)) - min(map(len, slices)) <= 1
    sizes = sorted({len(s) for s in slices})
    assert f"pinned to {'-'.join(map(str, sizes))} core" in plan.describe()


def test_a_containers_memory_and_cpu_limits_cap_the_default(tmp_path):
    """A pod's limits (16 GiB, 2 CPUs) on a 512 GiB, 64-core node: /proc/meminfo and the affinity
    mask show the node, the cgroup files the pod."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {512 * 2**20} kB\nMemFree: 1 kB\n")
    v2, v1, none = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    for d in (v2, v1 / "memory", v1 / "cpu", none):
        d.mkdir(parents=True)
    (v2 / "memory.max").write_text(f"{16 * 2**30}\n")
    (v2 / "cpu.max").write_text("200000 100000\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text(f"{16 * 2**30}\n")
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    for root in (v2, v1):
        assert parallel.memory_gib(meminfo, root) == 16
        assert parallel.cpu_budget(64, root) == 2
    assert parallel.memory_gib(meminfo, none) == 512 and parallel.cpu_budget(64, none) == 64
    (v2 / "memory.max").write_text("max\n")
    (v2 / "cpu.max").write_text("max 100000\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    for root in (v2, v1):
        assert parallel.memory_gib(meminfo, root) == 512 and parallel.cpu_budget(64, root) == 64


# ------------------------------------------------------------------------- slots (a stand-in worker)
_FAKE_WORKER = r"""
import json, os, subprocess, sys, time
out = os.fdopen(os.dup(1), "w")
if os.environ.get("CUDA_VISIBLE_DEVICES") == "broken":
    sys.exit(3)  # this slot's worker cannot start
root = sys.argv[1]
for job in (line.strip() for line in sys.stdin):
    out.write(json.dumps({"start": job}) + "\n"); out.flush()
    log = ""
    if job.endswith("/hang-once"):  # starved in the parallel pass, fine alone
        marker = os.path.join(root, job.replace("/", "_"))
        if not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(60)
    elif job.endswith("/affinity"):  # what a kernel this worker starts may run on
        log = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                             capture_output=True, text=True).stdout
        time.sleep(0.5)
    out.write(json.dumps({"done": job, "success": True, "log": log}) + "\n"); out.flush()
"""


@pytest.fixture
def fake_worker(monkeypatch):
    monkeypatch.setattr(autograde.Slot, "WORKER", (__import__("sys").executable, "-c", _FAKE_WORKER))


def test_slot_kernels_run_on_the_slots_own_cores(tmp_path, fake_worker):
    cores = parallel.usable_cores()
    if len(cores) < 2:
        pytest.skip("needs two cores")
    plan = parallel.Plan(jobs=2, cpus=len(cores), gpus=(), cores=cores)
    spans = {}
    out = autograde.run_worker(Course(tmp_path), ["a/affinity", "b/affinity"], 30, workers=plan, spans=spans)
    for job in ("a/affinity", "b/affinity"):
        assert out[job][1].strip() == str(list(plan.cores_of(spans[job][0])))
    assert plan.cores_of(0) != plan.cores_of(1) and not set(plan.cores_of(0)) & set(plan.cores_of(1))


def test_a_broken_slot_retires_and_the_others_grade_its_students(tmp_path, fake_worker):
    plan = parallel.Plan(jobs=2, cpus=2, gpus=("broken", "fine"), cores=parallel.usable_cores()[:1] * 2, pin=False)
    jobs = [f"s{i}/ok" for i in range(4)]
    out = autograde.run_worker(Course(tmp_path), jobs, 30, workers=plan)
    assert {j: o[0] for j, o in out.items()} == {j: "ok" for j in jobs}
    lone = parallel.Plan(jobs=1, cpus=1, gpus=("broken",), pin=False)  # no slot left: they fail, with the reason
    out = autograde.run_worker(Course(tmp_path), jobs[:2], 30, workers=lone)
    assert all(o[0] == "failed" and "exited (status 3)" in o[1] for o in out.values())


def test_a_timeout_beside_other_slots_is_graded_again_alone(tmp_path, fake_worker, monkeypatch):
    """The notebook that timed out while another slot ran is graded again on its own; that result
    counts and says so; with one worker nothing is graded twice."""
    from attnlab.grading import sandbox
    from attnlab.grading.host import submissions

    course = Course(tmp_path)
    for s, n in (("slow", "hang-once"), ("quick", "ok")):
        (course.submitted / s / course.assignment).mkdir(parents=True)
        (course.submitted / s / course.assignment / f"{n}.ipynb").touch()
    monkeypatch.setattr(sandbox, "require", lambda allow_unsafe=False: "")
    monkeypatch.setattr(submissions, "normalize_submission", lambda folder, names: {})
    graded = []

    def evaluate(course, student, notebook, status, log, seconds, limit_s):
        graded.append((student, status))
        ok = status == "ok"
        return autograde.NotebookResult(student, notebook, "graded" if ok else status, points=1.0 * ok,
                                        max_points=1.0, reason="" if ok else "grading ran past 2 s")

    monkeypatch.setattr(autograde, "evaluate_notebook", evaluate)
    jobs = [("slow", "hang-once"), ("quick", "ok")]
    plan = parallel.Plan(jobs=2, cpus=1, gpus=(), pin=False)
    slow, quick = autograde.autograde_jobs(course, jobs, limit_s=2, workers=plan)
    assert graded.count(("slow", "timeout")) == 1 and ("slow", "ok") in graded and len(graded) == 3
    assert slow.status == "graded" and slow.points == 1
    assert any("graded again alone" in n and "timeout" in n for n in slow.notes)
    assert quick.points == 1 and not quick.notes
    (tmp_path / "slow_hang-once").unlink()
    graded.clear()
    slow, _ = autograde.autograde_jobs(course, jobs, limit_s=2, workers=parallel.Plan(jobs=1, cpus=1, gpus=()))
    assert slow.status == "timeout" and len(graded) == 2  # alone already: no second run


# ------------------------------------------------------------------------- the shared gradebook
def _write_students(url: str, tag: str) -> None:
    """A grading process's gradebook writes: forked from the test (nbgrader already imported)."""
    from nbgrader.api import Gradebook

    gradebook.wait_for_gradebook_locks()
    for i in range(15):
        with Gradebook(url, "c") as gb:
            gb.update_or_create_student(f"{tag}-{i}", first_name="x")
            gb.update_or_create_student(f"{tag}-{i}", first_name="y")


def test_concurrent_gradebook_writers_wait_and_lose_nothing(tmp_path, monkeypatch):
    """Two processes writing one SQLite gradebook at once: every row arrives, and the grading
    processes' connections wait for locks (without a busy timeout most of these writes fail with
    "database is locked": measured 363 of 450 with three writers)."""
    import multiprocessing

    from nbgrader.api import Gradebook
    from sqlalchemy import text

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    monkeypatch.setenv("PATH", tool_env()["PATH"])  # nbgrader shells out to alembic to create it
    Gradebook(url, "c").close()
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=_write_students, args=(url, tag)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    gradebook.wait_for_gradebook_locks()
    with Gradebook(url, "c") as gb:
        names = {s.id for s in gb.students}
        busy_ms = gb.db.execute(text("PRAGMA busy_timeout")).scalar()
    assert names == {f"{t}-{i}" for t in "ab" for i in range(15)}
    assert busy_ms == gradebook.GRADEBOOK_BUSY_S * 1000


# ------------------------------------------------------------------------- --jobs: same grades
def _comparable(result) -> dict:
    d = asdict(result)
    d.pop("seconds")
    return d


def test_parallel_workers_grade_exactly_like_one(tmp_path, monkeypatch):
    """Three submissions of notebook 01 graded by one worker, then by two at once (checked to
    overlap): same points, reasons, notes and needs-review, same gradebook rows, same order."""
    from nbgrader.api import Gradebook

    c = copy_course(tmp_path)
    generate_assignment(c)
    written = write_class(c, 3, kinds=("reference", "mistake", "blank"))
    students = [s.student for s in written]
    jobs = [(s, "01_online_softmax") for s in students]

    def gradebook():
        with Gradebook(f"sqlite:///{c.root / 'gradebook.db'}", "attention-kernels") as gb:
            return sorted((g.student.id, g.name, g.auto_score, g.needs_manual_grade)
                          for s in students for g in gb.find_submission_notebook(
                              "01_online_softmax", c.assignment, s).grades)

    serial = autograde.autograde_jobs(c, jobs, workers=1)
    serial_rows = gradebook()
    with Gradebook(f"sqlite:///{c.root / 'gradebook.db'}", "attention-kernels") as gb:
        for s in students:  # nothing stale may pass for a parallel grade
            gb.remove_submission(c.assignment, s)
    shutil.rmtree(c.autograded)

    spans, real = [], autograde.Slot._grade

    def timed(self, job):
        start = time.monotonic()
        graded = real(self, job)
        spans.append((threading.get_ident(), start, time.monotonic()))
        return graded

    monkeypatch.setattr(autograde.Slot, "_grade", timed)
    both = autograde.autograde_jobs(c, jobs, workers=2)
    assert [_comparable(r) for r in both] == [_comparable(r) for r in serial]
    assert gradebook() == serial_rows
    assert [r.points for r in serial] == [s.expected - (49 - 6) if s.expected else 0 for s in written]
    assert len({t for t, _, _ in spans}) == 2
    (_, a0, a1), (_, b0, b1) = sorted(spans, key=lambda s: s[1])[:2]
    assert b0 < a1, "the two workers never graded at the same time"


# ------------------------------------------------------------------------- the synthetic class
def test_synthetic_class_mixes_every_kind_with_stable_names(course):
    first = plan_class(course, 12)
    assert [k for k, _ in first[:5]] == list(KINDS)
    ids = lambda plan: [(k, getattr(item, "id", None)) for k, item in plan]  # noqa: E731
    assert ids(first) == ids(plan_class(course, 12))  # deterministic
    items = [item.id for k, item in first if k == "mistake"]
    assert len(items) == len(set(items))  # each kind cycles through its own list
    with pytest.raises(ValueError, match="unknown kinds"):
        plan_class(course, 3, ("reference", "nonsense"))


def test_synthetic_class_writes_submissions_and_expected_totals(tmp_path, course):
    c = copy_course(tmp_path)
    written = write_class(c, 10)
    assert [s.student for s in written][:3] == ["synthetic-001-reference",
                                               f"synthetic-002-{written[1].kind}-{written[1].student.split('-', 3)[3]}",
                                               written[2].student]
    for s in written:
        folder = c.submitted / s.student / c.assignment
        assert folder.is_dir() and any(folder.iterdir())
    by_kind = {s.kind: s for s in written}
    assert by_kind["reference"].expected == by_kind["variant"].expected == 49
    assert by_kind["blank"].expected == 0 and 0 < by_kind["mistake"].expected < 49
    names = {p.name for p in (c.submitted / by_kind["reference"].student / c.assignment).iterdir()}
    assert names == {f"{n}.ipynb" for n in c.notebook_names()}
    text = format_class(c, written)
    assert "synthetic-001-reference" in text and "49/49" in text and "kinds: 2 reference" in text


def test_a_graded_notebook_read_back_says_what_a_busy_machine_may_have_caused(tmp_path):
    """The kinds and error types the kernel and the executor wrote, read back from an autograded notebook
    as the host reads it (evaluate.grader_notes, cell_errors, contention_in)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from attnlab.core.outcome import RAN_ALL_ALONG
    from attnlab.grading.host.evaluate import CellResult, cell_errors, contention_in, grader_notes

    def graded(gid, ename, evalue):
        cell = new_code_cell("check()", metadata={"nbgrader": {"grade": True, "grade_id": gid, "points": 1}})
        cell.outputs = [new_output("error", ename=ename, evalue=evalue, traceback=[])]
        return cell

    def read_back(notes, cells):
        nb = new_notebook(cells=cells, metadata={"attnlab": {"notes": notes}})
        path = tmp_path / "nb.ipynb"
        nbformat.write(nb, path)
        errors = cell_errors(path)
        lost = [CellResult(gid, 0.0, 1.0, reason, ename) for gid, (ename, reason) in errors.items()]
        return contention_in(grader_notes(path), lost)

    wrong = graded("t-wrong", "AssertionError", "o differs from the reference (did not finish within...)")
    waited = graded("t-waited", "CallTimeoutError", "flash_forward did not finish within 20 s")
    spun = graded("t-spun", "CPUBoundTimeoutError", f"flash_forward did not finish within 20 s{RAN_ALL_ALONG}")
    assert read_back([], [wrong]) == ""
    assert read_back([], [wrong, spun]) == ""
    assert read_back([], [wrong, waited]) == "CallTimeoutError: flash_forward did not finish within 20 s"
    kernel_died = {"kind": "contended", "text": "cell 't-x': the kernel died (reworded)"}
    assert read_back(["the grader undid: x", kernel_died], [wrong]) == "cell 't-x': the kernel died (reworded)"
    # the words alone decide nothing: a plain note that says it
    assert read_back(["cell 't-x': the kernel died while running this cell"], [wrong]) == ""


def test_what_another_slot_can_cause_is_told_apart_from_a_plain_wrong_answer(monkeypatch):
    from attnlab.core.outcome import CallTimeoutError, CPUBoundTimeoutError, Kind, contended_note
    from attnlab.grading.host.autograde import NotebookResult, contended, overlapped
    from attnlab.grading.host.contention import error_contended
    from attnlab.grading.host.evaluate import failure

    assert contended(NotebookResult("s", "n", "timeout"))
    assert contended(NotebookResult("s", "n", "graded", contention="a cell ran past its limit"))
    assert not contended(NotebookResult("s", "n", "graded", notes=["cell 'test-x': the kernel died (...)"]))
    # a failed cell by its error's type, whatever its message says
    assert error_contended("OutOfMemoryError", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not error_contended("AssertionError", "AssertionError: o differs from the reference (rel. error 0.9)")
    assert not error_contended("AssertionError", "AssertionError: did not finish within 60 s (out of memory)")
    # a test's own wall-clock limit on one call (attnlab.checks.time_limit): starved by another slot's kernel,
    # unless it ran on the CPU all along (alone it would only time out again)
    assert error_contended(CallTimeoutError.__name__) and not error_contended(CPUBoundTimeoutError.__name__)
    assert contended_note("reworded for people").kind is Kind.CONTENDED
    # a notebook whose grading stopped: by what nbclient and the worker reported
    assert failure("nbclient.exceptions.DeadKernelError: Kernel died")[1] is Kind.CONTENDED
    assert failure("the grading process died\n")[1] is Kind.CONTENDED
    assert failure("Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory.")[1] is Kind.CONTENDED
    assert failure("Traceback ...\nKeyError: 'grade_id'")[1] is Kind.INFO
    # GPU memory another slot took, where the library's error has no type of its own: by its fixed text
    assert error_contended("AcceleratorError", "AcceleratorError: CUDA error: out of memory")
    assert error_contended("RuntimeError", "RuntimeError: Triton Error [CUDA]: out of memory")
    assert failure("Traceback ...\ntorch.AcceleratorError: CUDA error: out of memory")[1] is Kind.CONTENDED
    assert not error_contended("RuntimeError", "RuntimeError: DefaultCPUAllocator: can't allocate memory")
    assert not error_contended("MemoryError", "MemoryError: ")  # the kernel's own memory limit
    # a full process table: another slot's doing only where no per-kernel task bound is in force
    from attnlab.grading.sandbox import tasks

    for bounded in (True, False):
        monkeypatch.setattr(tasks, "describe", lambda b=bounded: (b, ""))
        assert error_contended("RuntimeError", "RuntimeError: can't start new thread") is not bounded
        assert error_contended("BlockingIOError", "BlockingIOError: [Errno 11] Resource temporarily "
                                                  "unavailable") is not bounded
        assert (failure("Traceback ...\nRuntimeError: can't start new thread")[1] is Kind.CONTENDED) is not bounded
    spans = {"a/1": (0, 0.0, 5.0), "b/1": (1, 4.0, 6.0), "a/2": (0, 5.0, 7.0), "c/1": (1, 8.0, 9.0)}
    assert overlapped(spans) == {"a/1", "b/1", "a/2"}  # c/1 ran alone; a/1 and a/2 share slot 0

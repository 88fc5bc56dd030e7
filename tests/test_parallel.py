"""Grading a class: workers side by side (--jobs), their GPUs and threads, the shared gradebook,
and the synthetic class."""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import asdict

import pytest

from attnlab.grading import autograde, parallel
from attnlab.grading.build import generate_assignment
from attnlab.grading.course import Course, tool_env
from attnlab.grading.synthetic import KINDS, format_class, plan_class, write_class

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

    from attnlab.grading.execute import GradingExecute

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
    from attnlab.grading.bytecode import compile_package

    pyc = importlib.util.cache_from_source(attnlab.verify.__file__)
    if os.path.exists(pyc):
        os.remove(pyc)
    assert compile_package()
    assert os.path.getmtime(pyc) >= os.path.getmtime(attnlab.verify.__file__)


def test_visible_gpus_follow_cuda_visible_devices_then_device_nodes(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidia10", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / name).touch()
    assert parallel.visible_gpus({}, dev=tmp_path) == ["0", "1", "10"]
    assert parallel.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, dev=tmp_path) == ["2", "3"]
    assert parallel.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, dev=tmp_path) == []
    assert parallel.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, dev=tmp_path) == []
    uuid = "GPU-8b7c6d5e-0000-1111-2222-333344445555"
    plan = parallel.plan(3, env={"CUDA_VISIBLE_DEVICES": f"{uuid},7"})
    assert [plan.gpu_of(i) for i in range(3)] == [uuid, "7", uuid]


def test_default_jobs_one_per_core_capped_by_memory_and_gpus():
    assert parallel.default_jobs(cpus=2, gpus=0, mem_gib=8) == 2
    assert parallel.default_jobs(cpus=16, gpus=0, mem_gib=6) == 3
    assert parallel.default_jobs(cpus=128, gpus=1, mem_gib=512) == parallel.WORKERS_PER_GPU
    assert parallel.default_jobs(cpus=1, gpus=0, mem_gib=1) == 1
    with pytest.raises(ValueError, match="at least 1"):
        parallel.plan(0)


# ------------------------------------------------------------------------- the shared gradebook
def _write_students(url: str, tag: str) -> None:
    """A grading process's gradebook writes: forked from the test (nbgrader already imported)."""
    from nbgrader.api import Gradebook

    parallel.wait_for_gradebook_locks()
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
    parallel.wait_for_gradebook_locks()
    with Gradebook(url, "c") as gb:
        names = {s.id for s in gb.students}
        busy_ms = gb.db.execute(text("PRAGMA busy_timeout")).scalar()
    assert names == {f"{t}-{i}" for t in "ab" for i in range(15)}
    assert busy_ms == parallel.GRADEBOOK_BUSY_S * 1000


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

    spans, real = [], autograde._Slot._grade

    def timed(self, job):
        start = time.monotonic()
        real(self, job)
        spans.append((threading.get_ident(), start, time.monotonic()))

    monkeypatch.setattr(autograde._Slot, "_grade", timed)
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

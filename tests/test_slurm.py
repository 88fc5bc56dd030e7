"""deploy/slurm-autograde.sh on a real Slurm scheduler, and the Kubernetes Job file against the Job schema.

A throwaway one-node cluster (tests/slurmcluster.py) runs the script as an array job of three shards
into a throwaway PostgreSQL gradebook; one array task is cancelled with scancel while it grades and is
submitted again alone; the class report and nbgrader's export must then equal a serial run's. Three
students, notebook 01 only, to stay cheap.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attnlab.grading.host import shards
from attnlab.grading.worker import gradebook
from attnlab.grading.host.build import generate_assignment
from attnlab.grading.course import Course

from . import slurmcluster
from .conftest import copy_course, environment, run_cli
from .test_gradebook import NB, _cells, _descendants, _export, _write_class

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "slurm-autograde.sh"
#: student -> what they submit (as in test_gradebook); crc32 puts one in each shard of three, in this
#: order. Shard 0's is cancelled while its kernel grades.
STUDENTS = {"forgot-rescale": "01-no-rescale", "blank": "release", "solution": ""}
SHARDS = 3
#: What the test asks of the scheduler on top of the script's own #SBATCH lines (the command line wins):
#: one core per shard, so two shards run at once on a two-core machine, and memory any machine has.
SBATCH = ("--cpus-per-task=1", "--mem=1G", f"--export=ALL,SHARDS={SHARDS}")
#: What the script is given after its name: passed on to `attnlab autograde` (one notebook, one worker).
AUTOGRADE_ARGS = ("--notebook", NB, "--jobs", "1")


@pytest.fixture(scope="module")
def slurm():
    """A one-node Slurm cluster for this module, stopped afterwards."""
    if missing := slurmcluster.missing():
        pytest.skip(f"Slurm or MUNGE is not installed ({', '.join(missing)} not found); as root: "
                    "bash .ci/install-slurm, or apt-get install slurm-wlm munge")
    cluster = slurmcluster.SlurmCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@dataclass
class SlurmRun:
    course: Course
    serial: dict
    serial_export: list[dict]
    states: dict[str, str]           # the array's tasks, after the cancel
    rerun_states: dict[str, str]     # the resubmitted task
    cancelled_tree: list[int]        # the cancelled task's processes while it graded
    survivors: list[int]             # those still alive after the cancel
    logs: dict[str, str]
    sharded: dict
    sharded_export: list[dict]
    report: str
    seconds: dict[str, float] = field(default_factory=dict)


def _task_process(job: str, task: int) -> int | None:
    """The pid of ``attnlab autograde`` that array task ``job_task`` runs (the script execs it)."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = dict(v.split("=", 1) for v in environ.read_bytes().decode(errors="replace").split("\0") if "=" in v)
            cmd = (environ.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (env.get("SLURM_ARRAY_JOB_ID") == job and env.get("SLURM_ARRAY_TASK_ID") == str(task)
                and b"autograde" in cmd):
            return int(environ.parent.name)
    return None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _wait_for(what: str, ready, timeout: float, cluster) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s\n{cluster.logs()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def slurm_run(slurm, postgres, tmp_path_factory) -> SlurmRun:
    start = time.perf_counter()
    tmp = tmp_path_factory.mktemp("slurm")
    course = copy_course(tmp)
    (course.root / ".venv").symlink_to(sys.prefix)  # the script puts the course's .venv/bin on PATH
    _write_class(course, STUDENTS)
    assert [shards.shard_of(s, SHARDS) for s in STUDENTS] == [0, 1, 2], "STUDENTS no longer split one per shard"
    seconds = {}

    # the reference: one process, serially, into SQLite
    with environment({gradebook.DB_URL_ENV: ""}):
        generate_assignment(course, "--notebook", NB)
        code, out = run_cli(course, "autograde", "--notebook", NB, "--report-json", str(tmp / "serial.json"))
        assert code == 0, out
        serial_export = _export(course, tmp / "serial.csv")
    seconds["serial"] = time.perf_counter() - start

    # the array job, into PostgreSQL, as the script's header says: register the assignment, then sbatch
    url = postgres.create_database("attention_kernels")
    # the job must find attnlab through the course's .venv (the script's PATH), not the test's interpreter
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent)
    env = {gradebook.DB_URL_ENV: url, "PATH": path, "PYTHONUNBUFFERED": "1"}
    (course.root / "logs").mkdir()
    logs: dict[str, str] = {}
    with environment({gradebook.DB_URL_ENV: url}):
        generate_assignment(course, "--notebook", NB)
        t = time.perf_counter()
        job = slurm.run("sbatch", "--parsable", "--array=0-2", *SBATCH, str(SCRIPT), *AUTOGRADE_ARGS,
                        env=env, cwd=course.root).stdout.strip()
        log0 = course.root / "logs" / f"autograde-{job}_0.out"

        tree: list[int] = []

        def kernel_running() -> bool:  # task 0 runs its student's notebook in a sandboxed kernel
            main = _task_process(job, 0)
            if main is None:
                return False
            # the tree is kept as seen with its kernel: read again later, the kernel may have been
            # between two sandboxes (a loaded 2-core CI machine saw only the shard and its worker)
            tree[:] = [main, *_descendants(main)]
            # a kernel's sandbox, not the start-up's check that bwrap works (sandbox.starts_as: its
            # scratch folder is named for it; seen in CI as a tree of two, the shard and that check)
            return any(b"bwrap" in c and b"attnlab-sandbox-check-" not in c for c in map(_cmdline, tree))

        _wait_for("task 0's sandboxed kernel", kernel_running, 600, slurm)
        slurm.run("scancel", f"{job}_0")
        states = slurm.wait_job(job, timeout=600)
        seconds["array job"] = time.perf_counter() - t
        # slurmd signals every process of the task (SIGTERM, SIGKILL after KillWait = 5 s): give it that
        deadline = time.monotonic() + 20
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.5)
        survivors = _alive(tree)
        logs["cancelled"] = log0.read_text()

        # submitted again alone, as the script's header says
        t = time.perf_counter()
        again = slurm.run("sbatch", "--parsable", "--array=0", *SBATCH, str(SCRIPT), *AUTOGRADE_ARGS,
                          env=env, cwd=course.root).stdout.strip()
        rerun_states = slurm.wait_job(again, timeout=600)
        seconds["resubmitted task"] = time.perf_counter() - t
        for log in sorted((course.root / "logs").glob("*.out")):
            logs[log.name] = log.read_text()
        code, report = run_cli(course, "report")
        assert code == 0, report + json.dumps(logs, indent=1)
        sharded = _cells(course.root / "grading_report.json")
        sharded_export = _export(course, tmp / "postgres.csv")
    seconds["total"] = time.perf_counter() - start
    print({k: f"{v:.0f} s" for k, v in seconds.items()})
    return SlurmRun(course, _cells(tmp / "serial.json"), serial_export, states, rerun_states, tree, survivors,
                    logs, sharded, sharded_export, report, seconds)


def test_the_array_job_ran_on_the_scheduler_and_one_task_was_cancelled(slurm_run):
    job = next(iter(slurm_run.states)).split("_")[0]
    assert slurm_run.states == {f"{job}_0": "CANCELLED", f"{job}_1": "COMPLETED", f"{job}_2": "COMPLETED"}, \
        slurm_run.logs
    assert list(slurm_run.rerun_states.values()) == ["COMPLETED"], slurm_run.logs
    # cancelled while it graded its student: no graded line, no report
    cancelled = slurm_run.logs["cancelled"]
    assert "Autograding, one notebook" in cancelled and "CANCELLED" in cancelled, cancelled
    assert not re.search(rf"^\s+forgot-rescale\s+{NB}\s", cancelled, re.MULTILINE), cancelled


def test_the_cancelled_task_left_no_process_behind(slurm_run):
    """scancel ends the shard, its grading worker and the kernel it was running, as a lost node would."""
    assert len(slurm_run.cancelled_tree) >= 3, "the shard's worker and kernel were not found"
    assert slurm_run.survivors == []


def test_grades_after_the_resubmitted_task_equal_the_serial_run(slurm_run):
    _, points, full, _ = slurm_run.serial[("solution", NB)]
    assert points == full > 0 and slurm_run.serial[("blank", NB)][1] == 0  # the classes differ: the test can fail
    assert "every submitted student was graded by exactly one shard" in slurm_run.report
    assert slurm_run.sharded == slurm_run.serial
    assert len(slurm_run.sharded_export) == len(STUDENTS)
    assert slurm_run.sharded_export == slurm_run.serial_export


# ------------------------------------------------------------------------------------ Kubernetes
#: The oldest Kubernetes the Job file is written for (its securityContext.appArmorProfile is 1.30's).
K8S_OLDEST = "1.30.0"


def test_kubernetes_job_file_is_a_valid_batch_v1_job():
    """kubernetes-validate checks the file against the Job schema generated from Kubernetes' own OpenAPI
    definitions, strictly (an unknown or misspelt field is an error, as `kubectl apply` reports it)."""
    kv = pytest.importorskip("kubernetes_validate", reason="the test extra is not installed (make dev)")
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load((ROOT / "deploy" / "k8s-autograde-job.yaml").read_text())
    for version in (K8S_OLDEST, kv.latest_version()):
        kv.validate(job, version, strict=True)
    broken = json.loads(json.dumps(job))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilites"] = {"add": ["SYS_ADMIN"]}
    with pytest.raises(kv.ValidationError, match="capabilites"):
        kv.validate(broken, K8S_OLDEST, strict=True)
    with pytest.raises(kv.ValidationError, match="appArmorProfile"):  # the version the file names is right
        kv.validate(job, "1.29.0", strict=True)

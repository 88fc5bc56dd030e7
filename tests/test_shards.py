"""Sharded grading without grading anything: the partition, the merge of shard reports, the gradebook
URL and its secrecy, and the deploy files. (Grading in shards into PostgreSQL: tests/test_gradebook.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from attnlab.grading import sandbox
from attnlab.grading.worker import gradebook
from attnlab.grading.host import shards
from attnlab.grading.host.autograde import CellResult, NotebookResult, write_report_json
from attnlab.grading.course import Course

from .conftest import environment, run_cli

ROOT = Path(__file__).resolve().parents[1]
NAMES = [f"student-{i:03d}" for i in range(60)] + ["reference", "blank", "Ødegård-4711", "李雷-12"]


# ------------------------------------------------------------------------------------ partition
@pytest.mark.parametrize("text, want", [("0/1", (0, 1)), ("3/8", (3, 8)), (" 7 / 8 ", (7, 8))])
def test_parse_shard(text, want):
    assert shards.parse_shard(text) == want


@pytest.mark.parametrize("text, why", [("8/8", "0 to N-1 = 7"), ("1/0", "at least 1"), ("1-4", "expected i/N"),
                                       ("-1/4", "expected i/N"), ("", "expected i/N"), ("a/b", "expected i/N")])
def test_parse_shard_names_what_is_wrong(text, why):
    with pytest.raises(ValueError, match=why):
        shards.parse_shard(text)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16])
def test_every_student_is_in_exactly_one_shard(n):
    parts = [shards.select(NAMES, i, n) for i in range(n)]
    assert sorted(s for part in parts for s in part) == sorted(NAMES)
    if n <= 3:  # 64 students: no shard empty
        assert all(parts)


def test_partition_is_the_documented_crc32_and_depends_on_the_student_only():
    for s in NAMES:
        assert shards.shard_of(s, 5) == zlib.crc32(s.encode("utf-8")) % 5
    # a late submission moves nobody else; the order of the listing does not matter
    before = {s: shards.shard_of(s, 4) for s in NAMES}
    with_late = NAMES + ["late-arrival"]
    for i in range(4):
        assert [s for s in shards.select(with_late, i, 4) if s != "late-arrival"] == \
               [s for s in NAMES if before[s] == i]
        assert sorted(shards.select(list(reversed(NAMES)), i, 4)) == sorted(shards.select(NAMES, i, 4))


def test_the_same_shard_in_another_process_gets_the_same_students():
    """Python's str hash is salted per process: the partition must not use it."""
    code = ("import sys; from attnlab.grading.host.shards import select; "
            "print(','.join(select(sys.argv[1].split(','), 2, 5)))")
    outs = {subprocess.run([sys.executable, "-c", code, ",".join(NAMES)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout.strip()
            for seed in ("1", "2")}
    assert outs == {",".join(shards.select(NAMES, 2, 5))}


def test_students_option_and_shard_combine(tmp_path):
    course = Course(tmp_path)
    for s in ("ann", "ben", "cat", "dan"):
        (course.submitted / s / course.assignment).mkdir(parents=True)
    assert shards.students_to_grade(course, None, None, None) is None  # everyone, as before
    assert shards.students_to_grade(course, None, "ben, ann,,ben", ["dan"]) == ["dan", "ben", "ann"]
    everyone = [shards.students_to_grade(course, f"{i}/3", None, None) for i in range(3)]
    assert sorted(sum(everyone, [])) == ["ann", "ben", "cat", "dan"]
    assert shards.students_to_grade(course, "1/3", "ann,ben,cat,dan", None) == everyone[1]


# ------------------------------------------------------------------------------------ merging
def _result(student: str, notebook: str = "01_online_softmax", points: float = 4.0) -> NotebookResult:
    return NotebookResult(student, notebook, "graded", points=points, max_points=4.0,
                          cells=[CellResult("t", points, 4.0)])


def _shard_reports(tmp_path: Path, students: list[str], n: int, skip=(), extra: dict | None = None) -> list[Path]:
    paths = []
    for i in range(n):
        if i in skip:
            continue
        mine = [_result(s) for s in shards.select(students, i, n)] + [_result(s) for s in (extra or {}).get(i, [])]
        path = tmp_path / shards.report_name(i, n, ".json")
        write_report_json(mine, path)
        paths.append(path)
    return paths


def test_merge_of_complete_shards_has_every_student_once(tmp_path):
    names = NAMES[:20]
    merged = shards.merge(_shard_reports(tmp_path, names, 3), submitted=names)
    assert sorted(r.student for r in merged.results) == sorted(names)
    assert merged.problems() == []
    assert shards.shard_reports(tmp_path) == sorted(tmp_path.glob("*.json"), key=lambda p: p.name)


def test_merge_flags_students_graded_twice_missing_and_missing_shards(tmp_path):
    names = NAMES[:20]
    lost = shards.select(names, 1, 3)
    intruder = shards.select(names, 2, 3)[0]
    paths = _shard_reports(tmp_path, names, 3, skip=(1,), extra={0: [intruder]})
    merged = shards.merge(paths, submitted=names)
    assert merged.graded_twice == {intruder: [shards.report_name(0, 3, ".json"), shards.report_name(2, 3, ".json")]}
    assert merged.missing == lost
    assert merged.missing_shards == [shards.report_name(1, 3, ".json")]
    assert merged.wrong_shard == {intruder: shards.report_name(0, 3, ".json")}
    assert len([r for r in merged.results if r.student == intruder]) == 1  # reported once, flagged
    problems = "\n".join(merged.problems())
    assert intruder in problems and all(s in problems for s in lost)


def test_merge_flags_a_shard_report_that_a_one_notebook_run_replaced(tmp_path):
    """`--shard 1/2 --notebook 01_online_softmax` rewrote shard 1's report with that notebook only: its
    students' other notebooks must not silently drop out of the class report."""
    names = NAMES[:10]
    for i in range(2):
        rows = [_result(s, nb) for s in shards.select(names, i, 2)
                for nb in (("01_online_softmax", "02_tiled_attention") if i == 0 else ("01_online_softmax",))]
        write_report_json(rows, tmp_path / shards.report_name(i, 2, ".json"))
    merged = shards.merge(shards.shard_reports(tmp_path), submitted=names)
    assert sorted(merged.partial) == sorted(shards.select(names, 1, 2))
    assert all(v == ["02_tiled_attention"] for v in merged.partial.values())
    assert any("no row for 02_tiled_attention" in line and "--notebook" in line for line in merged.problems())
    only_01 = [_result(s) for s in names]  # a class graded on one notebook only: nothing is short
    write_report_json(only_01, tmp_path / shards.report_name(0, 1, ".json"))
    assert shards.merge([tmp_path / shards.report_name(0, 1, ".json")], submitted=names).problems() == []


def test_merge_takes_the_newest_shard_count_and_names_the_stale_reports(tmp_path):
    """An earlier run with N=3 left complete reports; the new run with N=2 has only shard 0 so far."""
    names = NAMES[:20]
    old = _shard_reports(tmp_path, names, 3)
    new = _shard_reports(tmp_path, names, 2, skip=(1,))
    for i, path in enumerate(old):
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    merged = shards.merge(shards.shard_reports(tmp_path), submitted=names)
    assert merged.used == [p.name for p in new] and merged.left_out == [p.name for p in old]
    assert sorted(r.student for r in merged.results) == sorted(shards.select(names, 0, 2))
    assert merged.missing_shards == [shards.report_name(1, 2, ".json")] and not merged.graded_twice
    problems = "\n".join(merged.problems())
    assert "no report from shard 1/2" in problems and "-of-3" not in problems
    assert all("another shard count" in n for n in merged.notes())


def test_a_shard_deletes_its_own_stale_report_when_it_starts(tmp_path):
    course = Course(tmp_path)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    (course.submitted / "ann" / course.assignment).mkdir(parents=True)
    stale = [tmp_path / shards.report_name(0, 2, suffix) for suffix in (".json", ".csv")]
    other = tmp_path / shards.report_name(1, 2, ".json")
    for path in [*stale, other]:
        path.write_text("[]")
    code, out = run_cli(course, "autograde", "--shard", "0/2")  # stops early: no gradebook here
    assert code == 1 and "does not know the assignment" in out
    assert not any(p.exists() for p in stale) and other.exists()  # its own only


def test_report_command_writes_the_class_report_and_fails_on_a_problem(tmp_path):
    """``attnlab report`` in a course folder: merges grading_report_shard-*.json, exits 1 on a gap."""
    course = Course(tmp_path)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    names = ["ann", "ben", "cat", "dan", "eve"]
    for s in names:
        (course.submitted / s / course.assignment).mkdir(parents=True)
    _shard_reports(tmp_path, names, 2)
    code, out = run_cli(course, "report")
    assert code == 0, out
    assert "every submitted student was graded by exactly one shard" in out
    assert sorted(r.student for r in __import__("attnlab.grading.host.autograde", fromlist=["_"]).read_report_json(
        tmp_path / "grading_report.json")) == names
    assert (tmp_path / "grading_report.csv").read_text().count("\n") == 1 + len(names)
    (course.submitted / "zoe" / course.assignment).mkdir(parents=True)  # submitted late, graded by no shard
    code, out = run_cli(course, "report")
    assert code == 1 and "PROBLEM: submitted but graded by no shard: zoe" in out


# ------------------------------------------------------------------------------- the gradebook
SECRET_URL = "postgresql+psycopg://grader:s3cret-pw@db.example.org:5433/course"


def test_db_url_comes_from_the_environment_through_nbgrader_config():
    course = Course(ROOT)
    with environment({gradebook.DB_URL_ENV: ""}):
        assert gradebook.db_url(course) == f"sqlite:///{ROOT / 'gradebook.db'}"
    with environment({gradebook.DB_URL_ENV: SECRET_URL}):
        assert gradebook.db_url(course) == SECRET_URL


def test_redact_and_kernel_env_keep_the_password_from_kernels_and_logs():
    assert gradebook.redact(SECRET_URL) == "postgresql+psycopg://grader:***@db.example.org:5433/course"
    assert gradebook.redact("sqlite:////x/gradebook.db") == "sqlite:////x/gradebook.db"
    for url in ("postgresql+psycopg://grader@db.example.org/course?password=s3cret-pw",
                "postgresql+psycopg://grader@db.example.org/course?sslmode=require&PASSWORD=s3cret-pw",
                "postgresql+psycopg://grader:s3cret-pw@db.example.org/course?password=s3cret-pw",
                "postgresql+psycopg://grader@db.example.org/course?sslmode=verify-full&sslpassword=s3cret-pw"):
        shown = gradebook.redact(url)
        assert "s3cret-pw" not in shown and "***" in shown and "db.example.org" in shown, shown
    assert gradebook.redact("postgresql://u@h/db?sslmode=require") == "postgresql://u@h/db?sslmode=require"
    env = {"ATTNLAB_DB_URL": SECRET_URL, "PGPASSWORD": "pw", "PGPASSFILE": "/root/.pgpass", "DATABASE_URL": "x",
           "PATH": "/bin", "ATTNLAB_CALL_LIMIT_S": "2"}
    assert sandbox.kernel_env(env) == {"PATH": "/bin", "ATTNLAB_CALL_LIMIT_S": "2"}


def test_db_url_option_reaches_nbgrader_config(monkeypatch):
    from attnlab.tools import command

    monkeypatch.setenv(gradebook.DB_URL_ENV, "")  # restored after the test
    args = command.parser().parse_args(["export", "--db-url", SECRET_URL])
    gradebook.apply_db_option(args)
    assert os.environ[gradebook.DB_URL_ENV] == SECRET_URL
    assert gradebook.db_url(Course(ROOT)) == SECRET_URL


def test_unreachable_gradebook_is_named_without_its_password(tmp_path):
    url = f"postgresql+psycopg://grader:s3cret-pw@/nowhere?host={tmp_path}&port=5999"
    pytest.importorskip("psycopg", reason="the postgres extra is not installed (make dev)")
    with environment({gradebook.DB_URL_ENV: url}):
        code, out = run_cli(Course(ROOT), "autograde", "--notebook", "01_online_softmax")
    assert code == 1
    assert "cannot open the gradebook postgresql+psycopg://grader:***@/nowhere" in out
    assert "s3cret-pw" not in out


def _lost(message: str = "server closed the connection unexpectedly"):
    from sqlalchemy.exc import OperationalError

    return OperationalError("SELECT 1", {}, Exception(message))


def test_a_lost_gradebook_connection_is_retried_then_named(monkeypatch):
    """retrying(): a step that loses its connection runs again after a pause and the wait is reported;
    an outage longer than the wait raises GradebookUnreachable with the error (no password); after
    that, a step waits only the grace; errors that are not a lost connection are raised at once."""
    import sqlite3
    import time

    from sqlalchemy.exc import OperationalError, ProgrammingError

    monkeypatch.setattr(gradebook, "down_since", None)
    monkeypatch.setenv(gradebook.RETRY_ENV, "1.5")
    gradebook.take_waits()
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise _lost()
        return "grades"

    assert gradebook.retrying(flaky) == "grades" and len(calls) == 3
    waits = gradebook.take_waits()
    assert len(waits) == 1 and re.fullmatch(r"the gradebook's server could not be reached for [0-9] s \(the grader "
                                            r"waited for it and carried on\)", waits[0]), waits
    start = time.monotonic()

    def gone():
        raise _lost(f"connection to {SECRET_URL} failed")

    with pytest.raises(gradebook.GradebookUnreachable, match="the gradebook could not be reached for [12] s") as info:
        gradebook.retrying(gone)
    assert 1.2 < time.monotonic() - start < 4 and "s3cret-pw" not in str(info.value)
    assert "grader:***@db.example.org" in str(info.value)
    start = time.monotonic()
    with pytest.raises(gradebook.GradebookUnreachable):
        gradebook.retrying(gone)  # given up on already: the grace only (capped by the wait)
    assert time.monotonic() - start < 2.5
    for error in (ProgrammingError("SELECT x", {}, Exception("no such column")),
                  OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked")), KeyError("x")):
        def wrong(error=error):
            raise error
        start = time.monotonic()
        with pytest.raises(type(error)):
            gradebook.retrying(wrong)
        assert time.monotonic() - start < 0.5
    assert gradebook.lost_connection(_lost()) and not gradebook.lost_connection(KeyError("x"))


needs_bwrap = pytest.mark.skipif(not __import__("attnlab.grading.sandbox", fromlist=["_"]).check()[0],
                                 reason="bubblewrap cannot start a sandbox here (make sandbox)")


@needs_bwrap
def test_sandboxed_kernel_never_sees_the_gradebook_url():
    """The kernel (and its sandbox's PID 1) start without the grader's database settings."""
    import nbformat
    from nbclient import NotebookClient

    from attnlab.grading.sandbox import SandboxedKernelManager

    probe = ("import os\n"
             "print(sorted(k for k in os.environ if 'DB_URL' in k or k.startswith('PG')))\n"
             "try:  # a root grader's kernel account may not read PID 1's environment at all\n"
             "    print(b's3cret-pw' in open('/proc/1/environ', 'rb').read())\n"
             "except PermissionError:\n"
             "    print('unreadable')")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(probe)])
    with environment({gradebook.DB_URL_ENV: SECRET_URL, "PGPASSWORD": "s3cret-pw"}):
        NotebookClient(nb, kernel_manager_class=SandboxedKernelManager, timeout=60, startup_timeout=120).execute()
    assert nb.cells[0].outputs[0]["text"] in ("[]\nFalse\n", "[]\nunreadable\n")


# ---------------------------------------------------------------------------------- deploy files
def test_slurm_script_is_valid_bash_and_runs_its_shard():
    script = ROOT / "deploy" / "slurm-autograde.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert 'attnlab autograde --shard "${SLURM_ARRAY_TASK_ID}/${SHARDS}"' in text
    assert "#SBATCH" in text and "attnlab report" in text


def test_slurm_script_says_what_is_wrong_outside_an_array_task_or_a_course_folder(tmp_path):
    """Slurm runs a spooled copy of the script: it finds the course through SLURM_SUBMIT_DIR only, and
    says so where that is not a course folder. (On a real scheduler: tests/test_slurm.py.)"""
    script = ROOT / "deploy" / "slurm-autograde.sh"
    base = {"PATH": os.environ["PATH"], "SHARDS": "3", "ATTNLAB_DB_URL": "postgresql+psycopg://grader@db/course"}

    def run(env: dict) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)

    outside = run(base)
    assert outside.returncode != 0 and "submit this script as an array job" in outside.stderr
    elsewhere = run({**base, "SLURM_ARRAY_TASK_ID": "1", "SLURM_SUBMIT_DIR": str(tmp_path)})
    assert elsewhere.returncode == 2 and f"{tmp_path} is not a course folder" in elsewhere.stderr
    assert "run sbatch in the course folder" in elsewhere.stderr


def test_kubernetes_job_is_an_indexed_job_of_shards():
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load((ROOT / "deploy" / "k8s-autograde-job.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    container = spec["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert int(env["SHARDS"]["value"]) == spec["completions"]
    assert "secretKeyRef" in env["ATTNLAB_DB_URL"]["valueFrom"]  # the password never in the file
    assert '--shard "${JOB_COMPLETION_INDEX}/${SHARDS}"' in " ".join(container["args"])
    security = container["securityContext"]  # what bubblewrap needs, not every host device and capability
    assert not security.get("privileged") and set(security["capabilities"]["add"]) <= {"SYS_ADMIN", "NET_ADMIN"}
    assert security["seccompProfile"]["type"] == "Unconfined"


def test_make_test_installs_postgres_and_slurm_and_make_install_does_not():
    def dry_run(target: str) -> str:
        return subprocess.run(["make", "-n", "-W", "pyproject.toml", target], cwd=ROOT, capture_output=True,
                              text=True, timeout=60).stdout

    def extras(commands: str) -> set[str]:  # the extras of every `pip install ... ".[a,b]"` in the commands
        return {e for group in re.findall(r'"\.\[([^\]]*)\]"', commands) for e in group.split(",")}

    install = dry_run("install")
    assert "install-postgres" not in install and "postgres" not in extras(install)  # students need no database
    assert {"postgres", "hub"} <= extras(dry_run("dev"))  # the developers' install (issue 31 item 12, issue 35)
    assert "hub" not in extras(install) and "install-hub" not in install
    assert "install-postgres" in dry_run("test")
    assert "install-slurm" in dry_run("test") and "install-slurm" not in install  # the Slurm test's cluster


def test_the_scratch_build_registers_in_its_own_sqlite_even_with_a_shared_gradebook(tmp_path, monkeypatch):
    """`attnlab build` must never register a scratch build in the course's PostgreSQL gradebook."""
    from attnlab.grading.host import build

    calls = []
    monkeypatch.setattr(build, "build_source", lambda course: None)
    monkeypatch.setattr(Course, "nbgrader", lambda self, *args, **kw: calls.append((self.root, args)))
    with environment({gradebook.DB_URL_ENV: SECRET_URL}):
        fresh = build.build_fresh(Course(ROOT), tmp_path)
    assert calls and all(root == fresh.root and f"--db=sqlite:///{fresh.root / 'gradebook.db'}" in args
                         for root, args in calls)

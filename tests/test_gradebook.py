"""A PostgreSQL gradebook and sharded runs, end to end, against a real PostgreSQL server.

One small class (four students, notebook 01 only, to stay cheap) is graded three ways in one course
folder: serially into SQLite (the reference), by two concurrent shards into one PostgreSQL
gradebook, and again after a shard was killed mid-run and re-run. Every way must give the same
grades, exported by nbgrader, and the same per-cell points; no kernel may see the database URL.
"""

from __future__ import annotations

import csv
import html
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from attnlab.grading.worker import gradebook
from attnlab.grading.host import shards
from attnlab.grading.host.autograde import read_report_json
from attnlab.grading.host.build import generate_assignment
from attnlab.grading.course import Course, tool_env
from attnlab.grading.samples import apply_mistake, load_mistakes, reference_notebook, release_notebook, write_submission

from .conftest import copy_course, environment, run_cli
from .pgserver import PostgresServer

pytestmark = pytest.mark.slow  # nbgrader end to end, about a minute of CPU

NB = "01_online_softmax"
#: student -> what they submit; crc32 puts the first two in shard 0/2, the other two in shard 1/2
STUDENTS = {"forgot-rescale": "01-no-rescale", "two-pass-overflow": "01-two-pass-overflow",
            "blank": "release", "snoop": "snoop"}
#: Appended to snoop's solution cell (otherwise the reference): prints what a kernel can find of the
#: gradebook's settings.
SNOOP = ("\nimport os as _os\n"
         "try:  # the sandbox's PID 1 (bwrap, root's): a root grader's kernel account may not read it at all\n"
         "    _pid1 = 'ATTNLAB_DB_URL' in open('/proc/1/environ', 'rb').read().decode('latin-1')\n"
         "except PermissionError:\n"
         "    _pid1 = 'unreadable'\n"
         "print('DB-PROBE', sorted(k for k in _os.environ if 'DB_URL' in k or k.startswith('PG')), _pid1)\n")


def _write_class(course: Course, students: dict[str, str] = STUDENTS) -> None:
    mistakes = {m.id: m for m in load_mistakes(course)[0]}
    for student, kind in students.items():
        if kind == "release":
            nb = release_notebook(course, NB)
        else:
            nb = reference_notebook(course, NB)
            if kind == "snoop":
                cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
                cell.source += SNOOP
            elif kind:
                nb = apply_mistake(nb, mistakes[kind])
        write_submission(course, student, {NB: nb})


def _export(course: Course, path: Path) -> list[dict]:
    code, out = run_cli(course, "export", "--to", str(path))
    assert code == 0, out
    with open(path) as f:
        return sorted(csv.DictReader(f), key=lambda row: row["student_id"])


def _cells(report: Path) -> dict:
    return {(r.student, r.notebook): (r.status, r.points, r.max_points, [(c.grade_id, c.points) for c in r.cells])
            for r in read_report_json(report)}


def _shard_cmd(course: Course, shard: str) -> list[str]:
    # one worker: the killed-shard test stops after the first graded line, which must be its first student
    return [sys.executable, "-m", "attnlab.tools.command", "--course", str(course.root), "autograde",
            "--shard", shard, "--notebook", NB, "--jobs", "1"]


def _shard(course: Course, shard: str, env: dict) -> subprocess.Popen:
    """A shard in a session of its own (so killing it takes its worker and kernels too, like a lost node)."""
    return subprocess.Popen(_shard_cmd(course, shard), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc; workers and kernels run in sessions of their own)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every process below it, all stopped first so none can react."""
    tree = [pid, *_descendants(pid)]
    for each in tree:
        try:
            os.kill(each, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    tree = [pid, *_descendants(pid)]
    for each in tree:
        try:
            os.kill(each, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return tree


@dataclass
class ShardedClass:
    course: Course
    url: str
    serial: dict                 # (student, notebook) -> (status, points, max, cells), SQLite, one process
    serial_export: list[dict]
    sharded: dict                # the same, merged from two concurrent shards into PostgreSQL
    sharded_export: list[dict]
    rerun: dict                  # after shard 0 was killed mid-run and run again
    outputs: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def sharded(postgres, tmp_path_factory) -> ShardedClass:
    start = time.perf_counter()
    tmp = tmp_path_factory.mktemp("sharded")
    course = copy_course(tmp)
    _write_class(course)
    assert [shards.shard_of(s, 2) for s in STUDENTS] == [0, 0, 1, 1], "STUDENTS no longer split 2/2"
    register = ("--notebook", NB)  # the gradebook needs this notebook only (half the time of all six)
    outputs, seconds = {}, {}

    # 1. serially, into SQLite (gradebook.db in the course folder)
    with environment({gradebook.DB_URL_ENV: ""}):
        generate_assignment(course, *register)
        code, outputs["serial"] = run_cli(course, "autograde", "--notebook", NB, "--report-json", str(tmp / "serial.json"))
        serial_export = _export(course, tmp / "sqlite.csv")
    assert code == 0, outputs["serial"]
    seconds["serial"] = time.perf_counter() - start

    # 2. two shards at once, into one PostgreSQL gradebook (the assignment registered first)
    url = postgres.create_database("attention_kernels")
    env = {**tool_env(), gradebook.DB_URL_ENV: url, "PYTHONUNBUFFERED": "1"}
    with environment({gradebook.DB_URL_ENV: url}):
        generate_assignment(course, *register)
        t = time.perf_counter()
        procs = {i: _shard(course, f"{i}/2", env) for i in range(2)}
        try:
            for i, p in procs.items():
                outputs[f"shard {i}"] = p.communicate(timeout=900)[0]
        finally:  # a shard that failed or hung must not outlive the test, nor its worker and kernels
            for p in procs.values():
                if p.poll() is None:
                    _kill_tree(p.pid)
                    p.wait()
        for i, p in procs.items():
            assert p.returncode == 0, outputs.get(f"shard {i}")
        seconds["two shards"] = time.perf_counter() - t
        code, outputs["report"] = run_cli(course, "report")
        assert code == 0, outputs["report"]
        sharded = _cells(course.root / "grading_report.json")
        sharded_export = _export(course, tmp / "postgres.csv")

        # 3. shard 0 killed (with its worker and kernels) after its first student, then run again
        t = time.perf_counter()
        p = _shard(course, "0/2", env)
        lines = []
        try:
            for line in p.stdout:
                lines.append(line)
                if line.startswith("  ") and NB in line:  # one notebook graded, the next one under way
                    break
        finally:
            killed = _kill_tree(p.pid)  # like a lost node: the shard, its worker and the kernel all at once
            p.wait()
        assert len(killed) >= 2, "the shard's grading worker was not found"
        outputs["killed shard"] = "".join(lines)
        # the killed run removed the first run's report when it started: nothing stale is left to merge
        assert not (course.root / shards.report_name(0, 2, ".json")).exists()
        rerun = subprocess.run(_shard_cmd(course, "0/2"), env=env, capture_output=True, text=True, timeout=900)
        outputs["rerun"] = rerun.stdout + rerun.stderr
        assert rerun.returncode == 0, outputs["rerun"]
        seconds["kill and rerun"] = time.perf_counter() - t
        code, outputs["report after rerun"] = run_cli(course, "report")
        assert code == 0, outputs["report after rerun"]
        rerun_cells = _cells(course.root / "grading_report.json")  # read back from the gradebook
    print({k: f"{v:.0f} s" for k, v in seconds.items()}, f"total {time.perf_counter() - start:.0f} s")
    return ShardedClass(course, url, _cells(tmp / "serial.json"), serial_export, sharded, sharded_export,
                        rerun_cells, outputs, seconds)


@pytest.mark.cluster
def test_sharded_postgres_grades_equal_the_serial_sqlite_run(sharded):
    _, points, full, _ = sharded.serial[("snoop", NB)]
    assert points == full > 0 and sharded.serial[("blank", NB)][1] == 0
    assert 0 < sharded.serial[("forgot-rescale", NB)][1] < full
    assert sharded.sharded == sharded.serial
    assert len(sharded.sharded_export) == len(STUDENTS)  # one row per student: none lost, none twice
    assert sharded.sharded_export == sharded.serial_export


@pytest.mark.cluster
def test_each_shard_graded_its_own_students_once(sharded):
    for i in range(2):
        mine = {r.student for r in read_report_json(sharded.course.root / shards.report_name(i, 2, ".json"))}
        assert mine == set(shards.select(list(STUDENTS), i, 2))
        assert f"shard {i}/2" in sharded.outputs[f"shard {i}"]
    assert "every submitted student was graded by exactly one shard" in sharded.outputs["report"]


@pytest.mark.cluster
def test_no_grade_is_duplicated_in_the_gradebook(sharded):
    """nbgrader's rows, counted in PostgreSQL: one submission and one graded notebook per student."""
    from sqlalchemy import create_engine, text

    engine = create_engine(sharded.url)
    try:
        with engine.connect() as db:
            subs = db.execute(text("SELECT student_id, count(*) FROM submitted_assignment GROUP BY student_id")).all()
            nbs = db.execute(text("SELECT count(*) FROM submitted_notebook")).scalar()
            grades = db.execute(text("SELECT count(*) FROM grade")).scalar()
            cells = db.execute(text("SELECT count(*) FROM grade_cells")).scalar()
            notebooks = db.execute(text("SELECT count(*) FROM notebook")).scalar()
    finally:
        engine.dispose()
    assert dict(subs) == {s: 1 for s in STUDENTS}
    assert nbs == len(STUDENTS) * notebooks  # nbgrader keeps a row for every notebook of the assignment
    assert grades == len(STUDENTS) * cells


@pytest.mark.cluster
def test_a_killed_shard_run_again_gives_the_same_grades(sharded):
    # killed right after its first notebook was graded, while its second student was being graded
    assert sharded.outputs["killed shard"].splitlines()[-1].startswith("  forgot-rescale ")
    assert sharded.rerun == sharded.serial  # and test_no_grade_is_duplicated_in_the_gradebook counts after it


@pytest.mark.cluster
def test_kernels_never_saw_the_database_url(sharded):
    autograded = sharded.course.autograded / "snoop" / sharded.course.assignment / f"{NB}.ipynb"
    text = autograded.read_text()
    assert "DB-PROBE [] False" in text or "DB-PROBE [] unreadable" in text  # the probe ran, and found nothing
    password = sharded.url.split(":", 2)[2].split("@")[0]
    assert password not in text and sharded.url not in text
    status, points, full, _ = sharded.sharded[("snoop", NB)]
    assert status == "graded" and points == full  # the probe costs the reference nothing


# ------------------------------------------------------------------- the database goes away mid-run
#: Three students of notebook 01 (graded in this order: submitted/ sorted).
OUTAGE_CLASS = {"outage-a-blank": "release", "outage-b-no-rescale": "01-no-rescale", "outage-c-reference": ""}


class _HangUp:
    """Stands in for a halted server on its socket: takes each connection and hangs up at once (as a
    server that is shutting down or starting up does), counting them, so the test knows a grading
    process met the outage."""

    def __init__(self, path: Path):
        self.path, self.attempts, self.closed = path, 0, False
        self.first: float | None = None  # time.monotonic() of the first attempt
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            self.attempts += 1
            self.first = self.first or time.monotonic()
            conn.close()

    def close(self) -> None:
        self.closed = True
        self.thread.join()
        self.sock.close()
        self.path.unlink(missing_ok=True)


def _outage(server: PostgresServer, until) -> int:
    """Halt ``server`` until ``until(stand_in, seconds)`` is true (5 minutes at most), then start it
    again; the number of connections the grading processes tried meanwhile."""
    server.halt()
    stand_in, start = _HangUp(server.socket), time.monotonic()
    try:
        while not until(stand_in, time.monotonic() - start) and time.monotonic() - start < 300:
            time.sleep(0.1)
    finally:
        stand_in.close()
        server.resume()
    return stand_in.attempts


def _graded_lines(lines: list[str]) -> int:
    return sum(line.startswith("  ") and NB in line for line in lines)


def _autograde_with_outages(course: Course, env: dict, args: list[str], outages: dict) -> tuple[int, str, dict]:
    """``attnlab autograde`` in a process of its own; ``outages`` maps a number of notebooks graded so
    far (-1: as soon as grading starts) to a function that halts the server and brings it back;
    (exit status, output, {when: connection attempts met during that outage})."""
    cmd = [sys.executable, "-m", "attnlab.tools.command", "--course", str(course.root), "autograde", "--notebook", NB,
           "--jobs", "1", *args]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    lines, met = [], {}
    reader = threading.Thread(target=lambda: [lines.append(line) for line in p.stdout], daemon=True)
    reader.start()
    deadline = time.monotonic() + 900
    try:
        while reader.is_alive() and time.monotonic() < deadline:
            started = any(line.startswith("Autograding, one notebook") for line in lines)
            when = _graded_lines(lines) if _graded_lines(lines) else -1 if started else None
            if when in outages and when not in met:
                met[when] = outages[when](lines)  # the reader goes on collecting lines meanwhile
            time.sleep(0.05)
        p.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if p.poll() is None:
            _kill_tree(p.pid)
            p.wait()
        reader.join(timeout=10)
    return p.returncode, "".join(lines), met


def test_a_gradebook_outage_mid_run_is_waited_out_or_named(postgres, tmp_path):
    """PostgreSQL stops twice during a run (as grading starts, and between two students): the run
    waits for it and grades everyone, and its report says it waited. With a short wait, an outage
    that outlasts it leaves the notebook graded meanwhile NOT GRADED with the reason, the rest of the
    class graded, and the table and report written."""
    from attnlab.grading.host.autograde import read_report_json

    course = copy_course(tmp_path)
    _write_class(course, OUTAGE_CLASS)
    url = postgres.create_database("outage")
    env = {**tool_env(), gradebook.DB_URL_ENV: url, "PYTHONUNBUFFERED": "1"}
    with environment({gradebook.DB_URL_ENV: url}):
        generate_assignment(course, "--notebook", NB)

    # 1. two outages of a few seconds, each met by a grading process: waited out
    def short(lines):
        return _outage(postgres, lambda stand_in, seconds: stand_in.attempts and seconds > 3)

    report = tmp_path / "waited.json"
    code, out, met = _autograde_with_outages(course, env, ["--report-json", str(report)], {-1: short, 1: short})
    print(out, met)
    assert code == 0, out
    assert met[-1] and met[1], (met, out)  # both outages were met by a connection (or nothing was tested)
    results = {r.student: r for r in read_report_json(report)}
    assert set(results) == set(OUTAGE_CLASS) and all(r.status == "graded" for r in results.values()), out
    assert results["outage-a-blank"].points == 0 and 0 < results["outage-b-no-rescale"].points
    assert results["outage-c-reference"].points == results["outage-c-reference"].max_points > 0
    waits = [line for r in results.values() for line in r.gradebook]
    assert len(waits) >= 2 and all("could not be reached" in w or "connection was lost" in w for w in waits), waits
    assert "Autograded points" in out and "Gradebook (" in out and "Traceback" not in out

    # 2. a wait of 5 s, and an outage from the start that lasts past it (6 s from the first connection
    #    a grading process tried): that notebook is NOT GRADED with the reason; the server is back for
    #    the other two
    def long(lines):
        return _outage(postgres, lambda stand_in, seconds: stand_in.first and time.monotonic() - stand_in.first > 6)

    report = tmp_path / "not_graded.json"
    env[gradebook.RETRY_ENV] = "5"
    code, out, met = _autograde_with_outages(course, env, ["--report-json", str(report)], {-1: long})
    print(out, met)
    assert met[-1], out
    results = {r.student: r for r in read_report_json(report)}
    assert set(results) == set(OUTAGE_CLASS), out
    lost = results["outage-a-blank"]
    assert lost.status == "failed" and "could not be reached" in lost.reason and "grade it again" in lost.reason, out
    assert code == 1 and "NOT GRADED: 1 notebook(s)" in out and f"outage-a-blank/{NB}: not graded: " in out
    assert all(results[s].status == "graded" for s in ("outage-b-no-rescale", "outage-c-reference")), out
    assert "Autograded points" in out and "Traceback" not in out
    assert url.split(":", 2)[2].split("@")[0] not in out  # the password is never printed


# ------------------------------------------------------- hand grading, feedback before it, export
ANSWERS = ("answer-rescale-exact", "answer-masked-block", "answer-one-pass")  # 01's written answers, 1 point each


@dataclass
class HandGraded:
    course: Course
    outputs: dict[str, str]
    feedback_before: str          # the feedback page before any hand grading
    export_before: list[dict]
    grades_after: dict            # grade_id -> (manual_score, needs_manual_grade) after the second autograde
    comment_after: str | None
    export_after: list[dict]


def _student_grades(course: Course, student: str) -> dict:
    with gradebook.open_gradebook(course) as gb:
        sub = gb.find_submission_notebook(NB, course.assignment, student)
        return {g.name: g for g in sub.grades}


@pytest.fixture(scope="module")
def hand_graded(tmp_path_factory) -> HandGraded:
    """One student's 01 (the reference answers) autograded into SQLite, with the second assignment
    registered but never collected; feedback and export before any hand grading; the three written
    answers then scored by hand as formgrader saves them, one of them changed in the submission,
    and the student autograded again."""
    from nbgrader.api import Gradebook

    tmp = tmp_path_factory.mktemp("hand")
    course = copy_course(tmp)
    student = "handy"
    write_submission(course, student, {NB: reference_notebook(course, NB)})
    outputs = {}
    with environment({gradebook.DB_URL_ENV: ""}):
        generate_assignment(course, "--notebook", NB)
        with gradebook.open_gradebook(course) as gb:  # registered, never collected
            gb.update_or_create_assignment("attention_kernels_beyond")
        for step, args in (("autograde", ["autograde", "--notebook", NB, "--jobs", "1"]),
                           ("feedback", ["feedback", "--student", student]),
                           ("export", ["export", "--to", str(tmp / "before.csv")])):
            code, outputs[step] = run_cli(course, *args)
            assert code == 0, outputs[step]
        feedback = (course.root / "feedback" / student / course.assignment / f"{NB}.html").read_text()
        # formgrader's save (its GradeHandler and CommentHandler, through the gradebook API)
        with Gradebook(gradebook.db_url(course), "attention-kernels") as gb:
            sub = gb.find_submission_notebook(NB, course.assignment, student)
            for grade in sub.grades:
                if grade.name in ANSWERS:
                    grade.manual_score = 1.0 if grade.name != "answer-masked-block" else 0.5
                    grade.needs_manual_grade = not (grade.manual_score is not None or grade.auto_score is not None)
            comment = next(c for c in sub.comments if c.name == "answer-masked-block")
            comment.manual_comment = "Half: the masked block's max stays -inf, say why that is safe."
            gb.db.commit()
        path = course.submitted / student / course.assignment / f"{NB}.ipynb"
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "answer-one-pass")
        cell.source += "\n\nAdded after the deadline: a second thought."
        nbformat.write(nb, path)
        code, outputs["regrade"] = run_cli(course, "autograde", "--notebook", NB, "--jobs", "1")
        assert code == 0, outputs["regrade"]
        code, outputs["export after"] = run_cli(course, "export", "--to", str(tmp / "after.csv"))
        assert code == 0, outputs["export after"]
        after = {gid: (g.manual_score, g.needs_manual_grade) for gid, g in _student_grades(course, student).items()}
        with Gradebook(gradebook.db_url(course), "attention-kernels") as gb:
            comment_after = gb.find_comment("answer-masked-block", NB, course.assignment, student).manual_comment

    def rows(name):
        with open(tmp / name) as f:
            return list(csv.DictReader(f))

    return HandGraded(course, outputs, feedback, rows("before.csv"), after, comment_after, rows("after.csv"))


def test_regrading_keeps_the_hand_grading_of_unchanged_answers(hand_graded):
    after = hand_graded.grades_after
    assert after["answer-rescale-exact"] == (1.0, False) and after["answer-masked-block"] == (0.5, False)
    assert after["answer-one-pass"] == (1.0, True)  # changed since it was graded: reopened, its score kept
    assert hand_graded.comment_after.startswith("Half: the masked block's max")
    out = hand_graded.outputs["regrade"]
    assert f"handy / {NB}: hand grading kept for answer-rescale-exact, answer-masked-block" in out, out
    assert (f"handy / {NB}: answer-one-pass reopened for hand grading: the answer changed since it was graded "
            f"by hand") in out, out


def test_feedback_before_hand_grading_says_what_is_still_to_be_graded(hand_graded):
    page = hand_graded.feedback_before
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", page)))
    assert "Score so far: 6 / 6; 3 points to be graded by hand" in text, text[:600]
    assert "Autograded: 6 / 6 · still to be graded by hand: 3 points (answer-rescale-exact, answer-masked-block, " \
           "answer-one-pass)" in text
    assert text.count("To be graded by hand (1 point)") == 3 and text.count("(to be graded by hand, 1 point)") == 3
    assert "Score: 0.0 / 1.0" not in text and "6.0 / 9.0" not in text
    assert "Score: 3.0 / 3.0" in text  # the autograded cells keep their scores


def test_export_holds_only_graded_submissions_and_says_what_is_to_be_graded(hand_graded):
    before, after = hand_graded.export_before, hand_graded.export_after
    assert [(r["assignment"], r["student_id"]) for r in before] == [("attention_kernels", "handy")]  # not _beyond
    assert float(before[0]["score"]) == 6 and float(before[0]["max_score"]) == 9
    assert (float(before[0]["autograded_score"]), float(before[0]["to_be_graded"]), before[0]["complete"]) == (6, 3, "no")
    assert len(after) == 1 and float(after[0]["score"]) == 8.5 and float(after[0]["hand_graded_score"]) == 2.5
    assert (float(after[0]["to_be_graded"]), after[0]["complete"]) == (0, "yes")


class _FlakyApi:
    """nbgrader's API as the worker uses it, whose autograde fails ``failures`` times the way nbgrader
    reports a gradebook connection lost during one of its steps, then succeeds."""

    LOST = ("[ERROR] Traceback (most recent call last):\nsqlalchemy.exc.OperationalError: (psycopg.OperationalError) "
            "consuming input failed: server closed the connection unexpectedly\n[ERROR] There was an error accessing "
            "the nbgrader database. This may occur if you recently upgraded nbgrader.")

    def __init__(self, root: Path, url: str, failures: int):
        from nbgrader.coursedir import CourseDirectory

        from traitlets.config import Config

        self.coursedir = CourseDirectory(root=str(root), db_url=url, course_id="attention-kernels")
        self.config = Config()  # the worker reads the variant's choice from it (attnlab.variants)
        self.failures, self.calls = failures, 0

    def autograde(self, assignment, student, force=True, create=True):
        self.calls += 1
        if self.calls <= self.failures:
            return {"success": False, "log": self.LOST}
        return {"success": True, "log": "[INFO] done"}


def test_a_notebook_whose_gradebook_step_lost_its_connection_is_graded_again(postgres, tmp_path):
    from nbgrader.api import Gradebook

    from attnlab.grading.worker import jobs as worker

    url = postgres.create_database("flaky")
    with environment({"PATH": tool_env()["PATH"]}):  # nbgrader shells out to alembic when it creates its tables
        Gradebook(url, "attention-kernels").close()
    api = _FlakyApi(tmp_path, url, failures=1)
    success, log, notes = worker.autograde_one(api, "attention_kernels", "s", NB)
    assert success and api.calls == 2
    assert notes == ["the gradebook's connection was lost during grading: graded again once the server answered"]
    # losing it every time: graded a bounded number of times, then failed with nbgrader's log
    api = _FlakyApi(tmp_path, url, failures=10)
    success, log, notes = worker.autograde_one(api, "attention_kernels", "s", NB)
    assert not success and api.calls == worker.LOST_CONNECTION_RETRIES + 1 and "OperationalError" in log

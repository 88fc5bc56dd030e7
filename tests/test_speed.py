"""The class speed pass and the leaderboard (attnlab.grading.host.speed, .leaderboard) on a CPU grader:
kernels whose tests passed are sent to timing (here: "needs GPU timing"), the others are not; the
leaderboard ranks timed outcomes, hides ids behind the course secret or shows chosen names, and
gives each student their own standing. Timings themselves come from the H200 (notes/gpu/)."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from pathlib import Path

import pytest

from attnlab.grading.host import leaderboard, speed
from attnlab.grading.course import BEYOND, Course
from attnlab.grading.worker.timing import Status, Timing

from .conftest import run_cli


def test_speed_pass_times_only_what_passed_its_tests(graded):
    course = graded.course
    done = {(p.parent.name, t.notebook): t for s in ("reference", "blank")
            for p, t in speed.time_student(course, s)}
    assert set(done) == {("reference", "04_triton_softmax"), ("reference", "05_triton_flash"),
                         ("blank", "04_triton_softmax"), ("blank", "05_triton_flash")}
    for nb in ("04_triton_softmax", "05_triton_flash"):
        assert done[("reference", nb)].status is Status.NEEDS_GPU, done[("reference", nb)]
        assert done[("blank", nb)].status is Status.NOT_TIMED and "did not all pass" in done[("blank", nb)].message
    # the speed cell (a task cell, 0 points by default) says so in the gradebook, left for a GPU grader
    from nbgrader.api import Gradebook

    from attnlab.grading.worker.gradebook import db_url

    with Gradebook(db_url(course)) as gb:
        for student, note in (("reference", "needs GPU timing"), ("blank", "did not all pass")):
            comment = gb.find_comment(speed.SPEED_CELL, "05_triton_flash", course.assignment, student)
            grade = gb.find_grade(speed.SPEED_CELL, "05_triton_flash", course.assignment, student)
            assert note in comment.manual_comment, (student, comment.manual_comment)
            assert (grade.manual_score is None) == (student == "reference") and grade.max_score == 0
    records = speed.load_timings(course)
    assert {(r["student"], r["notebook"]) for r in records} >= set(done)
    beyond = speed.time_student(course.for_assignment(BEYOND), "reference")
    assert {t.notebook for _, t in beyond} == {"07_triton_backward", "08_flash_decoding"}
    code, out = run_cli(course, "speed", "--student", "typical_mistakes")
    assert code == 0 and "typical_mistakes" in out and "needs GPU timing" not in out, out  # its kernels fail tests
    code, out = run_cli(course, "speed", "--jobs", "3")  # the class, several students at once
    assert code == 0 and all(s in out for s in ("reference", "blank", "typical_mistakes")), out
    assert " students: " in out and "needs GPU timing" in out, out
    for bad in (["--jobs", "0"], ["--reps", "0"], ["--shard", "3/2"]):  # a clear error, no traceback
        code, out = run_cli(course, "speed", *bad)
        assert code == 2 and "Traceback" not in out, (bad, out)


def test_students_are_timed_several_at_once_each_with_the_gpus_lock(monkeypatch, tmp_path):
    """``jobs`` workers run at once (their compiles overlap; the worker itself takes the GPU's turn,
    tests/test_timing.py), every one is handed this machine's GPU lock, and every student comes back."""
    running, peak, guard = [0], [0], threading.Lock()

    def fake_time_notebooks(pairs, *, reps, sandbox, lock_dir):
        assert lock_dir == str(tmp_path)
        with guard:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        with guard:
            running[0] -= 1
        return [Timing(Path(p).stem, Status.NEEDS_GPU) for p, _ in pairs]

    monkeypatch.setattr(speed, "time_notebooks", fake_time_notebooks)
    work = {f"s{i}": [(Path(f"s{i}/04_triton_softmax.ipynb"), Path("ref.ipynb"))] for i in range(7)}
    work["nothing_timed"] = []
    got = dict(speed.time_students(work, jobs=3, lock_dir=str(tmp_path)))
    assert set(got) == set(work) and got["nothing_timed"] == []
    assert all(t.notebook == "04_triton_softmax" for s in work if work[s] for t in got[s])
    assert peak[0] == 3
    peak[0] = 0
    dict(speed.time_students(work, jobs=1, lock_dir=str(tmp_path)))
    assert peak[0] == 1
    with pytest.raises(ValueError, match="jobs"):
        dict(speed.time_students(work, jobs=0))


def test_the_graders_trouble_with_one_student_never_ends_the_pass_and_a_stop_cancels_the_rest(monkeypatch):
    started = []

    def fake_time_notebooks(pairs, *, reps, sandbox, lock_dir):
        student = Path(pairs[0][0]).parent.name
        started.append(student)
        if student == "s1":
            raise OSError("no space left on device")
        time.sleep(0.2)
        return [Timing("05_triton_flash", Status.NEEDS_GPU)]

    monkeypatch.setattr(speed, "time_notebooks", fake_time_notebooks)
    work = {f"s{i}": [(Path(f"s{i}/05_triton_flash.ipynb"), Path("ref.ipynb"))] for i in range(8)}
    got = dict(speed.time_students(work, jobs=2))
    assert set(got) == set(work)
    assert got["s1"][0].status is Status.RETRY and "no space left" in got["s1"][0].message
    started.clear()
    pass_ = speed.time_students(work, jobs=2)
    next(pass_)
    pass_.close()  # the consumer stopped (Ctrl-C, an error while recording)
    assert len(started) <= 4, started  # the two running and at most two more, not all eight


def test_a_student_timed_while_the_gpu_was_not_quiet_is_timed_again_alone(monkeypatch, tmp_path):
    """Each worker times the reference kernel too: a student whose reference ran far off the class's median
    beside other workers (another sandbox's process on the GPU, say) is timed again alone after the others;
    one whose reference is off even then is left for review. Alone (jobs=1) there is nothing to compare."""
    calls: dict[str, int] = {}
    slow_first, slow_always = "s3", "s5"

    def fake_time_notebooks(pairs, *, reps, sandbox, lock_dir):
        student = Path(pairs[0][0]).parent.name
        calls[student] = calls.get(student, 0) + 1
        ref = 1.0 + 0.01 * (int(student[1:]) % 3)  # within 2% of each other
        if student == slow_always or (student == slow_first and calls[student] == 1):
            ref = 1.3
        return [Timing("05_triton_flash", Status.TIMED, "1.00x", ratio=1.0, learner_ms=ref, reference_ms=ref)]

    monkeypatch.setattr(speed, "time_notebooks", fake_time_notebooks)
    work = {f"s{i}": [(Path(f"s{i}/05_triton_flash.ipynb"), Path("ref.ipynb"))] for i in range(8)}
    seen = list(speed.time_students(work, jobs=3))
    assert [s for s, _ in seen].count(slow_first) == 2 and [s for s, _ in seen].count(slow_always) == 2
    assert len(seen) == 10 and calls[slow_first] == calls[slow_always] == 2
    again = {s: t[0].message for s, t in seen[8:]}
    assert "timed again alone" in again[slow_first] and "+29% off the class's 1.010 ms" in again[slow_first], again
    assert "needs review" not in again[slow_first]
    assert "needs review" in again[slow_always], again
    calls.clear()
    assert len(list(speed.time_students(work, jobs=1))) == 8 and max(calls.values()) == 1
    one = [Timing("05_triton_flash", Status.TIMED, reference_ms=1.0)]
    off = [Timing("05_triton_flash", Status.TIMED, reference_ms=1.06)]
    assert speed.not_quiet({"a": one, "b": one, "d": off}) == {}  # 3 results: no median to go by
    assert set(speed.not_quiet({"a": one, "b": one, "c": one, "d": off})) == {"d"}  # 6% > 5%
    assert speed.not_quiet({"a": one, "b": one, "c": one, "d": off}, tolerance=0.07) == {}


def _record(student, notebook, ratio, status="timed"):
    return {"student": student, "assignment": "attention_kernels", "date": "2026-12-02T10:00:00+00:00",
            "notebook": notebook, "status": status, "ratio": ratio if status == "timed" else None,
            "rate": 360.0 * (ratio or 0), "unit": "TFLOP/s", "device": "NVIDIA H200"}


def test_leaderboard_ranks_hides_ids_and_shows_each_student_their_place(tmp_path, monkeypatch):
    monkeypatch.delenv(leaderboard.SECRET_ENV, raising=False)
    course = Course(tmp_path)
    records = [_record("alice-17", "05_triton_flash", 0.8), _record("bob-3", "05_triton_flash", 1.02),
               _record("carol-9", "05_triton_flash", 0.3), _record("dan-4", "05_triton_flash", None, "wrong"),
               _record("alice-17", "04_triton_softmax", 0.99)]
    for r in records:
        path = speed.timing_path(course, r["student"], r["notebook"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r))
    (tmp_path / leaderboard.NAMES_FILE).write_text("bob-3,Flash Gordon\n")
    (tmp_path / "nbgrader_config.py").write_text("")
    (tmp_path / "notebooks").mkdir()
    code, out = run_cli(course, "leaderboard")
    assert code == 0 and "4 timed kernels ranked" in out, out
    page, table = tmp_path / "leaderboard_attention_kernels.html", tmp_path / "leaderboard_attention_kernels.csv"
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    flash = [r for r in rows if r["notebook"] == "05_triton_flash"]
    assert [r["rank"] for r in flash] == ["1", "2", "3"] and flash[0]["name"] == "Flash Gordon"
    assert all(r["name"].startswith("anon-") for r in flash[1:])
    text = page.read_text()
    assert "alice" not in text and "carol" not in text and "dan" not in text  # ids never shown
    assert (tmp_path / ".attnlab-secret").stat().st_mode & 0o077 == 0
    # the same student keeps the same anonymous id; another secret gives another
    again = list(csv.DictReader(io.StringIO(leaderboard.write(course)[1].read_text())))
    assert again == rows
    monkeypatch.setenv(leaderboard.SECRET_ENV, "another")
    assert list(csv.DictReader(io.StringIO(leaderboard.write(course)[1].read_text())))[1]["name"] != flash[1]["name"]
    own = (tmp_path / "feedback" / "carol-9" / "attention_kernels" / "speed.html").read_text()
    assert own.count("class='you'") == 1
    assert not (tmp_path / "feedback" / "dan-4").exists()  # nothing timed: no standing


def test_speed_points_between_floor_and_target():
    rule = speed.SpeedPoints(0.5, 0.9)
    assert [speed.speed_points(r, 2, rule) for r in (0.2, 0.5, 0.7, 0.9, 1.3)] == [0, 0, 1.0, 2, 2]
    with pytest.raises(ValueError, match="floor < target"):
        speed.SpeedPoints(0.9, 0.5)


@pytest.mark.parametrize("setting, error", [
    ("c.SpeedPoints.floor = 0.9\nc.SpeedPoints.target = 0.5", "floor < target"),
    ("c.SpeedPoints.floor = '0.5'", "numbers"),
    ("c.SpeedPoints.flor = 0.4", "no setting flor"),
])
def test_a_wrong_speed_setting_names_the_file_and_what_is_wrong(tmp_path, setting, error):
    from types import SimpleNamespace

    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n" + setting + "\n")
    with pytest.raises(ValueError, match=error) as raised:
        speed.SpeedPoints.of(SimpleNamespace(root=tmp_path))
    assert "nbgrader_config.py" in str(raised.value)

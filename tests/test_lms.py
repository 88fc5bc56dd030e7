"""Grades back into the LMS: the ids `attnlab collect` records from Canvas and Moodle exports, and the
import files `attnlab export --canvas/--moodle` writes, read back with csv and checked against the
formats Canvas's gradebook import and Moodle's grading-worksheet upload read. (End to end, through
nbgrader's gradebook: tests/test_collect.py.)"""

from __future__ import annotations

import csv
import datetime as dt
import re
import zipfile
from pathlib import Path

from attnlab.grading.host import collect, lms

NB = "01_online_softmax"
A1, A2 = "attention_kernels", "attention_kernels_beyond"


def _zip(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name in names:
            z.writestr(name, "{}")
    return path


def _row(assignment: str, student: str, score: float, max_score: float = 50.0, pending: float = 0.0) -> dict:
    """A row as nbgrader's export CSV gives it back (strings), the columns lms reads."""
    return {"assignment": assignment, "student_id": student, "score": str(score), "max_score": str(max_score),
            "to_be_graded": str(pending)}


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_ids_are_read_from_canvas_and_moodle_exports_as_collect_names_students(tmp_path):
    canvas = _zip(tmp_path / "canvas.zip", [f"zhangwei_2001_51_{NB}.ipynb", f"zhangwei_LATE_2002_52_Copy of {NB}.ipynb",
                                           "zhangwei_2001_53_notes.pdf", "readme.txt"])
    moodle = _zip(tmp_path / "moodle.zip", [f"李明_1001_assignsubmission_file_/{NB}.ipynb",
                                           f"Wei Zhang_1003_assignsubmission_file_/{NB}.ipynb",
                                           "Wei Zhang_1003_assignsubmission_file_/sub/Eve_9_assignsubmission_file_/x.ipynb",
                                           "__MACOSX/Wei Zhang_1004_assignsubmission_file_/._x.ipynb"])
    assert collect.ids_in_export(canvas, A1) == [lms.LmsId(A1, "zhangwei-2001", "canvas", "2001", "zhangwei"),
                                                 lms.LmsId(A1, "zhangwei-2002", "canvas", "2002", "zhangwei")]
    # the outermost LMS folder names the student, as collect files the work; metadata is no student
    assert collect.ids_in_export(moodle, A1) == [lms.LmsId(A1, "wei_zhang-1003", "moodle", "1003", "Wei Zhang"),
                                                 lms.LmsId(A1, "李明-1001", "moodle", "1001", "李明")]
    assert collect.ids_in_export(canvas, A1, layout="moodle") == []


def test_remembered_ids_merge_per_assignment_and_student(tmp_path):
    first = [lms.LmsId(A1, "wei_zhang-1003", "moodle", "1003", "Wei Zhang"), lms.LmsId(A1, "李明-1001", "moodle", "1001", "李明")]
    lms.remember(tmp_path, first)
    renamed = lms.LmsId(A1, "李明-1001", "moodle", "1001", "李明 (Li Ming)")
    other = lms.LmsId(A2, "wei_zhang-2203", "moodle", "2203", "Wei Zhang")  # Moodle numbers each assignment anew
    lms.remember(tmp_path, [renamed, other])
    assert sorted(lms.read_ids(tmp_path), key=repr) == sorted([first[0], renamed, other], key=repr)
    assert lms.read_ids(tmp_path / "nowhere") == []


IDS = [lms.LmsId(A1, "zhangwei-2001", "canvas", "2001", "zhangwei"),
       lms.LmsId(A2, "zhangwei-2001", "canvas", "2001", "zhangwei"),
       lms.LmsId(A1, "ann-17", "canvas", "17", "leeann"),
       lms.LmsId(A1, "late-2002", "canvas", "2002", "late"),       # collected, never graded
       lms.LmsId(A1, "wei_zhang-1003", "moodle", "1003", "Wei Zhang"),
       lms.LmsId(A1, "李明-1001", "moodle", "1001", "李明")]
ROWS = [_row(A1, "zhangwei-2001", 42.5), _row(A2, "zhangwei-2001", 30, max_score=60),
        _row(A1, "ann-17", 50, pending=3), _row(A1, "reference", 50),
        _row(A1, "wei_zhang-1003", 12.25), _row(A1, "李明-1001", 0)]


def test_canvas_file_has_canvas_columns_points_possible_and_user_ids(tmp_path):
    out = lms.write_canvas(tmp_path / "canvas.csv", ROWS, IDS, {A1: "Attention kernels (4711)"})
    header, points, *students = _read(tmp_path / "canvas.csv")
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Attention kernels (4711)", A2]
    assert re.fullmatch(r".+ \(\d+\)", header[5])  # Canvas matches "Name (assignment id)" to its assignment
    assert points[0].strip() == "Points Possible" and points[1:5] == ["", "", "", ""] and points[5:] == ["50", "60"]
    # one row per Canvas user, matched by ID; a grade it does not have is an empty cell (left as it is)
    assert students == [["leeann", "17", "", "", "", "50", ""], ["zhangwei", "2001", "", "", "", "42.5", "30"]]
    assert out.students == ["ann-17", "zhangwei-2001"]
    assert out.not_graded == ["late-2002"] and out.incomplete == ["ann-17"]
    assert out.not_from_lms == ["reference", "wei_zhang-1003", "李明-1001"]
    notes = "\n".join(out.notes())
    assert "late-2002" in notes and "by hand count 0 for: ann-17" in notes


def test_moodle_worksheet_has_the_columns_moodle_reads_and_participant_ids(tmp_path):
    when = dt.datetime(2026, 12, 2, 14, 5, tzinfo=dt.timezone.utc)
    out = lms.write_moodle(tmp_path / "moodle.csv", ROWS, IDS, A1, now=when)
    with open(tmp_path / "moodle.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    # Moodle's importer finds its columns by these (English) names and needs all three
    assert {"Identifier", "Grade", "Last modified (grade)"} <= set(rows[0])
    # and takes the participant id as what follows "Participant " in Identifier
    ids = [r["Identifier"][len("Participant "):] for r in rows]
    assert ids == ["1001", "1003"] and all(r["Identifier"].startswith("Participant ") for r in rows)
    assert [(r["Full name"], r["Grade"], r["Maximum Grade"]) for r in rows] == [("李明", "0", "50"),
                                                                                ("Wei Zhang", "12.25", "50")]
    assert {dt.datetime.fromisoformat(r["Last modified (grade)"]) for r in rows} == {when}
    assert out.not_from_lms == ["ann-17", "reference", "zhangwei-2001"] and not out.not_graded
    other = lms.write_moodle(tmp_path / "none.csv", ROWS, IDS, A2)
    assert other.students == [] and _read(tmp_path / "none.csv") == [lms.MOODLE_COLUMNS]

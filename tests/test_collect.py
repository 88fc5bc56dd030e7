"""``attnlab collect`` with LMS exports as they come: students who share a name, names in any alphabet,
files that are not submissions. Nothing is merged or dropped without a word (case20)."""

from __future__ import annotations

import csv
import re
import zipfile

import nbformat
import pytest

from attnlab.grading.build import generate_assignment
from attnlab.grading.collect import parse, slug
from attnlab.grading.samples import reference_notebook, release_notebook

from .conftest import copy_course, run_cli

NB = "01_online_softmax"


@pytest.mark.parametrize("name,want", [
    ("李明", "李明"), ("Иван Петров", "иван_петров"), ("प्रिया शर्मा", "प्रिया_शर्मा"), ("محمد علي", "محمد_علي"),
    ("José Ñúñez", "josé_ñúñez"), ("ＡＢＣ", "abc"), ("O'Brien, Seán", "o_brien_seán"), ("??", "unknown"),
])
def test_slug_keeps_every_alphabet_readable(name, want):
    assert slug(name) == want


def test_distinct_names_and_lms_ids_give_distinct_ids():
    names = ["李明", "王芳", "Zoë", "Zoe", "Иван", "Ivan"]
    assert len({slug(n) for n in names}) == len(names)
    moodle = [parse(f"x/Wei Zhang_{i}_assignsubmission_file_/{NB}.ipynb") for i in (1003, 1004)]
    assert [m["student_id"] for m in moodle] == ["wei_zhang-1003", "wei_zhang-1004"]
    canvas = [parse(f"x/zhangwei{late}_{uid}_9_{NB}.ipynb") for late, uid in (("", 7), ("_LATE", 8))]
    assert [c["student_id"] for c in canvas] == ["zhangwei-7", "zhangwei-8"]


@pytest.mark.slow
def test_collect_keeps_students_of_one_name_apart_and_reports_what_it_leaves_out(tmp_path):
    c = copy_course(tmp_path / "course")
    generate_assignment(c)
    good = nbformat.writes(reference_notebook(c, NB))
    blank = nbformat.writes(release_notebook(c, NB))
    moodle = tmp_path / "moodle.zip"
    with zipfile.ZipFile(moodle, "w") as z:
        for folder, text in (("李明_1001", good), ("王芳_1002", blank), ("Wei Zhang_1003", good),
                             ("Wei Zhang_1004", blank)):
            z.writestr(f"{folder}_assignsubmission_file_/{NB}.ipynb", text)
        z.writestr("Wei Zhang_1003_assignsubmission_file_/report.pdf", b"%PDF")
        z.writestr("__MACOSX/Wei Zhang_1003_assignsubmission_file_/._01_online_softmax.ipynb", b"")
        z.writestr(f"{NB}.ipynb", good)  # in no student's folder
    code, out = run_cli(c, "collect", str(moodle))
    assert code == 0, out
    want = {"李明-1001": good, "王芳-1002": blank, "wei_zhang-1003": good, "wei_zhang-1004": blank}
    for student, text in want.items():
        folder = c.submitted / student / "attention_kernels"
        assert [p.name for p in folder.glob("*.ipynb")] == [f"{NB}.ipynb"], student
        assert (folder / f"{NB}.ipynb").read_text() == text, student
    assert "left out 3 files of the export:" in out
    assert "Wei Zhang_1003_assignsubmission_file_/report.pdf: not a notebook (.pdf)" in out
    assert "macOS or Jupyter metadata" in out and f"moodle/{NB}.ipynb: no student found" in out

    canvas = tmp_path / "canvas.zip"
    with zipfile.ZipFile(canvas, "w") as z:
        z.writestr(f"zhangwei_2001_51_{NB}.ipynb", good)
        z.writestr(f"zhangwei_LATE_2002_52_Copy of {NB}.ipynb", blank)
    code, out = run_cli(c, "collect", str(canvas))
    assert code == 0, out
    assert (c.submitted / "zhangwei-2001" / "attention_kernels" / f"{NB}.ipynb").read_text() == good
    assert (c.submitted / "zhangwei-2002" / "attention_kernels" / f"{NB}.ipynb").read_text() == blank

    # ids in any alphabet go through nbgrader's gradebook, paths and reports
    code, out = run_cli(c, "autograde", "--notebook", NB, "--student", "李明-1001", "--student", "王芳-1002",
                        "--student", "wei_zhang-1004", "--student", "zhangwei-2001")
    assert code == 0, out
    rows = dict(re.findall(r"^(\S+) +\d+/\d+ +(\d+/\d+)$", out, re.MULTILINE))  # the table: student, 01, total
    assert rows == {"李明-1001": "6/6", "王芳-1002": "0/6", "wei_zhang-1004": "0/6", "zhangwei-2001": "6/6"}, out

    # the grades go back keyed by the ids each LMS's export carried (src/attnlab/grading/lms.py)
    code, out = run_cli(c, "export", "--to", str(tmp_path / "grades.csv"), "--canvas", str(tmp_path / "canvas.csv"),
                        "--moodle", str(tmp_path / "moodle.csv"))
    assert code == 0, out
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as f:
        full = {r["student_id"]: r["max_score"] for r in csv.DictReader(f)}["zhangwei-2001"]
    with open(tmp_path / "canvas.csv", newline="", encoding="utf-8") as f:
        header, points, *students = list(csv.reader(f))
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and header[5:] == ["attention_kernels"]
    assert points[0].strip() == "Points Possible" and float(points[5]) == float(full) > 6
    assert [(s[1], s[5]) for s in students] == [("2001", "6")]  # Canvas's user id; 2002 was not graded
    with open(tmp_path / "moodle.csv", newline="", encoding="utf-8") as f:
        moodle_rows = {r["Identifier"]: r["Grade"] for r in csv.DictReader(f)}
    assert moodle_rows == {"Participant 1001": "6", "Participant 1002": "0", "Participant 1004": "0"}
    assert "collected but not graded (no grade written): wei_zhang-1003" in out
    assert "collected but not graded (no grade written): zhangwei-2002" in out


@pytest.mark.parametrize("layout", ["auto", "moodle", "folders"])
def test_a_folder_inside_a_submission_never_files_work_under_another_student(layout):
    """A student's upload may hold folders of its own; one named like another student's LMS folder
    must not file its notebook as theirs (red team, 2026-12-02): the LMS's outermost folder decides."""
    planted = ("export/Alice Smith_1001_assignsubmission_file_/Bob Jones_1002_assignsubmission_file_/"
               "04_triton_softmax.ipynb")
    if layout == "folders":
        planted = "export/alice/bob/04_triton_softmax.ipynb"
    assert parse(planted, layout)["student_id"] in ("alice_smith-1001", "alice")

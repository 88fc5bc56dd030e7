"""Autograding the sample submissions end to end: the reference earns everything, the blank release
nothing, and the typical mistakes lose exactly the points of the tests aimed at them. (Every other
sample mistake: tests/test_mistakes.py.)"""

from __future__ import annotations

import nbformat
import pytest

from attnlab import init
from attnlab.grading.course import assignment_of
from attnlab.grading.samples import load_mistakes

from .conftest import ROOT, Course, other_mistakes
from .notebook_runner import run_as_autograded

NOTEBOOKS = Course(ROOT).all_notebook_names()  # both assignments
MISTAKES, TYPICAL = load_mistakes(Course(ROOT))
init(verbose=False)  # interpreter mode before anything imports triton


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_reference_earns_every_autograded_point(graded, notebook):
    r = graded.results[("reference", notebook)]
    assert r.status == "graded", r.reason
    assert r.max_points > 0
    assert r.points == r.max_points, r.losses()


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_reference_runs_top_to_bottom_without_errors(graded, notebook):
    """The autograded reference is the source notebook with hidden tests: no cell may raise."""
    path = graded.course.autograded / "reference" / assignment_of(notebook) / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    errors = [(c.metadata.get("nbgrader", {}).get("grade_id", c.id), o.get("ename"), o.get("evalue", "")[:200])
              for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_blank_release_scores_zero_and_finishes(graded, notebook):
    r = graded.results[("blank", notebook)]
    assert r.status == "graded", r.reason
    assert r.points == 0
    assert r.seconds < 120


def test_typical_mistakes_lose_points_only_where_aimed(graded):
    by_id = {m.id: m for m in MISTAKES}
    aimed = {by_id[t].notebook: by_id[t] for t in TYPICAL}
    for notebook in NOTEBOOKS:
        r = graded.results[("typical_mistakes", notebook)]
        lost = {c.grade_id for c in r.cells if c.points < c.max_points}
        if notebook in aimed:
            assert lost == set(aimed[notebook].fails), (notebook, r.losses())
        else:
            assert r.points == r.max_points, (notebook, r.losses())


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_in_process_runs_lose_what_autograding_loses(graded, notebook):
    """tests/test_mistakes.py runs every sample mistake in-process (notebook_runner.run_as_autograded);
    here that way and nbgrader's agree, cell by cell and error by error, on the reference, the typical
    mistake and one other mistake of each notebook, all graded end to end."""
    typical = {m.notebook: m for m in MISTAKES if m.id in TYPICAL}
    for student, mistake in (("reference", None), ("typical_mistakes", typical.get(notebook)),
                             ("other_mistakes", other_mistakes(graded.course).get(notebook))):
        if student != "reference" and mistake is None:
            continue
        r = graded.results[(student, notebook)]
        assert r.status == "graded", (student, r.reason)
        lost = {c.grade_id: c.reason.split(":", 1)[0] for c in r.cells if c.points < c.max_points}
        failed, others = run_as_autograded(notebook, mistake)
        assert lost == {gid: error.split(":", 1)[0] for gid, error in failed.items()}, (student, r.losses(), failed)
        assert others == {}, (student, others)


def test_a_submission_holding_a_link_is_refused_not_followed(graded):
    """A link in a submission folder (to a file only root may read) would be copied by nbgrader as the
    grader reads it and handed to the kernel: the whole submission is refused with the reason instead."""
    r = graded.results[("linked", "01_online_softmax")]
    assert r.status == "failed" and r.points == 0, (r.status, r.points, r.reason)
    assert "notes.txt (a link)" in r.reason and "follows no link" in r.reason
    assert not (graded.course.autograded / "linked" / graded.course.assignment / "notes.txt").exists()


# ------------------------------------------- hand grading, feedback and export without grading anything
def _tiny_gradebook(tmp_path):
    """A SQLite gradebook (nbgrader's API) with assignment ``a`` (notebook ``nb``: test cell ``t``, 2
    points; written answers ``w1``, ``w2``, 1 point each), assignment ``b`` that nobody submitted, and
    student ``s``'s submission of ``a``."""
    from nbgrader.api import Gradebook

    from attnlab.grading.course import tool_env

    from .conftest import environment

    with environment({"PATH": tool_env()["PATH"]}):  # nbgrader shells out to alembic for a new database
        gb = Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", "c")
    for name in ("a", "b"):
        gb.add_assignment(name)
        gb.add_notebook("nb", name)
        gb.add_grade_cell("t", "nb", name, max_score=2, cell_type="code")
        for w in ("w1", "w2"):
            gb.add_grade_cell(w, "nb", name, max_score=1, cell_type="markdown")
            gb.add_solution_cell(w, "nb", name)
    gb.add_student("s", first_name="Ann, B.")
    gb.add_submission("a", "s")
    grades = {g.name: g for g in gb.find_submission_notebook("nb", "a", "s").grades}
    grades["t"].auto_score, grades["t"].needs_manual_grade = 2.0, False  # what SaveAutoGrades leaves
    for w in ("w1", "w2"):
        grades[w].auto_score, grades[w].needs_manual_grade = None, True
    gb.db.commit()
    return gb, grades


def test_keep_hand_grading_restores_unchanged_answers_and_names_the_others(tmp_path):
    from attnlab.grading.worker.gradebook import hand_graded, keep_hand_grading

    gb, grades = _tiny_gradebook(tmp_path)
    try:
        for name, score in (("t", 1.5), ("w1", 1.0), ("w2", 0.5)):  # formgrader's save
            grades[name].manual_score, grades[name].needs_manual_grade = score, False
        gb.db.commit()
        before = hand_graded(gb, "a", "s", "nb")
        assert before == {"t": (1.5, 2.0), "w1": (1.0, None), "w2": (0.5, None)}
        for g in grades.values():  # nbgrader's SaveAutoGrades on the re-grade: the test now fails
            g.needs_manual_grade = True
        grades["t"].auto_score = 0.0
        gb.db.commit()
        old = {"t": (False, "check()"), "w1": (True, "same words"), "w2": (True, "first words")}
        new = {"t": (False, "check()"), "w1": (True, "same words"), "w2": (True, "other words")}
        lines = keep_hand_grading(gb, "a", "s", "nb", before, old, new)
        state = {g.name: (g.manual_score, g.needs_manual_grade) for g in gb.find_submission_notebook("nb", "a", "s").grades}
        assert state == {"t": (1.5, True), "w1": (1.0, False), "w2": (0.5, True)}
        assert lines[0] == "hand grading kept for w1 (unchanged since graded by hand)"
        assert "t reopened for hand grading: its autograded score changed from 2.0 to 0.0" in lines[1]
        assert lines[2].startswith("w2 reopened for hand grading: the answer changed since it was graded by hand")
        # no earlier autograded notebook: nothing to compare with, everything hand-graded is reopened
        lines = keep_hand_grading(gb, "a", "s", "nb", {"w1": (1.0, None)}, None, new)
        assert lines == ["w1 reopened for hand grading: the earlier autograded notebook is gone, so the answer could "
                         "not be compared (the hand score 1 stands until it is graded again)"]
    finally:
        gb.close()


def test_export_rows_are_graded_submissions_with_what_waits_for_hand_grading(tmp_path):
    import csv

    from attnlab.grading.host.feedback import GradesExport, grade_rows

    gb, grades = _tiny_gradebook(tmp_path)
    try:
        rows = grade_rows(gb)
        assert [(r["assignment"], r["student_id"]) for r in rows] == [("a", "s")]  # nothing for b: not submitted
        row = rows[0]
        assert (row["score"], row["max_score"], row["autograded_score"], row["to_be_graded"], row["complete"]) == \
               (2.0, 4.0, 2.0, 2.0, "no")
        grades["w1"].manual_score = grades["w2"].manual_score = 1.0
        grades["w1"].needs_manual_grade = grades["w2"].needs_manual_grade = False
        gb.db.commit()
        row = grade_rows(gb)[0]
        assert (row["score"], row["hand_graded_score"], row["to_be_graded"], row["complete"]) == (4.0, 2.0, 0.0, "yes")
        plugin = GradesExport(to=str(tmp_path / "grades.csv"))
        plugin.export(gb)
        with open(tmp_path / "grades.csv") as f:
            written = list(csv.DictReader(f))
        assert len(written) == 1 and written[0]["first_name"] == "Ann, B." and written[0]["score"] == "4.0"
    finally:
        gb.close()


def test_feedback_page_marks_answers_to_be_graded_in_nbgraders_template():
    """nbgrader's own feedback template, rendered as generate_feedback does, then marked: the test
    fails if the template's score markup changes under the marks."""
    import os

    import nbformat
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    from attnlab.grading.host.feedback import mark_to_be_graded

    def cell(kind, gid, score, points, solution):
        meta = {"grade": True, "grade_id": gid, "solution": solution, "points": points, "score": score}
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        return make("answer text" if solution else "check()", metadata={"nbgrader": meta})

    nb = nbformat.v4.new_notebook(cells=[cell("code", "t", 2.0, 2.0, False), cell("markdown", "w1", 0.0, 1.0, True)])
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    config.HTMLExporter.extra_template_paths = [os.path.join(os.path.dirname(handlers.__file__), "static",
                                                             "node_modules", "bootstrap", "dist", "css")]
    resources = {"nbgrader": {"notebook": "nb", "score": 2.0, "max_score": 3.0, "late_penalty": 0}}
    page, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=resources)
    assert "Score: 0.0 / 1.0" in page  # what nbgrader shows for an answer nobody graded yet
    marked = mark_to_be_graded(page, {"w1": 1.0}, {"auto": 2.0, "auto_max": 2.0, "hand": 0.0, "hand_max": 0.0})
    assert "Score: 0.0 / 1.0" not in marked and "Score: 2.0 / 2.0" in marked
    assert '<a href="#w1">Written response</a> (to be graded by hand, 1 point)' in marked
    assert "To be graded by hand (1 point)" in marked
    assert "<h4>nb (Score so far: 2 / 2; 1 point to be graded by hand)</h4>" in marked
    assert "<b>Autograded:</b> 2 / 2" in marked

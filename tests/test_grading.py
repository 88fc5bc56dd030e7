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

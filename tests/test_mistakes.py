"""Every sample mistake of samples/mistakes/ loses exactly the test cells aimed at it, and a correct
variant none, run as autograding runs its notebook (tests/notebook_runner.py: the same cells, hidden
tests included, in-process; test_grading checks that this agrees with nbgrader on the typical mistakes).
A grader is only as good as the wrong answers it rejects: a mistake its tests let through fails here."""

from __future__ import annotations

import pytest

from attnlab import init
from attnlab.grading.samples import load_mistakes

from .conftest import ROOT, Course
from .notebook_runner import autograded_notebook, run_as_autograded

init(verbose=False)  # interpreter mode before anything imports triton
MISTAKES, _ = load_mistakes(Course(ROOT))


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.id for m in MISTAKES])
def test_each_mistake_fails_exactly_its_tests(mistake):
    failed, others = run_as_autograded(mistake.notebook, mistake)
    assert set(failed) == set(mistake.fails), f"{mistake.why}: failed {sorted(failed)}; {failed}"
    for grade_id, error in failed.items():  # the reason a learner sees names the failing check
        assert error.split(":", 1)[1].strip(), (grade_id, error)
    # A cell that is not a test may raise only after the mistake, where it runs the mistaken code (a
    # "try it" cell launching a kernel that does not compile); a correct variant raises nowhere. A cell
    # before it raising would mean the run itself is broken, and the tests fail for the wrong reason.
    order = [c.metadata.get("nbgrader", {}).get("grade_id") for c in autograded_notebook(mistake.notebook).cells]
    first = min(order.index(g) for g in [mistake.cell, *(g for g, _ in mistake.other_cells)])
    assert all(g in order and order.index(g) > first for g in others) if mistake.fails else others == {}, others

"""The class's speed pass: every submitted kernel notebook timed on this grader's GPU (issue 33).

Run after ``attnlab autograde`` (the timing stage times kernels whose tests passed): for each student
and each notebook with a timing stage (:data:`.timing.BENCHMARKS`), :func:`.timing.time_notebook`
times the learner's kernels against the instructor's, in a sandboxed worker of its own, and the
outcome goes to ``timings/<assignment>/<student>/<notebook>.json`` in the course folder (one file
per outcome, so shards on several machines never write the same file). A notebook whose autograded
tests did not all pass is not timed; on a grader without a GPU nothing is timed and each outcome
says "needs GPU timing". :mod:`.leaderboard` reads the files back.

Figures (H200, 2026-12-02): the reference of 05 against itself varies by 0.04% (coefficient of
variation over 5 reruns); one notebook's stage takes 12-21 s (notes/gpu/2026-12-02/timing/).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from .course import Course
from .timing import BENCHMARKS, Status, Timing, time_notebook

__all__ = ["TIMINGS", "timing_path", "tests_passed", "time_student", "load_timings"]

#: The course-root folder the speed pass writes into.
TIMINGS = "timings"


def timing_path(course: Course, student: str, notebook: str) -> Path:
    return course.root / TIMINGS / course.assignment / student / f"{notebook}.json"


def tests_passed(course: Course, student: str, notebook: str) -> bool | None:
    """Whether every autograded test of the notebook got its points in the gradebook (None: not graded)."""
    from nbgrader.api import Gradebook, MissingEntry

    from .gradebook import db_url

    with Gradebook(db_url(course)) as gb:
        try:
            nb = gb.find_submission_notebook(notebook, course.assignment, student)
        except MissingEntry:
            return None
        tests = [g for g in nb.grades if g.auto_score is not None and g.cell.cell_type == "code"]
        return bool(tests) and all(g.auto_score >= g.max_score for g in tests)


def time_student(course: Course, student: str, *, reps: int = 30, sandbox: bool = True,
                 check_tests: bool = True) -> list[tuple[Path, Timing]]:
    """Time each timed notebook of ``student``'s submission and write its outcome file.

    Returns:
        (file written, outcome) per timed notebook of the assignment that the student submitted.
    """
    written = []
    folder = course.submitted / student / course.assignment
    for name in course.notebook_names():
        if name not in BENCHMARKS or not (folder / f"{name}.ipynb").is_file():
            continue
        passed = tests_passed(course, student, name) if check_tests else True
        if passed is None:
            timing = Timing(name, Status.NOT_TIMED, "not autograded yet: run attnlab autograde first")
        elif not passed:
            timing = Timing(name, Status.NOT_TIMED, "not timed: its autograded tests did not all pass")
        else:
            timing = time_notebook(folder / f"{name}.ipynb", course.source / f"{name}.ipynb", reps=reps,
                                   sandbox=sandbox)
        record = {"student": student, "assignment": course.assignment,
                  "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **timing.to_json()}
        path = timing_path(course, student, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
        written.append((path, timing))
    return written


def load_timings(course: Course) -> list[dict]:
    """Every outcome file of the assignment, as written by :func:`time_student`."""
    root = course.root / TIMINGS / course.assignment
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/*.json"))]

"""The class's speed pass: every submitted kernel notebook timed on this grader's GPU (issue 33).

Run after ``attnlab autograde`` (the timing stage times kernels whose tests passed): for each student
and each notebook with a timing stage (:data:`attnlab.grading.worker.timing.BENCHMARKS`),
:func:`attnlab.grading.worker.timing.time_notebook` times the learner's kernels against the
instructor's, in a sandboxed worker of its own, and the outcome goes to
``timings/<assignment>/<student>/<notebook>.json`` in the course folder (one file per outcome, so
shards on several machines never write the same file). A notebook whose autograded tests did not all
pass is not timed; on a grader without a GPU nothing is timed and each outcome
says "needs GPU timing". :mod:`.leaderboard` reads the files back.

Figures (H200, 2026-12-02): the reference of 05 against itself varies by 0.04% (coefficient of
variation over 5 reruns); one notebook's stage took 12-21 s with 30 repetitions in a worker of its own
(notes/gpu/2026-12-02/timing/); a student's notebooks now share one worker and 10 repetitions.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from ..course import Course
from ..worker.timing import BENCHMARKS, DEFAULT_REPS, Status, Timing, time_notebooks

__all__ = ["TIMINGS", "SPEED_CELL", "SpeedPoints", "speed_points", "record_in_gradebook", "timing_path",
           "tests_passed", "time_student", "load_timings"]

#: The course-root folder the speed pass writes into.
TIMINGS = "timings"
#: The grade id of each timed notebook's speed cell: a task cell (graded by this pass, not by hand)
#: whose points, 0 by default, the instructor sets in the notebook like any other cell's.
SPEED_CELL = "speed"


class SpeedPoints:
    """How a timed kernel earns its speed cell's points, from ``nbgrader_config.py``::

        c.SpeedPoints.floor = 0.5    # ratio to the reference kernel at or below which it earns nothing
        c.SpeedPoints.target = 0.9   # ratio at or above which it earns every point (linear between)
    """

    floor: float = 0.5
    target: float = 0.9

    def __init__(self, floor: float = 0.5, target: float = 0.9):
        if not 0 <= floor < target:
            raise ValueError(f"SpeedPoints: need 0 <= floor < target, got floor={floor}, target={target}")
        self.floor, self.target = float(floor), float(target)

    @classmethod
    def of(cls, course: Course) -> "SpeedPoints":
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
        section = config.get("SpeedPoints", {})
        return cls(section.get("floor", cls.floor), section.get("target", cls.target))


def speed_points(ratio: float, max_points: float, rule: SpeedPoints) -> float:
    """Points for a kernel at ``ratio`` x the reference's speed: 0 up to the floor, all from the target
    on, linear between (rounded to 0.01)."""
    share = (ratio - rule.floor) / (rule.target - rule.floor)
    return round(max_points * min(1.0, max(0.0, share)), 2)


def record_in_gradebook(course: Course, student: str, timing: Timing, rule: SpeedPoints) -> str | None:
    """Write a timing into the notebook's speed cell as formgrader writes a hand grade (score and
    comment). Without a GPU the cell stays to be graded, its comment saying so. Returns the comment
    written, or None when the notebook has no speed cell (an older release) or was not autograded."""
    from nbgrader.api import Gradebook, MissingEntry

    from ..worker.gradebook import db_url

    with Gradebook(db_url(course)) as gb:
        try:
            grade = gb.find_grade(SPEED_CELL, timing.notebook, course.assignment, student)
            comment = gb.find_comment(SPEED_CELL, timing.notebook, course.assignment, student)
        except MissingEntry:
            return None
        if timing.status is Status.TIMED:
            grade.manual_score = speed_points(timing.ratio, grade.max_score, rule)
            text = (f"Timed on {timing.device}: {timing.ratio:.3f}x the reference kernel, {timing.rate:.1f} "
                    f"{timing.unit} (median of {timing.reps}); {grade.manual_score:g}/{grade.max_score:g} points "
                    f"(all from {rule.target:g}x, none at or below {rule.floor:g}x).")
        elif timing.status is Status.NEEDS_GPU:
            grade.manual_score = None
            text = "needs GPU timing: this grader has no GPU; the speed cell is graded on a GPU grader."
        else:
            grade.manual_score = 0.0
            text = f"Not timed ({timing.status.value}): {timing.message}"
        grade.needs_manual_grade = grade.manual_score is None
        comment.manual_comment = text
        gb.db.commit()
        return text


def timing_path(course: Course, student: str, notebook: str) -> Path:
    return course.root / TIMINGS / course.assignment / student / f"{notebook}.json"


def tests_passed(course: Course, student: str, notebook: str) -> bool | None:
    """Whether every autograded test of the notebook got its points in the gradebook (None: not graded)."""
    from nbgrader.api import Gradebook, MissingEntry

    from ..worker.gradebook import db_url

    with Gradebook(db_url(course)) as gb:
        try:
            nb = gb.find_submission_notebook(notebook, course.assignment, student)
        except MissingEntry:
            return None
        tests = [g for g in nb.grades if g.auto_score is not None and g.cell.cell_type == "code"]
        return bool(tests) and all(g.auto_score >= g.max_score for g in tests)


def time_student(course: Course, student: str, *, reps: int = DEFAULT_REPS, sandbox: bool = True,
                 check_tests: bool = True) -> list[tuple[Path, Timing]]:
    """Time each timed notebook of ``student``'s submission (all in one worker process:
    :func:`attnlab.grading.worker.timing.time_notebooks`) and write its outcome file.

    Returns:
        (file written, outcome) per timed notebook of the assignment that the student submitted.
    """
    written = []
    rule = SpeedPoints.of(course)
    folder = course.submitted / student / course.assignment
    outcomes: dict[str, tuple[bool | None, Timing | None]] = {}
    for name in course.notebook_names():
        if name not in BENCHMARKS or not (folder / f"{name}.ipynb").is_file():
            continue
        passed = tests_passed(course, student, name) if check_tests else True
        if passed is None:
            outcomes[name] = passed, Timing(name, Status.NOT_TIMED, "not autograded yet: run attnlab autograde first")
        elif not passed:
            outcomes[name] = passed, Timing(name, Status.NOT_TIMED, "its autograded tests did not all pass")
        else:
            outcomes[name] = passed, None
    timed = [name for name, (_, timing) in outcomes.items() if timing is None]
    pairs = [(folder / f"{name}.ipynb", course.source / f"{name}.ipynb") for name in timed]
    for name, timing in zip(timed, time_notebooks(pairs, reps=reps, sandbox=sandbox)):
        outcomes[name] = outcomes[name][0], timing
    for name, (passed, timing) in outcomes.items():
        if passed is not None:
            record_in_gradebook(course, student, timing, rule)
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


# ------------------------------------------------------------------------------- attnlab speed
DESCRIPTION = (
    "Time each submitted kernel notebook (04, 05, 07, 08) on this grader's GPU against the course's reference "
    "kernels, after `attnlab autograde`: only kernels whose autograded tests all passed, each in a sandboxed "
    "process of its own that runs nothing of the notebook but the kernels' definitions; fresh inputs and an L2 "
    "flush every repetition, every repetition checked. Writes timings/<assignment>/<student>/<notebook>.json "
    "(`attnlab leaderboard` ranks them). Without a GPU each outcome says 'needs GPU timing'. --shard I/N "
    "splits the class over machines as autograde does.")


def add_parser(sub, parents) -> None:
    from ..course import ASSIGNMENT, ASSIGNMENTS

    p = sub.add_parser("speed", help="time the submitted kernels on this GPU (after autograde)",
                       description=DESCRIPTION, parents=parents)
    p.add_argument("--student", action="append", help="only this student (repeatable)")
    p.add_argument("--shard", default=None, metavar="I/N", help="shard I of N of the class, as for autograde")
    p.add_argument("--reps", type=int, default=DEFAULT_REPS,
                   help=f"timed repetitions of each kernel (default {DEFAULT_REPS})")
    p.add_argument("--assignment", choices=ASSIGNMENTS, default=ASSIGNMENT,
                   help=f"the assignment to work on (default {ASSIGNMENT})")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="time even where bubblewrap is missing, WITHOUT the sandbox")
    p.set_defaults(func=_cmd_speed)


def _cmd_speed(args) -> int:
    from .. import sandbox
    from .shards import students_to_grade
    from .autograde import submitted_students

    course = Course.find(args.course, args.assignment)
    try:
        sandbox.require(args.unsafe_no_sandbox)
    except sandbox.SandboxUnavailable as exc:
        print(f"attnlab speed: {exc}", file=sys.stderr)
        return 2
    students = students_to_grade(course, args.shard, None, args.student)
    if students is None:  # an empty shard stays empty
        students = submitted_students(course)
    counts: dict[Status, int] = {}
    for student in students:
        done = time_student(course, student, reps=args.reps, sandbox=not args.unsafe_no_sandbox)
        if not done:
            print(f"  {student:24s} (no timed notebook in this submission)", flush=True)
        for path, timing in done:
            print(f"  {student:24s} {timing.notebook:22s} {timing.status.value}: {timing.message}", flush=True)
            counts[timing.status] = counts.get(timing.status, 0) + 1
    summary = ", ".join(f"{n} {status.value}" for status, n in counts.items()) or "nothing to time"
    print(f"{len(students)} students: {summary}; outcomes in {TIMINGS}/{course.assignment}/"
          + (f"; `attnlab leaderboard --assignment {course.assignment}` ranks them" if counts.get(Status.TIMED)
             else ""))
    return 0

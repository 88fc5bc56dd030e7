"""The class's speed pass: every submitted kernel notebook timed on this grader's GPU (issue 33).

Run after ``attnlab autograde``: for each student, the notebooks with a timing stage
(:data:`attnlab.grading.worker.timing.BENCHMARKS`) whose autograded tests all passed are timed against
the instructor's in one sandboxed worker (:func:`attnlab.grading.worker.timing.time_notebooks`); each
outcome goes to ``timings/<assignment>/<student>/<notebook>.json`` (a file per outcome: shards never
write the same file), where :mod:`.leaderboard` reads it. Without a GPU each says "needs GPU timing".

Several students are timed at once (``--jobs``, :func:`time_students`): their workers start and
compile together on the CPU, and one at a time has the GPU (:mod:`attnlab.grading.worker.gpu_turn`).
Each worker also times the reference kernel, so the pass can tell when a turn was not quiet (a
process of another worker's sandbox using the GPU, say): a student whose reference ran more than
:data:`QUIET_TOLERANCE` off the class's median is timed again alone at the end (:func:`not_quiet`).

Figures (H200, 16 cores, notes/gpu/2026-12-04/session11/): a class of 16 took 2.4-2.9 s per submission
(04+05) and 4.4-5.5 s (07+08) at ``--jobs 8``, 13-21 s one student at a time; the reference
against itself varied by a CV of 0.07% (07) to 1.2% (04), timed alone or beside 7 other workers.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from ..course import Course
from ..worker.gpu_turn import LOCK_DIR
from ..worker.timing import BENCHMARKS, DEFAULT_REPS, Status, Timing, time_notebooks

__all__ = ["TIMINGS", "SPEED_CELL", "QUIET_TOLERANCE", "Unquiet", "not_quiet", "SpeedPoints", "speed_points",
           "record_in_gradebook", "timing_path",
           "tests_passed", "time_student", "time_class", "time_students", "default_jobs", "load_timings"]

#: The course-root folder the speed pass writes into.
TIMINGS = "timings"
#: How far (relative) a worker's reference time may be from the class's median for that notebook before
#: the student is timed again alone. Beside 7 other workers on an H200 the reference stayed within 1.6%
#: of the median (notes/gpu/2026-12-04/session11/).
QUIET_TOLERANCE = 0.05
#: Timed results of a notebook needed before their median is trusted as the quiet GPU's time.
_QUIET_QUORUM = 4
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
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (floor, target)) \
                or not 0 <= floor < target:
            raise ValueError(f"SpeedPoints: need numbers 0 <= floor < target (ratios to the reference's speed, "
                             f"such as 0.5 and 0.9), got floor={floor!r}, target={target!r}")
        self.floor, self.target = float(floor), float(target)

    @classmethod
    def of(cls, course: Course) -> "SpeedPoints":
        """The course's rule, from its ``nbgrader_config.py``.

        Raises:
            ValueError: the settings there are not numbers with 0 <= floor < target (the message names
                the file), or name a setting SpeedPoints does not have (a typo would be ignored).
        """
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
        section = config.get("SpeedPoints", {})
        unknown = sorted(set(section) - {"floor", "target"})
        try:
            if unknown:
                raise ValueError(f"SpeedPoints has no setting {', '.join(unknown)} (it has floor and target)")
            return cls(section.get("floor", cls.floor), section.get("target", cls.target))
        except ValueError as exc:
            raise ValueError(f"{course.root / 'nbgrader_config.py'}: {exc}") from None


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
        elif timing.status is Status.RETRY:
            grade.manual_score = None
            text = f"Not timed, the grader's own trouble (run attnlab speed again): {timing.message}"
        else:
            grade.manual_score = 0.0
            text = f"Not timed: {timing.message}" if timing.status is Status.NOT_TIMED else \
                f"Not timed ({timing.status.value}): {timing.message}"
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


def default_jobs() -> int:
    """Students timed at once by default: half the CPUs this process may use (a worker compiles on one at
    a time), at most 8 (each holds a CUDA context, ~0.5 GB of GPU memory, and a flush buffer)."""
    return max(1, min(8, len(os.sched_getaffinity(0)) // 2))


def time_students(work: dict[str, list[tuple[Path, Path]]], *, jobs: int = 1, reps: int = DEFAULT_REPS,
                  sandbox: bool = True, lock_dir: str = LOCK_DIR):
    """Time several students' notebooks, ``jobs`` students at a time, one worker process each
    (:func:`attnlab.grading.worker.timing.time_notebooks`). The workers start and compile at once; only
    one at a time launches kernels (the GPU's turn, :mod:`attnlab.grading.worker.gpu_turn`, shared with
    other ``attnlab speed`` processes on this machine through the lock files in ``lock_dir``).

    Args:
        work: student -> (submitted notebook, reference notebook) pairs to time.
        jobs: students at once (at least 1).
        lock_dir: the folder of the GPUs' lock files.

    Yields:
        (student, [Timing per pair, in order]) as each student's worker finishes; with ``jobs`` > 1,
        the students of :func:`not_quiet` a second time, once timed again alone after the others
        (their messages say why; one still off the class's median alone says it needs review), and those
        whose timing failed or was the grader's trouble beside other workers.

    Raises:
        ValueError: ``jobs`` < 1.
    """
    if jobs < 1:
        raise ValueError(f"time_students: jobs must be at least 1, got {jobs}")

    def time_one(pairs) -> list[Timing]:  # the grader's trouble with one student never ends the pass
        try:
            return time_notebooks(pairs, reps=reps, sandbox=sandbox, lock_dir=lock_dir)
        except Exception as exc:  # noqa: BLE001  (reported in each outcome, for the instructor)
            return [Timing(Path(p).stem, Status.RETRY, f"the grader could not time it: {type(exc).__name__}: {exc}")
                    for p, _ in pairs]

    timed = {}
    pool = ThreadPoolExecutor(max_workers=jobs)  # threads: each waits on its worker process
    try:
        futures = {pool.submit(time_one, pairs): student for student, pairs in work.items() if pairs}
        for student in (s for s, pairs in work.items() if not pairs):
            yield student, []
        for future in as_completed(futures):
            timed[futures[future]] = future.result()
            yield futures[future], timed[futures[future]]
    finally:  # stopped early (Ctrl-C, an error while recording): students not started yet are not started
        pool.shutdown(wait=True, cancel_futures=True)
    again = {student: str(u) for student, u in not_quiet(timed).items()} if jobs > 1 else {}
    for student, timings in timed.items() if jobs > 1 else ():
        failed = next((t for t in timings if t.status in (Status.FAILED, Status.RETRY)), None)
        if failed is not None and student not in again:  # a neighbour may have taken the GPU's memory, say
            again[student] = f"{failed.notebook} was not timed ({failed.status.value})"
    for student, why in again.items():  # one at a time, nothing else on the GPU
        timings = time_one(work[student])
        still = not_quiet({**timed, student: timings}).get(student)
        for t in timings:
            t.message += (f" (timed again alone: beside other workers {why}"
                          + (f"; alone, {still}: needs review)" if still else ")"))
        yield student, timings


@dataclass(frozen=True)
class Unquiet:
    """A timing whose reference kernel ran off the class's median time (see :func:`not_quiet`)."""

    notebook: str
    reference_ms: float
    median_ms: float

    def __str__(self) -> str:
        return (f"the reference kernel of {self.notebook} took {self.reference_ms:.3f} ms, "
                f"{self.reference_ms / self.median_ms - 1:+.0%} off the class's {self.median_ms:.3f} ms")


def not_quiet(results: dict[str, list[Timing]], tolerance: float = QUIET_TOLERANCE) -> dict[str, Unquiet]:
    """Students whose reference kernel took more than ``tolerance`` (relative) longer or shorter than
    the median of the pass for the same notebook: their turn was probably not quiet, so their ratio is
    not trusted. Notebooks with fewer than 4 timed results have no median to go by.

    Returns:
        student -> the first such timing of theirs.
    """
    times: dict[str, list[float]] = {}
    for timings in results.values():
        for t in timings:
            if t.status is Status.TIMED and t.reference_ms:
                times.setdefault(t.notebook, []).append(t.reference_ms)
    medians = {nb: statistics.median(v) for nb, v in times.items() if len(v) >= _QUIET_QUORUM}
    flagged = {}
    for student, timings in results.items():
        for t in timings:
            median = medians.get(t.notebook)
            if t.status is Status.TIMED and median and abs(t.reference_ms / median - 1) > tolerance:
                flagged[student] = Unquiet(t.notebook, t.reference_ms, median)
                break
    return flagged


def _plan(course: Course, student: str, check_tests: bool) -> dict[str, tuple[bool | None, Timing | None]]:
    """notebook -> (tests passed, outcome already known) for each timed notebook the student submitted;
    outcome None: to be timed."""
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
    return outcomes


def _pairs(course: Course, student: str, plan: dict) -> list[tuple[Path, Path]]:
    folder = course.submitted / student / course.assignment
    return [(folder / f"{name}.ipynb", course.source / f"{name}.ipynb")
            for name, (_, timing) in plan.items() if timing is None]


def _record(course: Course, student: str, plan: dict, timings: list[Timing],
            rule: SpeedPoints) -> list[tuple[Path, Timing]]:
    """Write the student's outcomes (the timed ones in ``timings``, in the plan's order) to the gradebook
    and the outcome files."""
    timed = iter(timings)
    written = []
    for name, (passed, timing) in plan.items():
        timing = timing or next(timed)
        if passed is not None:
            record_in_gradebook(course, student, timing, rule)
        record = {"student": student, "assignment": course.assignment,
                  "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **timing.to_json()}
        path = timing_path(course, student, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
        written.append((path, timing))
    return written


def time_student(course: Course, student: str, *, reps: int = DEFAULT_REPS, sandbox: bool = True,
                 check_tests: bool = True) -> list[tuple[Path, Timing]]:
    """Time each timed notebook of ``student``'s submission (all in one worker process:
    :func:`attnlab.grading.worker.timing.time_notebooks`) and write its outcome file.

    Returns:
        (file written, outcome) per timed notebook of the assignment that the student submitted.
    """
    return time_class(course, [student], reps=reps, sandbox=sandbox, check_tests=check_tests)[student]


def time_class(course: Course, students: list[str], *, jobs: int = 1, reps: int = DEFAULT_REPS,
               sandbox: bool = True, check_tests: bool = True, progress=None) -> dict[str, list[tuple[Path, Timing]]]:
    """:func:`time_student` for each of ``students``, ``jobs`` at a time (:func:`time_students`). The
    gradebook and the outcome files are written from this thread only, as each student finishes;
    ``progress(student, written)`` is called then. With ``jobs`` > 1, the students of :func:`not_quiet`
    are then timed again alone and written again (their messages say why; one still off the class's
    median alone says it needs review).

    Returns:
        student -> (file written, outcome) per timed notebook.
    """
    rule = SpeedPoints.of(course)
    plans = {student: _plan(course, student, check_tests) for student in students}
    work = {student: _pairs(course, student, plan) for student, plan in plans.items()}
    done = {}
    for student, timings in time_students(work, jobs=jobs, reps=reps, sandbox=sandbox):
        done[student] = _record(course, student, plans[student], timings, rule)  # again if timed again
        if progress is not None:
            progress(student, done[student])
    return {student: done[student] for student in students}


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
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="students timed at once: their workers start and compile together, one at a time has the "
                        "GPU (default: half the CPUs, at most 8)")
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
    jobs = args.jobs if args.jobs is not None else default_jobs()
    try:
        if jobs < 1 or args.reps < 1:
            raise ValueError(f"--jobs and --reps must be at least 1, got --jobs {jobs}, --reps {args.reps}")
        SpeedPoints.of(course)
        students = students_to_grade(course, args.shard, None, args.student)
    except ValueError as exc:
        print(f"attnlab speed: {exc}", file=sys.stderr)
        return 2
    if students is None:  # an empty shard stays empty
        students = submitted_students(course)
    latest: dict[tuple[str, str], Status] = {}  # a student timed again alone is printed twice, counted once

    def progress(student, done):
        if not done:
            print(f"  {student:24s} (no timed notebook in this submission)", flush=True)
        for path, timing in done:
            print(f"  {student:24s} {timing.notebook:22s} {timing.status.value}: {timing.message}", flush=True)
            latest[student, timing.notebook] = timing.status

    time_class(course, students, jobs=jobs, reps=args.reps, sandbox=not args.unsafe_no_sandbox, progress=progress)
    counts = Counter(latest.values())
    summary = ", ".join(f"{n} {status.value}" for status, n in counts.items()) or "nothing to time"
    print(f"{len(students)} student{'' if len(students) == 1 else 's'}: {summary}; outcomes in {TIMINGS}/{course.assignment}/"
          + (f"; `attnlab leaderboard --assignment {course.assignment}` ranks them" if counts.get(Status.TIMED)
             else ""))
    return 0

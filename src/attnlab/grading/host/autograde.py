"""Autograde submissions one notebook at a time, and report points and the reason for every loss.

nbgrader 0.9 grades a submission's notebooks in one loop: a kernel that dies in one notebook
aborts the loop (zeroing the notebooks after it) and removes the autograded folder. Running
``nbgrader autograde --notebook NAME`` once per notebook, each in its own process group under a
wall-clock limit, confines any failure to the notebook that caused it. Inside a notebook the
course's Execute step (:mod:`attnlab.grading.worker.execute`) keeps the points earned before a crash, and its
sanitising step (:mod:`attnlab.grading.worker.repair`) fixes damaged cells; before grading, misnamed notebooks are
matched back to the assignment's names (:mod:`.submissions`). Everything noticed on the way is a
note in the report, beside the points and the reason for every loss; what a check could not rule
out ("needs review: ...", :func:`attnlab.core.review.flag`) is listed apart. Every job comes back graded
or with the reason it was not, even when a worker or a kernel is killed or the gradebook's server
goes away (waited for: :func:`attnlab.grading.worker.gradebook.retrying`); a re-grade keeps the hand grading of answers
that did not change (:func:`attnlab.grading.worker.gradebook.keep_hand_grading`).
"""
# Split by job: the worker pool (.pool), reading a graded notebook back (.evaluate), contention
# (.contention), records (.records) and reports (.reports); this module decides what is graded, when
# again, and in what order the results come back.

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ...core.outcome import Status
from .contention import contended
from .evaluate import (evaluate_notebook, failure_reason, gradebook_text, notebook_points, read_grades,  # noqa: F401
                       unrecorded, zero_notebook)
from .pool import Slot, kill_kernels, overlapped, run_worker  # noqa: F401 (public here: the grader's entry points)
from .records import CellResult, NotebookResult, not_graded, printable  # noqa: F401 (public here)
from .reports import format_report, read_report_json, write_report_csv, write_report_json  # noqa: F401 (public here)
from ..course import Course, tool_env

#: Wall-clock limit for grading one notebook (its cells are limited separately, see nbgrader_config.py).
NOTEBOOK_LIMIT_S = 600


def autograde_jobs(course: Course, jobs: list[tuple[str, str]], limit_s: float = NOTEBOOK_LIMIT_S,
                   progress=None, allow_unsafe: bool = False, workers=1) -> list[NotebookResult]:
    """Autograde (student, notebook) pairs, each on its own; never raises for a bad submission.

    ``workers`` grading workers (a count, or a :class:`.parallel.Plan`) run side by side, each on
    one student at a time; the results are those of a serial run, in ``jobs``' order.

    Every kernel runs in the sandbox (:mod:`attnlab.grading.sandbox`); ``allow_unsafe`` (the instructor's
    ``--unsafe-no-sandbox``) grades without it where bubblewrap is missing.

    Raises:
        SandboxUnavailable: bubblewrap is missing or fails here and ``allow_unsafe`` is False
            (checked before anything is graded).

    Each submission folder is normalised first (:func:`.submissions.normalize_submission`:
    "Copy of X.ipynb" becomes X.ipynb when X is missing). A notebook that was not submitted scores
    0 with the reason "not submitted". Notes on the submission as a whole (ignored extra files)
    go with the student's first notebook.
    """
    from ..course import assignment_of
    from ..sandbox import require
    from .submissions import WHOLE, normalize_submission, not_plain_files

    by_assignment: dict[str, list[tuple[str, str]]] = {}
    for s, n in jobs:
        try:
            a = assignment_of(n)
        except ValueError:  # not a course notebook name: graded (and reported) within this assignment
            a = course.assignment
        by_assignment.setdefault(a, []).append((s, n))
    if set(by_assignment) - {course.assignment}:  # notebooks of several assignments: each in its own course view
        return [r for a, mine in by_assignment.items()
                for r in autograde_jobs(course.for_assignment(a), mine, limit_s, progress, allow_unsafe, workers)]

    from ..worker.gradebook import wait_for_gradebook_locks

    warning = require(allow_unsafe)
    wait_for_gradebook_locks()  # the workers write to the gradebook while this process reads it
    if allow_unsafe and progress:
        progress(warning)
    from ..sandbox import describe_seccomp
    from ..sandbox.tasks import describe, describe_memory, prepare

    if not allow_unsafe:
        prepare()  # cgroup v2: the kernels' cgroups inside ours; the cgroups of a grader that was killed
        for bounded, line in (describe(), describe_memory(), describe_seccomp()):
            if progress and not bounded:
                progress(f"WARNING: {line}")
    results: dict[str, NotebookResult] = {}
    folder_notes: dict[str, dict[str, list[str]]] = {}
    refused: dict[str, str] = {}  # student -> why none of the submission's notebooks is graded
    for s in dict.fromkeys(s for s, _ in jobs):
        odd = not_plain_files(course.submitted / s / course.assignment)
        if odd:
            refused[s] = (f"not graded: the submission folder holds {', '.join(odd[:5])}"
                          f"{' and more' if len(odd) > 5 else ''}; the grader follows no link (it would read "
                          f"the target with the grader's rights): replace each by the file itself, then grade again")
            folder_notes[s] = {}
            continue
        folder_notes[s] = normalize_submission(course.submitted / s / course.assignment, course.notebook_names())
    first_job = {}
    for s, n in jobs:
        first_job.setdefault(s, n)

    def finish(job: str, outcome) -> None:
        """Record ``job``'s result; never raises (a slot's thread calls it: an error would stop that
        slot and leave its students ungraded): what cannot be recorded is NOT GRADED with the reason."""
        s, n = job.split("/")
        try:
            r = evaluate(s, n, outcome)
        except Exception as exc:  # noqa: BLE001 (the gradebook gone for good, or a bug: say so, carry on)
            auto, manual = notebook_points(course, n)
            r = NotebookResult(s, n, Status.FAILED, max_points=sum(auto.values()), manual_max=manual,
                               reason=unrecorded(exc), seconds=outcome[2] if outcome else 0.0)
        from ..worker.gradebook import take_waits

        r.gradebook += [w for w in take_waits() if w not in r.gradebook]
        results[job] = r
        if progress:
            progress(printable(f"  {s:<24} {n:<22} {r.points:>5g}/{r.max_points:<5g} {r.status:<8} {r.seconds:5.1f} s"))

    def evaluate(s: str, n: str, outcome) -> NotebookResult:
        notes = list(folder_notes[s].get(n, []))
        if first_job[s] == n:
            notes += folder_notes[s].get(WHOLE, [])
        if s in refused or outcome is None:
            auto, manual = notebook_points(course, n)
        if s in refused:
            r = NotebookResult(s, n, Status.FAILED, max_points=sum(auto.values()), manual_max=manual, reason=refused[s])
            zero_notebook(course, s, n)
        elif outcome is None:
            folder = course.submitted / s / course.assignment
            others = sorted(p.name for p in folder.glob("*.ipynb")) if folder.is_dir() else []
            reason = f"{n}.ipynb was not submitted"
            if not folder.is_dir():
                reason += " (no submission folder)"
            elif others:
                reason += f" (the submission holds {', '.join(others)})"
            r = NotebookResult(s, n, Status.MISSING, max_points=sum(auto.values()), manual_max=manual, reason=reason)
            zero_notebook(course, s, n)
        else:
            r = evaluate_notebook(course, s, n, *outcome, limit_s=limit_s)
        r.notes = notes + r.notes
        return r

    present = []
    for s, n in jobs:
        if s not in refused and (course.submitted / s / course.assignment / f"{n}.ipynb").exists():
            present.append(f"{s}/{n}")
        else:
            finish(f"{s}/{n}", None)
    if present:
        from .parallel import Plan, plan as make_plan

        plan = workers if isinstance(workers, Plan) else make_plan(workers)
        spans: dict[str, tuple[int, float, float]] = {}
        outcomes = run_worker(course, present, limit_s, on_done=finish, workers=plan, spans=spans)
        for job in present:  # nothing goes unreported, whatever happened to the workers
            if job not in results:
                finish(job, outcomes.get(job, ("failed", "never graded: the grading process stopped "
                                                         "before reaching this notebook", 0.0)))
        _regrade_alone(course, [j for j in present if j in overlapped(spans) and contended(results[j])],
                       results, finish, plan, limit_s, progress)
    return [results[f"{s}/{n}"] for s, n in jobs]


def _regrade_alone(course: Course, again: list[str], results: dict, finish, plan, limit_s: float,
                   progress) -> None:
    """Grade ``again`` once more, one worker alone with every core (after the parallel pass): a
    timeout, dead kernel or out-of-memory error while other slots ran may be theirs. The serial
    result counts; its notes say so and what the parallel pass gave."""
    if not again:
        return
    if progress:
        progress(f"grading {len(again)} notebook(s) again alone (a timeout, dead kernel or out-of-memory error "
                 f"while other workers ran): {', '.join(again)}")
    first = {job: results[job] for job in again}
    run_worker(course, again, limit_s, on_done=finish, workers=plan.alone())
    for job in again:
        was = first[job]
        why = was.reason if was.status != Status.GRADED else was.contention
        if job in results and results[job] is not was:
            results[job].notes.append(f"graded again alone after the parallel pass, where it got "
                                      f"{was.points:g}/{was.max_points:g} ({was.status}: {why}); this result counts")


def autograde_submission(course: Course, student: str, notebooks: list[str] | None = None,
                         limit_s: float = NOTEBOOK_LIMIT_S, progress=None,
                         allow_unsafe: bool = False) -> list[NotebookResult]:
    """Autograde ``notebooks`` (default: all) of one submission."""
    return autograde_jobs(course, [(student, n) for n in notebooks or course.notebook_names()], limit_s, progress,
                          allow_unsafe)


def submitted_students(course: Course) -> list[str]:
    if not course.submitted.exists():
        return []
    return sorted(p.name for p in course.submitted.iterdir() if (p / course.assignment).is_dir())


def autograde(course: Course, students: list[str] | None = None, notebooks: list[str] | None = None,
              progress=print, allow_unsafe: bool = False, workers=1) -> list[NotebookResult]:
    """Autograde every submission in submitted/ (or ``students``), one notebook at a time per worker."""
    notebooks = notebooks or course.notebook_names()
    jobs = [(s, n) for s in students or submitted_students(course) for n in notebooks]
    return autograde_jobs(course, jobs, progress=progress, allow_unsafe=allow_unsafe, workers=workers)


def export_grades(course: Course, path: Path) -> Path:
    """``nbgrader export`` of the gradebook to a CSV: one row per graded submission, with the points
    of answers still to be graded by hand apart (:class:`.feedback.GradesExport`, set in nbgrader_config.py).
    A gradebook server that cannot be reached is waited for (:func:`attnlab.grading.worker.gradebook.retrying`), once.

    Raises:
        RuntimeError: nbgrader's export failed (the message gives its last error line, no password).
    """
    from ..worker.gradebook import GradebookUnreachable, db_url, has_tables, retrying

    for attempt in range(2):
        done = course.nbgrader("export", f"--to={Path(path).resolve()}", timeout=300, check=False)
        if done.returncode == 0:
            return path
        log = done.stdout + done.stderr
        if attempt or not re.search(r"OperationalError|InterfaceError", log):
            break
        try:
            retrying(lambda: has_tables(db_url(course)))
        except GradebookUnreachable as exc:
            raise RuntimeError(f"nbgrader export failed: {exc}") from None
    raise RuntimeError(f"nbgrader export failed (exit {done.returncode}): {gradebook_text(_last_error(log))}")


def _last_error(log: str) -> str:
    errors = [ln for ln in log.splitlines() if re.search(r"Error|\[ERROR\]", ln)]
    return errors[-1] if errors else log.strip()[-300:]


def generate_feedback(course: Course, students: list[str] | None = None,
                      timeout: float = 1800) -> dict[str, list[Path]]:
    """``nbgrader generate_feedback`` for ``students`` (default: every autograded one).

    Writes ``feedback/<student>/attention_kernels/<notebook>.html``: the autograded notebook with
    the hidden tests, each failing check's message, and the grader's notes at the top; answers not
    graded by hand yet are marked so, the autograded score apart (:class:`.feedback.FeedbackExporter`). All
    students go through one nbgrader run (nbgrader carries on past a student it cannot process and
    reports the failure at the end); students given by name go through one process, one by one.

    Returns:
        student -> the feedback files written (empty: none; see nbgrader's log).
    """
    if students is None:
        course.nbgrader("generate_feedback", course.assignment, "--force", timeout=timeout, check=False)
        students = sorted(p.name for p in course.autograded.iterdir()
                          if (p / course.assignment).is_dir()) if course.autograded.is_dir() else []
    elif students:
        env = tool_env()
        try:
            subprocess.run([sys.executable, "-m", "attnlab.grading.worker.jobs", "--feedback", str(course.root), course.assignment,
                            *students], cwd=course.root, env=env, capture_output=True, text=True,
                           timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    return {s: feedback_files(course, s) for s in students}


def feedback_files(course: Course, student: str) -> list[Path]:
    return sorted((course.root / "feedback" / student / course.assignment).glob("*.html"))

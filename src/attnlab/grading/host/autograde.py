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
# Length: records (.records), contention (.contention) and reports (.reports) are split out; the
# worker pool (run_worker, _Pool, Slot, ~250 lines) still lives here (its entry points are public now,
# issue 32 item 2; moving it out is issue 32, item 3, left for later).

from __future__ import annotations

import collections
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ...core.outcome import Status, split_reviews
from .contention import contended, contended_reason
from .records import CellResult, NotebookResult, not_graded, printable, without_escapes
from .reports import format_report, read_report_json, write_report_csv, write_report_json  # noqa: F401 (public here)
from ..course import Course, tool_env

#: Wall-clock limit for grading one notebook (its cells are limited separately, see nbgrader_config.py).
NOTEBOOK_LIMIT_S = 600



def notebook_points(course: Course, name: str) -> tuple[dict[str, float], float]:
    """({grade_id: points} of the autograded test cells, manual points) of source notebook ``name``."""
    auto, manual = {}, 0.0
    for cell in nbformat.read(course.source / f"{name}.ipynb", as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            if cell.cell_type == "code" and not meta.get("solution"):
                auto[meta["grade_id"]] = meta["points"]
            else:
                manual += meta["points"]
    return auto, manual



def _first_line(text: str, limit: int = 220) -> str:
    text = without_escapes(text).strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def grader_notes(nb_path: Path) -> list[str]:
    """The notes the grader's own steps left in an autograded notebook (``metadata.attnlab.notes``)."""
    try:
        notes = nbformat.read(nb_path, as_version=4).metadata.get("attnlab", {}).get("notes", [])
    except Exception:  # noqa: BLE001 (unreadable: the grades in the gradebook still stand)
        return ["the autograded notebook could not be read back"]
    return [str(n) for n in notes] if isinstance(notes, list) else []


def _variant_of(nb_path: Path) -> str:
    """The variant the grader set in an autograded notebook's kernel (``metadata.attnlab.variant``), or ""."""
    try:
        return str(nbformat.read(nb_path, as_version=4).metadata.get("attnlab", {}).get("variant", ""))
    except Exception:  # noqa: BLE001 (unreadable: said by grader_notes)
        return ""


def cell_errors(nb_path: Path) -> dict[str, str]:
    """grade_id -> one-line error of every graded cell that raised, from an autograded notebook."""
    errors = {}
    try:
        cells = nbformat.read(nb_path, as_version=4).cells
    except Exception:  # noqa: BLE001
        return errors
    for cell in cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid and cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    detail = _first_line(out.get("evalue", "")) or "(no message: not implemented yet?)"
                    errors[gid] = f"{out.get('ename', 'Error')}: {detail}"
    return errors


def failure_reason(log: str) -> str:
    """The one-line reason a notebook's grading failed, read from its grading ``log``."""
    for pattern, reason in (
        (r"^the grading (process died|worker exited)", "the grading worker process died while grading this notebook "
                                                      "(killed or crashed; a new worker graded the rest)"),
        (r"DeadKernelError|Kernel died|kernel.*(died|restarting)", "the kernel died (crash, os._exit or out of memory)"),
        (r"UnresponsiveKernelError", "the kernel stopped responding (endless loop that ignores interrupts?)"),
        (r"CellTimeoutError|Timeout waiting for execute reply", "a cell ran past the execution timeout"),
        (r"old version of the nbgrader metadata|SchemaTooOld", "the notebook's nbgrader metadata is damaged (copied or edited cells)"),
        (r"NotJSONError|Notebook does not appear to be JSON|Unreadable Notebook", "the notebook file is not valid JSON"),
        (r"GradebookUnreachable: (.*)", "not graded: {0}; grade it again once the database is back"),
        (r"sqlalchemy\.exc\.(?:OperationalError|InterfaceError): (.*)",
         "not graded: the gradebook's database failed: {0}; grade it again once the database is back"),
        (r"No notebooks found|Skipping unknown notebook", "nbgrader did not find this notebook in the gradebook "
                                                          "(run `attnlab build` / generate_assignment first?)"),
    ):
        found = re.search(pattern, log, re.IGNORECASE)
        if found:
            return reason.format(*(_gradebook_text(g) for g in found.groups()))
    # the exception at the end of a traceback says more than nbgrader's closing lines
    raised = re.findall(r"^\s*(\w+(?:\.\w+)*(?:Error|Exception|Interrupt)\b.*)$", log, re.MULTILINE)
    if raised:
        return "grading failed: " + _first_line(raised[-1])
    tail = [ln for ln in log.strip().splitlines() if "ERROR" in ln or "Error" in ln]
    return "grading failed: " + _first_line(tail[-1] if tail else log[-300:])


def _gradebook_text(text: str) -> str:
    """A database error's first line for the report, without a password."""
    from ..worker.gradebook import redact_text

    return _first_line(redact_text(text or ""), 300)  # redacted before it is cut: no half URL


def _zero_notebook(course: Course, student: str, notebook: str) -> None:
    """Make the gradebook say 0 for a notebook whose grading failed, not a stale earlier score.

    Raises:
        GradebookUnreachable: the gradebook's server was gone for longer than the grader waits.
    """
    from nbgrader.api import MissingEntry

    from ..worker.gradebook import open_gradebook, retrying

    def zero() -> None:
        with open_gradebook(course) as gb:
            try:
                sub = gb.find_submission_notebook(notebook, course.assignment, student)
            except MissingEntry:
                return
            for grade in sub.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
            gb.db.commit()

    retrying(zero, "the gradebook (to record 0 for this notebook)")


def read_grades(course: Course, student: str, notebook: str) -> dict[str, tuple[float | None, float]]:
    from ..worker.gradebook import open_gradebook, retrying

    def read():
        with open_gradebook(course) as gb:
            sub = gb.find_submission_notebook(notebook, course.assignment, student)
            return {g.name: (None if g.needs_manual_grade and g.auto_score is None else g.auto_score or 0.0,
                             g.max_score) for g in sub.grades}

    return retrying(read, "the gradebook (to read this notebook's grades)")


def run_worker(course: Course, jobs: list[str], limit_s: float, on_done=None,
               workers=1, spans: dict | None = None) -> dict[str, tuple[str, str, float]]:
    """Grade ``jobs`` ("student/notebook") in worker processes; job -> (status, log, seconds[, lines
    about the gradebook: hand grading kept or reopened, outages waited out]), one entry for every job.

    ``workers`` (a :class:`.parallel.Plan`, or a worker count) slots run side by side, each pinned
    to its own cores. A slot takes the next student and grades that student's notebooks one after
    the other, in ``jobs``' order, so each student's autograded folder and gradebook entries are
    written by one process at a time. status is ``ok`` (nbgrader finished), ``failed`` (nbgrader
    reported an error, or the worker died) or ``timeout`` (the notebook overran ``limit_s``; the
    worker's process group is killed and a new worker carries on with the notebooks left). A worker
    that dies between notebooks is replaced; a slot whose worker dies twice in a row before starting
    a notebook is retired and hands that student's notebooks back to the others; when no slot is
    left, they fail with the reason. ``spans`` (when given) receives job -> (slot, start, end) in
    ``time.monotonic`` seconds, for :func:`overlapped`.
    """
    from . import parallel

    plan = workers if isinstance(workers, parallel.Plan) else parallel.plan(workers)
    by_student: dict[str, list[str]] = {}
    for job in jobs:
        by_student.setdefault(job.split("/")[0], []).append(job)
    pool = _Pool(collections.deque(by_student.values()), on_done, spans)
    base = tool_env()
    n = min(plan.jobs, len(pool.todo))
    slots = [Slot(course, plan.env(i, base), limit_s, pool, i, plan.cores_of(i) if plan.pin else None)
             for i in range(n)]
    pool.live = n
    threads = [threading.Thread(target=slot.run, daemon=True) for slot in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return pool.outcomes


class _Pool:
    """The students still to grade and the outcomes, shared by the slots (one lock)."""

    def __init__(self, todo, on_done, spans) -> None:
        self.todo, self.on_done, self.spans = todo, on_done, spans
        self.outcomes: dict[str, tuple[str, str, float]] = {}
        self.lock = threading.Condition()
        self.live = 0  # slots not retired
        self.busy = 0  # slots holding a student (one may still hand it back)

    def take(self) -> list[str] | None:
        """The next student's jobs; None once there are none and no slot can hand any back."""
        with self.lock:
            while not self.todo and self.busy:
                self.lock.wait()
            if not self.todo:
                return None
            self.busy += 1
            return self.todo.popleft()

    def finished(self) -> None:
        """The caller is done with the student it took."""
        with self.lock:
            self.busy -= 1
            self.lock.notify_all()

    def give_back(self, jobs: list[str]) -> bool:
        """Retire a broken slot: ``jobs`` go back to the front for the slots left; False (and the
        jobs stay with the caller) when it was the last one."""
        with self.lock:
            if self.live <= 1:
                return False
            self.live -= 1
            self.busy -= 1
            self.todo.appendleft(jobs)
            self.lock.notify_all()
            return True

    def done(self, job: str, outcome, slot: int, start: float) -> None:
        with self.lock:  # one at a time: the callback reads the gradebook and prints
            self.outcomes[job] = outcome
            if self.spans is not None:
                self.spans[job] = (slot, start, time.monotonic())
            if self.on_done:
                self.on_done(job, outcome)


def overlapped(spans: dict[str, tuple[int, float, float]]) -> set[str]:
    """The jobs graded while another slot was grading (their time spans intersect)."""
    out = set()
    items = sorted(spans.items(), key=lambda kv: kv[1][1])
    for i, (job, (slot, a0, a1)) in enumerate(items):
        for other, (slot2, b0, b1) in items[i + 1:]:
            if b0 >= a1:
                break
            if slot2 != slot:
                out |= {job, other}
    return out


class Slot:
    """One grading worker at a time (replaced when it dies or overruns), fed jobs on its stdin."""

    #: The worker's command line (tests put a stand-in here).
    WORKER = (sys.executable, "-m", "attnlab.grading.worker.jobs")

    def __init__(self, course: Course, env: dict, limit_s: float, pool: _Pool, index: int = 0,
                 cores: tuple[int, ...] | None = None) -> None:
        from ..sandbox.proctree import PIDFILE_ENV

        self.course, self.limit_s, self.pool, self.index, self.cores = course, limit_s, pool, index, cores
        pidfile = tempfile.NamedTemporaryFile("w+", prefix="attnlab-kernels-", suffix=".pids", delete=False)
        pidfile.close()
        self.pidfile = Path(pidfile.name)  # this slot's kernels only: killing them spares other slots'
        self.env = {**env, PIDFILE_ENV: pidfile.name}
        self.proc = self.lines = self.errfile = None
        self.broken = ""  # why this slot's worker cannot start, once it failed twice in a row

    def done(self, job: str, outcome) -> None:
        self.pool.done(job, outcome, self.index, self.began)

    def run(self) -> None:
        try:
            while (student_jobs := self.pool.take()) is not None:
                handed_back = False
                try:
                    for k, job in enumerate(student_jobs):
                        self.began = time.monotonic()
                        if not self.broken and self._grade(job):
                            continue
                        handed_back = self.pool.give_back(student_jobs[k:])
                        if handed_back:
                            return  # retired: the slots left grade this student and the rest
                        self.done(job, ("failed", self.broken, 0.0))  # no slot left
                finally:
                    if not handed_back:
                        self.pool.finished()  # even if grading raised: the other slots must not wait on it
        finally:
            self._stop()
            self.pidfile.unlink(missing_ok=True)

    def _start(self) -> None:
        self.errfile = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([*self.WORKER, str(self.course.root), "-"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errfile, text=True,
                                     env=self.env, start_new_session=True)
        if self.cores:
            try:  # before it starts a kernel (the first job is written after this): its kernels inherit it
                os.sched_setaffinity(self.proc.pid, self.cores)
            except OSError:
                pass
        self.lines = queue.Queue()
        threading.Thread(target=lambda out, q: ([q.put(ln) for ln in out], q.put(None)),
                         args=(self.proc.stdout, self.lines), daemon=True).start()
    def _stop(self, kill: bool = False) -> None:
        """End the worker: close its stdin (it exits after its notebook) or kill its process group."""
        if self.proc is None:
            return
        if kill:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=120)  # it finishes its notebook's clean-up, then exits
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if kill or self.proc.returncode != 0:  # a kernel (or spare) of a worker that died must not outlive it
            kill_kernels(self.pidfile)
        self.errfile.close()
        self.proc = None

    def _tail(self, n: int) -> str:
        self.errfile.seek(0)
        return self.errfile.read()[-n:]

    def _grade(self, job: str) -> bool:
        """Grade ``job`` and report its outcome; False (nothing reported) when this slot's worker
        died twice in a row before starting it: the slot is broken (:attr:`broken`)."""
        deaths = 0  # workers in a row that died before starting this job
        while True:
            if self.proc is None:
                self._start()
            started, began = False, time.perf_counter()
            try:
                self.proc.stdin.write(job + "\n")
                self.proc.stdin.flush()
            except OSError:  # gone already: its stdout closes too, handled below
                pass
            while True:
                try:
                    line = self.lines.get(timeout=max(self.limit_s - (time.perf_counter() - began), 0.1))
                except queue.Empty:
                    self._stop(kill=True)
                    self.done(job, ("timeout", "", time.perf_counter() - began))
                    return True
                if line is None:  # the worker exited
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict):
                    continue
                if msg.get("start") == job:
                    started, began = True, time.perf_counter()
                elif msg.get("done") == job:
                    extra = msg.get("gradebook") or []  # what the worker did in the gradebook besides grading
                    self.done(job, ("ok" if msg["success"] else "failed", msg["log"], time.perf_counter() - began,
                                    *([extra] if extra else [])))
                    return True
            tail = self._tail(3000)
            self.proc.wait()
            code = self.proc.returncode
            self._stop()
            if started:
                self.done(job, ("failed", "the grading process died\n" + tail, time.perf_counter() - began))
                return True
            deaths += 1
            if deaths >= 2:  # the worker cannot start (or keeps dying before any notebook)
                self.broken = (f"the grading worker exited (status {code}) before grading this notebook\n"
                               + tail[-2000:])
                return False


def kill_kernels(pidfile: Path) -> None:
    """Kill the process groups of the notebook kernels a killed worker left behind (each kernel
    runs in a session of its own, out of reach of the worker's process group), and remove their
    sandboxes' scratch folders.

    Each line is ``pid:start [folder...]``; blank lines, a pid that is not a positive integer (0 or
    below would name this process's own group or every process), a pid without its start time, and a
    pid now held by another process (another start time) kill nothing. A scratch folder is removed only
    when its normalized path stays under this machine's ``attnlab-`` scratch prefix."""
    try:
        lines = [ln.split() for ln in pidfile.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return
    from ..sandbox.proctree import process_start
    from ..sandbox import remove_tree
    from ..sandbox.tasks import remove_left_over

    scratch = os.path.join(tempfile.gettempdir(), "attnlab-")
    for pid_start, *folders in lines:
        pid, _, start = pid_start.partition(":")
        try:
            # still that kernel: a pid the system gave to another process since has another start time
            if start and int(pid) > 0 and process_start(int(pid)) == start:
                os.killpg(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        for folder in folders:
            if os.path.normpath(folder).startswith(scratch):
                remove_tree(folder)
            else:
                remove_left_over(folder)  # the kernel's pids cgroup


def _evaluate(course: Course, student: str, notebook: str, status: str, log: str,
              seconds: float, gradebook_notes: list[str] = (), *, limit_s: float) -> NotebookResult:
    auto, manual_max = notebook_points(course, notebook)
    res = NotebookResult(student, notebook, Status.GRADED, max_points=sum(auto.values()), manual_max=manual_max,
                         seconds=seconds, gradebook=[str(n) for n in gradebook_notes])
    out = course.autograded / student / course.assignment / f"{notebook}.ipynb"
    if status != "ok" or not out.exists():
        if status == "timeout":
            res.status, res.reason = Status.TIMEOUT, f"grading ran past {limit_s:g} s and was stopped"
        else:
            res.status, res.reason = Status.FAILED, failure_reason(log)
        if out.exists():
            out.unlink()
        _zero_notebook(course, student, notebook)
        return res
    errors = cell_errors(out)
    notes = grader_notes(out)
    res.variant = _variant_of(out)
    res.needs_review, res.notes = split_reviews(notes)
    grades = read_grades(course, student, notebook)
    for gid, max_points in auto.items():
        score = grades.get(gid, (0.0, max_points))[0] or 0.0
        res.points += score
        res.cells.append(CellResult(gid, score, max_points,
                                    "" if score >= max_points else errors.get(gid, "no points (output did not pass)")))
    return res


def _unrecorded(exc: BaseException) -> str:
    """Why a notebook's result could not be recorded, for the report (a database error without its password)."""
    from ..worker.gradebook import GradebookUnreachable

    if isinstance(exc, GradebookUnreachable):
        return f"not graded: {_gradebook_text(str(exc))}; grade it again once the database is back"
    return f"not graded: recording the result failed: {type(exc).__name__}: {_gradebook_text(str(exc))}"


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
                               reason=_unrecorded(exc), seconds=outcome[2] if outcome else 0.0)
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
            _zero_notebook(course, s, n)
        elif outcome is None:
            folder = course.submitted / s / course.assignment
            others = sorted(p.name for p in folder.glob("*.ipynb")) if folder.is_dir() else []
            reason = f"{n}.ipynb was not submitted"
            if not folder.is_dir():
                reason += " (no submission folder)"
            elif others:
                reason += f" (the submission holds {', '.join(others)})"
            r = NotebookResult(s, n, Status.MISSING, max_points=sum(auto.values()), manual_max=manual, reason=reason)
            _zero_notebook(course, s, n)
        else:
            r = _evaluate(course, s, n, *outcome, limit_s=limit_s)
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
        why = was.reason if was.status != Status.GRADED else contended_reason(was)
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
    raise RuntimeError(f"nbgrader export failed (exit {done.returncode}): {_gradebook_text(_last_error(log))}")


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

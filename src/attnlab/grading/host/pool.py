"""The grading workers: slots side by side, each running one worker process at a time that grades one
student's notebooks after the other, replaced when it dies or overruns; and the clean-up of what a killed
worker's kernels leave behind.

Used by :mod:`.autograde`, which decides what to grade and what the outcomes mean; this module only runs
jobs and returns every job's outcome (``ok``, ``failed`` with a log, or ``timeout``), whatever happens to
the workers.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..course import Course, tool_env


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
    pool = Pool(collections.deque(by_student.values()), on_done, spans)
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


class Pool:
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

    def __init__(self, course: Course, env: dict, limit_s: float, pool: Pool, index: int = 0,
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

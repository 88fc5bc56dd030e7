"""Grade a list of (student, notebook) jobs in one process, one nbgrader run per notebook.

Started by :mod:`attnlab.grading.host.pool` (``Slot.WORKER``) as ``python -m attnlab.grading.worker.jobs ROOT -``,
then fed one ``STUDENT/NOTEBOOK`` job per line on stdin until it is closed (``ROOT JOB ...``
grades the jobs given instead). Loading nbgrader once for many
notebooks instead of once per notebook saves ~3 s each; running each notebook separately
(``CourseDirectory.notebook_id``) keeps a dead kernel from costing the other notebooks. Protocol
on stdout, one JSON object per line: ``{"start": job}`` before a notebook,
``{"done": job, "success": bool, "log": str, "gradebook": [str, ...]}`` after it (``gradebook``: hand
grading kept or reopened, database outages waited out; :func:`autograde_one`). The parent watches
the clock and kills this process group if a notebook overruns. The protocol goes through a private, non-inheritable
copy of stdout (fd 1 itself is pointed at stderr): kernels never hold it, so they cannot write
fake results into it, and the parent sees the pipe close the moment this process dies. The job
pipe is private the same way (fd 0 is pointed at /dev/null): a kernel cannot read the next job,
another student's notebook, out of it.

``python -m attnlab.grading.worker.jobs --feedback ROOT ASSIGNMENT STUDENT ...`` generates feedback for several
students in one process instead.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from ..course import tool_env


_PROTOCOL = None  # the private copy of stdout that carries the protocol
_JOBS = None  # the private copy of stdin that carries the jobs


def _private_stdout() -> None:
    global _PROTOCOL, _JOBS
    if _PROTOCOL is None:
        _PROTOCOL = os.fdopen(os.dup(1), "w")  # os.dup's copy is not inherited by child processes
        sys.stdout.flush()
        os.dup2(2, 1)
    if _JOBS is None:
        _JOBS = os.fdopen(os.dup(0), "r")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)


def _stdin_jobs():
    for line in _JOBS:
        if line.strip():
            yield line.strip()


def _emit(obj) -> None:
    out = _PROTOCOL or sys.__stdout__
    out.write(json.dumps(obj) + "\n")
    out.flush()


def feedback(root: str, assignment: str, students: list[str]) -> int:
    """``generate_feedback`` for each student, in this one process (nbgrader loads once)."""
    root = os.path.abspath(root)
    os.chdir(root)
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    from .gradebook import reconnect_on_loss

    reconnect_on_loss()
    for student in students:
        api = NbGraderAPI(coursedir=CourseDirectory(config=config, root=root), config=config)
        result = api.generate_feedback(assignment, student, force=True)
        _emit({"feedback": student, "success": bool(result.get("success")),
               "log": ((result.get("log") or "") + (result.get("error") or ""))[-2000:]})
    return 0


def main(argv: list[str]) -> int:
    _private_stdout()
    if argv and argv[0] == "--feedback":
        return feedback(argv[1], argv[2], argv[3:])
    root, *jobs = argv
    root = os.path.abspath(root)
    os.chdir(root)
    os.environ.update(tool_env())  # alembic must be findable when nbgrader touches the gradebook
    from .gradebook import reconnect_on_loss, wait_for_gradebook_locks

    wait_for_gradebook_locks()  # other workers write to the same gradebook
    reconnect_on_loss()  # a server that goes away mid-run is waited for
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    from ..course import assignment_of

    # NbGraderAPI does not read nbgrader_config.py by itself.
    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    for job in (_stdin_jobs() if jobs == ["-"] else jobs):
        student, name = job.split("/")
        _emit({"start": job})
        coursedir = CourseDirectory(config=config, root=root)
        coursedir.notebook_id = name
        api = NbGraderAPI(coursedir=coursedir, config=config)
        success, log, gradebook_notes = autograde_one(api, assignment_of(name), student, name)
        _emit({"done": job, "success": success, "log": log, "gradebook": gradebook_notes})
    return 0


def _record_variant(api, url: str, assignment: str, student: str, notebook: str) -> list[str]:
    """The variant's shapes into the gradebook's comments of the answer cells (:func:`attnlab.variants.record`);
    lines for the report when that fails (the grades stand)."""
    from nbgrader.api import Gradebook

    from ... import variants
    from .gradebook import redact_text, retrying

    if not any(q.notebook == notebook for q in variants.QUESTIONS.values()):
        return []
    chosen = api.config.get("GradingExecute", {}).get("variant_student")  # set: attnlab selfcheck's
    whose = student if chosen is None else (chosen or None)

    def write():
        with Gradebook(url, api.coursedir.course_id) as gb:
            variants.record(gb, assignment, student, notebook, whose)
    try:
        retrying(write)
    except Exception as exc:  # noqa: BLE001
        return [f"the variant could not be written into the gradebook's comments ({type(exc).__name__}: "
                f"{redact_text(str(exc))[:200]})"]
    return []


#: How many times one notebook is graded again after the gradebook's connection was lost during it.
LOST_CONNECTION_RETRIES = 2


def autograde_one(api, assignment: str, student: str, notebook: str) -> tuple[bool, str, list[str]]:
    """nbgrader's autograde of one notebook through ``api`` (an ``NbGraderAPI`` whose coursedir names
    the notebook): (success, nbgrader's log, lines for the report about the gradebook).

    A gradebook whose server goes away is waited for (:func:`.gradebook.reconnect_on_loss`); when
    the connection drops in the middle of one of nbgrader's steps (the step fails), the notebook
    is graded again once the server answers, up to :data:`LOST_CONNECTION_RETRIES` times within
    the wait :func:`.gradebook.retrying` allows. Answers graded by hand before keep their reviewed
    state when unchanged (:func:`.gradebook.keep_hand_grading`).
    """
    from nbgrader.api import Gradebook

    from .gradebook import GradebookUnreachable, answer_cells, hand_graded, has_tables, is_sqlite, keep_hand_grading, redact_text, retrying, take_waits

    take_waits()  # an earlier notebook's
    notes: list[str] = []
    coursedir = api.coursedir
    url = coursedir.db_url
    out = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment)) / f"{notebook}.ipynb"

    def graded_by_hand():
        with Gradebook(url, coursedir.course_id) as gb:
            return hand_graded(gb, assignment, student, notebook)

    try:
        before = retrying(graded_by_hand)
    except GradebookUnreachable as exc:
        return False, f"{type(exc).__name__}: {exc}", take_waits()
    except Exception as exc:  # noqa: BLE001 (grading goes on; nbgrader then reopens every hand-graded answer)
        before = {}
        notes.append(f"the answers graded by hand could not be read before grading ({type(exc).__name__}: "
                     f"{redact_text(str(exc))[:200]}): nbgrader marks them all as needing manual grading again")
    old = answer_cells(out) if before else None
    for attempt in range(LOST_CONNECTION_RETRIES + 1):
        result = api.autograde(assignment, student, force=True, create=True)
        log = (result.get("log") or "") + (result.get("error") or "")
        if result.get("success") or is_sqlite(url) or not _LOST.search(log) or attempt == LOST_CONNECTION_RETRIES:
            break
        try:  # the connection dropped during one of nbgrader's steps: wait for the server, grade again
            retrying(lambda: has_tables(url))
        except GradebookUnreachable as exc:
            log += f"\n{type(exc).__name__}: {exc}"
            break
        notes.append("the gradebook's connection was lost during grading: graded again once the server answered")
    success = bool(result.get("success"))
    if success:
        notes += _record_variant(api, url, assignment, student, notebook)
    if success and before:
        def keep():
            with Gradebook(url, coursedir.course_id) as gb:
                return keep_hand_grading(gb, assignment, student, notebook, before, old, answer_cells(out))
        try:
            notes += retrying(keep)
        except Exception as exc:  # noqa: BLE001 (the grades are saved; only the reviewed state is not restored)
            notes.append(f"the reviewed state of the answers graded by hand could not be restored "
                         f"({type(exc).__name__}: {redact_text(str(exc))[:200]}): they need manual grading again")
    return success, log, take_waits() + notes


#: What nbgrader logs when a gradebook step lost its connection (its converter turns SQLAlchemy's
#: OperationalError into advice about `nbgrader db upgrade`; the traceback above it names the error).
_LOST = re.compile(r"sqlalchemy\.exc\.(OperationalError|InterfaceError)|psycopg\.OperationalError")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Read one graded notebook back into a :class:`.records.NotebookResult`: the points of each test cell, the
reason for every loss, the grader's notes, and what a busy machine may have caused.

nbgrader leaves the points in the gradebook and the rest in the autograded notebook: each failed cell's
error (its ``ename``, a type, and its message), the notes the grader's steps wrote with their kind
(:mod:`attnlab.core.outcome`). Whether a failure is one that another worker's kernel can cause is decided
here from those types and kinds (:attr:`.records.NotebookResult.contention`), never from the words of a
message; :mod:`.contention` reads that field. A notebook whose grading did not finish gets its reason from
the grading log (:func:`failure_reason`) and 0 in the gradebook, so no earlier score stands.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from ...core.outcome import Kind, Note, Status, notes_of, split_reviews
from .contention import error_contended
from .records import CellResult, NotebookResult, without_escapes
from ..course import Course


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


def first_line(text: str, limit: int = 220) -> str:
    """The first line of ``text``, escape sequences removed, cut to ``limit`` characters."""
    text = without_escapes(text).strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def grader_notes(nb_path: Path) -> list[Note]:
    """The notes the grader's own steps left in an autograded notebook (``metadata.attnlab.notes``), each
    with its kind."""
    try:
        notes = nbformat.read(nb_path, as_version=4).metadata.get("attnlab", {}).get("notes", [])
    except Exception:  # noqa: BLE001 (unreadable: the grades in the gradebook still stand)
        return [Note(Kind.INFO, "the autograded notebook could not be read back")]
    return notes_of(notes) if isinstance(notes, list) else []


def _variant_of(nb_path: Path) -> str:
    """The variant the grader set in an autograded notebook's kernel (``metadata.attnlab.variant``), or ""."""
    try:
        return str(nbformat.read(nb_path, as_version=4).metadata.get("attnlab", {}).get("variant", ""))
    except Exception:  # noqa: BLE001 (unreadable: said by grader_notes)
        return ""


def cell_errors(nb_path: Path) -> dict[str, tuple[str, str]]:
    """grade_id -> (the error's name, "name: first line of its message") of every graded cell that raised,
    from an autograded notebook."""
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
                    detail = first_line(out.get("evalue", "")) or "(no message: not implemented yet?)"
                    ename = str(out.get("ename", "Error"))
                    errors[gid] = (ename, f"{first_line(ename, 80)}: {detail}")
    return errors


#: How a notebook's grading can end without a result, read from its grading log (nbgrader's and nbclient's
#: words, not ours): (pattern, the reason for the report, whether a busy machine can cause it).
_FAILURES = (
    (r"^the grading (process died|worker exited)", "the grading worker process died while grading this notebook "
                                                  "(killed or crashed; a new worker graded the rest)", True),
    (r"DeadKernelError|Kernel died|kernel.*(died|restarting)", "the kernel died (crash, os._exit or out of memory)",
     True),
    (r"UnresponsiveKernelError", "the kernel stopped responding (endless loop that ignores interrupts?)", True),
    (r"CellTimeoutError|Timeout waiting for execute reply", "a cell ran past the execution timeout", True),
    (r"old version of the nbgrader metadata|SchemaTooOld", "the notebook's nbgrader metadata is damaged (copied or "
                                                           "edited cells)", False),
    (r"NotJSONError|Notebook does not appear to be JSON|Unreadable Notebook", "the notebook file is not valid JSON",
     False),
    (r"GradebookUnreachable: (.*)", "not graded: {0}; grade it again once the database is back", False),
    (r"sqlalchemy\.exc\.(?:OperationalError|InterfaceError): (.*)",
     "not graded: the gradebook's database failed: {0}; grade it again once the database is back", False),
    (r"No notebooks found|Skipping unknown notebook", "nbgrader did not find this notebook in the gradebook "
                                                      "(run `attnlab build` / generate_assignment first?)", False),
)


def failure(log: str) -> tuple[str, Kind]:
    """Why a notebook's grading failed, read from its grading ``log``: (one-line reason, its kind:
    :attr:`~attnlab.core.outcome.Kind.CONTENDED` when a busy machine can cause it, else ``INFO``)."""
    for pattern, reason, busy in _FAILURES:
        found = re.search(pattern, log, re.IGNORECASE)
        if found:
            return (reason.format(*(gradebook_text(g) for g in found.groups())),
                    Kind.CONTENDED if busy else Kind.INFO)
    # the exception at the end of a traceback says more than nbgrader's closing lines
    raised = re.findall(r"^\s*(\w+(?:\.\w+)*(?:Error|Exception|Interrupt)\b.*)$", log, re.MULTILINE)
    if raised:
        line = raised[-1]
        ename = line.split(":")[0].strip().rpartition(".")[2]  # torch.OutOfMemoryError -> OutOfMemoryError
        return ("grading failed: " + first_line(line),
                Kind.CONTENDED if error_contended(ename, line) else Kind.INFO)
    tail = [ln for ln in log.strip().splitlines() if "ERROR" in ln or "Error" in ln]
    return "grading failed: " + first_line(tail[-1] if tail else log[-300:]), Kind.INFO


def failure_reason(log: str) -> str:
    """The one-line reason a notebook's grading failed, read from its grading ``log`` (:func:`failure`)."""
    return failure(log)[0]


def gradebook_text(text: str) -> str:
    """A database error's first line for the report, without a password."""
    from ..worker.gradebook import redact_text

    return first_line(redact_text(text or ""), 300)  # redacted before it is cut: no half URL


def zero_notebook(course: Course, student: str, notebook: str) -> None:
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


def evaluate_notebook(course: Course, student: str, notebook: str, status: str, log: str,
                      seconds: float, gradebook_notes: list[str] = (), *, limit_s: float) -> NotebookResult:
    """The result of grading one notebook: ``status`` and ``log`` are the worker's outcome (``ok``,
    ``failed`` or ``timeout``; its log), the rest is read from the gradebook and the autograded notebook.
    A notebook not graded to the end scores 0 in the gradebook.

    Raises:
        GradebookUnreachable: the gradebook's server was gone for longer than the grader waits.
    """
    auto, manual_max = notebook_points(course, notebook)
    res = NotebookResult(student, notebook, Status.GRADED, max_points=sum(auto.values()), manual_max=manual_max,
                         seconds=seconds, gradebook=[str(n) for n in gradebook_notes])
    out = course.autograded / student / course.assignment / f"{notebook}.ipynb"
    if status != "ok" or not out.exists():
        if status == "timeout":
            res.status, res.reason = Status.TIMEOUT, f"grading ran past {limit_s:g} s and was stopped"
            res.contention = res.reason
        else:
            res.reason, kind = failure(log)
            res.status, res.contention = Status.FAILED, res.reason if kind is Kind.CONTENDED else ""
        if out.exists():
            out.unlink()
        zero_notebook(course, student, notebook)
        return res
    errors = cell_errors(out)
    notes = grader_notes(out)
    res.variant = _variant_of(out)
    res.needs_review, res.notes = split_reviews(notes)
    grades = read_grades(course, student, notebook)
    for gid, max_points in auto.items():
        score = grades.get(gid, (0.0, max_points))[0] or 0.0
        res.points += score
        ename, reason = errors.get(gid, ("", "no points (output did not pass)"))
        res.cells.append(CellResult(gid, score, max_points, "" if score >= max_points else reason,
                                    "" if score >= max_points else ename))
    res.contention = contention_in(notes, res.cells)
    return res


def contention_in(notes: list[Note], cells: list[CellResult]) -> str:
    """What a busy machine may have caused in a graded notebook, for people: the first note of kind
    :attr:`~attnlab.core.outcome.Kind.CONTENDED`, else the reason of the first cell that lost points to an
    error :func:`.contention.error_contended` names; "" when neither."""
    busy = [n.text for n in notes if n.kind is Kind.CONTENDED]
    busy += [c.reason for c in cells if c.error and error_contended(c.error, c.reason)]
    return busy[0] if busy else ""


def unrecorded(exc: BaseException) -> str:
    """Why a notebook's result could not be recorded, for the report (a database error without its password)."""
    from ..worker.gradebook import GradebookUnreachable

    if isinstance(exc, GradebookUnreachable):
        return f"not graded: {gradebook_text(str(exc))}; grade it again once the database is back"
    return f"not graded: recording the result failed: {type(exc).__name__}: {gradebook_text(str(exc))}"


"""Where the course's gradebook lives: SQLite beside the course (one machine) or a PostgreSQL server.

nbgrader keeps every grade in the database named by ``CourseDirectory.db_url`` (default
``sqlite:///<course>/gradebook.db``). The course's ``nbgrader_config.py`` sets it from the
environment variable :data:`DB_URL_ENV` when that is set, so every nbgrader command run in the
course folder (``attnlab autograde`` and its workers, ``nbgrader export``, ``generate_feedback``,
formgrader in JupyterLab) uses the same gradebook. A PostgreSQL URL uses SQLAlchemy's psycopg 3
driver: ``postgresql+psycopg://USER[:PASSWORD]@HOST[:PORT]/DB`` (installed by the course's
``postgres`` extra); the password may also come from libpq's ``~/.pgpass`` or ``PGPASSFILE``.

The URL and libpq's settings are the grader's secrets: :func:`attnlab.grading.sandbox.kernel_env` strips them from the
environment of every notebook kernel (the sandbox starts kernels with it), since grades are
written by nbgrader outside the sandbox, never by the kernel.
"""
# Length: One job: the gradebook database (SQLite or PostgreSQL), its waits and reconnections.

from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ..course import COURSE_ID, Course

#: The environment variable that points the course at its gradebook (read by nbgrader_config.py).
DB_URL_ENV = "ATTNLAB_DB_URL"


def db_url(course: Course) -> str:
    """The gradebook URL every nbgrader command in ``course`` uses: ``CourseDirectory.db_url`` as
    ``nbgrader_config.py`` sets it (from :data:`DB_URL_ENV`), else nbgrader's SQLite default."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
    return CourseDirectory(config=config, root=str(course.root)).db_url


#: Query parameters that carry a password (libpq and psycopg read ``?password=``, and
#: ``?sslpassword=`` for the client key).
_PASSWORD_ARGS = frozenset({"password", "passwd", "pwd", "sslpassword"})


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, in the user part and in a ``password=`` query
    parameter (for messages and logs); SQLAlchemy parses the URL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy reads: the user part the plain way
        return re.sub(r"(password|passwd|pwd)=[^&;\s]*", r"\1=***",
                      re.sub(r"^([a-z0-9+]+://[^:/@]*):[^@]*@", r"\1:***@", url), flags=re.IGNORECASE)
    query = {k: ("***" if k.lower() in _PASSWORD_ARGS else v) for k, v in parsed.query.items()}
    text = parsed.set(query=query).render_as_string(hide_password=True)
    return text.replace("%2A%2A%2A", "***")  # the query's *** comes back URL-quoted


#: How long a grading process waits for another one's write to the SQLite gradebook (seconds).
GRADEBOOK_BUSY_S = 120
_busy_hooked = False


def wait_for_gradebook_locks(seconds: float = GRADEBOOK_BUSY_S) -> None:
    """Make every SQLite connection SQLAlchemy opens in this process wait up to ``seconds`` for a
    lock (``PRAGMA busy_timeout``) instead of failing with "database is locked".

    nbgrader's :class:`~nbgrader.api.Gradebook` opens a connection per step (student, submission,
    each grade's commit); with N workers those writes meet. SQLite lets one writer at a time in and
    makes the others wait for the busy timeout, then fail. Measured here with three processes
    writing 150 students each: 363 of 450 writes failed with a timeout of 0; none with a timeout,
    and every write transaction nbgrader makes takes milliseconds. Python's sqlite3 waits 5 s by
    default; this sets a margin for many workers on a loaded machine. Other databases (a gradebook
    URL naming PostgreSQL) are left alone. Idempotent.
    """
    global _busy_hooked
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_connect(dbapi_connection, _record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    if not _busy_hooked:
        event.listen(Engine, "connect", on_connect)
        _busy_hooked = True


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite:")


def has_tables(url: str) -> bool:
    """Whether the database at ``url`` holds nbgrader's tables (without creating anything: opening an
    nbgrader ``Gradebook`` on an empty database creates them).

    Raises:
        sqlalchemy.exc.OperationalError: the server cannot be reached or refuses the login.
    """
    if is_sqlite(url):
        path = url.split(":///", 1)[1] if ":///" in url else ""
        if not path or not Path(path).exists():
            return False
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        return inspect(engine).has_table("assignment")
    finally:
        engine.dispose()


@contextmanager
def open_gradebook(course: Course):
    """nbgrader's ``Gradebook`` on ``course``'s gradebook (SQLite or PostgreSQL), closed on exit.
    Opening it waits for a server that went away (:func:`reconnect_on_loss`); a step that must
    survive a connection lost in its middle goes through :func:`retrying`."""
    from nbgrader.api import Gradebook

    reconnect_on_loss()
    with Gradebook(db_url(course), COURSE_ID) as gb:
        yield gb


# ------------------------------------------------------------------ a server that goes away
#: How long a grading process waits for a gradebook server that stopped answering (seconds), counted
#: from the first failure of an outage: a restart or fail-over takes seconds to a minute. Past it, the
#: notebook in hand is reported NOT GRADED with the reason, and each later step waits only
#: :data:`GRACE_S` until a connection works again (a gradebook gone for good costs seconds per notebook,
#: not minutes).
GRADEBOOK_RETRY_S = 180
#: How long each step still waits once an outage outlasted :data:`GRADEBOOK_RETRY_S` (seconds).
GRACE_S = 5.0
#: Overrides :data:`GRADEBOOK_RETRY_S` (seconds; the tests use a few).
RETRY_ENV = "ATTNLAB_DB_RETRY_S"

down_since: float | None = None   # time.monotonic() of the first failure of the outage in progress
_step = threading.local()          # depth: how many retrying() steps this thread is inside
_waited: list[str] = []            # what was waited for since the last take_waits() (for the report)


class GradebookUnreachable(RuntimeError):
    """The gradebook's server could not be reached, or kept dropping the connection, for the whole
    :data:`GRADEBOOK_RETRY_S`; the message says for how long and the driver's error (no password)."""


def retry_seconds() -> float:
    try:
        return max(float(os.environ.get(RETRY_ENV, GRADEBOOK_RETRY_S)), 0.0)
    except ValueError:
        return GRADEBOOK_RETRY_S


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is a database server that cannot be reached or dropped the connection
    (SQLAlchemy's ``OperationalError``/``InterfaceError``, or the driver's own, or a connection
    SQLAlchemy found invalidated), as opposed to a wrong query or a missing row. SQLite's errors
    never are: a locked SQLite file is waited for by its busy timeout (:func:`wait_for_gradebook_locks`)."""
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    orig = getattr(exc, "orig", exc)
    if type(orig).__module__.startswith("sqlite3"):
        return False
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return type(exc).__name__ in ("OperationalError", "InterfaceError") and "psycopg" in type(exc).__module__


def redact_text(text: str) -> str:
    """``text`` with every URL in it :func:`redact`-ed (a driver's message may quote the URL)."""
    return re.sub(r"[a-z][a-z0-9+.-]*://\S+", lambda m: redact(m[0]), text, flags=re.IGNORECASE)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return redact_text(text.splitlines()[0] if text else type(exc).__name__)[:300]


def _pauses():
    """Seconds to sleep between attempts (0.5, 1, 2, ... 10, 10, ...) until the outage has lasted
    :func:`retry_seconds`; ends (the caller gives up) after that."""
    global down_since
    now = time.monotonic()
    if down_since is None:
        down_since = now
    deadline = down_since + retry_seconds()
    if deadline <= now:  # an outage given up on before: a short grace, so a server that is back is used
        deadline = now + min(GRACE_S, retry_seconds())
    pause = 0.5
    while (left := deadline - time.monotonic()) > 0:
        yield min(pause, left)
        pause = min(pause * 2, 10.0)


def _recovered() -> None:
    global down_since
    if down_since is not None:
        _waited.append(f"the gradebook's server could not be reached for {time.monotonic() - down_since:.0f} s "
                       f"(the grader waited for it and carried on)")
        down_since = None


def take_waits() -> list[str]:
    """What this process waited for since the last call (one line per outage it got through)."""
    out = list(dict.fromkeys(_waited))
    _waited.clear()
    return out


def retrying(step, what: str = "the gradebook"):
    """``step()`` (a whole unit of gradebook work: open, read or write, commit), run again after a
    pause while it fails because the server cannot be reached or dropped the connection, until the
    outage has lasted :func:`retry_seconds`.

    Raises:
        GradebookUnreachable: the outage outlasted the wait (the last error in the message).
        Any other error of ``step`` at once.
    """
    waits = None
    while True:
        _step.depth = getattr(_step, "depth", 0) + 1  # the connections it opens do not wait: this does
        try:
            result = step()
        except Exception as exc:  # noqa: BLE001 (only lost connections are retried)
            if not lost_connection(exc):
                raise
            waits = waits or _pauses()
            pause = next(waits, None)
            if pause is None:
                lasted = time.monotonic() - (down_since or time.monotonic())
                raise GradebookUnreachable(f"{what} could not be reached for {lasted:.0f} s: {_first_line(exc)}") from exc
            time.sleep(pause)
            continue
        finally:
            _step.depth -= 1
        _recovered()
        return result


def _connect_patiently(dialect, _record, cargs, cparams):
    """SQLAlchemy's ``do_connect``: open the DBAPI connection, waiting (with backoff) for a server
    that refuses it, up to :func:`retry_seconds` from the outage's start; inside a
    :func:`retrying` step it tries once (the step waits, and one wait per step is enough)."""
    if getattr(_step, "depth", 0):
        return dialect.connect(*cargs, **cparams)
    waits = None
    while True:
        try:
            conn = dialect.connect(*cargs, **cparams)
        except dialect.loaded_dbapi.Error as exc:
            waits = waits or _pauses()
            pause = next(waits, None)
            if pause is None or not isinstance(exc, dialect.loaded_dbapi.OperationalError):
                raise
            time.sleep(pause)
            continue
        _recovered()
        return conn


_patched = False


def reconnect_on_loss() -> None:
    """Make the gradebooks nbgrader opens in this process survive a server that goes away for a
    while (nbgrader creates an engine per ``Gradebook`` with no option for it): its engines ping a
    pooled connection before using it (SQLAlchemy's ``pool_pre_ping``: one left from before a
    restart is replaced, not used to fail), and a connection the server refuses is tried again
    with backoff (:func:`_connect_patiently`). A connection lost in the middle of a transaction
    still fails that step: callers repeat the step (:func:`retrying`; the worker grades the
    notebook again). SQLite gradebooks are left as they are. Idempotent."""
    global _patched
    if _patched:
        return
    import nbgrader.api
    from sqlalchemy import event

    original = nbgrader.api.create_engine

    def create_engine(url, *args, **kwargs):
        kwargs.setdefault("pool_pre_ping", True)
        engine = original(url, *args, **kwargs)
        if not is_sqlite(str(url)):
            event.listen(engine, "do_connect", _connect_patiently)
        return engine

    nbgrader.api.create_engine = create_engine
    _patched = True


def registered(course: Course) -> bool:
    """Whether the gradebook knows ``course.assignment`` and its notebooks (``nbgrader
    generate_assignment`` puts them there; autograde needs their test cells). Creates nothing.

    Raises:
        sqlalchemy.exc.OperationalError: the gradebook's server cannot be reached or refuses the login.
    """
    if not has_tables(db_url(course)):
        return False
    from nbgrader.api import MissingEntry

    with open_gradebook(course) as gb:
        try:
            return bool(gb.find_assignment(course.assignment).notebooks)
        except MissingEntry:
            return False


# ------------------------------------------------------------------ hand grading kept across re-grades
def answer_cells(nb_path: Path) -> dict[str, tuple[bool, str]] | None:
    """grade_id -> (is a solution cell, its source) of the graded cells of an autograded notebook;
    None when there is no such notebook or it cannot be read."""
    import nbformat

    try:
        cells = nbformat.read(nb_path, as_version=4).cells
    except Exception:  # noqa: BLE001 (missing or damaged: nothing to compare with)
        return None
    out = {}
    for cell in cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and meta.get("grade_id"):
            out[meta["grade_id"]] = (bool(meta.get("solution")), cell.source)
    return out


def hand_graded(gb, assignment: str, student: str, notebook: str) -> dict[str, tuple[float, float | None]]:
    """grade_id -> (manual score, autograded score) of the answers a grader has scored by hand
    (formgrader's save: a manual score, ``needs_manual_grade`` off) in ``gb`` (nbgrader's Gradebook)."""
    from nbgrader.api import MissingEntry

    try:
        sub = gb.find_submission_notebook(notebook, assignment, student)
    except MissingEntry:
        return {}
    return {g.name: (g.manual_score, g.auto_score) for g in sub.grades
            if g.manual_score is not None and not g.needs_manual_grade}


def keep_hand_grading(gb, assignment: str, student: str, notebook: str, before: dict[str, tuple[float, float | None]],
                      old: dict | None, new: dict | None) -> list[str]:
    """After nbgrader's autograde of an already hand-graded notebook: keep the reviewed state of
    every answer that did not change, and say which were reopened and why.

    nbgrader's ``SaveAutoGrades`` marks every grade that has a manual score as needing manual
    grading again, changed or not. An answer counts as unchanged when its cell's source is the same
    as in the earlier autograded notebook (``old``, read before the run; ``new``: after it) for a
    written or coded answer, and when its autograded score is the same for a test cell whose score a
    grader overrode. Manual scores and comments are never touched (nbgrader keeps them).

    Args:
        before: :func:`hand_graded` before the run.

    Returns:
        Lines for the grading report: one for the kept answers, one per reopened answer.
    """
    if not before:
        return []
    from nbgrader.api import MissingEntry

    try:
        grades = {g.name: g for g in gb.find_submission_notebook(notebook, assignment, student).grades}
    except MissingEntry:
        return []
    kept, lines = [], []
    for gid, (manual, auto_before) in before.items():
        grade = grades.get(gid)
        if grade is None:
            continue
        solution, source = (new or {}).get(gid, (False, None))
        if old is None or new is None:
            why = "the earlier autograded notebook is gone, so the answer could not be compared"
        elif solution and (old.get(gid) or (True, None))[1] != source:
            why = "the answer changed since it was graded by hand"
        elif not solution and grade.auto_score != auto_before:
            why = (f"its autograded score changed from {auto_before if auto_before is not None else 'none'} "
                   f"to {grade.auto_score if grade.auto_score is not None else 'none'}")
        else:
            grade.needs_manual_grade = False
            kept.append(gid)
            continue
        grade.needs_manual_grade = True
        lines.append(f"{gid} reopened for hand grading: {why} (the hand score {manual:g} stands until it is "
                     f"graded again)")
    gb.db.commit()
    if kept:
        lines.insert(0, f"hand grading kept for {', '.join(kept)} (unchanged since graded by hand)")
    return lines


# ------------------------------------------------------------------------------ command line
def add_db_option(parser) -> None:
    """``--db-url URL`` on a command that touches the gradebook."""
    parser.add_argument("--db-url", default=None, metavar="URL",
                        help=f"the gradebook's database (default: ${DB_URL_ENV}, else SQLite gradebook.db in the "
                             f"course); e.g. postgresql+psycopg://grader@db.example.org/course. Prefer the "
                             f"environment variable or ~/.pgpass for a password: a command line is visible to "
                             f"every user of the machine")


def apply_db_option(args) -> None:
    """Put ``--db-url`` into the environment, where nbgrader_config.py (in this process and in every
    nbgrader process started from it) reads it."""
    url = getattr(args, "db_url", None)
    if url:
        os.environ[DB_URL_ENV] = url

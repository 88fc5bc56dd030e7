"""Where the course's gradebook lives: SQLite beside the course (one machine) or a PostgreSQL server.

nbgrader keeps every grade in the database named by ``CourseDirectory.db_url`` (default
``sqlite:///<course>/gradebook.db``). The course's ``nbgrader_config.py`` sets it from the
environment variable :data:`DB_URL_ENV` when that is set, so every nbgrader command run in the
course folder (``attnlab autograde`` and its workers, ``nbgrader export``, ``generate_feedback``,
formgrader in JupyterLab) uses the same gradebook. A PostgreSQL URL uses SQLAlchemy's psycopg 3
driver: ``postgresql+psycopg://USER[:PASSWORD]@HOST[:PORT]/DB`` (installed by the course's
``postgres`` extra); the password may also come from libpq's ``~/.pgpass`` or ``PGPASSFILE``.

The URL and libpq's settings are the grader's secrets: :func:`kernel_env` strips them from the
environment of every notebook kernel (the sandbox starts kernels with it), since grades are
written by nbgrader outside the sandbox, never by the kernel.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path

from .course import COURSE_ID, Course

#: The environment variable that points the course at its gradebook (read by nbgrader_config.py).
DB_URL_ENV = "ATTNLAB_DB_URL"
#: Other variables a database client may read (libpq's PG*, the common DATABASE_URL): never given to a kernel.
_SECRET = re.compile(r"^(ATTNLAB_DB_URL|DATABASE_URL|PG[A-Z_]*)$")


def kernel_env(env: dict | None = None) -> dict:
    """A copy of ``env`` (default: this process's) without the gradebook's URL or libpq's settings
    (``ATTNLAB_DB_URL``, ``DATABASE_URL``, ``PGPASSWORD``, ``PGPASSFILE``, every ``PG*``)."""
    return {k: v for k, v in (os.environ if env is None else env).items() if not _SECRET.match(k)}


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
    """nbgrader's ``Gradebook`` on ``course``'s gradebook (SQLite or PostgreSQL), closed on exit."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url(course), COURSE_ID) as gb:
        yield gb


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

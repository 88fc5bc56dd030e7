"""The class leaderboard: the speed pass's outcomes (:mod:`.speed`) as an HTML page and a CSV.

One table per timed notebook, fastest first: rank, the name a learner chose (``leaderboard_names.csv``
in the course folder: ``student_id,name``, an opt-in the instructor collects) or else an anonymous id
(the first 8 hex digits of HMAC-SHA256 of the student id under the course secret: stable for a student,
meaningless to others), the ratio to the course's reference kernel, TFLOP/s or GB/s, and the date.
Only outcomes that were timed are ranked. Each student also gets their own standing in their
feedback folder (``feedback/<student>/<assignment>/speed.html``).

The course secret is ``$ATTNLAB_COURSE_SECRET``, else ``.attnlab-secret`` in the course folder
(made on first use, readable by its owner only; keep it out of version control).
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import html
import io
import os
import secrets
from pathlib import Path

from .course import Course
from .speed import load_timings
from .timing import BENCHMARKS, Status

__all__ = ["SECRET_ENV", "course_secret", "anonymous_id", "rank", "render_html", "render_csv", "write"]

SECRET_ENV = "ATTNLAB_COURSE_SECRET"
NAMES_FILE = "leaderboard_names.csv"


def course_secret(course: Course) -> bytes:
    """The course secret (see the module docstring), made once when there is none."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV].encode()
    path = course.root / ".attnlab-secret"
    if not path.exists():
        # written aside, then linked into place: grading workers that start together (each notebook's
        # seed key needs it) all read the one secret that won, never a file still being written
        aside = path.with_name(f".attnlab-secret.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(aside)
    return path.read_text().strip().encode()


def anonymous_id(student: str, secret: bytes) -> str:
    return "anon-" + hmac.new(secret, student.encode(), hashlib.sha256).hexdigest()[:8]


def _names(course: Course) -> dict[str, str]:
    path = course.root / NAMES_FILE
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        return {row[0].strip(): row[1].strip() for row in csv.reader(f) if len(row) >= 2 and row[1].strip()}


def rank(course: Course) -> dict[str, list[dict]]:
    """notebook -> its timed outcomes, fastest first, each with ``rank`` and ``shown`` (the name shown)."""
    timed = [r for r in load_timings(course) if r.get("status") == Status.TIMED.value]
    if not timed:
        return {}
    secret, names = course_secret(course), _names(course)
    tables: dict[str, list[dict]] = {}
    for record in timed:
        record = {**record, "shown": names.get(record["student"]) or anonymous_id(record["student"], secret)}
        tables.setdefault(record["notebook"], []).append(record)
    for rows in tables.values():
        rows.sort(key=lambda r: -r["ratio"])
        for i, r in enumerate(rows, 1):
            r["rank"] = i
    return dict(sorted(tables.items()))


_STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse;"
          "margin-bottom:2em}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}"
          "td:nth-child(2),th:nth-child(2){text-align:left}caption{text-align:left;font-weight:bold;"
          "padding:.4em 0}.you{background:#fff3c4}")


def render_html(course: Course, tables: dict[str, list[dict]], you: str | None = None) -> str:
    """The page: one table per notebook; ``you`` (a student id) highlights that student's rows."""
    parts = [f"<!doctype html><meta charset='utf-8'><title>Leaderboard: {html.escape(course.assignment)}</title>",
             f"<style>{_STYLE}</style><h1>Speed leaderboard: {html.escape(course.assignment)}</h1>",
             "<p>Each kernel timed on the grading GPU against the course's reference kernel, on fresh inputs "
             "every repetition, every repetition checked. Ratio above 1: faster than the reference.</p>"]
    if not tables:
        parts.append("<p>No timed kernels yet.</p>")
    for notebook, rows in tables.items():
        bench = BENCHMARKS.get(notebook)
        shape = ", ".join(f"{k}={v}" for k, v in (bench.shape.items() if bench else ()))
        unit = rows[0].get("unit", "")
        parts.append(f"<table><caption>{html.escape(notebook)} ({html.escape(shape)}; "
                     f"{html.escape(rows[0].get('device', ''))})</caption>"
                     f"<tr><th>rank</th><th>name</th><th>ratio</th><th>{html.escape(unit)}</th><th>date</th></tr>")
        for r in rows:
            mark = " class='you'" if you is not None and r["student"] == you else ""
            shown = html.escape(r["shown"]) + (" (you)" if mark else "")
            parts.append(f"<tr{mark}><td>{r['rank']}</td><td>{shown}</td>"
                         f"<td>{r['ratio']:.3f}</td><td>{r['rate']:.1f}</td>"
                         f"<td>{html.escape(r['date'][:10])}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


def render_csv(tables: dict[str, list[dict]]) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["notebook", "rank", "name", "ratio", "rate", "unit", "device", "date"])
    for notebook, rows in tables.items():
        for r in rows:
            w.writerow([notebook, r["rank"], r["shown"], f"{r['ratio']:.4f}", f"{r['rate']:.2f}", r.get("unit", ""),
                        r.get("device", ""), r["date"]])
    return out.getvalue()


def write(course: Course, out: Path | None = None, feedback: bool = True) -> tuple[Path, Path]:
    """Write ``leaderboard_<assignment>.html`` and ``.csv`` (into ``out``, default the course folder)
    and, with ``feedback``, each ranked student's own page into their feedback folder.

    Returns:
        The HTML and CSV paths.
    """
    tables = rank(course)
    out = Path(out or course.root)
    page, table = out / f"leaderboard_{course.assignment}.html", out / f"leaderboard_{course.assignment}.csv"
    page.write_text(render_html(course, tables), encoding="utf-8")
    table.write_text(render_csv(tables), encoding="utf-8")
    if feedback:
        for student in sorted({r["student"] for rows in tables.values() for r in rows}):
            folder = course.root / "feedback" / student / course.assignment
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "speed.html").write_text(render_html(course, tables, you=student), encoding="utf-8")
    return page, table


# ------------------------------------------------------------------------- attnlab leaderboard
def add_parser(sub, parents) -> None:
    from .course import ASSIGNMENT, ASSIGNMENTS

    p = sub.add_parser("leaderboard", help="the class's speed leaderboard (HTML and CSV)",
                       description="Rank the kernels `attnlab speed` timed: leaderboard_<assignment>.html and .csv "
                                   "(one table per notebook: rank, chosen name or anonymous id, ratio to the "
                                   "reference, TFLOP/s or GB/s, date), and each student's standing in "
                                   "feedback/<student>/<assignment>/speed.html. Names: leaderboard_names.csv "
                                   "(student_id,name) in the course folder, for students who chose one.",
                       parents=parents)
    p.add_argument("--out", type=Path, default=None, help="folder for the page and the CSV (default: the course)")
    p.add_argument("--no-feedback", action="store_true", help="do not write the students' own pages")
    p.add_argument("--assignment", choices=ASSIGNMENTS, default=ASSIGNMENT,
                   help=f"the assignment to rank (default {ASSIGNMENT})")
    p.set_defaults(func=_cmd_leaderboard)


def _cmd_leaderboard(args) -> int:
    course = Course.find(args.course, args.assignment)
    page, table = write(course, args.out, feedback=not args.no_feedback)
    ranked = sum(len(rows) for rows in rank(course).values())
    print(f"wrote {page} and {table}: {ranked} timed kernels ranked"
          + ("" if ranked else f" (`attnlab speed --assignment {course.assignment}` times them, on a GPU grader)"))
    return 0

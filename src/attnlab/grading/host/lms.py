"""Grades back into the learning-management system the submissions came from: the import files of
Canvas's gradebook and of Moodle's assignment, keyed by the LMS's own ids that ``attnlab collect`` read.

``attnlab collect`` names a student ``<name>-<LMS id>`` and records, per assignment, which LMS and id
each student came with in ``lms_ids.csv`` in the course folder (:func:`remember`; collect reads them with
:func:`attnlab.grading.host.collect.ids_in_export`, beside the export layouts it knows, and this module
imports nothing of it). ``attnlab export --canvas FILE --moodle FILE`` then writes, beside nbgrader's CSV:

- **Canvas** (Grades > Import): the columns of Canvas's own gradebook export, ``Student``, ``ID``,
  ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per assignment, and a second row
  ``Points Possible`` with each assignment's maximum. Canvas matches a row by ``ID``, the Canvas user
  id that its "Download submissions" file names carry (``<name>_<user id>_<submission id>_<file>``).
  An assignment's column is named after the course's assignment unless ``--lms-column`` names it as
  Canvas does, ``Name (assignment id)``; an unmatched column is offered for mapping (or as a new
  assignment) on Canvas's import page.
- **Moodle** (the assignment's "Upload grading worksheet", its feedback type "Offline grading
  worksheet" switched on): ``Identifier`` is ``Participant <id>``, the id in the assignment's "Download
  all" folder names (``<Full Name>_<id>_assignsubmission_file_``). That id is the assignment's own
  participant number, not a user field, so Moodle's gradebook CSV import (which maps an identifier
  column to user id, username, ID number or email) cannot use it; the worksheet is the import that
  takes it. Moodle reads the columns ``Identifier``, ``Grade`` and ``Last modified (grade)`` by their
  English names (a site in another language names them in its language).

A student graded but not collected from that LMS (a sample, a hand-made folder) is left out and
named; so is one collected but not graded. Points are nbgrader's ``score`` (late penalty taken off);
answers still to be graded by hand count 0 and are named, so nothing incomplete goes out silently.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

#: Where ``attnlab collect`` records the LMS ids, in the course folder.
IDS_FILE = "lms_ids.csv"
IDS_COLUMNS = ["assignment", "student_id", "lms", "lms_id", "name"]
#: Canvas gradebook import: the identity columns, in the order of Canvas's own export.
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
#: The first cell of Canvas's points-possible row (as its own export writes it).
CANVAS_POINTS_ROW = "    Points Possible"
#: Moodle's grading worksheet: the columns its importer looks for, and more that it shows.
MOODLE_COLUMNS = ["Identifier", "Full name", "Grade", "Maximum Grade", "Last modified (grade)"]
MOODLE_PARTICIPANT = "Participant "


@dataclass(frozen=True)
class LmsId:
    """One student as an LMS export named them: ``lms`` is ``canvas`` or ``moodle``; ``lms_id`` the
    Canvas user id or the Moodle assignment's participant id (digits); ``name`` as the export wrote it."""

    assignment: str
    student_id: str
    lms: str
    lms_id: str
    name: str


# ------------------------------------------------------------------------------ recording the ids
def read_ids(course_root: Path) -> list[LmsId]:
    """Every LMS id recorded in the course folder (empty when ``attnlab collect`` recorded none)."""
    path = Path(course_root) / IDS_FILE
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [LmsId(**{k: row[k] for k in IDS_COLUMNS}) for row in csv.DictReader(f)]


def remember(course_root: Path, ids: list[LmsId]) -> Path:
    """Add ``ids`` to ``lms_ids.csv`` in the course folder; a student collected again for the same
    assignment keeps the newest record. Returns the file's path."""
    path = Path(course_root) / IDS_FILE
    merged = {(i.assignment, i.student_id): i for i in read_ids(course_root)}
    merged.update({(i.assignment, i.student_id): i for i in ids})
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=IDS_COLUMNS)
        writer.writeheader()
        for key in sorted(merged):
            writer.writerow(merged[key].__dict__)
    return path


# ------------------------------------------------------------------------------ the import files
@dataclass
class Written:
    """What one import file holds, and who was left out of it and why."""

    path: Path
    students: list[str] = field(default_factory=list)
    not_from_lms: list[str] = field(default_factory=list)   # graded, but not collected from this LMS
    not_graded: list[str] = field(default_factory=list)     # collected from this LMS, no grade
    incomplete: list[str] = field(default_factory=list)     # answers still to be graded by hand (count 0)

    def notes(self) -> list[str]:
        lines = []
        if self.not_from_lms:
            lines.append(f"left out (not collected from this LMS): {', '.join(self.not_from_lms)}")
        if self.not_graded:
            lines.append(f"collected but not graded (no grade written): {', '.join(self.not_graded)}")
        if self.incomplete:
            lines.append(f"answers still to be graded by hand count 0 for: {', '.join(self.incomplete)}")
        return lines


def _points(value) -> str:
    return f"{float(value):g}"


def _split(rows: list[dict], ids: list[LmsId], lms: str, assignments: list[str], out: Written) -> dict:
    """{(assignment, student_id): row} for students of ``lms``; fills ``out``'s left-out lists."""
    mine = {(i.assignment, i.student_id) for i in ids if i.lms == lms}
    graded = {(r["assignment"], r["student_id"]): r for r in rows if r["assignment"] in assignments}
    out.not_from_lms = sorted({s for (a, s) in graded if (a, s) not in mine})
    out.not_graded = sorted({s for (a, s) in mine if a in assignments and (a, s) not in graded})
    kept = {k: r for k, r in graded.items() if k in mine}
    out.incomplete = sorted({s for (a, s), r in kept.items() if float(r.get("to_be_graded") or 0) > 0})
    return kept


def write_canvas(path: Path, rows: list[dict], ids: list[LmsId], columns: dict[str, str] | None = None) -> Written:
    """Canvas's gradebook import CSV at ``path``: one row per Canvas student, one column per
    assignment of ``rows`` (nbgrader export rows, :func:`.feedback.grade_rows`), headed by
    ``columns[assignment]`` or the assignment's name; the second row gives each one's points possible.
    A student with no grade for an assignment gets an empty cell (Canvas leaves that grade as it is)."""
    columns = columns or {}
    assignments = sorted({r["assignment"] for r in rows})
    out = Written(Path(path))
    kept = _split(rows, ids, "canvas", assignments, out)
    maxima = {r["assignment"]: r["max_score"] for r in rows}
    people = {}  # Canvas user id -> (name, student_id): one row per person across assignments
    for i in ids:
        if i.lms == "canvas" and any((a, i.student_id) in kept for a in assignments):
            people.setdefault(i.lms_id, (i.name, i.student_id))
    header = CANVAS_COLUMNS + [columns.get(a, a) for a in assignments]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerow([CANVAS_POINTS_ROW, "", "", "", ""] + [_points(maxima[a]) for a in assignments])
        for lms_id, (name, student) in sorted(people.items(), key=lambda p: int(p[0])):
            cells = [_points(kept[(a, student)]["score"]) if (a, student) in kept else "" for a in assignments]
            writer.writerow([name, lms_id, "", "", ""] + cells)
            out.students.append(student)
    return out


def write_moodle(path: Path, rows: list[dict], ids: list[LmsId], assignment: str,
                 now: dt.datetime | None = None) -> Written:
    """Moodle's grading worksheet for ``assignment`` at ``path``: one row per Moodle participant with
    a grade. ``Last modified (grade)`` is the time of writing (UTC): Moodle skips a row whose grade was
    changed in Moodle after that time, unless "Allow updating records that have been modified more
    recently in Moodle than in the spreadsheet" is ticked on upload."""
    out = Written(Path(path))
    kept = _split(rows, ids, "moodle", [assignment], out)
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(MOODLE_COLUMNS)
        for i in sorted((i for i in ids if i.lms == "moodle" and (assignment, i.student_id) in kept),
                        key=lambda i: int(i.lms_id)):
            row = kept[(assignment, i.student_id)]
            writer.writerow([f"{MOODLE_PARTICIPANT}{i.lms_id}", i.name, _points(row["score"]),
                             _points(row["max_score"]), stamp])
            out.students.append(i.student_id)
    return out

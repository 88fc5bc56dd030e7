"""Grade a class in shards, on one machine or many, and merge the shards' reports into the class report.

A class is split between ``N`` grading processes (Slurm array tasks, Kubernetes Indexed Job pods,
shells on several machines) that share the course folder (NFS) and write into one gradebook
(PostgreSQL, see :mod:`attnlab.grading.worker.gradebook`). Shard ``i`` of ``N`` (``attnlab autograde --shard i/N``,
``0 <= i < N``, the numbering of ``SLURM_ARRAY_TASK_ID`` with ``--array=0-(N-1)`` and of
Kubernetes' ``JOB_COMPLETION_INDEX``) grades the submitted students ``s`` with

    crc32(s, UTF-8) mod N == i

A student's shard depends on the student's id and ``N`` only: every machine computes the same
split from the same submitted/ folder, a submission that arrives later never moves another
student to another shard, and a shard that is run again (after its node died) grades the same
students. Grading is idempotent (nbgrader's ``autograde --force`` replaces a student's earlier
grades), so a re-run shard gives the grades an uninterrupted one gives.

Two shards never write the same gradebook rows: nbgrader creates rows per student (student,
submission, grades), and the rows shared by all students (course, assignment, notebooks, test
cells) are created once beforehand by ``nbgrader generate_assignment``; ``attnlab autograde``
refuses to start before that, so shards never race to create them.

Each shard deletes its own ``grading_report_shard-<i>-of-<N>.csv`` and ``.json`` in the course
folder when it starts and writes them when it is done, so a report on disk is always the last
finished run's. :func:`merge` (``attnlab report``) joins the reports of one shard count N (the
newest report's: reports of an earlier split of the class into another N are left out and named)
into the class report, and lists students graded by more than one shard, submitted students no
shard graded, and the shards of that N whose report is missing (not run, still running, or failed).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command line imports this module: nbformat (through .autograde) only when used
    from .autograde import NotebookResult

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_REPORT = re.compile(r"^grading_report_shard-(\d+)-of-(\d+)\.json$")


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` -> (i, N), 0 <= i < N.

    Raises:
        ValueError: not of the form i/N, N < 1, or i outside 0..N-1 (the message says which).
    """
    m = _SHARD.match(text or "")
    if not m:
        raise ValueError(f"--shard {text!r}: expected i/N, e.g. 0/4 for the first of 4 shards")
    i, n = int(m[1]), int(m[2])
    if n < 1:
        raise ValueError(f"--shard {text!r}: the number of shards N must be at least 1")
    if not 0 <= i < n:
        raise ValueError(f"--shard {text!r}: the shard index i counts from 0 to N-1 = {n - 1}")
    return i, n


def shard_of(student: str, n: int) -> int:
    """The shard (0..n-1) that grades ``student``: CRC-32 of its UTF-8 id, mod n (stable across
    machines, Python versions and runs; Python's own ``hash`` of a str is salted per process)."""
    return zlib.crc32(student.encode("utf-8")) % n


def select(students: list[str], i: int, n: int) -> list[str]:
    """The students of ``students`` that shard ``i`` of ``n`` grades, in their order."""
    return [s for s in students if shard_of(s, n) == i]


def parse_students(text: str) -> list[str]:
    """``"a,b, c"`` -> ["a", "b", "c"] (empty items dropped, order and first occurrence kept)."""
    return list(dict.fromkeys(s.strip() for s in (text or "").split(",") if s.strip()))


def report_name(i: int, n: int, suffix: str) -> str:
    """``grading_report_shard-<i>-of-<N><suffix>``: the report file of one shard."""
    return f"grading_report_shard-{i}-of-{n}{suffix}"


@dataclass
class Merged:
    """The class report joined from the shards' reports."""

    results: list[NotebookResult]                              # one per (student, notebook), first shard's
    graded_twice: dict[str, list[str]] = field(default_factory=dict)  # student -> the report files grading it
    missing: list[str] = field(default_factory=list)           # submitted, in no report
    missing_shards: list[str] = field(default_factory=list)    # report files expected from the shard count
    wrong_shard: dict[str, str] = field(default_factory=dict)  # student -> report of a shard that should not grade it
    left_out: list[str] = field(default_factory=list)          # reports of another shard count (stale)
    used: list[str] = field(default_factory=list)              # the reports merged
    partial: dict[str, list[str]] = field(default_factory=dict)  # student -> notebooks others have and they lack

    def problems(self) -> list[str]:
        """One line per problem; empty when every submitted student was graded exactly once."""
        lines = [f"graded by more than one shard: {s} ({', '.join(files)})" for s, files in self.graded_twice.items()]
        lines += [f"submitted but graded by no shard: {s}" for s in self.missing]
        lines += [f"no report from shard {self._shard(f)} ({f}): not run yet, still running, or it failed"
                  for f in self.missing_shards]
        lines += [f"graded by a shard it does not belong to: {s} ({f})" for s, f in self.wrong_shard.items()]
        lines += [f"no row for {', '.join(nbs)} of {s}, which other students' rows have: was the shard's full report "
                  f"replaced by a --notebook run's?" for s, nbs in self.partial.items()]
        return lines

    def notes(self) -> list[str]:
        """What was left out and why (no problem: an earlier run split the class another way)."""
        return [f"left out {f}: another shard count than the newest report's (an earlier run's)" for f in self.left_out]

    @staticmethod
    def _shard(name: str) -> str:
        m = _REPORT.match(name)
        return f"{m[1]}/{m[2]}" if m else name


def _one_count(reports: list[Path]) -> tuple[list[Path], list[Path]]:
    """(the reports to merge, the ones left out): shard reports of the newest report's N only (files
    not named as shard reports are always merged)."""
    named = [(p, _REPORT.match(p.name)) for p in reports]
    counts = {int(m[2]) for _, m in named if m}
    if len(counts) <= 1:
        return reports, []
    newest = max((p for p, m in named if m), key=lambda p: p.stat().st_mtime)
    n = int(_REPORT.match(newest.name)[2])
    return [p for p, m in named if not m or int(m[2]) == n], [p for p, m in named if m and int(m[2]) != n]


def clear_report(*paths) -> None:
    """Delete a shard's own report files (at its start): a run that dies leaves no stale report."""
    for path in paths:
        if path:
            Path(path).unlink(missing_ok=True)


def merge(reports: list[Path], submitted: list[str] | None = None) -> Merged:
    """Join shard reports (JSON, as written by ``attnlab autograde --shard``) into one.

    Args:
        reports: the shards' JSON reports. Files named ``grading_report_shard-<i>-of-<N>.json`` are
            also checked against their shard: the shards of the same N that have no file are
            listed, and so is a student graded by a shard it does not belong to. When they name
            several N, only the newest report's N is merged (the others: ``left_out``).
        submitted: the students who submitted (default: not checked); those in no report are listed.

    Returns:
        :class:`Merged`; a student found in several reports is listed in ``graded_twice`` and its
        first report's results are kept; a student without a row for a notebook that other students'
        rows have (a report from a ``--notebook`` run) is listed in ``partial``.
    """
    from .autograde import read_report_json

    by_student: dict[str, list[str]] = {}
    results: dict[tuple[str, str], NotebookResult] = {}
    counts: dict[int, set[int]] = {}
    reports, left_out = _one_count([Path(p) for p in reports])
    merged = Merged([], left_out=[p.name for p in left_out], used=[p.name for p in reports])
    for path in reports:
        path = Path(path)
        shard = _REPORT.match(path.name)
        if shard:
            counts.setdefault(int(shard[2]), set()).add(int(shard[1]))
        for r in read_report_json(path):
            files = by_student.setdefault(r.student, [])
            if path.name not in files:
                files.append(path.name)
            if shard and shard_of(r.student, int(shard[2])) != int(shard[1]):
                merged.wrong_shard.setdefault(r.student, path.name)
            results.setdefault((r.student, r.notebook), r)
    merged.results = list(results.values())
    # every student has a row per notebook (a notebook not submitted is a "missing" row): a student
    # short of some is what a report written by `--shard i/N --notebook X` leaves behind
    notebooks: dict[str, set[str]] = {}
    for student, notebook in results:
        notebooks.setdefault(student, set()).add(notebook)
    every = set().union(*notebooks.values()) if notebooks else set()
    merged.partial = {s: sorted(every - have) for s, have in notebooks.items() if every - have}
    merged.graded_twice = {s: files for s, files in by_student.items() if len(files) > 1}
    merged.missing = [s for s in submitted or [] if s not in by_student]
    merged.missing_shards = [report_name(i, n, ".json") for n, have in sorted(counts.items())
                             for i in range(n) if i not in have]
    return merged


def shard_reports(root: Path) -> list[Path]:
    """The shard reports (JSON) in the course folder ``root``, by shard count then index."""
    found = [(p, _REPORT.match(p.name)) for p in Path(root).glob("grading_report_shard-*-of-*.json")]
    return [p for p, m in sorted(((p, m) for p, m in found if m), key=lambda t: (int(t[1][2]), int(t[1][1])))]


def students_to_grade(course, shard: str | None, students: str | None, named: list[str] | None) -> list[str] | None:
    """The students ``attnlab autograde`` grades: ``--student`` (repeatable) and ``--students a,b``
    together, else every submitted student; then only those of ``--shard i/N``. None: every
    submitted student.

    Raises:
        ValueError: a malformed ``--shard``.
    """
    chosen = list(dict.fromkeys([*(named or []), *parse_students(students or "")])) or None
    if shard is None:
        return chosen
    from .autograde import submitted_students

    i, n = parse_shard(shard)
    return select(chosen if chosen is not None else submitted_students(course), i, n)


# ------------------------------------------------------------------------------ attnlab report
REPORT_DESCRIPTION = (
    "Merge the shards' reports (grading_report_shard-I-of-N.json, written by `attnlab autograde --shard I/N`) "
    "into the class report: print the table, write grading_report.csv and .json, and list every student "
    "graded by more than one shard, every submitted student no shard graded and every shard without a "
    "report. Exits 1 when there is such a problem or a notebook could not be graded.")


def add_report_parser(sub, parents) -> None:
    from ..course import ASSIGNMENT, ASSIGNMENTS

    p = sub.add_parser("report", help="merge the shards' reports into the class report",
                       description=REPORT_DESCRIPTION, parents=parents)
    p.add_argument("reports", nargs="*", type=Path,
                   help="shard reports (JSON; default: grading_report_shard-*-of-*.json in the course folder)")
    p.add_argument("--to", type=Path, default=None, help="the class report CSV (default grading_report.csv in "
                                                         "the course folder; the JSON goes beside it)")
    p.add_argument("--assignment", choices=ASSIGNMENTS, default=ASSIGNMENT,
                   help=f"check against this assignment's submissions (default {ASSIGNMENT})")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from .autograde import format_report, not_graded, submitted_students, write_report_csv, write_report_json
    from ..course import Course

    course = Course.find(args.course, args.assignment)
    reports = args.reports or shard_reports(course.root)
    if not reports:
        print(f"attnlab report: no shard reports (grading_report_shard-*-of-*.json) in {course.root}")
        return 1
    merged = merge(reports, submitted_students(course))
    csv_path = args.to or course.root / "grading_report.csv"
    write_report_csv(merged.results, csv_path)
    write_report_json(merged.results, csv_path.with_suffix(".json"))
    print(format_report(merged.results))
    print(f"\nmerged {len(merged.used)} shard reports: {len({r.student for r in merged.results})} students, "
          f"{len(merged.results)} notebooks -> {csv_path} (and .json)")
    for line in merged.notes():
        print(f"note: {line}")
    problems = merged.problems()
    for line in problems:
        print(f"PROBLEM: {line}")
    if not problems:
        print("every submitted student was graded by exactly one shard")
    return 1 if problems or not_graded(merged.results) else 0

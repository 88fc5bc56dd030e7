"""The grading report: the table ``make grade`` prints, and its CSV and JSON forms.

Reads :class:`.records.NotebookResult` only; the texts are the ones people have always read.
"""

from __future__ import annotations

import json
from pathlib import Path

from .records import CellResult, NotebookResult, not_graded, printable


def format_report(results: list[NotebookResult]) -> str:
    """A table of autograded points per student and notebook, then one line per lost point."""
    students = list(dict.fromkeys(r.student for r in results))
    notebooks = list(dict.fromkeys(r.notebook for r in results))
    by = {(r.student, r.notebook): r for r in results}
    short = [n.split("_", 1)[0] for n in notebooks]
    width = max([len(s) for s in students] + [7])
    lines = ["Autograded points (manually graded answers not included)",
             "  ".join([f"{'student':<{width}}", *[f"{s:>7}" for s in short], f"{'total':>9}"])]
    for s in students:
        row = [by[(s, n)] for n in notebooks if (s, n) in by]
        cells = []
        for n in notebooks:
            r = by.get((s, n))
            cells.append(f"{'':>7}" if r is None else f"{f'{r.points:g}/{r.max_points:g}':>7}")
        total = f"{sum(r.points for r in row):g}/{sum(r.max_points for r in row):g}"
        lines.append("  ".join([f"{s:<{width}}", *cells, f"{total:>9}"]))
    lines.append("")
    lines.append("Legend: " + ", ".join(f"{s} = {n}" for s, n in zip(short, notebooks)))
    sections = (
        ("Points lost:", [(r, loss) for r in results for loss in r.losses()]),
        ("Needs review (what the checks could not rule out: look at these notebooks yourself):",
         [(r, note) for r in results for note in r.needs_review]),
        ("Gradebook (hand grading kept or reopened by this run; database outages waited out):",
         [(r, note) for r in results for note in r.gradebook]),
    )
    for heading, entries in sections:
        if entries:
            lines += ["", heading, *(f"  {r.student} / {r.notebook}: {text}" for r, text in entries)]
    failed = not_graded(results)
    if failed:
        lines.append("")
        lines.append(f"NOT GRADED: {len(failed)} notebook(s) could not be graded (grade them again with --student "
                     f"and --notebook once the cause is gone): " + ", ".join(f"{r.student}/{r.notebook}" for r in failed))
        for r in failed:
            lines.append(f"  {r.student}/{r.notebook}: {r.reason}")
    notes = [(r, note) for r in results for note in r.notes]
    if notes:
        lines.append("")
        lines.append("Grader's notes (what was repaired, restored or flagged; also shown to the learner):")
        for r, note in notes:
            lines.append(f"  {r.student} / {r.notebook}: {note}")
    return "\n".join(printable(line) for line in lines)


def _cell(text: str) -> str:
    """A CSV field a spreadsheet shows as text: no control characters, no leading formula sign."""
    text = printable(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t") else text


def write_report_csv(results: list[NotebookResult], path: Path) -> None:
    """One row per (student, notebook): status, points, and the reasons for lost points."""
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "notebook", "status", "points", "max_points", "manual_points_pending",
                    "seconds", "losses", "needs_review", "notes", "gradebook", "variant"])
        for r in results:
            w.writerow([_cell(r.student), _cell(r.notebook), r.status, f"{r.points:g}", f"{r.max_points:g}",
                        f"{r.manual_max:g}", f"{r.seconds:.1f}", _cell(" | ".join(r.losses())),
                        _cell(" | ".join(r.needs_review)), _cell(" | ".join(r.notes)), _cell(" | ".join(r.gradebook)),
                        _cell(r.variant)])


def write_report_json(results: list[NotebookResult], path: Path) -> None:
    """Every result with its cells and notes, for scripts (``attnlab autograde --report-json``)."""
    from dataclasses import asdict

    Path(path).write_text(json.dumps([asdict(r) for r in results], indent=1))


def read_report_json(path: Path) -> list[NotebookResult]:
    results = []
    for d in json.loads(Path(path).read_text()):
        cells = [CellResult(**c) for c in d.pop("cells")]
        results.append(NotebookResult(**d, cells=cells))
    return results

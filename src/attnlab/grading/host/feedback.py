"""Feedback and grade export that say what is still to be graded by hand.

nbgrader scores an answer nobody has graded by hand yet as 0: its feedback shows "Score: 6.0 / 9.0"
for a full-marks notebook whose three written answers wait for the instructor, and its CSV export
writes a row of zeros for every student of every assignment in the gradebook, collected or not.
The course's ``nbgrader_config.py`` puts the two classes here in their place, so nbgrader's own
commands (``nbgrader generate_feedback``, ``nbgrader export``, formgrader's buttons) behave as
``attnlab feedback`` and ``attnlab export`` do:

- :class:`FeedbackExporter` (``GenerateFeedback.exporter_class``): nbgrader's feedback page, with
  each answer that waits for hand grading marked "to be graded by hand" instead of a score of 0,
  and a line at the top that gives the autograded score apart from what is still to come.
- :class:`GradesExport` (``ExportApp.plugin_class``): one row per submission that was graded, none
  for a student who submitted nothing for an assignment; answers not graded by hand yet count 0 in
  ``score`` and their points are given in ``to_be_graded`` (``complete`` is ``no`` until then).
"""

from __future__ import annotations

import csv
import html
import re

from nbconvert.exporters import HTMLExporter
from nbgrader.plugins import ExportPlugin


def waiting(grade) -> bool:
    """Whether nbgrader's ``Grade`` row waits for hand grading: nbgrader says it needs it and no score
    was given to it, by hand or by a test (a written answer before formgrader saved its score)."""
    return bool(grade.needs_manual_grade) and grade.manual_score is None and grade.auto_score is None


def split_scores(grades) -> dict[str, float]:
    """Points of a submission's ``Grade`` rows, by how they were given: ``auto`` / ``auto_max``
    (scored by the tests, no hand score), ``hand`` / ``hand_max`` (scored by a grader),
    ``pending`` (max points of the answers still :func:`waiting`)."""
    out = dict.fromkeys(("auto", "auto_max", "hand", "hand_max", "pending"), 0.0)
    for g in grades:
        if waiting(g):
            out["pending"] += g.max_score or 0.0
        elif g.manual_score is not None:
            out["hand"] += g.manual_score + (g.extra_credit or 0.0)
            out["hand_max"] += g.max_score or 0.0
        else:
            out["auto"] += (g.auto_score or 0.0) + (g.extra_credit or 0.0)
            out["auto_max"] += g.max_score or 0.0
    return out


# ------------------------------------------------------------------------------------- feedback
_SCORE = r"Score: [-\d.]+ / ([\d.]+)"


def mark_to_be_graded(page: str, waiting_points: dict[str, float], scores: dict[str, float],
                      late_penalty: float = 0.0) -> str:
    """nbgrader's feedback page (its ``feedback`` template) with the answers in ``waiting_points``
    (grade_id -> points) shown as "to be graded by hand" where the template wrote a score of 0, the
    notebook's headline score as the score so far, and a line under it with the autograded score,
    the hand-graded one and the points still to come (``scores``: :func:`split_scores`).
    A page without the template's headline gets the line at the top of its body."""
    def points(p: float) -> str:
        return f"{p:g} point{'' if p == 1 else 's'}"

    for gid, pts in waiting_points.items():
        gid_re = re.escape(gid)
        # the table of contents: <li><a href="#GID">Written response</a> (Score: 0.0 / 1.0)</li>
        page = re.sub(rf'(<a href="#{gid_re}">[^<]*</a>) \({_SCORE}\)', rf"\1 (to be graded by hand, {points(pts)})",
                      page)
        # the answer's own heading: <a name="GID"></a> ... Score: 0.0 / 1.0 <a href="#top">
        page = re.sub(rf'(<a name="{gid_re}"></a>(?:(?!<a name=)[\s\S]){{0,2000}}?){_SCORE}(\s*<a href="#top">)',
                      rf"\1To be graded by hand ({points(pts)})\3", page, count=1)
    pending = sum(waiting_points.values())
    so_far = scores["auto"] + scores["hand"] - late_penalty
    graded_max = scores["auto_max"] + scores["hand_max"]
    names = ", ".join(f'<a href="#{html.escape(g, quote=True)}">{html.escape(g)}</a>' for g in waiting_points)
    line = (f'<p class="attnlab-to-be-graded"><b>Autograded:</b> {scores["auto"]:g} / {scores["auto_max"]:g}'
            + (f' &middot; <b>graded by hand:</b> {scores["hand"]:g} / {scores["hand_max"]:g}' if scores["hand_max"] else "")
            + f' &middot; <b>still to be graded by hand:</b> {points(pending)} ({names}). Until then the score '
            f'counts only what has been graded.</p>')
    headline = re.compile(rf"(<h4>[^<]*)\({_SCORE}\)(</h4>)")
    if headline.search(page):
        return headline.sub(lambda m: f"{m[1]}(Score so far: {so_far:g} / {graded_max:g}; {points(pending)} to be "
                                      f"graded by hand){m[3]}\n{line}", page, count=1)
    return re.sub(r"(<body[^>]*>)", lambda m: m[1] + "\n" + line, page, count=1)


class FeedbackExporter(HTMLExporter):
    """nbgrader's HTML feedback exporter, with the answers that wait for hand grading marked as
    such (:func:`mark_to_be_graded`). Reads the submission's grades from the gradebook named in
    the resources nbgrader passes (as nbgrader's ``GetGrades`` does)."""

    def from_notebook_node(self, nb, resources=None, **kw):
        output, resources = super().from_notebook_node(nb, resources, **kw)
        info = (resources or {}).get("nbgrader") or {}
        if not {"db_url", "notebook", "assignment", "student"} <= set(info):
            return output, resources  # not nbgrader's feedback run: nothing to look up
        from nbgrader.api import Gradebook

        with Gradebook(info["db_url"]) as gb:
            grades = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"]).grades
            pending = {g.name: g.max_score for g in grades if waiting(g)}
            scores = split_scores(grades)
        if pending:
            output = mark_to_be_graded(output, pending, scores, float(info.get("late_penalty") or 0.0))
        return output, resources


# ---------------------------------------------------------------------------------------- export
#: nbgrader's CSV columns, then how the score was made.
COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
           "late_submission_penalty", "score", "max_score", "autograded_score", "hand_graded_score", "to_be_graded",
           "complete"]


def grade_rows(gradebook, assignments=(), students=()) -> list[dict]:
    """One row per submission in ``gradebook`` (nbgrader's ``Gradebook``), in :data:`COLUMNS`; only
    the named ``assignments`` and ``students`` when given. ``score`` is nbgrader's (raw score less the
    late penalty, at least 0): an answer not graded by hand yet counts 0 in it, ``to_be_graded`` gives
    its points and ``complete`` says ``no`` while there is one."""
    rows = []
    for assignment in gradebook.assignments:
        if assignments and assignment.name not in assignments:
            continue
        for sub in assignment.submissions:
            student = sub.student
            if students and student.id not in students:
                continue
            scores = split_scores(g for nb in sub.notebooks for g in nb.grades)
            penalty = sub.late_submission_penalty or 0.0
            rows.append({
                "assignment": assignment.name, "duedate": assignment.duedate or "", "timestamp": sub.timestamp or "",
                "student_id": student.id, "last_name": student.last_name or "", "first_name": student.first_name or "",
                "email": student.email or "", "raw_score": sub.score, "late_submission_penalty": penalty,
                "score": max(0.0, sub.score - penalty), "max_score": assignment.max_score,
                "autograded_score": scores["auto"], "hand_graded_score": scores["hand"],
                "to_be_graded": scores["pending"], "complete": "no" if scores["pending"] else "yes"})
    return sorted(rows, key=lambda r: (r["assignment"], r["student_id"]))


class GradesExport(ExportPlugin):
    """``nbgrader export`` plugin: the CSV of :func:`grade_rows` (default ``grades.csv``), written
    with the csv module (a name holding a comma stays one field)."""

    def export(self, gradebook) -> None:
        dest = self.to or "grades.csv"
        rows = grade_rows(gradebook, [str(a) for a in self.assignment], [str(s) for s in self.student])
        self.log.info("Exporting %d graded submissions to %s", len(rows), dest)
        with open(dest, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

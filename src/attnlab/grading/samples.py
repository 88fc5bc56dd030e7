"""The bundled sample submissions: the reference solution, the blank release, and typical mistakes.

Submissions are generated, not stored, so they always match the current notebooks:

- ``reference``: each release notebook with its solution cells filled from source/ (markers removed);
- ``blank``: the release notebooks as a student receives them;
- typical mistakes: the reference with small edits to one solution cell, listed in
  ``samples/mistakes/*.py`` of the course directory. An edit whose text no longer occurs in the
  reference fails loudly, so a mistake never silently turns into a correct submission.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .course import Course, assignment_of

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


@dataclass(frozen=True)
class Mistake:
    """A typical learner mistake, as edits to the reference solution of one cell.

    Attributes:
        id: short name (a synthetic class's students ``synthetic-NNN-mistake-<id>`` and
            ``synthetic-NNN-variant-<id>`` carry it).
        notebook: notebook name without extension.
        cell: grade_id of the solution cell to edit.
        edits: (old, new) pairs; each ``old`` must occur exactly once in the reference cell.
        fails: grade_ids of the test cells that must lose their points.
        why: the mistake in one line, as a learner would make it.
        other_cells: (grade_id, edits) of further solution cells of the same notebook, for a design
            that spans two cells (e.g. dQ by atomics in 07's dK/dV kernel, copied out by its dQ kernel).
    """

    id: str
    notebook: str
    cell: str
    edits: tuple[tuple[str, str], ...]
    fails: tuple[str, ...]
    why: str
    other_cells: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()


def load_mistakes(course: Course) -> tuple[list[Mistake], list[str]]:
    """All mistakes of ``samples/mistakes/*.py``, and the ids combined into ``typical_mistakes``.

    Each file (one per notebook) defines ``MISTAKES``, a list of :class:`Mistake`, and ``TYPICAL``,
    the id of the one that joins the ``typical_mistakes`` sample student.
    """
    mistakes, typical = [], []
    for path in sorted((course.samples / "mistakes").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"attnlab_mistakes_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mistakes += mod.MISTAKES
        if getattr(mod, "TYPICAL", None):
            typical.append(mod.TYPICAL)
    ids = [m.id for m in mistakes]
    if len(set(ids)) != len(ids):
        raise ValueError(f"samples/mistakes: duplicate mistake ids in {ids}")
    return mistakes, typical


def strip_markers(source: str) -> str:
    """The solution as a learner would write it: the solution-marker lines removed."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in _MARKERS).rstrip() + "\n"


def solution_cells(course: Course, name: str) -> dict[str, str]:
    """grade_id -> reference text of every solution cell of source notebook ``name``."""
    nb = nbformat.read(_of(course, name).source / f"{name}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: strip_markers(c.source) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def _of(course: Course, name: str) -> Course:
    """``course`` seen through the assignment notebook ``name`` belongs to."""
    return course.for_assignment(assignment_of(name))


def release_notebook(course: Course, name: str) -> nbformat.NotebookNode:
    return nbformat.read(_of(course, name).release / f"{name}.ipynb", as_version=4)


def reference_notebook(course: Course, name: str) -> nbformat.NotebookNode:
    """Release notebook ``name`` with every solution cell filled from the source version."""
    nb = release_notebook(course, name)
    solutions = solution_cells(course, name)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in solutions:
            cell.source = solutions[gid]
    return nb


def apply_mistake(nb: nbformat.NotebookNode, mistake: Mistake) -> nbformat.NotebookNode:
    """A copy of ``nb`` with ``mistake``'s edits applied to its cell.

    Raises:
        ValueError: the cell is missing, or an edit's text does not occur exactly once.
    """
    nb = copy.deepcopy(nb)
    for grade_id, edits in ((mistake.cell, mistake.edits), *mistake.other_cells):
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
        if len(cells) != 1:
            raise ValueError(f"mistake {mistake.id}: no single cell {grade_id!r} in {mistake.notebook}")
        cell = cells[0]
        for old, new in edits:
            count = cell.source.count(old)
            if count != 1:
                raise ValueError(f"mistake {mistake.id}: {old!r} occurs {count} times in cell {grade_id!r} "
                                 f"of {mistake.notebook}; update samples/mistakes/ to the current reference")
            cell.source = cell.source.replace(old, new)
    return nb


def write_submission(course: Course, student: str, notebooks: dict[str, nbformat.NotebookNode]) -> Path:
    """Write ``notebooks`` as ``submitted/<student>/<course.assignment>/*.ipynb`` (replacing what was there)."""
    folder = course.submitted / student / course.assignment
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


SAMPLE_STUDENTS = ("reference", "blank", "typical_mistakes")


def forget_students(course: Course, students) -> None:
    """Remove ``students`` and their submissions from the gradebook (if there is one) and from
    submitted/ and autograded/."""
    from .worker.gradebook import db_url, has_tables, open_gradebook

    if has_tables(db_url(course)):
        from nbgrader.api import MissingEntry

        with open_gradebook(course) as gb:
            for s in students:
                try:
                    gb.remove_student(s)
                except MissingEntry:
                    pass
    for s in students:
        for folder in (course.submitted / s, course.autograded / s):
            if folder.exists():
                shutil.rmtree(folder)


def write_main_samples(course: Course) -> list[str]:
    """Write the three submissions of ``course.assignment`` the main job grades; returns the student ids."""
    names = course.notebook_names()
    reference = {n: reference_notebook(course, n) for n in names}
    mistakes, typical = load_mistakes(course)
    by_id = {m.id: m for m in mistakes}
    typical_nbs = dict(reference)
    for mid in typical:
        m = by_id[mid]
        if m.notebook not in typical_nbs:  # the other assignment's
            continue
        typical_nbs[m.notebook] = apply_mistake(typical_nbs[m.notebook], m)
    write_submission(course, "reference", reference)
    write_submission(course, "blank", {n: release_notebook(course, n) for n in names})
    write_submission(course, "typical_mistakes", typical_nbs)
    return list(SAMPLE_STUDENTS)

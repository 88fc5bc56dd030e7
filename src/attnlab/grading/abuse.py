"""Abusive sample submissions: every way a notebook reaches the grader broken, generated from the reference.

``samples/abuse/cases.py`` lists the cases as :class:`Abuse` records: the notebooks the
submission holds (the reference solution to start with), edits that break them (a
:class:`Submission` offers the usual damage: endless loops, crashes, deleted, copied, split or
retyped cells, stripped metadata, a Colab save, renamed files, patched references...) and what
grading must make of it (:class:`Expect`). Like the typical mistakes, they are code, not stored
notebooks, so they follow the notebooks as they change; an edit whose anchor text is gone fails
loudly. The course's tests write them all, zip them the way Canvas exports submissions, collect,
autograde them in one batch beside the reference, and check each expectation.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from .course import Course
from .samples import Mistake, apply_mistake, load_mistakes, reference_notebook


@dataclass(frozen=True)
class Expect:
    """What grading must make of one notebook of an abusive submission.

    Attributes:
        lost: grade_ids of the test cells that must lose their points; every other test cell of
            the notebook keeps its points.
        status: ``graded`` (nbgrader finished) or ``missing``.
        reasons: substrings that must occur in the reasons given for the lost points (or in the
            notebook's reason when not graded).
        notes: substrings that must occur in the grader's notes.
    """

    lost: tuple[str, ...] = ()
    status: str = "graded"
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Abuse:
    """One abusive submission (student ``abuse-<id>``).

    Attributes:
        id: short name.
        why: the bad submission in one line.
        notebooks: the notebooks it starts with (reference solutions).
        build: edits them, given a :class:`Submission`.
        expect: notebook name -> :class:`Expect`, for every notebook the test grades.
    """

    id: str
    why: str
    notebooks: tuple[str, ...]
    build: Callable[["Submission"], None]
    expect: dict[str, Expect] = field(default_factory=dict)

    @property
    def student(self) -> str:
        return f"abuse-{self.id}"


class Submission:
    """A submission folder being built: file name -> notebook (or raw text), with edit helpers."""

    def __init__(self, course: Course, notebooks) -> None:
        self.course = course
        self.files: dict[str, object] = {f"{n}.ipynb": reference_notebook(course, n) for n in notebooks}
        self._colab: set[str] = set()

    # -------------------------------------------------------------------- lookup
    def nb(self, name: str) -> nbformat.NotebookNode:
        return self.files[f"{name}.ipynb"]

    def index(self, name: str, gid: str) -> int:
        found = [i for i, c in enumerate(self.nb(name).cells)
                 if c.metadata.get("nbgrader", {}).get("grade_id") == gid]
        if len(found) != 1:
            raise ValueError(f"{name}: no single cell {gid!r}; update samples/abuse/ to the notebook")
        return found[0]

    def cell(self, name: str, gid: str):
        return self.nb(name).cells[self.index(name, gid)]

    # -------------------------------------------------------------------- edits
    def edit(self, name: str, gid: str, old: str, new: str) -> None:
        """Replace ``old`` (which must occur exactly once) in cell ``gid``."""
        cell = self.cell(name, gid)
        if cell.source.count(old) != 1:
            raise ValueError(f"{name}/{gid}: {old!r} occurs {cell.source.count(old)} times; "
                             f"update samples/abuse/ to the notebook")
        cell.source = cell.source.replace(old, new)

    def append(self, name: str, gid: str, code: str) -> None:
        cell = self.cell(name, gid)
        cell.source = cell.source.rstrip("\n") + "\n" + code

    def mistake(self, mistake_id: str) -> Mistake:
        """Apply a typical mistake of ``samples/mistakes/`` (returns it: its ``fails`` are the lost tests)."""
        m = {m.id: m for m in load_mistakes(self.course)[0]}[mistake_id]
        self.files[f"{m.notebook}.ipynb"] = apply_mistake(self.nb(m.notebook), m)
        return m

    def delete(self, name: str, gid: str) -> None:
        del self.nb(name).cells[self.index(name, gid)]

    def duplicate(self, name: str, gid: str, new_gid: str | None = None) -> None:
        """Paste a copy of cell ``gid`` below it (Jupyter's copy/paste; the copy keeps the metadata)."""
        i = self.index(name, gid)
        dup = copy.deepcopy(self.nb(name).cells[i])
        dup["id"] = f"{dup.get('id', 'cell')}-copy"[:64]
        if new_gid:
            dup.metadata["nbgrader"]["grade_id"] = new_gid
        self.nb(name).cells.insert(i + 1, dup)

    def split(self, name: str, gid: str, line: int) -> None:
        """Jupyter's "split cell" at ``line``: both halves keep the metadata."""
        i = self.index(name, gid)
        cell = self.nb(name).cells[i]
        lines = cell.source.splitlines()
        second = copy.deepcopy(cell)
        cell.source, second.source = "\n".join(lines[:line]), "\n".join(lines[line:])
        second["id"] = f"{cell.get('id', 'cell')}-split"[:64]
        self.nb(name).cells.insert(i + 1, second)

    def insert_after(self, name: str, gid: str, source: str) -> None:
        """A new ordinary code cell below cell ``gid``."""
        self.nb(name).cells.insert(self.index(name, gid) + 1, nbformat.v4.new_code_cell(source))

    def set_type(self, name: str, gid: str, cell_type: str) -> None:
        cell = self.cell(name, gid)
        new = (nbformat.v4.new_markdown_cell if cell_type == "markdown" else nbformat.v4.new_code_cell)(cell.source)
        new.metadata, new["id"] = cell.metadata, cell.get("id", new["id"])
        self.nb(name).cells[self.index(name, gid)] = new

    def unlock(self, name: str, gid: str) -> None:
        self.cell(name, gid).metadata["nbgrader"]["locked"] = False
        self.cell(name, gid).metadata.pop("editable", None)

    def strip_nbgrader(self, name: str) -> None:
        """What some editors do: drop every cell's nbgrader metadata."""
        for cell in self.nb(name).cells:
            cell.metadata.pop("nbgrader", None)
            cell.metadata.pop("editable", None)
            cell.metadata.pop("deletable", None)

    def colab(self, name: str) -> None:
        """Save like Google Colab: nbformat 4.0, no cell ids, Colab's own metadata."""
        self._colab.add(f"{name}.ipynb")

    def rename(self, name: str, filename: str) -> None:
        self.files[filename] = self.files.pop(f"{name}.ipynb")
        if f"{name}.ipynb" in self._colab:
            self._colab.discard(f"{name}.ipynb")
            self._colab.add(filename)

    def remove(self, name: str) -> None:
        del self.files[f"{name}.ipynb"]

    def add(self, filename: str, content) -> None:
        self.files[filename] = content

    # -------------------------------------------------------------------- output
    def contents(self) -> dict[str, bytes]:
        out = {}
        for filename, nb in self.files.items():
            if isinstance(nb, (str, bytes)):
                out[filename] = nb.encode() if isinstance(nb, str) else nb
                continue
            if filename in self._colab:
                out[filename] = _colab_json(nb).encode()
            else:
                out[filename] = nbformat.writes(nb).encode()
        return out


def _colab_json(nb) -> str:
    data = json.loads(nbformat.writes(nb))
    data["nbformat"], data["nbformat_minor"] = 4, 0
    data["metadata"] = {"colab": {"provenance": [], "collapsed_sections": []},
                        "kernelspec": {"name": "python3", "display_name": "Python 3"},
                        "language_info": {"name": "python"}, "accelerator": "GPU"}
    for n, cell in enumerate(data["cells"]):
        cell.pop("id", None)
        cell["metadata"]["id"] = f"cOl4b{n:04d}"
        if cell["cell_type"] == "code":
            cell["metadata"]["colab"] = {"base_uri": "https://localhost:8080/"}
            cell["metadata"]["outputId"] = f"0ut{n:04d}"
    return json.dumps(data, indent=2)


def load_cases(course: Course) -> list[Abuse]:
    """The cases of ``samples/abuse/cases.py`` (``CASES``)."""
    path = course.samples / "abuse" / "cases.py"
    spec = importlib.util.spec_from_file_location("attnlab_abuse_cases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ids = [c.id for c in mod.CASES]
    if len(set(ids)) != len(ids):
        raise ValueError(f"samples/abuse/cases.py: duplicate ids in {ids}")
    return list(mod.CASES)


def build_submission(course: Course, case: Abuse) -> dict[str, bytes]:
    """The files of ``case``'s submission folder (name -> bytes)."""
    sub = Submission(course, case.notebooks)
    case.build(sub)
    return sub.contents()


def write_folder(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def write_abuse_samples(course: Course, cases: list[Abuse] | None = None) -> list[Abuse]:
    """Write every case as ``submitted/abuse-<id>/attention_kernels/`` (no LMS export in between)."""
    import shutil

    cases = load_cases(course) if cases is None else cases
    for case in cases:
        folder = course.submitted / case.student / course.assignment
        if folder.exists():
            shutil.rmtree(folder)
        write_folder(folder, build_submission(course, case))
    return cases


def canvas_zip(path: Path, submissions: dict[str, dict[str, bytes]]) -> Path:
    """A zip laid out like Canvas's "Download submissions": ``<login>_<user id>_<submission id>_<file>``."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for uid, (student, files) in enumerate(submissions.items()):
            for k, (name, data) in enumerate(files.items()):
                z.writestr(f"{student}_{1000 + uid}_{50000 + 100 * uid + k}_{name}", data)
    return path

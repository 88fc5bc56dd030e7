"""The committed source/ and release/ are what the build makes of notebooks/, and release/ gives
nothing away."""

from __future__ import annotations

import json
import re

import nbformat

from attnlab.grading.host.build import stale_files

from .conftest import ROOT, Course

MARKERS = re.compile(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)")


def test_source_and_release_are_fresh(course):
    assert stale_files(course) == []


def test_every_notebook_is_built(course):
    assert [a.assignment for a in course.assignments()] == ["attention_kernels", "attention_kernels_beyond"]
    for each in course.assignments():
        names = each.notebook_names()
        assert names, f"no notebooks found for {each.assignment}"
        for folder in (each.source, each.release):
            assert sorted(p.stem for p in folder.glob("*.ipynb")) == names


def test_first_assignment_keeps_its_six_notebooks(course):
    assert [n[:2] for n in course.notebook_names()] == ["01", "02", "03", "04", "05", "06"]
    assert [n[:2] for n in course.for_assignment("attention_kernels_beyond").notebook_names()][:1] == ["07"]


def test_support_package_defines_no_graded_kernel(course):
    """The installable package defines none of the course's kernels (issue 17: it carries no solutions)."""
    graded = re.compile(r"^\s*def (_flash_fwd_kernel|_bwd_\w+_kernel|_softmax_kernel|_decode_\w+_kernel)\(",
                        re.MULTILINE)
    assert not [p.name for p in (course.root / "src" / "attnlab").rglob("*.py") if graded.search(p.read_text())]


def test_release_holds_no_solutions_or_hidden_tests(course):
    for path in (p for each in course.assignments() for p in each.release.glob("*.ipynb")):
        text = path.read_text()
        assert not MARKERS.search(text), path.name
        nb = nbformat.read(path, as_version=4)
        source = {c.id: c for c in nbformat.read(course.root / "source" / path.parent.name / path.name, as_version=4).cells}
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution") and cell.cell_type == "code":
                assert "raise NotImplementedError()" in cell.source, (path.name, meta["grade_id"])
            if meta.get("solution") and cell.cell_type == "markdown":
                assert cell.source.strip() == "YOUR ANSWER HERE", (path.name, meta["grade_id"])
            if meta.get("grade") and not meta.get("solution"):
                assert cell.source in source[cell.id].source  # visible part of the test only
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_release_holds_only_student_files(course):
    files = [p for each in course.assignments() for p in each.release.rglob("*") if p.is_file()]
    assert all(p.suffix == ".ipynb" for p in files), files


def test_solution_cells_define_the_contract_names(course):
    """Each graded function lives in its own solution cell named after it."""
    for path in (p for each in course.assignments() for p in each.source.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            src = "".join(cell["source"])
            if meta.get("solution") and cell["cell_type"] == "code" and src.lstrip().startswith(("def ", "@")):
                assert re.search(rf"def {re.escape(meta['grade_id'])}\(", src), (path.name, meta["grade_id"])

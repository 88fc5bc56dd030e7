"""Run a notebook's code cells in this process, as autograding runs them but without nbgrader or a kernel.

The suite autogrades the sample students (reference, blank, typical mistakes and one other mistake
per notebook) end to end, through nbgrader and the sandbox, once (``graded`` in conftest.py). Each of
the ~130 sample mistakes is instead run here: the cells autograding would run for it (hidden tests
included), in order, in a fresh namespace and an empty working folder, in autograding mode. That costs
a fraction of a sandboxed kernel's start-up; ``test_grading`` checks that both ways lose the same cells.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from unittest import mock

import nbformat

ROOT = Path(__file__).resolve().parents[1]
#: The cells' files. They outlive a run: Triton's interpreter reads a kernel's source at its first launch,
#: which may come after run_cells returns (a namespace's kernels used by a test). Removed at exit.
_CODE = tempfile.TemporaryDirectory(prefix="attnlab-cells-code-")


def code_cells(notebook: Path) -> list:
    """The code cells of a jupytext notebook source (solution and hidden-test markers left in: comments)."""
    import jupytext

    return [c for c in jupytext.read(notebook).cells if c.cell_type == "code"]


def autograded_notebook(notebook: str, mistake=None) -> nbformat.NotebookNode:
    """The notebook autograding runs for a submission of ``notebook`` that is the model solution with
    ``mistake``'s edits (a :class:`attnlab.grading.samples.Mistake`): the release with the solutions
    filled in (the bootstrap cell included), the mistake applied, then every read-only cell replaced by
    its source version, hidden tests included, as nbgrader's OverwriteCells does.

    Raises:
        AssertionError: the mistake edits a read-only cell (nbgrader would undo that edit).
    """
    from nbgrader.utils import is_locked  # the cells OverwriteCells restores from the gradebook

    from attnlab.grading.course import Course, assignment_of
    from attnlab.grading.samples import apply_mistake, reference_notebook

    course = Course(ROOT)
    nb = reference_notebook(course, notebook)
    if mistake:
        by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
        for grade_id in [mistake.cell, *(g for g, _ in mistake.other_cells)]:
            assert grade_id in by_id and not is_locked(by_id[grade_id]), \
                f"mistake {mistake.id} edits {grade_id!r}, which is not a solution cell"
        nb = apply_mistake(nb, mistake)
    source = nbformat.read(course.for_assignment(assignment_of(notebook)).source / f"{notebook}.ipynb", as_version=4)
    restored = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells if is_locked(c)}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in restored:
            cell.source = restored[grade_id]
    return nb


def run_cells(cells, given=("setup",), edits_cell=None, edits=(), only=None, keep_going=False,
              autograding=False) -> tuple[dict[str, str], dict]:
    """Run ``cells`` (code cells; others are skipped) in order in one namespace, ``edits`` ((old, new)
    pairs) applied to ``edits_cell``, from an empty working folder, with one torch thread (as the
    grader's kernels have) and, with ``autograding``, ``attnlab.bench.autograding()`` true (the
    measurement cells' grading branch). Returns ({grade_id: "Error: message"} of the cells that raised,
    the namespace). ``only``: the test cells to run, and then of the other cells only those in ``given``
    and the solutions. A cell that is not a test and raises is raised again, unless ``keep_going`` (a
    kernel goes on after it; it is then in the result under its grade_id, or ``cell N``)."""
    import torch

    from attnlab.grading.kernel import guard

    ns: dict = {"__name__": "__main__"}
    failed = {}
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="attnlab-cells-"))
        code_dir = Path(tempfile.mkdtemp(dir=_CODE.name))
        here, threads = os.getcwd(), torch.get_num_threads()
        stack.callback(os.chdir, here)
        stack.callback(torch.set_num_threads, threads)
        stack.callback(_close_figures)
        if autograding:  # guard.active() alone: installing the guard would also start its repairs
            stack.enter_context(mock.patch.object(guard, "active", lambda: True))
        os.chdir(folder)
        torch.set_num_threads(1)
        for index, cell in enumerate(cells):
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            gid, src = meta.get("grade_id"), cell.source
            needed = gid in given or (meta.get("solution") and not meta.get("grade"))
            if only is not None and gid not in only and not needed:
                continue
            if gid == edits_cell:
                for old, new in edits:
                    assert src.count(old) == 1, f"edit anchor not unique in {gid}: {old!r}"
                    src = src.replace(old, new)
            # each cell from a file of its own, as IPython does: @triton.jit reads a kernel's source from it
            path = code_dir / f"cell_{index}.py"
            path.write_text(src)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(src, str(path), "exec"), ns)
            except Exception as exc:  # noqa: BLE001
                if not (meta.get("grade") or keep_going):
                    raise
                failed[gid or f"cell {index}"] = f"{type(exc).__name__}: {exc}"
    return failed, ns


def _close_figures() -> None:
    """Close the figures the cells drew (a kernel's inline backend closes them after each cell)."""
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def run_as_autograded(notebook: str, mistake=None) -> tuple[dict[str, str], dict[str, str]]:
    """Run :func:`autograded_notebook` in this process, as a kernel under the grader would (every cell,
    errors allowed, autograding mode). Returns ({grade_id: "Error: message"} of the test cells that
    raised, the same of the other cells). Not reproduced: the grader's time limits, sandbox, memory cap,
    guard and thread variables (test_grading compares both ways on sample students)."""
    nb = autograded_notebook(notebook, mistake)
    tests = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
             if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    failed, _ = run_cells(nb.cells, keep_going=True, autograding=True)
    return ({k: v for k, v in failed.items() if k in tests}, {k: v for k, v in failed.items() if k not in tests})

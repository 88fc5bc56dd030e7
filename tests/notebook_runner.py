"""Run a notebook's code cells in this process, as autograding runs them but without nbgrader or a kernel.

The suite grades the sample students (reference, blank, typical mistakes) end to end, through nbgrader
and the sandbox, once (``graded`` in conftest.py). Each of the ~130 sample mistakes is instead run here:
the same cells (hidden tests included, the mistake's edits in its solution cells) in order, in a fresh
namespace and an empty working folder, which costs a fraction of a sandboxed kernel's start-up.
``test_grading`` checks that both ways agree on the typical mistakes.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
#: The cells' files. They outlive a run: Triton's interpreter reads a kernel's source at its first launch,
#: which may come after run_cells returns (a namespace's kernels used by a test). Removed at exit.
_CODE = tempfile.TemporaryDirectory(prefix="attnlab-cells-code-")


def code_cells(notebook: Path) -> list:
    """The code cells of a jupytext notebook source (solution and hidden-test markers left in: comments)."""
    import jupytext

    return [c for c in jupytext.read(notebook).cells if c.cell_type == "code"]


def autograded_cells(notebook: str, mistake=None) -> list:
    """The code cells autograding runs for ``notebooks/<notebook>.py``: the source notebook, hidden tests
    included, with the solution markers removed as a learner's copy has them and ``mistake``'s edits
    (a :class:`attnlab.grading.samples.Mistake`) applied."""
    from attnlab.grading.samples import apply_mistake, strip_markers

    nb = nbformat.v4.new_notebook(cells=code_cells(ROOT / "notebooks" / f"{notebook}.py"))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = strip_markers(cell.source)
    return (apply_mistake(nb, mistake) if mistake else nb).cells


def run_cells(cells, given=("setup",), edits_cell=None, edits=(), only=None, keep_going=False,
              folder: Path | None = None) -> tuple[dict[str, str], dict]:
    """Run ``cells`` in order in one namespace, ``edits`` ((old, new) pairs) applied to ``edits_cell``,
    with ``folder`` (default: a new empty one) as the working directory and one torch thread (as the
    grader's kernels have). Returns ({grade_id: "Error: message"} of the test cells that raised, the
    namespace). ``only``: the test cells to run, and then of the other cells only those in ``given`` and
    the solutions. A cell that is not a test and raises is raised again, unless ``keep_going`` (as a
    kernel goes on after it: the tests that need it fail)."""
    import torch

    ns: dict = {"__name__": "__main__"}
    failed = {}
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="attnlab-cells-")))
        code_dir = Path(tempfile.mkdtemp(dir=_CODE.name))
        here, threads = os.getcwd(), torch.get_num_threads()
        stack.callback(os.chdir, here)
        stack.callback(torch.set_num_threads, threads)
        stack.callback(_close_figures)
        os.chdir(folder)
        torch.set_num_threads(1)
        for index, cell in enumerate(cells):
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
                if meta.get("grade"):
                    failed[gid] = f"{type(exc).__name__}: {exc}"
                elif not keep_going:
                    raise
    return failed, ns


def _close_figures() -> None:
    """Close the figures the cells drew (a kernel's inline backend closes them after each cell)."""
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def run_as_autograded(notebook: str, mistake=None) -> dict[str, str]:
    """{grade_id: "Error: message"} of the test cells of ``notebook`` that fail with ``mistake`` in it,
    run as autograding runs the notebook (:func:`autograded_cells`), from an empty folder (a mistake's
    submission holds that one notebook)."""
    return run_cells(autograded_cells(notebook, mistake), keep_going=True)[0]


def mistakes_of(path: Path) -> list:
    """``MISTAKES`` of one ``samples/mistakes/NN_name.py`` file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"mistakes_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MISTAKES

"""Run a notebook's code cells in-process, as the sample mistakes edit them (no nbgrader, no kernel):
the fast path of the per-notebook tests of 08 and 09, beside the one nbgrader batch that grades them."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path


def code_cells(notebook: Path) -> list:
    """The code cells of a jupytext notebook source."""
    import jupytext

    return [c for c in jupytext.read(notebook).cells if c.cell_type == "code"]


def run_cells(cells, given=("setup",), edits_cell=None, edits=(), only=None) -> tuple[dict[str, str], dict]:
    """Run ``cells`` in order in one namespace, ``edits`` ((old, new) pairs) applied to ``edits_cell``;
    returns ({grade_id: error} of the test cells that raised, the namespace). ``only``: the test cells
    to run, and then of the other cells only those in ``given`` and the solutions."""
    ns: dict = {"__name__": "__main__"}
    failed = {}
    for cell in cells:
        meta = cell.metadata.get("nbgrader", {})
        gid, src = meta.get("grade_id"), cell.source
        needed = gid in given or (meta.get("solution") and not meta.get("grade"))
        if only is not None and gid not in only and not needed:
            continue
        if gid == edits_cell:
            for old, new in edits:
                assert src.count(old) == 1, f"edit anchor not unique in {gid}: {old!r}"
                src = src.replace(old, new)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(src, f"<{gid}>", "exec"), ns)  # a "<name>" file lets Triton read the source
        except Exception as exc:  # noqa: BLE001
            if not meta.get("grade"):
                raise
            failed[gid] = f"{type(exc).__name__}: {exc}"
    return failed, ns


def mistakes_of(path: Path) -> list:
    """``MISTAKES`` of one ``samples/mistakes/NN_name.py`` file."""
    spec = importlib.util.spec_from_file_location(f"mistakes_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MISTAKES

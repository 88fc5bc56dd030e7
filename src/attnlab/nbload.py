"""Load a learner's code from another notebook of the course (notebook 06 times notebook 05's kernel).

A Triton kernel must come from a real source file: ``@triton.jit`` reads the function's source
with ``inspect``. So the notebook's code cells are written to a module file and imported.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import re
import shutil
import tempfile
import traceback
from pathlib import Path
from types import ModuleType

from .core.device import quiet_init

__all__ = ["load_notebook_module", "load_earlier_kernel", "NotebookLoadError", "read_cells"]


class NotebookLoadError(RuntimeError):
    """The notebook is missing, unreadable, or its code raised while loading."""


def read_cells(path: Path) -> list[dict]:
    """The notebook's cells as dicts with ``cell_type``, ``metadata`` and ``source`` (one string).

    A current-format notebook (nbformat 4) is read as plain JSON: importing nbformat costs a fresh
    kernel about a second of CPU (it loads jsonschema's format checkers), once per graded notebook
    that loads another one. nbformat converts older formats.
    """
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    if not (isinstance(nb, dict) and nb.get("nbformat") == 4 and isinstance(nb.get("cells"), list)):
        import nbformat

        nb = nbformat.read(path, as_version=4)
    out = []
    for cell in nb["cells"]:
        source = cell.get("source", "")
        out.append({"cell_type": cell.get("cell_type"), "metadata": cell.get("metadata") or {},
                    "source": "".join(source) if isinstance(source, list) else str(source)})
    return out


def _code_cells(nb_cells: list[dict], cells: tuple[str, ...] | None) -> list[tuple[str, str]]:
    """(grade_id, source) of the code cells named in ``cells`` (grade_ids), or when None every given and
    solution cell; test cells and ungraded cells are always left out."""
    keep = []
    for cell in nb_cells:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta or (meta.get("grade") and not meta.get("solution")):
            continue
        if cells is not None and meta.get("grade_id") not in cells:
            continue
        # IPython-only lines (magics, shell escapes) are not Python
        keep.append((str(meta.get("grade_id", "?")),
                     "\n".join(ln for ln in cell["source"].splitlines() if not re.match(r"\s*[%!]", ln))))
    return keep


def _failing_cell(exc: BaseException, mod_file: Path, code: list[tuple[str, str]]) -> str:
    """The words " in cell '<grade_id>'" naming the cell whose code raised ``exc``, or an empty string."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if Path(frame.f_code.co_filename) == mod_file:
            line = lineno  # the deepest frame of the module's own code
    if line is None:
        return ""
    start = 1
    for grade_id, src in code:
        end = start + src.count("\n") + 1  # the lines after the cell's; cells are joined by one blank line
        if line < end + 1:
            return f" in cell '{grade_id}'"
        start = end + 1
    return ""


def load_notebook_module(path: str | Path, required: tuple[str, ...] = (),
                         cells: tuple[str, ...] | None = None) -> ModuleType:
    """Import code cells of the notebook at ``path`` as a module.

    Args:
        path: the ``.ipynb`` file (e.g. ``"05_triton_flash.ipynb"``, relative to the working directory).
        required: names the module must define (checked after import).
        cells: grade_ids of the cells to run, in notebook order (e.g. the set-up, the kernel and its
            launcher); by default every given and solution cell, which also runs demos and timings.

    Returns:
        The module; its attributes are the notebook's functions and variables.

    Raises:
        NotebookLoadError: the file is missing or not a notebook, a cell raised while loading (also
        ``SystemExit``, e.g. a cell calling ``sys.exit()``: the message names the notebook and the cell's
        grade_id), or a required name is not defined; the message says which.
    """
    path = Path(path)
    if not path.is_file():
        raise NotebookLoadError(f"{path.name} not found in {path.resolve().parent}: keep your notebooks "
                                f"together in one folder (as the release is laid out)")
    try:
        code = _code_cells(read_cells(path), cells)
    except Exception as exc:  # unreadable JSON, wrong format
        raise NotebookLoadError(f"{path.name} could not be read as a notebook: {exc}") from None
    folder = Path(tempfile.mkdtemp(prefix="attnlab-nb-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the module's source lives until exit
    mod_name = "attnlab_nb_" + re.sub(r"\W", "_", path.stem)
    mod_file = folder / f"{mod_name}.py"
    mod_file.write_text("\n\n".join(src for _, src in code) + "\n")
    spec = importlib.util.spec_from_file_location(mod_name, mod_file)
    module = importlib.util.module_from_spec(spec)
    try:
        with quiet_init():  # the loading notebook has said which mode is in use
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # a cell's sys.exit() must not end the loading notebook's kernel
        cell = _failing_cell(exc, mod_file, code)
        raise NotebookLoadError(f"running the code of {path.name} failed{cell}: {type(exc).__name__}: {exc}") from exc
    missing = [n for n in required if not hasattr(module, n)]
    if missing:
        raise NotebookLoadError(f"{path.name} does not define {', '.join(missing)}")
    return module


#: Where a notebook of the second assignment finds the first one's: beside it, or as the releases
#: are laid out (release/attention_kernels/ next to release/attention_kernels_beyond/).
EARLIER_FOLDERS = (Path("."), Path("..") / "attention_kernels")


def load_earlier_kernel(notebook: str, name: str, cells: tuple[str, ...] = ("bootstrap", "setup"),
                        folders: tuple[Path, ...] = EARLIER_FOLDERS):
    """The learner's own ``name`` from an earlier notebook, or None with the reason printed (never raises).

    For ungraded cells that reuse earlier work (07 runs your 05 forward with your backward, 08
    times your 05 kernel at T_q = 1): a missing or broken notebook must not stop the notebook.

    Args:
        notebook: the file name, e.g. ``"05_triton_flash.ipynb"``, looked for in each of ``folders``
            (relative to the working directory) in turn.
        name: the cell's grade_id and the name it defines, e.g. ``"_flash_fwd_kernel"``.
        cells: the cells run before it (its imports and ``attnlab.init()``).
    """
    for folder in folders:
        path = Path(folder) / notebook
        if path.is_file():
            try:
                return getattr(load_notebook_module(path, required=(name,), cells=(*cells, name)), name)
            except NotebookLoadError as exc:
                print(f"Your {notebook} could not be loaded: {exc}")
                return None
    print(f"{notebook} is not in {' nor in '.join(f'{f}/' for f in folders)}: skipped.")
    return None

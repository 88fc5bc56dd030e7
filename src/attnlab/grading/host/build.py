"""Build nbgrader's source/ and release/ from the jupytext sources in notebooks/, and check freshness.

notebooks/NN_name.py  --jupytext-->  source/ASSIGNMENT/NN_name.ipynb
                      --nbgrader generate_assignment-->  release/ASSIGNMENT/NN_name.ipynb

for each assignment of the course (``attention_kernels``: 01-06; ``attention_kernels_beyond``: 07 on).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import jupytext
import nbformat

from ..course import Course, assignment_of

#: Filled in for every cell that carries nbgrader metadata, so sources only state what differs.
NBGRADER_DEFAULTS = {"grade": False, "solution": False, "locked": False, "task": False, "schema_version": 3}
#: Cell metadata jupytext writes for round-tripping the .py file; meaningless in the .ipynb.
_JUPYTEXT_KEYS = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker", "title")


def _cell_id(cell, used: set[str]) -> str:
    base = cell.metadata.get("nbgrader", {}).get("grade_id") or \
        "c-" + hashlib.sha1(cell.source.encode()).hexdigest()[:10]
    cid, n = base, 1
    while cid in used:
        n += 1
        cid = f"{base}-{n}"
    used.add(cid)
    return cid


def course_settings(root: Path) -> dict:
    """``[tool.attnlab]`` of the course's pyproject.toml: the repository address and branch."""
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["tool"]["attnlab"]


def colab_url(settings: dict, name: str) -> str:
    repo = settings["repository"].removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repo}/blob/{settings['branch']}/release/{assignment_of(name)}/{name}.ipynb"


_BOOTSTRAP = """\
# Given: makes the course's support package importable. Where it is missing (Google Colab, a bare
# Jupyter) it is installed from the course repository; ATTNLAB_INSTALL overrides the address.
import importlib, importlib.util, os, subprocess, sys

if importlib.util.find_spec("attnlab") is None:
    _source = os.environ.get("ATTNLAB_INSTALL", "attnlab @ git+{repository}@{branch}")
    print("Installing the course's support package from", _source)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", _source], check=True)
    importlib.invalidate_caches()"""


def _bootstrap_cells(settings: dict, name: str) -> list[nbformat.NotebookNode]:
    """The two cells every notebook starts with: an Open-in-Colab badge and the install cell."""
    badge = nbformat.v4.new_markdown_cell(
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(settings, name)})")
    code = nbformat.v4.new_code_cell(_BOOTSTRAP.format(**settings))
    code.metadata["nbgrader"] = {"grade_id": "bootstrap", "locked": True}
    return [badge, code]


def notebook_from_source(path: Path, settings: dict | None = None) -> nbformat.NotebookNode:
    """Read one jupytext percent file and return the instructor notebook, with stable cell ids.

    Raises:
        ValueError: a graded cell without points, or a duplicate grade_id.
    """
    nb = jupytext.read(path)
    if settings is not None:
        nb.cells[:0] = _bootstrap_cells(settings, path.stem)
    grade_ids: set[str] = set()
    used_ids: set[str] = set()
    for cell in nb.cells:
        for key in _JUPYTEXT_KEYS:
            cell.metadata.pop(key, None)
        if "nbgrader" in cell.metadata:
            meta = {**NBGRADER_DEFAULTS, **cell.metadata["nbgrader"]}
            gid = meta.get("grade_id")
            if not gid:
                raise ValueError(f"{path.name}: an nbgrader cell has no grade_id:\n{cell.source[:200]}")
            if gid in grade_ids:
                raise ValueError(f"{path.name}: grade_id {gid!r} is used twice")
            grade_ids.add(gid)
            if meta["grade"] and "points" not in meta:
                raise ValueError(f"{path.name}: graded cell {gid!r} has no points")
            cell.metadata["nbgrader"] = meta
        cell["id"] = _cell_id(cell, used_ids)
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def build_source(course: Course) -> list[Path]:
    """Write source/<course.assignment>/*.ipynb from its notebooks/*.py; remove notebooks that no longer exist."""
    course.source.mkdir(parents=True, exist_ok=True)
    names = course.notebook_names()
    for stale in course.source.glob("*.ipynb"):
        if stale.stem not in names:
            stale.unlink()
    written = []
    settings = course_settings(course.root)
    for name in names:
        out = course.source / f"{name}.ipynb"
        nbformat.write(notebook_from_source(course.notebooks / f"{name}.py", settings), out)
        written.append(out)
    return written


def generate_assignment(course: Course, *options: str) -> None:
    """``nbgrader generate_assignment`` in ``course``: writes release/ and registers the notebooks and
    their test cells in the course's gradebook (autograde needs them there); ``options`` go to nbgrader."""
    course.nbgrader("generate_assignment", course.assignment, "--force", *options, timeout=600)


def build_fresh(course: Course, tmp: Path) -> Course:
    """Build ``course``'s notebooks/ in a new course directory under ``tmp`` (fresh gradebook)."""
    fresh = Course(tmp)
    shutil.copytree(course.notebooks, fresh.notebooks)
    for name in ("nbgrader_config.py", "pyproject.toml"):
        shutil.copy(course.root / name, fresh.root / name)
    for each in fresh.assignments():
        build_source(each)
        # its own SQLite gradebook, even when the course's (ATTNLAB_DB_URL) is a shared server
        generate_assignment(each, f"--db=sqlite:///{fresh.root / 'gradebook.db'}")
    return fresh


def build(course: Course) -> None:
    """notebooks/ -> source/ -> release/, built in a scratch course so the gradebook is untouched.

    (nbgrader refuses to change an assignment's notebooks in a gradebook that has submissions;
    building aside keeps ``attnlab build`` working whatever has been graded.)
    """
    with tempfile.TemporaryDirectory(prefix="attnlab-build-") as tmp:
        fresh = build_fresh(course, Path(tmp))
        for each in fresh.assignments():
            mine = course.for_assignment(each.assignment)
            for kind in ("source", "release"):
                dest = getattr(mine, kind)
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.copytree(getattr(each, kind), dest)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".ipynb_checkpoints" not in p.parts}


def stale_files(course: Course) -> list[str]:
    """Files of source/ and release/ (every assignment) that differ from a fresh build of notebooks/.

    Builds in a temporary copy of the course, so the working tree and its gradebook are untouched.
    """
    with tempfile.TemporaryDirectory(prefix="attnlab-build-") as tmp:
        fresh = build_fresh(course, Path(tmp))
        problems = []
        for each in fresh.assignments():
            problems += _stale_in(each, course.for_assignment(each.assignment))
        return problems


def _stale_in(fresh: Course, course: Course) -> list[str]:
    problems = []
    for kind in ("source", "release"):
        want = _tree(getattr(fresh, kind))
        have = _tree(getattr(course, kind)) if getattr(course, kind).is_dir() else {}
        for rel in sorted(set(want) | set(have)):
            label = f"{kind}/{course.assignment}/{rel}"
            if rel not in have:
                problems.append(f"{label}: missing")
            elif rel not in want:
                problems.append(f"{label}: not produced by the build (remove it)")
            elif want[rel] != have[rel]:
                problems.append(f"{label}: differs from a fresh build")
    return problems

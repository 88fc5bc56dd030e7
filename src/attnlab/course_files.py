"""The course notebooks ``attnlab selfcheck`` grades with, and the learner copy of them that the package ships.

A learner's package must not hand out the answers. What it carries per notebook (the *learner
copy*) is the release notebook, as ``nbgrader generate_assignment`` wrote it into ``release/``
(solution regions replaced by nbgrader's ``ClearSolutions``, model answers by "YOUR ANSWER HERE",
cell ids and nbgrader metadata kept), with the test cells' sources taken from ``source/`` so the
hidden tests come along. Regenerating an assignment from these copies with ``ClearSolutions``
switched off gives back ``release/`` and the gradebook entries (test cells, checksums) that
grading the instructor's ``source/`` gives: selfcheck grades exactly as before.

Where the notebooks are found, first match wins:

- ``$ATTNLAB_COURSE``: a course checkout (``nbgrader_config.py``, ``source/<assignment>/``,
  ``release/<assignment>/``) or a learner course folder as below;
- the installed package's ``attnlab/_course/``, written when the wheel is built (setup.py):
  ``nbgrader_config.py``, ``manifest.json`` and ``learner/<assignment>/*.ipynb``;
- the checkout an editable install points into.

This module imports nothing outside the standard library: setup.py loads it by path at build time.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

#: A course directory (a checkout, or a learner course folder) to use instead of the installed one.
COURSE_ENV = "ATTNLAB_COURSE"
#: Set to 0 when building the package to leave the hidden tests out (selfcheck then runs visible tests only).
HIDDEN_TESTS_ENV = "ATTNLAB_PACKAGE_HIDDEN_TESTS"
MANIFEST = "manifest.json"
LEARNER = "learner"
_HIDDEN_BEGIN, _HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_SOLUTION_BEGIN = "### BEGIN SOLUTION"


def hidden_tests_wanted(env: dict | None = None) -> bool:
    """Whether a package build includes the hidden tests: yes unless ``ATTNLAB_PACKAGE_HIDDEN_TESTS`` is 0/no/false."""
    value = (os.environ if env is None else env).get(HIDDEN_TESTS_ENV, "1").strip().lower()
    return value not in ("0", "no", "false", "off")


def _text(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def strip_hidden_tests(text: str) -> str:
    """``text`` without its hidden-test regions, line for line as nbgrader's ``ClearHiddenTests`` does."""
    kept, inside = [], False
    for line in text.split("\n"):
        if _HIDDEN_BEGIN in line:
            inside = True
        elif _HIDDEN_END in line:
            inside = False
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def _is_test_cell(cell: dict) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def learner_notebook(source_nb: dict, release_nb: dict, hidden_tests: bool = True, name: str = "") -> dict:
    """The learner copy of one notebook (JSON dicts as read from the .ipynb files): ``release_nb``, and
    when ``hidden_tests`` each test cell's source from ``source_nb`` (matched by cell id).

    Raises:
        ValueError: ``release_nb`` is not the release of ``source_nb`` (a cell missing, a test cell that
        differs outside its hidden tests: rebuild with ``attnlab build``), or a test cell holds a
        solution region (it would be shipped).
    """
    nb = json.loads(json.dumps(release_nb))
    if not hidden_tests:
        return nb
    by_id = {c.get("id"): c for c in source_nb["cells"]}
    for cell in nb["cells"]:
        if not _is_test_cell(cell):
            continue
        src = by_id.get(cell.get("id"))
        if src is None or not _is_test_cell(src):
            raise ValueError(f"{name}: test cell {cell.get('id')!r} of release/ is not a test cell in source/; "
                             f"run `attnlab build`")
        full = _text(src)
        if _SOLUTION_BEGIN in full:
            raise ValueError(f"{name}: test cell {cell.get('id')!r} holds a solution region; it cannot be shipped")
        if strip_hidden_tests(full) != _text(cell):
            raise ValueError(f"{name}: test cell {cell.get('id')!r} of release/ differs from source/ outside the "
                             f"hidden tests: release/ is stale, run `attnlab build`")
        cell["source"] = full
    return nb


def checkout_assignments(root: Path, kind: str = "source") -> dict[str, list[str]]:
    """assignment -> notebook names, for every folder of ``root/<kind>/`` that holds notebooks."""
    found = {}
    for folder in sorted((Path(root) / kind).glob("*/")):
        names = sorted(p.stem for p in folder.glob("*.ipynb"))
        if names:
            found[folder.name] = names
    return found


def write_learner_course(root: Path, dest: Path, hidden_tests: bool = True) -> dict:
    """Write the learner course folder of the course checkout ``root`` into ``dest`` (replaced).

    ``dest`` gets ``nbgrader_config.py``, ``learner/<assignment>/`` (the learner copy of every
    notebook of ``root/source/<assignment>/`` and the other files of ``root/release/<assignment>/``)
    and ``manifest.json``, which is returned. Without hidden tests only ``release/`` is read, so a
    public copy of the course that holds no ``source/`` builds too.

    Raises:
        FileNotFoundError: no notebooks in ``root/source/`` (``release/`` without hidden tests), or an
        assignment has no ``release/`` folder.
        ValueError: see :func:`learner_notebook`.
    """
    root, dest = Path(root), Path(dest)
    kind = "source" if hidden_tests else "release"
    assignments = checkout_assignments(root, kind)
    if not assignments:
        raise FileNotFoundError(f"no notebooks in {root / kind}")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy(root / "nbgrader_config.py", dest / "nbgrader_config.py")
    for assignment, names in assignments.items():
        release = root / "release" / assignment
        if not release.is_dir():
            raise FileNotFoundError(f"{release} is missing: run `attnlab build`")
        out = dest / LEARNER / assignment
        out.mkdir(parents=True)
        for path in sorted(release.iterdir()):
            if path.is_file() and path.suffix != ".ipynb":
                shutil.copy(path, out / path.name)
        for name in names:
            release_nb = release / f"{name}.ipynb"
            if not release_nb.is_file():
                raise FileNotFoundError(f"{release_nb} is missing: run `attnlab build`")
            source = json.loads((root / "source" / assignment / f"{name}.ipynb").read_text()) if hidden_tests else {}
            nb = learner_notebook(source, json.loads(release_nb.read_text()), hidden_tests, name)
            (out / f"{name}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    manifest = {"hidden_tests": hidden_tests, "assignments": assignments}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


@dataclass(frozen=True)
class CourseFiles:
    """The course notebooks found for selfcheck: a checkout's (``packaged`` False) or a learner course folder's."""

    root: Path
    packaged: bool

    @classmethod
    def at(cls, root: Path) -> "CourseFiles | None":
        root = Path(root).expanduser()
        if not (root / "nbgrader_config.py").is_file():
            return None
        if (root / MANIFEST).is_file():
            return cls(root, True)
        if checkout_assignments(root) and (root / "release").is_dir():
            return cls(root, False)
        return None

    def manifest(self) -> dict:
        if self.packaged:
            return json.loads((self.root / MANIFEST).read_text())
        return {"hidden_tests": True, "assignments": checkout_assignments(self.root)}

    @property
    def hidden_tests(self) -> bool:
        return bool(self.manifest()["hidden_tests"])

    @property
    def config(self) -> Path:
        return self.root / "nbgrader_config.py"

    def assignment_of(self) -> dict[str, str]:
        """notebook name -> its assignment."""
        return {n: a for a, names in self.manifest()["assignments"].items() for n in names}

    def notebook_path(self, name: str) -> Path:
        """The file this notebook's test cells are read from (a checkout's source notebook holds solutions)."""
        a = self.assignment_of()[name]
        return self.root / (LEARNER if self.packaged else "source") / a / f"{name}.ipynb"

    def learner_notebook(self, name: str) -> dict:
        """The learner copy of ``name`` (JSON): what selfcheck regenerates the assignment from."""
        path = self.notebook_path(name)
        if self.packaged:
            return json.loads(path.read_text())
        release = self.root / "release" / self.assignment_of()[name] / f"{name}.ipynb"
        return learner_notebook(json.loads(path.read_text()), json.loads(release.read_text()), True, name)


def find() -> CourseFiles | None:
    """The course notebooks: ``$ATTNLAB_COURSE``, else the installed package's, else the checkout's."""
    candidates = []
    if os.environ.get(COURSE_ENV):
        candidates.append(Path(os.environ[COURSE_ENV]))
    here = Path(__file__).resolve().parent
    candidates += [here / "_course", here.parents[1]]
    return next((f for f in map(CourseFiles.at, candidates) if f is not None), None)


def course_root() -> Path | None:
    """The folder the course notebooks come from (see :func:`find`), or None."""
    files = find()
    return None if files is None else files.root


def source_notebooks() -> dict[str, Path]:
    """name -> the file each course notebook's cells are read from (empty when none is found)."""
    files = find()
    if files is None:
        return {}
    return {name: files.notebook_path(name) for name in sorted(files.assignment_of())}

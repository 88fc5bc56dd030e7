"""``attnlab selfcheck NOTEBOOK.ipynb ...``: grade your own notebooks with the hidden tests.

For self-study: no instructor, no course directory, nothing submitted anywhere. nbgrader runs
underneath, in a throwaway course in a temporary folder: the instructor notebooks (with hidden
tests) that ship with the package (see :mod:`attnlab.course_files`) are turned into an assignment,
your notebook is "submitted" to it and autograded exactly as a grader would, one notebook at a
time, and a report says, per test, whether it passed and, if not, what failed and whether the
failing check was visible to you or hidden.

The hidden tests are not secret in this course: they are in the public repository and in every
copy of the package, by design. Reading them is allowed; passing them by special-casing their
inputs teaches nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from .course_files import ASSIGNMENT, course_root, source_notebooks

__all__ = ["identify_notebook", "selfcheck", "TestReport", "NotebookReport", "format_report", "main"]

STUDENT = "selfcheck"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HIDDEN_MARK = "### BEGIN HIDDEN TESTS"


class SelfcheckError(RuntimeError):
    """Self-check cannot run (no nbgrader, no course notebooks, an unknown notebook)."""


@dataclass
class TestReport:
    grade_id: str
    points: float | None      # None: graded by hand, not checked here
    max_points: float
    kind: str                 # "test" or "written answer"
    error: str = ""           # "ExcType: message" when the cell raised
    hidden: bool | None = None  # whether the failing line was in the hidden part of the test
    answered: bool | None = None  # written answers: whether the placeholder was replaced

    @property
    def passed(self) -> bool:
        return self.points is not None and self.points >= self.max_points


@dataclass
class NotebookReport:
    path: Path
    name: str
    status: str               # graded | failed | timeout
    reason: str = ""
    seconds: float = 0.0
    tests: list[TestReport] = field(default_factory=list)

    @property
    def points(self) -> float:
        return sum(t.points or 0.0 for t in self.tests if t.kind == "test")

    @property
    def max_points(self) -> float:
        return sum(t.max_points for t in self.tests if t.kind == "test")


def _grade_ids(nb) -> set[str]:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")}


def identify_notebook(path: Path, sources: dict[str, Path]) -> str:
    """Which course notebook ``path`` is: by its file name (``Copy of 01_online_softmax (2).ipynb`` is
    fine), else by the nbgrader cells it holds.

    Raises:
        SelfcheckError: not a notebook, or not one of the course's.
    """
    import nbformat

    m = re.search(r"(\d\d_[A-Za-z0-9_]+)", path.stem)
    if m and m.group(1) in sources:
        return m.group(1)
    try:
        ids = _grade_ids(nbformat.read(path, as_version=4))
    except Exception as exc:
        raise SelfcheckError(f"{path} could not be read as a notebook: {exc}") from None
    best, overlap = None, 0
    for name, src in sources.items():
        n = len(ids & (_grade_ids(nbformat.read(src, as_version=4)) - {"setup", "bootstrap"}))
        if n > overlap:
            best, overlap = name, n
    if best is None:
        raise SelfcheckError(f"{path.name} is not one of the course's notebooks ({', '.join(sources)}); "
                             f"name it after one, or pass --as NAME")
    return best


def _error_of(cell) -> tuple[str, bool | None]:
    """("ExcType: message", raised in the hidden part?) of a graded cell's first error output."""
    for out in cell.get("outputs", []):
        if out.get("output_type") != "error":
            continue
        evalue = _ANSI.sub("", out.get("evalue", "")).strip()
        error = f"{out.get('ename', 'Error')}: {evalue or '(no message: not implemented yet?)'}"
        hidden = None
        lines = cell.source.splitlines()
        marker = next((i + 1 for i, ln in enumerate(lines) if ln.strip() == _HIDDEN_MARK), None)
        if marker is not None:
            tb = _ANSI.sub("", "\n".join(out.get("traceback", [])))
            # IPython names the cell's own frame "Cell In[N], line L" (older: "<ipython-input-...> in <module>")
            found = re.search(r"Cell In\[\d*\], line (\d+)", tb) or re.search(r"^-*> ?(\d+)", tb, re.MULTILINE)
            if found:
                hidden = int(found.group(1)) > marker
        return error, hidden
    return "", None


def _tests_of(source_nb, autograded: Path | None, grades: dict[str, float | None]) -> list[TestReport]:
    import nbformat

    graded_cells = {}
    if autograded is not None and autograded.exists():
        graded_cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c
                        for c in nbformat.read(autograded, as_version=4).cells}
    reports = []
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        gid = meta["grade_id"]
        if cell.cell_type == "code" and not meta.get("solution"):
            got = graded_cells.get(gid)
            error, hidden = _error_of(got) if got is not None else ("", None)
            reports.append(TestReport(gid, grades.get(gid, 0.0) or 0.0, meta["points"], "test", error, hidden))
        else:
            got = graded_cells.get(gid)
            text = (got.source if got is not None else "").strip()
            answered = bool(text) and text != "YOUR ANSWER HERE" and "raise NotImplementedError()" not in text
            reports.append(TestReport(gid, None, meta["points"], "written answer", answered=answered))
    return reports


def _check_nbgrader() -> None:
    if importlib.util.find_spec("nbgrader") is None:
        raise SelfcheckError("self-check runs nbgrader, which is not installed here. Install it with\n"
                             "    pip install 'nbgrader==0.9.6'\n(or the course's extra: pip install "
                             "'attnlab[selfcheck]'), then run this again.")


def selfcheck(paths: list[Path], as_name: str | None = None, limit_s: float | None = None,
              keep: Path | None = None, progress=print, allow_unsafe: bool = False) -> list[NotebookReport]:
    """Autograde the learner notebooks ``paths`` with the hidden tests; one report per notebook.

    Args:
        paths: the learner's ``.ipynb`` files.
        as_name: the course notebook to grade them as (default: recognised from name or cells).
        limit_s: wall-clock limit per notebook (default: the grading pipeline's).
        keep: copy the autograded notebooks (hidden tests and their outputs included) here.
        allow_unsafe: run without the bubblewrap sandbox where it is missing (``--unsafe-no-sandbox``).

    Raises:
        SandboxUnavailable: bubblewrap is missing or fails, and ``allow_unsafe`` is False.
        SelfcheckError: nbgrader is missing, the course notebooks are not found, or a path is not
        one of the course's notebooks.
    """
    import nbformat

    _check_nbgrader()
    from .grading.autograde import NOTEBOOK_LIMIT_S, _read_grades, autograde_submission
    from .grading.course import Course

    sources = source_notebooks()
    if not sources:
        raise SelfcheckError("the course's instructor notebooks were not found: this copy of attnlab was "
                             "installed without them. Reinstall it from the course repository, or set "
                             "ATTNLAB_COURSE to a checkout of the course.")
    jobs: dict[str, Path] = {}
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise SelfcheckError(f"{p}: no such file")
        name = as_name or identify_notebook(p, sources)
        if name not in sources:
            raise SelfcheckError(f"--as {name}: not a course notebook ({', '.join(sources)})")
        if name in jobs:
            raise SelfcheckError(f"{jobs[name].name} and {p.name} are both {name}: check one at a time")
        jobs[name] = p
    root = course_root()
    with tempfile.TemporaryDirectory(prefix="attnlab-selfcheck-") as tmp:
        course = Course(Path(tmp))
        shutil.copy(root / "nbgrader_config.py", course.root / "nbgrader_config.py")
        course.source.mkdir(parents=True)
        for name in jobs:
            shutil.copy(sources[name], course.source / f"{name}.ipynb")
        start = time.perf_counter()
        if progress:
            progress(f"Preparing a private copy of the course with the hidden tests of {', '.join(jobs)} ...")
        course.nbgrader("generate_assignment", ASSIGNMENT, "--force", timeout=600)
        folder = course.submitted / STUDENT / ASSIGNMENT
        folder.mkdir(parents=True)
        # The other course notebooks beside yours come along (notebook 06 loads 05's kernel from its folder).
        for p in jobs.values():
            for sib in p.resolve().parent.glob("[0-9][0-9]_*.ipynb"):
                if sib.stem in sources and sib.stem not in jobs:
                    shutil.copy(sib, folder / sib.name)
        for name, p in jobs.items():
            shutil.copy(p, folder / f"{name}.ipynb")
        if progress:
            progress(f"Running your notebooks with the hidden tests, one at a time (set up in "
                     f"{time.perf_counter() - start:.0f} s) ...")
        results = autograde_submission(course, STUDENT, list(jobs), limit_s=limit_s or NOTEBOOK_LIMIT_S,
                                       allow_unsafe=allow_unsafe)
        reports = []
        for r in results:
            out = course.autograded / STUDENT / ASSIGNMENT / f"{r.notebook}.ipynb"
            grades = {}
            if r.status == "graded":
                grades = {gid: score for gid, (score, _) in _read_grades(course, STUDENT, r.notebook).items()}
            src = nbformat.read(course.source / f"{r.notebook}.ipynb", as_version=4)
            reports.append(NotebookReport(jobs[r.notebook], r.notebook, r.status, r.reason, r.seconds,
                                          _tests_of(src, out if r.status == "graded" else None, grades)))
            if keep is not None and out.exists():
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(out, keep / f"{r.notebook}.autograded.ipynb")
        return reports


def _wrap(text: str, indent: str, max_lines: int = 8) -> list[str]:
    lines = []
    for para in text.splitlines() or [""]:
        lines += textwrap.wrap(para, 96, initial_indent=indent, subsequent_indent=indent) or [indent]
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"{indent}... ({len(lines) - max_lines} more lines)"]
    return lines


def format_report(reports: list[NotebookReport]) -> str:
    """The per-test report a learner reads."""
    out = []
    for rep in reports:
        out.append("")
        if rep.status != "graded":
            out.append(f"{rep.path.name} (as {rep.name}): NOT GRADED: {rep.reason}")
            out.append("  Fix that first: run the notebook top to bottom (Kernel > Restart and run all) and "
                       "look for the cell that crashes or never finishes.")
            continue
        out.append(f"{rep.path.name} (as {rep.name}): {rep.points:g}/{rep.max_points:g} autograded points "
                   f"({rep.seconds:.0f} s)")
        for t in rep.tests:
            if t.kind == "test":
                mark = "PASS" if t.passed else "FAIL"
                out.append(f"  {mark}  {t.grade_id:<48} {t.points:g}/{t.max_points:g}")
                if not t.passed:
                    where = {True: "a hidden check failed", False: "a visible check failed",
                             None: "failed"}[t.hidden]
                    out.append(f"        {where}:")
                    out += _wrap(t.error or "no points (the cell did not pass)", "          ")
            else:
                state = "answered" if t.answered else "NOT ANSWERED YET"
                out.append(f"  ----  {t.grade_id:<48} {t.max_points:g} pt, graded by hand: {state}")
    total = sum(r.points for r in reports)
    max_total = sum(r.max_points for r in reports)
    out.append("")
    out.append(f"Total: {total:g}/{max_total:g} autograded points. Written answers are graded by hand and "
               f"not counted here.")
    if all(r.status == "graded" and r.points >= r.max_points for r in reports):
        out.append("Every test passes, hidden ones included.")
    else:
        out.append("Failure messages name the case (sizes, block sizes, causal) and the first wrong index: "
                   "reproduce that case in a scratch cell.")
    return "\n".join(out)


def _cmd(args) -> int:
    from .grading.sandbox import SandboxUnavailable

    try:
        reports = selfcheck([Path(p) for p in args.notebooks], as_name=args.as_name, limit_s=args.limit,
                            keep=args.keep, allow_unsafe=args.unsafe_no_sandbox)
    except (SelfcheckError, SandboxUnavailable) as exc:
        print(f"attnlab selfcheck: {exc}", file=sys.stderr)
        return 2
    print(format_report(reports))
    return 0 if all(r.status == "graded" and r.points >= r.max_points for r in reports) else 1


def add_parser(sub) -> None:
    """Register ``attnlab selfcheck`` on the CLI's subparsers."""
    p = sub.add_parser("selfcheck", help="grade your own notebooks with the hidden tests (self-study)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="+", help="your .ipynb files (one per course notebook)")
    p.add_argument("--as", dest="as_name", default=None, help="grade as this course notebook, e.g. 02_flash_forward")
    p.add_argument("--limit", type=float, default=None, help="seconds allowed per notebook (default 600)")
    p.add_argument("--keep", type=Path, default=None,
                   help="copy the autograded notebooks (with the hidden tests' output) into this folder")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run without the bubblewrap sandbox where it is missing: your notebook's code then "
                        "runs with your rights, outside any isolation")
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnlab")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["selfcheck", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)

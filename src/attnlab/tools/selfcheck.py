"""``attnlab selfcheck NOTEBOOK.ipynb ...``: grade your own notebooks with the hidden tests.

For self-study: no instructor, no course directory, nothing submitted anywhere. nbgrader runs
underneath, in a throwaway course in a temporary folder: the learner copy of the course notebooks
that ships with the package (release cells plus the hidden tests, no solutions: see
:mod:`attnlab.course_files`) is turned into an assignment, your notebook is "submitted" to it and
autograded exactly as a grader would, one notebook at a time, and a report says, per test, whether
it passed and, if not, what failed and whether the failing check was visible to you or hidden.
A package built without hidden tests runs the visible tests and says so.

Where bubblewrap (the sandbox graders run every submission in) is installed and works, your
notebook runs in it too; where it is not (Colab, macOS, a container without user namespaces) your
notebook runs as Jupyter runs it, as you, with the same time limits: the sandbox protects a grader's
gradebook and other students' work from a submission, and there is none of either here. --sandbox
refuses to run without it.

The hidden tests are not secret in the public course: they are in the public repository and in
every copy of the package, by design. Reading them is allowed; passing them by special-casing their
inputs teaches nothing.
"""
# Length: One job: the learner's selfcheck command, from finding the notebook to the report it
# prints.

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import variants
from ..course_files import find as find_course_files, source_notebooks

__all__ = ["identify_notebook", "sandbox_plan", "selfcheck", "TestReport", "NotebookReport", "format_report",
           "main", "advice_of", "error_of"]

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
    hidden_tests: bool = True  # False: this attnlab was built without hidden tests; visible tests only
    advice: list[str] = field(default_factory=list)  # "[gpu] ..." lines: resources, targets; not graded

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


_TB_SECTION = re.compile(r"^(?:The above exception was the direct cause of the following exception:|"
                         r"During handling of the above exception, another exception occurred:)\s*$", re.MULTILINE)


def failing_line(traceback: str, execution_count: int | None) -> int | None:
    """The line of the test cell (run as ``In[execution_count]``) at which its error was raised, or None.

    Only the last exception of a chain reaches the test cell: an error raised inside a kernel
    (a Triton kernel under the interpreter, a learner function defined in another cell) is shown
    first, as the cause, with that other cell's ``Cell In[...]`` frame; the test cell's own frame
    is the first frame of the last section whose cell is ``In[execution_count]``.
    """
    last = _TB_SECTION.split(_ANSI.sub("", traceback))[-1]
    frames = [(int(n) if n else None, int(line)) for n, line in re.findall(r"Cell In\[(\d*)\], line (\d+)", last)]
    own = [line for n, line in frames if execution_count is not None and n == execution_count]
    if own:
        return own[0]
    if frames:
        return frames[0][1]
    old = re.search(r"^-*> ?(\d+)", last, re.MULTILINE)  # older IPython: "<ipython-input-...> in <module>"
    return int(old.group(1)) if old else None


def error_of(cell) -> tuple[str, bool | None]:
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
            line = failing_line("\n".join(out.get("traceback", [])), cell.get("execution_count"))
            if line is not None:
                hidden = line > marker
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
            error, hidden = error_of(got) if got is not None else ("", None)
            reports.append(TestReport(gid, grades.get(gid, 0.0) or 0.0, meta["points"], "test", error, hidden))
        else:
            got = graded_cells.get(gid)
            text = (got.source if got is not None else "").strip()
            answered = bool(text) and text != "YOUR ANSWER HERE" and "raise NotImplementedError()" not in text
            reports.append(TestReport(gid, None, meta["points"], "written answer", answered=answered))
    return reports


def advice_of(autograded: Path | None) -> list[str]:
    """The GPU compile gate's advice lines (:data:`attnlab.gpu_compile.ADVICE_PREFIX`) in the outputs."""
    import nbformat

    from ..gpu_compile import ADVICE_PREFIX

    if autograded is None or not autograded.exists():
        return []
    lines = []
    for cell in nbformat.read(autograded, as_version=4).cells:
        for out in cell.get("outputs", []):
            for line in str(out.get("text", "")).splitlines():
                if line.startswith(ADVICE_PREFIX) and line[len(ADVICE_PREFIX):] not in lines:
                    lines.append(line[len(ADVICE_PREFIX):])
    return lines


def nbgrader_requirement() -> str:
    """The nbgrader requirement of attnlab's ``selfcheck`` extra as installed (e.g. ``nbgrader==0.9.6``),
    or plain ``nbgrader`` when the package's metadata cannot be read."""
    import importlib.metadata as metadata

    try:
        requires = metadata.requires("attnlab") or []
    except metadata.PackageNotFoundError:
        return "nbgrader"
    for req in requires:
        spec = req.split(";")[0].strip()
        if re.match(r"nbgrader\b", spec) and "selfcheck" in req:
            return spec.replace(" ", "")
    return next((r.split(";")[0].strip().replace(" ", "") for r in requires if re.match(r"nbgrader\b", r)),
                "nbgrader")


def _check_nbgrader() -> None:
    if importlib.util.find_spec("nbgrader") is None:
        raise SelfcheckError("self-check runs nbgrader, which is not installed here. Install it with\n"
                             f"    pip install '{nbgrader_requirement()}'\n(or the course's extra: pip install "
                             "'attnlab[selfcheck]'), then run this again.")


def sandbox_plan(require: bool = False, limit_s: float | None = None) -> tuple[bool, str]:
    """Whether to run the learner's notebooks without the sandbox, and the line that says so ("" when
    the sandbox works). Fast next to the preparation (it starts one sandboxed Python where bwrap exists),
    so it runs before it.

    Raises:
        SelfcheckError: ``require`` and the sandbox does not work here.
    """
    from ..grading.host.autograde import NOTEBOOK_LIMIT_S
    from ..grading.sandbox import INSTALL_HINT, bwrap_path, check

    ok, detail = check()
    if ok:
        return False, ""
    if require:
        raise SelfcheckError(f"--sandbox: the sandbox does not work here ({detail}). To use it, {INSTALL_HINT}; "
                             f"or leave out --sandbox to check your own notebook without it.")
    why = "bubblewrap is not installed" if bwrap_path() is None else "bubblewrap cannot start one here"
    return True, (f"No sandbox ({why}): your notebooks run as they do in Jupyter, as you, each stopped after "
                  f"{limit_s or NOTEBOOK_LIMIT_S:g} s. That is fine for your own notebooks (`attnlab doctor` "
                  f"says more).")


def selfcheck(paths: list[Path], as_name: str | None = None, limit_s: float | None = None,
              keep: Path | None = None, progress=print, require_sandbox: bool = False) -> list[NotebookReport]:
    """Autograde the learner notebooks ``paths`` with the hidden tests; one report per notebook.

    Args:
        paths: the learner's ``.ipynb`` files.
        as_name: the course notebook to grade them as (default: recognised from name or cells).
        limit_s: wall-clock limit per notebook (default: the grading pipeline's).
        keep: copy the autograded notebooks (hidden tests and their outputs included) here.
        require_sandbox: refuse to run where the bubblewrap sandbox does not work (``--sandbox``);
            by default the notebooks then run without it (:func:`sandbox_plan`), and ``progress`` says so.

    Raises:
        SelfcheckError: nbgrader is missing, the course notebooks are not found, a path is not
        one of the course's notebooks, or ``require_sandbox`` and the sandbox does not work.
    """
    import nbformat

    _check_nbgrader()
    from ..grading.course import Course, assignment_of

    files = find_course_files()
    sources = source_notebooks()
    if files is None or not sources:
        raise SelfcheckError("the course's notebooks were not found: this copy of attnlab was installed "
                             "without them. Reinstall it from the course repository, or set ATTNLAB_COURSE "
                             "to a checkout of the course.")
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
    unsandboxed, note = sandbox_plan(require_sandbox, limit_s)  # before the slow preparation
    if note and progress:
        progress(note)
    reports = []
    with tempfile.TemporaryDirectory(prefix="attnlab-selfcheck-") as tmp:
        for assignment in dict.fromkeys(assignment_of(n) for n in jobs):  # one nbgrader assignment at a time
            mine = {n: p for n, p in jobs.items() if assignment_of(n) == assignment}
            course = Course(Path(tmp) / assignment, assignment)
            course.root.mkdir()
            reports += selfcheck_assignment(course, files, mine, sources, limit_s, keep, progress,
                                            unsandboxed)
    return reports


def selfcheck_assignment(course, files, jobs: dict[str, Path], sources: dict[str, Path], limit_s, keep,
                         progress, unsandboxed: bool = False) -> list[NotebookReport]:
    """Grade ``jobs`` (name -> learner file), all of ``course.assignment``, in the scratch ``course``."""
    import nbformat

    from ..grading.host.autograde import NOTEBOOK_LIMIT_S, read_grades, autograde_submission

    hidden = files.hidden_tests
    shutil.copy(files.config, course.root / "nbgrader_config.py")
    with open(course.root / "nbgrader_config.py", "a") as f:  # the learner's own variant; no course secret here
        f.write(f"\nc.GradingExecute.variant_student = {variants.student_id() or ''!r}\n")
    course.source.mkdir(parents=True)
    for name in jobs:
        # the learner copy: release cells (solutions already cleared) and the tests, hidden ones included
        (course.source / f"{name}.ipynb").write_text(json.dumps(files.learner_notebook(name)))
    start = time.perf_counter()
    kind = "hidden" if hidden else "visible"
    if progress:
        progress(f"Preparing a private copy of the course with the {kind} tests of {', '.join(jobs)} ...")
    # The learner copy has its solutions cleared already; clearing again would turn every solution
    # cell into the bare stub and change the checksums grading compares against.
    course.nbgrader("generate_assignment", course.assignment, "--force", "--ClearSolutions.enabled=False",
                    timeout=600)
    folder = course.submitted / STUDENT / course.assignment
    folder.mkdir(parents=True)
    # The other course notebooks beside yours come along (notebook 06 loads 05's kernel from its folder).
    for p in jobs.values():
        for sib in p.resolve().parent.glob("[0-9][0-9]_*.ipynb"):
            if sib.stem in sources and sib.stem not in jobs:
                shutil.copy(sib, folder / sib.name)
    for name, p in jobs.items():
        shutil.copy(p, folder / f"{name}.ipynb")
    if progress:
        progress(f"Running your notebooks with the {kind} tests, one at a time (set up in "
                 f"{time.perf_counter() - start:.0f} s) ...")
    results = autograde_submission(course, STUDENT, list(jobs), limit_s=limit_s or NOTEBOOK_LIMIT_S,
                                   allow_unsafe=unsandboxed)
    reports = []
    for r in results:
        out = course.autograded / STUDENT / course.assignment / f"{r.notebook}.ipynb"
        grades = {}
        if r.status == "graded":
            grades = {gid: score for gid, (score, _) in read_grades(course, STUDENT, r.notebook).items()}
        src = nbformat.read(course.source / f"{r.notebook}.ipynb", as_version=4)
        tests = _tests_of(src, out if r.status == "graded" else None, grades)
        if not hidden:  # no hidden part: whatever failed was visible
            for t in tests:
                if t.kind == "test" and t.error and t.hidden is None:
                    t.hidden = False
        reports.append(NotebookReport(jobs[r.notebook], r.notebook, r.status, r.reason, r.seconds,
                                      tests, hidden_tests=hidden,
                                      advice=advice_of(out if r.status == "graded" else None)))
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
    hidden = all(r.hidden_tests for r in reports)
    if not hidden:
        out += ["", "This copy of attnlab was built without the hidden tests: only the visible tests ran. "
                "Hidden tests are not available here; a grader running them may find more."]
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
                out.append(f"  ----  {t.grade_id:<48} {t.max_points:g} {'pt' if t.max_points == 1 else 'pts'}, graded by hand: {state}")
        if rep.advice:
            out.append("  GPU advice (compiled for real GPUs; not graded):")
            for line in rep.advice:
                out += _wrap(line, "        ")
    total = sum(r.points for r in reports)
    max_total = sum(r.max_points for r in reports)
    asked = {q.notebook for q in variants.QUESTIONS.values()}
    if variants.student_id() is None and any(r.name in asked for r in reports):
        out += ["", *_wrap(f"Prediction answers were checked for the release's shapes: no student id is set "
                           f"here. In a graded course, set ${variants.STUDENT_ENV} to the id your instructor "
                           f"gives you before starting Jupyter and before this check (docs/student.md).", "")]
    out.append("")
    out.append(f"Total: {total:g}/{max_total:g} autograded points. Written answers are graded by hand and "
               f"not counted here.")
    if all(r.status == "graded" and r.points >= r.max_points for r in reports):
        out.append("Every test passes, hidden ones included." if hidden else
                   "Every visible test passes (hidden tests are not available here).")
    else:
        out.append("Failure messages name the case and the first wrong index: reproduce that case in a "
                   "scratch cell.")
    return "\n".join(out)


def _cmd(args) -> int:
    from ..grading.sandbox import SandboxUnavailable

    try:
        reports = selfcheck([Path(p) for p in args.notebooks], as_name=args.as_name, limit_s=args.limit,
                            keep=args.keep, require_sandbox=args.sandbox)
    except SelfcheckError as exc:
        print(f"attnlab selfcheck: {exc}", file=sys.stderr)
        return 2
    except SandboxUnavailable as exc:  # bwrap passed the check, then failed to start a kernel
        print(f"attnlab selfcheck: the sandbox failed to start your notebook: {exc}\n`attnlab doctor` "
              f"checks it (`grading sandbox`).", file=sys.stderr)
        return 2
    print(format_report(reports))
    return 0 if all(r.status == "graded" and r.points >= r.max_points for r in reports) else 1


def add_parser(sub) -> None:
    """Register ``attnlab selfcheck`` on the CLI's subparsers."""
    from ..grading.host.options import plain_text

    p = sub.add_parser("selfcheck", help="grade your own notebooks with the hidden tests (self-study)",
                       description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="+", help="your .ipynb files (one per course notebook)")
    p.add_argument("--as", dest="as_name", default=None, help="grade as this course notebook, e.g. 02_flash_forward")
    p.add_argument("--limit", type=float, default=None, help="seconds allowed per notebook (default 600)")
    p.add_argument("--keep", type=Path, default=None,
                   help="copy the autograded notebooks (with the hidden tests' output) into this folder")
    p.add_argument("--sandbox", action="store_true",
                   help="refuse to run where the bubblewrap sandbox does not work (by default your notebooks "
                        "then run without it, as in Jupyter)")
    # what one had to pass before selfcheck ran without the sandbox by itself: accepted, changes nothing
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnlab")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["selfcheck", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)

"""Shared fixtures: the course directory, and one autograding run of every sample submission.

Autograding is the slow part of the suite (seconds per notebook), so it runs once per session in a
temporary copy of the course and every grading test reads its results.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from attnlab.tools import command
from attnlab.grading.abuse import Abuse, build_submission, load_cases
from attnlab.grading.host.autograde import NotebookResult, autograde_jobs, read_report_json
from attnlab.grading.host.build import build_source, generate_assignment
from attnlab.grading.course import Course
from attnlab.grading.samples import (apply_mistake, load_mistakes, reference_notebook, release_notebook,
                                     write_main_samples, write_submission)

ROOT = Path(__file__).resolve().parents[1]
COURSE_FILES = ("notebooks", "source", "release", "samples", "nbgrader_config.py", "pyproject.toml")


# ------------------------------------------------------------------ two workers (pytest-xdist)
#: `make test` runs the suite on two pytest-xdist workers. A test module runs whole on one worker, so its
#: module fixtures are built once; modules that share an expensive session fixture form one unit, so that
#: fixture is built once too (before, test_variants and test_speed built `graded` a second time: ~4 min). The units whose set-up takes minutes go first, one per worker; the other
#: worker meanwhile runs the rest.
#: The expensive session fixtures below, and the unit of the modules that take them: a module whose
#: functions (tests or fixtures) take one of these as a parameter runs in that unit. Read from the test
#: files' source, since the xdist controller schedules by node id and never collects.
SHARED_FIXTURES = {"graded": "graded", "abused": "abused", "course_package": "package", "colab_venv": "package"}
FIRST = ("graded", "abused", "test_mistakes", "package", "test_gradebook", "test_hub", "test_slurm")


@functools.cache
def _module_unit(module: str) -> str:
    """The unit of a test module: the first shared fixture (in SHARED_FIXTURES' order) that one of its
    functions takes, else the module itself."""
    path = ROOT / "tests" / f"{module}.py"
    if not path.is_file():
        return module
    taken = {a.arg for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for a in node.args.args}
    return next((unit for name, unit in SHARED_FIXTURES.items() if name in taken), module)


def _unit(nodeid: str) -> str:
    """The scheduling unit of a test: its module's unit; test_mistakes by notebook."""
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    if module == "test_mistakes" and "[" in nodeid:
        return f"{module}:{nodeid.split('[', 1)[1][:2]}"
    return _module_unit(module)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        group = _unit(item.nodeid).split(":")[0]
        return FIRST.index(group) if group in FIRST else len(FIRST)

    items.sort(key=rank)


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (-p no:xdist) must not fail on it
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler with the units above, in collection order (``-n N`` and ``--dist load``,
    ``loadscope`` or ``loadgroup``; other modes keep xdist's own). xdist's ``loadgroup`` marks are not
    used: xdist 3.8 renames node ids in a way pytest 9.2 no longer reads."""
    if config.getvalue("dist") not in ("load", "loadscope", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False  # keep FIRST first
    return ModuleUnits(config, log)


@pytest.fixture(scope="session")
def course() -> Course:
    return Course(ROOT)


def copy_course(dest: Path) -> Course:
    """A throwaway copy of the course (its committed source/ and release/), for grading runs."""
    for name in COURSE_FILES:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return Course(dest)


def other_mistakes(course: Course) -> dict:
    """One sample mistake per notebook besides the typical one (the first in its file that fails a
    test), {notebook: Mistake}: graded end to end as the student ``other_mistakes``, so the in-process
    runs of every mistake (tests/test_mistakes.py) are compared with nbgrader on more than the typical ones."""
    mistakes, typical = load_mistakes(course)
    picked = {}
    for m in mistakes:
        if m.fails and m.id not in typical:
            picked.setdefault(m.notebook, m)
    return picked


@dataclass
class GradedCourse:
    course: Course
    results: dict[tuple[str, str], NotebookResult]


@pytest.fixture(scope="session")
def graded(tmp_path_factory) -> GradedCourse:
    """The sample students of both assignments (reference, blank, typical mistakes) and
    ``other_mistakes``, autograded end to end in one batch."""
    tmp = tmp_path_factory.mktemp("course")
    c = copy_course(tmp)
    jobs = []
    picked = other_mistakes(c)
    for each in c.assignments():  # both assignments, graded in one batch
        # register the assignment in a fresh gradebook; release/ must stay exactly as committed
        generate_assignment(each)
        shutil.rmtree(each.release)
        shutil.copytree(Course(ROOT).for_assignment(each.assignment).release, each.release)
        jobs += [(s, n) for s in write_main_samples(each) for n in each.notebook_names()]
        write_submission(each, "other_mistakes", {n: apply_mistake(reference_notebook(each, n), picked[n])
                                                  for n in each.notebook_names() if n in picked})
        jobs += [("other_mistakes", n) for n in each.notebook_names() if n in picked]
    # a reference notebook beside a link to a file only root may read: refused, never followed
    first = c.assignments()[0]
    folder = write_submission(first, "linked", {n: reference_notebook(first, n) for n in first.notebook_names()[:1]})
    secret = tmp / "root-only.txt"
    secret.write_text("root's secret")
    secret.chmod(0o600)
    (folder / "notes.txt").symlink_to(secret)
    jobs += [("linked", n) for n in first.notebook_names()[:1]]
    # notebook 01 handed in by "copier" with the prediction numbers of the student "reference" typed in
    # (tests/test_variants.py: a copy loses the prediction points)
    write_submission(first, "copier", {"01_online_softmax": copied_predictions(first, "reference")})
    jobs += [("copier", "01_online_softmax")]
    # one grading worker beside the suite's other xdist worker (2 cores), two when the suite runs alone
    workers = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
    results = {(r.student, r.notebook): r for r in autograde_jobs(c, jobs, progress=print, workers=workers)}
    return GradedCourse(c, results)


def copied_predictions(course: Course, student: str):
    """Notebook 01, the reference, with the numbers of ``student``'s variant typed into its prediction cell."""
    from attnlab import variants

    nb = reference_notebook(course, "01_online_softmax")
    cell, = (c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "predict-bytes")
    old = 'T = shapes("predict-bytes")["T"]'
    assert old in cell.source
    cell.source = cell.source.replace(old, f"T = {variants.shapes('predict-bytes', student)['T']}")
    return nb


# ------------------------------------------------------------------------------------------ abuse
#: The notebooks the abusive submissions use: two course notebooks and a test-only Triton notebook.
ABUSE_NOTEBOOKS = ("01_online_softmax", "02_flash_forward", "99_triton_probe")
#: Short limits, so hangs are graded in seconds (read by nbgrader_config.py and attnlab.verify).
FAST_LIMITS = {"ATTNLAB_CALL_LIMIT_S": "2", "ATTNLAB_CELL_TIMEOUT_S": "6", "ATTNLAB_NOTEBOOK_BUDGET_S": "150",
               "ATTNLAB_KERNEL_MEMORY_GB": "4", "ATTNLAB_KERNEL_SCRATCH_MB": "256"}
#: Students whose feedback the tests generate (nbgrader generate_feedback is slow per student).
FEEDBACK_STUDENTS = ("reference", "abuse-stripped")


@contextlib.contextmanager
def environment(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(course: Course, *args: str) -> tuple[int, str]:
    """``attnlab --course ROOT ARGS`` in this process; (exit code, what it printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = command.main(["--course", str(course.root), *args])
    return code, out.getvalue()


def folders_zip(path: Path, submissions: dict[str, dict[str, bytes]]) -> Path:
    """A zip with a folder per student, ``<student>/<file>`` (``attnlab collect``'s "folders" layout)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for student, files in submissions.items():
            for name, data in files.items():
                z.writestr(f"{student}/{name}", data)
    return path


@dataclass
class AbusedCourse:
    course: Course
    cases: list[Abuse]
    results: dict[tuple[str, str], NotebookResult]
    output: dict[str, str] = field(default_factory=dict)   # command -> what it printed
    seconds: dict[str, float] = field(default_factory=dict)  # command -> wall-clock seconds
    codes: dict[str, int] = field(default_factory=dict)  # command -> exit status


@pytest.fixture(scope="session")
def abused(tmp_path_factory) -> AbusedCourse:
    """Every abusive submission of samples/abuse/ plus two honest students (the reference and the
    blank release, graded after the attackers), exported as a zip with a folder per student,
    collected, autograded in one batch, exported and given feedback, all through ``attnlab``.
    (An LMS export would add the LMS's ids to the student ids: tests/test_collect.py collects those.)"""
    tmp = tmp_path_factory.mktemp("abuse")
    c = copy_course(tmp)
    shutil.copy(ROOT / "samples" / "abuse" / "99_triton_probe.py", c.notebooks)
    build_source(c)
    generate_assignment(c)
    cases = load_cases(c)
    folders = {"reference": {f"{n}.ipynb": nbformat.writes(reference_notebook(c, n)).encode()
                             for n in ABUSE_NOTEBOOKS},
               "blank": {f"{n}.ipynb": nbformat.writes(release_notebook(c, n)).encode() for n in ABUSE_NOTEBOOKS}}
    folders.update({case.student: build_submission(c, case) for case in cases})
    archive = folders_zip(tmp / "export.zip", folders)
    done = AbusedCourse(c, cases, {})
    notebook_args = [a for n in ABUSE_NOTEBOOKS for a in ("--notebook", n)]
    steps = [
        ("collect", [str(archive)]),
        # one worker: the short limits below are timing-sensitive, and two workers on two busy cores
        # would halve every honest call's slack (tests/test_parallel.py covers --jobs)
        ("autograde", [*notebook_args, "--jobs", "1", "--report-json", str(tmp / "report.json"),
                       "--report-csv", str(tmp / "report.csv")]),
        ("export", ["--to", str(tmp / "grades.csv")]),
        ("feedback", [a for s in FEEDBACK_STUDENTS for a in ("--student", s)]),
    ]
    with environment(FAST_LIMITS):
        for command, args in steps:
            start = time.perf_counter()
            code, out = run_cli(c, command, *args)
            done.seconds[command] = time.perf_counter() - start
            done.output[command] = out
            done.codes[command] = code
            print(f"attnlab {command}: exit {code}, {done.seconds[command]:.0f} s")
            if command == "autograde":
                print(out)
    done.results = {(r.student, r.notebook): r for r in read_report_json(tmp / "report.json")}
    return done


# ---------------------------------------------------------------------------------- the package
#: The files the package is built from (an in-tree build would write into the repository).
PACKAGE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "nbgrader_config.py", "source",
                 "release", "src")
#: What Colab preinstalls, as far as the course cares; torch pinned to the file on the course machines' disk.
COLAB_PACKAGES = ["torch==2.13.0", "triton", "matplotlib", "ipywidgets", "numpy", "ipykernel", "nbclient"]
OFFLINE = re.compile(r"Could not find a version|No matching distribution|Failed to establish a new connection|"
                     r"Temporary failure in name resolution|Network is unreachable|ConnectionError|"
                     r"Max retries exceeded|HTTPSConnectionPool", re.IGNORECASE)


@dataclass
class Package:
    wheel: Path         # built from the repository (what `pip install git+...` does)
    sdist: Path
    sdist_wheel: Path   # built from the sdist (what `pip install attnlab` from an index does)
    log: str            # the builds' output


def _run_build(cmd: list[str], what: str, **kw) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if p.returncode != 0:
        if OFFLINE.search(p.stdout + p.stderr):
            pytest.skip(f"pip cannot reach its package index to build {what}")
        pytest.fail(f"building {what} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p.stdout + p.stderr


@pytest.fixture(scope="session")
def course_package(tmp_path_factory) -> Package:
    """The package as learners get it: a wheel and an sdist of a copy of the repository's files, and a
    wheel built from that sdist (pip, with build isolation, as an installer does it)."""
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src-tree"
    src.mkdir()
    for name in PACKAGE_FILES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info", ".ipynb_checkpoints", "_course"))
        elif (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps"]
    log = _run_build([*pip, "-w", str(tmp / "wheel"), str(src)], "the course wheel")
    log += _run_build([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                       "b.build_sdist(sys.argv[1])", str(tmp / "sdist")], "the course sdist", cwd=src)
    (sdist,) = (tmp / "sdist").glob("attnlab-*.tar.gz")
    log += _run_build([*pip, "-w", str(tmp / "sdist-wheel"), str(sdist)], "a wheel from the sdist")
    (wheel,) = (tmp / "wheel").glob("attnlab-*.whl")
    (sdist_wheel,) = (tmp / "sdist-wheel").glob("attnlab-*.whl")
    return Package(wheel, sdist, sdist_wheel, log)


def pip_in(venv: Path, *args: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def clean_env(tmp: Path, venv: Path) -> dict:
    """The environment of a bare machine with ``venv`` first on PATH: no virtualenv, no PYTHONPATH, no
    course variables, no user Jupyter kernels."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNLAB_COURSE",
                                                            "TRITON_INTERPRET", "ATTNLAB_WIDGETS")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env["JUPYTER_DATA_DIR"] = str(tmp / "jupyter-data")
    env["JUPYTER_CONFIG_DIR"] = str(tmp / "jupyter-config")
    env["IPYTHONDIR"] = str(tmp / "ipython")
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    return env


@dataclass
class Venv:
    venv: Path
    env: dict


@pytest.fixture(scope="session")
def colab_venv(tmp_path_factory) -> Venv:
    """A fresh virtual environment holding only what Colab preinstalls (see COLAB_PACKAGES)."""
    tmp = tmp_path_factory.mktemp("colab")
    venv = tmp / "venv"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = clean_env(tmp, venv)
    # --no-compile: byte-compiling torch costs half a minute and Colab's own install is not under test
    p = pip_in(venv, "install", "-q", "--no-compile", *COLAB_PACKAGES, env=env)
    if p.returncode != 0:
        if OFFLINE.search(p.stdout + p.stderr):
            pytest.skip("pip cannot reach its package index to build a Colab-like environment: "
                        + (p.stderr.strip().splitlines() or ["?"])[-1])
        pytest.fail(f"installing {COLAB_PACKAGES} failed:\n{p.stderr[-3000:]}")
    assert pip_in(venv, "show", "attnlab", env=env).returncode != 0, "the fresh venv already has attnlab"
    print(f"Colab-like venv ready in {time.perf_counter() - start:.0f} s")
    return Venv(venv, env)


# ------------------------------------------------------------------------------------ PostgreSQL
@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL server (tests/pgserver.py), one per test module that asks for it."""
    from .pgserver import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed and could not be (as root: bash .ci/install-postgres, "
                    "or apt-get install postgresql)")
    pytest.importorskip("psycopg", reason="the postgres extra is not installed (make dev)")
    server = PostgresServer(bindir).start()
    try:
        yield server
    finally:
        server.stop()

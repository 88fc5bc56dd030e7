"""Shared fixtures: the course directory, and one autograding run of every sample submission.

Autograding is the slow part of the suite (seconds per notebook), so it runs once per session in a
temporary copy of the course and every grading test reads its results.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from attnlab.grading import cli
from attnlab.grading.abuse import Abuse, build_submission, canvas_zip, load_cases
from attnlab.grading.autograde import NotebookResult, autograde_jobs, read_report_json
from attnlab.grading.build import build_source, generate_assignment
from attnlab.grading.course import Course
from attnlab.grading.samples import (Mistake, reference_notebook, release_notebook, write_main_samples,
                                     write_mistake_samples)

ROOT = Path(__file__).resolve().parents[1]
COURSE_FILES = ("notebooks", "source", "release", "samples", "nbgrader_config.py", "pyproject.toml")


@pytest.fixture(scope="session")
def course() -> Course:
    return Course(ROOT)


def copy_course(dest: Path) -> Course:
    """A throwaway copy of the course (its committed source/ and release/), for grading runs."""
    for name in COURSE_FILES:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return Course(dest)


@dataclass
class GradedCourse:
    course: Course
    results: dict[tuple[str, str], NotebookResult]
    mistakes: list[Mistake]


@pytest.fixture(scope="session")
def graded(tmp_path_factory) -> GradedCourse:
    tmp = tmp_path_factory.mktemp("course")
    c = copy_course(tmp)
    # register the assignment in a fresh gradebook; release/ must stay exactly as committed
    generate_assignment(c)
    shutil.rmtree(c.release)
    shutil.copytree(Course(ROOT).release, c.release)
    students = write_main_samples(c)
    mistakes = write_mistake_samples(c)
    # one batch: one worker process grades every notebook, each kernel started while the last one runs
    jobs = [(s, n) for s in students for n in c.notebook_names()]
    jobs += [(f"mistake-{m.id}", m.notebook) for m in mistakes]
    results = {(r.student, r.notebook): r for r in autograde_jobs(c, jobs, progress=print)}
    return GradedCourse(c, results, mistakes)


# ------------------------------------------------------------------------------------------ abuse
#: The notebooks the abusive submissions use: two course notebooks and a test-only Triton notebook.
ABUSE_NOTEBOOKS = ("01_online_softmax", "02_flash_forward", "99_triton_probe")
#: Short limits, so hangs are graded in seconds (read by nbgrader_config.py and attnlab.verify).
FAST_LIMITS = {"ATTNLAB_CALL_LIMIT_S": "2", "ATTNLAB_CELL_TIMEOUT_S": "6", "ATTNLAB_NOTEBOOK_BUDGET_S": "150",
               "ATTNLAB_KERNEL_MEMORY_GB": "4"}
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
        code = cli.main(["--course", str(course.root), *args])
    return code, out.getvalue()


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
    blank release, graded after the attackers), exported as a Canvas zip, collected, autograded in
    one batch, exported and given feedback, all through ``attnlab``."""
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
    archive = canvas_zip(tmp / "canvas-export.zip", folders)
    done = AbusedCourse(c, cases, {})
    notebook_args = [a for n in ABUSE_NOTEBOOKS for a in ("--notebook", n)]
    steps = [
        ("collect", [str(archive)]),
        ("autograde", [*notebook_args, "--report-json", str(tmp / "report.json"),
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

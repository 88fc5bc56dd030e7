"""Shared fixtures: the course directory, and one autograding run of every sample submission.

Autograding is the slow part of the suite (seconds per notebook), so it runs once per session in a
temporary copy of the course and every grading test reads its results.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnlab.grading.autograde import NotebookResult, autograde_jobs, autograde_submission
from attnlab.grading.build import generate_assignment
from attnlab.grading.course import Course
from attnlab.grading.samples import Mistake, write_main_samples, write_mistake_samples

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
    results = {}
    for s in students:
        for r in autograde_submission(c, s, progress=print):
            results[(r.student, r.notebook)] = r
    for r in autograde_jobs(c, [(f"mistake-{m.id}", m.notebook) for m in mistakes], progress=print):
        results[(r.student, r.notebook)] = r
    return GradedCourse(c, results, mistakes)

"""Seconds to autograde one full submission (the reference, 6 notebooks) in a fresh copy of the course.

    python benchmarks/grading_overhead.py [REPEATS]

Run it with PYTHONPATH pointing at another checkout's src/ to time that version of the grader
(e.g. the one before the sandbox) under the same conditions, back to back.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import attnlab
from attnlab.grading.host.autograde import autograde_submission
from attnlab.grading.host.build import generate_assignment
from attnlab.grading.course import Course
from attnlab.grading.samples import write_main_samples

ROOT = Path(__file__).resolve().parents[1]


def main(repeats: int = 1) -> None:
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp:
        for name in ("notebooks", "source", "release", "samples", "nbgrader_config.py", "pyproject.toml"):
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, Path(tmp) / name)
        course = Course(Path(tmp))
        generate_assignment(course)
        write_main_samples(course)
        for _ in range(repeats):
            start = time.perf_counter()
            results = autograde_submission(course, "reference", progress=print if "-v" in sys.argv else None)
            elapsed = time.perf_counter() - start
            points = sum(r.points for r in results)
            print(f"{attnlab.__file__}: {len(results)} notebooks, {points:g} points, {elapsed:.1f} s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 1)

"""Collect submissions from a learning-management system's zip export, with ``nbgrader zip_collect``.

``attnlab collect EXPORT.zip`` copies the archive to ``downloaded/attention_kernels/archive/`` and
runs ``nbgrader zip_collect`` with :class:`LmsCollector`, which reads the student id from the
layouts LMS exports use:

- ``canvas``: ``<login>[_LATE]_<user id>_<submission id>_<file name>`` (Canvas "Download submissions");
- ``moodle``: a folder ``<Full Name>_<id>_assignsubmission_file_`` per student (Moodle "Download all");
- ``folders``: a folder per student, ``<student>/<file name>`` (anything else, e.g. a hand-made zip);
- ``auto`` (default): the first of these that fits each file.

Or give nbgrader's own ``named_regexp`` (``--regexp``), with ``student_id`` and ``file_id`` groups,
matched against the file's path. Then every submission folder is normalised
(:func:`.submissions.normalize_submission`): "Copy of X.ipynb" and the like become X.ipynb.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
from traitlets import Enum

from .course import ASSIGNMENTS, Course

_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_?$")
_CANVAS = re.compile(r"^(?P<login>[A-Za-z0-9.\-]+?)(?:_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_(?P<file>.+)$")
_SKIP_DIRS = {*ASSIGNMENTS, "submission", "submissions", "notebooks", "__macosx"}


def slug(text: str) -> str:
    """A student id safe for paths and the gradebook: letters, digits, ``_ . -``; lower case."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", text).strip("_.").lower() or "unknown"


def parse(rel_path: str, layout: str = "auto") -> dict | None:
    """``{"student_id", "file_id"}`` from a file's path inside the extracted export, or None.

    ``rel_path`` starts with the folder nbgrader extracted the archive into.
    """
    parts = rel_path.replace(os.sep, "/").split("/")
    dirs, name = parts[:-1], parts[-1]
    if layout in ("auto", "moodle"):
        for d in reversed(dirs):
            m = _MOODLE.match(d)
            if m:
                return {"student_id": slug(m["name"]), "file_id": name}
        if layout == "moodle":
            return None
    if layout in ("auto", "canvas"):
        m = _CANVAS.match(name)
        if m:
            return {"student_id": slug(m["login"]), "file_id": m["file"]}
        if layout == "canvas":
            return None
    # folders: the nearest folder above the file that is not the archive's own or a generic name
    for d in reversed(dirs[1:]):
        if d.lower() not in _SKIP_DIRS and not d.startswith("."):
            return {"student_id": slug(d), "file_id": name}
    return None


class LmsCollector(FileNameCollectorPlugin):
    """nbgrader's file-name collector, reading LMS export layouts (see the module's docstring)."""

    layout = Enum(["auto", "canvas", "moodle", "folders"], default_value="auto",
                  help="How the export names each student's files").tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen: dict[tuple[str, str], int] = {}

    def collect(self, submitted_file: str):
        if os.path.splitext(submitted_file)[1] not in self.valid_ext:
            return None
        if "__MACOSX" in submitted_file or ".ipynb_checkpoints" in submitted_file:
            return None
        if self.named_regexp:
            info = super().collect(submitted_file)
        else:
            app = self.parent
            base = app._format_collect_path(app.extracted_directory) if app is not None else os.path.dirname(submitted_file)
            info = parse(os.path.relpath(submitted_file, base), self.layout)
            if info is None:
                self.log.warning("Skipped (no student id found in the path): %s", submitted_file)
        if not info:
            return None
        # nbgrader fails the whole collection on two files with one name and no timestamps:
        # keep both, the second as "X (2).ipynb" (normalize_submission sorts them out)
        key = (info["student_id"], info["file_id"])
        n = self._seen.get(key, 0) + 1
        self._seen[key] = n
        if n > 1:
            stem, ext = os.path.splitext(info["file_id"])
            info = {**info, "file_id": f"{stem} ({n}){ext}"}
        return info


def collect_zip(course: Course, archive: Path, layout: str = "auto", regexp: str | None = None,
                timeout: float = 1800) -> dict[str, dict[str, list[str]]]:
    """Collect an LMS export into ``submitted/`` with ``nbgrader zip_collect``; normalise each folder.

    Earlier archives in ``downloaded/attention_kernels/archive/`` are removed first, so the folder
    holds exactly this export. Returns student -> notes of :func:`.submissions.normalize_submission`.

    Raises:
        FileNotFoundError: ``archive`` does not exist.
        RuntimeError: nbgrader zip_collect failed (its output is in the message).
    """
    from .submissions import normalize_submission

    archive = Path(archive).resolve()
    if not archive.is_file():
        raise FileNotFoundError(archive)
    store = course.root / "downloaded" / course.assignment / "archive"
    if store.exists():
        shutil.rmtree(store)
    store.mkdir(parents=True)
    shutil.copy(archive, store / archive.name)
    before = set(_students(course))
    args = ["zip_collect", course.assignment, "--force", "--collector=attnlab.grading.collect.LmsCollector",
            f"--LmsCollector.layout={layout}"]
    if regexp:
        args.append(f"--LmsCollector.named_regexp={regexp}")
    proc = course.nbgrader(*args, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader zip_collect failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    collected = _collected_students(proc.stdout + proc.stderr, course) or sorted(set(_students(course)) - before)
    names = course.notebook_names()
    return {s: normalize_submission(course.submitted / s / course.assignment, names) for s in collected}


def _students(course: Course) -> list[str]:
    if not course.submitted.is_dir():
        return []
    return sorted(p.name for p in course.submitted.iterdir() if (p / course.assignment).is_dir())


def _collected_students(log: str, course: Course) -> list[str]:
    """Students nbgrader copied files for in this run (from its "Copying to:" log lines)."""
    root = str(course.submitted.resolve())
    found = re.findall(re.escape(root) + r"/([^/\s]+)/" + re.escape(course.assignment) + "/", log)
    return sorted(set(found))

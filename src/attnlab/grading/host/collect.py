"""Collect submissions from a learning-management system's zip export, with ``nbgrader zip_collect``.

``attnlab collect EXPORT.zip`` copies the archive to ``downloaded/attention_kernels/archive/`` and
runs ``nbgrader zip_collect`` with :class:`LmsCollector`, which reads the student id from the
layouts LMS exports use:

- ``canvas``: ``<name>[_LATE]_<user id>_<submission id>_<file name>`` (Canvas "Download submissions");
- ``moodle``: a folder ``<Full Name>_<participant id>_assignsubmission_file_`` per student (Moodle
  "Download all");
- ``folders``: a folder per student, ``<student>/<file name>`` (anything else, e.g. a hand-made zip);
- ``auto`` (default): the first of these that fits each file.

Names are not unique (two "Wei Zhang" in one cohort), so where the LMS has its own id the student
id is ``<name>-<LMS id>`` (``wei_zhang-1003``, ``李明-1001``): distinct, stable across exports,
readable, and traceable to the LMS's gradebook. Names keep their letters in any alphabet
(:func:`slug`). Every file of the export that is not collected is reported with the reason.

Or give nbgrader's own ``named_regexp`` (``--regexp``), with ``student_id`` and ``file_id`` groups,
matched against the file's path. Then every submission folder is normalised
(:func:`.submissions.normalize_submission`): "Copy of X.ipynb" and the like become X.ipynb.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import unicodedata
import zipfile
from pathlib import Path

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
from traitlets import Enum

from ..course import ASSIGNMENTS, Course
from . import lms

_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_?$")
_CANVAS = re.compile(r"^(?P<login>[^_/]+?)(?:_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_(?P<file>.+)$")
_SKIP_DIRS = {*ASSIGNMENTS, "submission", "submissions", "notebooks", "__macosx"}


def slug(text: str) -> str:
    """A student id safe for paths, globs and the gradebook, readable in any alphabet.

    Letters, combining marks and digits of every script are kept (NFKC-normalised, case-folded, so
    one name always gives one id), as are ``_ . -``; anything else becomes ``_``. Empty: "unknown".

    >>> slug("Ann Lee-Smith (2)"), slug("李明"), slug("José Ñúñez")
    ('ann_lee-smith_2', '李明', 'josé_ñúñez')
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(ch if ch in "_.-" or unicodedata.category(ch)[0] in "LMN" else "_" for ch in text)
    return re.sub(r"_+", "_", kept).strip("_.-") or "unknown"


def _with_id(name: str, lms_id: str) -> str:
    return f"{slug(name)}-{lms_id}"


def lms_identity(rel_path: str, layout: str = "auto") -> dict | None:
    """Who a file of a Canvas or Moodle export belongs to: ``{"student_id", "file_id", "lms", "lms_id",
    "name"}`` (``lms``: ``canvas`` or ``moodle``; ``lms_id``: Canvas's user id or Moodle's participant
    id; ``name`` as the export wrote it), or None for a path of neither layout (or not of ``layout``).

    ``rel_path`` starts with the folder nbgrader extracted the archive into.
    """
    parts = rel_path.replace(os.sep, "/").split("/")
    dirs, name = parts[:-1], parts[-1]
    # The outermost folder names the student: the LMS made it; anything below came from the student's
    # own upload, and a folder named like another student's there must not file work under their name.
    if layout in ("auto", "moodle"):
        for d in dirs:
            m = _MOODLE.match(d)
            if m:
                return {"student_id": _with_id(m["name"], m["id"]), "file_id": name, "lms": "moodle",
                        "lms_id": m["id"], "name": m["name"]}
    if layout in ("auto", "canvas"):
        m = _CANVAS.match(name)
        if m:
            return {"student_id": _with_id(m["login"], m["uid"]), "file_id": m["file"], "lms": "canvas",
                    "lms_id": m["uid"], "name": m["login"]}
    return None


def ids_in_export(archive: Path, assignment: str, layout: str = "auto") -> list[lms.LmsId]:
    """The LMS ids in a Canvas or Moodle zip export, one per student, as ``attnlab collect`` reads
    them (:func:`lms_identity`), for :func:`attnlab.grading.host.lms.remember`. Files of no LMS layout
    give none."""
    found: dict[str, lms.LmsId] = {}
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            if name.endswith("/") or "__MACOSX" in name:
                continue
            ident = lms_identity(f"export/{name}", layout)
            if ident:
                found.setdefault(ident["student_id"], lms.LmsId(assignment, ident["student_id"], ident["lms"],
                                                                ident["lms_id"], ident["name"]))
    return sorted(found.values(), key=lambda i: i.student_id)


def parse(rel_path: str, layout: str = "auto") -> dict | None:
    """``{"student_id", "file_id"}`` from a file's path inside the extracted export, or None.

    ``rel_path`` starts with the folder nbgrader extracted the archive into.
    """
    if layout != "folders":
        found = lms_identity(rel_path, layout)
        if found or layout != "auto":
            return {k: found[k] for k in ("student_id", "file_id")} if found else None
    *dirs, name = rel_path.replace(os.sep, "/").split("/")
    # folders: the outermost folder below the archive's own that is not a generic name
    for d in dirs[1:]:
        if d.lower() not in _SKIP_DIRS and not d.startswith("."):
            return {"student_id": slug(d), "file_id": name}
    return None


#: Marks the collector's log line for each file it leaves out.
LEFT_OUT = "attnlab-left-out"


class LmsCollector(FileNameCollectorPlugin):
    """nbgrader's file-name collector, reading LMS export layouts (see the module's docstring)."""

    layout = Enum(["auto", "canvas", "moodle", "folders"], default_value="auto",
                  help="How the export names each student's files").tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen: dict[tuple[str, str], int] = {}

    def _left_out(self, path: str, why: str) -> None:
        # one line per file in nbgrader's log; collect_zip reads them back (LEFT_OUT)
        self.log.warning("%s %s", LEFT_OUT, json.dumps([path, why], ensure_ascii=False))

    def collect(self, submitted_file: str):
        app = self.parent
        base = app._format_collect_path(app.extracted_directory) if app is not None else os.path.dirname(submitted_file)
        rel = os.path.relpath(submitted_file, base)
        ext = os.path.splitext(submitted_file)[1]
        if "__MACOSX" in submitted_file or ".ipynb_checkpoints" in submitted_file:
            self._left_out(rel, "macOS or Jupyter metadata, not a submission")
            return None
        if ext not in self.valid_ext:
            self._left_out(rel, f"not a notebook ({ext or 'no extension'})")
            return None
        if self.named_regexp:
            info = super().collect(submitted_file)
            if not info:
                self._left_out(rel, "--regexp does not match its path")
        else:
            info = parse(rel, self.layout)
            if info is None:
                self._left_out(rel, f"no student found in its path (layout {self.layout})")
        if not info:
            return None
        # nbgrader fails the whole collection on two files with one name and no timestamps:
        # keep both, the second as "X (2).ipynb" (normalize_submission sorts them out and reports it)
        key = (info["student_id"], info["file_id"])
        n = self._seen.get(key, 0) + 1
        self._seen[key] = n
        if n > 1:
            stem, ext = os.path.splitext(info["file_id"])
            info = {**info, "file_id": f"{stem} ({n}){ext}"}
        return info


def collect_zip(course: Course, archive: Path, layout: str = "auto", regexp: str | None = None,
                timeout: float = 1800) -> tuple[dict[str, dict[str, list[str]]], list[tuple[str, str]]]:
    """Collect an LMS export into ``submitted/`` with ``nbgrader zip_collect``; normalise each folder.

    Earlier archives in ``downloaded/attention_kernels/archive/`` are removed first, so the folder
    holds exactly this export. Returns (student -> notes of :func:`.submissions.normalize_submission`,
    [(file in the export, why it was left out)]).

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
    args = ["zip_collect", course.assignment, "--force", "--collector=attnlab.grading.host.collect.LmsCollector",
            f"--LmsCollector.layout={layout}"]
    if regexp:
        args.append(f"--LmsCollector.named_regexp={regexp}")
    proc = course.nbgrader(*args, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader zip_collect failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    collected = _collected_students(proc.stdout + proc.stderr, course) or sorted(set(_students(course)) - before)
    if not regexp:  # the LMS ids, for the grades' way back (`attnlab export --canvas/--moodle`)
        ids = [i for i in ids_in_export(archive, course.assignment, layout) if i.student_id in collected]
        if ids:
            lms.remember(course.root, ids)
    names = course.notebook_names()
    notes = {s: normalize_submission(course.submitted / s / course.assignment, names) for s in collected}
    return notes, left_out(proc.stdout + proc.stderr)


def left_out(log: str) -> list[tuple[str, str]]:
    """(path, reason) of every file :class:`LmsCollector` left out, from nbgrader's log."""
    found = []
    for m in re.finditer(re.escape(LEFT_OUT) + r" (\[.*\])\s*$", log, re.MULTILINE):
        path, why = json.loads(m.group(1))
        found.append((path, why))
    return found


def _students(course: Course) -> list[str]:
    if not course.submitted.is_dir():
        return []
    return sorted(p.name for p in course.submitted.iterdir() if (p / course.assignment).is_dir())


def _collected_students(log: str, course: Course) -> list[str]:
    """Students nbgrader copied files for in this run (from its "Copying to:" log lines)."""
    root = str(course.submitted.resolve())
    found = re.findall(re.escape(root) + r"/([^/\s]+)/" + re.escape(course.assignment) + "/", log)
    return sorted(set(found))

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

The export is unpacked by :class:`BoundedExtractor` (nbgrader's extractor with a budget): an archive
nested in the export is unpacked too, as nbgrader does, but every byte written and every member, at
any depth, draws on one budget (:func:`extract_bounded`), so a zip bomb in one student's upload stops
with an error naming it instead of filling the disk.

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

import tarfile

from nbgrader.plugins.zipcollect import ExtractorPlugin, FileNameCollectorPlugin
from traitlets import Enum, Int

from ..course import ASSIGNMENTS, Course
from . import lms

_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_?$")
_CANVAS = re.compile(r"^(?P<login>[^_/]+?)(?:_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_(?P<file>.+)$")
#: What each layout reads, for the message on a file it cannot place.
_EXPECTED = {
    "canvas": "Canvas's <login>[_LATE]_<user id>_<submission id>_<file>, the login without '_'",
    "moodle": "Moodle's folder <Full Name>_<participant id>_assignsubmission_file_",
    "folders": "a folder per student, <student>/<file>",
}
_EXPECTED["auto"] = "; or ".join(_EXPECTED.values())
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


# ------------------------------------------------------------------------------ bounded extraction
#: The default budget of one export: bytes written, members (files and folders), nesting depth.
MAX_BYTES, MAX_MEMBERS, MAX_DEPTH = 512 * 2**20, 20000, 4
_CHUNK = 2**20


class ExtractionLimit(RuntimeError):
    """An archive of the export would unpack past the extraction budget (a zip bomb, or an export too
    large for one run): the message names the archive, the member and the limit."""


class _Budget:
    def __init__(self, max_bytes: int, max_members: int, max_depth: int) -> None:
        self.max_bytes, self.max_members, self.max_depth = max_bytes, max_members, max_depth
        self.bytes = self.members = 0

    def member(self, archive: str, name: str) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise ExtractionLimit(f"{archive}: more than {self.max_members} members in the export (at {name}); "
                                  f"the extraction budget is {self.max_members} members, nested archives included")

    def spend(self, archive: str, name: str, n: int) -> None:
        self.bytes += n
        if self.bytes > self.max_bytes:
            raise ExtractionLimit(f"{archive}: unpacking {name} passes {self.max_bytes / 2**20:g} MiB uncompressed "
                                  f"(the extraction budget of the whole export, nested archives included): a zip "
                                  f"bomb, or an export to unpack with a larger --BoundedExtractor.max_bytes")


def _safe_target(dest: Path, name: str) -> Path | None:
    """Where member ``name`` goes below ``dest``; None for an absolute path or one climbing out (``..``)."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts or name.startswith("/") or ":" in parts[0]:
        return None
    return dest.joinpath(*parts)


def _copy(src, target: Path, budget: _Budget, archive: str, name: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        while True:  # the bytes actually read, not the sizes the archive's headers claim
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            budget.spend(archive, name, len(chunk))
            out.write(chunk)


def _archive_stem(path: Path) -> str:
    stem = path.name[:-len(path.suffix)] if path.suffix else path.name
    return stem[:-4] if stem.endswith(".tar") else stem


def _unpack(archive: Path, dest: Path, budget: _Budget, depth: int, zip_ext, label: str) -> None:
    if depth > budget.max_depth:
        raise ExtractionLimit(f"{label}: archives nested more than {budget.max_depth} deep (the extraction budget's "
                              f"depth)")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                budget.member(label, info.filename)
                target = _safe_target(dest, info.filename)
                if target is None:
                    continue
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                with z.open(info) as src:
                    _copy(src, target, budget, label, info.filename)
                written.append(target)
    else:
        try:
            t = tarfile.open(archive)
        except tarfile.TarError:
            raise RuntimeError(f"{label}: not a zip or tar archive") from None
        with t:
            for info in t:
                budget.member(label, info.name)
                target = _safe_target(dest, info.name)
                if target is None or not (info.isfile() or info.isdir()):  # no links, devices, fifos
                    continue
                if info.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                _copy(t.extractfile(info), target, budget, label, info.name)
                written.append(target)
    for path in written:  # nested archives: into a folder of their own name beside them, as nbgrader does
        if path.suffix in zip_ext:
            _unpack(path, path.parent / _archive_stem(path), budget, depth + 1, zip_ext,
                    f"{label} > {path.relative_to(dest)}")


def extract_bounded(archive, dest, *, max_bytes: int = MAX_BYTES, max_members: int = MAX_MEMBERS,
                    max_depth: int = MAX_DEPTH, zip_ext=(".zip", ".gz")) -> None:
    """Unpack ``archive`` (zip, or tar, gzipped or not) into ``dest/<its name>/``, and every archive inside it
    into a folder of its own name beside it (nbgrader's ``unzip(tree=True)`` layout), under one budget:
    at most ``max_bytes`` written (counted as they are read, whatever the headers claim) and
    ``max_members`` members, over all archives, at most ``max_depth`` archives deep. Members with
    absolute paths or ``..``, and tar links, are skipped.

    Raises:
        ExtractionLimit: the budget ran out; the message names the archive (outermost first, ``>`` per
            level), the member and the limit. What was unpacked so far stays (the caller removes it).
    """
    archive, dest = Path(archive), Path(dest)
    _unpack(archive, dest / _archive_stem(archive), _Budget(max_bytes, max_members, max_depth), 0, tuple(zip_ext),
            archive.name)


class BoundedExtractor(ExtractorPlugin):
    """nbgrader's extractor plugin with :func:`extract_bounded`: one budget for the whole export."""

    max_bytes = Int(MAX_BYTES, help="Most bytes the export may unpack to, nested archives included").tag(config=True)
    max_members = Int(MAX_MEMBERS, help="Most members over every archive of the export").tag(config=True)
    max_depth = Int(MAX_DEPTH, help="Most levels of archives inside archives").tag(config=True)

    def extract(self, archive_path: str, extracted_path: str) -> None:
        budget = dict(max_bytes=self.max_bytes, max_members=self.max_members, max_depth=self.max_depth)
        for root, _, files in os.walk(archive_path):
            extract_to = Path(extracted_path) / os.path.relpath(root, archive_path)
            extract_to.mkdir(parents=True, exist_ok=True)
            for name in files:
                path = Path(root) / name
                if path.suffix in self.zip_ext:
                    self.log.info("Extracting from: %s (bounded)", path)
                    extract_bounded(path, extract_to, zip_ext=tuple(self.zip_ext), **budget)
                else:
                    shutil.copy(path, extract_to / name)


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
                self._left_out(rel, f"no student found in its path (layout {self.layout}; expected {_EXPECTED[self.layout]})")
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
        ExtractionLimit: the export unpacks past the extraction budget (:func:`extract_bounded`).
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
            "--extractor=attnlab.grading.host.collect.BoundedExtractor", f"--LmsCollector.layout={layout}"]
    if regexp:
        args.append(f"--LmsCollector.named_regexp={regexp}")
    proc = course.nbgrader(*args, timeout=timeout, check=False)
    if proc.returncode != 0:
        limit = re.search(r"ExtractionLimit: (.*)", proc.stdout + proc.stderr)
        if limit:
            raise ExtractionLimit(limit.group(1))
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

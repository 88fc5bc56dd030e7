"""Submission folders as learners really hand them in: renamed, nested, with extra files.

nbgrader grades ``submitted/<student>/<assignment>/<notebook>.ipynb`` and silently skips any other
name. Learners rename notebooks without meaning to: a browser saves a second download as
``02_flash_forward (1).ipynb``, Google Drive makes ``Copy of 02_flash_forward.ipynb``, Jupyter's
"Duplicate" makes ``02_flash_forward-Copy1.ipynb``, Canvas appends ``-1`` to a resubmission, and
some zip a whole folder. :func:`normalize_submission` moves such a file to the name nbgrader
expects when that name is missing, and records every move and every file it ignored, so the
report can say what happened. It never overwrites a correctly named notebook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

#: Written into a submission folder: the moves already made (so re-running keeps the notes).
NOTES_FILE = ".attnlab-submission.json"
#: Key of the notes that concern the submission as a whole rather than one notebook.
WHOLE = "*"

_DECORATIONS = (
    re.compile(r"^copy(?:\s*\(\d+\))?\s+of\s+", re.IGNORECASE),                  # Copy of X, Copy (2) of X
    re.compile(r"(?:\s*\(\d+\)|-copy\d*|\s*-\s*copy(?:\s*\(\d+\))?|\s+copy(?:\s*\d+)?|-\d+)$",
               re.IGNORECASE),                                                      # X (1), X-Copy1, X - Copy, X-1
)


def canonical(filename: str) -> str:
    """The notebook name a file name stands for: decorations removed, lower case, separators as ``_``.

    >>> canonical("Copy of 02_flash_forward (1).ipynb")
    '02_flash_forward'
    """
    stem = filename
    while stem.lower().endswith(".ipynb"):
        stem = stem[: -len(".ipynb")]
    stem = stem.strip()
    while True:
        old = stem
        for pattern in _DECORATIONS:
            stem = pattern.sub("", stem).strip()
        if stem == old:
            break
    return re.sub(r"[\s\-]+", "_", stem).lower()


def _notebooks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.ipynb")
                  if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__MACOSX" not in p.parts)


def load_notes(folder: Path) -> dict[str, list[str]]:
    path = folder / NOTES_FILE
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                return {str(k): [str(n) for n in v] for k, v in data.items() if isinstance(v, list)}
        except ValueError:
            pass
    return {}


def normalize_submission(folder: Path, names: list[str]) -> dict[str, list[str]]:
    """Give misnamed notebooks in ``folder`` the assignment's names; notes per notebook name.

    For each notebook ``X`` of ``names`` that is not in ``folder``: a file whose name is a
    decorated ``X`` ("Copy of X", "X (1)", "X-Copy1", "X - Copy", "X-1"; any case, spaces or
    dashes for underscores), or failing that one whose name contains ``X`` ("jdoe_X_final"), or
    ``X.ipynb`` in a subfolder, is moved to ``folder/X.ipynb``; several candidates: the newest.
    Notebooks that match nothing are reported under :data:`WHOLE` and left alone (nbgrader skips
    them).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    notes = load_notes(folder)
    files = _notebooks(folder)
    top = {p.stem: p for p in files if p.parent == folder}
    used: set[Path] = {p for n, p in top.items() if n in names}
    changed = False
    for name in names:
        if name in top:
            continue
        free = [p for p in files if p not in used]
        exact = [p for p in free if canonical(p.name) == name.lower()]
        loose = [p for p in free if name.lower() in canonical(p.name)
                 and not any(n.lower() in canonical(p.name) for n in names if n != name)]
        candidates = exact or loose
        if not candidates:
            continue
        chosen = max(candidates, key=lambda p: (p.stat().st_mtime, p.name))
        rel = chosen.relative_to(folder).as_posix()
        shutil.move(str(chosen), str(folder / f"{name}.ipynb"))
        used.add(folder / f"{name}.ipynb")
        files = [folder / f"{name}.ipynb" if p == chosen else p for p in files]
        msg = f"submitted as {rel!r}; graded as {name}.ipynb"
        others = [p.relative_to(folder).as_posix() for p in candidates if p != chosen]
        if others:
            msg += f" (the newest of {len(candidates)}; also found {', '.join(map(repr, others))})"
        notes.setdefault(name, []).append(msg)
        used.update(candidates)
        changed = True
    mentioned = " ".join(n for lines in notes.values() for n in lines)
    for p in files:
        if p in used or (p.parent == folder and p.stem in names):
            continue
        rel = p.relative_to(folder).as_posix()
        if repr(rel) in mentioned:  # already reported (an earlier run)
            continue
        copy_of = next((n for n in names if canonical(p.name) == n.lower()), None)
        if copy_of:
            msg = f"{rel!r} looks like a copy of {copy_of}.ipynb, which was submitted too: graded {copy_of}.ipynb, ignored the copy"
        else:
            msg = f"{rel!r} is not one of the assignment's notebooks: ignored"
        if msg not in notes.get(WHOLE, []):
            notes.setdefault(WHOLE, []).append(msg)
            changed = True
    if changed:
        (folder / NOTES_FILE).write_text(json.dumps(notes, indent=1))
    return notes


def not_plain_files(folder: Path) -> list[str]:
    """What in a submission folder is neither a regular file nor a folder: links (to a file or folder
    anywhere), hard links (a file with another name elsewhere), FIFOs, sockets, device nodes; the
    folder itself or its student folder when they are links.

    nbgrader copies a submission's files as root would read them, following links, and the grader
    then hands them to the notebook's kernel: a link to ``/etc/shadow`` or to the instructor's
    ``source/`` notebook would be read on the student's behalf (red team, 2026-12-02). Nothing a
    student hands in through nbgrader's exchange or an LMS archive is a link, so one is refused,
    not followed. Paths are relative to ``folder``; empty when there is nothing of the kind.
    """
    folder = Path(folder)
    found = [p.name + "/" for p in (folder.parent, folder) if p.is_symlink()]
    if found or not folder.is_dir():
        return found
    for top, dirs, files in os.walk(folder):  # never into a linked folder
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:  # another name of a file anywhere on this disk
                found.append(f"{os.path.relpath(path, folder)} (a hard link)")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                kind = "a link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                found.append(f"{os.path.relpath(path, folder)} ({kind})")
    return sorted(found)

"""Repair a submitted notebook's structure before nbgrader checks it, and say what was repaired.

nbgrader 0.9.6 stops grading a notebook (and, in a batch, every notebook after it) on damage that
learners' editors produce routinely:

- a copied or split test cell: two cells with one ``grade_id`` (nbgrader blanks the copy's
  metadata, then fails on it with a misleading "old version of the nbgrader metadata" error, or a
  ``KeyError`` when missing cells are restored);
- nbgrader metadata stripped by another editor, or a deleted cell whose predecessor is not a graded
  cell (``OverwriteCells.add_missing_cells`` fails with ``KeyError``);
- metadata edited by hand (``locked`` switched off, ``points`` changed, an unknown ``grade_id``).

:func:`repair` fixes these against the release notebook (what the learner started from), before
nbgrader's own sanitising steps restore read-only cells and hidden tests from the gradebook:

1. format: a notebook saved by Google Colab or an older Jupyter (nbformat 4.0-4.4, no cell ids)
   gets cell ids;
2. every known cell's nbgrader metadata is reset to the release's; metadata naming an unknown cell
   is removed (the cell runs as an ordinary cell);
3. duplicate ``grade_id``: one cell keeps it (the first one after the cell that precedes it in
   the release); extra copies of a test cell are dropped (the kept one is restored in full),
   extra copies of other cells stay as ordinary cells;
4. cells whose metadata is missing are matched back to the release by content (an alignment of
   the two cell sequences; prose and read-only cells match exactly, solution cells by position
   and similarity); read-only and test cells still missing are re-inserted where they belong,
   missing written-answer cells as their empty stub; a missing solution code cell is reported;
5. the graded functions are checked: renamed (no cell defines it) or defined in several cells;
6. learner code is scanned for attempts to reach into the grader or the tests' references
   (:mod:`.scan`, not a repair), reported for the instructor (points are never changed by the scan).

Everything it did is returned as one-line notes, which the grader reports to the instructor and
shows the learner.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import uuid

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from ...core.review import PREFIX as REVIEW
from .scan import scan  # also importable from here, as before

_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
_DEF = re.compile(r"^def\s+(\w+)\s*\(", re.MULTILINE)


def _meta(cell) -> dict:
    meta = cell.metadata.get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _gid(cell) -> str | None:
    return _meta(cell).get("grade_id")


def _label(cell, index: int) -> str:
    gid = _gid(cell)
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


def _is_test(meta: dict) -> bool:
    return bool(meta.get("grade")) and not meta.get("solution")


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _new_id(used: set[str]) -> str:
    while True:
        cid = uuid.uuid4().hex[:12]
        if cid not in used:
            used.add(cid)
            return cid


# ---------------------------------------------------------------------------------------- steps
def _fix_format(nb, notes: list[str]) -> None:
    missing = sum(1 for c in nb.cells if "id" not in c)
    if nb.get("nbformat_minor", 0) < 5 or missing:
        notes.append(f"the notebook was saved as nbformat 4.{nb.get('nbformat_minor', 0)} without cell ids "
                     f"(Google Colab or an older Jupyter); upgraded to 4.5 for grading")
    nb.nbformat, nb.nbformat_minor = 4, max(5, nb.get("nbformat_minor", 0))
    used: set[str] = set()
    for cell in nb.cells:
        cid = cell.get("id")
        if not isinstance(cid, str) or not _ID.match(cid) or cid in used:
            cell["id"] = _new_id(used)
        else:
            used.add(cid)


def _reset_metadata(nb, release_meta: dict[str, dict], release_types: dict[str, str], notes: list[str]) -> None:
    for i, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.metadata:
            continue
        meta = cell.metadata["nbgrader"]
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if gid not in release_meta:
            del cell.metadata["nbgrader"]
            if gid:
                notes.append(f"cell {i + 1} carried nbgrader metadata for an unknown cell {gid!r} (edited or "
                             f"copied from elsewhere); it was run as an ordinary cell")
            elif meta:
                notes.append(f"cell {i + 1} had incomplete nbgrader metadata; it was run as an ordinary cell")
            continue
        want = release_meta[gid]
        changed = [k for k in ("grade", "solution", "locked", "points", "task")
                   if meta.get(k, False) != want.get(k, False)]
        if changed:
            notes.append(f"the nbgrader metadata of cell {gid!r} had been edited ({', '.join(changed)}); "
                         f"reset to the course's")
        cell.metadata["nbgrader"] = copy.deepcopy(want)
        if cell.cell_type != release_types[gid]:
            notes.append(f"cell {gid!r} had been changed from {release_types[gid]} to {cell.cell_type}; "
                         f"changed back")


def _dedupe(nb, release_order: list[str], notes: list[str]) -> None:
    where: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        if _gid(cell):
            where.setdefault(_gid(cell), []).append(i)
    drop: set[int] = set()
    for gid, positions in where.items():
        if len(positions) < 2:
            continue
        # keep the first copy after the cell that precedes this one in the release
        anchor = -1
        k = release_order.index(gid) if gid in release_order else 0
        for prev in reversed(release_order[:k]):
            if prev in where:
                anchor = where[prev][0]
                break
        keep = next((p for p in positions if p > anchor), positions[0])
        test = _is_test(_meta(nb.cells[keep]))
        for p in positions:
            if p == keep:
                continue
            if test:
                drop.add(p)
            else:
                del nb.cells[p].metadata["nbgrader"]
        what = "the extra copies were dropped" if test else "the other copies were run as ordinary cells"
        notes.append(f"cell {gid!r} appeared {len(positions)} times (copied or split); graded the one at "
                     f"position {keep + 1}, {what}")
    if drop:
        nb.cells = [c for i, c in enumerate(nb.cells) if i not in drop]


def _key(cell) -> tuple[str, str]:
    return cell.cell_type, _norm(cell.source)


def align(release_cells, cells) -> dict[int, int]:
    """Release cell index -> submission cell index, for cells matched by content.

    Unchanged cells (prose, read-only code) match exactly; in between, release cells with nbgrader
    metadata are paired with submission cells of the same type: first by similarity (a solution
    cell keeps its ``def`` line), then, where the counts agree, in order.
    """
    sm = difflib.SequenceMatcher(None, [_key(c) for c in release_cells], [_key(c) for c in cells], autojunk=False)
    mapping: dict[int, int] = {}
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            mapping.update({i1 + k: j1 + k for k in range(i2 - i1)})
        elif op == "replace":
            wanted = [i for i in range(i1, i2) if _meta(release_cells[i])]
            free = list(range(j1, j2))
            for i in wanted:
                rc = release_cells[i]
                names = _DEF.findall(rc.source)
                best, score = None, 0.0
                for j in free:
                    c = cells[j]
                    if c.cell_type != rc.cell_type:
                        continue
                    s = difflib.SequenceMatcher(None, _norm(rc.source), _norm(c.source), autojunk=False).ratio()
                    if names and all(re.search(rf"^\s*def\s+{re.escape(n)}\s*\(", c.source, re.MULTILINE)
                                     for n in names):
                        s += 1.0
                    if s > score:
                        best, score = j, s
                threshold = 0.6 if _meta(rc).get("locked") else 0.35
                if best is not None and score >= threshold:
                    mapping[i] = best
                    free.remove(best)
            rest = [i for i in wanted if i not in mapping]
            for kind in {release_cells[i].cell_type for i in rest}:
                ri = [i for i in rest if release_cells[i].cell_type == kind]
                sj = [j for j in free if cells[j].cell_type == kind
                      and _key(cells[j]) not in {_key(release_cells[x]) for x in range(i1, i2)}]
                if len(ri) == len(sj):
                    mapping.update(zip(ri, sj))
    return mapping


def _restore_missing(nb, release, notes: list[str]) -> None:
    present = {_gid(c) for c in nb.cells if _gid(c)}
    rel_cells = release.cells
    missing = [i for i, c in enumerate(rel_cells) if _gid(c) and _gid(c) not in present]
    if not missing:
        return
    mapping = align(rel_cells, nb.cells)
    matched = []
    for i in missing:
        j = mapping.get(i)
        if j is not None and "nbgrader" not in nb.cells[j].metadata and nb.cells[j].cell_type == rel_cells[i].cell_type:
            nb.cells[j].metadata["nbgrader"] = copy.deepcopy(_meta(rel_cells[i]))
            matched.append(_gid(rel_cells[i]))
    if matched:
        notes.append(f"nbgrader metadata was missing from {len(matched)} cells (another editor may have "
                     f"stripped it); matched them back by content: {', '.join(matched)}")
    present = {_gid(c) for c in nb.cells if _gid(c)}
    used = {c.get("id") for c in nb.cells}
    restored, stubs, lost = [], [], []
    for i in missing:
        rc = rel_cells[i]
        gid, meta = _gid(rc), _meta(rc)
        if gid in present:
            continue
        if rc.cell_type == "code" and meta.get("solution"):
            lost.append(gid)
            continue
        # after the submission cell matched to the nearest release cell before it
        pos = 0
        for prev in range(i - 1, -1, -1):
            if prev in mapping:
                pos = mapping[prev] + 1
                break
        cell = copy.deepcopy(rc)
        cell["id"] = _new_id(used)
        nb.cells.insert(pos, cell)
        mapping = {r: (s + 1 if s >= pos else s) for r, s in mapping.items()}
        mapping[i] = pos
        present.add(gid)
        (stubs if meta.get("solution") else restored).append(gid)
    if restored:
        notes.append(f"deleted read-only or test cells were restored from the course: {', '.join(restored)}")
    if stubs:
        notes.append(f"written-answer cells were missing and were put back empty: {', '.join(stubs)}")
    if lost:
        notes.append(f"solution cells are missing from the notebook: {', '.join(lost)} (their tests pass "
                     f"only if another cell defines what they test)")


def _check_functions(nb, release, notes: list[str]) -> None:
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for rc in release.cells:
        meta = _meta(rc)
        if rc.cell_type != "code" or not meta.get("solution"):
            continue
        for name in _DEF.findall(rc.source):
            pattern = re.compile(rf"^(?:def\s+{re.escape(name)}\s*\(|{re.escape(name)}\s*=[^=])", re.MULTILINE)
            defining = [_label(c, i) for i, c in code if pattern.search(c.source)]
            if not defining:
                own = next((c for c in nb.cells if _gid(c) == meta["grade_id"]), None)
                others = _DEF.findall(own.source) if own is not None else []
                hint = f" (the solution cell defines {', '.join(n + '()' for n in others)})" if others else ""
                notes.append(f"no cell defines {name}(){hint}: the tests that call it fail with NameError")
            elif len(defining) > 1:
                notes.append(f"{name}() is defined in {len(defining)} cells ({', '.join(defining)}); each test "
                             f"uses the definition that ran last before it")


def clean_answers(nb, notes: list[str], release=None) -> None:
    """Written answers (and any other learner Markdown, and raw cells) whose rendering holds script or
    takes over one of formgrader's score boxes are replaced by a cleaned rendering: formgrader shows
    them in the instructor's Jupyter page (see untrusted_html). The reserved ids are those of the
    release's cells and the submission's (a deleted cell keeps its boxes in the gradebook)."""
    from .untrusted_html import FORMGRADER_CLASSES, clean_markdown, clean_raw, reserved_ids

    reserved = reserved_ids(nb) | (reserved_ids(release) if release is not None else frozenset())
    # nbgrader puts back the source of the release's read-only cells; any other cell is the learner's,
    # whatever its metadata says
    restored = {_gid(c) for c in release.cells if _gid(c) and _meta(c).get("locked")} if release is not None else set()
    for i, cell in enumerate(nb.cells):
        tags = cell.get("metadata", {}).get("tags")
        if isinstance(tags, list):  # the template writes tags into the cell's class: no formgrader class
            kept = [t for t in tags if isinstance(t, str) and not set(t.split()) & FORMGRADER_CLASSES
                    and t == t.strip() and " " not in t]
            if kept != tags:
                cell.metadata["tags"] = kept
                notes.append(f"{REVIEW}{_label(cell, i)} had tags naming formgrader's page elements; they were dropped")
        if cell.cell_type not in ("markdown", "raw") or (_meta(cell).get("locked") and _gid(cell) in restored):
            continue
        if cell.cell_type == "markdown":
            cleaned = clean_markdown(cell.source, reserved, attachments=cell.get("attachments"))
        else:
            cleaned = clean_raw(cell.source, reserved)
        if cleaned is not None:
            cell.source = cleaned
            notes.append(f"{REVIEW}{_label(cell, i)} held HTML, a link that could run script, or an element id "
                         f"of formgrader's score boxes, where the instructor reads it; it is graded as a "
                         f"cleaned copy")


def repair(nb, release) -> list[str]:
    """Repair ``nb`` (a submitted notebook, in place) against ``release``; one-line notes of what was done.

    ``release`` is the student version of the same notebook (None: only the format is fixed).
    """
    notes: list[str] = []
    _fix_format(nb, notes)
    if release is None:
        notes.append("the release notebook was not found: cells could not be checked against it")
        clean_answers(nb, notes)
        return notes
    release_meta = {_gid(c): _meta(c) for c in release.cells if _gid(c)}
    release_order = [_gid(c) for c in release.cells if _gid(c)]
    _reset_metadata(nb, release_meta, {_gid(c): c.cell_type for c in release.cells if _gid(c)}, notes)
    _dedupe(nb, release_order, notes)
    _restore_missing(nb, release, notes)
    _check_functions(nb, release, notes)
    clean_answers(nb, notes, release)
    flagged = scan(nb)
    if flagged:
        # for a person: the report lists it under "Needs review" (attnlab.core.outcome's review kind)
        notes.append(f"{REVIEW}flagged by the static scan: code that reaches into the tests or the grader (the "
                     "grader undoes such changes before each test): " + "; ".join(flagged[:8])
                     + (f"; and {len(flagged) - 8} more" if len(flagged) > 8 else ""))
    return notes


class RepairSubmission(NbGraderPreprocessor):
    """The first of nbgrader's sanitising preprocessors at autograde: :func:`repair` against release/."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        release = None
        try:
            from nbgrader.coursedir import CourseDirectory

            coursedir = CourseDirectory(config=self.config)
            for step in (coursedir.release_directory, coursedir.source_directory):
                path = os.path.join(coursedir.format_path(step, ".", info.get("assignment", "")),
                                    f"{info.get('notebook', '')}.ipynb")
                if os.path.isfile(path):
                    release = nbformat.read(path, as_version=4)
                    break
        except Exception as exc:  # noqa: BLE001
            self.log.warning("attnlab: could not read the release notebook: %s", exc)
        nb.metadata["attnlab"] = {"notes": []}  # a learner's own "notes" are not the grader's
        notes = repair(nb, release)
        for note in notes:
            self.log.warning("attnlab: %s", note)
        nb.metadata["attnlab"]["notes"] = notes
        return nb, resources

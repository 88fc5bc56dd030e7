"""Outcomes as data: what a check or the grader concluded, as a kind a program reads and a text people read.

Issue 32, item 3. A grading decision (list a note under "needs review", re-grade a notebook alone)
reads the :class:`Kind`, or an error's type, never the words the course writes: rewording a message for
people changes no grade. (What the host reads of other tools' output, nbgrader's log and a library's fixed
error text, is listed where it is read: :mod:`attnlab.grading.host.evaluate`, :mod:`~attnlab.grading.host.contention`.)

Who sets and who reads each kind:

- ``REVIEW``: set by a check that cannot rule something out (:func:`attnlab.core.review.flag`) and by the
  grader's own steps (the executor, the repair scan, the kernel guard); read by the worker's feedback cell
  and the host's report, which list these notes apart for a person.
- ``CONTENDED``: a notebook ran past a limit or lost its kernel, which a busy machine can cause; set where
  the limit is met: a check's call raises :class:`CallTimeoutError` (``checks.time_limit``; its name reaches the
  host as the cell output's ``ename``, :data:`CONTENDED_ERRORS`), the executor writes a ``CONTENDED`` note
  for a cell past its limit, a dead kernel or a spent budget; read by the host when it reads a graded
  notebook back (:mod:`attnlab.grading.host.evaluate` sets ``NotebookResult.contention``), which then
  re-grades such a notebook alone before it counts (:mod:`attnlab.grading.host.contention`).
- ``INFO``: any other note of the grader (a repair, a dropped output); shown, decides nothing.

Notes travel as JSON from the kernel to the worker to the host (the notebook's ``attnlab.notes``
metadata). :meth:`Note.to_json` writes ``{"kind": ..., "text": ...}``; :func:`notes_of` reads those and
the plain strings older notebooks and channels carry (a plain string is classified once, here, by the
review prefix it has always had; nothing else in the package reads that prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Iterable

#: Prefix the text of every review note starts with, in cell output and in the grader's notes (shown to
#: people; :func:`notes_of` reads it only to classify a plain-string note).
REVIEW_PREFIX = "needs review: "


class Kind(StrEnum):
    """What a note means to the grader (module docstring: who sets and who reads each)."""

    REVIEW = "review"
    CONTENDED = "contended"
    INFO = "info"


class Status(StrEnum):
    """A graded notebook's outcome, as the host records it (the same strings the reports print)."""

    GRADED = "graded"    # nbgrader finished and the grades were read
    MISSING = "missing"  # no submission: zero points
    FAILED = "failed"    # nbgrader did not finish (not graded)
    TIMEOUT = "timeout"  # grading ran past its limit and was stopped (not graded; re-graded alone)


@dataclass(frozen=True)
class Note:
    """One note: its :class:`Kind` (for the grader) and its text (for people, shown unchanged)."""

    kind: Kind
    text: str

    def to_json(self) -> dict[str, str]:
        return {"kind": str(self.kind), "text": self.text}

    @classmethod
    def from_json(cls, data: Any) -> "Note":
        """A note from its JSON form, or from a plain string (classified by the review prefix)."""
        if isinstance(data, Note):
            return data
        if isinstance(data, dict):
            try:
                kind = Kind(data.get("kind", Kind.INFO))
            except ValueError:  # a kind this grader does not know: a person decides, grading goes on
                kind = Kind.REVIEW
            return cls(kind, str(data.get("text", "")))
        text = str(data)
        return cls(Kind.REVIEW if text.startswith(REVIEW_PREFIX) else Kind.INFO, text)

    def __str__(self) -> str:
        return self.text


class CallTimeoutError(TimeoutError):
    """A call of learner code ran past a check's wall-clock limit (:func:`attnlab.checks.time_limit`) and
    was not on the CPU all along: it waited at times, which another worker's kernel can cause
    (:attr:`Kind.CONTENDED`)."""


class CPUBoundTimeoutError(TimeoutError):
    """A call of learner code ran past a check's wall-clock limit while on the CPU all along (at least
    90 % of the wall time, CUDA never started): other work did not slow it, and alone it would only time
    out again (:attr:`Kind.INFO`)."""


#: Ends the message of a :class:`CPUBoundTimeoutError` and of the executor's note for a cell that computed until
#: its limit: for people (the kind is carried by the class and the note, never read from this text).
RAN_ALL_ALONG = ": it was on the CPU all along, not waiting for other work"

#: The errors a busy machine can cause, by the name a cell output carries (``ename``): a check's call that
#: waited past its limit, and GPU memory taken (PyTorch's ``OutOfMemoryError``, raised by CUDA's caching
#: allocator; a host allocation that fails raises ``MemoryError`` or a ``RuntimeError``: the kernel's own
#: memory limit, not contended).
CONTENDED_ERRORS = frozenset({CallTimeoutError.__name__, "OutOfMemoryError"})


def contended_note(text: str) -> Note:
    """A note of :attr:`Kind.CONTENDED` with ``text`` (for people, unchanged)."""
    return Note(Kind.CONTENDED, text)


def review(reason: str) -> Note:
    """A review note for ``reason``; its text is ``"needs review: <reason>"`` as people have always read it."""
    return Note(Kind.REVIEW, REVIEW_PREFIX + reason)


def notes_of(items: Iterable[Any] | None) -> list[Note]:
    """The notes in ``items`` (JSON dicts, plain strings or :class:`Note`), in order; ``None`` gives none."""
    return [Note.from_json(item) for item in (items or ()) if isinstance(item, (str, dict, Note))]


def is_review(item: Any) -> bool:
    """Whether ``item`` (a note in any form notes take) is for a person to review."""
    return isinstance(item, (str, dict, Note)) and Note.from_json(item).kind is Kind.REVIEW


def split_reviews(items: Iterable[Any] | None) -> tuple[list[str], list[str]]:
    """The texts of ``items`` as (review notes, other notes), each in order."""
    notes = notes_of(items)
    return ([n.text for n in notes if n.kind is Kind.REVIEW], [n.text for n in notes if n.kind is not Kind.REVIEW])

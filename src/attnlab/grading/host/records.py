"""What grading one notebook gave, as the host records it: points, the reason for every loss, the notes.

Written by :mod:`.evaluate` (from the worker's graded notebook and the gradebook), read by
:mod:`.autograde`, :mod:`.contention`, :mod:`.reports` and the command line. ``status`` holds a
:class:`attnlab.core.outcome.Status` (a string: reports and JSON print the same words as before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...core.outcome import Status


@dataclass
class CellResult:
    grade_id: str
    points: float | None   # None: waits for manual grading
    max_points: float
    reason: str = ""       # why points were lost (empty when full marks or manual)
    error: str = ""        # the name of the error that failed the cell (its output's ename), if one did


@dataclass
class NotebookResult:
    student: str
    notebook: str
    status: str            # a Status: graded | missing | failed | timeout (failed, timeout: not graded)
    points: float = 0.0    # autograded points earned
    max_points: float = 0.0
    manual_max: float = 0.0  # points waiting for manual grading
    reason: str = ""
    seconds: float = 0.0
    cells: list[CellResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the grader noticed or repaired
    needs_review: list[str] = field(default_factory=list)  # "needs review: ..." notes from the checks
    gradebook: list[str] = field(default_factory=list)  # hand grading kept or reopened, outages waited out
    variant: str = ""  # whose variant the kernel had (attnlab.variants.describe)
    contention: str = ""  # what a busy machine may have caused (a note or reason, for people); "" when nothing

    def losses(self) -> list[str]:
        if self.status != Status.GRADED:
            return [self.reason]
        return [f"{c.grade_id} (-{c.max_points - (c.points or 0):g}): {c.reason}" for c in self.cells
                if c.points is not None and c.points < c.max_points]



#: Terminal escape sequences (CSI ``ESC [ ... final``, OSC ``ESC ] ... BEL/ST``, two-byte ``ESC x``) and
#: every other control character: learner text (an exception's message) reaches the instructor's terminal
#: through the report, where a red team's sequences moved the cursor, rewrote a row's points and hid
#: the lines after it.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")  # and bidi overrides


def printable(text: str) -> str:
    """``text`` on one line with no escape sequence or control character left (tabs kept)."""
    return _CONTROLS.sub(" ", _ESCAPES.sub("", text))


def without_escapes(text: str) -> str:
    """``text`` without its terminal escape sequences (control characters kept)."""
    return _ESCAPES.sub("", text)


def not_graded(results: list[NotebookResult]) -> list[NotebookResult]:
    """The notebooks that could not be graded (failed or timed out); missing ones count as graded 0."""
    return [r for r in results if r.status in (Status.FAILED, Status.TIMEOUT)]

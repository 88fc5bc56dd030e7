"""Whether a notebook graded beside others failed in a way another slot's kernel can cause.

Read by :mod:`.autograde` after the parallel pass: such a notebook is graded again alone, and that
result counts. The decision reads data, never the words of a message: a timeout by its
:class:`attnlab.core.outcome.Status`, the grader's notes by their :class:`~attnlab.core.outcome.Kind`,
a failed cell by its error's type name (:data:`attnlab.core.outcome.CONTENDED_ERRORS`), all gathered into
:attr:`.records.NotebookResult.contention` when the notebook is read back (:mod:`.evaluate`).
"""

from __future__ import annotations

from ...core.outcome import CONTENDED_ERRORS, Status
from .records import NotebookResult

#: Where no per-kernel task bound is in force (attnlab.grading.sandbox.tasks), a thread or process that could
#: not start may be another slot's doing (it filled the process table): Python's own error for it, by type,
#: and for the RuntimeError its fixed message (CPython's words, the one text read here). With the bound it is
#: the kernel's own limit speaking: nothing to grade again.
_NO_TASKS = ("BlockingIOError", ("RuntimeError", "can't start new thread"))


def error_contended(ename: str, reason: str = "") -> bool:
    """Whether a cell that failed with the error named ``ename`` (its message in ``reason``) may have been
    failed by a kernel in another slot: a check's call that waited past its limit, memory taken, or, where
    the kernels' tasks are not bounded, a thread or process that could not start."""
    if ename in CONTENDED_ERRORS:
        return True
    from ..sandbox.tasks import describe

    if describe()[0]:
        return False
    return ename == _NO_TASKS[0] or (ename == _NO_TASKS[1][0] and _NO_TASKS[1][1] in reason)


def contended(result: NotebookResult) -> bool:
    """Whether ``result`` failed (or lost a cell) in a way a kernel in another slot can cause."""
    return result.status == Status.TIMEOUT or bool(result.contention)


def contended_reason(result: NotebookResult) -> str:
    """What in ``result`` a kernel in another slot may have caused, for people (empty when nothing)."""
    return result.contention

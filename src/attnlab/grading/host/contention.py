"""Whether a notebook graded beside others failed in a way another slot's kernel can cause.

Read by :mod:`.autograde` after the parallel pass: such a notebook is graded again alone, and that
result counts. The decision reads data, never the words of the course's messages: a timeout by its
:class:`attnlab.core.outcome.Status`, the grader's notes by their :class:`~attnlab.core.outcome.Kind`,
a failed cell by its error's type name (:data:`attnlab.core.outcome.CONTENDED_ERRORS`, and for a library
error that has no type of its own, the library's fixed text: :func:`error_contended`), all gathered into
:attr:`.records.NotebookResult.contention` when the notebook is read back (:mod:`.evaluate`).
"""

from __future__ import annotations

from ...core.outcome import CONTENDED_ERRORS, Status
from .records import NotebookResult

#: Errors of the libraries that carry a busy machine's failure in their message only (their own fixed
#: text, not ours): (type name, text). A GPU filled by another slot's kernel: CUDA failing to start
#: (torch's ``AcceleratorError``) or Triton failing to load a compiled kernel.
_LIBRARY_OOM = (("AcceleratorError", "out of memory"), ("RuntimeError", "CUDA error: out of memory"),
                ("RuntimeError", "Triton Error [CUDA]: out of memory"))
#: Where no per-kernel task bound is in force (attnlab.grading.sandbox.tasks), a thread or process that could
#: not start may be another slot's doing (it filled the process table): Python's own errors for it, the
#: ``RuntimeError`` by CPython's fixed text. With the bound it is the kernel's own limit: nothing to grade again.
_NO_TASKS = (("BlockingIOError", ""), ("RuntimeError", "can't start new thread"))


def _named(ename: str, reason: str, known) -> bool:
    return any(ename == name and text in reason for name, text in known)


def error_contended(ename: str, reason: str = "") -> bool:
    """Whether a cell (or a grading run) that failed with the error named ``ename`` (its message in
    ``reason``) may have been failed by a kernel in another slot: a check's call that waited past its
    limit, GPU memory taken, or, where the kernels' tasks are not bounded, a thread or process that could
    not start."""
    if ename in CONTENDED_ERRORS or _named(ename, reason, _LIBRARY_OOM):
        return True
    from ..sandbox.tasks import describe

    return not describe()[0] and _named(ename, reason, _NO_TASKS)


def contended(result: NotebookResult) -> bool:
    """Whether ``result`` failed (or lost a cell) in a way a kernel in another slot can cause."""
    return result.status == Status.TIMEOUT or bool(result.contention)

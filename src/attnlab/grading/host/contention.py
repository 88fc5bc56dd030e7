"""Whether a notebook graded beside others failed in a way another slot's kernel can cause.

Read by :mod:`.autograde` after the parallel pass: such a notebook is graded again alone, and that
result counts. A timeout is known by its :class:`attnlab.core.outcome.Status`; a cell's error or a
grader's note is classified by :func:`kind_of`, the one place that still reads the words other
modules write (the kernel's and the checks' messages reach the host as cell output, not as data).
"""

from __future__ import annotations

import re

from ...core.outcome import Kind, Status
from .records import NotebookResult

#: What another slot's kernel can cause (CPU starved by its threads, GPU or host memory taken): a
#: timeout (the notebook's, a cell's, or a test's wall-clock limit on one call of learner code,
#: :func:`attnlab.checks.time_limit`), a dead or unresponsive kernel, an exhausted budget, an
#: out-of-memory error.
_CONTENDED = re.compile(r"ran past|did not finish within|kernel died|stopped responding|did not respond to an "
                        r"interrupt|used up its [\d.]+ s budget|grading worker process died|out of memory|"
                        r"OutOfMemoryError", re.IGNORECASE)
#: ... and, where no per-kernel task bound is in force (attnlab.grading.sandbox.tasks), a thread or process that
#: could not be started because another slot filled the process table. With the bound, that message
#: is the kernel's own limit speaking: nothing to grade again.
_NO_TASKS = re.compile(r"can't start new thread|Resource temporarily unavailable", re.IGNORECASE)


def kind_of(text: str) -> Kind:
    """:attr:`~attnlab.core.outcome.Kind.CONTENDED` for a reason or note that another slot's kernel can
    cause, else :attr:`~attnlab.core.outcome.Kind.INFO`. A call that timed out while running on the CPU
    all along (:data:`attnlab.checks.RAN_ALL_ALONG`) was not slowed by other work: graded again alone,
    it would only spend its time limit again."""
    from ...checks import RAN_ALL_ALONG
    from ..sandbox.tasks import describe

    if not describe()[0] and _NO_TASKS.search(text):
        return Kind.CONTENDED
    return Kind.CONTENDED if _CONTENDED.search(text) and RAN_ALL_ALONG not in text else Kind.INFO


def contended(result: NotebookResult) -> bool:
    """Whether ``result`` failed (or lost a cell) in a way a kernel in another slot can cause."""
    texts = [t for t in (result.reason, *result.notes, *(c.reason for c in result.cells)) if t]
    return result.status == Status.TIMEOUT or any(kind_of(t) is Kind.CONTENDED for t in texts)


def contended_reason(result: NotebookResult) -> str:
    """The first note or cell reason of a graded ``result`` that names such a failure (empty when none)."""
    return next((t for t in [*result.notes, *(c.reason for c in result.cells)] if t and _CONTENDED.search(t)), "")

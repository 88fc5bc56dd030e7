"""What a check cannot rule out goes to a person: "needs review: <why>", never a silent grade.

A check that sees something it cannot judge (a dispatcher override it could not undo, code that
reads its caller's frame, a result that is right by a method the notebook does not teach) calls
:func:`flag`. The reason is printed in the test cell's output (the learner sees it) and, while
autograding, handed to the grader through the guard's notes channel
(:func:`attnlab.grading.kernel.guard.drain`), so the report lists it under the student and notebook as
``needs review: <why>``.
"""

from __future__ import annotations

from .outcome import REVIEW_PREFIX, Kind, Note, review

#: Prefix of every review note, in cell output and in the grader's notes (:data:`attnlab.core.outcome.REVIEW_PREFIX`).
PREFIX = REVIEW_PREFIX


#: Where a note goes besides the cell's output: the grading guard's notes channel, connected by
#: :func:`attnlab.grading.kernel.guard.install` (the guard sits above the runtime, so it registers itself here).
_SINK = None


def connect(sink) -> None:
    """Send every later note to ``sink(text)`` too (the grading guard, while a notebook is autograded).
    The first sink stays: a later call (learner code's, say) changes nothing."""
    global _SINK
    if _SINK is None:
        _SINK = sink


def note(text: str) -> None:
    """Tell the learner and the grader ``text`` without asking a person to decide anything: printed to
    stdout and, while autograding, listed among the grader's notes (kind INFO) in the report and the
    feedback. It reaches the grader as a typed note (``{"kind": "info", ...}``): the grader's own repairs are
    plain strings, so the executor never reports this as a change it undid."""
    print(f"[grader] {text}", flush=True)
    if _SINK is not None:
        _SINK(Note(Kind.INFO, text).to_json())


def flag(reason: str) -> None:
    """Report ``reason`` for review: printed to stdout and, while autograding, noted for the report."""
    text = review(reason).text
    print(f"[grader] {text}", flush=True)
    if _SINK is not None:
        _SINK(text)

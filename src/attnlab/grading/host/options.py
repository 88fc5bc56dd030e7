"""What the command line's modules share: help text from docstrings, the ``--assignment`` option."""

from __future__ import annotations

import re

from ..course import ASSIGNMENT, ASSIGNMENTS

_ROLE = r":[a-z]+:`[^`]+`"


def plain_text(doc: str) -> str:
    """A docstring as help text: reST markup (double backticks, roles such as :mod:) removed, and the
    pointers into the code a user has no use for: a parenthesis holding only a reference
    ``(:func:`attnlab.grading.samples.apply_mistake`)``, or ending in one (``(..., see :mod:`x`)``)."""
    text = re.sub(rf"\s*\((?:see )?{_ROLE}\)", "", doc or "")
    text = re.sub(rf"[,;:]?\s+see\s+{_ROLE}\)", ")", text)
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text).strip()


def assignment_option(p) -> None:
    """Add ``--assignment`` (one of the course's assignments, default the first) to parser ``p``."""
    p.add_argument("--assignment", choices=ASSIGNMENTS, default=ASSIGNMENT,
                   help=f"the assignment to work on (default {ASSIGNMENT}; notebooks 07 on: {ASSIGNMENTS[1]})")

"""Where the course's instructor notebooks (with hidden tests) are, for ``attnlab selfcheck``.

A wheel of the package carries them under ``attnlab/_course/`` (copied at build time by setup.py);
an editable install or a checkout has them in the repository's ``source/``. The environment
variable ``ATTNLAB_COURSE`` names a course directory to use instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from .grading.course import ASSIGNMENT, ASSIGNMENTS

#: A course directory (holding nbgrader_config.py and source/attention_kernels/) to use instead.
COURSE_ENV = "ATTNLAB_COURSE"


def _valid(root: Path) -> bool:
    return (root / "nbgrader_config.py").is_file() and any((root / "source" / ASSIGNMENT).glob("*.ipynb"))


def course_root() -> Path | None:
    """The folder holding ``nbgrader_config.py`` and ``source/attention_kernels/*.ipynb``, or None.

    Looked for in ``$ATTNLAB_COURSE``, then in the installed package, then in the checkout the
    package was installed from (editable installs).
    """
    candidates = []
    if os.environ.get(COURSE_ENV):
        candidates.append(Path(os.environ[COURSE_ENV]).expanduser())
    here = Path(__file__).resolve().parent
    candidates += [here / "_course", here.parents[1]]
    return next((c for c in candidates if _valid(c)), None)


def source_notebooks() -> dict[str, Path]:
    """name -> path of every instructor notebook found, of every assignment (empty when none is)."""
    root = course_root()
    if root is None:
        return {}
    return {p.stem: p for a in ASSIGNMENTS for p in sorted((root / "source" / a).glob("*.ipynb"))}

"""Byte-compile the support package before grading, once, outside the sandboxes.

Every notebook's kernel imports the course's package afresh in a sandbox that may write no
``.pyc`` (``PYTHONDONTWRITEBYTECODE=1``, the package bound read-only). Where the package was
installed without its byte code (an editable install, or a checkout with ``PYTHONDONTWRITEBYTECODE``
set), each kernel would compile its modules from source again: ~0.07 s of CPU per kernel, six
kernels per submission (measured 2026-12-01, notes/grading/2026-12-01/profile.md).
"""

from __future__ import annotations

import compileall
import contextlib
import io
from pathlib import Path


def compile_package() -> bool:
    """Write missing or stale ``.pyc`` files of the ``attnlab`` package beside its sources.

    Returns False where they cannot be written (a read-only install: kernels then compile in
    memory, as before); never raises for that.
    """
    import attnlab

    root = Path(attnlab.__file__).resolve().parent
    with contextlib.redirect_stdout(io.StringIO()):  # compileall prints what it could not write
        try:
            return bool(compileall.compile_dir(str(root), quiet=2))
        except OSError:
            return False

"""Byte-compile what the kernels import before grading, once, outside the sandboxes.

Every notebook's kernel imports the course's package, torch and Jupyter's kernel afresh in a
sandbox that may write no ``.pyc`` (``PYTHONDONTWRITEBYTECODE=1``, site-packages bound read-only).
Where they were installed without their byte code (an editable install, ``pip --no-compile``, uv's
default), each kernel compiles their modules from source again: ~0.07 s of CPU per kernel for the
package (notes/grading/2026-12-01/profile.md), ~4 s for torch (H200 host, notes/gpu/2026-12-01/
grading-3), six kernels per submission.
"""

from __future__ import annotations

import compileall
import contextlib
import importlib.util
import io
import os
from pathlib import Path

#: Packages every grading kernel imports besides the course's own (directly or through ipykernel).
KERNEL_IMPORTS = ("torch", "triton", "numpy", "IPython", "ipykernel", "jupyter_client", "traitlets", "zmq",
                  "tornado", "matplotlib", "nbformat", "jsonschema")


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


def compile_kernel_imports(names: tuple[str, ...] = KERNEL_IMPORTS) -> list[str]:
    """Byte-compile those of ``names`` that were installed without byte code (no ``.pyc`` for their
    ``__init__``), where their folder is writable; returns the names compiled.

    Nothing is imported (``importlib.util.find_spec``). A package that has its byte code costs one
    ``stat``; one that is read-only is left as it is (its kernels compile it in memory, as before).
    """
    done = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or not spec.submodule_search_locations:
            continue
        if os.path.exists(importlib.util.cache_from_source(spec.origin)):
            continue
        folder = list(spec.submodule_search_locations)[0]
        if not os.access(folder, os.W_OK):
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                compileall.compile_dir(folder, quiet=2, workers=0)
            except OSError:
                continue
        if os.path.exists(importlib.util.cache_from_source(spec.origin)):
            done.append(name)
    return done

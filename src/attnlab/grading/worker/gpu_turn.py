"""One timing worker on the GPU at a time, the others compiling meanwhile (issue 33's cost per submission).

The timing stage (:mod:`.timing`) spends most of its wall time on the CPU: starting Python and torch,
compiling the learner's and the reference's kernels. Only its repetitions need the GPU to themselves
(another process's kernels on the same GPU would be timed with them). So the workers of several
students run at once, and every stretch of a worker that launches kernels takes the GPU's *turn*: an
exclusive ``flock`` on one file per GPU of this machine (:func:`lock_path`). The kernel releases a
``flock`` when the file is closed, also when its holder dies or is killed, so a worker that hangs or
faults never keeps the GPU from the next one. The file may be bound read-only into a sandbox: a lock
needs an open file, not write access.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time

__all__ = ["lock_path", "gpu_turn"]


def lock_path() -> str:
    """The lock file of this machine's GPU as this process sees it (one per ``CUDA_VISIBLE_DEVICES``
    value, so shards on separate GPUs of one host do not wait for each other), created if missing,
    readable by every account (sandboxed workers run as accounts of their own).

    Raises:
        OSError: the file cannot be created or opened (a symbolic link there is refused).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace("/", "_").replace(",", "-") or "none"
    path = os.path.join(tempfile.gettempdir(), f"attnlab-gpu-{visible}.lock")
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o644)  # whatever the umask made of it
    finally:
        os.close(fd)
    return path


@contextlib.contextmanager
def gpu_turn(path: str | None):
    """Hold the GPU's turn for the block (no lock at all when ``path`` is None: one worker alone).

    Yields:
        The seconds spent waiting for the turn (0.0 without a lock).
    """
    if path is None:
        yield 0.0
        return
    t0 = time.perf_counter()
    with open(path, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - t0
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

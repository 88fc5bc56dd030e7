"""One timing worker on the GPU at a time, the others starting and compiling meanwhile (issue 33's cost).

The timing stage (:mod:`.timing`) spends most of its wall time on the CPU: starting Python, torch and
CUDA's profiler, compiling the learner's and the reference's kernels. Only the part that runs kernels
needs the GPU to itself (another process's kernels would be timed with them). So the workers of several
students run at once, and each asks the grader for the GPU's *turn* before it runs a kernel.

The grader holds the turn for the worker, never the worker itself, so a worker cannot keep it:

- the two ends talk over the worker's stdin and stdout (the worker moves everything else it prints to
  stderr at start: :meth:`Channel.open`), one line each: ``turn?`` (may I), ``go``, ``turn done``;
- the grader's side (:func:`serve`) takes an exclusive ``flock`` on one file per GPU of the machine
  (:func:`lock_path`: several ``attnlab speed`` runs on one machine share it) before it answers ``go``,
  and releases it at ``turn done``, when the worker ends, or when it kills the worker;
- a turn has a limit of its own (a kernel that never returns is killed there, not at the end of the
  worker's budget), and the time a worker spends waiting for its turn is not charged to its budget: a
  class of slow neighbours never costs a student their timing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import sys
import tempfile
import time

__all__ = ["lock_path", "serve", "Channel", "TURN_LIMIT_S"]

#: The longest one turn may last (seconds): a checked warm-up and 10 repetitions of each side take
#: 0.3-2.5 s on an H200 (notes/gpu/2026-12-04/session11/); 25x slower kernels than the reference still
#: fit many times over.
TURN_LIMIT_S = 120.0

_ASK, _GO, _DONE = b"turn?", b"go", b"turn done"


def lock_path() -> str:
    """The lock file of this machine's GPU as this process sees it (one per ``CUDA_VISIBLE_DEVICES``
    value, so shards on separate GPUs of one host do not wait for each other), created if missing and
    readable by every account (graders of a course may run as different users).

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
def _held(lock_file: str | None):
    """The GPU's lock held for the block (nothing to hold when ``lock_file`` is None: one worker alone)."""
    if lock_file is None:
        yield
        return
    with open(lock_file, "rb") as lock:  # a flock belongs to this open file: threads of one grader exclude each other too
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def serve(proc, lock_file: str | None, budget_s: float, turn_limit_s: float = TURN_LIMIT_S) -> str | None:
    """The grader's end: answer ``proc``'s requests for the GPU's turn until it ends, and enforce its limits.

    Args:
        proc: the worker (a :class:`subprocess.Popen` with ``stdin`` and ``stdout`` pipes, bytes).
        lock_file: the GPU's lock (:func:`lock_path`), or None when no other worker shares the GPU.
        budget_s: the worker's time, not counting its waits for a turn.
        turn_limit_s: the longest one turn may last.

    Returns:
        None when the worker ended by itself; otherwise why it was killed.
    """
    fd = proc.stdout.fileno()
    buffer = b""
    used, last = 0.0, time.monotonic()
    turn = None  # (the held lock's context, when the turn began)
    error = None
    try:
        while error is None:
            now = time.monotonic()
            used, last = used + now - last, now
            left = budget_s - used
            if turn is not None:
                left = min(left, turn_limit_s - (now - turn[1]))
            if left <= 0:
                error = (f"held the GPU for more than {turn_limit_s:g} s in one turn" if turn is not None
                         and now - turn[1] >= turn_limit_s else f"the timing stage ran past {budget_s:g} s")
                break
            if not select.select([fd], [], [], min(left, 1.0))[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # the worker closed its end: it has ended
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line == _ASK and turn is None:
                    held = _held(lock_file)
                    held.__enter__()  # waits for the other workers' turns: not charged to this one
                    turn = (held, time.monotonic())
                    last = turn[1]
                    try:
                        proc.stdin.write(_GO + b"\n")
                        proc.stdin.flush()
                    except OSError:  # the worker died while it waited
                        break
                elif line == _DONE and turn is not None:
                    turn[0].__exit__(None, None, None)
                    turn = None
    finally:
        if error is not None:
            proc.kill()
        if turn is not None:
            turn[0].__exit__(None, None, None)
    return error


class Channel:
    """The worker's end (in the worker process, run by :func:`serve`'s grader)."""

    def __init__(self, to_grader, from_grader):
        self._to, self._from = to_grader, from_grader

    @classmethod
    def open(cls) -> "Channel":
        """Take stdin and stdout for the channel; from here on, whatever the process prints (Python,
        torch, Triton, C libraries) goes to stderr."""
        to_grader = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        return cls(to_grader, sys.stdin.buffer)

    @contextlib.contextmanager
    def turn(self):
        """Hold the GPU's turn for the block.

        Yields:
            The seconds spent waiting for it.

        Raises:
            RuntimeError: the grader closed the channel instead of answering.
        """
        t0 = time.perf_counter()
        self._to.write(_ASK + b"\n")
        if self._from.readline().strip() != _GO:
            raise RuntimeError("the grader did not give the GPU's turn")
        try:
            yield time.perf_counter() - t0
        finally:
            self._to.write(_DONE + b"\n")

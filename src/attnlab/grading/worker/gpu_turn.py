"""One timing worker on the GPU at a time, the others starting and compiling meanwhile (issue 33's cost).

The timing stage (:mod:`.timing`) spends most of its wall time on the CPU: starting Python, torch and
CUDA's profiler, compiling the learner's and the reference's kernels. Only the part that runs kernels
needs the GPU to itself (another process's kernels would be timed with them). So the workers of several
students run at once, and each asks the grader for the GPU's *turn* before it runs a kernel.

The grader holds the turn for the worker, never the worker itself, so a worker cannot keep it:

- the two ends talk over the worker's stdin and stdout (the worker moves everything else it prints to
  stderr at start: :meth:`Channel.open`), one line each: ``turn? <GPU>`` (may I, on this GPU: its
  UUID), ``go``, ``turn done``;
- the grader's side (:func:`serve`) takes an exclusive ``flock`` on the lock file of that GPU
  (:func:`lock_file`: one per GPU UUID in :data:`LOCK_DIR`, whatever ``CUDA_VISIBLE_DEVICES`` or
  ``TMPDIR`` say, so several ``attnlab speed`` runs on one machine share it) before it answers ``go``,
  and releases it at ``turn done``, when the worker ends, or when it kills the worker;
- a turn has a limit of its own (a kernel that never returns is killed there, not at the end of the
  worker's budget); the time a worker waits for its turn is not charged to its budget (a class of slow
  neighbours never costs a student their timing), but is bounded too (:data:`WAIT_LIMIT_S`: a grader
  stopped while it holds a turn must not hang every other run).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import sys
import time
from dataclasses import dataclass

__all__ = ["LOCK_DIR", "TURN_LIMIT_S", "WAIT_LIMIT_S", "lock_file", "Stopped", "serve", "Channel"]

#: Where the GPUs' lock files are: one folder for every grader of the machine (not ``$TMPDIR``).
LOCK_DIR = "/tmp"
#: The longest one turn may last (seconds), for the default 10 repetitions (:func:`serve` scales it): a
#: checked warm-up and 10 repetitions of each side take 0.3-2.5 s on an H200
#: (notes/gpu/2026-12-04/session11/); kernels 50x slower than the reference fit many times over.
TURN_LIMIT_S = 120.0
#: The longest a worker waits for its turn (seconds): 8 workers' turns at the limit, and then some.
WAIT_LIMIT_S = 1200.0
#: The most a worker may print on stderr (bytes; its last lines are kept for the report), and the longest
#: line it may send on the channel.
OUTPUT_LIMIT = 64 * 2 ** 20
_LINE_LIMIT = 4096

_ASK, _GO, _DONE = b"turn?", b"go", b"turn done"


def lock_file(lock_dir: str, gpu: str) -> str:
    """The lock file of ``gpu`` (a UUID, as ``torch.cuda.get_device_properties().uuid`` gives it, or
    ``"cpu"``) in ``lock_dir``, created if missing and readable by every account (graders of a course
    may run as different users; a lock needs only an open file).

    Raises:
        OSError: the file cannot be opened or created (a symbolic link there is refused).
        ValueError: ``gpu`` is not a plain name.
    """
    if not gpu or not all(c.isalnum() or c in "-_" for c in gpu):
        raise ValueError(f"lock_file: not a GPU name: {gpu!r}")
    path = os.path.join(lock_dir, f"attnlab-gpu-{gpu}.lock")
    os.close(_open(path))
    return path


def _open(path: str) -> int:
    """An O_RDONLY descriptor of ``path``, creating it (mode 0644) if missing. An existing file is opened
    without O_CREAT: with ``fs.protected_regular`` an O_CREAT open of another account's file in a sticky
    folder such as /tmp fails, even for root."""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another grader made it meanwhile
        return os.open(path, flags)
    os.fchmod(fd, 0o644)  # whatever the umask made of it
    return fd


class _Turn:
    """The GPU's lock, held by the grader for one worker's turn."""

    def __init__(self, path: str | None):
        self.fd = _open(path) if path is not None else None
        self.since = time.monotonic()

    def wait(self, limit_s: float) -> bool:
        """Take the lock; False if it stayed held by someone else for ``limit_s``."""
        deadline = time.monotonic() + limit_s
        while self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    self.release()
                    return False
                time.sleep(0.05)
        self.since = time.monotonic()
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor of this open file releases its flock
            self.fd = None


@dataclass(frozen=True)
class Stopped:
    """Why :func:`serve` stopped a worker. ``grader``: the grader's own trouble (a lock it could not open
    or get, a worker gone while it waited), which says nothing about the learner's kernel."""

    reason: str
    grader: bool = False


def _read_into(fd: int, tail: bytearray, printed: int) -> tuple[int | None, int]:
    """Read what is ready on ``fd`` into ``tail`` (its last 4 KiB kept): (``fd``, or None once it is closed;
    ``printed`` plus the bytes read)."""
    chunk = os.read(fd, 65536)
    tail += chunk
    del tail[:-4096]
    return (fd if chunk else None), printed + len(chunk)


def serve(proc, lock_dir: str | None, budget_s: float, turn_limit_s: float = TURN_LIMIT_S,
          wait_limit_s: float = WAIT_LIMIT_S, max_turns: int | None = None, tail: bytearray | None = None
          ) -> Stopped | None:
    """The grader's end: answer ``proc``'s requests for the GPU's turn until it ends, and enforce its limits.

    Args:
        proc: the worker (a :class:`subprocess.Popen` with ``stdin`` and ``stdout`` pipes and, for
            ``tail``, a ``stderr`` pipe, unbuffered).
        lock_dir: the folder of the GPUs' lock files (:data:`LOCK_DIR`), or None when no other worker
            shares the GPU (turns are given at once).
        budget_s: the worker's time, not counting its waits for a turn.
        turn_limit_s: the longest one turn may last; wait_limit_s: the longest one wait for a turn.
        max_turns: the most turns the worker's jobs need (asking for more, it is stopped).
        tail: receives the last 4 KiB of the worker's stderr (at most :data:`OUTPUT_LIMIT` is read).

    Returns:
        None when the worker ended by itself (closed its stdout); otherwise why it was stopped (it is killed).
    """
    out, err = proc.stdout.fileno(), (proc.stderr.fileno() if proc.stderr is not None else None)
    os.set_blocking(proc.stdin.fileno(), False)  # a worker that stops reading never blocks the grader
    buffer, printed, turns = b"", 0, 0
    tail = bytearray() if tail is None else tail
    used, last = 0.0, time.monotonic()
    turn: _Turn | None = None
    error = None
    try:
        while error is None:
            now = time.monotonic()
            used, last = used + now - last, now
            if used >= budget_s:
                error = Stopped(f"the timing stage ran past {budget_s:g} s")
            elif turn is not None and now - turn.since >= turn_limit_s:
                error = Stopped(f"held the GPU for more than {turn_limit_s:g} s in one turn")
            if error is not None:
                break
            left = budget_s - used if turn is None else min(budget_s - used, turn_limit_s - (now - turn.since))
            ready = select.select([out, err] if err is not None else [out], [], [], min(left, 1.0))[0]
            if err in ready:
                err, printed = _read_into(err, tail, printed)  # None once closed: wait on stdout alone
                if printed > OUTPUT_LIMIT:
                    error = Stopped(f"the timing worker printed over {OUTPUT_LIMIT // 2 ** 20} MiB")
                    break
            if out not in ready:
                continue
            chunk = os.read(out, 65536)
            if not chunk:  # the worker closed its end: it has ended; its last words on stderr
                deadline = time.monotonic() + 5.0
                while err is not None and printed <= OUTPUT_LIMIT and select.select([err], [], [], max(
                        0.0, deadline - time.monotonic()))[0]:
                    err, printed = _read_into(err, tail, printed)
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > _LINE_LIMIT:
                error = Stopped("the timing worker sent a line the grader does not read")
                break
            for line in lines:
                word, _, gpu = line.partition(b" ")
                if word == _ASK and turn is None:
                    turns += 1
                    if max_turns is not None and turns > max_turns:
                        error = Stopped(f"the timing worker asked for more GPU turns than its jobs need ({max_turns})")
                        break
                    used += time.monotonic() - last  # charged up to the ask; the wait is not
                    try:
                        path = lock_file(lock_dir, gpu.decode() or "cpu") if lock_dir is not None else None
                        turn = _Turn(path)
                    except (OSError, ValueError) as exc:
                        error = Stopped(f"could not open the GPU's lock: {exc}", grader=True)
                        break
                    if not turn.wait(wait_limit_s):
                        error = Stopped(f"waited over {wait_limit_s:g} s for the GPU's turn ({path} stayed locked: "
                                        f"another grader holds it)", grader=True)
                        break
                    last = time.monotonic()
                    try:
                        os.write(proc.stdin.fileno(), _GO + b"\n")
                    except BlockingIOError:  # it stopped reading its answers
                        error = Stopped("the timing worker did not read the grader's answers")
                        break
                    except OSError:  # the worker died while it waited
                        error = Stopped("the timing worker ended while it waited for the GPU's turn", grader=True)
                        break
                elif line == _DONE and turn is not None:
                    turn.release()
                    turn = None
    finally:
        if error is not None:
            proc.kill()
        if turn is not None:
            turn.release()
    return error


class Channel:
    """The worker's end (in the worker process; the grader runs :func:`serve`)."""

    def __init__(self, to_grader, from_grader, gpu: str):
        self._to, self._from, self._gpu = to_grader, from_grader, gpu

    @classmethod
    def open(cls, gpu: str) -> "Channel":
        """Take stdin and stdout for the channel, asking for turns on ``gpu`` (its UUID, or ``"cpu"``);
        from here on, whatever the process prints (Python, torch, Triton, C libraries) goes to stderr."""
        to_grader = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        return cls(to_grader, sys.stdin.buffer, gpu)

    @contextlib.contextmanager
    def turn(self):
        """Hold the GPU's turn for the block.

        Yields:
            The seconds spent waiting for it.

        Raises:
            RuntimeError: the grader closed the channel instead of answering.
        """
        t0 = time.perf_counter()
        self._to.write(_ASK + b" " + self._gpu.encode() + b"\n")
        if self._from.readline().strip() != _GO:
            raise RuntimeError("the grader did not give the GPU's turn")
        try:
            yield time.perf_counter() - t0
        finally:
            self._to.write(_DONE + b"\n")

"""The gate's own time limit (:func:`compile_limit_s`): compiling is not the learner's run time, and a
compile that ran out of time while waiting (:class:`GateWaited`) is not the learner's doing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time


def compile_limit_s() -> float:
    """Seconds the gate may spend compiling one launch: three times the checks' limit for a call of
    learner code (:func:`attnlab.checks.call_limit_s`), at least 10 and at most 120."""
    from ..checks import call_limit_s

    return min(120.0, max(10.0, 3 * call_limit_s()))


class GateWaited(Exception):
    """The gate's time ran out while the compile mostly waited (a lock, a loaded machine): not the
    learner's doing. ``wall_s`` and ``cpu_s`` are what the compile took and used."""

    def __init__(self, what: str, wall_s: float, cpu_s: float):
        super().__init__(f"compiling {what} for the GPU targets waited {wall_s:.0f} s using {cpu_s:.1f} s of CPU")
        self.wall_s, self.cpu_s = wall_s, cpu_s


def _cpu_s() -> float:
    """CPU seconds of this process (every thread: the gate compiles in a pool) and of the children
    it waited for (ptxas)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def own_clock(what: str):
    """Pause an enclosing :func:`attnlab.checks.time_limit` (compiling is not the learner's run
    time) and limit the compile to :func:`compile_limit_s` instead.

    A compile stopped by the limit is the learner's only when it was computing: a compile that used
    less than half its wall time on a CPU (waiting for a lock, a machine loaded by other graders)
    raises :class:`GateWaited` instead of ``TimeoutError``, which the gate retries once and then
    reports for review, never as a lost point.
    """
    from ..checks import time_limit
    from ..core.outcome import CPUBoundTimeoutError

    main = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    remaining, interval = signal.getitimer(signal.ITIMER_REAL) if main else (0.0, 0.0)
    if remaining:
        signal.setitimer(signal.ITIMER_REAL, 0)
    start, cpu = time.perf_counter(), _cpu_s()
    try:
        with time_limit(compile_limit_s(), f"compiling {what} for the GPU targets"):
            yield
    except TimeoutError as exc:
        wall, used = time.perf_counter() - start, _cpu_s() - cpu
        if used < 0.5 * wall:
            raise GateWaited(what, wall, used) from None
        # computing (this process and its compiler children): the compile's own length, which a re-grade
        # alone would meet again; time_limit judged only its own thread, which waits on the compile's threads
        raise CPUBoundTimeoutError(str(exc)) from None
    finally:
        if remaining:
            signal.setitimer(signal.ITIMER_REAL, remaining, interval)

"""How many grading workers to run side by side, and what each one gets: a GPU, CPU threads.

``attnlab autograde --jobs N`` runs N worker processes (:mod:`.worker`) at once. Each takes one
student at a time (all of that student's notebooks, in order: the student's autograded folder and
gradebook entries are only ever written by one process) and every notebook still runs in its own
sandboxed kernel. This module only decides the numbers and the environment:

- **GPUs**: worker ``i`` sees GPU ``gpus[i % len(gpus)]`` through ``CUDA_VISIBLE_DEVICES``
  (round-robin; several workers share a GPU when N exceeds the GPU count). ``gpus`` are the ids
  in the instructor's own ``CUDA_VISIBLE_DEVICES`` when set (a Slurm allocation, say), else the
  ``/dev/nvidiaN`` device nodes; no torch import in the grader.
- **CPU threads**: each worker's kernels get ``OMP_NUM_THREADS`` (torch's intra-op threads) and
  the BLAS equivalents of ``cpus // N`` (at least 1), so N workers do not each start a thread per
  core; a value the instructor set is kept.
- **Default N** (:func:`default_jobs`): one worker per usable core, at most one per 2 GiB of memory
  (a worker holds its kernel and a warm spare, each with torch loaded: ~0.5 GiB apiece, more
  with CUDA), at most 8 per GPU.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: Environment variables that set a kernel's CPU thread pools (torch reads OMP_NUM_THREADS).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Memory a worker may need (its kernel and the spare kernel, torch imported in both).
GIB_PER_WORKER = 2
#: Workers per GPU at most by default (each kernel's CUDA context takes ~0.5 GiB of GPU memory).
WORKERS_PER_GPU = 8


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask: taskset, cgroups' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def memory_gib() -> float | None:
    """Total memory in GiB (``/proc/meminfo``), or None where unknown."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    found = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) / 2**20 if found else None


def visible_gpus(env: dict | None = None, dev: Path = Path("/dev")) -> list[str]:
    """The GPU ids workers are spread over.

    ``CUDA_VISIBLE_DEVICES`` when set (its entries as given: indices or UUIDs; empty or ``-1``: no
    GPU), else one id per ``/dev/nvidiaN`` node. No CUDA initialisation, so it is cheap and safe
    in the grader's parent process.
    """
    env = os.environ if env is None else env
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        ids = [g.strip() for g in given.split(",") if g.strip()]
        return [] if not ids or ids[0].startswith("-") else ids
    nodes = [p.name for p in dev.glob("nvidia[0-9]*") if re.fullmatch(r"nvidia\d+", p.name)]
    return [n[len("nvidia"):] for n in sorted(nodes, key=lambda n: int(n[len("nvidia"):]))]


def default_jobs(cpus: int | None = None, gpus: int | None = None, mem_gib: float | None = None) -> int:
    """The default worker count: a worker per core, capped by memory and by GPUs (when there are any)."""
    cpus = usable_cpus() if cpus is None else cpus
    gpus = len(visible_gpus()) if gpus is None else gpus
    mem_gib = memory_gib() if mem_gib is None else mem_gib
    n = max(1, cpus)
    if mem_gib:
        n = min(n, max(1, int(mem_gib // GIB_PER_WORKER)))
    if gpus:
        n = min(n, WORKERS_PER_GPU * gpus)
    return n


@dataclass(frozen=True)
class Plan:
    """The worker count and what each worker gets."""

    jobs: int
    cpus: int
    gpus: tuple[str, ...]

    @property
    def threads(self) -> int:
        """CPU threads per worker's kernel."""
        return max(1, self.cpus // self.jobs)

    def gpu_of(self, worker: int) -> str | None:
        """The GPU id worker ``worker`` (0-based) uses: round-robin over the GPUs; None without GPUs."""
        return self.gpus[worker % len(self.gpus)] if self.gpus else None

    def env(self, worker: int, base: dict) -> dict:
        """``base`` with worker ``worker``'s GPU and thread limits set (thread limits already in
        ``base`` are kept: the instructor's choice)."""
        env = dict(base)
        gpu = self.gpu_of(worker)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        for var in THREAD_VARS:
            env.setdefault(var, str(self.threads))
        return env

    def describe(self) -> str:
        """One line for the grading log: workers, threads, GPUs."""
        where = (f", GPUs {', '.join(self.gpus)} round-robin (CUDA_VISIBLE_DEVICES per worker)" if self.gpus
                 else ", no GPU")
        return (f"{self.jobs} grading worker{'s' if self.jobs != 1 else ''} side by side on {self.cpus} cores "
                f"({self.threads} CPU thread{'s' if self.threads != 1 else ''} per kernel){where}")


def plan(jobs: int | None = None, env: dict | None = None) -> Plan:
    """The plan for ``jobs`` workers (None: :func:`default_jobs`).

    Raises:
        ValueError: ``jobs`` is less than 1.
    """
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    gpus = tuple(visible_gpus(env))
    return Plan(jobs or default_jobs(gpus=len(gpus)), usable_cpus(), gpus)


#: How long a grading process waits for another one's write to the SQLite gradebook (seconds).
GRADEBOOK_BUSY_S = 120
_busy_hooked = False


def wait_for_gradebook_locks(seconds: float = GRADEBOOK_BUSY_S) -> None:
    """Make every SQLite connection SQLAlchemy opens in this process wait up to ``seconds`` for a
    lock (``PRAGMA busy_timeout``) instead of failing with "database is locked".

    nbgrader's :class:`~nbgrader.api.Gradebook` opens a connection per step (student, submission,
    each grade's commit); with N workers those writes meet. SQLite lets one writer at a time in and
    makes the others wait for the busy timeout, then fail. Measured here with three processes
    writing 150 students each: 363 of 450 writes failed with a timeout of 0; none with a timeout,
    and every write transaction nbgrader makes takes milliseconds. Python's sqlite3 waits 5 s by
    default; this sets a margin for many workers on a loaded machine. Other databases (a gradebook
    URL naming PostgreSQL) are left alone. Idempotent.
    """
    global _busy_hooked
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_connect(dbapi_connection, _record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    if not _busy_hooked:
        event.listen(Engine, "connect", on_connect)
        _busy_hooked = True

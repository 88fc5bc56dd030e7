"""A sandboxed kernel's process tree, read from /proc by the grader (outside the sandbox).

The grader uses it to tell a cell that timed out because it never stopped computing (an endless
loop: it had the CPU all along, so grading it again alone would only spend the limit again) from
one that timed out because other workers' kernels took its CPU. What the kernel reports about
itself could be forged by learner code; these readings cannot. Linux only (``/proc/PID/task/TID/
children``, kernel >= 3.5); elsewhere every reading is ``None`` and nothing is concluded.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["tree", "cpu_seconds", "thread_seconds", "uses_gpu", "process_start", "PIDFILE_ENV"]

#: When set, the pid and start time (``PID:START``) of every kernel started, and its sandbox's folders,
#: are appended to this file, one kernel a line: the grading parent kills them and removes the
#: folders if the worker dies.
PIDFILE_ENV = "ATTNLAB_KERNEL_PIDFILE"

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree(pid: int | None) -> list[int]:
    """``pid`` and every process under it (children of every thread, recursively); [] when ``pid``
    is gone or /proc cannot say."""
    if not pid or not Path(f"/proc/{pid}").exists():
        return []
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
        except OSError:  # exited meanwhile, or no children file (an old kernel): skip it
            continue
    return found


def cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds (user + system, reaped children included) of ``pid`` and every process under it;
    None when nothing could be read."""
    total, read = 0.0, False
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
        read = True
    return total if read else None


def thread_seconds(pid: int | None) -> dict[tuple[int, int], float]:
    """CPU seconds (user + system) of every thread of ``pid`` and of every process under it, by
    (process, thread); {} when nothing could be read. A thread that spun all along shows here even
    when its process has other threads, or its slot more than one core."""
    found = {}
    for p in tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fields = Path(f"/proc/{p}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[(p, int(tid))] = sum(int(x) for x in fields[11:13]) / _TICK  # utime stime
    return found


def uses_gpu(pid: int | None) -> bool:
    """Whether a process under ``pid`` holds an NVIDIA device open (CUDA started): its waits for the
    GPU may spin on the CPU, so CPU time says nothing about being starved. True when unreadable."""
    for p in tree(pid):
        try:
            links = [os.readlink(f"/proc/{p}/fd/{fd}") for fd in os.listdir(f"/proc/{p}/fd")]
        except OSError:
            return True
        if any(link.startswith("/dev/nvidia") for link in links):
            return True
    return False


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, field 22 of ``/proc/PID/stat``), or None
    when there is no such process: a pid plus its start time names one process, even after the pid
    is reused."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name in parentheses may hold spaces
    return fields[19] if len(fields) > 19 else None

"""The bound a sandboxed kernel sets on itself: RLIMIT_NPROC, where Linux counts this sandbox's tasks only.

Called by the guard inside the kernel (:func:`attnlab.grading.kernel.guard.install`); the grader's side of
the task bound (cgroups, accounts) is :mod:`attnlab.grading.sandbox.tasks`, which reads the same facts.
"""

from __future__ import annotations

import os


def user_namespace() -> str:
    """This process's user namespace (``user:[inode]``), "" where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/user")
    except OSError:
        return ""


def per_namespace_counts() -> bool:
    """Linux >= 5.14 counts RLIMIT_NPROC per user namespace (``ucounts``)."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


def limit_in_kernel(max_tasks: int, grader_namespace: str, own_account: bool = False) -> int:
    """Set RLIMIT_NPROC to ``max_tasks`` in this (sandboxed kernel) process where it counts this
    sandbox's tasks only: the kernel runs as an account of its own (``own_account``: a root grader's
    kernel, :func:`attnlab.grading.sandbox.kernel_account`), or in a user namespace other than the
    grader's (``grader_namespace``, :func:`user_namespace` there) and Linux counts per namespace. The
    limit set, or 0 where none was (there, it would also count the grader's and the other kernels'
    tasks, or bind nothing for root)."""
    mine = user_namespace()
    apart = mine and grader_namespace and mine != grader_namespace and per_namespace_counts()
    if max_tasks <= 0 or not (apart or own_account and os.getuid() != 0):
        return 0
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    limit = max_tasks if hard == resource.RLIM_INFINITY else min(max_tasks, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    except (ValueError, OSError):
        return 0
    return limit

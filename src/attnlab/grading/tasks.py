"""Bound the number of processes and threads of one sandboxed kernel, so a fork bomb stays in its notebook.

bubblewrap bounds no process count. Without a bound, a notebook that forks or starts threads
without end exhausts the machine's process table until its time limit, and every other kernel on
the machine (the other ``--jobs`` slots: other students) fails to start a thread or a process and
loses points for it. Two bounds, each counting every task (process or thread) of one sandbox:

- **a pids cgroup per kernel** (``pids.max`` = ``max_tasks``), always inside the grader's own cgroup
  (:func:`parent_candidates`): under its cgroup v1 ``pids`` cgroup; on cgroup v2 in the grader's own
  cgroup once ``attnlab autograde`` moved its processes into a leaf child (:func:`prepare`), or the
  hierarchy's root when that is the grader's own (a container's cgroup namespace). Creating one needs
  write access there: root, or a delegated cgroup. bwrap enters it before it starts anything (:func:`enter`: ``sh`` writes its own pid into
  ``cgroup.procs`` and execs bwrap), and the sandbox sees ``/sys`` read-only and has no
  capabilities, so learner code can neither leave it nor raise its limit.
- **RLIMIT_NPROC, set by the guard inside the kernel** (:func:`limit_in_kernel`): Linux >= 5.14
  counts it per user namespace, and bwrap run by an account other than root gives every sandbox
  a user namespace of its own, so the limit counts that kernel's tasks only. Root's tasks are
  exempt from RLIMIT_NPROC, and without a namespace of its own the count would include every
  process of the account (other kernels, the grader), so the guard sets it only in that case, or
  where a root grader runs the kernel as an account of its own (:func:`.sandbox.kernel_account`),
  which no other process shares.

:func:`describe` says which bound is in force here (``attnlab autograde`` prints it, ``attnlab
doctor`` checks it). Where neither works (root without a writable pids cgroup), grading goes on
and says so: a fork bomb can then stall the other slots until its notebook's time limit.
"""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from pathlib import Path

#: Tasks (processes + threads) one kernel may have. A grading kernel needs ~10-40 (ipykernel's
#: threads, torch's pools at one thread each, CUDA's and Triton's helpers, a compiler process).
MAX_TASKS = 512
#: Overrides :data:`MAX_TASKS` (read by nbgrader_config.py into ``GradingExecute.max_tasks``).
MAX_TASKS_ENV = "ATTNLAB_KERNEL_TASKS"
CGROUP_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "attnlab-kernel-"
#: On cgroup v2, the leaf the grader's processes move into so that their cgroup can hold the kernels'.
LEAF = "attnlab-grader"


def _read_proc_cgroup() -> str:
    try:
        return Path("/proc/self/cgroup").read_text()
    except OSError:
        return ""


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """Controller -> path of this process's cgroup ("" for cgroup v2), from ``/proc/self/cgroup``."""
    own = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(",") if parts[1] else [""]:
                own[c] = parts[2]
    return own


def parent_candidates(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None, prepare: bool = False) -> list[Path]:
    """Folders a per-kernel pids cgroup may be made in: under this process's own pids cgroup (v1); on
    cgroup v2, the hierarchy's root when that is this process's own cgroup (a container with a cgroup
    namespace of its own), else this process's own cgroup, once its processes sit in a leaf child
    (:data:`LEAF`, made by :func:`_move_to_leaf` when ``prepare``: ``attnlab autograde`` asks for it).
    Never above it: a kernel moved out of the grader's cgroup would leave that cgroup's limits and
    accounting (a systemd service's, a Slurm job's, a container's)."""
    own = _own_cgroups(_read_proc_cgroup() if proc_cgroup is None else proc_cgroup)
    found = []
    if "pids" in own and (root / "pids").is_dir():
        found.append(root / "pids" / own["pids"].lstrip("/"))
    if "" in own and (root / "cgroup.controllers").is_file():
        mine = own[""].strip("/")
        if not mine:
            folder = root
        elif Path(mine).name == LEAF:
            folder = (root / mine).parent  # the grader's cgroup, whose processes sit in our leaf
        else:
            folder = root / mine if _hands_out_pids(root / mine) or prepare and _move_to_leaf(root / mine) else None
        if folder is not None and _hands_out_pids(folder):
            found.append(folder)
    return found


def _hands_out_pids(folder: Path) -> bool:
    try:
        return "pids" in (folder / "cgroup.subtree_control").read_text().replace("+", " ").split()
    except OSError:
        return False


def _move_to_leaf(folder: Path) -> bool:
    """Make the cgroup v2 ``folder`` (this process's own) hand the pids controller to children: cgroup v2
    allows that only in a cgroup without processes of its own, so they move into a leaf child first
    (:data:`LEAF`), where ``folder``'s limits still apply to them. Needs write access to ``folder`` (root,
    or a delegated cgroup); False where it cannot be done."""
    try:
        if "pids" not in (folder / "cgroup.controllers").read_text().split():
            return False
        try:  # no processes of its own after all (a cgroup made for the grader): nothing to move
            _write(folder / "cgroup.subtree_control", "+pids")
            return True
        except OSError:
            pass
        leaf = folder / LEAF
        leaf.mkdir(exist_ok=True)
        for _ in range(5):  # a process started meanwhile lands in folder again: move it too
            for pid in (folder / "cgroup.procs").read_text().split():
                try:
                    _write(leaf / "cgroup.procs", pid)
                except OSError:
                    pass
            try:
                _write(folder / "cgroup.subtree_control", "+pids")
                return True
            except OSError:
                continue
    except OSError:
        pass
    return False


def _write(path: Path, text: str) -> None:
    """Write a cgroup control file (never created: on a folder that is not a cgroup this fails)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _owner_tag(pid: int | None = None) -> str | None:
    """``<pid namespace inode>-<pid>-<start time>``: which process made a cgroup, unambiguous across pid
    namespaces (two containers sharing a cgroup parent) and pid reuse; None if it cannot be read."""
    pid = os.getpid() if pid is None else pid
    try:
        ns = os.stat(f"/proc/{pid}/ns/pid").st_ino
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return f"{ns}-{pid}-{stat[stat.rindex(')') + 2:].split()[19]}"


def create(max_tasks: int, candidates: list[Path] | None = None) -> Path | None:
    """A new pids cgroup allowing ``max_tasks`` tasks, or None where none can be made here."""
    if max_tasks <= 0:
        return None
    for parent in parent_candidates() if candidates is None else candidates:
        folder = parent / f"{_PREFIX}{_owner_tag() or os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            _write(folder / "pids.max", str(max_tasks))
            return folder
        except OSError:
            remove(folder)
    return None


def enter(folder: Path | None, cmd: list[str]) -> list[str]:
    """``cmd`` started inside the cgroup ``folder`` (unchanged when None): ``sh`` moves itself in and
    execs ``cmd``, so every process ``cmd`` starts is counted; if the move fails, nothing starts."""
    if folder is None:
        return cmd
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(folder), *cmd]


def remove(folder: Path | None, wait_s: float = 2.0) -> bool:
    """Kill what is left in the cgroup ``folder`` and remove it; False if it could not be removed (the
    caller logs it: :func:`sweep` removes it at the next run)."""
    if folder is None:
        return True
    deadline = time.monotonic() + wait_s
    try:  # cgroup v2 (Linux >= 5.14): the kernel kills every member, no pid can be reused meanwhile
        _write(folder / "cgroup.kill", "1")
    except OSError:
        pass
    while True:
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
        try:
            for pid in (folder / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        except OSError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def sweep() -> int:
    """Remove the cgroups of kernels whose grading process is gone (a killed grader, or a removal that
    timed out); the number removed. Only cgroups made in this pid namespace are judged, by the pid and
    start time in their names (:func:`_owner_tag`): another container's, or a live grader's, stay."""
    mine = _owner_tag()
    if mine is None:
        return 0
    removed = 0
    for parent in parent_candidates():
        try:
            left = [c for c in parent.iterdir() if c.name.startswith(_PREFIX)]
        except OSError:
            continue
        for cgroup in left:
            parts = cgroup.name[len(_PREFIX):].split("-")
            if len(parts) != 4 or parts[0] != mine.split("-")[0] or not parts[1].isdigit():
                continue
            if _owner_tag(int(parts[1])) != "-".join(parts[:3]) and remove(cgroup):
                removed += 1
    return removed


def prepare() -> None:
    """Before grading (``attnlab autograde``): on cgroup v2, let this process's cgroup hold the kernels'
    cgroups, moving its processes into a leaf child where needed (:func:`_move_to_leaf`); then remove
    left-over kernel cgroups (:func:`sweep`). Nothing where the bound is switched off."""
    if max_tasks() > 0:
        parent_candidates(prepare=True)
        describe.cache_clear()
        sweep()


def remove_left_over(path: str) -> None:
    """Remove a kernel's cgroup recorded by a grading worker that died (``path`` is ignored unless it
    is one of this module's cgroups)."""
    if Path(path).name.startswith(_PREFIX) and Path(path).is_relative_to(CGROUP_ROOT):
        remove(Path(path))


def user_namespace() -> str:
    """This process's user namespace (``user:[inode]``), "" where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/user")
    except OSError:
        return ""


def _per_namespace_counts() -> bool:
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
    apart = mine and grader_namespace and mine != grader_namespace and _per_namespace_counts()
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


def _bwrap_makes_user_namespaces() -> bool:
    """bwrap run by this (non-root) account gives each sandbox a user namespace: it is not setuid root."""
    import stat

    from .sandbox import bwrap_path

    exe = bwrap_path()
    try:
        return bool(exe) and os.getuid() != 0 and not os.stat(exe).st_mode & stat.S_ISUID
    except OSError:
        return False


def max_tasks() -> int:
    """The configured bound (:data:`MAX_TASKS_ENV`, else :data:`MAX_TASKS`; 0 or less: none)."""
    try:
        return int(os.environ.get(MAX_TASKS_ENV, MAX_TASKS))
    except ValueError:
        return MAX_TASKS


def _own_v2_cgroup(root: Path = CGROUP_ROOT) -> Path | None:
    own = _own_cgroups(_read_proc_cgroup())
    return root / own[""].strip("/") if "" in own and (root / "cgroup.controllers").is_file() else None


@functools.lru_cache(maxsize=1)
def describe() -> tuple[bool, str]:
    """(bounded, one line): which bound on a kernel's processes and threads grading has here. Changes
    nothing (``attnlab doctor`` calls it): where ``attnlab autograde`` would first move its processes
    into a leaf (:func:`prepare`), it says so."""
    n = max_tasks()
    if n <= 0:
        return False, f"no bound on a kernel's processes and threads ({MAX_TASKS_ENV}={n})"
    folder = create(n)
    if folder is not None:
        remove(folder)
        return True, f"at most {n} processes and threads per kernel (a pids cgroup under {folder.parent})"
    own = _own_v2_cgroup()
    try:
        offered = own is not None and "pids" in (own / "cgroup.controllers").read_text().split()
        writable = own is not None and os.access(own / "cgroup.subtree_control", os.W_OK)
    except OSError:
        offered = writable = False
    if offered and writable:
        return True, (f"at most {n} processes and threads per kernel (pids cgroups inside {own}, after `attnlab "
                      f"autograde` moves that cgroup's processes into its leaf {LEAF})")
    if _bwrap_makes_user_namespaces() and _per_namespace_counts():
        return True, f"at most {n} processes and threads per kernel (RLIMIT_NPROC in each sandbox's user namespace)"
    from .sandbox import kernel_accounts

    if os.getuid() == 0 and not kernel_accounts():
        return True, f"at most {n} processes and threads per kernel (RLIMIT_NPROC of each kernel's own account)"
    where = (f"the grader's cgroup {own} offers no pids controller" if own is not None and not offered else
             f"the grader's cgroup {own} is not writable" if own is not None else "no pids cgroup can be made")
    why = (f"as root with kernels kept at uid 0 ({kernel_accounts()}), RLIMIT_NPROC binds nothing"
           if os.getuid() == 0 else
           "bwrap is setuid root here (no user namespace per sandbox)" if not _bwrap_makes_user_namespaces()
           else "this Linux (before 5.14) counts RLIMIT_NPROC per account, not per sandbox")
    return False, (f"no bound on a kernel's processes and threads: {where}, and {why}. A notebook that forks "
                   "without end slows the other grading slots until its time limit (what it makes fail there "
                   "is graded again alone). Fix: a cgroup offering the pids controller for the grader (cgroup "
                   "v1 `pids`; on v2, e.g. a systemd unit or scope with Delegate=yes), or grade as an account "
                   "other than root with a bwrap that is not setuid, on Linux >= 5.14")

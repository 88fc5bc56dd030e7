"""Bound the processes, threads and memory of one sandboxed kernel, so a fork bomb or a memory hog stays
in its notebook.

Memory (:func:`create_memory`): a memory cgroup per kernel, the same cgroup as its pids bound on cgroup
v2, one of the v1 ``memory`` hierarchy (under the grader's) on v1, holds the kernel's processes, their
children, ``memfd`` and shared memory and its sandbox's tmpfs to one figure, with no swap. The kernel's
processes are the out-of-memory killer's first choice (:data:`KERNEL_OOM_SCORE`, set in :func:`enter`),
the grading processes its last (:func:`protect_grader`), so a kernel that runs out ends itself only.
:func:`describe_memory` says whether this machine allows it.

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
- **RLIMIT_NPROC, set by the guard inside the kernel** (:func:`attnlab.grading.kernel.limits.limit_in_kernel`): Linux >= 5.14
  counts it per user namespace, and bwrap run by an account other than root gives every sandbox
  a user namespace of its own, so the limit counts that kernel's tasks only. Root's tasks are
  exempt from RLIMIT_NPROC, and without a namespace of its own the count would include every
  process of the account (other kernels, the grader), so the guard sets it only in that case, or
  where a root grader runs the kernel as an account of its own (:func:`attnlab.grading.sandbox.kernel_account`),
  which no other process shares.

:func:`describe` says which bound is in force here (``attnlab autograde`` prints it, ``attnlab
doctor`` checks it). Where neither works (root without a writable pids cgroup), grading goes on
and says so: a fork bomb can then stall the other slots until its notebook's time limit.
"""
# Length: One job: the cgroup and RLIMIT bounds of a kernel's tasks and memory, on cgroup v1 and
# v2.

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from pathlib import Path

from ..kernel.limits import per_namespace_counts

#: Tasks (processes + threads) one kernel may have. A grading kernel needs ~10-40 (ipykernel's
#: threads, torch's pools at one thread each, CUDA's and Triton's helpers, a compiler process).
MAX_TASKS = 512
#: Overrides :data:`MAX_TASKS` (read by nbgrader_config.py into ``GradingExecute.max_tasks``).
MAX_TASKS_ENV = "ATTNLAB_KERNEL_TASKS"
#: The memory one kernel may hold as a whole (:func:`create_memory`), unless its grader says otherwise
#: (``GradingExecute.memory_limit_gb``): its processes, their children, shared memory and its scratch tmpfs.
MEMORY_BYTES = 8 * 2**30
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Name of every kernel cgroup the grader makes: this prefix, :func:`owner_tag`, a random part.
CGROUP_PREFIX = "attnlab-kernel-"
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


def parent_candidates(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None, prepare: bool = False,
                      controller: str = "pids") -> list[Path]:
    """Folders a per-kernel cgroup of ``controller`` (``pids`` or ``memory``) may be made in: under this
    process's own cgroup of that controller (v1); on
    cgroup v2, the hierarchy's root when that is this process's own cgroup (a container with a cgroup
    namespace of its own), else this process's own cgroup, once its processes sit in a leaf child
    (:data:`LEAF`, made by :func:`_move_to_leaf` when ``prepare``: ``attnlab autograde`` asks for it).
    Never above it: a kernel moved out of the grader's cgroup would leave that cgroup's limits and
    accounting (a systemd service's, a Slurm job's, a container's)."""
    own = _own_cgroups(_read_proc_cgroup() if proc_cgroup is None else proc_cgroup)
    found = []
    if controller in own and (root / controller).is_dir():
        found.append(root / controller / own[controller].lstrip("/"))
    if "" in own and (root / "cgroup.controllers").is_file():
        mine = own[""].strip("/")
        if not mine:
            folder = root
        elif Path(mine).name == LEAF:
            folder = (root / mine).parent  # the grader's cgroup, whose processes sit in our leaf
        else:
            folder = (root / mine if _hands_out(root / mine, controller)
                      or prepare and _move_to_leaf(root / mine, controller) else None)
        if folder is not None and _hands_out(folder, controller):
            found.append(folder)
    return found


def _hands_out(folder: Path, controller: str = "pids") -> bool:
    try:
        return controller in (folder / "cgroup.subtree_control").read_text().replace("+", " ").split()
    except OSError:
        return False


def _offered(folder: Path, controller: str) -> bool:
    try:
        return controller in (folder / "cgroup.controllers").read_text().split()
    except OSError:
        return False


def _move_to_leaf(folder: Path, controller: str = "pids") -> bool:
    """Make the cgroup v2 ``folder`` (this process's own) hand ``controller`` to children (and the other of
    pids and memory where it offers it: kernels' cgroups use both): cgroup v2 allows that only in a cgroup
    without processes of its own, so they move into a leaf child first (:data:`LEAF`), where ``folder``'s
    limits still apply to them. Needs write access to ``folder`` (root, or a delegated cgroup); False
    where it cannot be done."""
    wanted = [c for c in (controller, *(c for c in ("pids", "memory") if c != controller)) if _offered(folder, c)]

    def hand_out() -> bool:
        for c in wanted:
            try:
                write_control(folder / "cgroup.subtree_control", f"+{c}")
            except OSError:
                if c == controller:
                    return False
        return True

    try:
        if controller not in wanted:
            return False
        if hand_out():  # no processes of its own after all (a cgroup made for the grader): nothing to move
            return True
        leaf = folder / LEAF
        leaf.mkdir(exist_ok=True)
        for _ in range(5):  # a process started meanwhile lands in folder again: move it too
            for pid in (folder / "cgroup.procs").read_text().split():
                try:
                    write_control(leaf / "cgroup.procs", pid)
                except OSError:
                    pass
            if hand_out():
                return True
    except OSError:
        pass
    return False


def write_control(path: Path, text: str) -> None:
    """Write a cgroup control file (never created: on a folder that is not a cgroup this fails)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def owner_tag(pid: int | None = None) -> str | None:
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
        folder = parent / f"{CGROUP_PREFIX}{owner_tag() or os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            write_control(folder / "pids.max", str(max_tasks))
            return folder
        except OSError:
            remove(folder)
    return None


def _limit_memory(folder: Path, limit: int) -> None:
    """Write a memory limit of ``limit`` bytes, with no swap, into the cgroup ``folder`` (v2 or v1).

    Raises:
        OSError: the limit itself could not be written.
    """
    if (folder / "memory.max").exists():  # v2: on running out, the whole cgroup is killed at once
        write_control(folder / "memory.max", str(limit))
        extras = (("memory.swap.max", "0"), ("memory.oom.group", "1"))
    else:  # v1: memsw counts memory and swap together, so equal limits leave no swap
        write_control(folder / "memory.limit_in_bytes", str(limit))
        extras = (("memory.memsw.limit_in_bytes", str(limit)), ("memory.swappiness", "0"))
    for name, value in extras:  # where the machine has no swap (accounting), these files are missing
        try:
            write_control(folder / name, value)
        except OSError:
            pass


def create_memory(limit: int, shared: Path | None = None, candidates: list[Path] | None = None) -> Path | None:
    """A memory cgroup holding a kernel to ``limit`` bytes, or None where none can be made here.

    What it counts is what the kernel's processes make resident, together: their own memory, their
    children's, ``memfd`` and shared memory, and the pages of the sandbox's tmpfs (its scratch folder and
    /dev/shm), which a per-process address-space limit does not see. On cgroup v2 a process is in one
    cgroup only, so a kernel's pids cgroup ``shared`` gets the limit where it offers the controller (and
    None where it does not); on v1 the memory hierarchy has cgroups of its own, under the grader's.
    """
    if limit <= 0:
        return None
    if shared is not None and (shared / "cgroup.controllers").exists():  # v2
        if not _offered(shared, "memory"):
            return None
        try:
            _limit_memory(shared, limit)
            return shared
        except OSError:
            return None
    for parent in parent_candidates(controller="memory") if candidates is None else candidates:
        folder = parent / f"{CGROUP_PREFIX}{owner_tag() or os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            _limit_memory(folder, limit)
            return folder
        except OSError:
            remove(folder)
    return None


#: oom_score_adj of every process of a kernel's sandbox: the out-of-memory killer takes them first, and,
#: set by a process holding CAP_SYS_RESOURCE (root mostly does), no process of theirs may lower it again.
KERNEL_OOM_SCORE = 1000
#: oom_score_adj of the grading processes (``attnlab autograde``, its workers and their fork servers; a
#: process without CAP_SYS_RESOURCE cannot go below 0): the killer takes them last, so that a run always
#: ends with its summary and report.
GRADER_OOM_SCORE = -900


def protect_grader(score: int = GRADER_OOM_SCORE) -> int | None:
    """Give this process (and the processes it starts from now on) ``score`` as oom_score_adj, or as low
    as it may (0 without CAP_SYS_RESOURCE); the value set, None where /proc takes neither."""
    for value in dict.fromkeys((score, max(score, 0))):
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write(str(value))
            return value
        except OSError:
            continue
    return None


def enter(folder: Path | list[Path] | None, cmd: list[str], oom_score: int | None = None) -> list[str]:
    """``cmd`` started inside the cgroup ``folder`` (or each cgroup of a list: a v1 machine's pids and memory
    cgroups), with ``oom_score`` as its oom_score_adj where given; unchanged when there is neither. ``sh``
    moves itself in and execs ``cmd``, so every process ``cmd`` starts is counted; if a move fails,
    nothing starts."""
    folders = [f for f in ([folder] if isinstance(folder, (str, Path)) else folder or []) if f]
    if not folders and oom_score is None:
        return cmd
    steps = [f'echo $$ > "${i}/cgroup.procs"' for i in range(len(folders))]
    if oom_score is not None:  # the kernel asks for this (it only raises it), so it cannot fail here
        steps.append(f"{{ echo {int(oom_score)} > /proc/self/oom_score_adj || :; }} 2>/dev/null")
    if len(folders) > 1:
        steps.append(f"shift {len(folders) - 1}")
    script = " && ".join([*steps, 'exec "$@"'])
    return ["/bin/sh", "-c", script, *(map(str, folders) if folders else ["sh"]), *cmd]


def remove(folder: Path | None, wait_s: float = 2.0) -> bool:
    """Kill what is left in the cgroup ``folder`` and remove it; False if it could not be removed (the
    caller logs it: :func:`sweep` removes it at the next run)."""
    if folder is None:
        return True
    deadline = time.monotonic() + wait_s
    try:  # cgroup v2 (Linux >= 5.14): the kernel kills every member, no pid can be reused meanwhile
        write_control(folder / "cgroup.kill", "1")
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
    start time in their names (:func:`owner_tag`): another container's, or a live grader's, stay."""
    mine = owner_tag()
    if mine is None:
        return 0
    removed = 0
    for parent in dict.fromkeys([*parent_candidates(), *parent_candidates(controller="memory")]):
        try:
            left = [c for c in parent.iterdir() if c.name.startswith(CGROUP_PREFIX)]
        except OSError:
            continue
        for cgroup in left:
            parts = cgroup.name[len(CGROUP_PREFIX):].split("-")
            if len(parts) != 4 or parts[0] != mine.split("-")[0] or not parts[1].isdigit():
                continue
            if owner_tag(int(parts[1])) != "-".join(parts[:3]) and remove(cgroup):
                removed += 1
    return removed


def prepare() -> None:
    """Before grading (``attnlab autograde``): on cgroup v2, let this process's cgroup hold the kernels'
    cgroups, moving its processes into a leaf child where needed (:func:`_move_to_leaf`); then remove
    left-over kernel cgroups (:func:`sweep`); lower this process's oom_score_adj (:func:`protect_grader`)."""
    protect_grader()
    if max_tasks() > 0:
        parent_candidates(prepare=True)
    parent_candidates(prepare=True, controller="memory")
    describe.cache_clear()
    describe_memory.cache_clear()
    sweep()


def remove_left_over(path: str) -> None:
    """Remove a kernel's cgroup recorded by a grading worker that died (``path`` is ignored unless it
    is one of this module's cgroups)."""
    if Path(path).name.startswith(CGROUP_PREFIX) and Path(path).is_relative_to(CGROUP_ROOT):
        remove(Path(path))


def _bwrap_makes_user_namespaces() -> bool:
    """bwrap run by this (non-root) account gives each sandbox a user namespace: it is not setuid root."""
    import stat

    from .bwrap import bwrap_path

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


def own_v2_cgroup(root: Path = CGROUP_ROOT) -> Path | None:
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
    own = own_v2_cgroup()
    try:
        offered = own is not None and "pids" in (own / "cgroup.controllers").read_text().split()
        writable = own is not None and os.access(own / "cgroup.subtree_control", os.W_OK)
    except OSError:
        offered = writable = False
    if offered and writable:
        return True, (f"at most {n} processes and threads per kernel (pids cgroups inside {own}, after `attnlab "
                      f"autograde` moves that cgroup's processes into its leaf {LEAF})")
    if _bwrap_makes_user_namespaces() and per_namespace_counts():
        return True, f"at most {n} processes and threads per kernel (RLIMIT_NPROC in each sandbox's user namespace)"
    from .accounts import kernel_accounts

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


#: What :func:`describe_memory` tries a memory cgroup with (any figure will do: nothing runs in it).
_PROBE_BYTES = 64 * 2**20


@functools.lru_cache(maxsize=1)
def describe_memory() -> tuple[bool, str]:
    """(bounded, one line): whether each kernel's memory is counted as a whole here (a memory cgroup per
    kernel, :func:`create_memory`), and where. Changes nothing that lasts (``attnlab doctor`` calls it)."""
    probe = create(1) if max_tasks() > 0 else None  # on v2 the memory limit goes into the kernel's pids cgroup
    try:
        folder = create_memory(_PROBE_BYTES, probe)
        if folder is not None and folder != probe:
            remove(folder)
    finally:
        remove(probe)
    if folder is not None:
        return True, (f"each kernel's memory counted as a whole, children, memfd, shared memory and scratch "
                      f"folder included (a memory cgroup under {folder.parent}; no swap)")
    own = own_v2_cgroup()
    if own is not None and _offered(own, "memory") and os.access(own / "cgroup.subtree_control", os.W_OK):
        return True, (f"each kernel's memory counted as a whole (memory cgroups inside {own}, after `attnlab "
                      f"autograde` moves that cgroup's processes into its leaf {LEAF})")
    where = (f"the grader's cgroup {own} offers no memory controller" if own is not None and not _offered(own, "memory")
             else f"the grader's cgroup {own} is not writable" if own is not None
             else "no memory cgroup can be made (cgroup v2 `memory`, or a v1 `memory` hierarchy)")
    return False, (f"a kernel's memory is bounded per process only: {where}. Memory held in a memfd, in shared "
                   f"memory or by child processes escapes the per-process cap; kernels are the out-of-memory "
                   f"killer's first choice (oom_score_adj {KERNEL_OOM_SCORE}), the grader its last where it runs "
                   f"as root. Fix: run the grader as root with a cgroup that offers the memory controller (v2: a "
                   f"systemd unit or scope with Delegate=yes; v1: the `memory` hierarchy)")

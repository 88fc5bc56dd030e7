"""The bwrap command line of a kernel's sandbox (:func:`wrap`; what the sandbox holds and why: the
docstring of :mod:`attnlab.grading.sandbox`): which folders are hidden and which bound back read-only,
the scratch tmpfs, the device nodes, the namespaces, and the first program run inside (:mod:`.drop`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile

from .accounts import KERNEL_ACCOUNT_NAME, account_entries, hand_over, kernel_account, with_line
from .devices import device_groups, gpu_nodes
from .drop import DROP_COMMAND, FILTER_COMMAND
from .environment import scratch_env
from .scratch import given_folder, scratch_bytes
from .syscalls import seccomp_program

#: Size of each tmpfs the sandbox mounts besides the scratch folder: its private /dev/shm and the
#: (read-only) hiding ones.
TMPFS_BYTES = 512 * 2**20
#: Folders hidden behind an empty read-only tmpfs (besides the course folder and $HOME). /sys/fs/cgroup:
#: the host's cgroups (every kernel's, with their task counts and pids) are none of a kernel's business.
HIDDEN = ("/tmp", "/var/tmp", "/home", "/root", "/run", "/mnt", "/media", "/srv", "/sys/fs/cgroup")
#: Kernel settings under the sandbox's new /proc, bound read-only over it (bwrap leaves /proc/sys
#: writable where its own writability test fails, as it does for root).
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")
_AUTO = object()


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_version() -> tuple[int, ...]:
    """bwrap's version, (0,) where it cannot be read. ``--size`` (a cap on each tmpfs) came in 0.8.0;
    Ubuntu 22.04 ships 0.6.1, whose sandboxes then get tmpfs of the kernel's default size."""
    try:
        out = subprocess.run([bwrap_path() or "bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout
        return tuple(int(x) for x in out.split()[-1].split(".")[:3])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return (0,)


def _course_roots() -> list[str]:
    """Folders to hide besides :data:`HIDDEN`: the working folder (nbgrader runs in the course
    folder, gradebook included) and the grader's temporary folder, where every other kernel's
    scratch folder lives (``TMPDIR`` need not be /tmp)."""
    return [os.getcwd(), tempfile.gettempdir()]


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def needed_read_only() -> list[str]:
    """What the kernel must read from hidden folders: the interpreter, sys.path, the package."""
    import attnlab

    paths = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.abspath(attnlab.__file__)))]
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    out = []
    for p in paths:
        real = os.path.realpath(p)
        for q in dict.fromkeys((p, real)):
            if os.path.exists(q) and q not in out:
                out.append(q)
    return out


def _rebind(path: str, hide: list[str]) -> bool:
    """Whether ``path`` must be bound back: it lies inside a hidden folder, and binding it does not
    undo the hiding (it is no hidden folder, nor one of their parents, e.g. the course folder that
    ``python -m`` puts first on the grader's own sys.path)."""
    real = os.path.realpath(path)
    inside = _under(real, hide) or _under(path, hide)
    uncovers = any(_under(h, [real]) or _under(h, [path]) for h in hide)
    return inside and not uncovers


def mount_point_parents(path: str, hide: list[str], made: set[str]) -> list[str]:
    """bwrap arguments that make the folders between the innermost hidden folder holding ``path`` and
    ``path`` itself open to all (0755), as on the host: bwrap would make them 0700, which a kernel
    account (:func:`kernel_account`) cannot pass on its way to the interpreter or its scratch folder."""
    inside = [h for h in hide if _under(path, [h])]
    if not inside:
        return []
    top, args = max(inside, key=len).rstrip("/"), []
    parts = path[len(top):].strip("/").split("/")[:-1]
    for i in range(len(parts)):
        folder = top + "/" + "/".join(parts[:i + 1])
        if folder not in made:
            made.add(folder)
            args += ["--perms", "0755", "--dir", folder]
    return args


def wrap(cmd: list[str], scratch: str, ipc_dir: str | None, read_only: list[str] = (),
         hidden: list[str] | None = None, gpu: bool = True, account: int | None | object = _AUTO,
         etc_dir: str | None = None, info_fd: int | None = None, scratch_size: int | None = None) -> list[str]:
    """``cmd`` as a bwrap command line: scratch (in the sandbox a tmpfs of ``scratch_size`` bytes,
    default :func:`scratch_bytes`; the host's folder of that name, where the grader puts the kernel's
    files, is bound read-only beside it, :func:`given_folder`), ``ipc_dir`` (read-write, the kernel's
    sockets), ``read_only`` files bound back, the GPU's device nodes unless ``gpu`` is False; see
    the module docstring for the rest.

    ``account``: the uid ``cmd`` runs as (default: a new :func:`kernel_account`; None: the grader's).
    With one, this also changes the file system: scratch and ``ipc_dir`` are handed over to it
    (:func:`hand_over`), and the account's copies of /etc/passwd and /etc/group are written into
    ``etc_dir``, a folder of the grader's that the kernel cannot write (without one, the account has
    no name in the sandbox).

    ``info_fd``: a file descriptor bwrap writes its sandbox's PID and namespaces to (``--info-fd``,
    JSON), for the fork server (:mod:`.forkserver`).

    Raises:
        OSError: handing a folder over or writing into ``etc_dir`` failed.
    """
    if account is _AUTO:
        account = kernel_account()
    home = os.path.expanduser("~")
    hide = [h for h in dict.fromkeys([*HIDDEN, home, *(hidden if hidden is not None else _course_roots())])
            if h and h != "/" and os.path.isdir(h)]
    hide = [os.path.realpath(h) for h in hide]
    hide.sort(key=len)  # parents first: a tmpfs over a folder hides the mounts made before it under it
    args = [bwrap_path() or "bwrap", *(["--info-fd", str(info_fd)] if info_fd is not None else []),
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # the kernel runs as uid 0 when the grader is root, and sysctls need no capability: a writable
    # kernel.core_pattern runs any program as root outside every namespace (red team, 2026-12-01)
    args += [a for path in _PROC_READ_ONLY if os.path.exists(path) for a in ("--ro-bind", path, path)]
    devices = gpu_nodes() if gpu else []
    for dev in devices:
        args += ["--dev-bind", dev, dev]
    size = ["--size", str(TMPFS_BYTES)] if bwrap_version() >= (0, 8) else []
    args += ["--perms", "1777", *size, "--tmpfs", "/dev/shm"]
    for h in hide:
        args += [*size, "--tmpfs", h]
    made: set[str] = set()
    for p in [*needed_read_only(), *read_only]:
        if _rebind(p, hide):
            args += [*mount_point_parents(p, hide, made), "--ro-bind", p, p]
    # the scratch folder is a tmpfs of the sandbox: its size is capped, its pages count in the kernel's
    # memory cgroup, and it vanishes with the sandbox (no clean-up by the grader, whatever is in it)
    scratch_size = scratch_bytes() if scratch_size is None else scratch_size
    capped = ["--size", str(scratch_size)] if bwrap_version() >= (0, 8) and scratch_size > 0 else []
    args += [*mount_point_parents(scratch, hide, made), "--perms", "1777", *capped, "--tmpfs", scratch,
             "--perms", "1777", "--dir", scratch_env(scratch)["TMPDIR"], "--ro-bind", scratch, given_folder(scratch)]
    if ipc_dir:
        args += [*mount_point_parents(ipc_dir, hide, made), "--bind", ipc_dir, ipc_dir]
    for h in reversed(hide):  # the hiding tmpfs read-only too, once the mount points in it exist
        args += ["--remount-ro", h]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--unshare-net",
             # bwrap started by root keeps root's capabilities in the sandbox unless told: with them a
             # kernel mounts / again without the hiding tmpfs and writes the gradebook (red team, 2026-12-01)
             "--cap-drop", "ALL",
             "--die-with-parent", "--new-session"]
    if account is None:
        args += ["--chdir", scratch]
    for key, value in scratch_env(scratch).items():
        args += ["--setenv", key, value]
    args += ["--unsetenv", "JPY_PARENT_PID"]  # see kernel_environment
    if account is None:
        return [*args, "--", sys.executable, "-I", "-S", "-c", FILTER_COMMAND, seccomp_program(), "--", *cmd]
    for folder in (scratch, ipc_dir):
        if folder:
            hand_over(folder, account)
    if etc_dir:  # a kernel's account has a name, as any process's has (pwd.getpwuid, getpass)
        for name, line in account_entries(account, scratch).items():
            args += ["--ro-bind", with_line(f"/etc/{name}", line, os.path.join(etc_dir, name)), f"/etc/{name}"]
    args += ["--setenv", "USER", KERNEL_ACCOUNT_NAME, "--setenv", "LOGNAME", KERNEL_ACCOUNT_NAME]  # as kernel_environment
    # the capabilities the switch to the account needs (SETPCAP: to empty the bounding set; CHOWN: to give it
    # its scratch tmpfs); it drops them all, and bwrap's no_new_privs keeps the kernel from gaining any back
    # through a set-uid program
    args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_CHOWN"]
    groups = ",".join(str(g) for g in device_groups(devices))  # as kernel_groups
    return [*args, "--", sys.executable, "-I", "-S", "-c", DROP_COMMAND, str(account), str(account), groups, scratch,
            seccomp_program(), "--", *cmd]

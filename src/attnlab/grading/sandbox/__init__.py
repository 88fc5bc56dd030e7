"""Run a notebook's kernel in a bubblewrap sandbox: learner code sees one private scratch folder.

`bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, Debian's ``bubblewrap``)
builds a throwaway mount, PID, IPC and network namespace around the kernel process. Inside:

- no capabilities (``--cap-drop ALL``), also when the grader runs as root: the mounts below cannot
  be undone or redone from inside; ``/proc/sys`` and ``/proc/sysrq-trigger`` are read-only (uid 0
  needs no capability to write a sysctl such as ``kernel.core_pattern``);
- when the grader runs as root, the kernel runs as an account of its own (:func:`kernel_account`: a
  uid and gid from :data:`KERNEL_IDS` that no account or group of the machine resolves to), so it
  cannot read what only root may read and is still visible (``/etc/shadow``, SSH host keys) and
  print it into the feedback a student gets back; RLIMIT_NPROC then counts that kernel's tasks
  alone. bwrap keeps ``CAP_SETUID``, ``CAP_SETGID`` and ``CAP_SETPCAP`` for a few lines of ``python
  -I -S`` (:data:`.drop.DROP_COMMAND`) that empty the bounding set, switch to the account, join a session keyring
  of its own, check that no capability is left and exec the kernel. Run by another account,
  bwrap's user namespace already gives the kernel no more rights than the grader's account;
- the whole file system is read-only (``--ro-bind / /``); the course folder (gradebook.db,
  submitted/, autograded/), every home folder, ``/tmp``, ``/var/tmp`` and ``/run`` are hidden
  behind empty tmpfs mounts, and only what the kernel needs is bound back read-only: the
  interpreter's prefix, each ``sys.path`` entry, the support package and the kernel's connection
  file;
- the only writable places are the notebook's scratch folder (HOME, TMPDIR and every cache or config
  folder point into it) and the sandbox's own small, empty ``/dev/shm``, both tmpfs of the sandbox
  that vanish with it, whatever is in them (the tmpfs that hide folders are read-only). The scratch
  folder has a size (:func:`scratch_bytes`, ENOSPC past it); what the grader hands the kernel (the
  host's scratch folder) is bound read-only in it (:func:`given_folder`) and copied in before any
  learner code runs (:func:`take_given`). The kernel's socket folder is on the grader's disk, and its
  account may write there only until its sockets are made (:meth:`SandboxedKernelManager.close_ipc`);
- its processes together, children, ``memfd``, shared memory and tmpfs pages included, hold at most
  ``memory_bytes`` (a memory cgroup, :func:`.tasks.create_memory`; no swap), and the out-of-memory
  killer takes them first (oom_score_adj :data:`KERNEL_OOM_SCORE`, which they cannot lower);
- the host's cgroups (``/sys/fs/cgroup``: every kernel's, with its tasks) are hidden, and the
  sandbox's cgroup namespace starts at the kernel's own cgroups (``/proc/self/cgroup`` says ``/``);
- ``PYTHONSAFEPATH=1`` and ``PYTHONNOUSERSITE=1``: neither the working folder nor a user
  site-packages is ever on ``sys.path``;
- at most ``max_tasks`` processes and threads (a pids cgroup per kernel, or RLIMIT_NPROC
  in the kernel's own user namespace: :mod:`.tasks`), so a fork bomb stalls only its own notebook;
- a PID namespace with bwrap's reaper as PID 1 and ``--die-with-parent``: killing the kernel's
  bwrap process (what jupyter_client does on shutdown) kills every process learner code started,
  and no process outside the sandbox can be seen or signalled (``--new-session`` also keeps
  ``kill(0, ...)`` inside);
- no network but loopback of its own (``--unshare-net``): the kernel talks to the grader over
  Unix sockets (jupyter's ``ipc`` transport) in a folder bound into the sandbox;
- the GPU's device nodes (``/dev/nvidia*``, ``/dev/dri``) are bound in when the host has them; when
  the grading worker was given one GPU's node (:data:`GPU_DEVICE_ENV`, set by :mod:`attnlab.grading.host.parallel` for
  ``--jobs``), only that node and the driver's control nodes (:data:`GPU_CONTROL_NODES`), so a
  kernel cannot allocate memory on another worker's GPU (MIG instances of one GPU share its node and
  ``/dev/nvidia-caps``: a kernel can reach a sibling instance); a kernel started with ``gpu=False`` (a
  notebook with no GPU case, :func:`attnlab.grading.course.uses_gpu`) gets no GPU node at all.

:class:`SandboxedKernelManager` is a jupyter_client kernel manager that starts every kernel this
way (a root grader's kernels are forked into the sandbox by :mod:`.forkserver` instead of started by
bwrap: bwrap builds the same sandbox around a placeholder, and the forked kernel drops to its account
with :data:`DROP_FUNCTION`, as bwrap's kernels do), each with a fresh scratch folder
(:attr:`SandboxedKernelManager.scratch`), removed when the kernel is cleaned up (:func:`remove_tree`:
no depth, closed folder or link stops it). :func:`check` says whether bwrap works here; :func:`require` refuses to go
on without it unless the instructor accepted the risk (:data:`UNSAFE_ENV`).

The package's modules, one job each (this file keeps the path ``attnlab.grading.sandbox`` and its names,
which the grader, the learner's tools and the tests import, and says whether the sandbox works here):

- :mod:`.bwrap`: the bwrap command line (:func:`wrap`);
- :mod:`.accounts`: the kernels' uids under a root grader, and what is handed over to them;
- :mod:`.devices`: the GPU device nodes bound in, and the groups needed to open them;
- :mod:`.environment`: a kernel's environment (secrets left out, every folder in its scratch folder);
- :mod:`.scratch`: the scratch folder's size, the files handed in, and its removal;
- :mod:`.syscalls`: the seccomp filter; :mod:`.drop`: the lines that drop to the account and install it;
- :mod:`.manager`: :class:`SandboxedKernelManager`; :mod:`.forkserver`: kernels forked from a warm server;
- :mod:`.tasks`: the task and memory cgroups; :mod:`.proctree`: the processes a grading run leaves.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile

from ..course import GPU_DEVICE_ENV
from . import tasks
from .accounts import (KERNEL_ACCOUNT_ENV, KERNEL_ACCOUNT_NAME, KERNEL_IDS, hand_over, kernel_account,
                       kernel_accounts)
from .bwrap import HIDDEN, TMPFS_BYTES, bwrap_path, bwrap_version, wrap
from .devices import GPU_CONTROL_NODES, closed_gpu_nodes, gpu_nodes, kernel_groups
from .drop import DROP_FUNCTION
from .environment import kernel_env, kernel_environment, scratch_env
from .manager import KERNEL_OOM_SCORE, SANDBOX_START_TIMEOUT, SandboxedKernelManager
from .scratch import GIVEN, SCRATCH_BYTES, SCRATCH_ENV, given_folder, remove_tree, scratch_bytes, take_given
from .syscalls import SECCOMP_DENIED, describe_seccomp, seccomp_filter, seccomp_program

__all__ = ["DROP_FUNCTION", "GIVEN", "GPU_CONTROL_NODES", "GPU_DEVICE_ENV", "HIDDEN", "INSTALL_HINT", "KERNEL_ACCOUNT_ENV",
           "KERNEL_ACCOUNT_NAME", "KERNEL_IDS", "KERNEL_OOM_SCORE", "RISK", "SANDBOX_START_TIMEOUT", "SCRATCH_BYTES",
           "SCRATCH_ENV", "SECCOMP_DENIED", "TMPFS_BYTES", "UNSAFE_ENV", "SandboxUnavailable", "SandboxedKernelManager",
           "bwrap_path", "bwrap_version", "check", "closed_gpu_nodes", "describe_seccomp", "given_folder",
           "gpu_nodes", "hand_over", "kernel_account", "kernel_accounts", "kernel_env", "kernel_environment",
           "kernel_groups", "remove_tree", "require", "scratch_bytes", "scratch_env", "seccomp_filter",
           "seccomp_program", "take_given", "tasks", "wrap"]

#: Set to "1" (by ``--unsafe-no-sandbox``, or by hand for plain nbgrader commands) to grade without
#: the sandbox; read by nbgrader_config.py.
UNSAFE_ENV = "ATTNLAB_UNSAFE_NO_SANDBOX"

RISK = ("Without the sandbox, learner code runs with your account's rights: it can read and rewrite "
        "gradebook.db and other students' submissions, plant a module named `attnlab` or a .pth file "
        "that changes the grades of every notebook graded after it, leave processes running after "
        "grading, and kill the grader.")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`)"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start a sandbox here, and the unsafe flag was not given."""


def starts_as(account) -> str:
    """"" when bwrap starts this interpreter, importing the course's package, in a kernel's sandbox as
    ``account``; else what went wrong."""
    scratch = tempfile.mkdtemp(prefix="attnlab-sandbox-check-")
    try:
        # it writes into its scratch folder (a tmpfs the host does not see) and reads it back
        cmd = wrap([sys.executable, "-c", "import attnlab, os; open('ok', 'w').write(str(os.getpid())); "
                                          "print('pid', open('ok').read())"],
                   _made(os.path.join(scratch, "scratch")), ipc_dir=None, account=account)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        ok = proc.stdout.strip() == "pid 2"
        return "" if proc.returncode == 0 and ok else (proc.stderr or proc.stdout).strip()[-300:] or "no output"
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        remove_tree(scratch)


@functools.lru_cache(maxsize=1)
def check() -> tuple[bool, str]:
    """(works, detail): whether bwrap starts this interpreter in the sandbox used for kernels, as the
    account kernels run as (:func:`kernel_account`)."""
    exe = bwrap_path()
    if exe is None:
        return False, "bwrap (bubblewrap) is not installed"
    account = kernel_account()
    error = starts_as(account)  # as the account a kernel would get
    if error and account is not None and not starts_as(None):
        return False, (f"kernels of a root grader run as an account of their own (uid {account}), and it cannot "
                       f"start Python with the course's package in the sandbox: {error}. Make the interpreter, its "
                       f"packages and the course readable by all (`chmod -R o+rX` on their folders and the folders "
                       f"above them), or set {KERNEL_ACCOUNT_ENV}=root to keep kernels at uid 0, where learner code "
                       f"can read every root-only file the sandbox shows (/etc/shadow) into its feedback")
    if error:
        return False, f"bwrap could not start a sandbox: {error}"
    closed = closed_gpu_nodes() if account is not None else []
    if closed:
        return False, (f"kernels of a root grader run as an account of their own, and the GPU's device nodes "
                       f"{', '.join(closed)} are open to root only: every GPU case would fail. Open them to all "
                       f"(the NVIDIA driver's default, NVreg_DeviceFileMode=0666) or to a group other than root, "
                       f"or set {KERNEL_ACCOUNT_ENV}=root to keep kernels at uid 0")
    from .forkserver import ENV as FORK_ENV, enabled

    forked = (f", forked from a fork server that imported torch once ({FORK_ENV}=0: started by bwrap)"
              if enabled() else f", started by bwrap ({FORK_ENV}=0)")
    who = (f"each kernel as an account of its own (uid >= {KERNEL_IDS.start:#x}), not root{forked}"
           if account is not None else f"kernels as this account ({kernel_accounts()})")
    return True, f"bubblewrap {'.'.join(map(str, bwrap_version()))} at {exe}; {who}"


def require(allow_unsafe: bool = False) -> str:
    """Check the sandbox before grading; the line to print about it.

    Args:
        allow_unsafe: the instructor passed ``--unsafe-no-sandbox``: grade without the sandbox
            (also sets :data:`UNSAFE_ENV` for the grading processes) and warn.

    Raises:
        SandboxUnavailable: bwrap is missing or fails and ``allow_unsafe`` is False; the message
            says why, what to install, and what is at risk with the unsafe flag.
    """
    if allow_unsafe:
        os.environ[UNSAFE_ENV] = "1"
        return "WARNING: grading WITHOUT the sandbox (--unsafe-no-sandbox). " + RISK
    os.environ.pop(UNSAFE_ENV, None)
    ok, detail = check()
    if not ok:
        raise SandboxUnavailable(
            f"grading refuses to start: each notebook's kernel runs in a bubblewrap sandbox, and {detail}.\n"
            f"Fix: {INSTALL_HINT}; `attnlab doctor` checks it.\n"
            f"Or pass --unsafe-no-sandbox to grade anyway. {RISK}")
    return f"sandbox: {detail}"


def _made(folder: str) -> str:
    os.mkdir(folder, 0o700)
    return folder

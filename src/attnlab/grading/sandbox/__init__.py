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
  -I -S`` (:data:`_DROP`) that empty the bounding set, switch to the account, join a session keyring
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
"""
# Length: To split (issue 32): its bwrap helpers (used by forkserver and tasks, the package's one
# import circle) go to a module of their own; this file stays the home of attnlab.grading.sandbox, which tests
# and samples name.

from __future__ import annotations

import errno
import functools
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

from . import tasks as _tasks
from ..course import GPU_DEVICE_ENV  # set per worker by the plan

#: What a database client may read (the gradebook's ``ATTNLAB_DB_URL``, libpq's PG*, the common
#: DATABASE_URL) and the course secret (leaderboard ids, the tests' seed keys): the grader's secrets,
#: never given to a kernel.
_SECRET = re.compile(r"^(ATTNLAB_DB_URL|DATABASE_URL|PG[A-Z_]*|ATTNLAB_COURSE_SECRET)$")

#: Set to "1" (by ``--unsafe-no-sandbox``, or by hand for plain nbgrader commands) to grade without
#: the sandbox; read by nbgrader_config.py.
UNSAFE_ENV = "ATTNLAB_UNSAFE_NO_SANDBOX"


def kernel_env(env: dict | None = None) -> dict:
    """A copy of ``env`` (default: this process's) without the gradebook's URL or libpq's settings
    (``ATTNLAB_DB_URL``, ``DATABASE_URL``, ``PGPASSWORD``, ``PGPASSFILE``, every ``PG*``) or the course
    secret (``ATTNLAB_COURSE_SECRET``): grades are written by nbgrader outside the sandbox, never by
    the kernel."""
    return {k: v for k, v in (os.environ if env is None else env).items() if not _SECRET.match(k)}


#: Size of each tmpfs the sandbox mounts besides the scratch folder: its private /dev/shm and the
#: (read-only) hiding ones.
TMPFS_BYTES = 512 * 2**20
#: Size of a kernel's scratch folder, a tmpfs of its sandbox (:data:`SCRATCH_ENV` overrides it, in MiB):
#: writing past it fails with ENOSPC in the kernel; it vanishes with the sandbox, whatever is in it.
SCRATCH_BYTES = 1024 * 2**20
SCRATCH_ENV = "ATTNLAB_KERNEL_SCRATCH_MB"
#: oom_score_adj of a kernel's processes (:data:`.tasks.KERNEL_OOM_SCORE`).
KERNEL_OOM_SCORE = _tasks.KERNEL_OOM_SCORE
#: Folders hidden behind an empty read-only tmpfs (besides the course folder and $HOME). /sys/fs/cgroup:
#: the host's cgroups (every kernel's, with their task counts and pids) are none of a kernel's business.
HIDDEN = ("/tmp", "/var/tmp", "/home", "/root", "/run", "/mnt", "/media", "/srv", "/sys/fs/cgroup")
#: Where, in the sandbox, the kernel finds what the grader handed it (the host's scratch folder, read-only):
#: a folder of this name in its scratch folder (:func:`take_given` copies it into the scratch folder).
GIVEN = ".given"

#: Kernel settings under the sandbox's new /proc, bound read-only over it (bwrap leaves /proc/sys
#: writable where its own writability test fails, as it does for root).
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")
#: Driver nodes every CUDA process opens besides its GPU's own node (those present are bound).
GPU_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
#: The uids (each also the gid) a root grader's kernels run as, handed out in turn (:func:`kernel_account`):
#: past the ranges systemd gives to users, dynamic users and containers (0x70000000 and above is
#: unused there), so no file or process on the machine belongs to one.
KERNEL_IDS = range(0x75000000, 0x75000000 + 2**20)
#: The kernel account's name in the sandbox's /etc/passwd and /etc/group (and USER, LOGNAME).
KERNEL_ACCOUNT_NAME = "attnlab-kernel"
#: "root" keeps a root grader's kernels at uid 0 (not recommended: see :func:`kernel_account`).
KERNEL_ACCOUNT_ENV = "ATTNLAB_KERNEL_ACCOUNT"
#: ``drop(uid, gid, groups, folder)``: become the kernel's account with no capability left, in its
#: scratch folder. Run inside the sandbox by ``python -I -S`` (no site, no environment, no working
#: folder on sys.path: nothing a submission wrote is read) before bwrap's kernels (:data:`_DROP`), and
#: by the fork server's kernels (:mod:`.forkserver`). It enters the scratch folder as the account: root
#: without capabilities may not (bwrap's --chdir).
DROP_FUNCTION = """import ctypes, os, sys
def drop(uid, gid, groups, folder):
    libc = ctypes.CDLL(None, use_errno=True)
    try:  # the scratch folder (a tmpfs bwrap made as root) becomes the account's, as on the host
        os.chown(folder, uid, gid)
    except OSError:
        pass
    cap = 0
    while libc.prctl(24, ctypes.c_ulong(cap), 0, 0, 0) == 0:  # PR_CAPBSET_DROP, up to the last capability
        cap += 1
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # a session keyring of its own: the one inherited (a container's, a service's) would stay usable by a
    # process that possesses it, whatever its uid, and carry keys from one kernel to the next; where keyctl
    # is missing (ENOSYS) or filtered out (EPERM: Docker's default seccomp profile), nobody here can use it
    keyctl = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
    if keyctl and libc.syscall(keyctl, 1, None) < 0 and ctypes.get_errno() not in (1, 38):  # JOIN_SESSION_KEYRING
        sys.exit(f"attnlab sandbox: could not leave the grader's session keyring: {os.strerror(ctypes.get_errno())}")
    # the switch empties the permitted and effective sets; capset empties the inheritable one
    if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:
        sys.exit(f"attnlab sandbox: capset failed: {os.strerror(ctypes.get_errno())}")
    os.chdir(folder)
    caps = [ln.split() for ln in open("/proc/self/status") if ln.startswith(("Cap", "NoNewPrivs"))]
    left = [f"{k} {v}" for k, v in caps if int(v, 16) != (k == "NoNewPrivs:")]
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or left:
        sys.exit(f"attnlab sandbox: could not drop to uid {uid} without capabilities: {left}")
def seccomp(program_hex):
    # a seccomp filter (classic BPF, compiled by the grader: sandbox.seccomp_program) for this process and
    # every thread and child it makes; no_new_privs is set (bwrap and the fork server set it), which
    # lets a process without capabilities install one
    if not program_hex:
        return
    program = bytes.fromhex(program_hex)
    buf = ctypes.create_string_buffer(program, len(program))
    class fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog(len(program) // 8, ctypes.addressof(buf))), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit(f"attnlab sandbox: could not install the seccomp filter: {os.strerror(ctypes.get_errno())}")
"""
#: bwrap's command when kernels run as an account: argv = uid gid groups folder seccomp -- command...
_DROP = DROP_FUNCTION + """drop(int(sys.argv[1]), int(sys.argv[2]), [int(g) for g in sys.argv[3].split(",") if g], sys.argv[4])
seccomp(sys.argv[5])
os.execvp(sys.argv[7], sys.argv[7:])
"""
#: bwrap's command when kernels run as the grader's account (a grader that is not root): argv = seccomp -- command...
_FILTER = DROP_FUNCTION + """seccomp(sys.argv[1])
os.execvp(sys.argv[3], sys.argv[3:])
"""
#: System calls a kernel may not make (they fail with EPERM), and why no notebook needs them. The kernel
#: keyrings (keyctl, add_key, request_key) are kept by the kernel per uid, not per sandbox: keys a kernel
#: adds to its user keyring outlive it and are there for the next kernel of the same uid (every kernel
#: of a grader that is not root; an account's uid once reused), a channel between students (red team,
#: 2026-12-02). Mounts, kexec, module loading, ptrace of the grader and the like are out of reach already
#: (no capability, other namespaces), so the list stays the calls that namespaces and uids do not cover.
SECCOMP_DENIED = ("keyctl", "add_key", "request_key")
_AUTO = object()
#: Seconds bwrap may take to build a sandbox for the fork server's kernel and start its placeholder.
SANDBOX_START_TIMEOUT = 30.0
#: Why the fork server could not start a kernel, each said once per grading process.
_FORK_REFUSALS_SAID: set[str] = set()

RISK = ("Without the sandbox, learner code runs with your account's rights: it can read and rewrite "
        "gradebook.db and other students' submissions, plant a module named `attnlab` or a .pth file "
        "that changes the grades of every notebook graded after it, leave processes running after "
        "grading, and kill the grader.")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`)"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start a sandbox here, and the unsafe flag was not given."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def seccomp_filter() -> tuple[str, str]:
    """(program, why not): the kernels' seccomp filter as hex of classic BPF, built by libseccomp (through
    its Python bindings: Debian's ``python3-seccomp`` or PyPI's ``pyseccomp``) for this machine's
    architecture: :data:`SECCOMP_DENIED` fail with EPERM, everything else is allowed. ("", why) where it
    cannot be built. Built once per process; ``seccomp_filter.cache_clear()`` builds it again (after the
    bindings were installed, or in a test that hides them)."""
    try:
        import seccomp as libseccomp
    except ImportError:
        try:
            import pyseccomp as libseccomp  # loads libseccomp.so.2 on import: OSError where it is missing
        except (ImportError, OSError) as exc:
            return "", (f"no Python bindings for libseccomp (pip install pyseccomp, or Debian's python3-seccomp; "
                        f"both need libseccomp2): {type(exc).__name__}: {exc}")
    try:
        rules = libseccomp.SyscallFilter(defaction=libseccomp.ALLOW)
        for name in SECCOMP_DENIED:
            rules.add_rule(libseccomp.ERRNO(errno.EPERM), name)
        read, write = os.pipe()
        with os.fdopen(write, "wb") as out:
            rules.export_bpf(out)
        with os.fdopen(read, "rb") as inp:
            program = inp.read()
    except Exception as exc:  # noqa: BLE001 (libseccomp missing or too old: say so, as for a missing controller)
        return "", f"libseccomp could not build the filter ({type(exc).__name__}: {exc})"
    return program.hex(), ""


def seccomp_program() -> str:
    """The kernels' seccomp filter (hex of a classic BPF program), "" where none can be built here
    (:func:`describe_seccomp` says why)."""
    return seccomp_filter()[0]


def describe_seccomp() -> tuple[bool, str]:
    """(filtered, a line for doctor and the grader): whether kernels run under the seccomp filter."""
    program, why = seccomp_filter()
    if program:
        return True, f"kernels may not call {', '.join(SECCOMP_DENIED)} (seccomp)"
    return False, (f"kernels run without a seccomp filter: {why}; keys a kernel adds to its uid's keyring "
                   f"outlive it")


@functools.lru_cache(maxsize=1)
def _bwrap_version() -> tuple[int, ...]:
    """bwrap's version, (0,) where it cannot be read. ``--size`` (a cap on each tmpfs) came in 0.8.0;
    Ubuntu 22.04 ships 0.6.1, whose sandboxes then get tmpfs of the kernel's default size."""
    try:
        out = subprocess.run([bwrap_path() or "bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout
        return tuple(int(x) for x in out.split()[-1].split(".")[:3])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return (0,)


def _starts(account) -> str:
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
    error = _starts(account)  # as the account a kernel would get
    if error and account is not None and not _starts(None):
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
    return True, f"bubblewrap {'.'.join(map(str, _bwrap_version()))} at {exe}; {who}"


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


def _course_roots() -> list[str]:
    """Folders to hide besides :data:`HIDDEN`: the working folder (nbgrader runs in the course
    folder, gradebook included) and the grader's temporary folder, where every other kernel's
    scratch folder lives (``TMPDIR`` need not be /tmp)."""
    return [os.getcwd(), tempfile.gettempdir()]


def _mapped(ids: range, map_file: str) -> bool:
    """Whether every id of ``ids`` is mapped in this process's user namespace (``/proc/self/uid_map``
    or ``gid_map``): not so for root in a rootless container, where only a few ids exist."""
    try:
        extents = [tuple(map(int, ln.split())) for ln in Path(map_file).read_text().splitlines() if ln.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= ids.start and ids.stop <= inside + count for inside, _, count in extents)


def kernel_accounts() -> str:
    """Whether a root grader's kernels run as accounts of their own here: "" if so, else why not.

    Not for a grader that is not root (its kernels are its own account, in bwrap's user namespace),
    nor where :data:`KERNEL_ACCOUNT_ENV` is ``root`` (learner code can then read every root-only file
    the sandbox shows, ``/etc/shadow``, and print it into its feedback), nor for root in a user
    namespace that does not map :data:`KERNEL_IDS` (a rootless container: there root is an ordinary
    account of the host already).
    """
    if os.geteuid() != 0:
        return "the grader is not root"
    if os.environ.get(KERNEL_ACCOUNT_ENV, "").strip().lower() == "root":
        return f"{KERNEL_ACCOUNT_ENV}=root"
    if not (_mapped(KERNEL_IDS, "/proc/self/uid_map") and _mapped(KERNEL_IDS, "/proc/self/gid_map")):
        return f"this user namespace maps no uids {KERNEL_IDS.start:#x}-{KERNEL_IDS.stop - 1:#x}"
    return ""


def kernel_account() -> int | None:
    """A new kernel's uid (also its gid): the next one of :data:`KERNEL_IDS` that no account or group of
    this machine resolves to (an LDAP/SSSD directory may hand out ids in that range), or None where
    :func:`kernel_accounts` says kernels keep the grader's account. Each call hands out another."""
    if kernel_accounts():
        return None
    for _ in range(64):
        uid = KERNEL_IDS[_next_account_index()]
        if not _resolves(uid):
            return uid
    raise RuntimeError(f"64 ids in a row from {KERNEL_IDS.start:#x} belong to accounts or groups of this machine: "
                       f"set {KERNEL_ACCOUNT_ENV}=root, or free that range")


def _resolves(uid: int) -> bool:
    """Whether ``uid`` names an account or a group of this machine (files, LDAP, SSSD...)."""
    import grp
    import pwd

    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def _next_account_index() -> int:
    """The next kernel account, counted on in a file of the grader's own folder in its temporary folder
    (hidden from every kernel), under a lock: kernels started on this machine, by any grading process,
    get different uids until all of :data:`KERNEL_IDS` have been given out, so live kernels never share
    one (RLIMIT_NPROC), and what outlives a kernel under its uid (its user keyring) reaches another
    kernel only after a million more. A folder or file that is not the grader's own (another account
    made it first, a link) is not used: then a random account, with a warning."""
    import fcntl

    folder = os.path.join(tempfile.gettempdir(), "attnlab-kernel-uids")
    try:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise OSError(f"{folder} is not a folder of this account's alone")
        fd = os.open(os.path.join(folder, "next"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        return _random_index(exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise OSError("the counter file is not a plain file of its own")
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 32).strip()
        index = int(raw) % len(KERNEL_IDS) if raw.isdigit() else _random_index(None)
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str((index + 1) % len(KERNEL_IDS)).encode())
        return index
    except OSError as exc:
        return _random_index(exc)
    finally:
        os.close(fd)


def _random_index(why: Exception | None) -> int:
    """A random kernel account: a new counter starts anywhere; a counter that cannot be used is warned of."""
    import secrets
    import warnings

    if why is not None:
        warnings.warn(f"attnlab: kernel accounts drawn at random ({why})", RuntimeWarning, stacklevel=3)
    return secrets.randbelow(len(KERNEL_IDS))


def hand_over(path: str, account: int | None) -> None:
    """Make ``path`` (a file, or a folder and everything in it) the kernel account's, so the kernel
    can read and write what the grader put in its scratch folder; nothing when ``account`` is None.
    Links are changed themselves, never their targets.

    Raises:
        OSError: ``chown`` failed (EINVAL for an id this user namespace does not map; EPERM when the
            grader is not root).
    """
    if account is None:
        return
    os.chown(path, account, account, follow_symlinks=False)
    if os.path.isdir(path) and not os.path.islink(path):
        # through folder descriptors: a folder the kernel swaps for a link meanwhile (a restart hands its
        # scratch folder over again) is never followed
        for _, dirs, files, folder in os.fwalk(path, follow_symlinks=False):
            for name in dirs + files:
                os.chown(name, account, account, dir_fd=folder, follow_symlinks=False)


def _account_entries(account: int, home: str) -> dict[str, str]:
    return {"passwd": f"{KERNEL_ACCOUNT_NAME}:x:{account}:{account}:attnlab grading kernel:{home}:/usr/sbin/nologin",
            "group": f"{KERNEL_ACCOUNT_NAME}:x:{account}:"}


def _with_line(source: str, line: str, target: str) -> str:
    """``target``: a copy of ``source`` (the host's /etc/passwd or /etc/group) with ``line`` added,
    readable by all, owned by the grader; bound over ``source`` in the sandbox."""
    try:
        text = Path(source).read_text()
    except OSError:
        text = ""
    with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "w") as f:
        f.write(text + ("" if not text or text.endswith("\n") else "\n") + line + "\n")
    return target


def _device_files(nodes: list[str]):
    """(path, stat) of each bound device node that is not open to all, folders' entries included."""
    for node in nodes:
        paths = [os.path.join(node, n) for n in sorted(os.listdir(node))] if os.path.isdir(node) else [node]
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if st.st_mode & 0o006 != 0o006:
                yield path, st


def _device_groups(nodes: list[str]) -> list[int]:
    """The groups a kernel account needs to open the bound device nodes that are not open to all
    (e.g. ``/dev/nvidia*`` as 0660 root:video on some hosts); never root's group."""
    return sorted({st.st_gid for _, st in _device_files(nodes)} - {0})


def closed_gpu_nodes() -> list[str]:
    """The device nodes every CUDA process opens (a GPU's ``/dev/nvidiaN``, ``nvidiactl``, ``nvidia-uvm``)
    that a kernel account cannot open for reading and writing: not open to all, and their group is
    root's or lacks read-write (the account is given each node's other group). ``/dev/nvidia-caps``
    (0400 root on the H200 host) matters only for a MIG instance, and counts only where the worker was
    given one (``CUDA_VISIBLE_DEVICES=MIG-...``)."""
    mig = "MIG-" in os.environ.get("CUDA_VISIBLE_DEVICES", "")
    needed = re.compile(r"nvidia(\d+|ctl|-uvm)$|nvidia-caps/" if mig else r"nvidia(\d+|ctl|-uvm)$")
    return [path for path, st in _device_files(gpu_nodes())
            if needed.search(path) and (st.st_gid == 0 or st.st_mode & 0o060 != 0o060)]


def gpu_nodes(dev: Path = Path("/dev"), env: dict | None = None) -> list[str]:
    """The device nodes to bind into the sandbox: the worker's own GPU (:data:`GPU_DEVICE_ENV`) and
    the control nodes when it has one, else every ``/dev/nvidia*`` and ``/dev/dri``; those present."""
    own = (os.environ if env is None else env).get(GPU_DEVICE_ENV)
    if own:
        wanted = [Path(own), *(dev / name for name in GPU_CONTROL_NODES)]
    else:
        wanted = [*sorted(dev.glob("nvidia*")), dev / "dri"]
    return [str(p) for p in wanted if p.exists()]


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _needed_read_only() -> list[str]:
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


def _mount_point_parents(path: str, hide: list[str], made: set[str]) -> list[str]:
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


def _made(folder: str) -> str:
    os.mkdir(folder, 0o700)
    return folder


def scratch_bytes() -> int:
    """A kernel's scratch size: :data:`SCRATCH_ENV` (MiB), else :data:`SCRATCH_BYTES`."""
    try:
        return int(float(os.environ[SCRATCH_ENV]) * 2**20)
    except (KeyError, ValueError):
        return SCRATCH_BYTES


def given_folder(scratch: str) -> str:
    """Where a kernel whose scratch folder is ``scratch`` finds, read-only, what the grader put there."""
    return os.path.join(scratch, GIVEN)


def take_given(scratch: str) -> int:
    """In the kernel, before any learner code: copy what the grader handed it (:func:`given_folder`, the
    host's scratch folder, read-only) into its scratch folder; the number of files copied. Links are
    neither followed nor copied (the grader writes plain files and folders only)."""
    given, copied = given_folder(scratch), 0
    for folder, _, files in os.walk(given):
        target = os.path.normpath(os.path.join(scratch, os.path.relpath(folder, given)))
        os.makedirs(target, exist_ok=True)
        for name in files:
            if not os.path.islink(os.path.join(folder, name)):
                shutil.copyfile(os.path.join(folder, name), os.path.join(target, name))
                copied += 1
    return copied


def remove_tree(path: str) -> bool:
    """Remove ``path`` and everything under it, whatever a kernel made there; whether it is gone.

    ``shutil.rmtree`` recurses once per level (RecursionError at about a thousand nested folders, which
    ``ignore_errors`` does not catch) and stops at a folder it may not read. This walks down one folder
    at a time through descriptors (``openat`` with ``O_NOFOLLOW``: a link is removed, never followed),
    comes back up through ``..`` and checks each step against the device and inode it came down through,
    makes each folder its own account may not enter writable for it first (chmod 000), and never crosses
    into another file system. Whatever that leaves (a mount point, an inode that changed under it) goes
    to ``rm -rf --one-file-system``.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return _rm_rf(path)
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return True
        _empty_folder(path, st)
        os.rmdir(path)
        return True
    except OSError:
        return _rm_rf(path)


def _open_folder(name: str, dir_fd: int | None) -> int:
    """A descriptor of the folder ``name`` (in ``dir_fd``), made readable and writable by this account
    first when it is not (raises OSError for a link or anything but a folder)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:
        path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:  # an O_PATH descriptor takes no fchmod: its /proc name does, and names that very folder
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
        finally:
            os.close(path_fd)
        return os.open(name, flags, dir_fd=dir_fd)


def _empty_folder(path: str, top: os.stat_result) -> None:
    """Remove everything inside the folder ``path`` (see :func:`remove_tree`); one descriptor open at a
    time, so no depth runs out of descriptors or stack.

    Raises:
        OSError: something could not be removed, or a folder changed under the walk.
    """
    fd = _open_folder(path, None)
    # the way down: (device, inode, name in its parent, subfolders left) per level
    trail = [(top.st_dev, top.st_ino, path, None)]
    try:
        while True:
            dev, ino, name, left = trail[-1]
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (dev, ino):
                raise OSError(f"{path}: a folder changed during its removal")
            if left is None:  # first visit: files go now, subfolders one by one
                if not st.st_mode & 0o200 or not st.st_mode & 0o100:
                    os.fchmod(fd, 0o700)
                left = []
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            left.append(entry.name)
                        else:
                            os.unlink(entry.name, dir_fd=fd)
                trail[-1] = (dev, ino, name, left)
            if left:
                sub = left.pop()
                child = _open_folder(sub, fd)
                cst = os.fstat(child)
                if cst.st_dev != top.st_dev:  # a mount point: not ours to empty
                    os.close(child)
                    raise OSError(f"{path}: {sub} is on another file system")
                os.close(fd)
                fd = child
                trail.append((cst.st_dev, cst.st_ino, sub, None))
                continue
            if len(trail) == 1:
                return
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = parent
            trail.pop()
            pdev, pino = trail[-1][:2]
            pst = os.fstat(fd)
            if (pst.st_dev, pst.st_ino) != (pdev, pino):
                raise OSError(f"{path}: a folder moved during its removal")
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def _rm_rf(path: str) -> bool:
    """The last resort of :func:`remove_tree`: GNU rm (iterative; links removed, not followed)."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", path], capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:  # not even visible to this account: not removed by it either
        pass
    return False


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
    size = ["--size", str(TMPFS_BYTES)] if _bwrap_version() >= (0, 8) else []
    args += ["--perms", "1777", *size, "--tmpfs", "/dev/shm"]
    for h in hide:
        args += [*size, "--tmpfs", h]
    made: set[str] = set()
    for p in [*_needed_read_only(), *read_only]:
        if _rebind(p, hide):
            args += [*_mount_point_parents(p, hide, made), "--ro-bind", p, p]
    # the scratch folder is a tmpfs of the sandbox: its size is capped, its pages count in the kernel's
    # memory cgroup, and it vanishes with the sandbox (no clean-up by the grader, whatever is in it)
    scratch_size = scratch_bytes() if scratch_size is None else scratch_size
    capped = ["--size", str(scratch_size)] if _bwrap_version() >= (0, 8) and scratch_size > 0 else []
    args += [*_mount_point_parents(scratch, hide, made), "--perms", "1777", *capped, "--tmpfs", scratch,
             "--perms", "1777", "--dir", scratch_env(scratch)["TMPDIR"], "--ro-bind", scratch, given_folder(scratch)]
    if ipc_dir:
        args += [*_mount_point_parents(ipc_dir, hide, made), "--bind", ipc_dir, ipc_dir]
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
        return [*args, "--", sys.executable, "-I", "-S", "-c", _FILTER, seccomp_program(), "--", *cmd]
    for folder in (scratch, ipc_dir):
        if folder:
            hand_over(folder, account)
    if etc_dir:  # a kernel's account has a name, as any process's has (pwd.getpwuid, getpass)
        for name, line in _account_entries(account, scratch).items():
            args += ["--ro-bind", _with_line(f"/etc/{name}", line, os.path.join(etc_dir, name)), f"/etc/{name}"]
    args += ["--setenv", "USER", KERNEL_ACCOUNT_NAME, "--setenv", "LOGNAME", KERNEL_ACCOUNT_NAME]  # as kernel_environment
    # the capabilities the switch to the account needs (SETPCAP: to empty the bounding set; CHOWN: to give it
    # its scratch tmpfs); it drops them all, and bwrap's no_new_privs keeps the kernel from gaining any back
    # through a set-uid program
    args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_CHOWN"]
    groups = ",".join(str(g) for g in _device_groups(devices))  # as kernel_groups
    return [*args, "--", sys.executable, "-I", "-S", "-c", _DROP, str(account), str(account), groups, scratch,
            seccomp_program(), "--", *cmd]


def kernel_environment(env: dict, scratch: str, account: int | None) -> dict[str, str]:
    """The environment a kernel started by :func:`wrap` with the environment ``env`` has (its
    ``--setenv`` and ``--unsetenv``), for the fork server's kernels."""
    env = {**env, **scratch_env(scratch), "PWD": scratch}  # where it runs (bwrap's kernels say "/")
    # ipykernel would take PID 1 (bwrap's reaper) for a dead parent and quit; --die-with-parent
    # already ties the kernel's life to the grader's
    env.pop("JPY_PARENT_PID", None)
    if account is not None:
        env.update(USER=KERNEL_ACCOUNT_NAME, LOGNAME=KERNEL_ACCOUNT_NAME)
    return env


def kernel_groups(gpu: bool) -> list[int]:
    """The supplementary groups of a kernel account started by :func:`wrap` with this ``gpu``."""
    return _device_groups(gpu_nodes() if gpu else [])


def _whole_json(text: bytes) -> bool:
    """Whether ``text`` is one whole JSON value (what bwrap writes on ``--info-fd``: ``child-pid``, the
    host's pid of the sandbox's PID 1, and each namespace's inode number)."""
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def scratch_env(scratch: str) -> dict[str, str]:
    """Environment of sandboxed code: every home, cache and config folder inside the scratch folder."""
    tmp = os.path.join(scratch, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    return {
        "HOME": scratch, "TMPDIR": tmp, "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUSERBASE": os.path.join(scratch, ".local"),
        "XDG_CACHE_HOME": os.path.join(scratch, ".cache"), "XDG_CONFIG_HOME": os.path.join(scratch, ".config"),
        "XDG_DATA_HOME": os.path.join(scratch, ".local", "share"),
        "TRITON_CACHE_DIR": os.path.join(scratch, ".triton"), "MPLCONFIGDIR": os.path.join(scratch, ".matplotlib"),
        "IPYTHONDIR": os.path.join(scratch, ".ipython"), "JUPYTER_CONFIG_DIR": os.path.join(scratch, ".jupyter"),
        "JUPYTER_DATA_DIR": os.path.join(scratch, ".local", "share", "jupyter"),
        "JUPYTER_RUNTIME_DIR": os.path.join(scratch, ".local", "share", "jupyter", "runtime"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, ".cache", "torchinductor"),
        "CUDA_CACHE_PATH": os.path.join(scratch, ".cache", "nv"),
    }


def _seed_caches(scratch: str) -> None:
    """Copy the grader's matplotlib font list into a new scratch folder: without it every notebook
    that draws a figure would scan the system's fonts again."""
    mpl = os.environ.get("MPLCONFIGDIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib")
    target = scratch_env(scratch)["MPLCONFIGDIR"]
    for font_list in Path(mpl).glob("fontlist-*.json"):
        try:
            os.makedirs(target, exist_ok=True)
            shutil.copy(font_list, target)
        except OSError:
            pass


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels run in a bubblewrap sandbox with a fresh scratch folder each.

    The kernel talks over Unix sockets (``transport = "ipc"``) in a folder of its own, so the
    sandbox needs no network; interrupts go as messages (a signal to bwrap would not reach it).
    """

    # the grader's iopub socket refuses a message past a cap before reading it, and connects again
    # (a cell's 256 MiB print no longer lands whole in the grader's memory: attnlab.grading.worker.iopub)
    client_class = DottedObjectName("attnlab.grading.worker.iopub.CappedKernelClient")
    client_factory = Type(klass="attnlab.grading.worker.iopub.CappedKernelClient")

    def __init__(self, gpu: bool = True, max_tasks: int = _tasks.MAX_TASKS, fork_server: bool = True,
                 memory_bytes: int = _tasks.MEMORY_BYTES, scratch_size: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.fork_server = fork_server  # False: bwrap starts the kernel's own interpreter (see _fork_argv)
        self.forked = False  # whether the running kernel came from the fork server
        self.gpu = gpu  # False: no GPU device node is bound (the caller also hides it in the environment)
        self.scratch_size = scratch_bytes() if scratch_size is None else scratch_size
        # a pids cgroup of its own where this machine allows one (else the guard's RLIMIT_NPROC, or none)
        self.cgroup = _tasks.create(max_tasks)
        # and a memory limit for the kernel as a whole (on cgroup v2 in that same cgroup; on v1 a memory
        # cgroup beside it; None where neither can be made: tasks.describe_memory says why)
        self.memory_cgroup = _tasks.create_memory(memory_bytes, self.cgroup)
        self.cgroups = [c for c in dict.fromkeys([self.cgroup, self.memory_cgroup]) if c is not None]
        self.account = kernel_account()  # None: the grader's own account
        # the grader's own folder (0700): the kernel's scratch and socket folders, which the kernel
        # owns, lie inside it, so no other account reaches them even if the kernel opens them to all;
        # the account's /etc/passwd and /etc/group copies sit in it, out of the kernel's reach
        self.folder = tempfile.mkdtemp(prefix="attnlab-run-")
        self.scratch = os.path.join(self.folder, "scratch")
        self._ipc_dir = os.path.join(self.folder, "ipc")
        os.mkdir(self.scratch, 0o700)
        os.mkdir(self._ipc_dir, 0o700)
        _seed_caches(self.scratch)
        self.transport = "ipc"
        self.ip = os.path.join(self._ipc_dir, "kernel")

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = self._kernel_cmd = super().format_kernel_cmd(extra_arguments)
        connection = os.path.realpath(self.connection_file)
        hand_over(connection, self.account)  # written 0600 by the grader: the kernel reads its ports and key
        return self._wrap(cmd)

    def _wrap(self, cmd: list[str], info_fd: int | None = None) -> list[str]:
        return _tasks.enter(self.cgroups, wrap(cmd, self.scratch, self._ipc_dir,
                                               read_only=[os.path.realpath(self.connection_file)], gpu=self.gpu,
                                               account=self.account, etc_dir=self.folder, info_fd=info_fd,
                                               scratch_size=self.scratch_size), oom_score=KERNEL_OOM_SCORE)

    def given_expression(self) -> str:
        """What the grader evaluates in the kernel (user_expressions) before any learner code: the kernel
        copies the files handed to it into its scratch folder (:func:`take_given`); JSON text."""
        return (f"__import__('json').dumps(__import__('attnlab.grading.sandbox', fromlist=['take_given'])"
                f".take_given({self.scratch!r}))")

    def close_ipc(self) -> None:
        """Once the kernel has made its sockets (it answered), take its socket folder back from its account:
        that folder is on the grader's disk, and learner code could otherwise fill it without bound."""
        if self.account is not None:
            os.chown(self._ipc_dir, os.geteuid(), os.getegid())
            os.chmod(self._ipc_dir, 0o711)

    def _fork_argv(self) -> list[str] | None:
        """ipykernel's arguments when the fork server may start this kernel, else None: kernels of a
        root grader (an account of their own, which the server's child switches to as bwrap's kernels
        do), started as ``python -m ipykernel_launcher`` by this very interpreter."""
        from . import forkserver

        cmd = getattr(self, "_kernel_cmd", [])
        if (self.fork_server and forkserver.enabled() and self.account is not None and len(cmd) >= 3
                and cmd[1:3] == ["-m", "ipykernel_launcher"]
                and os.path.realpath(cmd[0]) == os.path.realpath(sys.executable)):
            return cmd[3:]
        return None

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        """Start the kernel: from the fork server where :meth:`_fork_argv` allows (bwrap runs its
        placeholder in the sandbox and the server's fork joins it), else, and whenever that fails,
        bwrap's own ``kernel_cmd``."""
        self.forked = False
        argv = self._fork_argv()
        if argv is not None:
            try:
                why = await self._fork_kernel(argv, kw)
            except Exception as exc:  # noqa: BLE001 (any failure: bwrap starts the kernel)
                why = f"{type(exc).__name__}: {exc}"
            if not why:
                self.forked = True
                return
            if why not in _FORK_REFUSALS_SAID:  # a refusal holds for every kernel after: say it once
                _FORK_REFUSALS_SAID.add(why)
                self.log.warning("attnlab: the fork server could not start the kernel (%s); bwrap starts it", why)
            if self.provisioner is not None and self.provisioner.has_process:
                await self.provisioner.kill()
                await self.provisioner.wait()
        await super()._async_launch_kernel(kernel_cmd, **kw)

    async def _fork_kernel(self, argv: list[str], kw: dict) -> str:
        """Launch bwrap with the placeholder, then have the fork server start the kernel in it; "" when
        it did, else why not. The blocking steps (the server's first imports, reading the pipes) run
        in a thread, so other kernels' messages on this event loop go on meanwhile."""
        import asyncio

        from . import forkserver

        env = kernel_environment(kw.get("env") or dict(os.environ), self.scratch, self.account)
        server = await asyncio.to_thread(forkserver.server_for, env)
        if server.why:
            return server.why
        info_read, info_write = os.pipe()
        ready_read, ready_write = os.pipe()
        try:
            try:
                holder = self._wrap([sys.executable, "-I", "-S", "-c", forkserver.HOLD, str(ready_write)],
                                    info_fd=info_write)
                await super()._async_launch_kernel(holder, **kw, pass_fds=(info_write, ready_write))
            finally:
                os.close(info_write)
                os.close(ready_write)
            fd, info_read = info_read, None  # read_pipe closes it, whatever happens
            info = json.loads(await asyncio.to_thread(forkserver.read_pipe, fd, SANDBOX_START_TIMEOUT, _whole_json))
            fd, ready_read = ready_read, None
            ready = await asyncio.to_thread(forkserver.read_pipe, fd, SANDBOX_START_TIMEOUT,
                                          lambda text: text == b"ready")
            if ready != b"ready":
                return f"the sandbox's placeholder did not start: {ready[:200]!r}"
        finally:
            for fd in (info_read, ready_read):
                if fd is not None:
                    os.close(fd)
        request = {"ns_pid": int(info["child-pid"]), "uid": self.account, "gid": self.account,
                   "ns_inodes": {ns: info[f"{ns}-namespace"] for ns in forkserver.NAMESPACES if f"{ns}-namespace" in info},
                   "groups": kernel_groups(self.gpu), "cwd": self.scratch, "env": env, "argv": argv,
                   "cgroups": [str(c) for c in self.cgroups], "oom_score_adj": KERNEL_OOM_SCORE,
                   "seccomp": seccomp_program()}
        return await asyncio.to_thread(server.start, request)

    async def _async_pre_start_kernel(self, **kw):
        kw["cwd"] = self.scratch
        # the gradebook's URL and password stay with the grader: nbgrader writes grades, never the kernel
        kw["env"] = kernel_env(kw.get("env"))
        # not the grader's stdout and stderr (a worker's log file, read and written by every kernel
        # it starts: a channel from one student's notebook to the next, red team 2026-12-02); what
        # the kernel prints reaches the grader as messages
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        return cmd, kw

    async def _async_interrupt_kernel(self) -> None:
        if self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        await super()._async_interrupt_kernel()

    interrupt_kernel = _async_interrupt_kernel

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            self.remove_folders()

    cleanup_resources = _async_cleanup_resources

    def remove_folders(self) -> None:
        """Remove the kernel's cgroups (killing what is left in them) and folder (scratch, sockets)."""
        for cgroup in self.cgroups:
            if not _tasks.remove(cgroup):
                self.log.warning("attnlab: could not remove the kernel's cgroup %s (the next run's sweep will)", cgroup)
        if not remove_tree(self.folder):
            self.log.warning("attnlab: could not remove the kernel's folder %s", self.folder)

"""The accounts a root grader's kernels run as: one uid (also the gid) each, handed out in turn from
:data:`KERNEL_IDS`, never one the machine resolves to; and the files and names such an account gets
(:func:`hand_over`, its lines of ``/etc/passwd`` and ``/etc/group``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

#: The uids (each also the gid) a root grader's kernels run as, handed out in turn (:func:`kernel_account`):
#: past the ranges systemd gives to users, dynamic users and containers (0x70000000 and above is
#: unused there), so no file or process on the machine belongs to one.
KERNEL_IDS = range(0x75000000, 0x75000000 + 2**20)
#: The kernel account's name in the sandbox's /etc/passwd and /etc/group (and USER, LOGNAME).
KERNEL_ACCOUNT_NAME = "attnlab-kernel"
#: "root" keeps a root grader's kernels at uid 0 (not recommended: see :func:`kernel_account`).
KERNEL_ACCOUNT_ENV = "ATTNLAB_KERNEL_ACCOUNT"


def ids_mapped(ids: range, map_file: str) -> bool:
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
    if not (ids_mapped(KERNEL_IDS, "/proc/self/uid_map") and ids_mapped(KERNEL_IDS, "/proc/self/gid_map")):
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


def account_entries(account: int, home: str) -> dict[str, str]:
    return {"passwd": f"{KERNEL_ACCOUNT_NAME}:x:{account}:{account}:attnlab grading kernel:{home}:/usr/sbin/nologin",
            "group": f"{KERNEL_ACCOUNT_NAME}:x:{account}:"}


def with_line(source: str, line: str, target: str) -> str:
    """``target``: a copy of ``source`` (the host's /etc/passwd or /etc/group) with ``line`` added,
    readable by all, owned by the grader; bound over ``source`` in the sandbox."""
    try:
        text = Path(source).read_text()
    except OSError:
        text = ""
    with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "w") as f:
        f.write(text + ("" if not text or text.endswith("\n") else "\n") + line + "\n")
    return target

"""A kernel's scratch folder: its size, the files the grader hands it (:func:`take_given`), the font
cache it starts with, and removing it whatever a kernel made there (:func:`remove_tree`).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from .environment import scratch_env

#: Size of a kernel's scratch folder, a tmpfs of its sandbox (:data:`SCRATCH_ENV` overrides it, in MiB):
#: writing past it fails with ENOSPC in the kernel; it vanishes with the sandbox, whatever is in it.
SCRATCH_BYTES = 1024 * 2**20
SCRATCH_ENV = "ATTNLAB_KERNEL_SCRATCH_MB"
#: Where, in the sandbox, the kernel finds what the grader handed it (the host's scratch folder, read-only):
#: a folder of this name in its scratch folder (:func:`take_given` copies it into the scratch folder).
GIVEN = ".given"


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


def seed_caches(scratch: str) -> None:
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

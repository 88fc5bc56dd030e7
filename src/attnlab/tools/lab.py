"""attnlab lab [FOLDER]: open JupyterLab on your own working copy of the course notebooks.

Copies each assignment's release notebooks from the course repository into FOLDER/<assignment>/
(default ~/attention-lab; a notebook already there is never overwritten, so your work is safe),
then starts JupyterLab with FOLDER as its root. Starting it there matters: nbgrader's lab
extension (the Validate button) treats the folder JupyterLab starts in as the course folder and
logs an error when that is not inside the folder JupyterLab serves. As root (a container, WSL)
JupyterLab refuses to start without --allow-root, which is added. nbgrader's (empty) settings file
goes into FOLDER/.attnlab/, a hidden folder JupyterLab does not list, named on JUPYTER_CONFIG_PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from ..grading.course import tool_env

__all__ = ["prepare_folder", "lab_command", "lab_env", "add_parser", "OLD_CONFIG"]

DEFAULT_FOLDER = Path("~/attention-lab")
#: Where nbgrader's settings file goes, inside the learner's folder: hidden, so that JupyterLab (which
#: through jupytext opens a .py file as a notebook) does not list it among the notebooks.
CONFIG_DIR = ".attnlab"
_CONFIG = """\
# Written by `attnlab lab`: nbgrader reads this folder's settings from here. Nothing to set for a
# learner; the course's own configuration lives in the course repository.
c = get_config()  # noqa: F821
# The Validate button's kernels: encrypted where jupyter_client can (see attnlab.tools.lab.encrypted_kernels)
from jupyter_client.manager import KernelManager  # noqa: E402

if "transport_encryption" in KernelManager.class_trait_names():
    c.KernelManager.transport_encryption = "auto"
"""
#: What earlier versions wrote beside the notebooks (removed when found as it was written).
OLD_CONFIG = ("# Written by `attnlab lab`: nbgrader reads this folder's settings from here. Nothing to set for\n"
              "# a learner; the course's own configuration lives in the course repository.\n")


def prepare_folder(folder: Path, course_root: Path | None) -> list[Path]:
    """Copy the release notebooks of ``course_root`` (a checkout; None: nothing to copy) into
    ``folder/<assignment>/``, skipping files that exist; returns the files copied.

    Raises:
        FileNotFoundError: no checkout and ``folder`` does not exist (nothing to open).
    """
    folder = Path(folder).expanduser()
    copied = []
    release = None if course_root is None else Path(course_root) / "release"
    if release is None or not release.is_dir():
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} does not exist and no course repository was found to copy the "
                                    f"notebooks from: run this in the course repository, or name a folder "
                                    f"that holds your notebooks")
    else:
        for assignment in sorted(p for p in release.iterdir() if p.is_dir()):
            for src in sorted(assignment.iterdir()):
                dest = folder / assignment.name / src.name
                if src.is_file() and not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest)
                    copied.append(dest)
    # nbgrader warns at every start when it finds no settings file: an empty one, out of sight
    config = folder / CONFIG_DIR / "nbgrader_config.py"
    if not config.exists():
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(_CONFIG)
    old = folder / "nbgrader_config.py"  # where earlier versions wrote it, in the notebooks' listing
    if old.is_file() and old.read_text() == OLD_CONFIG:
        old.unlink()
    return copied


def lab_env(folder: Path, env: dict | None = None) -> dict:
    """The environment for JupyterLab on ``folder`` (a copy of ``env``, default this process's): this
    interpreter's tools first on PATH, and ``folder/.attnlab`` on JUPYTER_CONFIG_PATH, where nbgrader
    finds the settings file :func:`prepare_folder` wrote."""
    env = tool_env(env)
    here = str(Path(folder).expanduser().resolve() / CONFIG_DIR)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (here, env.get("JUPYTER_CONFIG_PATH")) if p)
    return env


def lab_command(folder: Path, port: int | None = None, open_browser: bool = True) -> list[str]:
    """The ``jupyter lab`` command line that serves ``folder`` (run it with ``folder`` as working directory)."""
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={Path(folder).expanduser().resolve()}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    if port is not None:
        cmd.append(f"--port={port}")
    if not open_browser:
        cmd.append("--no-browser")
    cmd += encrypted_kernels()
    return cmd


def encrypted_kernels() -> list[str]:
    """Options that encrypt the kernels' TCP connections (CurveZMQ keys the kernel manager hands out,
    jupyter_client 8.10 on) where the kernel supports it; ipykernel 7 otherwise warns at every kernel
    start that it runs "over TCP without encryption". Empty where jupyter_client cannot."""
    try:
        from jupyter_client.manager import KernelManager
    except ImportError:
        return []
    return (["--KernelManager.transport_encryption=auto"]
            if "transport_encryption" in KernelManager.class_trait_names() else [])


def _cmd(args) -> int:
    from ..grading.course import Course

    try:
        root = Course.find(args.course).root
    except SystemExit:
        root = None  # not in a checkout: open the folder as it is
    folder = Path(args.folder).expanduser().resolve()
    try:
        copied = prepare_folder(folder, root)
    except FileNotFoundError as exc:
        print(f"attnlab lab: {exc}", file=sys.stderr)
        return 2
    if copied:
        print(f"copied {len(copied)} files of {root / 'release'} into {folder}")
    print(f"starting JupyterLab in {folder} (Ctrl-C twice to stop it)", flush=True)
    cmd = lab_command(folder, args.port, not args.no_browser)
    os.chdir(folder)
    os.execve(sys.executable, cmd, lab_env(folder))
    return 0  # not reached


def add_parser(sub, parents=()) -> None:
    """Register ``attnlab lab`` on the CLI's subparsers."""
    from ..grading.host.options import plain_text

    p = sub.add_parser("lab", help="open JupyterLab on your own copy of the notebooks (students)",
                       description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter,
                       parents=list(parents))
    p.add_argument("folder", nargs="?", default=str(DEFAULT_FOLDER),
                   help=f"your working folder (default {DEFAULT_FOLDER})")
    p.add_argument("--port", type=int, default=None, help="the port JupyterLab listens on (default 8888 or the next free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser window")
    p.set_defaults(func=_cmd)

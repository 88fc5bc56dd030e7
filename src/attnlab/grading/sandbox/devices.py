"""The GPU's device nodes a sandbox binds (the worker's own GPU, or every one), and the groups a kernel
account needs to open them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..course import GPU_DEVICE_ENV  # set per worker by the plan

#: Driver nodes every CUDA process opens besides its GPU's own node (those present are bound).
GPU_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")


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


def device_groups(nodes: list[str]) -> list[int]:
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


def kernel_groups(gpu: bool) -> list[int]:
    """The supplementary groups of a kernel account started by :func:`wrap` with this ``gpu``."""
    return device_groups(gpu_nodes() if gpu else [])

"""Where the course's code runs: a CUDA GPU, or Triton's CPU interpreter.

Triton decides at decoration time whether a ``@triton.jit`` function is compiled for the GPU or
run by its NumPy interpreter, from the ``TRITON_INTERPRET`` environment variable. So :func:`init`
must run before any cell defines a kernel: every notebook calls it in its first code cell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Set to ``cpu`` to force the interpreter on a machine that has a GPU (handy when debugging a kernel).
FORCE_ENV = "ATTNLAB_DEVICE"


@dataclass(frozen=True)
class Runtime:
    """The mode the course runs in.

    Attributes:
        device: ``"cuda"`` or ``"cpu"``: where Triton kernels and their test tensors live.
        interpret: True when Triton kernels run through the CPU interpreter (``TRITON_INTERPRET=1``).
        name: the GPU's name, or a description of the CPU mode.
    """

    device: str
    interpret: bool
    name: str

    def describe(self) -> str:
        if self.interpret:
            return ("No GPU in use: Triton kernels run on the CPU through the interpreter "
                    "(TRITON_INTERPRET=1). Tests use small float32 sizes; timings are not meaningful.")
        return f"GPU: {self.name}. Triton kernels are compiled for it; tests also run at GPU sizes."


def _gpu_available() -> bool:
    if os.environ.get(FORCE_ENV, "").lower() == "cpu":
        return False
    try:
        import torch
    except ImportError:  # the notebooks' own import error will say more
        return False
    return torch.cuda.is_available()


def runtime() -> Runtime:
    """The current mode, without printing or changing anything."""
    if os.environ.get("TRITON_INTERPRET") == "1" or not _gpu_available():
        return Runtime("cpu", True, "CPU (Triton interpreter)")
    import torch

    return Runtime("cuda", False, torch.cuda.get_device_name())


def init(verbose: bool = True) -> Runtime:
    """Pick GPU or interpreter mode, switch Triton accordingly, and say which one is active.

    Call it before any ``@triton.jit`` decorator runs: the interpreter switch has no effect on
    kernels defined earlier.

    Returns:
        The :class:`Runtime` in force.
    """
    if not _gpu_available():
        os.environ["TRITON_INTERPRET"] = "1"
    rt = runtime()
    if verbose:
        print(rt.describe())
    return rt

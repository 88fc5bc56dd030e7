"""What a compiled kernel uses on a GPU (:class:`Resources`: registers, spills, shared memory), read from
its cubin with the ``cuobjdump`` inside Triton's package, and one line of advice about it; how many of its
programs one SM runs at once (:func:`programs_per_sm`), as the CUDA driver computes it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Resources:
    """What one compiled configuration of a kernel uses on a GPU (per the cubin).

    Attributes:
        target: the target compiled for (``sm_90``...).
        registers: 32-bit registers per thread (a streaming multiprocessor has 65,536).
        spill_bytes: local memory per thread, i.e. registers spilled (0 is what you want).
        shared_bytes: shared memory per program (per block), as the launch requests it.
        num_warps, num_stages: the configuration.
    """

    target: str
    registers: int | None
    spill_bytes: int | None
    shared_bytes: int
    num_warps: int
    num_stages: int

    def describe(self) -> str:
        regs = "? registers" if self.registers is None else f"{self.registers} registers/thread"
        spills = ("spills unknown" if self.spill_bytes is None else "no spills" if self.spill_bytes == 0
                  else f"SPILLS {self.spill_bytes} B/thread")
        return f"{regs}, {spills}, {_kib(self.shared_bytes)} shared memory ({self.target})"


def _kib(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.0f} KiB"


def _cuobjdump() -> str | None:
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return path if os.path.isfile(path) else None


def _cubin_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, local bytes) per thread of the kernel in ``cubin``, from ``cuobjdump``."""
    tool = _cuobjdump()
    if tool is None or not cubin:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                             timeout=30).stdout
    m = re.search(r"REG:(\d+).*?LOCAL:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def resources_of(compiled, target: str, options: dict) -> Resources:
    regs, local = _cubin_usage(compiled.asm.get("cubin", b""))
    if regs is None and getattr(compiled, "n_regs", None) is not None:
        regs, local = compiled.n_regs, None
    return Resources(target, regs, local, int(compiled.metadata.shared), options["num_warps"], options["num_stages"])


def describe_resources(res: Resources) -> str:
    """One line of advice about ``res``: the figures, and what they suggest."""
    notes = []
    if res.spill_bytes:
        notes.append("registers spill to local memory: try smaller tiles or more warps")
    if res.registers is not None and res.registers >= 255:
        notes.append("at the 255-register limit")
    if res.shared_bytes > 64 * 1024 and res.target == "sm_75":
        notes.append("above the T4's 64 KiB of shared memory per block")
    return res.describe() + (f": {'; '.join(notes)}" if notes else "")


@functools.cache
def _occupancy_call():
    """The CUDA driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor``, or None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    fn = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def programs_per_sm(compiled) -> int | None:
    """How many programs (thread blocks) of ``compiled`` one SM of the current GPU runs at once.

    The registers per thread, shared memory per program and threads per program each cap the count; the
    CUDA driver's occupancy calculator (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) applies all
    three to the loaded kernel, with the shared memory Triton asks for at launch. Example: notebook 08's
    split kernel at D=128 (114 registers, 38 KiB, 4 warps) gets 4 on an H200, limited by registers.

    Args:
        compiled: a Triton ``CompiledKernel`` (what a launch or ``kernel.warmup`` returns).

    Returns:
        The count (>= 1), or None where it cannot be asked: no CUDA driver, a kernel that is not a
        compiled CUDA kernel, or a driver error.
    """
    call = _occupancy_call()
    if call is None or compiled is None:
        return None
    try:
        compiled[(1, 1, 1)]  # loads the module into the context (as a launch would); runs nothing
        function = compiled.function
        threads = compiled.metadata.num_warps * getattr(compiled.metadata, "warp_size", 32)
        shared = int(compiled.metadata.shared)
    except Exception:  # not a CUDA CompiledKernel (another backend, an interpreted twin)
        return None
    count = ctypes.c_int(0)
    if function is None or call(ctypes.byref(count), function, threads, shared) != 0:
        return None
    return count.value if count.value >= 1 else None

"""What a compiled kernel uses on a GPU (:class:`Resources`: registers, spills, shared memory), read from
its cubin with the ``cuobjdump`` inside Triton's package, and one line of advice about it.
"""

from __future__ import annotations

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

"""The GPUs the course's kernels must compile for (:data:`TARGETS`), this machine's own
(:func:`native_target`), and the error a kernel that does not compile raises (:class:`GpuCompileError`).

``TARGETS`` is read at every launch: setting ``attnlab.gpu_compile.TARGETS`` (or this module's) changes
the targets of the launches after it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A CUDA compute capability the course's kernels must compile for."""

    arch: int       # 75 for sm_75
    gpu: str        # the GPU a learner knows it by

    @property
    def name(self) -> str:
        return f"sm_{self.arch}"

    def describe(self) -> str:
        return f"{self.name} ({self.gpu})"


#: The course's GPU targets: Colab's free T4, the A100, the H100/H200.
TARGETS: tuple[Target, ...] = (Target(75, "Colab's T4"), Target(80, "A100"), Target(90, "H100/H200"))
#: Prefix of the one advice line printed per kernel (resources and targets); not a grade.
ADVICE_PREFIX = "[gpu] "


class GpuCompileError(AssertionError):
    """A kernel that runs under the interpreter but does not compile for one or more GPU targets.

    Attributes:
        what: the kernel's name as the course calls it.
        failed: target name (``sm_75``...) -> Triton's error for that target.
        compiled: the target names it did compile for.
    """

    def __init__(self, message: str, *, what: str, failed: dict[str, str], compiled: list[str]):
        super().__init__(message)
        self.what, self.failed, self.compiled = what, failed, compiled


def native_target() -> Target | None:
    """This machine's GPU as a :class:`Target` (None without a GPU or under the interpreter)."""
    from ..core.device import runtime

    if runtime().interpret:
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return Target(major * 10 + minor, f"this machine's {name}")

"""What launchers use: a kernel wrapped once (:class:`gated`: the gate, then the launch), the launches a
launcher makes recorded instead of run (:func:`captured`) or compiled without running
(:func:`compile_only`), and a launch's resources (:func:`resources`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import targets as _targets
from .clock import own_clock
from .compiling import COMPILED, compile_for, is_learner_error, kernel_key
from .diagnosis import failure, sources_of
from .gate import ensure_compiles
from .interpreter import Twins, compiler_view, interpreted_type
from .signature import signature_of
from .targets import Target, native_target
from .usage import Resources, resources_of


@dataclass(frozen=True)
class Launch:
    """One launch a launcher made (see :func:`captured`): what :func:`resources` takes."""

    kernel: object
    args: tuple
    constexprs: dict
    num_warps: int
    num_stages: int


_CAPTURING: list[list[Launch]] = []


@contextlib.contextmanager
def captured():
    """Inside this block, gated launches are recorded (as :class:`Launch`) instead of run, so the
    exact arguments a course launcher passes can be compiled for :func:`resources`::

        with gpu_compile.captured() as launches:
            launch.run_flash_kernel(kernel, q, k, v, o, lse, causal=True, block_m=128, block_n=64)
        res = gpu_compile.resources(launches[0].kernel, launches[0].args, launches[0].constexprs, ...)
    """
    launches: list[Launch] = []
    _CAPTURING.append(launches)
    try:
        yield launches
    finally:
        _CAPTURING.remove(launches)


def capturing() -> bool:
    """Whether a :func:`captured` block is open (gated launches are being recorded, not run)."""
    return bool(_CAPTURING)


# process-wide, not per thread: autograd runs a backward's launches in its own threads. A launcher that only
# wants its own kernel compiled uses gated(..., compile_only=True) instead.
_COMPILE_ONLY = [0]


@contextlib.contextmanager
def compile_only():
    """Inside this block, gated launches on a GPU pass the gate and are compiled exactly as they will
    launch (Triton's ``warmup``, cached for the launch), but nothing runs on the GPU: a process can pay
    its compiles while another one has the GPU to itself (the timing stage,
    :mod:`attnlab.grading.worker.timing`). A gated launch then returns Triton's ``CompiledKernel`` (what
    :func:`attnlab.gpu_compile.programs_per_sm` reads); launches through the interpreter run nothing
    either and return None. Nests; applies to every thread (autograd launches a backward from its own).
    For one kernel alone, ``gated(..., compile_only=True)``."""
    _COMPILE_ONLY[0] += 1
    try:
        yield
    finally:
        _COMPILE_ONLY[0] -= 1


#: Launch options of ``kernel[grid](...)`` that are not kernel arguments (Triton's names).
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_pdl")


class gated:  # noqa: N801  (used like the kernel it wraps)
    """``gated(kernel, what)[grid](*args, **kwargs)``: :func:`ensure_compiles`, then the launch.

    A launcher can wrap its kernel once and launch as before::

        kernel = gpu_compile.gated(kernel, "_softmax_kernel")
        kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=block, num_warps=4)

    Keyword arguments that are kernel parameters are the constexprs; ``num_warps`` and
    ``num_stages`` (Triton's defaults 4 and 3 when absent) are the compile options.

    ``interpret=True`` (a compiled-mode kernel launched on CPU tensors on a GPU machine): the gate
    compiles for the course's targets as on a machine without a GPU, and the launch runs the
    kernel's interpreted twin (:func:`attnlab.core.device.interpreted_twin`).

    ``compile_only=True``: this wrapper's launches behave as inside :func:`compile_only` (the gate, then
    Triton's ``warmup``, whose CompiledKernel they return), and no other launch is affected.
    """

    def __init__(self, kernel, what: str, interpret: bool = False, compile_only: bool = False):
        self.kernel, self.what, self.interpret, self.compile_only = kernel, what, interpret, compile_only

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            options = {k: kwargs[k] for k in _LAUNCH_OPTIONS if k in kwargs}
            constexprs = {k: v for k, v in kwargs.items() if k not in options}
            if _CAPTURING:  # inside captured(): record the launch, run nothing
                _CAPTURING[-1].append(Launch(self.kernel, args, constexprs, options.get("num_warps", 4),
                                             options.get("num_stages", 3)))
                return None
            ensure_compiles(self.kernel, args, constexprs, what=self.what, num_warps=options.get("num_warps", 4),
                            num_stages=options.get("num_stages", 3), native=not self.interpret)
            if _COMPILE_ONLY[0] or self.compile_only:
                return None if self.interpret else self.kernel.warmup(*args, grid=grid, **kwargs)
            if not self.interpret:
                return self.kernel[grid](*args, **kwargs)
            from ..core.device import interpreted_twin

            with interpreted_twin(self.kernel) as twin:
                return twin[grid](*args, **kwargs)

        return launch


def resources(kernel, args, constexprs, *, num_warps: int = 4, num_stages: int = 3,
              target: Target | None = None) -> Resources:
    """Registers, spills and shared memory of ``kernel[grid](*args, **constexprs, ...)``, compiled.

    On a GPU (``target`` None) the kernel is compiled as its launch compiles it; otherwise it is
    cross-compiled for ``target`` (default ``sm_90``, the H100/H200), which needs no GPU. Advice
    for tuning (bigger tiles, more stages), never a grade.

    Raises:
        GpuCompileError, NotImplementedError: as :func:`ensure_compiles`.
    """
    options = {"num_warps": num_warps, "num_stages": num_stages}
    native = native_target()
    if target is None and native is not None:
        ensure_compiles(kernel, args, constexprs, what=kernel.__name__, num_warps=num_warps, num_stages=num_stages)
        compiled = kernel.warmup(*args, grid=(1,), **constexprs, **options)
        return resources_of(compiled, native.name, options)
    target = target or _targets.TARGETS[-1]
    spec = signature_of(kernel, args, constexprs)
    interp = interpreted_type()
    twins = Twins() if interp and isinstance(kernel, interp) else None
    jit = twins.twin(kernel) if twins is not None else kernel
    with own_clock(kernel.__name__), compiler_view(twins):
        key = (kernel_key(jit), spec.key(), target.arch, num_warps, num_stages)
        if key not in COMPILED:
            try:
                COMPILED[key] = compile_for(jit, spec, target, options, full=True)
            except Exception as exc:
                if not is_learner_error(exc):
                    raise
                by_src = twins.by_src if twins is not None else sources_of(kernel)
                raise failure(kernel.__name__, spec, options, {target: exc}, [], by_src) from None
    return resources_of(COMPILED[key], target.name, options)

"""The GPU compile gate: a graded Triton kernel must also compile for real GPUs, even on a CPU.

Without a GPU the course runs kernels through Triton's interpreter, which executes the kernel as
plain Python and so accepts code no GPU compiler does (``break``, calls of ordinary Python
functions, dicts, ``if`` on a whole block of values, f-string ``print`` of run-time values,
``int()`` of a run-time value, plain Python globals...).
Triton can compile for a GPU it does not have, so every launch the course makes first compiles the
kernel, with the exact signature, dtypes and constexprs of that launch, for the course's targets:

- ``sm_75`` (Colab's free T4), ``sm_80`` (A100), ``sm_90`` (H100/H200): :data:`TARGETS`;
- on a GPU machine, the GPU itself first (through the kernel's own launch path, so the launch
  that follows reuses the compiled kernel).

What is compiled (kept small, so grading stays fast; see :func:`.compiling.plan`): every distinct launch
configuration (signature, constexprs, warps, stages) goes through Triton's front end (Python AST
to Triton IR, where every interpreter-only construct fails whatever the target); every new
signature (pointer dtypes) through the front end of every target (where target limits such as
minimum ``tl.dot`` sizes and FP8 support are checked); the first configuration of each kernel all
the way to a cubin (backend passes and ptxas) for sm_75 and sm_90, which bracket the targets.
Results, failures included, are cached per (kernel source and its helpers, signature,
constexprs, target, warps, stages) for the life of the process, so repeated checks cost a
dictionary lookup. Compile time does not count against the checks' time limit for
learner code; a compile that hangs (a huge ``tl.static_range``) is stopped after
:func:`compile_limit_s`.

A kernel that fails raises :class:`GpuCompileError` (an ``AssertionError``: the test using it
loses its points) naming the line, the construct, what to do instead, and the targets it fails
for (so a Colab user knows before opening a GPU runtime). A kernel whose body still raises
``NotImplementedError`` (the blank release) raises ``NotImplementedError`` saying it is not
implemented yet, on a CPU and on a GPU alike. Failures of the machinery itself (no ptxas, an
unwritable cache) are reported with :func:`attnlab.core.review.flag` and never cost the learner.

Using it from a launcher (notebooks 04, 05, and the second assignment's kernels). Simplest: wrap
the kernel once, launch as before (:class:`gated`; ``num_warps``/``num_stages`` are read from the
launch)::

    kernel = gpu_compile.gated(kernel, "_attn_bwd_dq")
    kernel[grid](dq, q, k, v, do, lse, delta, q.stride(1), q.stride(2), T, scale,
                 CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=D, num_warps=4, num_stages=2)

or call the gate yourself with the launch's arguments::

    from attnlab import gpu_compile

    args = (dq, q, k, v, do, lse, delta, q.stride(1), q.stride(2), T, scale)   # positional, as launched
    constexprs = dict(CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=D)
    gpu_compile.ensure_compiles(kernel, args, constexprs, what="_attn_bwd_dq",
                                num_warps=num_warps, num_stages=num_stages)
    kernel[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)

Resources (registers per thread, spilled bytes per thread, shared memory per program) of a launch
configuration, as advice for tuning (never a grade): :func:`resources` and
:func:`describe_resources` (:func:`captured` records the launches a launcher makes, so
``attnlab.bench.kernel_resources`` reports them for any course launcher); on a CPU they come
from the cross-compiled cubin (``sm_90`` unless told otherwise), read with the ``cuobjdump``
that ships inside Triton's package.

The package's modules, one job each (this file keeps the path ``attnlab.gpu_compile`` and its names, a
contract with notebooks, launchers and submissions):

- :mod:`.targets`: the GPU targets, this machine's, and :class:`GpuCompileError`;
- :mod:`.signature`: what Triton compiles for a launch (:func:`signature_of`);
- :mod:`.interpreter`: compiling a kernel the CPU interpreter runs (its twins, the interpreter's patches undone);
- :mod:`.compiling`: one compile for one target, the plan of compiles a launch needs, and their cache;
- :mod:`.clock`: the gate's own time limit; :mod:`.diagnosis`: the message of a kernel that does not compile;
- :mod:`.gate`: :func:`ensure_compiles`; :mod:`.launching`: :class:`gated`, :func:`captured`,
  :func:`compile_only`, :func:`resources`;
- :mod:`.usage`: registers, spills and shared memory of a compiled kernel, and its programs per SM.
"""

from __future__ import annotations

import sys
import types

from . import targets as _targets
from .clock import GateWaited, compile_limit_s
from .gate import ensure_compiles
from .launching import Launch, captured, capturing, compile_only, gated, resources
from .signature import Spec, signature_of
from .targets import ADVICE_PREFIX, GpuCompileError, Target
from .usage import Resources, describe_resources, programs_per_sm

__all__ = ["Target", "TARGETS", "GpuCompileError", "Spec", "signature_of", "ensure_compiles", "gated", "captured",
           "capturing", "compile_only", "Launch", "resources", "programs_per_sm",
           "Resources", "describe_resources", "compile_limit_s", "ADVICE_PREFIX", "GateWaited"]


class _Package(types.ModuleType):
    """``attnlab.gpu_compile`` itself: its ``TARGETS`` is :data:`.targets.TARGETS`, read and set there,
    so ``gpu_compile.TARGETS = ()`` (the timing worker on a GPU, a test) still changes what the gate
    compiles for."""

    @property
    def TARGETS(self) -> tuple[Target, ...]:  # noqa: N802  (the module's constant)
        return _targets.TARGETS

    @TARGETS.setter
    def TARGETS(self, value: tuple[Target, ...]) -> None:  # noqa: N802
        _targets.TARGETS = value


sys.modules[__name__].__class__ = _Package

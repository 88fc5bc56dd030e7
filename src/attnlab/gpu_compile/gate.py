"""The compile gate (:func:`ensure_compiles`): a launch must compile for the course's GPU targets before it
runs; passed and failed launches are remembered, so a launch seen before costs microseconds.
"""

from __future__ import annotations

import contextlib
import functools

from . import targets as _targets
from .clock import GateWaited, own_clock
from .compiling import COMPILED, OUTCOMES, is_learner_error, kernel_key, plan, run
from .diagnosis import failure, sources_of
from .interpreter import EnvironmentProblem, Twins, compiler_view, interpreted_type
from .signature import launch_key, python_function, signature_of
from .targets import ADVICE_PREFIX, Target, native_target
from .usage import describe_resources, resources_of


def ensure_compiles(kernel, args, constexprs, *, what: str, num_warps: int = 4, num_stages: int = 3,
                    targets: tuple[Target, ...] | None = None, native: bool = True) -> None:
    """Raise unless the launch compiles for GPUs (:func:`_ensure_compiles`, which documents the
    arguments and errors). A compile that waited rather than computed (:class:`GateWaited`) is tried
    once more (what compiled meanwhile is cached) and then reported for review: the launch goes on
    unjudged by the gate, and no point is lost to the machine's trouble."""
    for attempt in (1, 2):
        try:
            return _ensure_compiles(kernel, args, constexprs, what=what, num_warps=num_warps,
                                    num_stages=num_stages, targets=targets, native=native)
        except GateWaited as exc:
            if attempt == 2:
                from ..core.review import flag

                flag(f"could not check that {what} compiles for the GPU targets: {exc} (a busy machine or a "
                     f"lock, not the kernel); not judged by the compile gate")


def _ensure_compiles(kernel, args, constexprs, *, what: str, num_warps: int = 4, num_stages: int = 3,
                     targets: tuple[Target, ...] | None = None, native: bool = True) -> None:
    """Raise unless ``kernel[grid](*args, **constexprs, num_warps=, num_stages=)`` compiles for GPUs.

    Args:
        kernel: a ``@triton.jit`` function (interpreted on a CPU, compiled on a GPU); anything else
            is left to the launch to reject.
        args: the positional run-time arguments exactly as the launch passes them (tensors, ints,
            floats); their dtypes and values give the signature (:func:`signature_of`).
        constexprs: the keyword ``tl.constexpr`` arguments of the launch.
        what: the kernel's name in messages (``"_flash_fwd_kernel"``).
        num_warps, num_stages: as passed to the launch (the defaults are Triton's for CUDA).
        targets: default :data:`TARGETS`; on a GPU machine its own target is compiled first.
        native: False for a launch that runs through the interpreter on a GPU machine (CPU tensors):
            the gate then compiles for ``targets`` only, as on a machine without a GPU.

    Raises:
        NotImplementedError: the kernel (or a helper it calls) still raises ``NotImplementedError``.
        GpuCompileError: (an AssertionError) it does not compile for some target: which ones,
            the line, the construct and what to write instead.
        CPUBoundTimeoutError: compiling took longer than :func:`compile_limit_s`, computing (at least half
            its wall time on a CPU; a compile that waited raises :class:`GateWaited` inside and is retried).
        GateWaited: it ran out of time while waiting (handled by :func:`ensure_compiles`).
        TypeError: ``args``/``constexprs`` do not fit the kernel's parameters.
    """
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface):
        return
    targets = _targets.TARGETS if targets is None else targets
    # Every launch of a bench loop comes here: a launch seen before must cost microseconds, not the
    # ~150 us of building its signature (measured on the H200 as the decode step's launch floor).
    fast = (_helpers_of(kernel), launch_key(kernel, args, constexprs), num_warps, num_stages, tuple(targets),
            native)
    if fast in _FAST_PASSED.get(id(kernel), ()):
        return
    spec = signature_of(kernel, args, constexprs)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    native = native_target() if native else None
    passed = (kernel, _helpers_of(kernel), spec.key(), num_warps, num_stages, tuple(targets), native is None)
    if passed in _PASSED.get(id(kernel), ()):
        return  # this kernel, with the same helpers, passed this launch before
    for seen, make in _FAILED.get(id(kernel), ()):
        if seen == passed:
            raise make()  # failed before: the same message, without building the twins again
    with own_clock(what):
        if native is not None:
            native_compiled = _check_native(kernel, args, constexprs, options, what, spec)
            targets = tuple(t for t in targets if t.arch != native.arch)
        interp = interpreted_type()
        twins = Twins() if interp and isinstance(kernel, interp) else None
        try:
            jit = twins.twin(kernel) if twins is not None else kernel
        except (OSError, ValueError) as exc:  # no source to compile (a kernel made by exec): cannot check it
            _flag(what, None, exc)
            return
        by_src = twins.by_src if twins is not None else sources_of(kernel)
        failed: dict[Target, BaseException] = {}
        try:
            view = compiler_view(twins)
            view.__enter__()
        except EnvironmentProblem as exc:
            _flag(what, None, exc)
            return
        try:
            try:
                kkey = kernel_key(jit)
            except Exception as exc:  # an ordinary Python function referenced: fails for every target
                if not is_learner_error(exc):
                    raise
                failed = {t: exc for t in targets}
                kkey, checked = None, list(targets)
            jobs = plan(kkey, spec, targets, num_warps, num_stages) if kkey is not None else []
            for (t, key), outcome in zip(jobs, run(jit, spec, options, jobs)):
                if outcome is not None and not is_learner_error(outcome):
                    OUTCOMES[key] = None  # not the learner's doing: reported once, never graded
                    _flag(what, t, outcome)
                    continue
                OUTCOMES[key] = outcome
            for t, key in jobs:
                if OUTCOMES[key] is not None:
                    failed[t] = OUTCOMES[key]
            checked = [t for t, _ in jobs]
            if failed and len(checked) < len(targets):  # say exactly which targets reject it
                rest = [(t, (kkey, spec.key(), t.arch, num_warps, num_stages, False))
                        for t in targets if t not in checked]
                for (t, key), outcome in zip(rest, run(jit, spec, options, rest)):
                    OUTCOMES[key] = outcome if outcome is None or is_learner_error(outcome) else None
                    if OUTCOMES[key] is not None:
                        failed[t] = OUTCOMES[key]
                checked = list(targets)
        finally:
            view.__exit__(None, None, None)
        if failed and twins is not None and twins.incomplete:
            _flag(what, None, next(iter(failed.values())))  # maybe a helper we could not compile
            return
        if failed:
            make = functools.partial(failure, what, spec, options, failed, [t for t in checked if t not in failed],
                                     by_src)
            _FAILED.setdefault(id(kernel), []).append((passed, make))
            raise make()
        if kkey is not None and kkey not in _ADVISED:
            _ADVISED.add(kkey)
            _advise(what, kkey, spec, options, targets, native, native_compiled if native else None)
    _PASSED.setdefault(id(kernel), []).append(passed)
    _FAST_PASSED.setdefault(id(kernel), set()).add(fast)  # the kernel stays alive in _PASSED: ids stay unique


#: id(kernel) -> the launches that passed (each tuple holds the kernel, so ids stay unique)
_PASSED: dict[int, list] = {}
#: id(kernel) -> (launch, function making its error) of the launches that failed
_FAILED: dict[int, list] = {}
#: id(kernel) -> :func:`launch_key` of the launches that passed (only kernels held by _PASSED)
_FAST_PASSED: dict[int, set] = {}
#: kernel keys whose advice line was printed
_ADVISED: set[str] = set()


def _helpers_of(kernel) -> tuple:
    """What else in the kernel's module a compile depends on: the ``@triton.jit`` functions and
    constexprs there, by identity (a re-run cell that redefines a helper changes it)."""
    from triton.language import constexpr
    from triton.runtime.jit import KernelInterface

    fn = python_function(kernel)
    return tuple((k, id(v)) for k, v in getattr(fn, "__globals__", {}).items()
                 if isinstance(v, (KernelInterface, constexpr)))


def _check_native(kernel, args, constexprs, options, what, spec):
    """On a GPU: compile through the kernel's own launch path (cached by Triton for the launch);
    the compiled kernel."""
    try:
        return kernel.warmup(*args, grid=(1,), **constexprs, **options)
    except Exception as exc:
        if not is_learner_error(exc):
            raise
        native = native_target()
        raise failure(what, spec, options, {native: exc}, [], sources_of(kernel)) from None


def _flag(what: str, target: Target | None, exc: BaseException) -> None:
    from ..core.review import flag

    flag(f"could not check that {what} compiles for {target.describe() if target else 'the GPU targets'}: "
         f"the compiler itself failed "
         f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''})")


def _advise(what, kkey, spec, options, targets, native, native_compiled=None) -> None:
    """Print one line per kernel: the targets it compiles for, and its resources (advice only)."""
    done = ([native] if native is not None else []) + list(targets)
    line = f"{ADVICE_PREFIX}{what} compiles for {', '.join(t.describe() for t in done)}."
    pick = _targets.TARGETS[-1] if native is None else native
    compiled = native_compiled if native is not None else \
        COMPILED.get((kkey, spec.key(), pick.arch, options["num_warps"], options["num_stages"]))
    if compiled is not None:
        with contextlib.suppress(Exception):
            line += (f" With {spec.describe()}, num_warps={options['num_warps']}: "
                     f"{describe_resources(resources_of(compiled, pick.name, options))} (advice, not graded)")
    print(line, flush=True)

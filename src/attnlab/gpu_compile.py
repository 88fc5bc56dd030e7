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

What is compiled (kept small, so grading stays fast; see :func:`_plan`): every distinct launch
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
"""
# Length: To split (issue 32): signature, interpreter undo, compile plan and cache, gate,
# diagnosis and resources are separate jobs; they move under attnlab/core/ (the runtime layer;
# ``attnlab.runtime`` is the device function, not a package) once the gate's GPU tests can run; this path
# stays, a contract with notebooks and submissions (notes/decisions.md, "Layers (issue 32)").

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings
from dataclasses import dataclass, field

__all__ = ["Target", "TARGETS", "GpuCompileError", "Spec", "signature_of", "ensure_compiles", "gated", "captured",
           "Launch", "resources",
           "Resources", "describe_resources", "compile_limit_s", "ADVICE_PREFIX", "GateWaited"]


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


# ------------------------------------------------------------------------------------- signature
@dataclass(frozen=True)
class Spec:
    """What Triton compiles for one launch: its ``signature`` (name -> type string such as
    ``*fp32``, ``i32``, ``fp32``, ``constexpr``), ``constexprs`` (name -> value, including ints
    equal to 1, which Triton's launcher specialises), and ``attrs`` (parameter index ->
    ``[["tt.divisibility", 16]]`` for pointers 16-byte aligned and ints divisible by 16, as the
    launcher specialises them)."""

    signature: dict
    constexprs: dict
    attrs: dict = field(default_factory=dict)

    def key(self) -> tuple:
        return (tuple(self.signature.items()), tuple(sorted((k, repr(v)) for k, v in self.constexprs.items())),
                tuple(sorted(self.attrs)))

    def describe(self) -> str:
        """``*fp32 pointers, CAUSAL=True, BLOCK_M=16``: the dtypes and constexprs, for messages."""
        ptrs = sorted({t for t in self.signature.values() if t.startswith("*")})
        parts = [f"{'/'.join(ptrs)} pointers"] if ptrs else []
        parts += [f"{k}={v}" for k, v in self.constexprs.items()]
        return ", ".join(parts)


def _pointer_type(dtype) -> str:
    import torch

    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
             torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
             torch.bool: "i1"}
    for attr, name in (("float8_e4m3fn", "fp8e4nv"), ("float8_e5m2", "fp8e5"), ("float8_e4m3fnuz", "fp8e4b8"),
                       ("float8_e5m2fnuz", "fp8e5b16")):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = name
    if dtype not in names:
        raise TypeError(f"no Triton pointer type for a tensor of dtype {dtype}")
    return "*" + names[dtype]


def _python_function(kernel):
    """The plain Python function behind a ``@triton.jit`` kernel (interpreted or compiled)."""
    return getattr(kernel, "fn", kernel)


def _no_specialize(kernel, names: list[str]) -> set[str]:
    """Parameters the kernel asked Triton not to specialise (``do_not_specialize=``)."""
    raw = getattr(kernel, "do_not_specialize", None)
    if raw is None:
        raw = getattr(kernel, "kwargs", {}).get("do_not_specialize")
    return {names[x] if isinstance(x, int) else x for x in (raw or ())}


def signature_of(kernel, args, constexprs) -> Spec:
    """The Triton signature of ``kernel[grid](*args, **constexprs)``, derived from the values.

    Tensors become pointers by dtype (``*fp32``, ``*bf16``, ``*fp8e4nv``...); Python ints
    ``i32`` (or ``i64`` past 32 bits), 1 a constexpr; floats ``fp32``; bools ``u1``; ``None`` and
    parameters annotated ``tl.constexpr`` constexprs with the value given. Pointers whose address
    is a multiple of 16 bytes and ints divisible by 16 get Triton's divisibility hint, as its
    launcher gives them (which changes vectorisation, so resources match a real launch).

    Raises:
        TypeError: the arguments do not fit the kernel's parameters (named as a call would), or a
            value has no Triton type.
    """
    fn = _python_function(kernel)
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **constexprs)
    except TypeError as exc:
        raise TypeError(f"{fn.__name__}{sig}: the launch does not fit the kernel's parameters: {exc}") from None
    bound.apply_defaults()
    names = list(sig.parameters)
    frozen = _no_specialize(kernel, names)
    signature, consts, attrs = {}, {}, {}
    for i, (name, value) in enumerate(bound.arguments.items()):
        param = sig.parameters[name]
        annotated = "constexpr" in str(param.annotation)
        if annotated or value is None:
            signature[name], consts[name] = "constexpr", value
            continue
        divisible = False
        if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
            signature[name] = _pointer_type(value.dtype)
            divisible = value.data_ptr() % 16 == 0
        elif isinstance(value, bool):
            signature[name] = "u1"
        elif isinstance(value, int):
            if value == 1 and name not in frozen:
                signature[name], consts[name] = "constexpr", 1
                continue
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64" if value < 2**63 else "u64"
            divisible = value % 16 == 0
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} is a {type(value).__name__}; a kernel takes "
                            f"tensors, ints, floats, bools or tl.constexpr values")
        if divisible and name not in frozen:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return Spec(signature, consts, attrs)


# ------------------------------------------------------------------- interpreted kernels, compiled
def _interpreted_type():
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - every supported Triton has it
        return ()
    return InterpretedFunction


_LANG_TWINS: dict[int, object] = {}          # id(InterpretedFunction in triton.*) -> JITFunction
_LANG_KEEP: list[object] = []                # keeps those originals alive, so ids stay unique


class _Twins:
    """JITFunction twins of interpreted functions, for one compile request.

    Under ``TRITON_INTERPRET=1`` ``@triton.jit`` returns an ``InterpretedFunction``, which the
    compiler cannot take. A twin is a ``JITFunction`` of the same code whose globals see twins
    instead of interpreted functions (the learner's ``@triton.jit`` helpers included). Learner
    functions are twinned afresh for every request (a re-run cell may have redefined a helper);
    triton.language's own functions once per process.
    """

    def __init__(self) -> None:
        self.made: dict[int, object] = {}
        self.shadows: dict[int, dict] = {}
        self.keep: list[object] = []
        self.by_src: dict[str, object] = {}  # twin source -> the Python function (to locate errors)
        self.incomplete = False  # some function in reach had no source to compile

    def twin(self, f):
        from triton.runtime.jit import JITFunction

        fn = f.fn
        lang = (getattr(fn, "__module__", "") or "").startswith("triton.")
        memo = _LANG_TWINS if lang else self.made
        if id(f) in memo:
            return memo[id(f)]
        new = types.FunctionType(fn.__code__, self.shadow(fn.__globals__), fn.__name__, fn.__defaults__,
                                 fn.__closure__)
        for attr in ("__kwdefaults__", "__module__", "__qualname__", "__doc__", "__annotations__"):
            setattr(new, attr, getattr(fn, attr))
        kw = {k: v for k, v in getattr(f, "kwargs", {}).items()
              if k in ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline") and v is not None}
        jit = JITFunction(new, **kw)
        memo[id(f)] = jit
        (_LANG_KEEP if lang else self.keep).append(f)
        if not lang:
            self.by_src[jit.src] = fn
        return jit

    def shadow(self, globals_: dict) -> dict:
        if id(globals_) in self.shadows:
            return self.shadows[id(globals_)]
        interp = _interpreted_type()
        copy = dict(globals_)
        self.shadows[id(globals_)] = copy
        for k, v in globals_.items():
            if interp and isinstance(v, interp):
                try:
                    copy[k] = self.twin(v)
                except (OSError, ValueError):  # no source file (made by exec): left as it is
                    self.incomplete = True
        return copy


#: Built on first use and kept: "snapshot" (triton.language's originals), "patches" (its @jit
#: functions and their twins). A dict, not rebound globals: the grader's guard restores rebound ones.
_LAZY: dict[str, object] = {}


def _language_patches(twins: _Twins) -> list[tuple[object, str, object, object]]:
    """(owner, name, interpreted value, twin) for every interpreted function triton.language exposes:
    module attributes (``tl.max``, ``tl.sum``...) and the tensor methods that forward to them."""
    if "patches" in _LAZY:
        return _LAZY["patches"]
    import triton.language as tl

    interp = _interpreted_type()
    patches = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for k, v in list(vars(mod).items()):
            if isinstance(v, interp):
                patches.append((mod, k, v, twins.twin(v)))
    for k, v in list(vars(tl.core.tensor).items()):
        cells = getattr(v, "__closure__", None) or ()
        inner = [c.cell_contents for c in cells if isinstance(getattr(c, "cell_contents", None), interp)]
        if inner:
            patches.append((tl.core.tensor, k, v, twins.twin(inner[0])))
    _LAZY["patches"] = patches
    return patches


_COMPILING = threading.Lock()
_MISSING = object()
_UNKNOWN = object()


def _lang_owners() -> list:
    """The objects Triton's interpreter patches while a kernel runs (see ``_patch_lang`` in
    triton/runtime/interpreter.py)."""
    import triton.language as tl

    core = tl.core
    return [tl, core, tl.math, core.tensor, core.tensor_descriptor_base, core.condition, core.dtype]


def _interpreter_made(value) -> bool:
    """A function (or partial, or property) defined by Triton's interpreter to patch the language."""
    if value is print or value is range:
        return True
    f = value.fget if isinstance(value, property) else getattr(value, "func", value)
    return inspect.isfunction(f) and f.__module__ == "triton.runtime.interpreter"


def _original(name: str, value, owners: list):
    """``value`` if it is Triton's own; for an interpreter patch, the function it replaced."""
    if not _interpreter_made(value):
        return value
    member = (getattr(value, "__kwdefaults__", None) or {}).get("member")
    if member is not None and not _interpreter_made(member):
        return member
    for owner in owners[:2]:  # tl.core re-exports tl's builtins and the reverse
        other = vars(owner).get(name)
        if other is not None and not _interpreter_made(other):
            return other
    return _UNKNOWN


def _lang_snapshot() -> dict:
    owners = _lang_owners()
    return {(i, name): _original(name, value, owners)
            for i, owner in enumerate(owners) for name, value in list(vars(owner).items())}


def _take_snapshot() -> dict:
    """triton.language as Triton made it, taken at the first compile: the interpreter leaves some of
    its patches in place after a run (those made while running a standard-library @jit function such
    as tl.max), and the compiler needs the originals (recovered from the patches where it ran before)."""
    if "snapshot" not in _LAZY:
        _LAZY["snapshot"] = _lang_snapshot()
    return _LAZY["snapshot"]


def _quick_triton_key() -> str:
    """Stands in for ``triton.runtime.cache.triton_key`` while the gate compiles on a CPU: Triton's
    hashes every file of its package and its 200 MB library once per process (seconds on a busy
    grader), only to tell builds of one version apart; the version and the library's size and
    time stamp do that too. Triton swaps it the same way in its own compile worker pools."""
    import sysconfig

    import triton

    lib = os.path.join(os.path.dirname(triton.__file__), "_C",
                       f"libtriton.{sysconfig.get_config_var('EXT_SUFFIX').split('.')[-1]}")
    st = os.stat(lib)
    return f"{triton.__version__}-attnlab-gate-{st.st_size}-{st.st_mtime_ns}"


@contextlib.contextmanager
def _compiler_view(twins: _Twins | None):
    """While compiling an interpreted kernel: Triton's interpret switch off, the interpreter's
    leftover patches of triton.language undone, and its ``@jit`` functions as JITFunctions; all
    put back afterwards, so the interpreter keeps working as before.

    Raises:
        _EnvironmentProblem: an interpreter patch whose original is unknown (then a compile error
            could be ours, not the learner's).
    """
    if twins is None:
        yield
        return
    import triton.compiler.code_generator  # noqa: F401  (imports cleanly only while the switch is on)
    import triton.runtime.cache
    from triton import knobs

    snapshot = _take_snapshot()
    with _COMPILING:
        owners = _lang_owners()
        changes = []

        def put(owner, name, value):
            changes.append((owner, name, vars(owner).get(name, _MISSING)))
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)

        old = knobs.runtime.interpret
        try:
            for i, owner in enumerate(owners):
                for name, value in list(vars(owner).items()):
                    orig = snapshot.get((i, name), _MISSING)
                    if orig is _UNKNOWN or (orig is _MISSING and _interpreter_made(value)
                                            and name not in ("__index__", "__bool__", "__repr__", "__str__")):
                        raise _EnvironmentProblem(f"triton.language.{name} is still patched by the interpreter")
                    if orig is not value and orig is not _MISSING:
                        put(owner, name, orig)
                    elif orig is _MISSING and _interpreter_made(value):
                        put(owner, name, _MISSING)
            for owner, name, _, twin in _language_patches(twins):
                put(owner, name, twin)
            put(triton.runtime.cache, "triton_key", _quick_triton_key)
            knobs.runtime.interpret = False
            yield
        finally:
            knobs.runtime.interpret = old
            for owner, name, value in reversed(changes):
                if value is _MISSING:
                    if name in vars(owner):
                        delattr(owner, name)
                else:
                    setattr(owner, name, value)


# ----------------------------------------------------------------------------------- compiling
def _frontend_supported() -> bool:
    from triton.compiler import ASTSource

    params = list(inspect.signature(ASTSource.make_ir).parameters)
    return params == ["self", "target", "options", "codegen_fns", "module_map", "context"]


def _gpu_target(t: Target):
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", t.arch, 32)


def _compile(jit, spec: Spec, target: Target, options: dict, full: bool):
    """Compile ``jit`` for ``target``: to a cubin (``full``), else Triton's front end only."""
    from triton.compiler import ASTSource

    if "quiet" not in _LAZY:  # Triton 3.9's notice about a future FP-fusion default: not the learner's
        _LAZY["quiet"] = warnings.filterwarnings("ignore", message=".*TRITON_DEFAULT_FP_FUSION.*")
    return _compile_source(ASTSource(jit, spec.signature, spec.constexprs, spec.attrs), target, options, full)


def _compile_source(src, target: Target, options: dict, full: bool):
    import triton

    if full or not _frontend_supported():
        return triton.compile(src, target=_gpu_target(target), options=options)
    from triton._C.libtriton import ir
    from triton.compiler import make_backend

    backend = make_backend(_gpu_target(target))
    opts = backend.parse_options(options)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    src.make_ir(_gpu_target(target), opts, backend.get_codegen_implementation(opts), backend.get_module_map(),
                context)
    return None


class _EnvironmentProblem(Exception):
    """The compile gate itself could not run (not the learner's doing)."""


def _is_learner_error(exc: BaseException) -> bool:
    from triton.compiler.errors import CompilationError

    if isinstance(exc, CompilationError):
        return True
    text = str(exc)
    if isinstance(exc, RuntimeError) and ("Unsupported function referenced" in text or "Global variable" in text
                                          or "PassManager" in text or "ptxas" in text.lower()):
        return not ("Cannot find ptxas" in text or "No such file" in text)
    return False


#: (kernel key, spec key, arch, warps, stages, full) -> None (compiled) or the error
_CACHE: dict[tuple, BaseException | None] = {}
#: (kernel key, arch) -> (spec key, warps, stages) of the configuration compiled fully (the first seen)
_FULL: dict[tuple, tuple] = {}
#: (kernel key, spec key, arch, warps, stages) -> the CompiledKernel
_COMPILED: dict[tuple, object] = {}
#: kernel keys whose advice line was printed
_ADVISED: set[str] = set()


#: (kernel key, signature) pairs already checked on every target
_SIGNATURES: set[tuple] = set()


def _plan(kkey, spec: Spec, targets, num_warps: int, num_stages: int) -> list[tuple[Target, tuple]]:
    """(target, cache key) of each compile one launch needs.

    The first configuration of a kernel is compiled to a cubin for the oldest and the newest
    target (sm_75 and sm_90, which bracket the others); every new
    signature (pointer dtypes, which ints are specialised) goes through the front end of every
    target (where target limits such as minimum dot sizes and FP8 support are checked); a new set
    of constexprs or warps of a known signature through the front end of the first target, where
    the Python constructs the interpreter accepts and compilers do not are rejected whatever the
    target."""
    every = (kkey, tuple(spec.signature.items())) not in _SIGNATURES
    _SIGNATURES.add((kkey, tuple(spec.signature.items())))
    first = (spec.key(), num_warps, num_stages)
    jobs = []
    for i, t in enumerate(targets):
        full = i in (0, len(targets) - 1) and _FULL.setdefault((kkey, t.arch), first) == first
        if full or every or i == 0:
            jobs.append((t, (kkey, spec.key(), t.arch, num_warps, num_stages, full)))
    return jobs


def _run(jit, spec: Spec, options: dict, jobs) -> list[BaseException | None]:
    """Compile the jobs not cached yet (full compiles side by side: ptxas and LLVM release the
    GIL); the outcome of each job, cached ones included: None (compiled) or the exception."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job):
        t, key = job
        try:
            compiled = _compile(jit, spec, t, options, key[-1])
        except Exception as exc:  # noqa: BLE001  (classified by the caller)
            return exc
        if compiled is not None:
            _COMPILED[key[:5]] = compiled
        return None

    todo = [j for j in jobs if j[1] not in _CACHE]
    full = [j for j in todo if j[1][-1]]
    outcomes = {}
    if len(full) > 1:
        pool = ThreadPoolExecutor(len(full))
        try:
            outcomes.update(zip((j[1] for j in full), pool.map(one, full)))
        finally:  # a timeout must not wait for the compiles it abandons
            pool.shutdown(wait=False, cancel_futures=True)
        # Triton's front end is not thread-safe: two side by side once failed a correct kernel inside
        # tl.max's combine function (a full `make test`, 2026-12-01). A failure counts only if it also
        # happens alone.
        for j in full:
            if outcomes[j[1]] is not None:
                outcomes[j[1]] = one(j)
    for j in todo:
        if j[1] not in outcomes:
            outcomes[j[1]] = one(j)
    return [outcomes[key] if key in outcomes else _CACHE[key] for _, key in jobs]


def _kernel_key(jit) -> str:
    """Triton's own hash of a kernel's source, its helpers' and the globals it reads."""
    return jit.cache_key


def compile_limit_s() -> float:
    """Seconds the gate may spend compiling one launch: three times the checks' limit for a call of
    learner code (:func:`attnlab.checks.call_limit_s`), at least 10 and at most 120."""
    from .checks import call_limit_s

    return min(120.0, max(10.0, 3 * call_limit_s()))


class GateWaited(Exception):
    """The gate's time ran out while the compile mostly waited (a lock, a loaded machine): not the
    learner's doing. ``wall_s`` and ``cpu_s`` are what the compile took and used."""

    def __init__(self, what: str, wall_s: float, cpu_s: float):
        super().__init__(f"compiling {what} for the GPU targets waited {wall_s:.0f} s using {cpu_s:.1f} s of CPU")
        self.wall_s, self.cpu_s = wall_s, cpu_s


def _cpu_s() -> float:
    """CPU seconds of this process (every thread: the gate compiles in a pool) and of the children
    it waited for (ptxas)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def _own_clock(what: str):
    """Pause an enclosing :func:`attnlab.checks.time_limit` (compiling is not the learner's run
    time) and limit the compile to :func:`compile_limit_s` instead.

    A compile stopped by the limit is the learner's only when it was computing: a compile that used
    less than half its wall time on a CPU (waiting for a lock, a machine loaded by other graders)
    raises :class:`GateWaited` instead of ``TimeoutError``, which the gate retries once and then
    reports for review, never as a lost point.
    """
    from .checks import time_limit

    main = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    remaining, interval = signal.getitimer(signal.ITIMER_REAL) if main else (0.0, 0.0)
    if remaining:
        signal.setitimer(signal.ITIMER_REAL, 0)
    start, cpu = time.perf_counter(), _cpu_s()
    try:
        with time_limit(compile_limit_s(), f"compiling {what} for the GPU targets"):
            yield
    except TimeoutError:
        wall, used = time.perf_counter() - start, _cpu_s() - cpu
        if used < 0.5 * wall:
            raise GateWaited(what, wall, used) from None
        raise
    finally:
        if remaining:
            signal.setitimer(signal.ITIMER_REAL, remaining, interval)


def _native_target() -> Target | None:
    """This machine's GPU as a :class:`Target` (None without a GPU or under the interpreter)."""
    from .core.device import runtime

    if runtime().interpret:
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return Target(major * 10 + minor, f"this machine's {name}")


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
                from .core.review import flag

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
        TimeoutError: compiling took longer than :func:`compile_limit_s`, computing all along.
        GateWaited: it ran out of time while waiting (handled by :func:`ensure_compiles`).
        TypeError: ``args``/``constexprs`` do not fit the kernel's parameters.
    """
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface):
        return
    targets = TARGETS if targets is None else targets
    # Every launch of a bench loop comes here: a launch seen before must cost microseconds, not the
    # ~150 us of building its signature (measured on the H200 as the decode step's launch floor).
    fast = (_helpers_of(kernel), _launch_key(kernel, args, constexprs), num_warps, num_stages, tuple(targets),
            native)
    if fast in _FAST_PASSED.get(id(kernel), ()):
        return
    spec = signature_of(kernel, args, constexprs)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    native = _native_target() if native else None
    passed = (kernel, _helpers_of(kernel), spec.key(), num_warps, num_stages, tuple(targets), native is None)
    if passed in _PASSED.get(id(kernel), ()):
        return  # this kernel, with the same helpers, passed this launch before
    for seen, make in _FAILED.get(id(kernel), ()):
        if seen == passed:
            raise make()  # failed before: the same message, without building the twins again
    with _own_clock(what):
        if native is not None:
            native_compiled = _check_native(kernel, args, constexprs, options, what, spec)
            targets = tuple(t for t in targets if t.arch != native.arch)
        interp = _interpreted_type()
        twins = _Twins() if interp and isinstance(kernel, interp) else None
        try:
            jit = twins.twin(kernel) if twins is not None else kernel
        except (OSError, ValueError) as exc:  # no source to compile (a kernel made by exec): cannot check it
            _flag(what, None, exc)
            return
        by_src = twins.by_src if twins is not None else _sources_of(kernel)
        failed: dict[Target, BaseException] = {}
        try:
            view = _compiler_view(twins)
            view.__enter__()
        except _EnvironmentProblem as exc:
            _flag(what, None, exc)
            return
        try:
            try:
                kkey = _kernel_key(jit)
            except Exception as exc:  # an ordinary Python function referenced: fails for every target
                if not _is_learner_error(exc):
                    raise
                failed = {t: exc for t in targets}
                kkey, checked = None, list(targets)
            jobs = _plan(kkey, spec, targets, num_warps, num_stages) if kkey is not None else []
            for (t, key), outcome in zip(jobs, _run(jit, spec, options, jobs)):
                if outcome is not None and not _is_learner_error(outcome):
                    _CACHE[key] = None  # not the learner's doing: reported once, never graded
                    _flag(what, t, outcome)
                    continue
                _CACHE[key] = outcome
            for t, key in jobs:
                if _CACHE[key] is not None:
                    failed[t] = _CACHE[key]
            checked = [t for t, _ in jobs]
            if failed and len(checked) < len(targets):  # say exactly which targets reject it
                rest = [(t, (kkey, spec.key(), t.arch, num_warps, num_stages, False))
                        for t in targets if t not in checked]
                for (t, key), outcome in zip(rest, _run(jit, spec, options, rest)):
                    _CACHE[key] = outcome if outcome is None or _is_learner_error(outcome) else None
                    if _CACHE[key] is not None:
                        failed[t] = _CACHE[key]
                checked = list(targets)
        finally:
            view.__exit__(None, None, None)
        if failed and twins is not None and twins.incomplete:
            _flag(what, None, next(iter(failed.values())))  # maybe a helper we could not compile
            return
        if failed:
            make = functools.partial(_failure, what, spec, options, failed, [t for t in checked if t not in failed],
                                     by_src)
            _FAILED.setdefault(id(kernel), []).append((passed, make))
            raise make()
        if kkey is not None and kkey not in _ADVISED:
            _ADVISED.add(kkey)
            _advise(what, kkey, spec, options, targets, native, native_compiled if native else None)
    _PASSED.setdefault(id(kernel), []).append(passed)
    _FAST_PASSED.setdefault(id(kernel), set()).add(fast)  # the kernel stays alive in _PASSED: ids stay unique


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


#: id(kernel) -> the launches that passed (each tuple holds the kernel, so ids stay unique)
_PASSED: dict[int, list] = {}
#: id(kernel) -> (launch, function making its error) of the launches that failed
_FAILED: dict[int, list] = {}
#: id(kernel) -> :func:`_launch_key` of the launches that passed (only kernels held by _PASSED)
_FAST_PASSED: dict[int, set] = {}
#: id(python function) -> (the function, its parameters' names, which are constexprs, do_not_specialize)
_PARAMS: dict[int, tuple] = {}


def _launch_key(kernel, args, constexprs) -> tuple:
    """What :func:`signature_of` reads from a launch's values, without binding them: per argument its
    kind, pointer dtype and 16-byte alignment, an int's width, divisibility and equality to 1, and the
    value of every constexpr. Equal keys give equal signatures for the same kernel."""
    fn = _python_function(kernel)
    info = _PARAMS.get(id(fn))
    if info is None or info[0] is not fn:
        params = inspect.signature(fn).parameters
        names = list(params)
        info = (fn, names, tuple("constexpr" in str(p.annotation) for p in params.values()),
                frozenset(_no_specialize(kernel, names)))
        _PARAMS[id(fn)] = info
    _, names, is_const, frozen = info

    def one(name, const, value):
        if const or value is None:
            # a float by repr: -0.0 == 0.0 (and hash alike) but a kernel may branch on its sign; nan != nan
            return ("c", type(value), value if isinstance(value, (int, str, bool)) else repr(value))
        if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
            return ("p", value.dtype, value.data_ptr() % 16 == 0)
        if isinstance(value, bool):
            return ("b",)
        if isinstance(value, int):
            return ("i", value == 1 and name not in frozen, -2**31 <= value < 2**31, value < 2**63, value % 16 == 0)
        return (type(value),)

    key = [one(names[i] if i < len(names) else None, i < len(names) and is_const[i], v) for i, v in enumerate(args)]
    key += [(k, one(k, k in names and is_const[names.index(k)], v)) for k, v in sorted(constexprs.items())]
    return tuple(key)


def _helpers_of(kernel) -> tuple:
    """What else in the kernel's module a compile depends on: the ``@triton.jit`` functions and
    constexprs there, by identity (a re-run cell that redefines a helper changes it)."""
    from triton.language import constexpr
    from triton.runtime.jit import KernelInterface

    fn = _python_function(kernel)
    return tuple((k, id(v)) for k, v in getattr(fn, "__globals__", {}).items()
                 if isinstance(v, (KernelInterface, constexpr)))

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
    """

    def __init__(self, kernel, what: str, interpret: bool = False):
        self.kernel, self.what, self.interpret = kernel, what, interpret

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
            if not self.interpret:
                return self.kernel[grid](*args, **kwargs)
            from .core.device import interpreted_twin

            with interpreted_twin(self.kernel) as twin:
                return twin[grid](*args, **kwargs)

        return launch


def _sources_of(kernel) -> dict:
    fn = _python_function(kernel)
    return {getattr(kernel, "src", ""): fn}


def _check_native(kernel, args, constexprs, options, what, spec):
    """On a GPU: compile through the kernel's own launch path (cached by Triton for the launch);
    the compiled kernel."""
    try:
        return kernel.warmup(*args, grid=(1,), **constexprs, **options)
    except Exception as exc:
        if not _is_learner_error(exc):
            raise
        native = _native_target()
        raise _failure(what, spec, options, {native: exc}, [], _sources_of(kernel)) from None


def _flag(what: str, target: Target | None, exc: BaseException) -> None:
    from .core.review import flag

    flag(f"could not check that {what} compiles for {target.describe() if target else 'the GPU targets'}: "
         f"the compiler itself failed "
         f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''})")


# ------------------------------------------------------------------------------------- messages
#: AST construct -> what to write instead (the interpreter runs these; GPU compilers do not)
_HINTS = types.MappingProxyType({
    "Break": "`break` cannot leave a Triton loop early: give the loop bounds that end where the work "
             "ends (e.g. `range(lo, hi, BLOCK)`), or mask the work of the steps you would skip.",
    "Continue": "`continue` is not supported in a Triton loop: mask the work of the steps you would skip "
                "with `tl.where` or `mask=`.",
    "Raise": "a kernel cannot raise exceptions; check inputs in the launcher, or use `tl.device_assert`.",
    "List": "Python lists do not exist on a GPU: keep values in separate variables or in one tensor "
            "(`tl.zeros`, `tl.arange`, `tl.where`).",
    "ListComp": "Python lists do not exist on a GPU: build a tensor instead (`tl.arange`, `tl.where`).",
    "Dict": "Python dicts do not exist on a GPU: use separate variables or tensors.",
    "DictComp": "Python dicts do not exist on a GPU: use separate variables or tensors.",
    "Set": "Python sets do not exist on a GPU: use tensors.",
    "Try": "`try`/`except` does not exist in a kernel.",
    "With": "`with` blocks do not exist in a kernel.",
    "Lambda": "lambdas cannot be compiled: write a `@triton.jit` helper function instead.",
})
_MESSAGE_HINTS = (
    ("Unsupported function referenced", "only `@triton.jit` functions and `triton.language` can be called "
     "from a kernel: put `@triton.jit` above the helper (it is then inlined), or inline its body."),
    ("more than one value is ambiguous", "a Python `if`/`while` on a whole block of values: the interpreter "
     "treats any block as True, a GPU needs one decision per element: use `tl.where(cond, a, b)`, or reduce "
     "to one value first (`tl.max`, `tl.sum`)."),
    ("non-constexpr conversion", "an f-string (or `print`) of run-time values runs on the host, not in a "
     "kernel: use `tl.device_print(\"x\", x)` to print from the GPU."),
    ("return` statements inside", "`return` inside a loop: let the loop run to its bound (mask the rest) "
     "and return after it."),
    ("global variable", "a kernel can only read globals that are constexprs (`LOG2E = tl.constexpr(1.4427)`); "
     "pass other values as arguments."),
    ("int() argument", "`int()` (or `float()`) of a run-time value needs it on the host: keep it a tensor "
     "(`range()` takes run-time bounds, `x.to(tl.int32)` converts)."),
    ("unsupported tensor index", "indexing a block with a Python integer or a run-time value: select with "
     "masks and reductions (`tl.sum(tl.where(offs == i, x, 0))`)."),
)


def _compilation_errors(exc: BaseException) -> list:
    from triton.compiler.errors import CompilationError

    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, CompilationError):
            chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _is_not_implemented(exc: BaseException) -> bool:
    for err in _compilation_errors(exc):
        node = getattr(err, "node", None)
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == "NotImplementedError":
                return True
    return False


def _locate(exc: BaseException, by_src: dict) -> tuple[str, str, str]:
    """(where, code, construct) of the innermost compile error: ``line 14 of the cell defining
    _softmax_kernel``, the code on that line, and the AST node type."""
    errs = [e for e in _compilation_errors(exc) if hasattr(getattr(e, "node", None), "lineno")]
    if not errs:
        m = re.search(r"<function (\w+)", str(exc))
        if m:  # an ordinary function referenced: find its first call in the kernel and its helpers
            for src, fn in by_src.items():
                for i, line in enumerate(src.splitlines()):
                    if re.search(rf"\b{m.group(1)}\s*\(", line):
                        return _where(fn, src, i + 1), line.strip(), "Call"
        return "", "", ""
    err = errs[-1]
    node, src = err.node, err.src or ""
    lines = src.splitlines()
    code = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
    fn = by_src.get(src)
    return (_where(fn, src, node.lineno) if fn is not None else f"line {node.lineno} of the kernel"), code, \
        type(node).__name__


def _where(fn, src: str, lineno: int) -> str:
    """``line N of the cell defining NAME`` (or ``file.py:N``) for line ``lineno`` of ``src``,
    Triton's copy of ``fn`` that starts at its ``def``."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return f"line {lineno} of {fn.__name__}"
    first_def = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("def ")), 0)
    line = start + first_def + lineno - 1
    filename = fn.__code__.co_filename
    if "ipykernel" in filename or filename.startswith("<"):
        return f"line {line} of the cell defining {fn.__name__}"
    return f"{os.path.basename(filename)}:{line} (in {fn.__name__})"


def _triton_says(exc: BaseException) -> str:
    errs = _compilation_errors(exc)
    text = (getattr(errs[-1], "error_message", None) or "") if errs else str(exc)
    text = (text or type(exc).__name__).strip().splitlines()
    text = text[-1] if text else type(exc).__name__
    return text if len(text) < 200 else text[:text.find(". ", 0, 200) + 1 or 200] + " [...]"


def _failure(what, spec, options, failed: dict, compiled: list, by_src: dict) -> BaseException:
    first = next(iter(failed.values()))
    if _is_not_implemented(first):
        return NotImplementedError(f"{what} is not implemented yet: its cell still raises NotImplementedError(). "
                                   f"Write the kernel there (replace the raise).")
    where, code, construct = _locate(first, by_src)
    says = _triton_says(first)
    hint = _HINTS.get(construct, "")
    named = re.search(r"global variable (\w+)", says)
    if named and any(callable(getattr(fn, "__globals__", {}).get(named.group(1))) for fn in by_src.values()):
        hint = dict(_MESSAGE_HINTS)["Unsupported function referenced"]  # a plain Python function
    for needle, text in _MESSAGE_HINTS:
        if not hint and needle.lower() in says.lower():
            hint = text
    names = ", ".join(t.describe() for t in failed)
    if compiled:
        head = (f"{what} compiles for {', '.join(t.describe() for t in compiled)} but NOT for {names}: "
                f"it would not run on that GPU")
    else:
        head = f"{what} does not compile for a GPU ({names}): it would not run on one"
    interp = "" if _native_target() in failed else ", although Triton's CPU interpreter runs it"
    lines = [f"{head}{interp}."]
    if where:
        lines.append(f"  {where}: `{code}`" if code else f"  {where}")
    if hint:
        lines.append(f"  {hint}")
    lines.append(f"  Triton's compiler says: {says}")
    lines.append(f"  (launch compiled: {spec.describe()}, num_warps={options['num_warps']}, "
                 f"num_stages={options['num_stages']})")
    return GpuCompileError("\n".join(lines), what=what, failed={t.name: _triton_says(e) for t, e in failed.items()},
                           compiled=[t.name for t in compiled])


# ------------------------------------------------------------------------------------ resources
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


def _resources_of(compiled, target: str, options: dict) -> Resources:
    regs, local = _cubin_usage(compiled.asm.get("cubin", b""))
    if regs is None and getattr(compiled, "n_regs", None) is not None:
        regs, local = compiled.n_regs, None
    return Resources(target, regs, local, int(compiled.metadata.shared), options["num_warps"], options["num_stages"])


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
    native = _native_target()
    if target is None and native is not None:
        ensure_compiles(kernel, args, constexprs, what=kernel.__name__, num_warps=num_warps, num_stages=num_stages)
        compiled = kernel.warmup(*args, grid=(1,), **constexprs, **options)
        return _resources_of(compiled, native.name, options)
    target = target or TARGETS[-1]
    spec = signature_of(kernel, args, constexprs)
    interp = _interpreted_type()
    twins = _Twins() if interp and isinstance(kernel, interp) else None
    jit = twins.twin(kernel) if twins is not None else kernel
    with _own_clock(kernel.__name__), _compiler_view(twins):
        key = (_kernel_key(jit), spec.key(), target.arch, num_warps, num_stages)
        if key not in _COMPILED:
            try:
                _COMPILED[key] = _compile(jit, spec, target, options, full=True)
            except Exception as exc:
                if not _is_learner_error(exc):
                    raise
                by_src = twins.by_src if twins is not None else _sources_of(kernel)
                raise _failure(kernel.__name__, spec, options, {target: exc}, [], by_src) from None
    return _resources_of(_COMPILED[key], target.name, options)


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


def _advise(what, kkey, spec, options, targets, native, native_compiled=None) -> None:
    """Print one line per kernel: the targets it compiles for, and its resources (advice only)."""
    done = ([native] if native is not None else []) + list(targets)
    line = f"{ADVICE_PREFIX}{what} compiles for {', '.join(t.describe() for t in done)}."
    pick = TARGETS[-1] if native is None else native
    compiled = native_compiled if native is not None else \
        _COMPILED.get((kkey, spec.key(), pick.arch, options["num_warps"], options["num_stages"]))
    if compiled is not None:
        with contextlib.suppress(Exception):
            line += (f" With {spec.describe()}, num_warps={options['num_warps']}: "
                     f"{describe_resources(_resources_of(compiled, pick.name, options))} (advice, not graded)")
    print(line, flush=True)

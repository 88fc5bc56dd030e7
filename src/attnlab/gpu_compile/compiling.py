"""Compiling a launch for a target (:func:`compile_for`), which compiles one launch needs (:func:`plan`),
and the outcomes kept for the life of the process (:data:`OUTCOMES`, :data:`COMPILED`).
"""

from __future__ import annotations

import inspect
import warnings

from .signature import Spec
from .targets import Target

#: Built on first use and kept (a dict, not a rebound global: the grader's guard restores rebound ones).
_QUIET: dict[str, object] = {}


def _frontend_supported() -> bool:
    from triton.compiler import ASTSource

    params = list(inspect.signature(ASTSource.make_ir).parameters)
    return params == ["self", "target", "options", "codegen_fns", "module_map", "context"]


def _gpu_target(t: Target):
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", t.arch, 32)


def compile_for(jit, spec: Spec, target: Target, options: dict, full: bool):
    """Compile ``jit`` for ``target``: to a cubin (``full``), else Triton's front end only."""
    from triton.compiler import ASTSource

    if "quiet" not in _QUIET:  # Triton 3.9's notice about a future FP-fusion default: not the learner's
        _QUIET["quiet"] = warnings.filterwarnings("ignore", message=".*TRITON_DEFAULT_FP_FUSION.*")
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


def is_learner_error(exc: BaseException) -> bool:
    from triton.compiler.errors import CompilationError

    if isinstance(exc, CompilationError):
        return True
    text = str(exc)
    if isinstance(exc, RuntimeError) and ("Unsupported function referenced" in text or "Global variable" in text
                                          or "PassManager" in text or "ptxas" in text.lower()):
        return not ("Cannot find ptxas" in text or "No such file" in text)
    return False


#: (kernel key, spec key, arch, warps, stages, full) -> None (compiled) or the error
OUTCOMES: dict[tuple, BaseException | None] = {}
#: (kernel key, arch) -> (spec key, warps, stages) of the configuration compiled fully (the first seen)
_FULL: dict[tuple, tuple] = {}
#: (kernel key, spec key, arch, warps, stages) -> the CompiledKernel
COMPILED: dict[tuple, object] = {}
#: (kernel key, signature) pairs already checked on every target
_SIGNATURES: set[tuple] = set()


def plan(kkey, spec: Spec, targets, num_warps: int, num_stages: int) -> list[tuple[Target, tuple]]:
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


def run(jit, spec: Spec, options: dict, jobs) -> list[BaseException | None]:
    """Compile the jobs not cached yet (full compiles side by side: ptxas and LLVM release the
    GIL); the outcome of each job, cached ones included: None (compiled) or the exception."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job):
        t, key = job
        try:
            compiled = compile_for(jit, spec, t, options, key[-1])
        except Exception as exc:  # noqa: BLE001  (classified by the caller)
            return exc
        if compiled is not None:
            COMPILED[key[:5]] = compiled
        return None

    todo = [j for j in jobs if j[1] not in OUTCOMES]
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
    return [outcomes[key] if key in outcomes else OUTCOMES[key] for _, key in jobs]


def kernel_key(jit) -> str:
    """Triton's own hash of a kernel's source, its helpers' and the globals it reads."""
    return jit.cache_key

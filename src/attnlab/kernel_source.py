"""The kernel graded is the kernel its source defines, and nothing attached to the object.

A ``@triton.jit`` object carries more than its source: Triton runs its pre-run hooks with the
launch's arguments (``kernel.add_pre_run_hook(fn)``), a ``launch_metadata`` callback, the hooks
registered in ``triton.knobs.runtime``; its ``fn``, ``src`` or ``rewriter`` can be swapped after
decoration, and the globals it reads rebound. Any of these can run Python (a ``torch.softmax``
into the output) while a kernel that only loads its inputs is graded.

So every course launcher launches :func:`from_source` of the learner's kernel (through
:func:`attnlab.core.device.runnable_kernel`): a new object of Triton's own type, compiled from the
kernel's source text (the ``def`` its function was made from, without decorators) in a clean
namespace holding only what a GPU compiler lets a kernel see:

- the modules ``triton``, ``triton.language`` (and its submodules) and ``math``;
- ``@triton.jit`` helpers the kernel names, each rebuilt from its own source the same way
  (Triton's own library functions are kept as they are);
- constants: numbers, strings, ``None``, tuples of them, ``tl.constexpr`` values, Triton dtypes,
  and names Triton's language defines (``from triton.language import constexpr``);
- of Python's builtins, only those Triton's code generator accepts (``range``, ``min``, ``max``...).

Any other global (a plain Python function, a module such as ``torch`` or ``numpy``, an object) is
refused with a message naming it; a kernel with no readable source is refused too. What the object
carried beyond its source (hooks, callbacks, swapped attributes) is reported for review
(:func:`attnlab.core.review.flag`) and has no effect on the grade.

While a check calls learner code (:func:`checking`, entered by ``attnlab.verify.call_learner``), each launch
of a rebuilt kernel runs under :class:`NoTorch`, a dispatch mode that refuses every torch operation
except the copies Triton's interpreter itself makes of the arguments; Triton's launch and compile
hooks (``triton.knobs.runtime.*_hook``) are emptied first, and a thread running notebook code during
the launch is reported for review. Outside checks (a learner's own runs, benchmarks) a rebuilt kernel
launches as Triton launches it.
"""
# Length: One job, long: rebuilding a kernel from its source and refusing what it may not see,
# each rule with its reason.

from __future__ import annotations

import __future__
import ast
import builtins
import contextlib
import dis
import inspect
import operator
import os
import re
import sys
import textwrap
import threading
import types

__all__ = ["from_source", "is_rebuilt", "carried", "KernelSourceError", "NoTorch", "NoTorchError", "checking",
           "in_check", "clear_triton_hooks", "triton_patches", "watch", "foreign_threads", "TRITON_PUBLIC"]

#: Python's builtins a kernel may name: those Triton's code generator resolves (its builtin namespace).
ALLOWED_BUILTINS = ("len", "list", "range", "float", "int", "isinstance", "getattr", "hasattr", "print", "min",
                    "max")
#: Keyword arguments of ``@triton.jit`` kept on a rebuilt kernel (plain data; ``launch_metadata`` and
#: ``repr`` are callbacks Triton runs at a launch or compile, and are dropped).
_KEPT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")
_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_PLAIN = (int, float, bool, str, complex, type(None))
_DIR = os.path.dirname(os.path.abspath(__file__))
_ABSENT = object()


class KernelSourceError(TypeError):
    """A kernel that cannot be rebuilt from its source alone (the message says why and what to do)."""


def _jit_types():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


def _name(kernel) -> str:
    return getattr(getattr(kernel, "fn", None), "__name__", type(kernel).__name__)


# ------------------------------------------------------------------------------------------ memo
class _Built:
    """One rebuilt kernel and what it was built from: valid while every input is the same object."""

    __slots__ = ("original", "fn", "code", "deps", "kernel")

    def __init__(self, original, fn, code, deps, kernel):
        self.original, self.fn, self.code, self.deps, self.kernel = original, fn, code, deps, kernel

    def valid(self) -> bool:
        if self.original.fn is not self.fn or self.fn.__code__ is not self.code:
            return False
        return all(scope.get(name, _ABSENT) is value for scope, name, value in self.deps)


#: id(learner kernel) -> _Built (the learner object is kept alive in it, so ids stay unique).
_BUILT: dict[int, _Built] = {}
#: id(rebuilt kernel) -> rebuilt kernel: launchers may prepare an already rebuilt kernel again.
_REBUILT: dict[int, object] = {}
#: What was reported for review already (once per kernel and finding).
_REPORTED: set[tuple[int, str]] = set()


def is_rebuilt(kernel) -> bool:
    """True for a kernel :func:`from_source` made (or its interpreted twin)."""
    return _REBUILT.get(id(kernel)) is kernel


def from_source(kernel):
    """``kernel`` rebuilt from its source: a new object of the same type (``JITFunction``, or
    ``InterpretedFunction`` under the interpreter), whose function is compiled from the kernel's
    ``def`` in a clean namespace (see the module docstring). Made once per kernel object and reused
    while the kernel's function, code and the globals it names stay the same objects.

    Args:
        kernel: exactly a ``@triton.jit`` object (``attnlab.core.device.is_kernel``).

    Returns:
        The rebuilt kernel, with no hooks; its launches run under :class:`NoTorch`.

    Raises:
        KernelSourceError: (a TypeError) no source can be read, or the kernel names a global that a
            GPU kernel cannot use (a Python function, a module other than triton and math, an object).
    """
    if is_rebuilt(kernel):
        return kernel
    hit = _BUILT.get(id(kernel))
    if hit is not None and hit.original is kernel and hit.valid():
        _report_changes(kernel)
        return hit.kernel
    deps: list = []
    rebuilt = _rebuild(kernel, deps, {})
    _BUILT[id(kernel)] = _Built(kernel, kernel.fn, kernel.fn.__code__, tuple(deps), rebuilt)
    _report_changes(kernel)
    return rebuilt


#: id(kernel) -> (kernel, the identities of its attributes and its hook count) when last looked at.
_LOOKED: dict[int, tuple] = {}


def _report_changes(kernel) -> None:
    """Report what the kernel carries, looking again only when one of its attributes changed."""
    attrs = vars(kernel)
    now = (tuple((k, id(v)) for k, v in attrs.items()), len(attrs.get("pre_run_hooks") or ()))
    seen = _LOOKED.get(id(kernel))
    if seen is not None and seen[0] is kernel and seen[1] == now:
        return
    _LOOKED[id(kernel)] = (kernel, now)
    _report(kernel, carried(kernel))


def _source(fn, what: str) -> tuple[str, int, str]:
    """(the ``def`` text, dedented and without decorators; its first line in the file; the file)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        lines, start = [], 0
    text = textwrap.dedent("".join(lines))
    found = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
    if found is None:
        raise KernelSourceError(
            f"{what}: the source of this kernel cannot be read, so it cannot be graded (a kernel made by exec() or "
            f"from a string has none). Define it with `@triton.jit` above a `def` in the notebook cell.")
    return text[found.start():], start + text[:found.start()].count("\n"), fn.__code__.co_filename


def _names(code) -> list[str]:
    """The global names ``code`` and the code nested in it read, in order of first use."""
    seen: dict[str, None] = {}
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in _GLOBAL_LOADS:
                seen.setdefault(ins.argval, None)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return list(seen)


#: Names that reach Python's machinery rather than a tensor's values: under the interpreter they can
#: touch memory past the work ledger (a red team read rows through the interpreter's builder class,
#: found with getattr on split strings, from a branch a GPU compile prunes); a GPU kernel has no use for them.
_REFLECTION = frozenset({"getattr", "hasattr", "setattr", "delattr", "vars", "globals", "locals", "eval", "exec",
                         "compile", "__import__", "type", "object", "super", "open", "id"})
#: The parts of triton a kernel may name (``triton.language`` is ``tl``).
TRITON_PUBLIC = frozenset({"language", "jit", "cdiv", "next_power_of_2"})


def _refuse_reflection(tree: ast.AST, what: str) -> None:
    """Raise KernelSourceError where a learner's kernel names interpreter handles, private attributes,
    reflection builtins or Triton's runtime: code that runs only under the interpreter, beside the
    ledger, and that no GPU compiler takes."""
    for node in ast.walk(tree):
        bad = None
        if isinstance(node, ast.Attribute) and (node.attr == "handle" or node.attr.startswith("_")):
            bad = f".{node.attr}"
        elif isinstance(node, ast.Name) and node.id in _REFLECTION:
            bad = node.id
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "triton"
              and node.attr not in TRITON_PUBLIC):
            bad = f"triton.{node.attr}"
        if bad is not None:
            raise KernelSourceError(
                f"{what}: the kernel uses {bad!r} (line {node.lineno}), which reaches Python's or Triton's "
                f"machinery instead of values: a GPU kernel computes with triton.language only (tl.load, "
                f"tl.dot, tl.where...)")


def _rebuild(kernel, deps: list, building: dict):
    jit_cls, interpreted_cls = _jit_types()
    fn = kernel.fn
    what = fn.__name__
    text, first, filename = _source(fn, what)
    tree = ast.parse(text)
    ast.increment_lineno(tree, first - 1)  # tracebacks and Triton's messages point at the cell's lines
    if not str(fn.__globals__.get("__name__", "")).startswith("triton"):
        _refuse_reflection(tree, what)
    flags = fn.__code__.co_flags & __future__.annotations.compiler_flag
    module_code = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    scopes = [fn.__globals__]
    if fn.__closure__:
        scopes.insert(0, {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)})
    module = str(fn.__globals__.get("__name__", "__main__"))
    import triton.language as tl

    # Triton's interpreter patches the language modules it finds among a function's globals, and refuses
    # a function that has none (a helper that names no tl.* function): the module is there under its own name
    ns: dict = {"__builtins__": {n: getattr(builtins, n) for n in ALLOWED_BUILTINS},
                "__name__": "__main__" if module.startswith("triton") else module, "triton.language": tl}
    building[id(kernel)] = ns
    for name in _names(module_code):
        if name == fn.__name__:
            continue  # the def binds it
        scope = next((s for s in scopes if name in s), None)
        if scope is None:
            if name in ALLOWED_BUILTINS:
                continue
            if name == "NotImplementedError":  # the release's placeholder body, not a construct to explain
                raise NotImplementedError(f"{what} is not implemented yet (its body still raises "
                                          f"NotImplementedError)")
            if hasattr(builtins, name):
                raise KernelSourceError(f"{what}: the kernel uses Python's {name!r}, which a GPU compiler does not "
                                        f"accept in a kernel (of Python's builtins only {', '.join(ALLOWED_BUILTINS)}): "
                                        f"use triton.language's equivalent (tl.abs, tl.sum, tl.where...)")
            raise KernelSourceError(f"{what}: the kernel uses the name {name!r}, which is not defined where the "
                                    f"kernel is (a kernel sees triton, tl, math, @triton.jit functions and constants)")
        value = scope[name]
        deps.append((scope, name, value))
        ns[name] = _admit(what, name, value, deps, building)
    exec(module_code, ns)  # noqa: S102 (the learner's own def, in a namespace that holds nothing else)
    new = ns[fn.__name__]
    new.__qualname__ = fn.__name__
    if type(kernel) is interpreted_cls:
        options = dict(getattr(kernel, "kwargs", {}) or {})
    else:
        options = {k: getattr(kernel, k, None) for k in _KEPT_OPTIONS}
    options = {k: v for k, v in options.items() if k in _KEPT_OPTIONS and _plain(v)}
    rebuilt = type(kernel)(new, **options)
    watch(rebuilt)
    return rebuilt


def _plain(value) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return type(value) in _PLAIN


def _triton_defined(value) -> bool:
    """A module attribute of Triton's language (or of ``triton`` itself), by identity."""
    module = getattr(value, "__module__", None)
    name = getattr(value, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        return False
    if not (module == "triton" or module.startswith("triton.language")):
        return False
    owner = sys.modules.get(module)
    return owner is not None and vars(owner).get(name, _ABSENT) is value


def _trusted_module(value) -> bool:
    if type(value) is not types.ModuleType:
        return False
    name = value.__name__
    if not (name in ("math", "triton") or name.startswith("triton.language")):
        return False
    return sys.modules.get(name) is value


def _admit(what: str, name: str, value, deps: list, building: dict):
    """The value a rebuilt kernel sees for the global ``name`` (``value`` in the learner's namespace)."""
    import triton.language as tl

    jit_cls, interpreted_cls = _jit_types()
    if type(value) in (jit_cls, interpreted_cls):
        if _triton_defined(value):
            return value  # Triton's own library (tl.sum's combine functions are compared by identity)
        if id(value) in building:
            raise KernelSourceError(f"{what}: the @triton.jit function {name!r} calls itself (directly or through "
                                    f"another one): a GPU kernel cannot recurse")
        hit = _BUILT.get(id(value))
        if hit is not None and hit.original is value and hit.valid():
            deps += hit.deps
            return hit.kernel
        sub: list = []
        helper = _rebuild(value, sub, building)
        _BUILT[id(value)] = _Built(value, value.fn, value.fn.__code__, tuple(sub), helper)
        deps += sub
        _report(value, carried(value))
        return helper
    if isinstance(value, types.ModuleType):
        if _trusted_module(value):
            return value
        raise KernelSourceError(
            f"{what}: the kernel uses the module {name!r} ({getattr(value, '__name__', '?')}); a kernel may use only "
            f"triton, triton.language and math. Everything it computes must be written with tl.* inside the kernel.")
    if type(value) is tl.constexpr:
        inner = value.value
        if _plain(inner) or isinstance(inner, tl.dtype):
            return tl.constexpr(inner)
    elif _plain(value) or (isinstance(value, tl.dtype) and type(value).__module__.startswith("triton.language")):
        return value
    elif _triton_defined(value):
        return value
    kind = type(value).__qualname__
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)) or callable(value):
        advice = (f"a kernel can call only @triton.jit functions and triton.language: put @triton.jit above "
                  f"`def {name}` (it is then inlined), or write its work inside the kernel")
    else:
        advice = "pass it as an argument, or make it a constant (a number, or tl.constexpr(...))"
    raise KernelSourceError(f"{what}: the kernel uses the global {name!r}, a {kind}, which a GPU kernel cannot use: "
                            f"{advice}.")


# ----------------------------------------------------------------------------- what was carried
_STANDARD_ATTRS: dict[type, frozenset] = {}
#: What Triton sets on a compiled-mode kernel at its first launch (``JITFunction.create_binder``).
_LAZY_ATTRS = frozenset({"CompiledKernel", "compile", "ASTSource"})


def _standard_attrs(kind) -> frozenset:
    """The instance attributes Triton itself gives a kernel of this type (from a kernel of our own)."""
    if kind not in _STANDARD_ATTRS:
        def _probe_kernel(x):  # a def with source: Triton reads it
            return x

        _STANDARD_ATTRS[kind] = frozenset(vars(kind(_probe_kernel))) | _LAZY_ATTRS
    return _STANDARD_ATTRS[kind]


def carried(kernel) -> list[str]:
    """What ``kernel`` carries beyond its source, one phrase each (empty for a plain ``@triton.jit``
    object): pre-run hooks, launch callbacks, attributes Triton does not set, a swapped source."""
    found = []
    attrs = vars(kernel)
    hooks = attrs.get("pre_run_hooks") or ()
    if hooks:
        found.append(f"{len(hooks)} pre-run hook(s) ({', '.join(_describe(h) for h in hooks)}), which Triton runs "
                     f"with the launch's arguments")
    options = dict(attrs.get("kwargs") or {})
    options.update({k: attrs.get(k) for k in ("launch_metadata", "_repr") if attrs.get(k) is not None})
    for key, value in options.items():
        if callable(value):
            found.append(f"a {key.lstrip('_')} callback ({_describe(value)})")
    extra = sorted(set(attrs) - _standard_attrs(type(kernel)))
    if extra:
        found.append(f"attributes Triton does not set ({', '.join(extra)})")
    fn = attrs.get("fn")
    rewriter = attrs.get("rewriter")
    if rewriter is not None and getattr(rewriter, "fn", fn) is not fn:
        found.append("an interpreter rewriter made for another function")
    if "_src" in attrs and fn is not None:
        try:
            text, _, _ = _source(fn, "")
        except KernelSourceError:
            text = None
        if text is not None and attrs["_src"].strip() != text.strip():
            found.append("a source text (src) that is not its function's")
    return found


def _describe(obj) -> str:
    code = getattr(getattr(obj, "__func__", obj), "__code__", None)
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{name}, line {code.co_firstlineno}" if code is not None else name


def _report(kernel, found: list[str]) -> None:
    for item in found:
        key = (id(kernel), item)
        if key in _REPORTED:
            continue
        _REPORTED.add(key)
        from .core.review import flag

        flag(f"the kernel object {_name(kernel)} carried {item}: the grader launched the kernel rebuilt from its "
             f"source, without it")


# ------------------------------------------------------------------------------- Triton's hooks
_HOOK_NAMES: list[tuple] = []  # (the knobs class, its hook attributes), found once


def clear_triton_hooks() -> list[str]:
    """Empty the hooks of ``triton.knobs.runtime`` (launch, compile and load hooks), which Triton runs
    at a launch or a compile with access to the caller's frames; returns their names (reported for
    review). The course sets none of them."""
    try:
        from triton import knobs
    except ImportError:
        return []
    runtime = knobs.runtime
    if not _HOOK_NAMES or _HOOK_NAMES[0][0] is not type(runtime):
        _HOOK_NAMES[:] = [(type(runtime), tuple(n for n in dir(type(runtime))
                                                 if n.endswith("_hook") and not n.startswith("__")))]
    cleared = []
    for name in _HOOK_NAMES[0][1]:
        value = getattr(runtime, name, None)
        calls = getattr(value, "calls", None)
        if isinstance(calls, list):
            if calls:
                calls.clear()
                cleared.append(name)
        elif value is not None:
            try:
                setattr(runtime, name, None)
                cleared.append(name)
            except Exception:  # noqa: BLE001 (a read-only knob: nothing set there by a cell either)
                pass
    if cleared:
        from .core.review import flag

        flag(f"Triton's {', '.join(f'knobs.runtime.{n}' for n in cleared)} had been set; a hook runs Python during "
             f"a launch or compile, so it was removed before the graded launch")
    return cleared


# --------------------------------------------------------------------------- no torch in launch
def _triton_copies() -> frozenset:
    """The code objects of Triton's interpreter that copy a launch's tensor arguments to and from the
    host: the only torch operations a launch may run."""
    from triton.runtime import interpreter as ti

    codes = set()
    for meth in ("_init_args_hst", "_restore_args_dev"):
        code = getattr(getattr(ti.GridExecutor, meth, None), "__code__", None)
        if code is None or os.path.abspath(code.co_filename) != os.path.abspath(ti.__file__):
            continue
        stack = [code]
        while stack:
            c = stack.pop()
            codes.add(c)
            stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return frozenset(codes)


# caches filled in place on first use (never rebound: the grader's guard restores rebound module globals)
_COPIES: list[frozenset] = []
_TORCH_DIR: list[str] = []


def _torch_dir() -> str:
    if not _TORCH_DIR:
        import torch

        _TORCH_DIR.append(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    return _TORCH_DIR[0]


def _caller(frame):
    """The first frame outside torch's package, from ``frame`` outwards."""
    torch_dir = _torch_dir()
    while frame is not None and frame.f_code.co_filename.startswith(torch_dir):
        frame = frame.f_back
    return frame


def _make_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class _NoTorch(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # no torch._dynamo import for this

        def __init__(self, what: str):
            super().__init__()
            self.what = what
            self.refused: list[str] = []
            if not _COPIES:
                _COPIES.append(_triton_copies())
            self.allowed = _COPIES[0]

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            caller = _caller(sys._getframe(1))
            if caller is not None and caller.f_code in self.allowed:
                return func(*args, **(kwargs or {}))
            where = (f"{caller.f_code.co_name} ({caller.f_code.co_filename}, line {caller.f_lineno})"
                     if caller is not None else "code with no Python frame")
            self.refused.append(f"{func.name()} from {where}")
            raise NoTorchError(f"{self.what}: torch ran {func.name()} during the kernel's launch (from {where}); "
                               f"while a kernel is launched nothing but the kernel may compute")

    return _NoTorch


class NoTorchError(RuntimeError):
    """A torch operation was refused while a learner kernel was launched."""


_MODE: list = []


def NoTorch(what: str):  # noqa: N802 (used like a class: ``with NoTorch(what) as probe``)
    """A ``TorchDispatchMode`` that refuses (raises :class:`NoTorchError` for) every torch operation
    except the argument copies of Triton's interpreter, recording each refusal in ``.refused``."""
    if not _MODE:
        _MODE.append(_make_mode())
    return _MODE[0](what)


def _waits_for_backward(frame) -> bool:
    """Whether a thread's innermost Python frame is torch's call into the C++ autograd engine: the thread
    is blocked there until the backward pass (which this launch belongs to) has finished. On a GPU the
    engine runs CUDA nodes on a device thread of its own, so the cell that called ``.backward()`` waits
    in this frame while that thread launches the kernels."""
    path = frame.f_code.co_filename.replace(os.sep, "/")
    return frame.f_code.co_name == "_engine_run_backward" and path.endswith("torch/autograd/graph.py")


def foreign_threads() -> list[str]:
    """Other threads whose stack holds code from outside Python's library and the import path (the
    working folder left out): code a notebook started (a thread can write a kernel's output while the
    launch runs, unseen by this thread's dispatch mode). When this launch runs inside a backward pass
    (an autograd node is current), a thread blocked in the autograd engine is the one waiting for it
    and runs nothing meanwhile: it is not counted."""
    import torch

    here = os.getcwd()
    roots = {os.path.dirname(os.__file__) + os.sep} | {os.path.abspath(p) + os.sep for p in sys.path
                                                        if p and os.path.abspath(p) != here and os.path.isdir(p)}
    found = []
    me = threading.get_ident()
    in_backward = torch._C._current_autograd_node() is not None
    for ident, frame in sys._current_frames().items():
        if ident == me or (in_backward and _waits_for_backward(frame)):
            continue
        while frame is not None:
            path = frame.f_code.co_filename
            if not (path.startswith(tuple(roots)) or path.startswith(_DIR) or path.startswith("<frozen")):
                found.append(f"{frame.f_code.co_name} ({path}, line {frame.f_lineno})")
                break
            frame = frame.f_back
    return found


#: How many checks are calling learner code now (:func:`checking`); a list, filled in place.
_CHECKING = [0]


@contextlib.contextmanager
def checking():
    """While a check calls learner code (``attnlab.verify.call_learner``): launches of rebuilt kernels are watched."""
    _CHECKING[0] += 1
    try:
        yield
    finally:
        _CHECKING[0] -= 1


def in_check() -> bool:
    """True while a check calls learner code."""
    return _CHECKING[0] > 0


def watch(kernel) -> None:
    """Make every launch of ``kernel`` (one of ours) inside a check (:func:`checking`) run under
    :class:`NoTorch`, with Triton's hooks emptied; a warmup (the compile gate's compile) runs with the
    hooks emptied only. Outside checks (a learner's own launches, benchmarks) it launches as Triton does.

    Implemented as an instance ``run`` (what ``kernel[grid](...)`` and ``kernel.warmup`` call), so the
    kernel stays exactly Triton's type for the compile gate and the load accounting."""
    import torch

    run = type(kernel).run  # Triton's own, looked up now (the guard restores a patched class)

    def watched_run(*args, grid, warmup, **kwargs):
        if not _CHECKING[0]:  # a learner's own launch, a benchmark: nothing is graded, no overhead
            return run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        clear_triton_hooks()
        if warmup:
            return run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        what = kernel.fn.__name__
        threads = foreign_threads()
        if threads:
            _flag_once(kernel, f"a thread running notebook code ({threads[0]}) was alive while {what} was launched: "
                               f"it could have written the kernel's output")
        depth = torch._C._len_torch_dispatch_stack()
        probe = NoTorch(what)
        try:
            with probe:
                result = run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
                if torch._C._len_torch_dispatch_stack() != depth + 1:
                    probe.refused.append("the dispatch mode stack was changed during the launch")
        finally:  # a refusal raised inside the launch (and perhaps caught there) is reported all the same
            if probe.refused:
                _flag_once(kernel, f"{what}: torch ran while the kernel was launched ({probe.refused[0]})")
        if probe.refused:
            raise NoTorchError(f"{what}: torch computed during the kernel's launch ({probe.refused[0]}). The grade is "
                               f"the kernel alone: no hook, callback or other code may compute while it runs.")
        return result

    kernel.run = watched_run
    _REBUILT[id(kernel)] = kernel


def _flag_once(kernel, text: str) -> None:
    key = (id(kernel), text)
    if key not in _REPORTED:
        _REPORTED.add(key)
        from .core.review import flag

        flag(text)


# ---------------------------------------------------------------------- Triton's own code, intact
#: Triton's modules whose functions and classes run while a kernel is launched, compiled or interpreted.
_TRITON_MODULES = ("triton.language", "triton.runtime.jit", "triton.runtime.interpreter", "triton.runtime.autotuner",
                   "triton.compiler", "triton.knobs")
#: (owner, name) -> value, as last verified: a launch looks only at what changed since.
_VERIFIED: dict[tuple[int, str], object] = {}
#: id(owner) -> (owner, its attribute names, their values) when last found intact.
_SEEN: dict[int, tuple] = {}
_OWNERS: list = []


def _code(value):
    """The Python function a callable attribute runs, or None (data, or code written in C)."""
    for _ in range(4):
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        elif hasattr(value, "func") and type(value).__name__ == "partial":
            value = value.func
        elif isinstance(value, types.MethodType):
            value = value.__func__
        else:
            break
    if not isinstance(getattr(value, "__code__", None), types.CodeType):
        value = getattr(type(value), "__call__", None) if callable(value) and not isinstance(value, type) else None
    return value if isinstance(getattr(value, "__code__", None), types.CodeType) else None


def _generated_by_triton(fn) -> bool:
    """Code made at run time for one of Triton's modules (dataclasses' ``__init__``, ``__eq__``...): its file is
    ``<string>`` and its globals are the Triton module's own."""
    module = sys.modules.get(str(getattr(fn, "__module__", "")))
    return (module is not None and module.__name__.startswith("triton")
            and getattr(fn, "__globals__", None) is vars(module))


def _trusted_dirs() -> tuple[str, ...]:
    import triton

    stdlib = os.path.dirname(os.__file__)
    return (os.path.dirname(os.path.abspath(triton.__file__)) + os.sep, _DIR + os.sep, stdlib + os.sep)


def _owners() -> list:
    """Triton's modules above (with their submodules) and the classes they define."""
    if len(_OWNERS) == 1 and _OWNERS[0][2] == len(sys.modules):
        return _OWNERS[0][1]
    names = [n for n in list(sys.modules)
             if n.startswith("triton") and any(n == m or n.startswith(m + ".") for m in _TRITON_MODULES)]
    owners = []
    for n in names:
        mod = sys.modules.get(n)
        if not isinstance(mod, types.ModuleType):
            continue
        owners.append((n, mod))
        owners += [(f"{n}.{v.__name__}", v) for v in list(vars(mod).values())
                   if isinstance(v, type) and v.__module__ == n]
    _OWNERS[:] = [(tuple(names), owners, len(sys.modules))]
    return owners


def triton_patches() -> list[str]:
    """Functions in Triton's language, runtime and compiler (module attributes and class attributes)
    whose code comes from outside Triton, this package and Python's standard library: code a notebook
    put there, which Triton then runs while a kernel is launched, compiled or interpreted. One entry
    per attribute, ``"triton.runtime.jit.JITFunction.run (file, line)"``; empty when Triton is intact or
    not imported. Cheap after the first call: only attributes that changed since are looked at."""
    if "triton.runtime.jit" not in sys.modules:
        return []
    trusted = _trusted_dirs()
    found = []
    for label, owner in _owners():
        now = vars(owner)
        seen = _SEEN.get(id(owner))
        if seen is not None and seen[0] is owner and len(now) == len(seen[2]) \
                and all(map(operator.is_, now.values(), seen[2])) and tuple(now) == seen[1]:
            continue  # nothing in it changed since it was last found intact (compared in C: cheap)
        before = len(found)
        for name, value in list(now.items()):
            key = (id(owner), name)
            if _VERIFIED.get(key, _ABSENT) is value:
                continue
            fn = _code(value)
            path = fn.__code__.co_filename if fn is not None else ""
            if fn is None or os.path.abspath(path).startswith(trusted) or "-packages" + os.sep in path \
                    or path.startswith("<frozen ") or (path.startswith("<") and _generated_by_triton(fn)):
                _VERIFIED[key] = value
                continue
            found.append(f"{label}.{name} ({path}, line {fn.__code__.co_firstlineno})")
        if len(found) == before:
            _SEEN[id(owner)] = (owner, tuple(now), tuple(now.values()))
    return found

"""Where the course's code runs: a CUDA GPU, or Triton's CPU interpreter.

Triton decides at decoration time whether a ``@triton.jit`` function is compiled for the GPU or
run by its NumPy interpreter, from the ``TRITON_INTERPRET`` environment variable; its own
library (``tl.zeros``, ``tl.sum``, ``tl.max``... are ``@triton.jit`` functions too) is decorated
when ``triton`` is first imported. So :func:`init` runs in every notebook's first code cell, and
when a learner imported ``triton`` before it, :func:`init` converts what was already decorated
(Triton's library, and kernels at launch through :func:`runnable_kernel`), so the grade does not
depend on import order.
"""
# Length: One job: choosing and setting up the device, with the interpreter fixes that set-up
# applies.

from __future__ import annotations

import contextlib
import os
import signal
import sys
import types
import warnings
from dataclasses import dataclass

__all__ = ["Runtime", "init", "quiet_init", "runtime", "interpreter_problem", "require_interpreter",
           "runnable_kernel", "interpreted_twin", "is_kernel", "is_interpreted", "FORCE_ENV"]

#: Set to ``cpu`` to force the interpreter on a machine that has a GPU (handy when debugging a kernel).
FORCE_ENV = "ATTNLAB_DEVICE"

#: What a learner reads when interpreter mode cannot be switched on in this Python process.
_RESTART = ("Restart the kernel (Kernel > Restart) and run the set-up cell before any other cell; "
            "in a notebook you hand in, put nothing that imports triton above the set-up cell.")


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


# ------------------------------------------------------------------------ switching after import
def _jit_types():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


#: compiled-mode JITFunction id -> (that JITFunction, its InterpretedFunction): one conversion each,
#: so identity comparisons inside Triton (``combine_fn is tl.standard._sum_combine``) still hold.
_CONVERTED: dict[int, tuple[object, object]] = {}


def _interpreted(fn):
    """The InterpretedFunction for a compiled-mode ``JITFunction`` (made once per function)."""
    _, interpreted_cls = _jit_types()
    hit = _CONVERTED.get(id(fn))
    if hit is None or hit[0] is not fn:
        # the interpreter ignores specialisation and inlining hints: the Python function is all it needs
        new = interpreted_cls(fn.fn)
        from .. import kernel_source

        if kernel_source.is_rebuilt(fn):
            kernel_source.watch(new)  # its twin's launches are watched like its own
        hit = _CONVERTED[id(fn)] = (fn, new)
    return hit[1]


def _convert_namespace(ns: dict, owner=None) -> int:
    """Replace every compiled-mode ``JITFunction`` value of ``ns`` (a module's or class's dict) by
    its interpreted twin; returns how many were replaced."""
    jit_cls, _ = _jit_types()
    n = 0
    for name, value in list(ns.items()):
        if type(value) is not jit_cls:
            continue
        new = _interpreted(value)
        if owner is None:
            ns[name] = new
        else:
            # a tensor method (x.sum()): Triton installs a plain forwarding function in interpreter
            # mode, because an InterpretedFunction is not a descriptor that binds ``self``
            def member(*args, _fn=new, **kwargs):
                return _fn(*args, **kwargs)

            member.__name__ = name
            setattr(owner, name, member)
        n += 1
    return n


def _switch_triton_library() -> int:
    """Convert the ``@triton.jit`` functions of every loaded ``triton`` module (and the classes
    they define, e.g. ``tl.tensor``'s methods) to interpreted ones. Returns how many changed."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if not isinstance(mod, types.ModuleType) or not (name == "triton" or name.startswith("triton.")):
            continue
        n += _convert_namespace(vars(mod))
        for value in list(vars(mod).values()):
            if isinstance(value, type) and value.__module__ == name:
                n += _convert_namespace(dict(vars(value)), owner=value)
    return n


def interpreter_problem() -> str | None:
    """Why Triton kernels cannot run through the interpreter in this process, or None when they can
    (or when the GPU is in use). Cheap: looks at ``tl.zeros``, one of Triton's own jit functions."""
    if not runtime().interpret or "triton" not in sys.modules:
        return None
    try:
        import triton.language as tl

        jit_cls, _ = _jit_types()
    except Exception as exc:  # noqa: BLE001 (a broken Triton install: say what it was)
        return f"Triton cannot be imported: {type(exc).__name__}: {exc}"
    if os.environ.get("TRITON_INTERPRET") != "1":
        return ("TRITON_INTERPRET=1 is not set, so Triton compiles kernels for a GPU that is not "
                "there. " + _RESTART)
    if type(tl.zeros) is jit_cls:
        return ("Triton was imported before interpreter mode was switched on, and its library could "
                "not be converted (tl.zeros is still compiled for a GPU). " + _RESTART)
    return None


def require_interpreter() -> None:
    """Make sure Triton kernels can run through the interpreter, switching it on (:func:`init`) if a
    learner's code imported Triton first; raise ``RuntimeError`` with :func:`interpreter_problem`'s
    plain explanation where that is impossible."""
    problem = interpreter_problem()
    if problem:
        init(verbose=False)
        problem = interpreter_problem()
    if problem:
        raise RuntimeError(f"Triton's interpreter is not active in this Python process: {problem}")


def is_kernel(obj) -> bool:
    """True for exactly a ``@triton.jit`` function: ``triton.runtime.jit.JITFunction`` or, under the
    interpreter, ``InterpretedFunction``. Subclasses and other ``KernelInterface`` objects are not
    kernels: their launch can run any Python (a ``torch.softmax`` included)."""
    try:
        jit_cls, interpreted_cls = _jit_types()
    except ImportError:
        return False
    return type(obj) is jit_cls or type(obj) is interpreted_cls


def is_interpreted(kernel) -> bool:
    """True when ``kernel`` runs through Triton's CPU interpreter (an ``InterpretedFunction``)."""
    try:
        _, interpreted_cls = _jit_types()
    except ImportError:
        return False
    return type(kernel) is interpreted_cls


def runnable_kernel(kernel):
    """``kernel`` ready to launch in the current mode: rebuilt from its source
    (:func:`attnlab.kernel_source.from_source`: hooks and anything else attached to the object are
    left behind, and its launches refuse torch operations), with Triton's launch hooks emptied.

    Under the interpreter, a kernel decorated while Triton was still in GPU mode (its cell ran
    before the set-up cell) is converted, with the ``@triton.jit`` helpers of its module, instead of
    failing with Triton's "Cannot call @triton.jit'd outside of the scope of a kernel".

    Raises:
        TypeError: ``kernel`` is not exactly a ``@triton.jit`` function, or cannot be rebuilt from its
            source (:class:`attnlab.kernel_source.KernelSourceError`).
    """
    if not is_kernel(kernel):
        kind = type(kernel)
        raise TypeError(f"the kernel must be a @triton.jit function (exactly triton.runtime.jit.JITFunction), "
                        f"got {kind.__qualname__}. Decorate the kernel's def with @triton.jit and nothing "
                        f"else: a wrapper or a subclass of Triton's kernel classes can run any Python when "
                        f"launched, so it is not graded as a kernel.")
    from .. import kernel_source

    if kernel_source.in_check():
        kernel_source.clear_triton_hooks()  # before the compile gate, whose compiles run them too
    kernel = kernel_source.from_source(kernel)  # the grade is the source's kernel, nothing attached to it
    jit_cls, interpreted_cls = _jit_types()
    # cheap on a GPU (no device query beyond is_available): the bench cells launch through here
    if type(kernel) is jit_cls and (os.environ.get("TRITON_INTERPRET") == "1" or not _gpu_available()):
        _switch_triton_library()
        _convert_namespace(kernel.fn.__globals__)
        kernel = _interpreted(kernel)
    if type(kernel) is interpreted_cls:
        fix_interpreter_index()
        patch_lang_once_per_launch()
    return kernel


# Triton's own interpreter functions that the course wraps, kept here (not in closures) so that the
# grader's guard, which snapshots this module's globals, restores them if a cell rebinds them.
_TRITON_PATCH_LANG_TENSOR = None
_TRITON_PATCH_LANG = None
_TRITON_GRID_CALL = None
#: The language modules patched so far by the launch running now; None between launches.
_PATCHED_IN_LAUNCH: tuple | None = None
#: The names above: the guard leaves them out of its snapshot of this module in a notebook that does
#: not use Triton (there the wrappers may be installed after the snapshot, and Triton is not guarded).
TRITON_WRAPPER_STATE = ("_TRITON_PATCH_LANG_TENSOR", "_TRITON_PATCH_LANG", "_TRITON_GRID_CALL", "_PATCHED_IN_LAUNCH")


def _index_of_squeezed(self):
    return int(self.handle.data.squeeze())


def _patch_lang_tensor_with_index(tensor, *args, **kwargs):
    result = _TRITON_PATCH_LANG_TENSOR(tensor, *args, **kwargs)
    scope = args[0] if args else kwargs.get("scope")
    if hasattr(scope, "set_attr"):  # Triton's patch scope undoes it after the run
        scope.set_attr(tensor, "__index__", _index_of_squeezed)
    else:
        tensor.__index__ = _index_of_squeezed
    return result


def fix_interpreter_index() -> None:
    """Make Triton's interpreter work with NumPy >= 2.4 on Triton versions before the upstream fix.

    While a kernel runs, the interpreter gives ``tl.tensor`` an ``__index__`` that converts the
    tensor's one-element array with ``int(array)``; NumPy 2.4 made that a ``TypeError`` ("only
    0-dimensional arrays can be converted to Python scalars"), so every ``range`` whose bounds are
    tensors fails (triton-lang/triton#9171; Triton 3.6 with NumPy 2.5 on the H200 host, 2026-12-01).
    After Triton's own patch, ``__index__`` squeezes the array first, as the upstream fix does.
    Nothing changes where Triton already does so."""
    global _TRITON_PATCH_LANG_TENSOR
    try:
        from triton.runtime import interpreter as ti
    except ImportError:
        return
    original = getattr(ti, "_patch_lang_tensor", None)
    if original is None or original is _patch_lang_tensor_with_index:
        return
    _TRITON_PATCH_LANG_TENSOR = original
    ti._patch_lang_tensor = _patch_lang_tensor_with_index


class _NoPatches:
    def restore(self) -> None:
        pass


def _patch_lang_once(fn):
    """Triton's ``_patch_lang(fn)``, skipped when every language module ``fn`` sees was patched already
    by the launch running now."""
    global _PATCHED_IN_LAUNCH
    import triton.language as tl

    langs = tuple(v for v in fn.__globals__.values() if v is tl or v is tl.core)
    done = _PATCHED_IN_LAUNCH
    if done is not None and langs and all(any(v is p for p in done) for v in langs):
        return _NoPatches()
    scope = _TRITON_PATCH_LANG(fn)  # Triton itself raises for a function that sees no language module
    if done is not None:
        _PATCHED_IN_LAUNCH = done + langs
    return scope


def _launch_patching_once(self, *args, **kwargs):
    """Triton's ``GridExecutor.__call__`` (one kernel launch), with its own record of patched modules."""
    global _PATCHED_IN_LAUNCH
    outer, _PATCHED_IN_LAUNCH = _PATCHED_IN_LAUNCH, ()
    try:
        return _TRITON_GRID_CALL(self, *args, **kwargs)
    finally:
        _PATCHED_IN_LAUNCH = outer


def patch_lang_once_per_launch() -> None:
    """Make Triton's interpreter patch ``triton.language`` once per kernel launch, not at every call.

    The interpreter runs a ``@triton.jit`` function called inside a kernel (``tl.max``, ``tl.sum`` and
    the rest of ``triton.language.standard`` are such functions) by patching the language again:
    ``inspect.getmembers`` over ``tl``, ``tl.tensor`` and ``tl.math``, a few thousand attributes. The
    second patch of a module within one launch changes nothing (builtins already replaced are no
    longer builtins; the rest is set to equivalent functions), and it cost 05's reference kernel
    about a sixth of its interpreted run (2026-12-02, Triton 3.9). Here a module already patched in
    the running launch is not patched again. (Triton never undoes the patches of such nested calls
    to ``tl.core``: they outlive the launch with or without this change.) Nothing changes where
    Triton's interpreter has no ``_patch_lang`` or ``GridExecutor``."""
    global _TRITON_PATCH_LANG, _TRITON_GRID_CALL
    try:
        from triton.runtime import interpreter as ti
    except ImportError:
        return
    original, executor = getattr(ti, "_patch_lang", None), getattr(ti, "GridExecutor", None)
    if original is None or executor is None or original is _patch_lang_once:
        return
    _TRITON_PATCH_LANG, _TRITON_GRID_CALL = original, executor.__call__
    ti._patch_lang = _patch_lang_once
    executor.__call__ = _launch_patching_once


def _quiet_interpreter_warnings() -> None:
    """The interpreter computes with numpy, which warns on log(0) = -inf, exp(-inf) = 0 and the like:
    IEEE results a compiled kernel returns silently (an empty split's LSE is -inf by design). On
    stderr the warning makes `nbgrader validate` report a correct notebook as failed."""
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")


def _triton_namespaces() -> list:
    """Every object whose attributes the switch below or Triton's interpreter may change: the loaded
    ``triton`` modules and the classes they define (``tl.tensor``'s methods, ``tl.dtype``...)."""
    owners = []
    for name, mod in list(sys.modules.items()):
        if not isinstance(mod, types.ModuleType) or not (name == "triton" or name.startswith("triton.")):
            continue
        owners.append(mod)
        owners += [value for value in list(vars(mod).values())
                   if isinstance(value, type) and value.__module__ == name]
    return owners


def _restore(owner, before: dict) -> None:
    """Put ``owner``'s attributes back to ``before`` (a copy of its ``vars``), by identity.

    Attributes that appeared meanwhile stay on a module (the interpreter adds its own globals to the
    module of every function it rewrites, and reuses that rewrite later); on a class they are the
    interpreter's patches, which the compiler must not see, and go."""
    now = vars(owner)
    if isinstance(owner, type):
        for name in [n for n in list(now) if n not in before]:
            with contextlib.suppress(AttributeError, TypeError):
                delattr(owner, name)
    for name, value in before.items():
        if now.get(name, _ABSENT) is not value:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(owner, name, value)


_ABSENT = object()


@contextlib.contextmanager
def interpreted_twin(kernel):
    """``kernel`` (a compiled-mode ``JITFunction``) run through Triton's interpreter, on a machine whose
    Triton compiles for its GPU: yields the kernel's interpreted twin, to launch on CPU tensors
    inside the ``with`` block.

    This is how a GPU machine runs the CPU-sized cases of a check exactly as a laptop does (loads
    accounted by :mod:`attnlab.checking.loads`, CPU tolerances), in the process that also compiles the
    GPU-sized cases. For the duration of the block, Triton's interpret switch is on, its library's
    ``@triton.jit`` functions are interpreted twins, and so are the ``@triton.jit`` helpers in the
    kernel's module; Triton's interpreter also patches ``triton.language`` while it runs and leaves
    some of that in place. Everything is put back on leaving the block (an exception or a timeout
    included), so the next compile sees Triton as it was.

    Raises:
        TypeError: ``kernel`` is not exactly a compiled-mode ``JITFunction``.
    """
    from triton import knobs

    jit_cls, _ = _jit_types()
    if type(kernel) is not jit_cls:
        raise TypeError(f"interpreted_twin takes a compiled-mode JITFunction, got {type(kernel).__qualname__}")
    fix_interpreter_index()
    patch_lang_once_per_launch()
    _quiet_interpreter_warnings()
    saved = [(owner, dict(vars(owner))) for owner in _triton_namespaces()]
    module = kernel.fn.__globals__
    before = dict(module)
    # the knob writes TRITON_INTERPRET when set: both go back exactly as they were, absence included
    knob = vars(knobs.runtime).get("interpret", _ABSENT)
    env = os.environ.get("TRITON_INTERPRET")
    try:
        knobs.runtime.interpret = True
        _switch_triton_library()
        _convert_namespace(module)
        yield _interpreted(kernel)
    finally:
        # a check's time limit re-arms its alarm until the exception arrives: none may stop the restore midway
        blocked = hasattr(signal, "pthread_sigmask")
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM}) if blocked else None
        try:
            if knob is _ABSENT:
                vars(knobs.runtime).pop("interpret", None)
            else:
                vars(knobs.runtime)["interpret"] = knob
            if env is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = env
            for name, value in before.items():
                current = module.get(name, _ABSENT)
                if current is not value and current is _CONVERTED.get(id(value), (None, _ABSENT))[1]:
                    module[name] = value  # our twin of a helper: the learner's own function again
            for owner, attrs in saved:
                _restore(owner, attrs)
        finally:
            if blocked:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)


_QUIET = False  # set while another notebook's set-up cell runs (quiet_init)


@contextlib.contextmanager
def quiet_init():
    """Within this block :func:`init` does not print the mode: the notebook that loads another
    notebook's cells (:mod:`attnlab.nbload`) has printed it already. Warnings still print."""
    global _QUIET
    before, _QUIET = _QUIET, True
    try:
        yield
    finally:
        _QUIET = before


def init(verbose: bool = True) -> Runtime:
    """Pick GPU or interpreter mode, switch Triton accordingly, and say which one is active.

    Kernels defined after this call follow the mode. When ``triton`` was already imported (a
    learner's own ``import triton`` above the set-up cell), its library is converted to interpreted
    functions as well; if that is impossible, a plain explanation is printed and every Triton
    check raises it (:func:`require_interpreter`).

    Returns:
        The :class:`Runtime` in force.
    """
    if not _gpu_available():
        os.environ["TRITON_INTERPRET"] = "1"
    rt = runtime()
    if rt.interpret:
        _quiet_interpreter_warnings()
    if rt.interpret and "triton" in sys.modules:
        try:
            fix_interpreter_index()
            _switch_triton_library()
        except Exception:  # noqa: BLE001 (reported below, in words)
            pass
    if verbose:
        if not _QUIET:
            print(rt.describe())
        problem = interpreter_problem()
        if problem:
            print(f"WARNING: Triton kernels cannot run in this session. {problem}")
    return rt

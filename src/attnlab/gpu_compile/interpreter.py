"""Compiling a kernel that Triton's CPU interpreter runs: its ``@jit`` functions as JITFunction twins
(:class:`Twins`), and while compiling, triton.language as Triton made it, the interpreter's leftover
patches undone and put back afterwards (:func:`compiler_view`).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import types


def interpreted_type():
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - every supported Triton has it
        return ()
    return InterpretedFunction


_LANG_TWINS: dict[int, object] = {}          # id(InterpretedFunction in triton.*) -> JITFunction
_LANG_KEEP: list[object] = []                # keeps those originals alive, so ids stay unique


class Twins:
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
        interp = interpreted_type()
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


def _language_patches(twins: Twins) -> list[tuple[object, str, object, object]]:
    """(owner, name, interpreted value, twin) for every interpreted function triton.language exposes:
    module attributes (``tl.max``, ``tl.sum``...) and the tensor methods that forward to them."""
    if "patches" in _LAZY:
        return _LAZY["patches"]
    import triton.language as tl

    interp = interpreted_type()
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


class EnvironmentProblem(Exception):
    """The compile gate itself could not run (not the learner's doing)."""


@contextlib.contextmanager
def compiler_view(twins: Twins | None):
    """While compiling an interpreted kernel: Triton's interpret switch off, the interpreter's
    leftover patches of triton.language undone, and its ``@jit`` functions as JITFunctions; all
    put back afterwards, so the interpreter keeps working as before.

    Raises:
        EnvironmentProblem: an interpreter patch whose original is unknown (then a compile error
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
                        raise EnvironmentProblem(f"triton.language.{name} is still patched by the interpreter")
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


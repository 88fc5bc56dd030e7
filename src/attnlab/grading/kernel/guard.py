"""Keep the tests honest while a learner's notebook is graded: runs inside the notebook's kernel.

A learner's code and the hidden tests share one Python process, so the tests' references and
helpers are within the learner's reach: a solution cell can rebind ``check_flash_forward`` in the
notebook, replace ``attnlab.reference.naive_attention`` or ``attnlab.checks.assert_close``, swap a
module in ``sys.modules``, patch ``torch.logsumexp`` or a ``torch.Tensor`` method, change the
working directory, or turn off gradients. At grading time (only then) the grader's Execute
preprocessor (:mod:`attnlab.grading.worker.execute`) installs this guard in the kernel before any cell
runs. :func:`install` snapshots everything the tests depend on; :func:`restore` puts back whatever
differs from the snapshot and says what it put back. It runs

- before every read-only cell (given code and tests), from the grader;
- after every call of learner code inside a check (:func:`attnlab.verify.call_learner`), so a function
  that patches the reference while it runs is undone before the reference is computed.

It also records the names each read-only cell binds in the notebook (``check_online_softmax``,
``naive_attention``, ``RUNTIME``...) and rebinds them before the next read-only cell.

What it does not do: stop code that deliberately attacks this module or the interpreter itself
(one process cannot be protected from itself). The grader's static scan
(:mod:`attnlab.grading.worker.scan`) flags such code for the instructor instead.

Everything here uses the standard library and modules already loaded; the functions called by
the grader never raise and return JSON text.
"""
# Length: One job, long: what the guard snapshots and restores must be read together to see what a
# cell cannot change.

from __future__ import annotations

import importlib
import json
from json import dumps as _dumps  # bound here: a cell may patch json.dumps
import os
import signal
import sys
import types

from ...core.outcome import review as _review  # bound here: a cell may rebind outcome.review

#: Modules whose attributes (functions, classes, constants) the tests rely on: snapshotted when the guard is
#: installed, put back and noted after each cell that changed them.
SNAPSHOT_MODULES = (
    "builtins", "math", "numbers", "os", "signal", "threading", "time", "contextlib", "copy",
    "torch", "torch.nn.functional", "torch.linalg", "torch.autograd", "torch.testing",
    "attnlab", "attnlab.core", "attnlab.core.device", "attnlab.reference", "attnlab.checks", "attnlab.verify",
    "attnlab.launch", "attnlab.gpu_compile", "attnlab.nbload", "attnlab.grading", "attnlab.grading.kernel",
    "attnlab.grading.kernel.guard", "attnlab.reference_decode", "attnlab.launch_decode", "attnlab.verify_decode",
    "attnlab.launch_backward", "attnlab.verify_backward", "attnlab.checking", "attnlab.checking.poisoned",
    "attnlab.checking.probe", "attnlab.checking.integrity", "attnlab.checking.loads", "attnlab.checking.hints",
    "attnlab.checking.answers", "attnlab.checking.work_models",
    "attnlab.core.review", "attnlab.kernel_source",
    # the student's variant and seed key, set by the grader before the snapshot (a cell that rebound them
    # would be checked against another student's shapes or draw inputs it knows)
    "attnlab.variants",
    # 09's checkers: their references, their tripwire and the replay number read at import (a cell that
    # rebound them would grade against its own values or replay a draw it knows)
    "attnlab.verify_tuning", "attnlab.launch_tuning",
    # what the checks compute with: the load accounting counts reads with numpy (a red team replaced
    # np.bincount), and reads the interpreter through inspect and re. Snapshotted after torch, which
    # replaces inspect.getfile when it is imported: a library imported later that patched these would
    # have its patch undone and noted in every notebook (Triton, imported below, patches none)
    "numpy", "inspect", "re",
    # the compile gate's modules, the checking harness, the ledger's data flow, the outcomes' kinds
    "attnlab.gpu_compile.targets", "attnlab.gpu_compile.signature", "attnlab.gpu_compile.interpreter",
    "attnlab.gpu_compile.compiling", "attnlab.gpu_compile.clock", "attnlab.gpu_compile.diagnosis",
    "attnlab.gpu_compile.gate", "attnlab.gpu_compile.launching", "attnlab.gpu_compile.usage",
    "attnlab.checking.harness", "attnlab.verify_pytorch", "attnlab.contracts", "attnlab.checking.flow",
    "attnlab.core.outcome",
)
#: Triton's classes that run a kernel under the interpreter, where the load accounting (attnlab.checking.loads)
#: and the compile gate watch it: guarded in notebooks that use Triton (install's ``triton``), since a
#: solution cell that wrapped GridExecutor.__call__ could rewrite the load ledger after each launch.
_TRITON_CLASSES = {"triton.runtime.interpreter": ("GridExecutor", "InterpretedFunction", "InterpreterBuilder"),
                   "triton.runtime.jit": ("JITFunction", "JITCallable", "KernelInterface")}
#: Names of builtins that IPython itself swaps per request (not ours to restore).
_BUILTINS_SKIP = {"input", "raw_input", "exit", "quit", "get_ipython", "display", "help", "copyright",
                  "credits", "license"}


class _State:
    def __init__(self) -> None:
        self.modules: dict[str, types.ModuleType] = {}
        self.module_types: dict[str, type] = {}  # each module's class at install (a swap is undone)
        self.attrs: dict[str, dict[str, object]] = {}       # module name -> attribute snapshot
        self.classes: dict[type, dict[str, object]] = {}    # class -> own-dict snapshot
        self.code: list[tuple[types.FunctionType, object, object, object, str]] = []
        self.cwd = os.getcwd()
        self.recursion = sys.getrecursionlimit()
        self.names: dict[str, object] = {}                  # notebook names bound by read-only cells
        self.before: dict[str, int] = {}
        self.notes: list[str] = []                          # repairs not yet reported
        self.ns: dict | None = None                         # the notebook's namespace (taken at install)
        self.alias = ""                                     # this module's random name in that namespace
        self.ipython: dict[str, object] = {}                # IPython hooks learner code could reroute
        self.seen: set[str] = set()
        self.last_error: str | None = None                  # what the last (non-silent) cell raised


_STATE: _State | None = None


def active() -> bool:
    """True once :func:`install` ran in this process (i.e. while being autograded)."""
    return _STATE is not None


def _functions_of(owner_name: str, value, out: list) -> None:
    """Python functions reachable from a module or class attribute (methods, static/class methods,
    property accessors), with their code, defaults and keyword defaults."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        for f in (value.fget, value.fset, value.fdel):
            if f is not None:
                _functions_of(owner_name, f, out)
        return
    if isinstance(value, types.FunctionType):
        out.append((value, value.__code__, value.__defaults__, value.__kwdefaults__,
                    f"{owner_name}"))


def install(memory_limit_gb: float = 0.0, cwd: str | None = None, ns: dict | None = None, alias: str = "",
            max_tasks: int = 0, grader_namespace: str = "", triton: bool = False, own_account: bool = False) -> str:
    """Move to ``cwd``, snapshot what the tests rely on, cap the kernel's memory (CPU only) and its
    processes and threads (``max_tasks``, where RLIMIT_NPROC counts this sandbox only: see
    :func:`attnlab.grading.kernel.limits.limit_in_kernel`). Idempotent.

    ``ns`` is the notebook's namespace and ``alias`` a random name the grader chose for this module
    in it: the grader's later calls go through that name (never through ``__import__`` or
    ``globals``, which a solution cell can rebind), and each reply echoes the call's nonce.
    ``triton``: the notebook uses Triton; its interpreter's classes are guarded too (imported now,
    before any learner code, so the snapshot is Triton's own code).
    """
    global _STATE
    if _STATE is not None:
        return json.dumps({"installed": True, "again": True})
    if cwd:
        os.chdir(cwd)
    state = _State()
    state.ns, state.alias = ns, alias
    from ...core import review

    review.connect(_note)  # before the snapshots, so that a cell that disconnects it is undone
    if ns is not None and alias:
        ns[alias] = sys.modules[__name__]
    state.ipython = _ipython_hooks()
    _watch_cells()
    if triton:
        # the course's own changes to Triton's interpreter, applied before the snapshots (attnlab.core.device's
        # globals hold Triton's originals) so that they hold them
        try:
            from attnlab.core.device import fix_interpreter_index, patch_lang_once_per_launch

            fix_interpreter_index()
            patch_lang_once_per_launch()
        except Exception:  # noqa: BLE001
            pass
    for name in SNAPSHOT_MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a module that cannot load is simply not guarded)
            continue
        state.modules[name] = mod
        state.module_types[name] = type(mod)
        snap = dict(vars(mod))
        if name == __name__:
            snap.pop("_STATE", None)  # the guard's own state is set after this snapshot
        if name == "attnlab.core.device" and not triton:
            for key in getattr(mod, "TRITON_WRAPPER_STATE", ()):
                snap.pop(key, None)
        if not name.startswith("attnlab"):
            # public names only: private module state may change legitimately as the library runs
            snap = {k: v for k, v in snap.items() if not k.startswith("_") or k in ("__import__", "__build_class__")}
        if name == "builtins":
            snap = {k: v for k, v in snap.items()
                    if k not in _BUILTINS_SKIP and (not k.startswith("_") or k in ("__import__", "__build_class__"))
                    and getattr(v, "__module__", None) == "builtins"}
        state.attrs[name] = snap
        for key, value in snap.items():
            if name.startswith("attnlab") and isinstance(value, type) and value.__module__ == name:
                state.classes[value] = dict(vars(value))
                for k2, v2 in vars(value).items():
                    _functions_of(f"{name}.{key}.{k2}", v2, state.code)
            _functions_of(f"{name}.{key}", value, state.code)
    for name, classes in _TRITON_CLASSES.items() if triton else ():
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 (no Triton here: nothing of it to guard)
            continue
        # the module's functions and classes too, private ones included (_patch_lang runs every launch)
        state.modules[name] = mod
        state.module_types[name] = type(mod)
        state.attrs[name] = {k: v for k, v in vars(mod).items() if isinstance(v, (types.FunctionType, type))}
        for cls in (getattr(mod, c, None) for c in classes):
            if isinstance(cls, type):
                state.classes[cls] = dict(vars(cls))
                for k, v in vars(cls).items():
                    _functions_of(f"{name}.{cls.__name__}.{k}", v, state.code)
    if triton:
        try:  # Triton's code as it is before any learner code: what attnlab.kernel_source compares with
            from attnlab.kernel_source import triton_patches

            triton_patches()
        except Exception:  # noqa: BLE001 (no Triton here)
            pass
    torch = state.modules.get("torch")
    if torch is not None:
        state.classes[torch.Tensor] = dict(vars(torch.Tensor))
        for k, v in vars(torch.Tensor).items():
            _functions_of(f"torch.Tensor.{k}", v, state.code)
    _STATE = state
    limited = _limit_memory(memory_limit_gb)
    from .limits import limit_in_kernel  # RLIMIT_NPROC where it counts this sandbox only

    return json.dumps({"installed": True, "memory_limit_gb": limited,
                       "max_tasks": limit_in_kernel(max_tasks, grader_namespace, own_account)})


def _limit_memory(gb: float) -> float:
    """Cap the kernel's address space, so a runaway allocation raises MemoryError in the cell
    instead of waking the machine's out-of-memory killer. Only without a GPU (CUDA reserves huge
    virtual ranges)."""
    if not gb or gb <= 0:
        return 0.0
    try:
        import resource

        from attnlab.core.device import runtime

        if not runtime().interpret:
            return 0.0
        limit = int(gb * 2**30)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        return limit / 2**30
    except Exception:  # noqa: BLE001
        return 0.0


def _note(text) -> None:
    if _STATE is None:
        return
    # exactly the built-in types: a set subclass whose __contains__ says yes dropped every later review
    # flag (red team, 2026-12-02); a swapped container is replaced, and the swap is itself reported
    if type(_STATE.seen) is not set or type(_STATE.notes) is not list:
        _STATE.seen = set()
        if type(_STATE.notes) is not list:
            _STATE.notes = []
        _note(_review("the grader's record of notes had been replaced by notebook code").text)
    # a check's note arrives typed ({"kind": "info", "text": ...}, attnlab.core.review.note); a repair is text
    key = text.get("text") if type(text) is dict else text
    if type(key) is str and key not in _STATE.seen:
        _STATE.seen.add(key)
        _STATE.notes.append(text)


def _restore(ns: dict | None = None) -> None:
    state = _STATE
    if state is None:
        return
    for name, mod in state.modules.items():
        if sys.modules.get(name) is not mod:
            sys.modules[name] = mod
            _note(f"sys.modules[{name!r}] had been replaced")
    for name, mod in state.modules.items():
        # a module's class swapped for a ModuleType subclass whose __getattribute__/__setattr__ lie:
        # put the class back through object's own setter, past the hooks
        want = state.module_types.get(name)
        if want is not None and type(mod) is not want:
            try:
                object.__setattr__(mod, "__class__", want)
                _note(f"the class of module {name} had been swapped")
            except Exception as exc:  # noqa: BLE001
                _note(_review(f"the class of module {name} had been swapped and could not be put back "
                              f"({type(exc).__name__})").text)
    for name, snap in state.attrs.items():
        mod = state.modules[name]
        current = vars(mod)  # the module's own dict: read and written past any attribute hooks
        for key, value in snap.items():
            if current.get(key, _MISSING) is not value:
                try:
                    current[key] = value
                    _note(f"{name}.{key} had been replaced or deleted")
                except Exception as exc:  # noqa: BLE001
                    _note(_review(f"{name}.{key} had been replaced and could not be put back "
                                  f"({type(exc).__name__})").text)
    for cls, snap in state.classes.items():
        current = dict(vars(cls))
        for key, value in snap.items():
            if current.get(key, _MISSING) is not value:
                try:
                    setattr(cls, key, value)
                    _note(f"{cls.__module__}.{cls.__qualname__}.{key} had been replaced or deleted")
                except Exception:  # noqa: BLE001
                    pass
        for key in current.keys() - snap.keys():
            # a new attribute that shadows an inherited one (torch.Tensor.__sub__ = ...)
            if any(key in vars(base) for base in cls.__mro__[1:]):
                try:
                    delattr(cls, key)
                    _note(f"{cls.__module__}.{cls.__qualname__}.{key} had been overridden")
                except Exception:  # noqa: BLE001
                    pass
    for fn, code, defaults, kwdefaults, where in state.code:
        if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
            try:
                fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults
                _note(f"the code of {where} had been changed")
            except Exception:  # noqa: BLE001
                pass
    torch = state.modules.get("torch")
    if torch is not None:
        try:
            while torch._C._len_torch_function_stack() > 0:
                torch._C._pop_torch_function_stack()
                _note("a torch function mode (TorchFunctionMode) had been left active")
            from torch.utils._python_dispatch import _pop_mode

            while torch._C._len_torch_dispatch_stack() > 0:
                _pop_mode()
                _note("a torch dispatch mode had been left active")
        except Exception:  # noqa: BLE001
            pass
        if not torch.is_grad_enabled():
            torch.set_grad_enabled(True)
            _note("gradients had been turned off globally (torch.set_grad_enabled(False))")
        if torch.get_default_dtype() != torch.float32:
            _note(f"the default dtype had been changed to {torch.get_default_dtype()}")
            torch.set_default_dtype(torch.float32)
    try:
        if os.getcwd() != state.cwd:
            _note(f"the working directory had been changed to {os.getcwd()}")
            os.chdir(state.cwd)
    except OSError:  # the directory was removed
        os.chdir(state.cwd)
        _note("the working directory had been removed")
    _stop_tracing()
    if sys.getrecursionlimit() != state.recursion:
        sys.setrecursionlimit(state.recursion)
        _note("the recursion limit had been changed")
    try:
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _note("interrupts (SIGINT) had been ignored")
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        if {signal.SIGINT, signal.SIGALRM} & set(blocked):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGALRM])
            _note("signals (SIGINT/SIGALRM) had been blocked")
    except Exception:  # noqa: BLE001 (not in the main thread)
        pass
    # the notebook's own __builtins__: Python looks up `import`, `range`, `print`... there, not in the
    # builtins module, so a swapped mapping would fake every import of a test cell
    target = ns if ns is not None else state.ns
    real = state.modules.get("builtins")
    if target is not None and real is not None:
        current = target.get("__builtins__", _MISSING)
        if current is not real and current is not vars(real):
            target["__builtins__"] = real
            _note("the notebook's __builtins__ had been replaced")
    if ns is not None:
        for key, value in state.names.items():
            if ns.get(key, _MISSING) is not value:
                ns[key] = value
                _note(f"the notebook name {key!r} (set by a read-only cell) had been rebound or deleted")


_MISSING = object()


def _stop_tracing() -> None:
    """Remove trace and profile functions: a trace function can jump over a check's ``raise``
    (``frame.f_lineno = ...``) or rewrite its locals. Global ones (this thread's, new threads'),
    those already set on the frames of the current stack, and ``sys.monitoring`` tools (3.12+)."""
    import threading

    if sys.gettrace() is not None or sys.getprofile() is not None:
        sys.settrace(None)
        sys.setprofile(None)
        _note("a trace or profile function (sys.settrace) had been set")
    if getattr(threading, "_trace_hook", None) is not None or getattr(threading, "_profile_hook", None) is not None:
        threading.settrace(None)
        threading.setprofile(None)
        _note("a trace or profile function for new threads (threading.settrace) had been set")
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_trace is not None:
            frame.f_trace = None
            _note("a running function had a trace function (frame.f_trace)")
        frame = frame.f_back
    monitoring = getattr(sys, "monitoring", None)
    for tool in range(6) if monitoring is not None else ():
        if monitoring.get_tool(tool) is not None:
            monitoring.set_events(tool, 0)
            monitoring.free_tool_id(tool)
            _note("a sys.monitoring tool had been registered")


def after_call() -> None:
    """Called by the checks after each call of learner code: undo what the call changed."""
    if _STATE is not None:
        try:
            _restore()
        except Exception:  # noqa: BLE001
            pass


def _protectable(value) -> bool:
    if isinstance(value, (types.ModuleType, type)):
        return True
    kind = type(value)
    if kind.__module__.startswith("attnlab"):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return False
    return callable(value)


def _ipython_hooks() -> dict[str, object]:
    """IPython's hooks a cell could use to hide a failure or rewrite the tests' code: custom exception
    handlers (an AssertionError that prints nothing), AST and input transformers."""
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    ip = get_ipython()
    if ip is None:
        return {}
    return {"custom_exceptions": ip.custom_exceptions, "CustomTB": getattr(ip, "CustomTB", None),
            "ast_transformers": list(ip.ast_transformers),
            "input_transformers_post": list(getattr(ip, "input_transformers_post", []))}


def _post_run_cell(result) -> None:
    """IPython's post_run_cell event: remember whether the cell raised, as IPython itself saw it.

    The grader asks after each read-only cell (the reply carries its nonce): a cell that raised but
    reached the grader without an error output had its reply or its error forged or hidden by code
    in the kernel (a fake ``execute_reply`` with status ok on the shell channel, then ``idle``).
    """
    if _STATE is None:
        return
    err = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
    _STATE.last_error = f"{type(err).__name__}: {err}"[:500] if err is not None else None


def _watch_cells() -> bool:
    """Register :func:`_post_run_cell` unless it is registered; True when it had to be (again)."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is None or _post_run_cell in ip.events.callbacks.get("post_run_cell", []):
            return False
        ip.events.register("post_run_cell", _post_run_cell)
        return True
    except Exception:  # noqa: BLE001 (no IPython: nothing to watch)
        return False


def _restore_ipython() -> None:
    if _STATE is None or not _STATE.ipython:
        return
    from IPython import get_ipython

    ip = get_ipython()
    if _watch_cells():
        _note("IPython's post_run_cell callbacks had been changed")
    for key, value in _STATE.ipython.items():
        current = getattr(ip, key, None)
        same = current == value if isinstance(value, list) else current is value
        if not same:
            setattr(ip, key, list(value) if isinstance(value, list) else value)
            _note(f"IPython's {key} had been changed (a custom exception handler or code transformer)")


def _seal() -> str:
    """A fingerprint of the snapshot (which objects it holds, how many): the snapshot never changes
    after :func:`install` except where :func:`after_locked` adds names, so the grader compares each
    reply's fingerprint on entry with the previous reply's on exit; code that empties or edits the
    snapshot (``attnlab.verify._guard._STATE.attrs.clear()``) then makes the next check fail."""
    st = _STATE
    if st is None:
        return ""
    h = hash((tuple(map(id, st.modules.values())), len(st.code), sum(id(c[1]) for c in st.code),
              len(st.names), sum(map(id, st.names.values())), id(st.ns)))
    for snap in (*st.attrs.values(), *st.classes.values()):
        h = hash((h, id(snap), len(snap), sum(map(id, snap.values()))))
    return f"{len(st.attrs)}-{len(st.classes)}-{h}"


def _reply(nonce: str, seal: str, **extra) -> str:
    """The grader's reply: the repairs made, with the call's nonce (a stand-in guard cannot know it)
    and the snapshot's fingerprint on entry (``seal``) and on exit (``sealed``)."""
    return _dumps({"nonce": nonce, "notes": _take_notes(), "seal": seal, "sealed": _seal(), **extra})


def before_locked(ns: dict | None = None, nonce: str = "") -> str:
    """Before a read-only cell: restore everything, remember the notebook's names; JSON of repairs."""
    ns = _STATE.ns if ns is None and _STATE is not None else ns
    seal = _seal()
    if _STATE is not None:
        _STATE.last_error = None
    try:
        if ns is not None:
            if _STATE is not None and _STATE.alias:
                ns[_STATE.alias] = sys.modules[__name__]
            _restore(ns)
            _STATE.before = {k: id(v) for k, v in ns.items()}
        _restore_ipython()
    except Exception as exc:  # noqa: BLE001
        _note(f"the grader's integrity check failed: {type(exc).__name__}: {exc}")
    return _reply(nonce, seal)


def after_locked(ns: dict | None = None, nonce: str = "") -> str:
    """After a read-only cell: protect the names it bound (functions, classes, modules, course objects)."""
    ns = _STATE.ns if ns is None and _STATE is not None else ns
    seal = _seal()
    if _watch_cells() and _STATE is not None:  # removed while the cell ran: whether it raised is unknown
        _STATE.last_error = "GuardBypassed: the grader's record of whether this cell raised was removed while it ran"
    try:
        if _STATE is not None and ns is not None:
            for key, value in ns.items():
                if key.startswith("_") or _STATE.before.get(key) == id(value):
                    continue
                if _protectable(value):
                    _STATE.names[key] = value
    except Exception as exc:  # noqa: BLE001
        _note(f"the grader's integrity check failed: {type(exc).__name__}: {exc}")
    return _reply(nonce, seal, error=_STATE.last_error if _STATE is not None else None)


def drain() -> str:
    """The repairs made since the last call (strings) and the checks' notes (strings for review, typed
    dicts otherwise), as a JSON list."""
    return _dumps(_take_notes())


def _take_notes() -> list:
    if _STATE is None:
        return []
    notes, _STATE.notes = _STATE.notes, []
    _STATE.seen.clear()
    return notes

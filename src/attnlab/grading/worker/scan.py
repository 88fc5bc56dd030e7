"""The static scan of learner code: lines of solution cells that reach into the grader or the tests'
references (:func:`scan`), reported for the instructor; points are never changed by it.

Patterns on the text (:data:`SUSPICIOUS`) and findings on the cell's syntax tree after IPython's own
rewriting of magics and shell escapes (what the patterns cannot see: a module alias, code built from
strings, work done where the method probe does not look). :mod:`.repair` runs it on every submitted
notebook, after its repairs.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

#: (pattern, what it suggests): learner code that reaches into the grader or the tests' helpers.
SUSPICIOUS = [
    (r"\b(?:attnlab(?:\.\w+)*|verify|checks|reference|launch|nbload)\.\w+\s*=(?!=)",
     "assigns to an attribute of the course's support package"),
    (r"\bsetattr\s*\(\s*(?:attnlab|torch|verify|checks|reference|builtins|math|sys|F)\b",
     "patches a module with setattr"),
    (r"\bsys\.modules\b|\bos\.sys\b|['\"]modules['\"]", "touches sys.modules"),
    (r"\b(?:resolve_name|get_field|Formatter)\b|attnlab[\w.]*\.__dict__",
     "reaches names through a text path (pkgutil.resolve_name, string formatting)"),
    (r"\b(?:interpreter_builder|InterpreterBuilder|GridExecutor|InterpretedFunction|interpreter_semantic|"
     r"_patch_lang)\b|\btriton\.runtime\.interpreter\b",
     "reaches Triton's interpreter (where the load accounting watches the kernel's loads)"),
    (r"\b__import__\b|\bglobals\s*\(\s*\)\s*\[|_attnlab_guard", "rebinds names the grader looks up (__import__, globals())"),
    (r"\bset_custom_exc\b|\bast_transformers\b|\binput_transformers|\bevents\.(?:register|unregister)\b",
     "changes how IPython runs cells or reports errors"),
    (r"\b(?:from\s+attnlab[\w.]*\s+import\s+_\w+|attnlab(?:\.\w+)+\._[a-z]\w*)",
     "reaches the support package's private state"),
    (r"__code__|__globals__|__closure__|__defaults__|__kwdefaults__|__builtins__",
     "rewrites function internals"),
    (r"\b(?:importlib\.)?reload\s*\(", "reloads a module"),
    (r"\bgc\.get_(?:objects|referrers|referents)\b", "walks the garbage collector"),
    (r"\bgradebook\b|\bsqlite3\b|NBGRADER|\bnbgrader\b|attnlab\.grading|\bguard\.\w+", "refers to the grader"),
    (r"^\s*(?:check_\w+|naive_attention|reference_gradients|assert_close|assert_number|assert_shape|"
     r"assert_finite|load_notebook_module|RUNTIME)\s*(?:,[^=\n]*)?=(?!=)", "rebinds a name the tests use"),
    (r"^\s*def\s+(?:check_\w+|naive_attention|reference_gradients|assert_close|assert_number|assert_shape)\s*\(",
     "redefines a function the tests use"),
    (r"\btorch(?:\.Tensor|\.nn\.functional|\.linalg)?\.\w+\s*=(?!=)", "assigns to a torch attribute"),
    (r"\b(?:builtins|math|F)\.\w+\s*=(?!=)", "patches builtins, math or torch.nn.functional"),
    (r"TorchFunctionMode|TorchDispatchMode|__torch_function__|__torch_dispatch__|_python_dispatch\b|"
     r"\btorch\.overrides\b|_push_mode\b|_set_torch_function_mode|_DisableTorchDispatch|_dispatch_tls_",
     "overrides torch dispatch"),
    (r"\btorch\.library\b|\blibrary\.(?:Library|impl|register_kernel|custom_op|define)\b|_dispatch_library|"
     r"\.py_impl\s*\(|\bregister_(?:kernel|fake|autograd)\s*\(",
     "registers kernels for torch operators (torch.library)"),
    (r"\bsys\._getframe\b|\binspect\.(?:currentframe|stack|getouterframes|trace|getinnerframes)\b|"
     r"\b(?:walk_stack|walk_tb|getargvalues|getframeinfo|getmodule|getclosurevars)\b|"
     r"\b(?:f_back|f_locals|f_globals|gi_frame|cr_frame|ag_frame|tb_frame)\b|\bsys\._current_frames\b",
     "reads interpreter frames (could read the checks' expected values)"),
    (r"\b(?:settrace|setprofile|f_lineno|f_trace|f_code)\b|\bsys\.monitoring\b",
     "traces running code (could jump over a check's raise)"),
    (r"\bsignal\.(?:signal|pthread_sigmask|setitimer|alarm)\b", "changes signal handling (test time limits)"),
    (r"\bsetrlimit\b", "changes resource limits"),
    (r"\bget_ipython\s*\(\s*\)\s*\.\s*(?:kernel|display_pub|displayhook)\b|\.kernel\.(?:session|shell|iopub)|"
     r"\b(?:shell_stream|iopub_socket|iopub_thread|shell_channel_thread|_publish_status|_parent_ident)\b|"
     r"\bsession\.send\b|^\s*(?:import|from)\s+(?:zmq|ipykernel|jupyter_client)\b",
     "talks to the grader through the kernel's messages (could forge a cell's result)"),
]
_SUSPICIOUS = [(re.compile(p, re.MULTILINE), why) for p, why in SUSPICIOUS]

# What the patterns above cannot see (a module alias, code built from strings, work done where the
# method probe does not look) is found on the cell's syntax tree, after IPython's own rewriting of
# magics and shell escapes: see :func:`_tree_findings`.
#: Imports that serve no lesson here but hide code or work from the checks: code built from
#: strings or bytes, raw memory, other threads or processes (the probe watches the calling thread),
#: the garbage collector's view of every object.
_EVASIVE_IMPORTS = frozenset({"importlib", "codecs", "base64", "binascii", "zlib", "lzma", "bz2", "marshal",
                              "pickle", "dill", "ctypes", "cffi", "threading", "_thread", "concurrent",
                              "multiprocessing", "gc", "runpy", "operator", "builtins", "unittest", "pkgutil",
                              "copyreg"})  # pydoc: flagged as a resolver of text paths (_RESOLVER_MODULES)
#: Ways to a tensor's memory that bypass torch (a NumPy view of a tensor made under the method probe,
#: written in place, carries numbers the probe never saw computed): attributes, protocol methods a
#: class can define, and NumPy functions that view their argument's memory (flagged when that
#: argument is not a literal: `np.asarray([1.0, 2.0])` is harmless).
_MEMORY_ATTRS = frozenset({"numpy", "data_ptr", "untyped_storage", "__array_interface__", "__cuda_array_interface__",
                           "__dlpack__", "__array__", "__array_struct__"})
_MEMORY_CALLS = frozenset({"asarray", "asanyarray", "ascontiguousarray", "copyto", "frombuffer", "from_dlpack",
                           "memoryview"})
#: Functions that turn a dotted text path into the object it names (private ones included).
_RESOLVERS = frozenset({"locate", "import_item", "importstring", "BaseConfigurator", "DictConfigurator"})
_RESOLVER_MODULES = frozenset({"pydoc", "logging.config", "traitlets.utils.importstring", "traitlets.utils"})
#: A text path to private state, whatever resolves it (pydoc.locate, traitlets' import_item,
#: logging.config's resolve...): a dotted name with a private or special part.
_PRIVATE_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)+$")
#: Attributes of imported modules a cell may set: output capture, torch's backend switches.
_SETTABLE = re.compile(r"^(?:sys\.(?:stdout|stderr)|torch\.backends\.)")
#: Builtins that run code given as text or reach a namespace by name.
_DYNAMIC = frozenset({"exec", "eval", "compile", "globals", "locals", "vars", "breakpoint", "setattr", "delattr"})
#: IPython entry points that run text as code, or hand over the notebook's namespace.
_IPYTHON = frozenset({"run_cell", "run_code", "ex", "ev", "user_ns", "user_global_ns", "push", "system", "events",
                      "getoutput", "magic", "run_cell_magic", "run_line_magic", "safe_execfile", "safe_run_module"})
#: Magics whose argument is code run in the notebook (scanned like a cell); any other magic is flagged.
_CODE_MAGICS = frozenset({"time", "timeit", "capture"})
_HARMLESS_MAGICS = frozenset({"matplotlib", "pip", "config"})


def _root(node):
    """The name an attribute chain starts from (``v`` in ``v._guard._STATE``), or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


#: Private names that are public API in all but name: namedtuple's methods, a compiled Triton kernel's
#: handles (Triton's softmax tutorial calls it to read register use).
_PUBLIC_PRIVATE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_init_handles"})


@functools.lru_cache(maxsize=1)
def checked_private_names() -> frozenset[str]:
    """Every private name that the support package's kernel-side modules, Triton's interpreter and JIT, and
    torch._C's stubs use (attributes, functions, classes, imported names): state a solution cell must not
    reach, even through an object it calls ``self``. Read from the source files (nothing imported), once
    per process."""
    import importlib.util

    package = Path(__file__).resolve().parents[2]
    files = [*package.glob("*.py"), *package.glob("core/*.py"), *package.glob("checking/*.py"),
             *package.glob("tools/*.py"), *package.glob("grading/kernel/*.py")]  # not the grader's own
    for top, parts in (("triton", ("runtime/interpreter.py", "runtime/jit.py")), ("torch", ("_C/__init__.pyi",))):
        spec = importlib.util.find_spec(top)
        if spec is not None and spec.origin:
            files += [Path(spec.origin).parent / part for part in parts]
    names = set()
    for file in files:
        try:
            tree = ast.parse(file.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            found = ([node.attr] if isinstance(node, ast.Attribute) else [node.id] if isinstance(node, ast.Name)
                     else [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     else [*node.module.split("."), *(a.name for a in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.module
                     else [p for a in node.names for p in a.name.split(".")] if isinstance(node, ast.Import) else [])
            names |= {name for name in found if _private(name)}
    return frozenset(names - _PUBLIC_PRIVATE)


def _own_objects(tree) -> tuple[set[int], set[str], set[str]]:
    """What a cell's own code may reach private names of: (ids of attribute nodes rooted at a method's
    first parameter, ``self``/``cls``/``ctx``, in a method that never rebinds it; names bound only to
    instances of classes the cell defines; the private names the cell itself assigns or defines). A
    receiver is no proof of ownership (``Cls.method(some_module)`` makes ``self`` anything), so only
    the cell's own private names are exempt through it."""
    receivers: set[int] = set()
    classes = {c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    own = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    for cls in (c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)):
        for item in cls.body:  # names a class body defines: methods, class attributes
            own |= ({item.name} if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else
                    {t.id for t in getattr(item, "targets", [getattr(item, "target", None)]) if isinstance(t, ast.Name)})
        for fn in cls.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not (fn.args.posonlyargs + fn.args.args):
                continue
            me = (fn.args.posonlyargs + fn.args.args)[0].arg
            inner = [n for n in ast.walk(fn) if n is not fn]
            rebound = any(isinstance(n, ast.Name) and n.id == me and not isinstance(n.ctx, ast.Load)
                          or isinstance(n, ast.alias) and (n.asname or n.name.split(".")[0]) == me
                          or isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name == me
                          for n in inner)
            shadowed = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and me in
                           {a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs} for n in inner)
            if not (rebound or shadowed):
                receivers |= {id(n) for n in inner if isinstance(n, ast.Attribute) and _root(n) == me}
    bound: dict[str, bool] = {}
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For, ast.comprehension))
                   else [])
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    mine = (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                            and isinstance(node.value.func, ast.Name) and node.value.func.id in classes)
                    bound[n.id] = bound.get(n.id, True) and mine
        # any other way to bind a name makes it not (only) an instance of the cell's class
        others = ([a.asname or a.name.split(".")[0] for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom))
                  else [node.name] if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name
                  else [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else
                  [n.id for item in node.items if item.optional_vars is not None for n in ast.walk(item.optional_vars)
                   if isinstance(n, ast.Name)] if isinstance(node, (ast.With, ast.AsyncWith)) else [])
        for name in others:
            bound[name] = False
    return receivers, {name for name, mine in bound.items() if mine}, {n for n in own if _private(n)}


def _literal_call(call) -> bool:
    """Whether ``call`` is a call whose arguments are all literals (``np.asarray([1.0, 2.0])``)."""
    return call is not None and all(isinstance(a, (ast.Constant, ast.List, ast.Tuple)) and
                                    all(isinstance(e, ast.Constant) for e in ast.walk(a) if isinstance(e, ast.expr)
                                        and not isinstance(e, (ast.List, ast.Tuple)))
                                    for a in [*call.args, *(k.value for k in call.keywords)])


def _ast_path(node) -> str:
    """``a.b.c`` for an attribute chain of names (``?`` for anything else in it)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(node.id if isinstance(node, ast.Name) else "?")
    return ".".join(reversed(parts))


def _is_shell(node, shells: set[str]) -> bool:
    """``get_ipython()``, or a name bound to it."""
    if isinstance(node, ast.Name):
        return node.id in shells
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") == "get_ipython"


def _magic_code(call: ast.Call) -> str | None:
    """The code a ``%time``/``%%timeit``... magic runs (options dropped), or None for other calls."""
    args = [a.value if isinstance(a, ast.Constant) else None for a in call.args]
    if not args or args[0] not in _CODE_MAGICS or any(not isinstance(a, str) for a in args):
        return None
    code = args[-1] if call.func.attr == "run_cell_magic" else args[1]
    return re.sub(r"^\s*(?:-\w+(?:\s+\d+)?\s+)*", "", code) if call.func.attr == "run_line_magic" else code


def _tree_findings(source: str, depth: int = 0) -> list[tuple[int, str]]:
    """(line, why) for learner code the regular expressions miss: reaching the support package through
    an alias (``import attnlab.verify as v; v._guard``), running text as code, threads and processes,
    raw memory, magics and shell escapes. Source IPython cannot parse runs nowhere: nothing to flag."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 (no IPython here: plain Python)
        pass
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[tuple[int, str]] = []
    aliases = {"attnlab"}
    for node in ast.walk(tree):  # names bound to the support package or anything in it
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "attnlab"}
            found += [(node.lineno, f"imports {a.name}") for a in node.names
                      if a.name.split(".")[0] in _EVASIVE_IMPORTS or any(map(_private, a.name.split(".")))]
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                path in _RESOLVER_MODULES or path.rsplit(".", 1)[-1] in _RESOLVERS
                for path in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                             [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)])):
            found.append((node.lineno, "imports a function that resolves text paths (pydoc.locate, import_item, "
                                       "logging.config)"))
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top == "attnlab":
                aliases |= {a.asname or a.name for a in node.names}
            elif top in _EVASIVE_IMPORTS:
                found.append((node.lineno, f"imports from {node.module}"))
            # torch._C's mode stack, a module's private tables: private names, whatever the module
            if any(map(_private, node.module.split("."))) or any(_private(a.name) for a in node.names):
                found.append((node.lineno, f"imports private names (from {node.module})"))
    for _ in range(2):  # v = attnlab.verify; g = v._guard
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _root(node.value) in aliases:
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    shells = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _is_shell(node.value, set())
              for t in node.targets if isinstance(t, ast.Name)}  # ip = get_ipython()
    calls = {id(c.func): c for c in ast.walk(tree) if isinstance(c, ast.Call)}  # callee -> its call
    sys_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                 if a.name == "sys"}
    receivers, instances, own_names = _own_objects(tree)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))} \
        | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # names bound by an import (np, F, torch, a module imported from a package): a cell that assigns to
    # their attributes changes what the checks compute with (a red team replaced np.bincount)
    modules = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in n.names} | {"np", "torch", "F", "triton", "tl", "math", "numpy"}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 1)
        if isinstance(node, ast.Attribute) and node.attr == "__class__" and isinstance(node.ctx, (ast.Store, ast.Del)):
            # a module's class swapped for a ModuleType subclass with __getattribute__/__setattr__ hooks:
            # every read of the module can then lie, whatever object it was reached through
            found.append((line, "assigns to an object's __class__ (a class swap can hook every attribute read)"))
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in _PUBLIC_PRIVATE and not (
                (id(node) in receivers or _root(node) in instances
                 or isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "super")
                and node.attr in own_names and node.attr not in checked_private_names()):
            # whatever the object was reached through (an alias, a tuple, an argument, a loop, a walrus,
            # inspect.getmodule, torch._C's mode stack, a name spelled self): the library's private state
            found.append((line, f"reaches private state (.{node.attr}) of an object it did not define"))
        elif isinstance(node, ast.Attribute) and node.attr == "modules" and _root(node) in sys_names:
            found.append((line, "touches sys.modules"))
        elif isinstance(node, ast.MatchClass) and any(map(_private, node.kwd_attrs)):
            # `case object(_C=c)` reads an attribute without an attribute node
            found.append((line, "reaches private state through a match pattern"))
        elif isinstance(node, ast.Attribute) and _root(node) in aliases and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.append((line, "assigns to the support package (through an alias)"))
        elif isinstance(node, ast.Name) and node.id in _DYNAMIC:
            found.append((line, f"uses {node.id}() (runs text as code or reaches names indirectly)"))
        elif isinstance(node, ast.Name) and node.id == "getattr":
            call = calls.get(id(node))
            name = call.args[1] if call is not None and len(call.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and not _private(name.value)
                    and _root(call.args[0]) not in aliases):
                found.append((line, "uses getattr with a computed or private name"))
        elif isinstance(node, ast.Attribute) and node.attr in ("__dict__", "__getattribute__", "attrgetter",
                                                               "__subclasses__", "__setattr__", "__delattr__",
                                                               "__self__", "__getstate__", "__reduce__",
                                                               "__reduce_ex__"):
            found.append((line, f"reaches attributes through {node.attr}"))
        elif (isinstance(node, ast.Attribute) and node.attr in _MEMORY_ATTRS
              or isinstance(node, ast.Name) and node.id in _MEMORY_ATTRS and isinstance(node.ctx, ast.Store)):
            what = getattr(node, "attr", None) or node.id
            found.append((line, f"moves tensor data past torch ({what}: the method checks cannot follow it)"))
        elif (isinstance(node, (ast.Attribute, ast.Name)) and (getattr(node, "attr", None) or getattr(node, "id", ""))
              in _MEMORY_CALLS and not _literal_call(calls.get(id(node)))):
            what = getattr(node, "attr", None) or node.id
            found.append((line, f"moves tensor data past torch ({what}: the method checks cannot follow it)"))
        elif (isinstance(node, ast.Attribute) and node.attr in _RESOLVERS
              or isinstance(node, ast.Name) and node.id in _RESOLVERS and node.id not in defined):
            found.append((line, "reaches names through a text path (pydoc.locate, import_item, logging.config)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _PRIVATE_PATH.match(node.value) and (
                any(p.startswith("_") for p in node.value.split(".")[1:]) or node.value.endswith(".")):
            found.append((line, f"names private state in a string ({node.value[:60]!r}: a text path some "
                                f"library function can resolve)"))
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
              and _root(node) in modules and not _SETTABLE.match(_ast_path(node))):
            found.append((line, f"assigns to an attribute of an imported module ({_ast_path(node)})"))
        elif (isinstance(node, ast.Attribute) and node.attr in _IPYTHON and _is_shell(node.value, shells)
              and id(node) not in calls):
            found.append((line, f"reaches IPython's {node.attr} (runs text as code or hands over the notebook)"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _IPYTHON
              and _is_shell(node.func.value, shells)):
            code = _magic_code(node) if depth < 3 else None
            magic = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if code is not None:
                found += [(line, why) for _, why in _tree_findings(code, depth + 1)]
            elif not (node.func.attr == "run_line_magic" and magic in _HARMLESS_MAGICS):
                found.append((line, f"runs code through IPython ({node.func.attr}{f' {magic!r}' if magic else ''})"))
    return found


def _meta(cell) -> dict:  # as repair's: the cell's nbgrader metadata
    meta = cell.metadata.get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _label(cell, index: int) -> str:  # as repair's: how notes name a cell
    gid = _meta(cell).get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


def scan(nb) -> list[str]:
    """Lines of learner code (unlocked code cells) that reach into the grader or the tests' helpers."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or _meta(cell).get("locked"):
            continue
        lines = cell.source.splitlines() or [""]
        hits = [(cell.source.count("\n", 0, m.start()) + 1, why)
                for pattern, why in _SUSPICIOUS for m in pattern.finditer(cell.source)]
        for line_no, why in hits + _tree_findings(cell.source):
            line = lines[min(line_no, len(lines)) - 1].strip()
            found.append(f"{_label(cell, i)}, line {line_no}: `{line[:80]}` ({why})")
    return list(dict.fromkeys(found))

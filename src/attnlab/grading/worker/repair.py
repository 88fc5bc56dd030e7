"""Repair a submitted notebook's structure before nbgrader checks it, and say what was repaired.

nbgrader 0.9.6 stops grading a notebook (and, in a batch, every notebook after it) on damage that
learners' editors produce routinely:

- a copied or split test cell: two cells with one ``grade_id`` (nbgrader blanks the copy's
  metadata, then fails on it with a misleading "old version of the nbgrader metadata" error, or a
  ``KeyError`` when missing cells are restored);
- nbgrader metadata stripped by another editor, or a deleted cell whose predecessor is not a graded
  cell (``OverwriteCells.add_missing_cells`` fails with ``KeyError``);
- metadata edited by hand (``locked`` switched off, ``points`` changed, an unknown ``grade_id``).

:func:`repair` fixes these against the release notebook (what the learner started from), before
nbgrader's own sanitising steps restore read-only cells and hidden tests from the gradebook:

1. format: a notebook saved by Google Colab or an older Jupyter (nbformat 4.0-4.4, no cell ids)
   gets cell ids;
2. every known cell's nbgrader metadata is reset to the release's; metadata naming an unknown cell
   is removed (the cell runs as an ordinary cell);
3. duplicate ``grade_id``: one cell keeps it (the first one after the cell that precedes it in
   the release); extra copies of a test cell are dropped (the kept one is restored in full),
   extra copies of other cells stay as ordinary cells;
4. cells whose metadata is missing are matched back to the release by content (an alignment of
   the two cell sequences; prose and read-only cells match exactly, solution cells by position
   and similarity); read-only and test cells still missing are re-inserted where they belong,
   missing written-answer cells as their empty stub; a missing solution code cell is reported;
5. the graded functions are checked: renamed (no cell defines it) or defined in several cells;
6. learner code is scanned for attempts to reach into the grader or the tests' references,
   reported for the instructor (points are never changed by the scan).

Everything it did is returned as one-line notes, which the grader reports to the instructor and
shows the learner.
"""
# Length: To split (issue 32): the structural repair and the static scan of solution code (not a
# repair) are two jobs.

from __future__ import annotations

import ast
import copy
import difflib
import functools
import os
import re
import uuid
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from ...core.review import PREFIX as REVIEW

_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
_DEF = re.compile(r"^def\s+(\w+)\s*\(", re.MULTILINE)

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
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in _PUBLIC_PRIVATE and not (
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


def _meta(cell) -> dict:
    meta = cell.metadata.get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _gid(cell) -> str | None:
    return _meta(cell).get("grade_id")


def _label(cell, index: int) -> str:
    gid = _gid(cell)
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


def _is_test(meta: dict) -> bool:
    return bool(meta.get("grade")) and not meta.get("solution")


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _new_id(used: set[str]) -> str:
    while True:
        cid = uuid.uuid4().hex[:12]
        if cid not in used:
            used.add(cid)
            return cid


# ---------------------------------------------------------------------------------------- steps
def _fix_format(nb, notes: list[str]) -> None:
    missing = sum(1 for c in nb.cells if "id" not in c)
    if nb.get("nbformat_minor", 0) < 5 or missing:
        notes.append(f"the notebook was saved as nbformat 4.{nb.get('nbformat_minor', 0)} without cell ids "
                     f"(Google Colab or an older Jupyter); upgraded to 4.5 for grading")
    nb.nbformat, nb.nbformat_minor = 4, max(5, nb.get("nbformat_minor", 0))
    used: set[str] = set()
    for cell in nb.cells:
        cid = cell.get("id")
        if not isinstance(cid, str) or not _ID.match(cid) or cid in used:
            cell["id"] = _new_id(used)
        else:
            used.add(cid)


def _reset_metadata(nb, release_meta: dict[str, dict], release_types: dict[str, str], notes: list[str]) -> None:
    for i, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.metadata:
            continue
        meta = cell.metadata["nbgrader"]
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if gid not in release_meta:
            del cell.metadata["nbgrader"]
            if gid:
                notes.append(f"cell {i + 1} carried nbgrader metadata for an unknown cell {gid!r} (edited or "
                             f"copied from elsewhere); it was run as an ordinary cell")
            elif meta:
                notes.append(f"cell {i + 1} had incomplete nbgrader metadata; it was run as an ordinary cell")
            continue
        want = release_meta[gid]
        changed = [k for k in ("grade", "solution", "locked", "points", "task")
                   if meta.get(k, False) != want.get(k, False)]
        if changed:
            notes.append(f"the nbgrader metadata of cell {gid!r} had been edited ({', '.join(changed)}); "
                         f"reset to the course's")
        cell.metadata["nbgrader"] = copy.deepcopy(want)
        if cell.cell_type != release_types[gid]:
            notes.append(f"cell {gid!r} had been changed from {release_types[gid]} to {cell.cell_type}; "
                         f"changed back")


def _dedupe(nb, release_order: list[str], notes: list[str]) -> None:
    where: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        if _gid(cell):
            where.setdefault(_gid(cell), []).append(i)
    drop: set[int] = set()
    for gid, positions in where.items():
        if len(positions) < 2:
            continue
        # keep the first copy after the cell that precedes this one in the release
        anchor = -1
        k = release_order.index(gid) if gid in release_order else 0
        for prev in reversed(release_order[:k]):
            if prev in where:
                anchor = where[prev][0]
                break
        keep = next((p for p in positions if p > anchor), positions[0])
        test = _is_test(_meta(nb.cells[keep]))
        for p in positions:
            if p == keep:
                continue
            if test:
                drop.add(p)
            else:
                del nb.cells[p].metadata["nbgrader"]
        what = "the extra copies were dropped" if test else "the other copies were run as ordinary cells"
        notes.append(f"cell {gid!r} appeared {len(positions)} times (copied or split); graded the one at "
                     f"position {keep + 1}, {what}")
    if drop:
        nb.cells = [c for i, c in enumerate(nb.cells) if i not in drop]


def _key(cell) -> tuple[str, str]:
    return cell.cell_type, _norm(cell.source)


def align(release_cells, cells) -> dict[int, int]:
    """Release cell index -> submission cell index, for cells matched by content.

    Unchanged cells (prose, read-only code) match exactly; in between, release cells with nbgrader
    metadata are paired with submission cells of the same type: first by similarity (a solution
    cell keeps its ``def`` line), then, where the counts agree, in order.
    """
    sm = difflib.SequenceMatcher(None, [_key(c) for c in release_cells], [_key(c) for c in cells], autojunk=False)
    mapping: dict[int, int] = {}
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            mapping.update({i1 + k: j1 + k for k in range(i2 - i1)})
        elif op == "replace":
            wanted = [i for i in range(i1, i2) if _meta(release_cells[i])]
            free = list(range(j1, j2))
            for i in wanted:
                rc = release_cells[i]
                names = _DEF.findall(rc.source)
                best, score = None, 0.0
                for j in free:
                    c = cells[j]
                    if c.cell_type != rc.cell_type:
                        continue
                    s = difflib.SequenceMatcher(None, _norm(rc.source), _norm(c.source), autojunk=False).ratio()
                    if names and all(re.search(rf"^\s*def\s+{re.escape(n)}\s*\(", c.source, re.MULTILINE)
                                     for n in names):
                        s += 1.0
                    if s > score:
                        best, score = j, s
                threshold = 0.6 if _meta(rc).get("locked") else 0.35
                if best is not None and score >= threshold:
                    mapping[i] = best
                    free.remove(best)
            rest = [i for i in wanted if i not in mapping]
            for kind in {release_cells[i].cell_type for i in rest}:
                ri = [i for i in rest if release_cells[i].cell_type == kind]
                sj = [j for j in free if cells[j].cell_type == kind
                      and _key(cells[j]) not in {_key(release_cells[x]) for x in range(i1, i2)}]
                if len(ri) == len(sj):
                    mapping.update(zip(ri, sj))
    return mapping


def _restore_missing(nb, release, notes: list[str]) -> None:
    present = {_gid(c) for c in nb.cells if _gid(c)}
    rel_cells = release.cells
    missing = [i for i, c in enumerate(rel_cells) if _gid(c) and _gid(c) not in present]
    if not missing:
        return
    mapping = align(rel_cells, nb.cells)
    matched = []
    for i in missing:
        j = mapping.get(i)
        if j is not None and "nbgrader" not in nb.cells[j].metadata and nb.cells[j].cell_type == rel_cells[i].cell_type:
            nb.cells[j].metadata["nbgrader"] = copy.deepcopy(_meta(rel_cells[i]))
            matched.append(_gid(rel_cells[i]))
    if matched:
        notes.append(f"nbgrader metadata was missing from {len(matched)} cells (another editor may have "
                     f"stripped it); matched them back by content: {', '.join(matched)}")
    present = {_gid(c) for c in nb.cells if _gid(c)}
    used = {c.get("id") for c in nb.cells}
    restored, stubs, lost = [], [], []
    for i in missing:
        rc = rel_cells[i]
        gid, meta = _gid(rc), _meta(rc)
        if gid in present:
            continue
        if rc.cell_type == "code" and meta.get("solution"):
            lost.append(gid)
            continue
        # after the submission cell matched to the nearest release cell before it
        pos = 0
        for prev in range(i - 1, -1, -1):
            if prev in mapping:
                pos = mapping[prev] + 1
                break
        cell = copy.deepcopy(rc)
        cell["id"] = _new_id(used)
        nb.cells.insert(pos, cell)
        mapping = {r: (s + 1 if s >= pos else s) for r, s in mapping.items()}
        mapping[i] = pos
        present.add(gid)
        (stubs if meta.get("solution") else restored).append(gid)
    if restored:
        notes.append(f"deleted read-only or test cells were restored from the course: {', '.join(restored)}")
    if stubs:
        notes.append(f"written-answer cells were missing and were put back empty: {', '.join(stubs)}")
    if lost:
        notes.append(f"solution cells are missing from the notebook: {', '.join(lost)} (their tests pass "
                     f"only if another cell defines what they test)")


def _check_functions(nb, release, notes: list[str]) -> None:
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for rc in release.cells:
        meta = _meta(rc)
        if rc.cell_type != "code" or not meta.get("solution"):
            continue
        for name in _DEF.findall(rc.source):
            pattern = re.compile(rf"^(?:def\s+{re.escape(name)}\s*\(|{re.escape(name)}\s*=[^=])", re.MULTILINE)
            defining = [_label(c, i) for i, c in code if pattern.search(c.source)]
            if not defining:
                own = next((c for c in nb.cells if _gid(c) == meta["grade_id"]), None)
                others = _DEF.findall(own.source) if own is not None else []
                hint = f" (the solution cell defines {', '.join(n + '()' for n in others)})" if others else ""
                notes.append(f"no cell defines {name}(){hint}: the tests that call it fail with NameError")
            elif len(defining) > 1:
                notes.append(f"{name}() is defined in {len(defining)} cells ({', '.join(defining)}); each test "
                             f"uses the definition that ran last before it")


def _clean_answers(nb, notes: list[str], release=None) -> None:
    """Written answers (and any other learner Markdown, and raw cells) whose rendering holds script or
    takes over one of formgrader's score boxes are replaced by a cleaned rendering: formgrader shows
    them in the instructor's Jupyter page (see untrusted_html). The reserved ids are those of the
    release's cells and the submission's (a deleted cell keeps its boxes in the gradebook)."""
    from .untrusted_html import FORMGRADER_CLASSES, clean_markdown, clean_raw, reserved_ids

    reserved = reserved_ids(nb) | (reserved_ids(release) if release is not None else frozenset())
    # nbgrader puts back the source of the release's read-only cells; any other cell is the learner's,
    # whatever its metadata says
    restored = {_gid(c) for c in release.cells if _gid(c) and _meta(c).get("locked")} if release is not None else set()
    for i, cell in enumerate(nb.cells):
        tags = cell.get("metadata", {}).get("tags")
        if isinstance(tags, list):  # the template writes tags into the cell's class: no formgrader class
            kept = [t for t in tags if isinstance(t, str) and not set(t.split()) & FORMGRADER_CLASSES
                    and t == t.strip() and " " not in t]
            if kept != tags:
                cell.metadata["tags"] = kept
                notes.append(f"{REVIEW}{_label(cell, i)} had tags naming formgrader's page elements; they were dropped")
        if cell.cell_type not in ("markdown", "raw") or (_meta(cell).get("locked") and _gid(cell) in restored):
            continue
        if cell.cell_type == "markdown":
            cleaned = clean_markdown(cell.source, reserved, attachments=cell.get("attachments"))
        else:
            cleaned = clean_raw(cell.source, reserved)
        if cleaned is not None:
            cell.source = cleaned
            notes.append(f"{REVIEW}{_label(cell, i)} held HTML, a link that could run script, or an element id "
                         f"of formgrader's score boxes, where the instructor reads it; it is graded as a "
                         f"cleaned copy")


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


def repair(nb, release) -> list[str]:
    """Repair ``nb`` (a submitted notebook, in place) against ``release``; one-line notes of what was done.

    ``release`` is the student version of the same notebook (None: only the format is fixed).
    """
    notes: list[str] = []
    _fix_format(nb, notes)
    if release is None:
        notes.append("the release notebook was not found: cells could not be checked against it")
        _clean_answers(nb, notes)
        return notes
    release_meta = {_gid(c): _meta(c) for c in release.cells if _gid(c)}
    release_order = [_gid(c) for c in release.cells if _gid(c)]
    _reset_metadata(nb, release_meta, {_gid(c): c.cell_type for c in release.cells if _gid(c)}, notes)
    _dedupe(nb, release_order, notes)
    _restore_missing(nb, release, notes)
    _check_functions(nb, release, notes)
    _clean_answers(nb, notes, release)
    flagged = scan(nb)
    if flagged:
        notes.append("flagged for the instructor to review (code that reaches into the tests or the grader; "
                     "the grader undoes such changes before each test): " + "; ".join(flagged[:8])
                     + (f"; and {len(flagged) - 8} more" if len(flagged) > 8 else ""))
    return notes


class RepairSubmission(NbGraderPreprocessor):
    """The first of nbgrader's sanitising preprocessors at autograde: :func:`repair` against release/."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        release = None
        try:
            from nbgrader.coursedir import CourseDirectory

            coursedir = CourseDirectory(config=self.config)
            for step in (coursedir.release_directory, coursedir.source_directory):
                path = os.path.join(coursedir.format_path(step, ".", info.get("assignment", "")),
                                    f"{info.get('notebook', '')}.ipynb")
                if os.path.isfile(path):
                    release = nbformat.read(path, as_version=4)
                    break
        except Exception as exc:  # noqa: BLE001
            self.log.warning("attnlab: could not read the release notebook: %s", exc)
        nb.metadata["attnlab"] = {"notes": []}  # a learner's own "notes" are not the grader's
        notes = repair(nb, release)
        for note in notes:
            self.log.warning("attnlab: %s", note)
        nb.metadata["attnlab"]["notes"] = notes
        return nb, resources

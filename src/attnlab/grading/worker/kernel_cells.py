"""What the timing stage times: of a notebook's kernel cells, only the ``@triton.jit`` function
definitions and plain numeric constants (:func:`kernel_source`); every other statement is dropped and
listed, never run (module-level code could patch a timer, a stream or the checker). :func:`cells_of`
reads those cells from a notebook. Used by :mod:`.timing`.

A kept definition is also refused (:class:`ReachesPython`) where its body could reach Python outside
Triton's language: Triton's code generator *calls*, while compiling, any Python callable a kernel names
(``tl.core.builtins.exec(...)`` would run in the timing worker, which could then report any time it
likes). So a body may name only its own locals, the kept definitions, ``tl``, ``triton``, ``math`` and
a few builtins; every attribute chain from ``tl``, ``triton`` or ``math`` must stay on what Triton's
language or ``math`` define, and reach only kernels, language builtins, classes and ``math`` functions
(``tl.str_to_ty`` is a plain helper that evaluates a string); and a value the kernel computed offers only
a tensor's, a dtype's or a constexpr's public attributes (:func:`check_reach`): what a GPU kernel needs,
and nothing else. Two red teams' bypasses shaped these rules (notes/decisions.md).
"""

from __future__ import annotations

import ast
import builtins
import functools
import math
import types
from dataclasses import dataclass
from pathlib import Path

from ...kernel_source import ALLOWED_BUILTINS, TRITON_PUBLIC

__all__ = ["KernelSource", "ReachesPython", "kernel_source", "check_reach", "cells_of"]


@dataclass(frozen=True)
class KernelSource:
    """A module holding only the kernel definitions of some cells (``text``), and what was left out."""

    text: str
    defined: tuple[str, ...]
    dropped: tuple[str, ...]


_PRELUDE = "import math\nimport triton\nimport triton.language as tl\n\n"


def _is_jit(decorator: ast.expr) -> bool:
    """``@triton.jit`` or ``@triton.jit(<literal keywords>)``: nothing else runs at definition time."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    named = (isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name)
             and target.value.id == "triton")
    if isinstance(decorator, ast.Call):
        return named and not decorator.args and all(_literal(k.value) for k in decorator.keywords)
    return named


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, SyntaxError, TypeError):
        return False


def _number(node: ast.expr) -> bool:
    """A literal int, float or bool (a sign allowed): what a kernel may read as a global."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool)


def _plain_names(node: ast.expr | None) -> bool:
    """An annotation made of names and attributes only (``tl.constexpr``): evaluating it runs nothing."""
    return node is None or all(isinstance(n, (ast.Name, ast.Attribute, ast.Load)) for n in ast.walk(node))


def _definition_only(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef):
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
        return (len(node.decorator_list) == 1 and _is_jit(node.decorator_list[0])
                and all(_literal(d) for d in [*a.defaults, *(d for d in a.kw_defaults if d is not None)])
                and all(_plain_names(p.annotation) for p in params) and node.returns is None)
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        value = node.value  # NAME = 1.4427 or NAME = tl.constexpr(1.4427): a number, nothing mutable
        if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
            return (isinstance(value.func, ast.Attribute) and value.func.attr == "constexpr"
                    and isinstance(value.func.value, ast.Name) and value.func.value.id == "tl"
                    and _number(value.args[0]))
        return _number(value)
    return False


class ReachesPython(ValueError):
    """A kernel definition that names something outside Triton's language (the message says what, where)."""


#: Builtins a kernel body may name (Triton's code generator evaluates them while compiling): the
#: autograder's :data:`attnlab.kernel_source.ALLOWED_BUILTINS` without its reflection and ``list``.
_BUILTINS = frozenset(ALLOWED_BUILTINS) - {"getattr", "hasattr", "list"}


def _inside(obj) -> bool:
    """Whether ``obj`` belongs to Triton's language or ``math``: a module of theirs, something they
    define, or a plain number, string, bool or None."""
    def ours(name: str) -> bool:
        return name == "math" or name == "triton.language" or name.startswith("triton.language.")

    if isinstance(obj, types.ModuleType):
        return ours(obj.__name__)
    if obj is None or type(obj) in (int, float, bool, str):
        return True
    if callable(obj) or isinstance(obj, type):
        fn = getattr(obj, "fn", None)  # a @triton.jit function of the language (tl.max): its Python function's
        if not isinstance(obj, type) and callable(fn) and not ours(getattr(obj, "__module__", None) or ""):
            obj = fn  # module, whichever Triton's JIT classes say of themselves
        return ours(getattr(obj, "__module__", None) or "")
    return ours(type(obj).__module__)


@functools.lru_cache(maxsize=1)
def _value_attrs() -> frozenset:
    """Attributes a kernel may take of a value it computed: a tensor's, a dtype's, a constexpr's .value."""
    import triton.language as tl

    names = {"value", "dtype", "shape", "type", "element_ty", "numel", "T"}  # instance attributes (not .handle)
    for c in (tl.tensor, tl.dtype, tl.pointer_type, tl.block_type):
        names |= {a for a in dir(c) if not a.startswith("_")}
    return frozenset(names)


def _callable_ok(obj) -> bool:
    """A callable a chain may reach: a @triton.jit function, a Triton builtin, a constexpr function, a class
    of the language, or a math function -- never a plain Python helper (tl.str_to_ty evals a string)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if not callable(obj) or isinstance(obj, type):
        return True
    return (isinstance(obj, (JITFunction, InterpretedFunction)) or tl.core.is_builtin(obj)
            or type(obj).__name__ == "ConstexprFunction" or getattr(obj, "__module__", None) == "math")


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """(root name, attributes) of ``a.b.c``: ``("a", ["b", "c"])``; the root is None when the chain starts
    at something other than a name (a call, a subscript)."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


def check_reach(fn: ast.FunctionDef, kept: set[str]) -> None:
    """Refuse a kernel definition that could reach Python outside Triton's language while it compiles.

    Args:
        fn: the ``@triton.jit`` definition; kept: the module's other kept names (definitions, constants).

    Raises:
        ReachesPython: a global name that is not a kept one, ``tl``, ``triton``, ``math`` or one of a few
            builtins; an attribute of a kept name; a private attribute; or a chain from ``tl``, ``triton``
            or ``math`` that leaves ``triton.language`` and ``math``, or uses one of their modules as a value.
    """
    import triton
    import triton.language as tl

    roots = {"tl": tl, "triton": triton, "math": math}
    stored = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))]
    local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} | {n.id for n in stored}
    parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}

    def refuse(node: ast.AST, what: str) -> None:
        raise ReachesPython(f"{fn.name} (line {getattr(node, 'lineno', '?')}) uses {what}, which reaches Python "
                            f"outside Triton's language: a kernel computes with tl.*, math.* and its own "
                            f"@triton.jit functions only")

    # Triton looks a name up as a global until the statement that assigns it has run, so a name assigned
    # somewhere in the body is not local everywhere: one that is also a global the kernel could reach
    # (a builtin, tl/triton/math, a kept definition) is refused rather than judged as a local.
    for node in stored:
        if node.id in roots or node.id in kept or hasattr(builtins, node.id):
            refuse(node, f"the name {node.id!r} as a variable (before its assignment it is the global one)")

    body = [n for stmt in fn.body for n in ast.walk(stmt)]  # the decorator is triton.jit (_is_jit), annotations names
    for node in body:
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            refuse(node, f"the private attribute .{node.attr}")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            if node.id not in kept and node.id not in roots and node.id not in _BUILTINS:
                refuse(node, f"the name {node.id!r}")
        if not isinstance(node, ast.Attribute) or isinstance(parents.get(node), ast.Attribute):
            continue  # judge each chain once, from its outermost attribute
        root, attrs = _chain(node)
        if root is None or root in local:  # a value computed in the kernel (a local, a call's result...)
            for attr in attrs:  # every step, not only the last: x.get_capture_scope().get
                if attr not in _value_attrs():
                    refuse(node, f"the attribute .{attr} of a computed value")
            continue
        if root in kept:
            refuse(node, f"an attribute of {root!r}")
        if root not in roots:
            continue  # a builtin's attribute: refused below as not inside, when resolved
        if root == "triton" and attrs[0] not in TRITON_PUBLIC:
            refuse(node, f"triton.{attrs[0]}")
        obj = roots[root]
        for i, attr in enumerate(attrs):
            obj = getattr(obj, attr, None)
            trusted = root == "triton" and i == 0  # triton.cdiv, triton.next_power_of_2, triton.language
            if obj is None or not (trusted or (_inside(obj) and _callable_ok(obj))):
                refuse(node, ".".join([root, *attrs[:i + 1]]))
        if isinstance(obj, types.ModuleType):
            refuse(node, f"the module {'.'.join([root, *attrs])} as a value")


def kernel_source(cells: list[str]) -> KernelSource:
    """The ``@triton.jit`` definitions and numeric constants of ``cells`` (code cells' sources) as one
    module's text; every other statement is dropped and listed, never run.

    Raises:
        SyntaxError: a cell does not parse.
        ReachesPython: a kept definition names something outside Triton's language (:func:`check_reach`).
    """
    kept, defined, dropped = [], [], []
    defs = []
    for i, cell in enumerate(cells):
        lines = cell.splitlines()
        for node in ast.parse(cell).body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)) or (
                    isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                continue
            if _definition_only(node):
                start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
                kept.append("\n".join(lines[start - 1:node.end_lineno]))
                defined.append(node.name if isinstance(node, ast.FunctionDef) else node.targets[0].id)
                if isinstance(node, ast.FunctionDef):
                    defs.append(node)
            else:
                dropped.append(f"cell {i + 1}, line {node.lineno}: {lines[node.lineno - 1].strip()[:60]}")
    for fn in defs:
        check_reach(fn, set(defined))
    return KernelSource(_PRELUDE + "\n\n\n".join(kept) + "\n", tuple(defined), tuple(dropped))


def cells_of(notebook: Path, grade_ids: tuple[str, ...]) -> list[str]:
    """The sources of the code cells with these nbgrader grade ids, in that order (read as plain JSON
    by :func:`attnlab.nbload.read_cells`: the GPU host's Python may have no nbformat).

    Raises:
        LookupError: a cell is missing.
    """
    from ...nbload import read_cells

    by_id = {c["metadata"].get("nbgrader", {}).get("grade_id"): c["source"]
             for c in read_cells(notebook) if c["cell_type"] == "code"}
    missing = [g for g in grade_ids if g not in by_id]
    if missing:
        raise LookupError(f"{notebook.name} has no cell {', '.join(missing)}")
    return [by_id[g] for g in grade_ids]

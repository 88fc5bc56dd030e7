"""What the timing stage times: of a notebook's kernel cells, only the ``@triton.jit`` function
definitions and plain numeric constants (:func:`kernel_source`); every other statement is dropped and
listed, never run (module-level code could patch a timer, a stream or the checker). :func:`cells_of`
reads those cells from a notebook. Used by :mod:`.timing`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KernelSource", "kernel_source", "cells_of"]


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


def kernel_source(cells: list[str]) -> KernelSource:
    """The ``@triton.jit`` definitions and numeric constants of ``cells`` (code cells' sources) as one
    module's text; every other statement is dropped and listed, never run.

    Raises:
        SyntaxError: a cell does not parse.
    """
    kept, defined, dropped = [], [], []
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
            else:
                dropped.append(f"cell {i + 1}, line {node.lineno}: {lines[node.lineno - 1].strip()[:60]}")
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

"""Each graded function's contract is stated once, in :mod:`attnlab.contracts`, and pointed to.

Every stub is referenced ("attnlab.contracts.<name>") from its notebook's task text, its checkers'
docstrings and its launcher's; and its signature (parameter names, order, kinds, defaults) is the one of
the model solution in ``notebooks/NN_*.py``, read with ``ast`` (nothing of the notebook runs).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from attnlab import contracts

ROOT = Path(__file__).resolve().parents[1]


def _solution(notebook: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((ROOT / "notebooks" / f"{notebook}.py").read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{notebook}: {len(found)} definitions of {name}"
    return found[0]


def _shape(args: ast.arguments) -> list[tuple[str, str, str | None]]:
    """(name, kind, default as source) of every parameter."""
    out = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(positional, defaults):
        out.append((a.arg, "positional", None if d is None else ast.unparse(d)))
    if args.vararg:
        out.append((args.vararg.arg, "*", None))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append((a.arg, "keyword", None if d is None else ast.unparse(d)))
    if args.kwarg:
        out.append((args.kwarg.arg, "**", None))
    return out


def _stub_def(name: str) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(contracts))
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_every_graded_function_of_the_notebooks_has_a_contract():
    graded = set()
    for path in sorted((ROOT / "notebooks").glob("0[1-57-9]_*.py")):
        for line in path.read_text().splitlines():
            if '"solution": true' in line and line.startswith("# %% nbgrader") and "markdown" not in line:
                grade_id = line.split('"grade_id": "')[1].split('"')[0]
                if not grade_id.startswith("predict-"):
                    graded.add((path.stem, grade_id))
    assert graded == {(nb, name) for nb, name, *_ in contracts.GRADED.values()}
    assert sorted(contracts.GRADED) == sorted(contracts.__all__[1:])


@pytest.mark.parametrize("stub", sorted(contracts.GRADED))
def test_the_stub_has_the_signature_of_the_model_solution(stub):
    notebook, name, _, _ = contracts.GRADED[stub]
    assert _shape(_stub_def(stub).args) == _shape(_solution(notebook, name).args)
    doc = inspect.getdoc(getattr(contracts, stub))
    assert doc and "Source" in doc, f"{stub}: a contract names its source"
    with pytest.raises(NotImplementedError, match=f"attnlab.contracts.{stub}"):
        params = inspect.signature(getattr(contracts, stub)).parameters.values()
        getattr(contracts, stub)(*[None for p in params if p.kind is p.POSITIONAL_OR_KEYWORD])


@pytest.mark.parametrize("stub", sorted(contracts.GRADED))
def test_the_contract_is_pointed_to_from_the_notebook_the_checker_and_the_launcher(stub):
    notebook, name, checkers, launcher = contracts.GRADED[stub]
    pointer = f"attnlab.contracts.{stub}"
    assert pointer in (ROOT / "notebooks" / f"{notebook}.py").read_text(), f"{notebook} does not point to {pointer}"
    for where in (*checkers, *([launcher] if launcher else [])):
        module, _, fn = where.rpartition(".")
        doc = inspect.getdoc(getattr(importlib.import_module(f"attnlab.{module}"), fn)) or ""
        assert pointer in doc, f"the docstring of attnlab.{where} does not point to {pointer}"

"""The support package keeps its layers (notes/decisions.md, "Layers (issue 32)").

Read from the source with ``ast`` (nothing imported), every import counted, those inside functions too:
each module of ``src/attnlab`` imports only modules of its own layer or of the layers below it, no
modules import each other in a circle, and no module, nor any test, uses another module's underscore
names (tests use public interfaces), and every import of the package names a module or a name that
exists (an import inside a function fails only when that function runs). The checker is run on the real
package and, to show that it can fail, on a copy of it with one bad module added.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"

#: The layers, bottom first: a module may import its own layer and the layers listed before it. A module
#: belongs to the layer of the longest name listed that is the module or a package holding it.
LAYERS = (
    # the device, Triton's interpreter, rebuilding kernels from source, the review channel
    ("runtime", ("attnlab.core", "attnlab.kernel_source")),  # attnlab.runtime is the device function
    # what the grader runs inside a notebook's kernel; the course's checks call it
    ("kernel", ("attnlab.grading.kernel",)),
    # what notebooks import (the package's top level) and the checking harness under the checkers
    ("course", ("attnlab", "attnlab.checking")),
    # where things live in a course directory, read by every part of the grader
    ("grading base", ("attnlab.grading", "attnlab.grading.course")),
    ("sandbox", ("attnlab.grading.sandbox",)),
    ("worker", ("attnlab.grading.worker",)),
    ("host", ("attnlab.grading.host", "attnlab.grading.samples", "attnlab.grading.abuse")),
    ("tools", ("attnlab.tools",)),
)

#: Circles left, each with its reason; any other circle fails.
KNOWN_CIRCLES: set[frozenset[str]] = set()


#: Test files that may still reach private names, and how many uses each may keep: a ratchet, at zero since
#: 2026-12-04 (issue 32: tests use public interfaces); a use in a test file fails.
KNOWN_TEST_PRIVATE: dict[str, int] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def modules(package: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of ``package`` (a folder named attnlab)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of ``module``'s layer (ValueError if none holds it)."""
    best, where = "", None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, where = prefix, index
    if where is None:
        raise ValueError(f"{module} is in no layer: add it to LAYERS")
    return where


class _Uses:
    """What one file imports from the package: (line, module) edges, and (line, text) private uses."""

    def __init__(self, tree: ast.AST, name: str, is_package: bool, known: dict[str, Path]) -> None:
        self.edges: list[tuple[int, str]] = []
        self.private: list[tuple[int, str]] = []
        self.imported: list[tuple[int, str, str | None]] = []  # (line, module, name taken from it or None)
        aliases: dict[str, str] = {}  # local name -> module it is bound to
        base = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "attnlab":
                        self.edges.append((node.lineno, self._module(a.name, known)))
                        self.imported.append((node.lineno, a.name, None))
                        aliases[a.asname] = a.name if a.asname else None
                        if a.asname is None:
                            aliases["attnlab"] = "attnlab"
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parts = base.split(".")[: len(base.split(".")) - node.level + 1]
                    source = ".".join(parts + ([node.module] if node.module else []))
                if source.split(".")[0] != "attnlab":
                    continue
                for a in node.names:
                    full = f"{source}.{a.name}"
                    self.imported.append((node.lineno, source, None if full in known else a.name))
                    if full in known:  # a module imported from its package
                        self.edges.append((node.lineno, full))
                        aliases[a.asname or a.name] = full
                    else:
                        self.edges.append((node.lineno, self._module(source, known)))
                        if _private(a.name):
                            self.private.append((node.lineno, f"from {source} import {a.name}"))
        aliases.pop(None, None)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                chain, value = [node.attr], node.value
                while isinstance(value, ast.Attribute):
                    chain.append(value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id in aliases and aliases[value.id]:
                    dotted = ".".join([aliases[value.id], *reversed(chain[1:])])
                    if dotted in known and dotted != name:
                        self.private.append((node.lineno, f"{dotted}.{node.attr}"))
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "setattr"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                target = node.args[0].value  # monkeypatch.setattr("attnlab.x._y", ...)
                if target.startswith("attnlab.") and _private(target.rpartition(".")[2]):
                    self.private.append((node.lineno, target))
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                    in ("setattr", "getattr", "delattr") and len(node.args) >= 2 and isinstance(node.args[0], ast.Name)
                    and aliases.get(node.args[0].id) and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
                dotted = aliases[node.args[0].id]  # monkeypatch.setattr(module, "_y", ...), getattr(module, "_y")
                if dotted in known and dotted != name:
                    self.private.append((node.lineno, f"{dotted}.{node.args[1].value}"))

    @staticmethod
    def _module(dotted: str, known: dict[str, Path]) -> str:
        while dotted not in known and "." in dotted:
            dotted = dotted.rpartition(".")[0]
        return dotted


def top_level_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level (also inside if/try/with blocks there), or None when
    any name may exist (a star import or a module ``__getattr__``)."""
    names: set[str] = set()
    blocks = [tree.body]
    while blocks:
        for node in blocks.pop():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if any(a.name == "*" for a in node.names):
                    return None
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
            for field in ("body", "orelse", "finalbody"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    blocks.append(getattr(node, field, []))
            blocks += [handler.body for handler in getattr(node, "handlers", [])]
    return None if "__getattr__" in names else names


#: Lines above which a module says at its top why it stays one module (a ``# Length:`` comment).
LONG_LINES = 400


def check(package: Path, tests: Path | None = None) -> dict[str, list[str]]:
    """The layer rules broken in ``package`` (and, for private names, in the test files under ``tests``):
    {"upward": [...], "circles": [...], "private": [...], "unplaced": [...], "unresolved": [...],
    "long": [...]}, each a list of sentences."""
    known = modules(package)
    trees = {name: ast.parse(path.read_text()) for name, path in known.items()}
    defined = {name: top_level_names(tree) for name, tree in trees.items()}
    found: dict[str, list[str]] = {"upward": [], "circles": [], "private": [], "unplaced": [], "unresolved": [],
                                   "long": []}

    def unresolved(where: str, uses: _Uses) -> list[str]:
        out = []
        for line, module, taken in uses.imported:
            if module not in known:
                out.append(f"{where}:{line}: no module {module}")
            elif taken is not None and defined[module] is not None and taken not in defined[module]:
                out.append(f"{where}:{line}: {module} has no {taken}")
        return out

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        uses = _Uses(trees[name], name, path.name == "__init__.py", known)
        graph[name] = {m for _, m in uses.edges if m != name and m in known}
        found["private"] += [f"{path.relative_to(package.parent)}:{line}: {text}" for line, text in uses.private]
        found["unresolved"] += unresolved(str(path.relative_to(package.parent)), uses)
        lines = path.read_text().splitlines()
        if len(lines) > LONG_LINES and not any(line.startswith("# Length:") for line in lines[:80]):
            found["long"].append(f"{path.relative_to(package.parent)}: {len(lines)} lines and no '# Length:' "
                                 f"comment at its top saying why it stays one module")
        try:
            own = layer_of(name)
        except ValueError as exc:
            found["unplaced"].append(str(exc))
            continue
        for line, target in uses.edges:
            if target in known and target != name and layer_of(target) > own:
                found["upward"].append(f"{path.relative_to(package.parent)}:{line}: {name} ({LAYERS[own][0]}) "
                                       f"imports {target} ({LAYERS[layer_of(target)][0]})")
    for circle in _circles(graph):
        if frozenset(circle) not in KNOWN_CIRCLES:
            found["circles"].append(" <-> ".join(sorted(circle)))
    for path in sorted(tests.glob("*.py")) if tests is not None else ():
        uses = _Uses(ast.parse(path.read_text()), "tests." + path.stem, False, known)
        found["private"] += [f"tests/{path.name}:{line}: {text}" for line, text in uses.private]
        found["unresolved"] += unresolved(f"tests/{path.name}", uses)
    return found


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_package_keeps_its_layers():
    found = check(PACKAGE, ROOT / "tests")
    per_test_file = {}
    for line in [line for line in found["private"] if line.startswith("tests/")]:
        per_test_file.setdefault(line.split(":")[0].removeprefix("tests/"), []).append(line)
    over = [line for name, lines in per_test_file.items() if len(lines) > KNOWN_TEST_PRIVATE.get(name, 0)
            for line in lines]
    found["private"] = [line for line in found["private"] if not line.startswith("tests/")] + over
    assert found == {"upward": [], "circles": [], "private": [], "unplaced": [], "unresolved": [],
                     "long": []}, "\n".join(
        f"{kind}: {line}" for kind, lines in found.items() for line in lines)


@pytest.fixture
def copy(tmp_path) -> Path:
    """A copy of the package (sources only) to break on purpose."""
    dest = tmp_path / "attnlab"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__", "data", "_course"))
    return dest


def test_an_upward_import_fails(copy):
    (copy / "core" / "device.py").write_text((copy / "core" / "device.py").read_text()
                                                + "\n\ndef _late():\n    from ..tools import doctor\n")
    found = check(copy)
    assert [re.sub(r":\d+:", ":N:", line) for line in found["upward"]] == [
        "attnlab/core/device.py:N: attnlab.core.device (runtime) imports attnlab.tools.doctor (tools)"]
    assert found["circles"], "device <- ... <- doctor -> device is a circle too"


def test_a_circle_within_one_layer_fails(copy):
    (copy / "checking" / "a_first.py").write_text("from . import a_second\n")
    (copy / "checking" / "a_second.py").write_text("def f():\n    import attnlab.checking.a_first\n")
    found = check(copy)
    assert found["upward"] == [] and found["circles"] == ["attnlab.checking.a_first <-> attnlab.checking.a_second"]


def test_a_private_name_used_across_modules_fails(copy, tmp_path):
    (copy / "checking" / "peek.py").write_text("from ..core import review\n\nSINK = review._SINK\n"
                                               "from ..verify import _NOT_THERE\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("import attnlab.core.review as r\n\n\ndef test(monkeypatch):\n"
                                     "    monkeypatch.setattr('attnlab.verify._helper', None)\n    r._SINK\n")
    found = check(copy, tests)
    assert [re.sub(r":\d+:", ":N:", line) for line in found["private"]] == [
        "attnlab/checking/peek.py:N: from attnlab.verify import _NOT_THERE",
        "attnlab/checking/peek.py:N: attnlab.core.review._SINK",
        "tests/test_x.py:N: attnlab.verify._helper",
        "tests/test_x.py:N: attnlab.core.review._SINK",
    ]


def test_an_import_of_nothing_fails(copy, tmp_path):
    (copy / "grading" / "worker" / "late.py").write_text(
        "def f():\n    from .. import variants\n    from ...checks import assert_close, no_such_check\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("from attnlab.grading.build import generate_assignment\n")
    found = check(copy, tests)
    assert [re.sub(r":\d+:", ":N:", line) for line in found["unresolved"]] == [
        "attnlab/grading/worker/late.py:N: attnlab.grading has no variants",
        "attnlab/grading/worker/late.py:N: attnlab.checks has no no_such_check",
        "tests/test_x.py:N: no module attnlab.grading.build",
    ]


def test_a_long_module_without_its_reason_fails(copy):
    long = copy / "checking" / "sprawl.py"
    long.write_text('"""One job."""\n' + "x = 1\n" * LONG_LINES)
    assert check(copy)["long"] == [f"attnlab/checking/sprawl.py: {LONG_LINES + 1} lines and no '# Length:' comment "
                                   f"at its top saying why it stays one module"]
    long.write_text('"""One job."""\n# Length: a catalogue.\n' + "x = 1\n" * LONG_LINES)
    assert check(copy)["long"] == []


def test_a_module_outside_the_package_has_no_layer():
    with pytest.raises(ValueError, match="in no layer"):
        layer_of("attnlabx.verify")


def test_review_notes_go_to_the_sink_connected_first():
    """The runtime's review channel no longer imports the guard: the guard connects itself at install, and
    code connected later (a notebook's) cannot reroute the notes."""
    import subprocess
    import sys

    code = ("from attnlab.core import review\nseen = []\nreview.connect(seen.append)\n"
            "review.connect(lambda text: None)\nreview.flag('why')\nprint(seen)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[grader] needs review: why", "['needs review: why']"]

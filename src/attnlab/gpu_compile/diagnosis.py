"""What a kernel that does not compile is told: the line, the construct, what to write instead, and the
targets it fails for (:func:`failure`).
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import types

from .signature import python_function
from .targets import GpuCompileError, native_target


def sources_of(kernel) -> dict:
    fn = python_function(kernel)
    return {getattr(kernel, "src", ""): fn}


#: AST construct -> what to write instead (the interpreter runs these; GPU compilers do not)
_HINTS = types.MappingProxyType({
    "Break": "`break` cannot leave a Triton loop early: give the loop bounds that end where the work "
             "ends (e.g. `range(lo, hi, BLOCK)`), or mask the work of the steps you would skip.",
    "Continue": "`continue` is not supported in a Triton loop: mask the work of the steps you would skip "
                "with `tl.where` or `mask=`.",
    "Raise": "a kernel cannot raise exceptions; check inputs in the launcher, or use `tl.device_assert`.",
    "List": "Python lists do not exist on a GPU: keep values in separate variables or in one tensor "
            "(`tl.zeros`, `tl.arange`, `tl.where`).",
    "ListComp": "Python lists do not exist on a GPU: build a tensor instead (`tl.arange`, `tl.where`).",
    "Dict": "Python dicts do not exist on a GPU: use separate variables or tensors.",
    "DictComp": "Python dicts do not exist on a GPU: use separate variables or tensors.",
    "Set": "Python sets do not exist on a GPU: use tensors.",
    "Try": "`try`/`except` does not exist in a kernel.",
    "With": "`with` blocks do not exist in a kernel.",
    "Lambda": "lambdas cannot be compiled: write a `@triton.jit` helper function instead.",
})


_MESSAGE_HINTS = (
    ("Unsupported function referenced", "only `@triton.jit` functions and `triton.language` can be called "
     "from a kernel: put `@triton.jit` above the helper (it is then inlined), or inline its body."),
    ("more than one value is ambiguous", "a Python `if`/`while` on a whole block of values: the interpreter "
     "treats any block as True, a GPU needs one decision per element: use `tl.where(cond, a, b)`, or reduce "
     "to one value first (`tl.max`, `tl.sum`)."),
    ("non-constexpr conversion", "an f-string (or `print`) of run-time values runs on the host, not in a "
     "kernel: use `tl.device_print(\"x\", x)` to print from the GPU."),
    ("return` statements inside", "`return` inside a loop: let the loop run to its bound (mask the rest) "
     "and return after it."),
    ("global variable", "a kernel can only read globals that are constexprs (`LOG2E = tl.constexpr(1.4427)`); "
     "pass other values as arguments."),
    ("int() argument", "`int()` (or `float()`) of a run-time value needs it on the host: keep it a tensor "
     "(`range()` takes run-time bounds, `x.to(tl.int32)` converts)."),
    ("unsupported tensor index", "indexing a block with a Python integer or a run-time value: select with "
     "masks and reductions (`tl.sum(tl.where(offs == i, x, 0))`)."),
)


def _compilation_errors(exc: BaseException) -> list:
    from triton.compiler.errors import CompilationError

    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, CompilationError):
            chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _is_not_implemented(exc: BaseException) -> bool:
    for err in _compilation_errors(exc):
        node = getattr(err, "node", None)
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == "NotImplementedError":
                return True
    return False


def _locate(exc: BaseException, by_src: dict) -> tuple[str, str, str]:
    """(where, code, construct) of the innermost compile error: ``line 14 of the cell defining
    _softmax_kernel``, the code on that line, and the AST node type."""
    errs = [e for e in _compilation_errors(exc) if hasattr(getattr(e, "node", None), "lineno")]
    if not errs:
        m = re.search(r"<function (\w+)", str(exc))
        if m:  # an ordinary function referenced: find its first call in the kernel and its helpers
            for src, fn in by_src.items():
                for i, line in enumerate(src.splitlines()):
                    if re.search(rf"\b{m.group(1)}\s*\(", line):
                        return _where(fn, src, i + 1), line.strip(), "Call"
        return "", "", ""
    err = errs[-1]
    node, src = err.node, err.src or ""
    lines = src.splitlines()
    code = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
    fn = by_src.get(src)
    return (_where(fn, src, node.lineno) if fn is not None else f"line {node.lineno} of the kernel"), code, \
        type(node).__name__


def _where(fn, src: str, lineno: int) -> str:
    """``line N of the cell defining NAME`` (or ``file.py:N``) for line ``lineno`` of ``src``,
    Triton's copy of ``fn`` that starts at its ``def``."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return f"line {lineno} of {fn.__name__}"
    first_def = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("def ")), 0)
    line = start + first_def + lineno - 1
    filename = fn.__code__.co_filename
    if "ipykernel" in filename or filename.startswith("<"):
        return f"line {line} of the cell defining {fn.__name__}"
    return f"{os.path.basename(filename)}:{line} (in {fn.__name__})"


def _triton_says(exc: BaseException) -> str:
    errs = _compilation_errors(exc)
    text = (getattr(errs[-1], "error_message", None) or "") if errs else str(exc)
    text = (text or type(exc).__name__).strip().splitlines()
    text = text[-1] if text else type(exc).__name__
    return text if len(text) < 200 else text[:text.find(". ", 0, 200) + 1 or 200] + " [...]"


def failure(what, spec, options, failed: dict, compiled: list, by_src: dict) -> BaseException:
    first = next(iter(failed.values()))
    if _is_not_implemented(first):
        return NotImplementedError(f"{what} is not implemented yet: its cell still raises NotImplementedError(). "
                                   f"Write the kernel there (replace the raise).")
    where, code, construct = _locate(first, by_src)
    says = _triton_says(first)
    hint = _HINTS.get(construct, "")
    named = re.search(r"global variable (\w+)", says)
    if named and any(callable(getattr(fn, "__globals__", {}).get(named.group(1))) for fn in by_src.values()):
        hint = dict(_MESSAGE_HINTS)["Unsupported function referenced"]  # a plain Python function
    for needle, text in _MESSAGE_HINTS:
        if not hint and needle.lower() in says.lower():
            hint = text
    names = ", ".join(t.describe() for t in failed)
    if compiled:
        head = (f"{what} compiles for {', '.join(t.describe() for t in compiled)} but NOT for {names}: "
                f"it would not run on that GPU")
    else:
        head = f"{what} does not compile for a GPU ({names}): it would not run on one"
    interp = "" if native_target() in failed else ", although Triton's CPU interpreter runs it"
    lines = [f"{head}{interp}."]
    if where:
        lines.append(f"  {where}: `{code}`" if code else f"  {where}")
    if hint:
        lines.append(f"  {hint}")
    lines.append(f"  Triton's compiler says: {says}")
    lines.append(f"  (launch compiled: {spec.describe()}, num_warps={options['num_warps']}, "
                 f"num_stages={options['num_stages']})")
    return GpuCompileError("\n".join(lines), what=what, failed={t.name: _triton_says(e) for t, e in failed.items()},
                           compiled=[t.name for t in compiled])

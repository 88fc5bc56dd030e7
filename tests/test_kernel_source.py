"""The kernel graded is its source (issue 30, item 2): nothing attached to a kernel object computes.

Each trick gets the right numbers from a kernel that only loads its row (04's ``_softmax_kernel``
without a store) plus Python that Triton would run during the launch: a pre-run hook, a helper
that is not a real ``@triton.jit`` function, a compile hook, a patched Triton class, a profile
function. Before the grader rebuilt kernels from their source (attnlab.kernel_source) each kept its
points; now each fails, and what the object carried is reported for review. Honest kernels keep
passing, with no review note.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
import threading
import time
import types

import pytest
import torch

from attnlab.core import device, review
from attnlab import kernel_source
from attnlab.verify import check_softmax_kernel

RT = device.init(verbose=False)
pytestmark = pytest.mark.skipif(not RT.interpret, reason="the CPU grading path: Triton's interpreter")

_HEAD = """
import sys
import torch
import triton
import triton.language as tl
"""
#: 04's kernel with the store left out: right numbers only if something else writes the output.
_LOADS_ONLY = """
@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
"""
_HONEST = """
@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
    z = _shift(x)
    num = tl.exp(z)
    tl.store(output_ptr + row * output_row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def _shift(x):
    return x - tl.max(x, axis=0) * ONE


ONE = tl.constexpr(1.0)
"""
#: What every trick computes: the softmax of the launch's rows, written into its output (torch).
_SOFTMAX_INTO = """
def softmax_into(y, x, x_stride, y_stride, n_cols):
    rows = (x.numel() - n_cols) // x_stride + 1 if x.dim() == 1 else x.shape[0]
    xv = torch.as_strided(x, (rows, n_cols), (x_stride, 1))
    yv = torch.as_strided(y, (rows, n_cols), (y_stride, 1))
    yv.copy_(torch.softmax(xv.double(), dim=-1).to(yv.dtype))
"""


def _module(tmp_path, name: str, *parts: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(_HEAD + "\n".join(parts)))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def flags(monkeypatch):
    notes: list[str] = []
    monkeypatch.setattr(review, "flag", notes.append)
    return notes


def _check(kernel):
    check_softmax_kernel(kernel, n_rows=4, n_cols=37)


def test_pre_run_hook_loses_the_points(tmp_path, flags):
    mod = _module(tmp_path, "ks_hook", _LOADS_ONLY, _SOFTMAX_INTO, """
def hook(y, x, x_stride, y_stride, n_cols, **constexprs):
    softmax_into(y, x, x_stride, y_stride, n_cols)

_softmax_kernel.add_pre_run_hook(hook)
""")
    with pytest.raises(AssertionError, match="not finite"):
        _check(mod._softmax_kernel)
    assert any("pre-run hook" in f and "rebuilt from its source" in f for f in flags), flags


def test_honest_kernel_with_helper_and_constexpr_keeps_its_points(tmp_path, flags):
    mod = _module(tmp_path, "ks_honest", _HONEST)
    _check(mod._softmax_kernel)
    _check(mod._softmax_kernel)  # again: the rebuilt kernel is reused, not rebuilt
    assert flags == []
    rebuilt = device.runnable_kernel(mod._softmax_kernel)
    assert rebuilt is device.runnable_kernel(mod._softmax_kernel)
    assert type(rebuilt) is type(mod._softmax_kernel) and rebuilt is not mod._softmax_kernel
    ns = rebuilt.fn.__globals__
    assert ns["_shift"] is not mod._shift and type(ns["_shift"]) is type(mod._shift)  # the helper rebuilt too
    assert "torch" not in ns and "sys" not in ns  # what the kernel does not name is not there


def test_honest_kernel_with_a_harmless_hook_keeps_its_points_and_is_reported(tmp_path, flags):
    mod = _module(tmp_path, "ks_harmless", _HONEST, "_softmax_kernel.add_pre_run_hook(lambda *a, **k: None)")
    _check(mod._softmax_kernel)
    assert any("pre-run hook" in f for f in flags), flags


def test_helper_that_only_looks_like_a_builtin_is_refused(tmp_path, flags):
    # a global the kernel calls, marked as a Triton builtin: a GPU compile calls it with a code generator
    # (it can emit honest code there), the interpreter calls it with the tensors themselves
    mod = _module(tmp_path, "ks_builtin", """
import ctypes

import numpy as np


def _finish(ptrs, x, _semantic=None):
    if _semantic is not None:  # compiling for a GPU: an honest no-op
        return x
    data = x.handle.data.astype(np.float64)  # interpreted: the row itself, in NumPy
    keep = np.isfinite(data)
    e = np.exp(data[keep] - data[keep].max())
    for address, value in zip(ptrs.handle.data[keep], e / e.sum()):
        ctypes.c_float.from_address(int(address)).value = float(value)
    return x


_finish.__triton_builtin__ = True


@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
    _finish(output_ptr + row * output_row_stride + cols, x)
""")
    with pytest.raises(TypeError, match="uses the global '_finish'"):
        _check(mod._softmax_kernel)


def test_globals_rebound_after_decoration_are_checked_again(tmp_path, flags):
    mod = _module(tmp_path, "ks_rebind", _HONEST)
    _check(mod._softmax_kernel)
    mod._shift = lambda x: x  # a plain Python function in place of the helper, after the first checks
    with pytest.raises(TypeError, match="uses the global '_shift'"):
        _check(mod._softmax_kernel)


def test_kernel_without_source_is_refused(flags):
    import triton  # noqa: F401 (interpreter mode is on: device.init above)

    ns: dict = {}
    exec(compile(_HEAD + _HONEST, "<made by exec>", "exec"), ns)  # noqa: S102
    with pytest.raises(TypeError, match="source of this kernel cannot be read"):
        _check(ns["_softmax_kernel"])


def test_compile_hook_cannot_write_the_output(tmp_path, flags):
    # Triton's compiler calls knobs.runtime.add_stages_inspection_hook while the compile gate compiles the
    # kernel for the GPU targets, before the launch: the hook finds the launch's tensors up the stack
    mod = _module(tmp_path, "ks_knob", _LOADS_ONLY, _SOFTMAX_INTO, """
from triton import knobs


def stages_hook(*args):
    frame = sys._getframe(1)
    while frame is not None:
        launch = frame.f_locals.get("args")
        if frame.f_code.co_name == "ensure_compiles" and launch:
            y, x, x_stride, y_stride, n_cols = launch
            softmax_into(y, x, x_stride, y_stride, n_cols)
        frame = frame.f_back
    return "", ""


knobs.runtime.add_stages_inspection_hook = stages_hook
""")
    from triton import knobs

    try:
        with pytest.raises(AssertionError, match="not finite"):
            _check(mod._softmax_kernel)
    finally:
        knobs.runtime.add_stages_inspection_hook = None
    assert any("add_stages_inspection_hook" in f for f in flags), flags


def test_patched_triton_class_is_refused(tmp_path, flags):
    from triton.runtime.interpreter import InterpretedFunction

    mod = _module(tmp_path, "ks_class", _LOADS_ONLY, _SOFTMAX_INTO, """
from triton.runtime.interpreter import InterpretedFunction

_run = InterpretedFunction.run


def run(self, y, x, x_stride, y_stride, n_cols, *args, **kwargs):
    out = _run(self, y, x, x_stride, y_stride, n_cols, *args, **kwargs)
    if not kwargs.get("warmup"):
        softmax_into(y, x, x_stride, y_stride, n_cols)
    return out


InterpretedFunction.run = run
""")
    try:
        with pytest.raises(AssertionError, match="Triton's own code was replaced"):
            _check(mod._softmax_kernel)
    finally:
        InterpretedFunction.run = mod._run
    assert any("InterpretedFunction.run" in f for f in flags), flags


def test_torch_during_the_launch_is_refused(tmp_path, flags):
    # a profile function runs at every Python call, Triton's launch included (the grader's guard removes
    # it while autograding; the probe does not depend on that)
    mod = _module(tmp_path, "ks_profile", _LOADS_ONLY, _SOFTMAX_INTO, """
def profile(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "_restore_args_dev":
        y, x, x_stride, y_stride, n_cols = frame.f_locals["args_dev"]
        softmax_into(y, x, x_stride, y_stride, n_cols)
""")
    sys.setprofile(mod.profile)
    try:
        with pytest.raises(kernel_source.NoTorchError, match="during the kernel's launch"):
            _check(mod._softmax_kernel)
    finally:
        sys.setprofile(None)
    assert any("torch ran while the kernel was launched" in f for f in flags), flags


def test_no_torch_refuses_an_operation_and_allows_tritons_copies():
    with pytest.raises(kernel_source.NoTorchError), kernel_source.NoTorch("k"):
        torch.ones(3) + 1


def test_a_thread_running_notebook_code_during_a_launch_is_reported(tmp_path, flags):
    mod = _module(tmp_path, "ks_thread", _HONEST, """
import threading
import time

stop = threading.Event()


def watcher():
    while not stop.is_set():
        time.sleep(0.01)
""")
    thread = threading.Thread(target=mod.watcher, daemon=True)
    thread.start()
    try:
        _check(mod._softmax_kernel)
    finally:
        mod.stop.set()
        thread.join()
    assert any("a thread running notebook code" in f and "watcher" in f for f in flags), flags


def _frame(name, path, back=None):
    return types.SimpleNamespace(f_code=types.SimpleNamespace(co_name=name, co_filename=path), f_lineno=1,
                                 f_back=back)


def test_the_cell_waiting_for_a_gpu_backward_is_not_a_foreign_thread(monkeypatch):
    # On a GPU, autograd runs CUDA nodes on a device thread: the kernels of notebook 07's backward are launched
    # there while the cell that called .backward() waits in torch's engine call (seen on the H200, 2026-12-04).
    graph = os.path.join(os.path.dirname(torch.__file__), "autograd", "graph.py")
    cell = _frame("<module>", "/tmp/ipykernel_4/359502294.py")
    tensor_py = os.path.join(os.path.dirname(torch.__file__), "_tensor.py")
    waiting = _frame("_engine_run_backward", graph, back=_frame("backward", tensor_py, back=cell))
    running = _frame("<module>", "/tmp/ipykernel_4/359502294.py")
    monkeypatch.setattr(sys, "_current_frames", lambda: {1: waiting, 2: running})
    node = [None]
    monkeypatch.setattr(torch._C, "_current_autograd_node", lambda: node[0])
    assert [t.split(" ")[0] for t in kernel_source.foreign_threads()] == ["<module>", "<module>"]  # a forward launch
    node[0] = object()  # the launch runs inside a backward pass: the waiting cell is left out, the other is not
    assert kernel_source.foreign_threads() == ["<module> (/tmp/ipykernel_4/359502294.py, line 1)"]


def test_triton_language_patched_in_a_cell_is_refused_while_autograding(tmp_path):
    # samples/abuse's triton-language-patch, in the order autograding runs it: the guard installed before
    # any cell, the solution cell, the guard's restore before the test cell (triton.language is not
    # restored: the interpreter patches it at every launch), then the check. In a process of its own.
    import importlib.util
    import subprocess

    from .conftest import ROOT

    spec = importlib.util.spec_from_file_location("abuse_cases", ROOT / "samples" / "abuse" / "cases.py")
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    cell = tmp_path / "cell.py"
    cell.write_text(cases.TL_PATCH)
    script = textwrap.dedent(f"""
        from attnlab import init
        init(verbose=False)
        import torch, triton, triton.language as tl
        from attnlab.grading.kernel import guard
        from attnlab.verify import check_softmax_kernel
        ns = {{"torch": torch, "triton": triton, "tl": tl, "__name__": "__main__"}}
        guard.install(ns=ns, triton=True)
        exec(compile(open({str(cell)!r}).read(), {str(cell)!r}, "exec"), ns)
        guard.before_locked(ns)
        try:
            check_softmax_kernel(ns["_softmax_kernel"], n_rows=3, n_cols=37)
            print("RESULT passed")
        except AssertionError as exc:
            print("RESULT failed:", exc)
        print("NOTES", guard.drain())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    result = [line for line in out.stdout.splitlines() if line.startswith(("RESULT", "NOTES"))]
    assert len(result) == 2, out.stdout + out.stderr
    assert result[0].startswith("RESULT failed") and "Triton's own code was replaced" in result[0], result
    assert "triton.language" in result[0] and "program_id" in result[0], result
    assert "Triton's code had been replaced" in result[1], result


def test_swapped_interpreter_rewriter_is_left_behind(tmp_path, flags):
    # the interpreter runs what its rewriter returns for each program: here a Python function that writes
    # the launch's softmax with torch (the compile gate compiles the honest-looking source)
    mod = _module(tmp_path, "ks_rewriter", _LOADS_ONLY, _SOFTMAX_INTO, """
import types


_loads = _softmax_kernel.rewrite()  # the honest-looking kernel, interpreted: its loads are accounted


def _program(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    _loads(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE)
    frame = sys._getframe(1)
    while frame is not None and "args_dev" not in frame.f_locals:
        frame = frame.f_back
    softmax_into(*frame.f_locals["args_dev"][:5])


_softmax_kernel.rewritten_fn.pop(_softmax_kernel.fn, None)
_softmax_kernel.rewriter = types.SimpleNamespace(rewrite_ast=lambda: _program, fn=None)
""")
    with pytest.raises(AssertionError, match="not finite"):
        _check(mod._softmax_kernel)
    assert any("rewriter" in f for f in flags), flags


def test_a_subclass_of_tritons_kernel_type_is_refused(tmp_path):
    mod = _module(tmp_path, "ks_subclass", _HONEST, """
class _Kernel(type(_softmax_kernel)):
    def run(self, *args, **kwargs):
        return super().run(*args, **kwargs)


_softmax_kernel = _Kernel(_softmax_kernel.fn)
""")
    with pytest.raises(TypeError, match="must be a @triton.jit function"):
        _check(mod._softmax_kernel)


def test_a_python_builtin_a_gpu_compiler_refuses_is_named(tmp_path, flags):
    mod = _module(tmp_path, "ks_abs", _HONEST.replace("num / tl.sum(num, axis=0)", "abs(num / tl.sum(num, axis=0))"))
    with pytest.raises(TypeError, match="Python's 'abs'.*tl.abs"):
        _check(mod._softmax_kernel)


def test_a_compiled_mode_kernel_launched_before_carries_nothing_extra(tmp_path, monkeypatch):
    # what Triton itself sets at a compiled kernel's first launch is not "carried" (no false review note)
    from triton.runtime.jit import JITFunction

    mod = _module(tmp_path, "ks_jit", _HONEST)
    kernel = JITFunction(mod._softmax_kernel.fn)
    assert kernel_source.carried(kernel) == []
    for name in ("CompiledKernel", "compile", "ASTSource"):  # JITFunction.create_binder's
        setattr(kernel, name, object())
    assert kernel_source.carried(kernel) == []
    kernel.launch_metadata = lambda grid, kernel, args: {}
    kernel.extra = 1
    found = kernel_source.carried(kernel)
    assert any("launch_metadata callback" in f for f in found) and any("extra" in f for f in found), found


def test_the_releases_placeholder_body_says_not_implemented_yet(tmp_path):
    """The blank release's kernels raise NotImplementedError: a learner who runs the tests first is
    told the kernel is not written yet, not that a GPU compiler refuses a Python builtin."""
    blank = _module(tmp_path, "blank_kernel", '''
@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    raise NotImplementedError()
''')
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        check_softmax_kernel(blank._softmax_kernel, n_rows=2, n_cols=8)


def test_a_kernel_reaching_the_interpreters_machinery_is_refused(tmp_path):
    """A helper whose interpreter-only branch (pruned by a GPU compile) loads through the interpreter's
    builder class found with getattr on split strings read rows the ledger never saw, with full marks
    (red team, 2026-12-02). Handles, private attributes, reflection and triton's runtime are refused."""
    sneaky = _module(tmp_path, "sneaky_kernel", '''
@triton.jit
def _load(ptrs, mask):
    x = tl.load(ptrs, mask=mask, other=float("-inf"))
    if hasattr(ptrs.handle, "data"):
        x.handle = getattr(getattr(triton, "run" "time"), "interp" "reter").InterpreterBuilder.create_masked_load(
            None, ptrs.handle, mask.handle, x.handle, None)
    return x


@triton.jit
def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = _load(input_ptr + row * input_row_stride + cols, cols < n_cols)
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)
''')
    with pytest.raises(kernel_source.KernelSourceError, match="machinery"):
        check_softmax_kernel(sneaky._softmax_kernel, n_rows=2, n_cols=8)

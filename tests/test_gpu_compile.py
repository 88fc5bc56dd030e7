"""The GPU compile gate (attnlab.gpu_compile), in-process: signatures, caching, messages, targets.

The notebooks' mistakes that exercise it end to end (samples/mistakes/04_*, 05_*: a Python helper,
an f-string print, an `if` on a block, a dict, `break`, `int()` of a run-time value, a plain
global) are graded with every other mistake in test_grading.py.
"""

from __future__ import annotations

import os

from .interpreter import COMPILED_GPU_PROCESS, interpreter_only

# The kernels of this module are decorated as interpreted ones; the variable is put back at the end of the
# module. On a GPU host the module runs only in a process started with the variable set (tests/interpreter.py):
# set here, it would leave Triton's own library interpreted for the GPU tests collected after it.
_INTERPRET_BEFORE = os.environ.get("TRITON_INTERPRET")
if not COMPILED_GPU_PROCESS:
    os.environ["TRITON_INTERPRET"] = "1"  # before any kernel below is decorated

import importlib.util
import signal
import textwrap
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from attnlab import gpu_compile as gc
from attnlab.gpu_compile import clock, compiling, gate, signature

ROOT = Path(__file__).resolve().parents[1]
pytestmark = interpreter_only


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    """This module's tests run as under the interpreter, as its kernels were decorated."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# Small kernels, one per behaviour. Each is a module-level function, so inspect finds its source.
@triton.jit
def _copy(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x - tl.max(x, axis=0), mask=offs < n)


@triton.jit
def _with_break(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, 4):
        if i >= n:
            break
        acc += tl.load(in_ptr + offs)
    tl.store(out_ptr + offs, acc)


def _plain(x):
    return x * 2.0


@triton.jit
def _calls_plain(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _plain(tl.load(in_ptr + offs)))


@triton.jit
def _blank(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    """Documented, but not written yet (what the release hands out)."""
    # YOUR CODE HERE
    raise NotImplementedError()


@triton.jit
def _fp8_to_fp32(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs).to(tl.float32))


def _args(n=37, dtype=torch.float32):
    x = torch.randn(64).to(dtype)
    return (torch.empty(64), x, n), {"BLOCK": 64}


def test_signature_follows_the_launch_values():
    a = torch.zeros(64)
    b = torch.zeros(65, dtype=torch.bfloat16)[1:]  # 2-byte offset: not 16-byte aligned
    spec = gc.signature_of(_copy, (a, b, 48), {"BLOCK": 64})
    assert spec.signature == {"out_ptr": "*fp32", "in_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"}
    assert spec.constexprs == {"BLOCK": 64}
    assert spec.attrs == {(0,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]]}
    # an int equal to 1 is specialised to a constexpr, a large one is 64-bit, floats are fp32
    spec = gc.signature_of(_copy, (a, 2.5, 1), {"BLOCK": 16})
    assert spec.signature["in_ptr"] == "fp32" and spec.signature["n"] == "constexpr"
    assert spec.constexprs["n"] == 1
    assert gc.signature_of(_copy, (a, a, 2**40), {"BLOCK": 16}).signature["n"] == "i64"
    assert gc.signature_of(_copy, (a, a, 3), {"BLOCK": 16}).signature["n"] == "i32"


def test_signature_agrees_with_tritons_own_specialisation():
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend

    for value in (torch.zeros(8), torch.zeros(8, dtype=torch.float16), torch.zeros(9, dtype=torch.bfloat16)[1:],
                  torch.zeros(4, dtype=torch.int32), 7, 32, 2**33, 1.5):
        spec = gc.signature_of(_copy, (value, value, 5), {"BLOCK": 16})
        kind, hint = native(BaseBackend, value, False, True, True)
        assert spec.signature["out_ptr"] == kind, value
        assert ((0,) in spec.attrs) == (hint == "D"), value


def test_signature_that_does_not_fit_the_kernel_is_a_type_error():
    with pytest.raises(TypeError, match="does not fit the kernel's parameters"):
        gc.signature_of(_copy, (torch.zeros(4), torch.zeros(4)), {"BLOCK": 16})
    with pytest.raises(TypeError, match="argument n is a str"):
        gc.signature_of(_copy, (torch.zeros(4), torch.zeros(4), "37"), {"BLOCK": 16})


def test_a_correct_kernel_compiles_for_every_target_and_is_cached(monkeypatch, capsys):
    args, consts = _args()
    gc.ensure_compiles(_copy, args, consts, what="_copy")
    assert "[gpu] _copy compiles for sm_75 (Colab's T4), sm_80 (A100), sm_90 (H100/H200)" in capsys.readouterr().out
    calls = []
    monkeypatch.setattr(compiling, "compile_for", lambda *a, **k: calls.append(a))
    gc.ensure_compiles(_copy, args, consts, what="_copy")
    gc.ensure_compiles(_copy, _args(n=50)[0], consts, what="_copy")  # same signature: nothing new
    assert calls == []
    gc.ensure_compiles(_copy, args, {"BLOCK": 128}, what="_copy")  # new constexprs: one front end
    assert len(calls) == 1 and calls[0][2] == gc.TARGETS[0]


@triton.jit
def _copy_scaled(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, 2.0 * x - tl.max(x, axis=0), mask=offs < n)


def test_a_failure_of_side_by_side_compiles_counts_only_if_it_happens_alone(monkeypatch):
    """Triton's front end is not thread-safe: a full make test once failed a correct kernel while the
    sm_75 and sm_90 compiles ran side by side. The failed one is compiled again alone."""
    import threading

    from triton.compiler.errors import CompilationError

    real, failed = compiling.compile_for, []

    def flaky(jit, spec, target, options, full):
        if full and target.arch == 90 and threading.current_thread() is not threading.main_thread() and not failed:
            failed.append(target.arch)
            raise CompilationError(jit.src, None, "a race between two front ends")
        return real(jit, spec, target, options, full)

    monkeypatch.setattr(compiling, "compile_for", flaky)
    args, consts = _args()
    gc.ensure_compiles(_copy_scaled, args, consts, what="_copy_scaled")  # no GpuCompileError
    assert failed == [90]


def test_a_launch_that_passed_skips_the_signature_and_a_new_one_does_not(monkeypatch):
    """The gate runs before every launch of a bench loop: a launch seen before must not rebuild its
    signature (that cost ~150 us a launch on the H200), and anything that changes the signature must."""
    kernel = triton.jit(_copy.fn)  # a kernel of its own: no launch of the other tests counts
    args, consts = _args()
    gc.ensure_compiles(kernel, args, consts, what="_copy")
    built = []
    real = gc.signature_of
    monkeypatch.setattr(gate, "signature_of", lambda *a: built.append(a) or real(*a))
    monkeypatch.setattr(compiling, "compile_for", lambda *a, **k: None)
    out, x, _ = args
    gc.ensure_compiles(kernel, (out, x, 50), consts, what="_copy")  # another n, same specialisation
    assert built == []
    for changed in ((out, x.to(torch.float16), 37), (out, torch.zeros(65)[1:], 37), (out, x, 1), (out, x, 48),
                    (out, x, 2**40)):
        gc.ensure_compiles(kernel, changed, consts, what="_copy")
    gc.ensure_compiles(kernel, args, {"BLOCK": 128}, what="_copy")
    gc.ensure_compiles(kernel, args, consts, what="_copy", num_warps=8)
    assert len(built) == 7


def test_break_fails_with_the_line_the_construct_and_every_target():
    args, consts = _args()
    with pytest.raises(gc.GpuCompileError) as info:
        gc.ensure_compiles(_with_break, args, consts, what="_with_break")
    msg = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert "does not compile for a GPU" in msg and "would not run on one" in msg
    assert all(t.describe() in msg for t in gc.TARGETS)
    line = next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1) if ln.strip() == "break")
    assert f"test_gpu_compile.py:{line} (in _with_break): `break`" in msg
    assert "`break` cannot leave a Triton loop early" in msg
    assert set(info.value.failed) == {"sm_75", "sm_80", "sm_90"} and info.value.compiled == []
    # cached: the same failure again, without compiling
    with pytest.raises(gc.GpuCompileError):
        gc.ensure_compiles(_with_break, args, consts, what="_with_break")


def test_calling_an_ordinary_python_function_names_it():
    args, consts = _args()
    with pytest.raises(gc.GpuCompileError) as info:
        gc.ensure_compiles(_calls_plain, args, consts, what="_calls_plain")
    msg = str(info.value)
    assert "_plain(tl.load(in_ptr + offs))" in msg and "put `@triton.jit` above the helper" in msg


def test_a_blank_kernel_is_not_implemented_yet():
    args, consts = _args()
    with pytest.raises(NotImplementedError, match="_blank is not implemented yet"):
        gc.ensure_compiles(_blank, args, consts, what="_blank")


def test_a_kernel_that_fails_on_some_targets_says_which():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8")
    x = torch.zeros(64, dtype=torch.float8_e4m3fn)
    with pytest.raises(gc.GpuCompileError) as info:
        gc.ensure_compiles(_fp8_to_fp32, (torch.empty(64), x, 64), {"BLOCK": 64}, what="_fp8_to_fp32")
    msg = str(info.value)
    assert "compiles for sm_90 (H100/H200) but NOT for sm_75 (Colab's T4), sm_80 (A100)" in msg
    assert info.value.compiled == ["sm_90"]


def test_the_interpreter_works_before_and_after_compiling():
    x = torch.randn(64)
    y = torch.empty(64)
    _copy[(1,)](y, x, 50, BLOCK=64)  # an interpreted run leaves some of its patches behind
    gc.ensure_compiles(_copy, (y, x, 50), {"BLOCK": 32}, what="_copy")
    y2 = torch.empty(64)
    _copy[(1,)](y2, x, 50, BLOCK=64)
    torch.testing.assert_close(y2[:50], x[:50] - x[:50].max())


def test_compile_time_is_not_the_learners_call_time():
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    old = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        with clock.own_clock("x"):
            assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= gc.compile_limit_s()
        assert 99 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@triton.jit
def _gate_waits(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=offs < n, other=0.0) + 1.0, mask=offs < n)


@triton.jit
def _gate_computes(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=offs < n, other=0.0) + 2.0, mask=offs < n)


@pytest.mark.parametrize("waits", [True, False], ids=["waiting", "computing"])
def test_a_compile_that_waits_is_never_the_learners_fault(monkeypatch, capsys, waits):
    """Out of time while waiting (a lock, a loaded machine: little CPU used) is retried, then
    reported for review, never a lost point; out of time while computing is the kernel's."""
    import time as time_

    calls = []

    def slow_compile(*args, **kwargs):
        calls.append(1)
        end = time_.perf_counter() + 1.0
        while time_.perf_counter() < end:
            if waits:
                time_.sleep(0.05)
        return None

    monkeypatch.setattr(clock, "compile_limit_s", lambda: 0.3)
    monkeypatch.setattr(compiling, "compile_for", slow_compile)
    x, y = torch.randn(64), torch.empty(64)
    if waits:
        gc.ensure_compiles(_gate_waits, (y, x, 51), {"BLOCK": 64}, what="_gate_waits")
        assert len(calls) >= 2  # tried again before giving up
        out = capsys.readouterr().out
        assert "needs review: could not check that _gate_waits compiles" in out and "waited" in out, out
    else:
        with pytest.raises(TimeoutError, match="did not finish within"):
            gc.ensure_compiles(_gate_computes, (y, x, 53), {"BLOCK": 64}, what="_gate_computes")


def _reference_kernel(tmp_path: Path, notebook: str, name: str):
    """The notebook's model kernel, as an interpreted kernel loaded from a file."""
    text = (ROOT / "notebooks" / f"{notebook}.py").read_text()
    start = text.index(f"@triton.jit\ndef {name}(")
    body = text[start:text.index("### END SOLUTION", start)].replace("    ### BEGIN SOLUTION\n", "")
    path = tmp_path / f"ref_{notebook}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def test_reference_kernels_compile_and_report_resources(tmp_path):
    softmax = _reference_kernel(tmp_path, "04_triton_softmax", "_softmax_kernel")
    flash = _reference_kernel(tmp_path, "05_triton_flash", "_flash_fwd_kernel")
    x = torch.randn(4, 1000)
    gc.ensure_compiles(softmax, (torch.empty_like(x), x, 1000, 1000, 1000), {"BLOCK_SIZE": 1024},
                       what="_softmax_kernel", num_warps=4)
    q = torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)
    args = (q, q, q, torch.empty_like(q), torch.empty(1, 2, 64), q.stride(1), q.stride(2), 64, 0.125)
    consts = dict(CAUSAL=True, BLOCK_M=64, BLOCK_N=64, HEAD_DIM=64)
    gc.ensure_compiles(flash, args, consts, what="_flash_fwd_kernel", num_warps=4, num_stages=2)
    res = gc.resources(flash, args, consts, num_warps=4, num_stages=2)
    assert res.target == "sm_90" and 16 <= res.registers <= 255 and res.spill_bytes == 0
    assert res.shared_bytes > 0
    assert "registers/thread, no spills" in gc.describe_resources(res)


def test_selfcheck_lists_the_gates_advice(tmp_path):
    import nbformat

    from attnlab.tools.selfcheck import NotebookReport, TestReport, advice_of, format_report

    cell = nbformat.v4.new_code_cell("launch()")
    line = "_softmax_kernel compiles for sm_75 (Colab's T4). With *fp32 pointers: 15 registers/thread"
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"row sums\n{gc.ADVICE_PREFIX}{line}\n")]
    path = tmp_path / "graded.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell, cell]), path)
    assert advice_of(path) == [line]  # once, however often it was printed
    rep = NotebookReport(Path("mine.ipynb"), "04_triton_softmax", "graded", tests=[
        TestReport("test_a", 3.0, 3.0, "test")], advice=[line])
    text = format_report([rep])
    assert "GPU advice (compiled for real GPUs; not graded):" in text
    assert line in " ".join(ln.strip() for ln in text.splitlines())


def test_launch_key_tells_negative_zero_and_nan_constexprs_apart():
    kernel = triton.jit(_copy.fn)
    args, _ = _args()
    key = lambda value: signature.launch_key(kernel, args, {"BLOCK": value})  # noqa: E731
    assert key(0.0) != key(-0.0)  # 0.0 == -0.0 in Python: the same key would reuse the other's pass
    assert key(float("nan")) == key(float("nan")) and key(1) != key(1.0) and key(64) == key(64)


if _INTERPRET_BEFORE is None:  # the end of the module: every kernel above is decorated
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = _INTERPRET_BEFORE

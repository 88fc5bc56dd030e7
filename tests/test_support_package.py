"""Unit tests of the support package: references, checks, checkers, launchers' validation, loaders."""

from __future__ import annotations

import time

import nbformat
import pytest
import torch

from attnlab import checks, sweep
from attnlab.launch import launch_flash_forward, launch_softmax
from attnlab.nbload import NotebookLoadError, load_notebook_module
from attnlab.reference import naive_attention, reference_gradients, validate_qkv
from attnlab.verify import check_flash_backward, check_flash_forward, check_online_softmax


def qkv(T_q=9, T_k=None, D=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    T_k = T_q if T_k is None else T_k
    return (torch.randn(2, 3, T_q, D, generator=g, dtype=dtype),
            torch.randn(2, 3, T_k, D, generator=g, dtype=dtype),
            torch.randn(2, 3, T_k, D, generator=g, dtype=dtype))


# ------------------------------------------------------------------------------------ reference
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T_q,T_k", [(9, 9), (5, 12), (12, 5)])
def test_naive_attention_matches_sdpa_top_left_causal(causal, T_q, T_k):
    q, k, v = qkv(T_q, T_k)
    o, lse = naive_attention(q, k, v, causal=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(o, ref, rtol=1e-12, atol=1e-12)
    s = q @ k.transpose(-1, -2) * 8 ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,lse_dtype", [(torch.float64, torch.float64), (torch.float32, torch.float32),
                                             (torch.bfloat16, torch.float32), (torch.float16, torch.float32)])
def test_naive_attention_dtypes(dtype, lse_dtype):
    o, lse = naive_attention(*qkv(dtype=dtype))
    assert o.dtype == dtype and lse.dtype == lse_dtype


def test_naive_attention_scale_argument():
    q, k, v = qkv()
    o1, _ = naive_attention(q, k, v, scale=0.3)
    o2, _ = naive_attention(q * 0.3 / 8 ** -0.5, k, v)
    torch.testing.assert_close(o1, o2)


@pytest.mark.parametrize("bad,match", [
    (lambda q, k, v: (q[0], k, v), "4 dims"),
    (lambda q, k, v: (q, k[..., :4], v[..., :4]), "head dim"),
    (lambda q, k, v: (q, k, v[:, :, :3]), "same shape"),
    (lambda q, k, v: (q, k, v[..., :4]), "same shape"),
    (lambda q, k, v: (q, k[:1], v[:1]), "batch and head"),
    (lambda q, k, v: (q.long(), k.long(), v.long()), "floating-point"),
    (lambda q, k, v: (q, k.float(), v), "one dtype"),
    (lambda q, k, v: (q.numpy(), k, v), "torch.Tensor"),
])
def test_bad_input_gets_a_clear_error(bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        naive_attention(*bad(*qkv()))


@pytest.mark.parametrize("causal", [False, True])
def test_reference_gradients_match_sdpa_autograd(causal):
    q, k, v = (t.requires_grad_(True) for t in qkv(7, 11))
    do = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(do)
    for got, t in zip(reference_gradients(q, k, v, do, causal), (q, k, v)):
        torch.testing.assert_close(got, t.grad)


# ------------------------------------------------------------------------------------ checks
def test_assert_close_message_names_case_and_index():
    expected = torch.arange(12, dtype=torch.float64).reshape(3, 4) + 1
    actual = expected.clone()
    actual[2, 1] += 5
    with pytest.raises(AssertionError, match=r"o \[T=3\].*index \(2, 1\).*got 15.*expected 10"):
        checks.assert_close(actual, expected, name="o", case=checks.Case(T=3))


def test_assert_close_rejects_nan_shape_and_non_tensors():
    e = torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(AssertionError, match="not finite"):
        checks.assert_close(checks.poisoned((2, 3), torch.float64), e, name="x")
    with pytest.raises(AssertionError, match="wrong shape"):
        checks.assert_close(torch.ones(3, 2, dtype=torch.float64), e, name="x")
    with pytest.raises(AssertionError, match="torch.Tensor"):
        checks.assert_close([1.0, 2.0], e, name="x")


def test_seeded_inputs_ignore_the_global_seed():
    torch.manual_seed(1)
    a = checks.randn(4, seed=7)
    torch.manual_seed(2)
    assert torch.equal(a, checks.randn(4, seed=7)) and not torch.equal(a, checks.randn(4, seed=8))
    assert (a != 0).all()


def test_time_limit_stops_an_endless_loop():
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="did not finish within 0.5 s"):
        with checks.time_limit(0.5, "spin"):
            while True:
                pass
    assert time.perf_counter() - start < 3


def test_time_limit_cannot_be_swallowed_by_except_exception():
    with pytest.raises(TimeoutError):
        with checks.time_limit(0.3, "sneaky"):
            while True:
                try:
                    time.sleep(0.05)
                except Exception:
                    pass


def test_assert_number():
    checks.assert_number(1.0e9, 1.0e9, name="x")
    for bad in (2.0e9, "1e9", None, float("nan")):
        with pytest.raises(AssertionError):
            checks.assert_number(bad, 1.0e9, name="x")


# ------------------------------------------------------------------------------------ checkers
def naive_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    return naive_attention(q, k, v, causal=causal, scale=scale)


def test_checkers_accept_a_correct_function():
    # one key tile per row (block_k >= T_k): the whole-row softmax is the method here
    check_flash_forward(naive_forward, T_q=13, T_k=21, causal=True, block_q=7, block_k=32, growing=True)
    # one block holds the whole row: the whole-row max and sum are the method here
    check_online_softmax(lambda x, b: (x.amax(-1), torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)),
                         block_size=50)

    def backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
        # one tile (block sizes >= T): the formulas on the whole P are the method here
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        p = torch.exp(s - lse[..., None])
        ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True)) * q.shape[-1] ** -0.5
        return ds @ k, ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ do
    check_flash_backward(backward, T_q=9, T_k=14, causal=True)


@pytest.mark.parametrize("wrong,match", [
    (lambda *a, **kw: naive_forward(*a, **kw)[::-1], "wrong shape"),
    (lambda *a, **kw: naive_forward(*a, **kw)[0], "must return a tuple"),
    (lambda q, k, v, **kw: (naive_forward(q, k, v, **kw)[0], naive_forward(q, k, v, **kw)[1] / 0.6931471805599453),
     "lse"),
    (lambda q, k, v, **kw: (naive_forward(q, k, v, **kw)[0], naive_forward(q, k, v, **kw)[1].half()), "too narrow|dtype"),
    (lambda q, k, v, causal=False, **kw: naive_forward(q, k, v, causal=False), "o "),
])
def test_forward_checker_rejects_wrong_results(wrong, match):
    with pytest.raises(AssertionError, match=match):
        check_flash_forward(wrong, T_q=12, causal=True)


def test_checker_reports_a_timeout_once_then_skips():
    def hang(*args, **kwargs):
        while True:
            pass
    from attnlab.checking import harness as verify  # where call_learner reads the limit

    old = verify.call_limit_s
    verify.call_limit_s = lambda: 0.3
    try:
        with pytest.raises(TimeoutError, match="did not finish"):
            check_flash_forward(hang, T_q=4)
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match="already timed out"):
            check_flash_forward(hang, T_q=4)
        assert time.perf_counter() - start < 0.2
    finally:
        verify.call_limit_s = old


# ------------------------------------------------------------------------------------ launchers
def _never_called(*args, **kwargs):
    raise AssertionError("the kernel must not be launched on invalid input")


@pytest.mark.parametrize("x,exc,match", [
    (torch.ones(2, 3, 4), ValueError, "2-D"),
    (torch.ones(2, 3, dtype=torch.int32), TypeError, "dtype"),
    (torch.ones(2, 3, dtype=torch.float64), TypeError, "dtype"),
    ([[1.0]], TypeError, "torch.Tensor"),
])
def test_softmax_launcher_validates(x, exc, match):
    with pytest.raises(exc, match=match):
        launch_softmax(_never_called, x)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(D=24), ValueError, "power of two"),
    (dict(D=8), ValueError, ">= 16"),
    (dict(block_m=48), ValueError, "block_m"),
    (dict(block_n=8), ValueError, "block_n"),
    (dict(T_k=12), ValueError, "self-attention"),
    (dict(dtype=torch.float64), TypeError, "float64"),
])
def test_flash_launcher_validates(kwargs, exc, match):
    D, T_k = kwargs.pop("D", 32), kwargs.pop("T_k", 16)
    dtype = kwargs.pop("dtype", torch.float32)
    q = torch.ones(1, 2, 16, D, dtype=dtype)
    k = torch.ones(1, 2, T_k, D, dtype=dtype)
    with pytest.raises(exc, match=match):
        launch_flash_forward(_never_called, q, k, k.clone(), **kwargs)


# ------------------------------------------------------------------------------------ loaders, sweep
def _notebook(tmp_path, cells):
    nb = nbformat.v4.new_notebook()
    for src, meta in cells:
        c = nbformat.v4.new_code_cell(src)
        if meta:
            c.metadata["nbgrader"] = meta
        nb.cells.append(c)
    path = tmp_path / "05_triton_flash.ipynb"
    nbformat.write(nb, path)
    return path


def test_load_notebook_module_takes_given_and_solution_cells_only(tmp_path):
    path = _notebook(tmp_path, [
        ("import math\n%matplotlib inline", {"grade_id": "setup", "locked": True}),
        ("def f(x):\n    return math.sqrt(x)", {"grade_id": "f", "solution": True}),
        ("raise RuntimeError('a test cell must not run')", {"grade_id": "t", "grade": True, "points": 1}),
        ("raise RuntimeError('an ungraded demo cell must not run')", None),
    ])
    mod = load_notebook_module(path, required=("f",))
    assert mod.f(16) == 4


def test_loading_another_notebook_does_not_repeat_the_mode_banner(tmp_path, capsys):
    # 06 and 07 load 05's cells, whose set-up calls init(): the banner was printed a second time
    from attnlab.core.device import init

    init()
    banner = capsys.readouterr().out.strip()
    assert banner.startswith(("No GPU in use", "GPU: ")), banner
    path = _notebook(tmp_path, [("from attnlab import init\nRUNTIME = init()", {"grade_id": "setup", "locked": True}),
                                ("def k():\n    return RUNTIME", {"grade_id": "k", "solution": True})])
    assert load_notebook_module(path, required=("k",)).k().device in ("cpu", "cuda")
    assert banner not in capsys.readouterr().out
    init()  # a notebook's own set-up cell still says it
    assert banner in capsys.readouterr().out


def test_loading_a_notebook_reads_its_json_without_importing_nbformat(tmp_path):
    """06, 07 and 08 load 05's cells in every graded kernel: importing nbformat there cost ~1 s of CPU."""
    import subprocess
    import sys

    path = _notebook(tmp_path, [("def f():\n    return 3", {"grade_id": "f", "solution": True})])
    code = ("import sys; from attnlab.nbload import load_notebook_module as load; "
            f"assert load({str(path)!r}, required=('f',)).f() == 3; assert 'nbformat' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_load_notebook_module_errors_are_clear(tmp_path):
    with pytest.raises(NotebookLoadError, match="not found"):
        load_notebook_module(tmp_path / "missing.ipynb")
    path = _notebook(tmp_path, [("raise NotImplementedError()", {"grade_id": "k", "solution": True})])
    with pytest.raises(NotebookLoadError, match="NotImplementedError"):
        load_notebook_module(path)
    (tmp_path / "bad.ipynb").write_text("{not json")
    with pytest.raises(NotebookLoadError, match="could not be read"):
        load_notebook_module(tmp_path / "bad.ipynb")


def test_sweep_records_oom_and_skips_larger_T(tmp_path):
    def oom_at_16(q, k, v, causal):
        if q.shape[2] >= 16:
            raise torch.OutOfMemoryError("fake")
        return q

    def broken(q, k, v, causal):
        raise ValueError("bad kernel")

    points = sweep.run_sweep({"ok": sweep.sdpa, "oom": oom_at_16, "broken": broken}, [8, 16, 32],
                             B=1, H=1, D=8, dtype=torch.float32, device="cpu", progress=False)
    status = {(p.impl, p.T): p.status for p in points}
    assert status[("ok", 32)] == "ok" and status[("oom", 8)] == "ok"
    assert status[("oom", 16)] == "oom" and status[("oom", 32)] == "skipped"
    assert status[("broken", 8)].startswith("error: ValueError")
    path = sweep.write_csv(points, tmp_path / "s.csv")
    back = sweep.read_csv(path)
    assert [(p.impl, p.T, p.status, p.causal) for p in back] == [(p.impl, p.T, p.status, p.causal) for p in points]
    sweep.plot_sweep(points, ceiling_tflops=100.0, path=tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_naive_unfused_matches_reference():
    q, k, v = qkv(10)
    torch.testing.assert_close(sweep.naive_unfused(q, k, v, True), naive_attention(q, k, v, causal=True)[0])


def test_force_cpu_mode(monkeypatch):
    from attnlab.core import device

    monkeypatch.setenv("ATTNLAB_DEVICE", "cpu")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    rt = device.init(verbose=False)
    assert rt.interpret and rt.device == "cpu"
    import os
    assert os.environ["TRITON_INTERPRET"] == "1"


# ------------------------------------------------------------------------------------ kernels must be kernels
def test_kernel_checkers_refuse_plain_python(monkeypatch):
    from attnlab.verify import check_flash_kernel, check_softmax_kernel

    class FakeKernel:  # indexing returns a launcher that computes the answer with torch
        def __getitem__(self, grid):
            return lambda y, x, *args, **kw: y.copy_(torch.softmax(x, -1))
    with pytest.raises(TypeError, match="must be a @triton.jit function"):
        check_softmax_kernel(FakeKernel(), n_rows=2, n_cols=8, device="cpu")
    with pytest.raises(TypeError, match="must be a @triton.jit function"):
        check_flash_kernel(FakeKernel(), T=16, device="cpu")


def test_flash_checker_rejects_a_kernel_that_writes_into_its_inputs():
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl

    from attnlab.verify import check_flash_kernel

    @triton.jit
    def zero_k_kernel(Q, K, V, O, LSE, stride_bh, stride_t, T, scale, CAUSAL: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        base = tl.program_id(1) * stride_bh
        ptrs = base + rows[:, None] * stride_t + d[None, :]
        ok = (rows < T)[:, None]
        tl.store(K + ptrs, tl.zeros([BLOCK_M, HEAD_DIM], tl.float32), mask=ok)
        tl.store(O + ptrs, tl.zeros([BLOCK_M, HEAD_DIM], tl.float32), mask=ok)
        tl.store(LSE + tl.program_id(1) * T + rows, tl.zeros([BLOCK_M], tl.float32), mask=rows < T)

    with pytest.raises(AssertionError, match="wrote into its input K"):
        check_flash_kernel(zero_k_kernel, T=16, D=16, device="cpu")


def test_interpreter_patches_the_language_once_per_launch(tmp_path):
    """Triton's interpreter re-patches triton.language at every @triton.jit call inside a kernel (tl.max,
    tl.sum...); with attnlab's change a launch patches each language module once, whatever the number of
    such calls, and computes the same. Fresh interpreter: the count is taken before and after the change."""
    import subprocess
    import sys
    import textwrap

    (tmp_path / "rowmax.py").write_text(textwrap.dedent('''
        import triton
        import triton.language as tl


        @triton.jit
        def rowmax_kernel(X, Y, N_TILES: tl.constexpr, BLOCK: tl.constexpr):
            best = tl.full((), float("-inf"), tl.float32)
            total = tl.zeros((), tl.float32)
            for t in range(N_TILES):
                x = tl.load(X + t * BLOCK + tl.arange(0, BLOCK))
                best = tl.maximum(best, tl.max(x, 0))
                total += tl.sum(x, 0)
            tl.store(Y, best)
            tl.store(Y + 1, total)


        @triton.jit
        def broken_kernel(X):
            tl.store(X, tl.max(tl.load(X + tl.arange(0, 3)), 0))  # arange needs a power of 2: raises
    '''))
    script = textwrap.dedent(f'''
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, {str(tmp_path)!r})
        import torch
        from triton.runtime import interpreter as ti
        from rowmax import broken_kernel, rowmax_kernel
        calls = [0]
        real = ti._patch_builtin
        def counted(*a, **k):
            calls[0] += 1
            return real(*a, **k)
        ti._patch_builtin = counted

        def patches(kernel, tiles):
            x = torch.randn(tiles * 16)
            y = torch.empty(2)
            calls[0] = 0
            kernel[(1,)](x, y, N_TILES=tiles, BLOCK=16)
            assert torch.allclose(y, torch.stack([x.max(), x.sum()]), atol=1e-5), (y, x.max(), x.sum())
            return calls[0]

        print(patches(rowmax_kernel, 1), patches(rowmax_kernel, 6))
        from attnlab.core import device
        kernel = device.runnable_kernel(rowmax_kernel)
        counts = [patches(kernel, 1), patches(kernel, 6)]
        try:  # a launch that raises leaves no record of patched modules behind
            device.runnable_kernel(broken_kernel)[(1,)](torch.zeros(4))
            raise SystemExit("broken_kernel ran")
        except Exception as exc:
            assert "SystemExit" not in repr(exc)
        assert device._PATCHED_IN_LAUNCH is None
        print(*counts, patches(kernel, 6))
    ''')
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = (tuple(map(int, line.split())) for line in proc.stdout.split("\n")[-3:-1])
    assert before[1] > before[0], before  # Triton alone: more nested calls, more patching
    assert after[0] == after[1] == after[2] < before[1], after


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda"), torch.device("cuda", 0)])
def test_flash_check_widens_growing_float32_tolerance_on_any_cuda_device(device):
    """The tf32 allowance for growing scores depends on the device's type, not on the exact string "cuda"."""
    from attnlab.verify import flash_tolerance
    assert flash_tolerance(torch.float32, device, growing=True) == 5e-2
    assert flash_tolerance(torch.float32, "cpu", growing=True) == 1e-5


def test_tolerance_of_an_unknown_dtype_names_it_and_the_supported_ones():
    from attnlab.checks import tolerance
    with pytest.raises(TypeError, match=r"int32.*float32.*float64.*float16.*bfloat16"):
        tolerance(torch.int32)


def test_a_cell_calling_sys_exit_does_not_end_the_loader_and_is_named(tmp_path):
    path = _notebook(tmp_path, [("import sys\nX = 1", {"grade_id": "setup", "locked": True}),
                                ("def f():\n    return 2\n\nsys.exit(3)", {"grade_id": "f", "solution": True}),
                                ("def g():\n    return 3", {"grade_id": "g", "solution": True})])
    with pytest.raises(NotebookLoadError, match=r"05_triton_flash\.ipynb failed in cell 'f': SystemExit: 3"):
        load_notebook_module(path)
    path = _notebook(tmp_path, [("X = 1", {"grade_id": "setup", "locked": True}),
                                ("def g():\n    return 3\nraise SystemExit('stop')", {"grade_id": "g", "solution": True})])
    with pytest.raises(NotebookLoadError, match=r"in cell 'g': SystemExit: stop"):
        load_notebook_module(path)

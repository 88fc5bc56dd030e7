"""Notebooks 04 and 05 grade the method, and the Triton launchers never compute garbage quietly.

- Load accounting under Triton's interpreter (issue 10): each shortcut of ``samples/mistakes/04_*``
  and ``05_*`` fails with a message that names the rule; the reference and the correct variants
  pass the new wide and value-regime cases. (That each mistake loses exactly its test cells is
  tests/test_mistakes.py's job.)
- Issue 11: bfloat16 under the interpreter is refused with a reason (case01); every public
  function that takes tensors handles any strides or refuses them (case08); a learner's
  ``import triton`` above the set-up cell costs nothing (case19).

Kernels come from ``notebooks/*.py`` (the single source), with a mistake's edits applied.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import jupytext
import pytest
import torch

from attnlab.core import device
from attnlab import launch
from attnlab.grading.samples import apply_mistake, load_mistakes, strip_markers
from attnlab.checks import assert_close
from attnlab.reference import naive_attention, reference_gradients
from attnlab.verify import check_flash_kernel, check_softmax_kernel

from .conftest import ROOT, Course

RT = device.init(verbose=False)
pytestmark = pytest.mark.skipif(not RT.interpret, reason="load accounting runs under Triton's interpreter")

MISTAKES = {m.id: m for m in load_mistakes(Course(ROOT))[0]}
_CELLS = {"04_triton_softmax": ("setup", "_softmax_kernel", "triton_softmax"),
          "05_triton_flash": ("setup", "_flash_fwd_kernel", "triton_flash_attention"),
          "07_triton_backward": ("setup", "_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"),
          "08_flash_decoding": ("setup", "_decode_partial_kernel", "_decode_merge_kernel")}
_LOADED: dict[str, object] = {}


def notebook_code(notebook: str, mistake_id: str | None = None) -> str:
    """The set-up, solution and launcher cells of ``notebooks/<notebook>.py``, as one module's source."""
    nb = jupytext.read(ROOT / "notebooks" / f"{notebook}.py")
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            cell.source = strip_markers(cell.source)
    if mistake_id:
        nb = apply_mistake(nb, MISTAKES[mistake_id])
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    return "\n\n".join(by_id[g] for g in _CELLS[notebook])


_FILES = tempfile.TemporaryDirectory(prefix="attnlab-test-")  # removed when the test session ends


def load(notebook: str, mistake_id: str | None = None, tmp_dir: Path | None = None):
    """Import those cells as a module (``@triton.jit`` reads a kernel's source from its file)."""
    key = f"{notebook}:{mistake_id}"
    if key not in _LOADED:
        folder = tmp_dir or Path(_FILES.name)
        path = folder / f"nb_{notebook[:2]}_{(mistake_id or 'reference').replace('-', '_')}.py"
        path.write_text(notebook_code(notebook, mistake_id))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _LOADED[key] = mod
    return _LOADED[key]


def softmax_kernel(mistake_id=None):
    return load("04_triton_softmax", mistake_id)._softmax_kernel


def flash_kernel(mistake_id=None):
    return load("05_triton_flash", mistake_id)._flash_fwd_kernel


# ------------------------------------------------------------------------- shortcuts name the rule
SHORTCUTS = [
    ("04-one-program-all-rows", dict(n_rows=4, n_cols=37), AssertionError,
     r"program 0 (wrote|read) row.*one program per row"),
    ("04-three-passes", dict(n_rows=3, n_cols=37), AssertionError,
     r"program 0 read column 0 of its row 3 times\. Notebook 04 asks for one read of the row"),
    ("04-fixed-block-2048", dict(n_rows=3, n_cols=5000), AssertionError,
     r"program 0 read 2048 of the 5000 columns.*BLOCK_SIZE = next_power_of_2\(n_cols\) = 8192"),
    ("04-unmasked-load-then-where", dict(n_rows=3, n_cols=37), AssertionError,
     r"program 0 read 27 element\(s\) past the end of its row.*Mask the load with cols < n_cols"),
    ("04-unmasked-load-then-where", dict(n_rows=3, n_cols=37, padded=True), AssertionError,
     r"past the end of its row"),
    ("04-kernel-interface-torch", dict(n_rows=3, n_cols=37), TypeError,
     r"must be a @triton.jit function \(exactly triton.runtime.jit.JITFunction\), got _TorchSoftmax"),
    ("05-whole-kv-row", dict(T=37), AssertionError,
     r"notebook 05 asks for key tiles of at most BLOCK_N = 16 keys: program \(0, 0\) loaded 37 keys of K"),
    ("05-two-pass", dict(T=37, causal=True), AssertionError,
     r"notebook 05 asks for one pass over the keys: program \(0, 0\) loaded key 0 of K 2 times"),
    ("05-causal-no-skip", dict(T=37, causal=True), AssertionError,
     r"notebook 05 asks to skip the key tiles.*program \(0, 0\) \(query rows 0\.\.15\) loaded keys 16\.\.31"),
    ("05-unmasked-kv-load", dict(T=37), AssertionError,
     r"program \(0, 0\) loaded K rows 37\.\.47, past the last key \(T = 37\)"),
    ("05-max-init-zero", dict(T=37, offset=-1000.0), AssertionError, r"not finite"),
]


@pytest.mark.parametrize("mistake_id,case,exc,message", SHORTCUTS, ids=[f"{s[0]}-{i}" for i, s in enumerate(SHORTCUTS)])
def test_shortcut_fails_with_the_rule_named(mistake_id, case, exc, message):
    if mistake_id.startswith("04"):
        run = lambda: check_softmax_kernel(softmax_kernel(mistake_id), **case)  # noqa: E731
    else:
        run = lambda: check_flash_kernel(flash_kernel(mistake_id), **case)  # noqa: E731
    with pytest.raises(exc, match=message):
        run()


def test_shortcuts_give_right_numbers_without_the_accounting(monkeypatch):
    """The shortcuts are method failures, not wrong numbers: with the accounting switched off they
    pass the visible cases, so only the load accounting can take their points."""
    monkeypatch.setattr("attnlab.verify.check_softmax_reads", lambda *a, **k: None)
    monkeypatch.setattr("attnlab.verify.check_flash_reads", lambda *a, **k: None)
    monkeypatch.setattr("attnlab.verify.check_work", lambda *a, **k: None)
    for mid in ("04-one-program-all-rows", "04-three-passes", "04-unmasked-load-then-where"):
        check_softmax_kernel(softmax_kernel(mid), n_rows=4, n_cols=37)
    check_softmax_kernel(softmax_kernel("04-fixed-block-2048"), n_rows=3, n_cols=1500)
    for mid in ("05-whole-kv-row", "05-two-pass", "05-causal-no-skip"):
        check_flash_kernel(flash_kernel(mid), T=37, causal=True)


# ---------------------------------------------------------------------- honest kernels keep marks
SOFTMAX_CASES = [dict(n_rows=3, n_cols=5000), dict(n_rows=4, n_cols=300, offset=-30.0),
                 dict(n_rows=3, n_cols=1000, offset=-1000.0, peak="last"), dict(n_rows=3, n_cols=1, padded=True),
                 *(dict(n_rows=3, n_cols=300, peak=p) for p in ("first", "middle", "last"))]
FLASH_CASES = [dict(T=203, H=1, D=16, causal=True, block_m=64, block_n=32),
               dict(T=83, H=1, D=16, causal=True, block_m=64, block_n=16),
               dict(T=83, H=1, D=16, causal=False, block_m=16, block_n=64),
               dict(T=37, H=1, D=16, causal=True, offset=-1000.0),
               *(dict(T=50, H=1, D=16, causal=True, block_m=32, block_n=16, peak=p) for p in ("first", "middle", "last"))]


@pytest.mark.parametrize("mistake_id", [None, "04-ok-exp2", "04-ok-masked-load-then-where"])
def test_correct_softmax_kernels_pass_the_new_cases(mistake_id):
    for case in SOFTMAX_CASES:
        check_softmax_kernel(softmax_kernel(mistake_id), **case)


@pytest.mark.parametrize("mistake_id", [None, "05-ok-single-phase-exp", "05-ok-reversed-tiles"])
def test_correct_flash_kernels_pass_the_new_cases(mistake_id):
    for case in FLASH_CASES:
        check_flash_kernel(flash_kernel(mistake_id), **case)


def test_the_new_flash_cases_are_sharp():
    """Each regime separates a correct kernel from a wrong one: a reversed tile order without the
    -inf guard meets fully masked tiles first (NaN), and the running max started at 0 fails the
    rows near -1000."""
    with pytest.raises(AssertionError, match="not finite"):
        check_flash_kernel(flash_kernel("05-max-init-zero"), T=37, D=16, causal=True, offset=-1000.0)
    code = notebook_code("05_triton_flash", "05-ok-reversed-tiles")
    assert "m_use = tl.where(m_new" in code


# ------------------------------------------------------------------------------- the accounting
def test_record_leaves_the_interpreter_as_it_was():
    from triton.runtime import interpreter

    wrapped = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    assert not set(wrapped) & set(vars(interpreter.interpreter_builder))
    with pytest.raises(AssertionError):
        check_softmax_kernel(softmax_kernel("04-three-passes"), n_rows=2, n_cols=8)
    assert not set(wrapped) & set(vars(interpreter.interpreter_builder))


def test_a_wild_load_is_switched_off_and_reported(tmp_path):
    """An address outside every tensor of the check is never read (no crash of the grader's
    process), and the message says what happened."""
    path = tmp_path / "wild.py"
    path.write_text(textwrap.dedent('''
        import triton
        import triton.language as tl

        @triton.jit
        def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                            BLOCK_SIZE: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK_SIZE)
            far = tl.load(input_ptr + (1 << 40) + cols)  # far outside any tensor
            x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
            num = tl.exp(x - tl.max(x, axis=0)) + far * 0
            tl.store(output_ptr + row * output_row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)
    '''))
    spec = importlib.util.spec_from_file_location("wild", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(AssertionError, match=r"program 0 read 8 element\(s\) outside the input and output rows"):
        check_softmax_kernel(mod._softmax_kernel, n_rows=2, n_cols=8)


def test_a_kernel_that_mentions_the_interpreter_internals_is_flagged_for_review(tmp_path, capsys):
    """Under the interpreter a kernel body is Python and could touch memory behind the accounting's
    back; the check cannot rule that out, so it says so (once per kernel) instead of grading silently."""
    code = notebook_code("04_triton_softmax").replace(
        "    row = tl.program_id(0).to(tl.int64)", "    # interpreter_builder.create_masked_load\n    row = tl.program_id(0).to(tl.int64)")
    path = tmp_path / "flagged.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("flagged", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    capsys.readouterr()
    for _ in range(2):
        check_softmax_kernel(mod._softmax_kernel, n_rows=2, n_cols=8)
    out = capsys.readouterr().out
    assert out.count("[grader] needs review: _softmax_kernel refers to Triton's interpreter internals "
                     "(create_masked_load, interpreter_builder)") == 1, out
    check_softmax_kernel(softmax_kernel(), n_rows=2, n_cols=8)
    assert "needs review" not in capsys.readouterr().out


def test_atomic_stores_are_accounted_too(tmp_path):
    code = notebook_code("04_triton_softmax").replace(
        "tl.store(output_ptr + row * output_row_stride + cols, y.to(output_ptr.dtype.element_ty), mask=in_row)",
        "tl.atomic_add(output_ptr + ((row + 1) % tl.num_programs(0)) * output_row_stride + cols, y, mask=in_row)")
    path = tmp_path / "atomic.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("atomic", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(AssertionError, match="program 0 wrote row 1 of the output"):
        check_softmax_kernel(mod._softmax_kernel, n_rows=3, n_cols=37)


def test_without_an_instrumentable_interpreter_the_method_is_flagged_not_passed_silently(monkeypatch, capsys):
    monkeypatch.setattr("attnlab.checking.harness.loads_available", lambda: False)
    check_softmax_kernel(softmax_kernel("04-three-passes"), n_rows=3, n_cols=37)
    assert "[grader] needs review: this Triton's interpreter cannot be instrumented" in capsys.readouterr().out


def test_ledger_counts_each_lane_once_per_access():
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, interpreter_builder

    from attnlab.checking import loads

    buf = torch.zeros(16)
    with loads.record({"x": buf}) as ledger:
        ptrs = TensorHandle(np.array([buf.data_ptr() + 4 * i for i in (0, 1, 5)], dtype=np.uint64),
                            tl.pointer_type(tl.float32))
        mask = TensorHandle(np.array([True, False, True]), tl.int1)
        interpreter_builder.set_grid_idx(0, 0, 0)
        interpreter_builder.create_masked_load(ptrs, mask, None, None, False)
    assert [(a.tensor, a.kind, a.index.tolist()) for a in ledger.accesses] == [("x", "load", [0, 5])]


# ----------------------------------------------------------------------------- kernel type
def test_only_exactly_a_jit_function_is_a_kernel():
    from triton.runtime import KernelInterface
    from triton.runtime.interpreter import InterpretedFunction

    class Interface(KernelInterface):
        def run(self, y, x, *args, grid, warmup, **kwargs):
            y.copy_(torch.softmax(x, -1))

    real = softmax_kernel()
    subclass = type("Sub", (InterpretedFunction,), {})(real.fn)
    for fake in (Interface(), subclass, real.fn, lambda *a: None):
        with pytest.raises(TypeError, match="must be a @triton.jit function"):
            check_softmax_kernel(fake, n_rows=2, n_cols=8)
    check_softmax_kernel(real, n_rows=2, n_cols=8)


# ------------------------------------------------------------------- issue 11.1: bf16 (case01)
def test_bfloat16_under_the_interpreter_is_refused_with_a_reason():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 32, 16, generator=g) for _ in range(3))
    why = r"bfloat16 does not work under Triton's CPU interpreter.*Use float32 \(or float16\) on the CPU"
    with pytest.raises(TypeError, match=why):
        launch.launch_flash_forward(flash_kernel(), *(t.bfloat16() for t in (q, k, v)), block_m=16, block_n=16)
    with pytest.raises(TypeError, match=why):
        launch.launch_softmax(softmax_kernel(), q[0, 0].bfloat16())
    with pytest.raises(TypeError, match=why):
        check_flash_kernel(flash_kernel(), T=32, D=16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=why):
        check_softmax_kernel(softmax_kernel(), n_rows=3, n_cols=37, dtype=torch.bfloat16)
    # what is accepted is right: float16 and float32 through the same launcher
    o_ref, lse_ref = naive_attention(q.double(), k.double(), v.double())
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 5e-3)):
        o, lse = launch.launch_flash_forward(flash_kernel(), q.to(dtype), k.to(dtype), v.to(dtype),
                                             block_m=16, block_n=16)
        assert (o.double() - o_ref).norm() / o_ref.norm() < tol
        assert (lse.double() - lse_ref).norm() / lse_ref.norm() < tol
    check_flash_kernel(flash_kernel(), T=37, D=16, causal=True, dtype=torch.float16)
    check_softmax_kernel(softmax_kernel(), n_rows=3, n_cols=37, dtype=torch.float16)


def test_launchers_refuse_tensors_without_memory():
    x = torch.empty(3, 37, device="meta")
    with pytest.raises(ValueError, match="no memory Triton's interpreter can read"):
        launch.run_softmax_kernel(softmax_kernel(), x, torch.empty_like(x))


def test_checks_refuse_a_cuda_device_under_the_interpreter():
    with pytest.raises(ValueError, match="under Triton's interpreter the kernel checks run on the CPU"):
        check_softmax_kernel(softmax_kernel(), n_rows=2, n_cols=8, device="cuda")


# ---------------------------------------------------------------- issue 11.2: strides (case08)
def _views():
    g = torch.Generator().manual_seed(0)
    transposed = torch.randn(37, 6, generator=g).t()         # (6, 37), strides (1, 6)
    sliced = torch.randn(6, 80, generator=g)[:, 5:42]        # (6, 37), strides (80, 1)
    expanded = torch.randn(1, 37, generator=g).expand(6, 37)  # (6, 37), strides (0, 1)
    return {"transposed": transposed, "sliced": sliced, "expanded": expanded}


@pytest.mark.parametrize("name", ["transposed", "sliced", "expanded"])
def test_softmax_launchers_take_any_strides_or_refuse_them(name):
    x = _views()[name]
    ref = torch.softmax(x.double(), -1)
    y = launch.launch_softmax(softmax_kernel(), x)
    assert (y.double() - ref).abs().max() < 1e-6
    out = torch.full((6, 37), float("nan"))
    if x.stride(1) == 1:  # rows anywhere, columns adjacent: what the kernel reads
        launch.run_softmax_kernel(softmax_kernel(), x, out)
        assert (out.double() - ref).abs().max() < 1e-6
    else:
        with pytest.raises(ValueError, match=r"x has strides \(1, 6\).*column stride 1"):
            launch.run_softmax_kernel(softmax_kernel(), x, out)


def test_run_softmax_kernel_refuses_outputs_it_would_garble():
    x = torch.randn(6, 37)
    with pytest.raises(ValueError, match=r"y has strides"):
        launch.run_softmax_kernel(softmax_kernel(), x, torch.empty(37, 6).t())
    with pytest.raises(ValueError, match="rows of y overlap"):
        launch.run_softmax_kernel(softmax_kernel(), x, torch.empty(1, 37).expand(6, 37))
    with pytest.raises(ValueError, match="one shape and dtype"):
        launch.run_softmax_kernel(softmax_kernel(), x, torch.empty(6, 36))


def test_flash_launchers_take_any_strides_or_refuse_them():
    g = torch.Generator().manual_seed(0)
    B, T, H, D = 1, 32, 2, 16
    # (B, T, H, D) in memory, viewed as (B, H, T, D), as most models hold attention inputs
    q, k, v = (torch.randn(B, T, H, D, generator=g).transpose(1, 2) for _ in range(3))
    o_ref, lse_ref = naive_attention(q.double(), k.double(), v.double())
    o, lse = launch.launch_flash_forward(flash_kernel(), q, k, v, block_m=16, block_n=16)
    assert (o.double() - o_ref).abs().max() < 1e-5
    qc = q.contiguous()
    o2, l2 = torch.empty_like(qc), torch.empty(B, H, T)
    with pytest.raises(ValueError, match=r"run_flash_kernel: k is not contiguous \(strides"):
        launch.run_flash_kernel(flash_kernel(), qc, k, v, o2, l2, causal=False, block_m=16, block_n=16)
    with pytest.raises(ValueError, match=r"o is not contiguous"):
        launch.run_flash_kernel(flash_kernel(), qc, qc, qc, torch.empty(B, T, H, D).transpose(1, 2), l2,
                                causal=False, block_m=16, block_n=16)
    with pytest.raises(ValueError, match=r"lse must be \(1, 2, 32\) float32"):
        launch.run_flash_kernel(flash_kernel(), qc, qc, qc, o2, torch.empty(B, H, T, dtype=torch.float64),
                                causal=False, block_m=16, block_n=16)


def test_run_flash_kernel_does_not_trust_the_stride_of_a_size_one_dim():
    """(B, 1, T, D) made by a transpose is contiguous to torch, yet its stride(1) is D, not T*D."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 32, 1, 16, generator=g).transpose(1, 2) for _ in range(3))
    assert q.is_contiguous() and q.stride(1) != 32 * 16
    o, lse = torch.empty_like(q), torch.empty(2, 1, 32)
    launch.run_flash_kernel(flash_kernel(), q, k, v, o, lse, causal=True, block_m=16, block_n=16)
    o_ref, lse_ref = naive_attention(q.double(), k.double(), v.double(), causal=True)
    assert (o.double() - o_ref).abs().max() < 1e-5 and (lse.double() - lse_ref).abs().max() < 1e-5


def test_reference_functions_take_any_strides():
    from attnlab import sweep

    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(2, 9, 3, 8, generator=g, dtype=torch.float64).transpose(1, 2) for _ in range(4))
    dense = [t.contiguous() for t in (q, k, v, do)]
    for causal in (False, True):
        for got, want in zip(naive_attention(q, k, v, causal=causal), naive_attention(*dense[:3], causal=causal)):
            torch.testing.assert_close(got, want)
        for got, want in zip(reference_gradients(q, k, v, do, causal), reference_gradients(*dense, causal)):
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(sweep.naive_unfused(q, k, v, causal), sweep.naive_unfused(*dense[:3], causal))
        torch.testing.assert_close(sweep.sdpa(q, k, v, causal), sweep.sdpa(*dense[:3], causal))
    assert_close(q, dense[0], name="q")  # the checks' comparison, on a strided view


# ------------------------------------------------------------- issue 11.3: import order (case19)
def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "learner.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    env["ATTNLAB_DEVICE"] = "cpu"
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_importing_triton_before_the_setup_cell_costs_nothing(tmp_path):
    """The learner's usual imports come first, then the notebook's set-up, kernel and launcher
    cells, then the tests: the reference passes them, including causal and ragged cases."""
    (tmp_path / "nb05.py").write_text(notebook_code("05_triton_flash"))
    (tmp_path / "nb04.py").write_text(notebook_code("04_triton_softmax"))
    p = _python('''
        import torch, triton  # my usual imports
        import triton.language as tl
        import nb05, nb04
        from attnlab.verify import check_flash_kernel, check_softmax_kernel
        for causal in (False, True):
            check_flash_kernel(nb05._flash_fwd_kernel, T=37, causal=causal)
        check_softmax_kernel(nb04._softmax_kernel, n_rows=3, n_cols=300)
        print("all passed")
    ''', tmp_path)
    assert p.returncode == 0 and "all passed" in p.stdout, p.stdout + p.stderr
    assert "WARNING" not in p.stdout


def test_a_kernel_defined_before_the_setup_cell_still_runs(tmp_path):
    """Cells run out of order: a kernel (and its @triton.jit helper) decorated while Triton was
    still in GPU mode is converted when it is launched under the interpreter."""
    (tmp_path / "early.py").write_text(textwrap.dedent('''
        import triton
        import triton.language as tl

        @triton.jit
        def _scaled(x, c):
            return x * c

        @triton.jit
        def _softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                            BLOCK_SIZE: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK_SIZE)
            x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
            num = tl.exp(_scaled(x - tl.max(x, axis=0), 1.0))
            tl.store(output_ptr + row * output_row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)
    '''))
    p = _python('''
        import early  # defined before the set-up cell: compiled for a GPU
        from attnlab import init
        init()
        from attnlab.verify import check_softmax_kernel
        check_softmax_kernel(early._softmax_kernel, n_rows=3, n_cols=37)
        print("passed")
    ''', tmp_path)
    assert p.returncode == 0 and "passed" in p.stdout, p.stdout + p.stderr


def test_when_the_interpreter_cannot_be_switched_on_every_check_says_so(tmp_path):
    (tmp_path / "nb04.py").write_text(notebook_code("04_triton_softmax"))
    p = _python('''
        import triton, triton.language as tl
        from attnlab.core import device
        device._switch_triton_library = lambda: 0  # as if this Triton could not be converted
        import nb04  # its set-up cell calls init()
        from attnlab.verify import check_softmax_kernel
        try:
            check_softmax_kernel(nb04._softmax_kernel, n_rows=3, n_cols=37)
        except RuntimeError as exc:
            print("CHECK:", exc)
    ''', tmp_path)
    out = p.stdout
    assert "WARNING: Triton kernels cannot run in this session" in out, out + p.stderr
    assert "CHECK: Triton's interpreter is not active" in out
    assert "Restart the kernel" in out and "above the set-up cell" in out

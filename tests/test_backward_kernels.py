"""Notebook 07's support code in-process: the backward launcher's input errors, the race detector
of the dK/dV check, the assignment a notebook belongs to (no nbgrader here, so these are fast)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from attnlab import init, launch_backward
from attnlab.grading.course import ASSIGNMENT, BEYOND, Course, assignment_of
from attnlab.grading.samples import load_mistakes
from attnlab.reference import naive_attention

from .conftest import ROOT

init()


def _qkv(T=16, D=16, dtype=torch.float32):
    q, k, v, o, do = (torch.randn(1, 2, T, D, dtype=dtype) for _ in range(5))
    return q, k, v, o, torch.zeros(1, 2, T), do


@pytest.mark.parametrize("change, message", [
    (lambda a: {**a, "lse": a["lse"].double()}, "lse must be (B, H, T)"),
    (lambda a: {**a, "lse": a["lse"][..., :-1]}, "lse must be (B, H, T)"),
    (lambda a: {**a, "do": a["do"][:, :, :-1]}, "do must be like q"),
    (lambda a: {**a, "o": a["o"].half()}, "o must be like q"),
    (lambda a: {**a, "block_m": 24}, "block_m=24 must be a power of two"),
    (lambda a: {**a, "block_n": 8}, "block_n=8 must be a power of two >= 16"),
])
def test_backward_launcher_names_what_is_wrong(change, message):
    q, k, v, o, lse, do = _qkv()
    args = change(dict(q=q, k=k, v=v, o=o, lse=lse, do=do, block_m=16, block_n=16))
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        launch_backward.validate_backward(**args)


def test_backward_launcher_rejects_odd_head_dim_and_non_kernels():
    q, k, v, o, lse, do = _qkv(D=24)
    with pytest.raises(ValueError, match="head dim D=24"):
        launch_backward.validate_backward(q, k, v, o, lse, do, 16, 16)
    with pytest.raises(TypeError, match="_bwd_dkdv_kernel must be a @triton.jit function"):
        launch_backward.launch_flash_backward((_jit_noop(), print, _jit_noop()), *_qkv())


def _jit_noop():
    import triton

    @triton.jit
    def noop(X):
        pass

    return noop


def _module(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n" + text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_race_detector_follows_dq_acc_into_helpers(tmp_path):
    """The racy sample stores to DQ_ACC inside a helper; the atomic one and the reference do not."""
    from attnlab.verify_backward import stores_through_argument

    mistakes = {m.id: m for m in load_mistakes(Course(ROOT))[0]}
    racy = _module(tmp_path, "racy07", mistakes["07-dq-atomics-race"].edits[0][1])
    atomic = _module(tmp_path, "atomic07", mistakes["07-ok-dq-by-atomics"].edits[0][1])
    reference = _module(tmp_path, "ref07", mistakes["07-ok-dq-by-atomics"].edits[0][0])
    assert stores_through_argument(racy._bwd_dkdv_kernel, 8)
    assert not stores_through_argument(atomic._bwd_dkdv_kernel, 8)
    assert not stores_through_argument(reference._bwd_dkdv_kernel, 8)
    # the DK argument (6) is stored through in all three: the detector sees stores via derived names
    assert stores_through_argument(reference._bwd_dkdv_kernel, 6)


def test_notebooks_belong_to_their_assignment():
    assert assignment_of("06_scaling_sweep") == ASSIGNMENT
    assert assignment_of("07_triton_backward") == BEYOND
    assert assignment_of("09_tuning_and_fp8") == BEYOND
    assert assignment_of("99_triton_probe") == ASSIGNMENT  # the test suite's own probe notebook
    with pytest.raises(ValueError):
        assignment_of("seven")


def test_selfcheck_grades_a_second_assignment_notebook_beside_a_first(tmp_path):
    """One selfcheck run over 01 (first assignment) and a 07 with the dQ scale missing (second):
    each is graded in its own assignment, and 07's report names the tests its bug fails."""
    import nbformat

    from attnlab.grading.samples import apply_mistake, reference_notebook
    from attnlab.tools.selfcheck import selfcheck

    course = Course(ROOT)
    mistake = {m.id: m for m in load_mistakes(course)[0]}["07-dq-scale-missing"]
    nbformat.write(apply_mistake(reference_notebook(course, "07_triton_backward"), mistake),
                   tmp_path / "Copy of 07_triton_backward.ipynb")
    nbformat.write(reference_notebook(course, "01_online_softmax"), tmp_path / "01_online_softmax.ipynb")
    reports = selfcheck([tmp_path / "01_online_softmax.ipynb", tmp_path / "Copy of 07_triton_backward.ipynb"],
                        progress=None)
    by_name = {r.name: r for r in reports}
    first = {t.grade_id: t for t in by_name["01_online_softmax"].tests if t.kind == "test"}
    assert all(t.passed for t in first.values()), first
    tests = {t.grade_id: t for t in by_name["07_triton_backward"].tests if t.kind == "test"}
    assert {g for g, t in tests.items() if not t.passed} == set(mistake.fails)
    assert "dq" in tests["test_flash_backward_matches_reference"].error


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_forward_gives_o_and_the_float32_lse_of_naive_attention(dtype, tol, causal, monkeypatch):
    """07's given forward: o in q's dtype and the natural-log LSE, float32 (B, H, T), contiguous (what the
    backward launcher reads at bh * T); half precision through PyTorch's flash kernel, not the reference."""
    if dtype != torch.float32:
        monkeypatch.setattr(launch_backward, "naive_attention", lambda *a, **k: pytest.fail("not PyTorch's kernel"))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 37, 16, generator=g).to(dtype) for _ in range(3))
    for scale in (None, 0.3):
        o, lse = launch_backward.reference_forward(q, k, v, causal=causal, scale=scale)
        ref_o, ref_lse = naive_attention(q.double(), k.double(), v.double(), causal=causal, scale=scale)
        assert o.dtype == dtype and o.shape == q.shape and o.is_contiguous()
        assert lse.dtype == torch.float32 and lse.shape == (2, 3, 37) and lse.is_contiguous()
        torch.testing.assert_close(o.double(), ref_o, atol=tol, rtol=0)
        torch.testing.assert_close(lse.double(), ref_lse, atol=tol / 10, rtol=0)


def test_reference_forward_names_bad_input():
    q = torch.randn(1, 2, 16, 16)
    with pytest.raises(ValueError, match="self-attention only"):
        launch_backward.reference_forward(q, q[:, :, :8], q[:, :, :8])
    with pytest.raises(TypeError):
        launch_backward.reference_forward(q.int(), q.int(), q.int())


def test_load_earlier_kernel_finds_the_first_assignment_or_says_why(tmp_path, monkeypatch, capsys):
    import nbformat

    from attnlab.nbload import load_earlier_kernel

    beyond, first = tmp_path / "attention_kernels_beyond", tmp_path / "attention_kernels"
    beyond.mkdir(), first.mkdir()
    monkeypatch.chdir(beyond)
    assert load_earlier_kernel("05_triton_flash.ipynb", "_flash_fwd_kernel") is None
    assert "05_triton_flash.ipynb is not in" in capsys.readouterr().out
    nb = nbformat.v4.new_notebook()
    for gid, src in (("setup", "X = 2"), ("_flash_fwd_kernel", "def _flash_fwd_kernel():\n    return X"),
                     ("test_x", "raise AssertionError")):
        nb.cells.append(nbformat.v4.new_code_cell(src, metadata={"nbgrader": {"grade_id": gid, "grade": gid == "test_x"}}))
    nbformat.write(nb, first / "05_triton_flash.ipynb")
    assert load_earlier_kernel("05_triton_flash.ipynb", "_flash_fwd_kernel")() == 2
    nb.cells[1].source = "raise RuntimeError('broken')"
    nbformat.write(nb, beyond / "05_triton_flash.ipynb")  # the folder of the notebook comes first
    assert load_earlier_kernel("05_triton_flash.ipynb", "_flash_fwd_kernel") is None
    assert "could not be loaded" in capsys.readouterr().out


def test_recorded_plots_ship_with_the_package_and_show(capsys, monkeypatch):
    """07 and 08 show their H200 plots from package data (no raw GitHub address: Colab has no notes/)."""
    import IPython.display

    from attnlab import bench

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    for name in ("backward_h200.png", "decode_h200.png"):
        bench.show_recorded_plot(name, "a plot")
        assert shown.pop().data[:8] == b"\x89PNG\r\n\x1a\n", name
    bench.show_recorded_plot("missing.png", "a plot")
    assert not shown and "No recorded measurement missing.png" in capsys.readouterr().out
    text = (ROOT / "notebooks" / "07_triton_backward.py").read_text()
    assert "githubusercontent" not in text and 'show_recorded_plot("backward_h200.png"' in text

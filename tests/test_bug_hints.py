"""Wrong results that a common mistake explains get a sentence naming it (attnlab.checking.hints).

Found by a tester working through notebooks 01-07: the row term D dropped or summed per key tile
(03, 07), exp against exp2 without log2(e) (05), padding loaded as 0 (04), a row stride of n_cols
(04: the message led with the store mask), and a running max started at 0 (02: blamed on
exp(-inf - (-inf)) or an overflow, while the cause is underflow to l = 0); in 08 a top-left causal
mask and a merge without the max LSE (both got the NaN guess). Each mistake comes from
samples/mistakes applied to the notebook's reference, and is checked in-process; correct results
and other mistakes must get no such sentence.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import jupytext
import pytest
import torch

from attnlab.core import device
from attnlab.grading.samples import apply_mistake, load_mistakes, strip_markers
from attnlab.checking.hints import (LOG2E, delta_hint, log2e_hint, lse_base_hint, padding_zero_hint, row_stride_hint,
                           scale_factor_hint, sum_not_rescaled_hint, zero_max_hint)
from attnlab.reference import naive_attention, reference_gradients
from attnlab.verify import check_flash_backward, check_flash_forward, check_flash_kernel, check_softmax_kernel

from .conftest import ROOT, Course

RT = device.init(verbose=False)
MISTAKES = {m.id: m for m in load_mistakes(Course(ROOT))[0]}
_HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
_LOADED: dict[tuple, object] = {}
_FILES = tempfile.TemporaryDirectory(prefix="attnlab-hints-")  # removed when the test session ends


def solution(notebook: str, cell: str, mistake=None):
    """The reference solution cell of ``notebooks/<notebook>.py`` (with the edits of a mistake, given
    as a samples/mistakes id or a Mistake), imported from a file: ``@triton.jit`` reads a kernel's
    source from its file."""
    mistake = MISTAKES[mistake] if isinstance(mistake, str) else mistake
    key = (notebook, cell, mistake and mistake.id)
    if key not in _LOADED:
        nb = jupytext.read(ROOT / "notebooks" / f"{notebook}.py")
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code":
                c.source = strip_markers(c.source)
        if mistake:
            nb = apply_mistake(nb, mistake)
        src = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell)
        handle, name = tempfile.mkstemp(suffix=".py", prefix="hint_", dir=_FILES.name)  # a new name each load
        os.close(handle)
        path = Path(name)
        path.write_text(_HEADER + src)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _LOADED[key] = getattr(mod, cell)
    return _LOADED[key]


def _message(check, *args, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args, **kw)
    return str(info.value)


def _visible_part(notebook: str, grade_id: str) -> str:
    """The visible checks of a test cell of ``notebooks/<notebook>.py`` (its hidden part cut off)."""
    nb = jupytext.read(ROOT / "notebooks" / f"{notebook}.py")
    src = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return src.split("### BEGIN HIDDEN TESTS")[0]


def _qkv(t_q=12, t_k=12, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, t, d, generator=g, dtype=torch.float64) for t in (t_q, t_k, t_k, t_q))


# ---------------------------------------------------------------------------------------- 02
@pytest.mark.parametrize("causal, t_k", [(False, 48), (True, 64)])
def test_max_started_at_zero_is_named_as_underflow(causal, t_k):
    fwd = solution("02_flash_forward", "flash_attention_forward", "02-m-init-zero")
    msg = _message(check_flash_forward, fwd, T_q=40, T_k=t_k, causal=causal, regime="far_negative")
    assert "underflows to 0" in msg and "m started at 0" in msg and "l = 0" in msg, msg
    assert "NaN usually means" not in msg, msg  # the general guesses (never written, -inf - -inf) are gone


def test_05_max_started_at_zero_is_named_as_underflow():
    msg = _message(check_flash_kernel, solution("05_triton_flash", "_flash_fwd_kernel", "05-max-init-zero"),
                   T=37, offset=-1000.0)
    assert "not finite" in msg and "m started at 0" in msg and "NaN usually means" not in msg, msg


def test_02_visible_checks_show_the_max_started_at_zero():
    # it used to pass every visible check and lose points only in hidden far-negative cases
    fwd = solution("02_flash_forward", "flash_attention_forward", "02-m-init-zero")
    with pytest.raises(AssertionError, match="m started at 0"):
        exec(_visible_part("02_flash_forward", "test_flash_forward_matches_naive"),
             {"flash_attention_forward": fwd, "check_flash_forward": check_flash_forward})
    exec(_visible_part("02_flash_forward", "test_flash_forward_matches_naive"),
         {"flash_attention_forward": solution("02_flash_forward", "flash_attention_forward"),
          "check_flash_forward": check_flash_forward})


def test_other_non_finite_outputs_get_no_underflow_hint():
    q, k, v, _ = _qkv()
    o, _ = naive_attention(q, k, v)
    assert zero_max_hint(o, q, k, v, causal=False, scale=None) == ""  # nothing underflows
    k[..., 0] = 1.0
    q[..., 0, 0] = -2000 / 8 ** -0.5  # row 0's scores near -2000
    o, _ = naive_attention(q, k, v)
    assert zero_max_hint(o, q, k, v, causal=False, scale=None) == ""  # finite: right
    o[0, 0, 0, 0] = float("nan")
    assert zero_max_hint(o, q, k, v, causal=False, scale=None) == ""  # NaN in row 0 of head 0 only
    o[:, :, 0] = float("nan")
    assert "m started at 0" in zero_max_hint(o, q, k, v, causal=False, scale=None)
    o[:, :, 1] = float("nan")  # a row whose scores are not far negative
    assert zero_max_hint(o, q, k, v, causal=False, scale=None) == ""


# ---------------------------------------------------------------------------------------- 03
@pytest.mark.parametrize("mistake_id, cause", [("03-d-dropped", "D_i left out"),
                                               ("03-d-from-tile", "D_i summed over the current key tile only")])
def test_missing_or_per_tile_d_is_named(mistake_id, cause):
    bwd = solution("03_flash_backward", "flash_attention_backward", mistake_id)
    msg = _message(check_flash_backward, bwd, T_q=33, causal=True, block_q=7, block_k=11)
    assert cause in msg and "rowsum(dO ∘ O)" in msg, msg


def test_missing_d_is_named_end_to_end_too():
    from attnlab.verify import check_autograd_attention

    nb = jupytext.read(ROOT / "notebooks" / "03_flash_backward.py")
    given = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "autograd_function")
    ns = {"flash_attention_backward": solution("03_flash_backward", "flash_attention_backward", "03-d-dropped"),
          "naive_attention": naive_attention}
    exec("import torch\n" + given, ns)
    attn = ns["flash_attention"]
    msg = _message(check_autograd_attention, attn, T_q=37, causal=True)
    assert msg.startswith("q.grad") and "D_i left out" in msg, msg


@pytest.mark.parametrize("mistake_id", ["03-p-exp2", "03-dq-no-scale", "03-no-mask-backward"])
def test_other_backward_mistakes_are_not_blamed_on_d(mistake_id):
    bwd = solution("03_flash_backward", "flash_attention_backward", mistake_id)
    msg = _message(check_flash_backward, bwd, T_q=33, causal=True, block_q=7, block_k=11)
    assert "rowsum(dO ∘ O)" not in msg, msg


def test_delta_hint_speaks_of_the_preprocess_kernel_in_07_and_needs_a_match():
    q, k, v, do = _qkv(8, 20)
    dq, dk, _ = reference_gradients(q, k, v, do)
    s = q @ k.transpose(-1, -2) * 8 ** -0.5
    p = torch.softmax(s, dim=-1)
    dk_no_d = 8 ** -0.5 * (p * (do @ v.transpose(-1, -2))).transpose(-1, -2) @ q
    hint = delta_hint("dk", dk_no_d, q, k, v, do, causal=False, scale=None, block_k=16, tol=1e-10, symbol="Δ")
    assert "Δ_i left out" in hint and "preprocess kernel" in hint, hint
    assert delta_hint("dk", dk, q, k, v, do, causal=False, scale=None, block_k=16, tol=1e-10) == ""
    assert delta_hint("dv", dk_no_d, q, k, v, do, causal=False, scale=None, block_k=16, tol=1e-10) == ""


def test_07_scale_left_out_or_applied_twice_is_named_for_dq_and_dk_only():
    q, k, v, do = _qkv(8, 20)
    dq, dk, dv = reference_gradients(q, k, v, do)
    scale = 8 ** -0.5
    assert "without the factor scale" in scale_factor_hint("dk", dk / scale, dk, scale, 1e-10)
    assert "scale applied twice" in scale_factor_hint("q.grad", dq * scale, dq, scale, 1e-10)
    assert scale_factor_hint("dk", dk, dk, scale, 1e-10) == ""
    assert scale_factor_hint("dk", dk * 1.5, dk, scale, 1e-10) == ""
    assert scale_factor_hint("dv", dv / scale, dv, scale, 1e-10) == ""


# ---------------------------------------------------------------------------------------- 04
def test_padding_zero_is_named():
    msg = _message(check_softmax_kernel, solution("04_triton_softmax", "_softmax_kernel", "04-pad-zero"),
                   n_rows=3, n_cols=37)
    assert "padded with 27 zeros up to BLOCK_SIZE = 64" in msg and "-inf" in msg, msg


def test_padding_zero_hint_needs_a_match():
    x = torch.randn(3, 5, dtype=torch.float64)
    assert padding_zero_hint(torch.softmax(x, -1), x, 8, 1e-5) == ""  # right
    assert padding_zero_hint(torch.softmax(x, -1), x, 5, 1e-5) == ""  # no padding at all
    assert padding_zero_hint(torch.softmax(x, -1) * 0.9, x, 8, 1e-5) == ""  # wrong another way


def test_row_stride_bug_points_at_the_stride():
    msg = _message(check_softmax_kernel, solution("04_triton_softmax", "_softmax_kernel", "04-n-cols-as-stride"),
                   n_rows=4, n_cols=37, padded=True)
    assert "step rows by output_row_stride" in msg and "r * n_cols" in msg, msg
    assert "Mask the store" not in msg, msg
    # an unmasked store is still told to mask
    msg = _message(check_softmax_kernel, solution("04_triton_softmax", "_softmax_kernel", "04-unmasked-store"),
                   n_rows=4, n_cols=37, padded=True)
    assert "Mask the store with the columns < n_cols" in msg, msg
    strides = {"output_row_stride": 40, "n_cols": 37}
    assert row_stride_hint([37, 38, 39, 77, 78, 79, 117, 118, 119], n_rows=4, n_cols=37, strides=strides)
    assert row_stride_hint([37, 38, 39], n_rows=4, n_cols=37, strides=strides) == ""  # part of it only
    assert row_stride_hint([37, 77, 117, 157], n_rows=4, n_cols=37, strides=strides) == ""  # one column too many


# ---------------------------------------------------------------------------------------- 05
def test_exp2_without_log2e_is_named():
    msg = _message(check_flash_kernel, solution("05_triton_flash", "_flash_fwd_kernel", "05-exp2-without-log2e"),
                   T=16)
    assert "times ln 2" in msg and "log2(e)" in msg, msg


def test_log2e_hint_both_ways_and_only_on_a_match():
    q, k, v, _ = _qkv(d=32)
    for factor, words in ((1 / LOG2E, "times ln 2"), (LOG2E, "must be tl.exp2")):
        o, _ = naive_attention(q, k, v, causal=True, scale=32 ** -0.5 * factor)
        assert words in log2e_hint(o, q, k, v, causal=True, tol=1e-5)
    o, _ = naive_attention(q, k, v, causal=True)
    assert log2e_hint(o, q, k, v, causal=True, tol=1e-5) == ""
    assert log2e_hint(o * 1.1, q, k, v, causal=True, tol=1e-5) == ""


# ---------------------------------------------------------------------------------------- 07


def test_07_visible_checks_catch_a_causal_loop_that_starts_after_the_key_tile():
    # with BLOCK_M == BLOCK_N the first query tile at or after start_n is the one holding it: only
    # unequal tiles (BLOCK_M > BLOCK_N) tell the two apart, and every visible check used 16/16
    from attnlab.grading.samples import Mistake
    from attnlab.verify_backward import check_flash_backward_kernels

    lo_late = Mistake(
        id="07-lo-after-key-tile", notebook="07_triton_backward", cell="_bwd_dkdv_kernel",
        edits=(("lo = (start_n // BLOCK_M) * BLOCK_M", "lo = tl.cdiv(start_n, BLOCK_M) * BLOCK_M"),),
        fails=(), why="starts the causal query loop at the first tile at or after the key tile")
    kernels = tuple(solution("07_triton_backward", cell, lo_late)
                    for cell in ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"))
    with pytest.raises(AssertionError, match=r"dk \[B=1, H=2, T=32, D=16, causal=True, block_m=32, block_n=16"):
        exec(_visible_part("07_triton_backward", "test_flash_backward_matches_reference"),
             {"KERNELS": kernels, "check_flash_backward_kernels": check_flash_backward_kernels,
              "_bwd_preprocess_kernel": kernels[0], "_bwd_dkdv_kernel": kernels[1], "_bwd_dq_kernel": kernels[2]})


def test_07_natural_log_lse_in_base_2_is_named():
    """P rebuilt as exp2(S log2 e - LSE): the saved natural-log LSE used as if it were base 2 (dQ kernel)."""
    from attnlab.grading.samples import Mistake
    from attnlab.verify_backward import check_flash_backward_kernels

    lse_as_base_2 = Mistake(
        id="07-lse-not-converted", notebook="07_triton_backward", cell="_bwd_dq_kernel",
        edits=(("lse2 = tl.load(LSE + bh * T + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634",
                "lse2 = tl.load(LSE + bh * T + offs_m, mask=row_ok, other=0.0)"),),
        fails=(), why="the natural-log LSE subtracted from base-2 scores")
    kernels = tuple(solution("07_triton_backward", cell, lse_as_base_2)
                    for cell in ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"))
    msg = _message(check_flash_backward_kernels, kernels, T=16, D=32, causal=True)
    assert msg.startswith("dq") and "the saved LSE is a natural log" in msg, msg
    # the right kernels' dk, off by a factor: another hint, not this one
    q, k, v, do = _qkv(8, 8)
    dq, dk, _ = reference_gradients(q, k, v, do)
    assert lse_base_hint("dk", dk * 2, q, k, v, do, causal=False, tol=1e-9) == ""


# ---------------------------------------------------------------------------------------- 08
def _dec(cell, mistake=None):
    return solution("08_flash_decoding", cell, mistake)


def test_08_top_left_causal_mask_is_named():
    """The tester's top-left mask got the NaN guess ("got -inf ... NaN usually means")."""
    from attnlab.verify_decode import check_decode_partial_kernel, check_flash_decode

    kernel = _dec("_decode_partial_kernel", "08-top-left-causal")
    for check, args in ((check_decode_partial_kernel, (kernel,)),
                        (check_flash_decode, (kernel, _dec("_decode_merge_kernel")))):
        msg = _message(check, *args, seqlens=[37, 20], H_q=4, H_kv=2, T_q=4, num_splits=3)
        assert "aligned at the top-left corner" in msg and "bottom-right alignment" in msg, msg
        assert "NaN usually means" not in msg, msg
    # wrong another way (every query sees the whole cache): no alignment hint
    msg = _message(check_decode_partial_kernel, _dec("_decode_partial_kernel", "08-chunk-sees-whole-cache"),
                   seqlens=[37, 20], H_q=4, H_kv=2, T_q=4, num_splits=3)
    assert "top-left" not in msg, msg


@pytest.mark.parametrize("edits, what", [
    ((("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)"),), "when l is not rescaled"),
    ((("acc = acc * alpha[:, None]\n", "\n"),), "when acc is not rescaled"),
    ((("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)"),
      ("acc = acc * alpha[:, None]\n", "\n")), "when l is not rescaled"),  # the LSE, checked first, needs l only
])
def test_08_running_sum_or_accumulator_not_rescaled_is_named(edits, what):
    """The new student's l or acc left unrescaled got a bare relative error: now each is named, for
    several key tiles per split only (with one tile there is nothing to rescale)."""
    from attnlab.grading.samples import Mistake
    from attnlab.verify_decode import check_decode_partial_kernel

    mistake = Mistake(id="08-no-rescale-" + what.split()[1], notebook="08_flash_decoding",
                      cell="_decode_partial_kernel", edits=edits, fails=(), why=what)
    msg = _message(check_decode_partial_kernel, _dec("_decode_partial_kernel", mistake), seqlens=[70, 45],
                   H_q=4, H_kv=2, T_q=2, num_splits=2, block_n=16, seed=3)
    assert f"the online softmax gives {what} by exp(m_old − m_new)" in msg, msg
    others = [w for w in ("when l is not", "when acc is not", "when l and acc") if not what.startswith(w)]
    assert not any(o in msg for o in others), msg


def test_08_rescale_hint_needs_a_match_and_several_tiles():
    from attnlab import reference_decode
    from attnlab.checking.hints import rescale_hint

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 1, 8, dtype=torch.float64, generator=gen) if i == 0 else
               torch.randn(1, 2, 40, 8, dtype=torch.float64, generator=gen) for i in range(3))
    k[:, :, 16:32] += 2 * q  # the second key tile of split 0 raises every row's max
    lens = torch.tensor([40], dtype=torch.int32)
    visible = reference_decode.decode_visible(1, 40, lens, True)
    valid = reference_decode.decode_visible(1, 40, lens, False).transpose(-1, -2)
    o_ref, _ = reference_decode.decode_partials_reference(q, k, v, lens, causal=True, num_splits=2, keys_per_split=32)
    kw = dict(num_splits=2, keys_per_split=32, tol=1e-9)
    assert rescale_hint(o_ref, "o", q, k, v, visible, valid, block_n=16, **kw) == ""  # right: no hint
    from attnlab.checking.hints import tiled_partials
    l_kept, _ = tiled_partials(q, k, v, visible, valid, num_splits=2, keys_per_split=32, block_n=16,
                                rescale_l=False, rescale_acc=True)
    assert "when l is not rescaled" in rescale_hint(l_kept, "o", q, k, v, visible, valid, block_n=16, **kw)
    assert rescale_hint(o_ref * 1.5, "o", q, k, v, visible, valid, block_n=16, **kw) == ""  # wrong another way
    assert rescale_hint(o_ref * 1.5, "o", q, k, v, visible, valid, block_n=32, **kw) == ""  # one tile per split


def test_08_merge_without_the_max_is_named_as_overflow():
    from attnlab.checking.hints import merge_overflow_hint
    from attnlab.verify_decode import check_decode_merge_kernel

    msg = _message(check_decode_merge_kernel, _dec("_decode_merge_kernel", "08-merge-no-max"), num_splits=7,
                   offset=100.0, spread=5.0, seed=2)
    assert "overflows float32" in msg and "Subtract the max LSE before exponentiating" in msg, msg
    # NaN from the all-empty row (exp(-inf - (-inf))) is not an overflow
    msg = _message(check_decode_merge_kernel, _dec("_decode_merge_kernel", "08-merge-all-empty-nan"), num_splits=5,
                   B=2, H=3)
    assert "overflow" not in msg, msg
    lse = torch.tensor([[100.0, 1.0], [1.0, 2.0]])
    nan_row0 = torch.tensor([[float("nan")], [0.5]])
    assert merge_overflow_hint(nan_row0, lse)
    assert merge_overflow_hint(nan_row0.flip(0), lse) == ""  # the NaN row is not the overflowing one


def test_08_merge_weights_mistakes_are_named():
    """Equal weights (a sample mistake, through the kernel), and base-2 or unnormalised weights."""
    from attnlab.checking.hints import merge_weights_hint
    from attnlab.verify_decode import check_decode_merge_kernel

    msg = _message(check_decode_merge_kernel, _dec("_decode_merge_kernel", "08-merge-equal-weights"), num_splits=5,
                   B=2, H=3)
    assert "weighted equally" in msg, msg
    lse = torch.tensor([[0.3, -1.2, float("-inf")], [2.0, 0.5, 1.0]], dtype=torch.float64)
    o_part = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = (lse - lse.amax(-1, keepdim=True)).exp()
    right = (w[..., None] * o_part).sum(-2) / w.sum(-1, keepdim=True)
    w2 = (lse - lse.amax(-1, keepdim=True)).exp2()
    assert "not exp2" in merge_weights_hint((w2[..., None] * o_part).sum(-2) / w2.sum(-1, keepdim=True), o_part, lse, 1e-9)
    assert "never divided" in merge_weights_hint((w[..., None] * o_part).sum(-2), o_part, lse, 1e-9)
    assert merge_weights_hint(right, o_part, lse, 1e-9) == ""


def test_08_a_merged_row_left_at_minus_inf_is_blamed_on_the_merge_not_a_causal_bound():
    """The merge kernel sees no keys: its -inf rows get the merge's rule, not the partial kernel's
    causal-bound question."""
    from attnlab.grading.samples import Mistake
    from attnlab.verify_decode import check_decode_merge_kernel

    one_split_dropped = Mistake(
        id="08-merge-lse-guard", notebook="08_flash_decoding", cell="_decode_merge_kernel",
        edits=(("lse = tl.where(l > 0.0, m_use", "lse = tl.where(l > 1.0, m_use"),),  # l = 1: one split with keys
        fails=(), why="a row whose keys lie in one split gets LSE -inf")
    msg = _message(check_decode_merge_kernel, _dec("_decode_merge_kernel", one_split_dropped), num_splits=1, B=2,
                   H=2, empty=0.5, seed=3)
    assert msg.startswith("lse (merged") and "no split with keys" in msg and "causal bound" not in msg, msg


def test_08_keys_read_past_the_length_get_the_load_rule_not_the_nan_guess():
    from attnlab.verify_decode import check_decode_partial_kernel

    for mistake in ("08-unmasked-v-load", "08-ignores-seqlen"):
        msg = _message(check_decode_partial_kernel, _dec("_decode_partial_kernel", mistake), seqlens=[40],
                       num_splits=3, causal=False)
        assert "Never load a key or value at or past SEQLENS[b]" in msg, msg
        assert "NaN usually means" not in msg, msg


@pytest.mark.parametrize("mistake", ["08-kv-base-contiguous", "08-kv-row-stride-head-dim"])
def test_08_strides_assumed_contiguous_fail_on_a_transposed_cache(mistake):
    """Both passed every check while all caches were contiguous (B, H_kv, T_max, D)."""
    from attnlab.verify_decode import check_decode_partial_kernel

    kernel = _dec("_decode_partial_kernel", mistake)
    check_decode_partial_kernel(kernel, seqlens=[21, 9], H_q=4, H_kv=2, num_splits=2)  # contiguous: passes
    msg = _message(check_decode_partial_kernel, kernel, seqlens=[21, 9], H_q=4, H_kv=2, num_splits=2,
                   kv_layout="bthd")
    assert "Use the three strides the launcher passes" in msg, msg
    check_decode_partial_kernel(_dec("_decode_partial_kernel"), seqlens=[21, 9], H_q=4, H_kv=2, num_splits=2,
                                kv_layout="bthd")


def test_08_offset_in_32_bits_is_named_on_a_cache_past_two_to_the_31():
    from attnlab.verify_decode import check_decode_partial_large_offsets

    msg = _message(check_decode_partial_large_offsets, _dec("_decode_partial_kernel", "08-kv-offset-32-bit"))
    assert "wraps around past 2^31" in msg and "b.to(tl.int64) * stride_kb" in msg, msg
    check_decode_partial_large_offsets(_dec("_decode_partial_kernel"))  # the reference: right, no crash


# ---------------------------------------------------------------------------------------- 01
def test_01_running_sum_not_rescaled_is_named():
    from attnlab.verify import check_online_softmax

    stats = solution("01_online_softmax", "online_softmax_stats", "01-no-rescale")
    msg = _message(check_online_softmax, stats, block_size=8, shape=(4, 50))
    assert "rescaled first" in msg and "exp(m_old - m_new)" in msg, msg
    x = torch.randn(4, 50, dtype=torch.float64) * 5
    right = torch.exp(torch.logsumexp(x, dim=-1) - x.amax(dim=-1))
    assert sum_not_rescaled_hint(right, x, 8) == ""  # a right sum
    assert sum_not_rescaled_hint(right * 1.5, x, 8) == ""  # wrong another way
    assert sum_not_rescaled_hint(right, x.sort(dim=-1).values.flip(-1), 8) == ""  # max in block 1: nothing to rescale


@pytest.mark.parametrize("case", [dict(T=37, D=32, block_m=16, block_n=16),
                                  dict(T=37, H=1, D=16, offset=-1000.0, seed=24)])
def test_05_keys_past_t_left_in_the_scores_are_named(case):
    msg = _message(check_flash_kernel, solution("05_triton_flash", "_flash_fwd_kernel", "05-keys-past-t-unmasked"),
                   causal=False, **case)
    assert "offs_n[None, :] < T" in msg and "m started at 0" not in msg, msg
    # other mistakes that fail the same case get no such sentence
    msg = _message(check_flash_kernel, solution("05_triton_flash", "_flash_fwd_kernel", "05-no-rescale"),
                   causal=False, **case)
    assert "offs_n[None, :] < T" not in msg, msg


@pytest.mark.parametrize("mistake", ["08-ignores-seqlen", "08-unmasked-v-load"])
def test_08_end_to_end_names_reads_past_the_length_not_the_nan_guess(mistake):
    """The end-to-end check (no load accounting) blamed exp(-inf - (-inf)) for this NaN."""
    from attnlab.verify_decode import check_flash_decode

    msg = _message(check_flash_decode, _dec("_decode_partial_kernel", mistake), _dec("_decode_merge_kernel"),
                   seqlens=[37, 5, 1, 0], H_q=8, H_kv=2, num_splits=3)
    assert "read from the cache past a sequence's length" in msg and "NaN usually means" not in msg, msg


def test_08_end_to_end_nan_of_a_missing_guard_is_not_blamed_on_the_length():
    from attnlab.verify_decode import check_flash_decode

    msg = _message(check_flash_decode, _dec("_decode_partial_kernel", "08-no-guard-masked-tile"),
                   _dec("_decode_merge_kernel"), seqlens=[50, 20, 3], H_q=4, H_kv=1, T_q=5, num_splits=2)
    assert "past a sequence's length" not in msg, msg


def _bwd_kernels(**mistakes):
    return [solution("07_triton_backward", cell, mistakes.get(cell))
            for cell in ("_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel")]


@pytest.mark.parametrize("notebook", ["05", "07"])
def test_head_offset_from_a_padded_length_is_named_not_the_store_mask(notebook):
    """The stores are masked; with several heads the last one's still land past the end."""
    from attnlab.verify_backward import check_flash_backward_kernels

    def check(mistake):
        if notebook == "05":
            return _message(check_flash_kernel, solution("05_triton_flash", "_flash_fwd_kernel", mistake),
                            T=37, D=32, causal=True, block_m=16, block_n=16)
        return _message(check_flash_backward_kernels, _bwd_kernels(_bwd_dkdv_kernel=mistake), T=33, causal=True)

    msg = check(f"{notebook}-head-offset-padded")
    assert "per-head offset is wrong" in msg and "must be masked" not in msg, msg
    msg = check({"05": "05-unmasked-store", "07": "07-unmasked-dkdv-store"}[notebook])  # really unmasked
    assert "must be masked out of the stores" in msg and "per-head offset" not in msg, msg


@pytest.mark.parametrize("mistake", ["05-bh-offset-32-bit", "07-bh-offset-32-bit", "07-dq-bh-offset-32-bit",
                                     "07-dkdv-offset-32-bit"])
def test_bh_offset_in_32_bits_is_named_past_two_to_the_31(mistake):
    from attnlab.verify import check_flash_kernel_large_offsets
    from attnlab.verify_backward import (check_bwd_dkdv_large_offsets, check_bwd_dq_large_offsets,
                                         check_bwd_preprocess_large_offsets)

    m = MISTAKES[mistake]
    check = {"_flash_fwd_kernel": check_flash_kernel_large_offsets, "_bwd_dq_kernel": check_bwd_dq_large_offsets,
             "_bwd_preprocess_kernel": check_bwd_preprocess_large_offsets,
             "_bwd_dkdv_kernel": check_bwd_dkdv_large_offsets}[m.cell]
    msg = _message(check, solution(m.notebook, m.cell, m))
    assert "wraps around past 2^31" in msg and "bh = tl.program_id(1).to(tl.int64)" in msg, msg
    check(solution(m.notebook, m.cell))  # the reference: right


@pytest.mark.parametrize("n_cols", [37, 300])
def test_04_row_offset_in_32_bits_is_named_past_two_to_the_31(n_cols):
    from attnlab.verify import check_softmax_kernel_large_offsets

    cell = ("04_triton_softmax", "_softmax_kernel")
    msg = _message(check_softmax_kernel_large_offsets, solution(*cell, "04-row-offset-32-bit"), n_cols=n_cols)
    assert "wraps around past 2^31" in msg and "row = tl.program_id(0).to(tl.int64)" in msg, msg
    check_softmax_kernel_large_offsets(solution(*cell), n_cols=n_cols)  # the reference: right
    check_softmax_kernel_large_offsets(solution(*cell, "04-ok-row-cast-at-use"), n_cols=n_cols)


def test_spread_places_many_layouts_in_one_process():
    """Each layout is mapped once and reused; new ones keep finding room below the others."""
    from attnlab.checking import sparse

    spreads = [sparse.spread([0, 2**30 + 64 * i], 64) for i in range(70)]
    assert sparse.spread([0, 2**30], 64) is spreads[0]
    for s in spreads:
        s.pieces[1].fill_(1.0)
        assert s.whole.data_ptr() + s.starts[1] * 4 == s.pieces[1].data_ptr()


def test_07_end_to_end_names_the_head_offset():
    from attnlab.launch_backward import attention_function
    from attnlab.verify_backward import check_triton_attention

    kernels = _bwd_kernels(_bwd_dkdv_kernel="07-head-offset-padded")
    msg = _message(check_triton_attention, attention_function(lambda: kernels), T=37, causal=False)
    assert "per-head offset is off" in msg and "NaN usually means" not in msg, msg
    msg = _message(check_triton_attention, attention_function(lambda: _bwd_kernels(_bwd_dkdv_kernel="07-dk-scale-missing")),
                   T=37, causal=False)
    assert "per-head offset" not in msg, msg

"""Notebook 08 (split-K decoding): the references, the launcher, the checkers, and the notebook's test
cells run in-process against the model solution and the sample mistakes (nbgrader grades them too,
in test_grading.py; this runs in seconds and without a gradebook)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from attnlab import init, launch_decode
from attnlab.grading.course import Course
from attnlab.grading.samples import load_mistakes
from attnlab.reference import naive_attention
from attnlab.reference_decode import (decode_attention_reference, decode_partials_reference,
                                      merge_partials_reference, validate_decode_inputs)

from .notebook_runner import code_cells, run_cells

# Interpreter mode must be chosen before anything imports triton (the notebook's set-up cell does
# it too, but another test may import triton first).
init(verbose=False)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "08_flash_decoding.py"


def _inputs(B=2, H_q=4, H_kv=2, T_q=1, T_max=20, D=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H_q, T_q, D, generator=g, dtype=dtype)
    k = torch.randn(B, H_kv, T_max, D, generator=g, dtype=dtype)
    v = torch.randn(B, H_kv, T_max, D, generator=g, dtype=dtype)
    return q, k, v


# ------------------------------------------------------------------------------------- references
@pytest.mark.parametrize("causal", [False, True])
def test_full_caches_without_gqa_equal_naive_attention(causal):
    # with T_q = T_k bottom-right and top-left alignment coincide
    q, k, v = _inputs(H_q=3, H_kv=3, T_q=12, T_max=12)
    lens = torch.tensor([12, 12], dtype=torch.int32)
    o, lse = decode_attention_reference(q, k, v, lens, causal=causal)
    o_ref, lse_ref = naive_attention(q, k, v, causal=causal)
    torch.testing.assert_close(o, o_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, lse_ref, rtol=1e-12, atol=1e-12)


def test_bottom_right_lengths_and_gqa_match_sdpa_with_an_explicit_mask():
    q, k, v = _inputs(B=3, H_q=8, H_kv=2, T_q=4, T_max=15)
    lens = torch.tensor([15, 9, 6], dtype=torch.int32)
    o, lse = decode_attention_reference(q, k, v, lens, causal=True)
    for b, L in enumerate(lens.tolist()):
        mask = torch.ones(4, L, dtype=torch.bool).tril(diagonal=L - 4)  # query i sees j <= L - 4 + i
        kb, vb = (t[b:b + 1, :, :L].repeat_interleave(4, dim=1) for t in (k, v))  # head h reads KV head h // 4
        expected = torch.nn.functional.scaled_dot_product_attention(q[b:b + 1], kb, vb, attn_mask=mask)
        torch.testing.assert_close(o[b:b + 1], expected, rtol=1e-10, atol=1e-10)


def test_keys_past_the_lengths_are_never_used_and_empty_rows_are_zero():
    q, k, v = _inputs(B=3, T_q=3, T_max=10)
    lens = torch.tensor([10, 4, 1], dtype=torch.int32)
    for t in (k, v):
        t[1, :, 4:] = float("nan")
        t[2, :, 1:] = float("nan")
    o, lse = decode_attention_reference(q, k, v, lens, causal=True)
    assert torch.isfinite(o).all()
    # sequence 2 holds one key, so with T_q = 3 its first two rows see nothing
    assert torch.isneginf(lse[2, :, :2]).all() and (o[2, :, :2] == 0).all()
    assert torch.isfinite(lse[2, :, 2]).all() and torch.isfinite(lse[:2]).all()


@pytest.mark.parametrize("num_splits, keys_per_split", [(1, 20), (3, 7), (4, 8), (6, 8)])
def test_partials_merge_back_to_the_full_result(num_splits, keys_per_split):
    q, k, v = _inputs(B=3, H_q=4, H_kv=2, T_q=3, T_max=20)
    lens = torch.tensor([20, 5, 0], dtype=torch.int32)
    o_part, lse_part = decode_partials_reference(q, k, v, lens, causal=True, num_splits=num_splits,
                                                 keys_per_split=keys_per_split)
    o, lse = merge_partials_reference(o_part, lse_part)
    o_ref, lse_ref = decode_attention_reference(q, k, v, lens, causal=True)
    torch.testing.assert_close(o, o_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, lse_ref, rtol=1e-12, atol=1e-12)  # -inf rows compare equal
    if (num_splits - 1) * keys_per_split >= 20:
        assert torch.isneginf(lse_part[..., -1]).all()  # a split past every sequence is empty


def test_merge_survives_large_partial_lses():
    lse_part = torch.tensor([[1000.0, 999.0, float("-inf")]], dtype=torch.float64)
    o_part = torch.tensor([[[1.0], [3.0], [0.0]]], dtype=torch.float64)
    o, lse = merge_partials_reference(o_part, lse_part)
    w1 = math.exp(-1) / (1 + math.exp(-1))  # the second split's share
    assert abs(o.item() - (1 - w1 + 3 * w1)) < 1e-12
    assert abs(lse.item() - (1000 + math.log1p(math.exp(-1)))) < 1e-12


@pytest.mark.parametrize("change, exc, match", [
    (dict(lens=torch.tensor([3, 4])), TypeError, "int32"),
    (dict(lens=torch.tensor([3, 21], dtype=torch.int32)), ValueError, r"\[0, T_max=20\]"),
    (dict(lens=torch.tensor([3], dtype=torch.int32)), TypeError, r"shape \(B,\)"),
    (dict(H_kv=3), ValueError, "multiple of H_kv=3"),
    (dict(k_dtype=torch.float32), TypeError, "one dtype"),
])
def test_bad_decoding_input_gets_a_clear_error(change, exc, match):
    q, k, v = _inputs(H_kv=change.get("H_kv", 2))
    if "k_dtype" in change:
        k = k.to(change["k_dtype"])
    lens = change.get("lens", torch.tensor([3, 4], dtype=torch.int32))
    with pytest.raises(exc, match=match):
        validate_decode_inputs(q, k, v, lens)


# ----------------------------------------------------------------------------------------- launcher
def test_split_count_fills_the_gpu_and_keeps_slices_long():
    # 132 SMs running 4 programs each: waves of 528 programs
    assert launch_decode.choose_num_splits(8, 32768, 132) == 66         # 528 programs: one full wave
    assert launch_decode.choose_num_splits(32, 32768, 132) == 16       # 512 of 528; 17 would start a 2nd wave
    assert launch_decode.choose_num_splits(64, 32768, 132) == 8        # not 12: 768 programs = 1.45 waves
    assert launch_decode.choose_num_splits(256, 32768, 132) == 2       # 512 or 1024 fill alike: the fewer
    assert launch_decode.choose_num_splits(8, 16384, 132) == 66
    assert launch_decode.choose_num_splits(8, 4096, 132) == 32          # capped: 128 keys per slice
    assert launch_decode.choose_num_splits(8, 100, 132) == 1
    assert launch_decode.choose_num_splits(1, 10**7, 132) == 128        # capped at 128
    assert launch_decode.choose_num_splits(4096, 10**6, 132) == 1


def test_split_count_follows_the_programs_an_sm_runs_at_once():
    """A wave is n_sm * per_sm programs: a kernel that fits 7 per SM (smaller D) wants more of them, and
    one that fits 1 is back to a program per SM."""
    assert launch_decode.choose_num_splits(8, 32768, 132, per_sm=7) == 115   # 920 of 924 slots
    assert launch_decode.choose_num_splits(8, 32768, 132, per_sm=1) == 16    # 128 of 132
    assert launch_decode.choose_num_splits(256, 32768, 132, per_sm=3) == 3   # 768 of 792
    q, k = torch.empty(1, 8, 1, 16), torch.empty(1, 2, 32768, 16)          # 2 programs per split, 4 SMs (CPU)
    assert launch_decode.decode_config(q, k, per_sm=1).num_splits == 2
    assert launch_decode.decode_config(q, k, per_sm=None).num_splits == 8 == launch_decode.PER_SM_DEFAULT * 2


def test_the_split_kernel_has_no_occupancy_on_the_cpu():
    q, k = torch.empty(1, 8, 1, 16), torch.empty(1, 2, 64, 16)
    lens = torch.tensor([64], dtype=torch.int32)
    assert launch_decode.partial_programs_per_sm(object(), q, k, k, lens, causal=True) is None


@pytest.mark.parametrize("T_max, num_splits, block_n", [(40, 3, 16), (40, 4, 16), (1, 1, 16), (1000, 7, 64)])
def test_slices_are_whole_tiles_and_cover_the_cache(T_max, num_splits, block_n):
    q, k = torch.empty(1, 8, 1, 16), torch.empty(1, 2, T_max, 16)
    cfg = launch_decode.decode_config(q, k, num_splits, block_n)
    assert cfg.keys_per_split % block_n == 0
    assert cfg.num_splits * cfg.keys_per_split >= T_max                    # every key has a slice
    assert cfg.keys_per_split - block_n < -(-T_max // num_splits)          # the smallest such whole tiles
    assert (cfg.block_m, cfg.row_blocks) == (16, 1)


@pytest.mark.parametrize("T_q, group, block_m, row_blocks", [(1, 1, 16, 1), (1, 8, 16, 1), (5, 4, 32, 1),
                                                             (16, 8, 64, 2)])
def test_row_blocks_hold_a_group_of_query_heads(T_q, group, block_m, row_blocks):
    cfg = launch_decode.decode_config(torch.empty(1, 2 * group, T_q, 16), torch.empty(1, 2, 64, 16), 2, 16)
    assert (cfg.block_m, cfg.row_blocks) == (block_m, row_blocks)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(num_splits=0), ValueError, "num_splits"),
    (dict(num_splits=2.0), ValueError, "num_splits"),
    (dict(D=24), ValueError, "power of two"),
    (dict(dtype=torch.float64), TypeError, "float64 not supported"),
])
def test_flash_decode_launcher_validates(kwargs, exc, match):
    q, k, v = _inputs(D=kwargs.get("D", 16), dtype=kwargs.get("dtype", torch.float32))
    lens = torch.tensor([3, 4], dtype=torch.int32)
    with pytest.raises(exc, match=match):
        launch_decode.launch_flash_decode(None, None, q, k, v, lens, num_splits=kwargs.get("num_splits"))


def test_flash_decode_launcher_rejects_a_non_triton_kernel():
    q, k, v = _inputs(D=16, dtype=torch.float32)
    with pytest.raises(TypeError, match="@triton.jit"):
        launch_decode.launch_flash_decode(lambda *a, **kw: None, None, q, k, v, torch.tensor([3, 4], dtype=torch.int32))


# ------------------------------------------------------------------------------------ measurement
def test_recorded_h200_measurement_reads_back_plots_and_ships(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from importlib.resources import files

    from attnlab import bench_decode

    points = bench_decode.read_csv(ROOT / "notes" / "gpu" / "2026-11-30" / "decode_results.csv")
    assert len(points) == 72 and all(p.status == "ok" for p in points)
    bench_decode.write_csv(points, tmp_path / "again.csv")
    bench_decode.write_csv(bench_decode.read_csv(tmp_path / "again.csv"), tmp_path / "twice.csv")
    assert (tmp_path / "again.csv").read_text() == (tmp_path / "twice.csv").read_text()  # NaN != NaN
    followup = bench_decode.read_csv(ROOT / "notes" / "gpu" / "2026-11-30" / "08-followup" / "decode_results.csv")
    assert len(followup) == 30 and all(p.status == "ok" and p.graph_status.startswith("ok") for p in followup)
    assert "split-K / 05 (graph)" in bench_decode.format_table(followup, 4240.0)
    bench_decode.plot_decode(points, 4265.0, path=tmp_path / "decode.png")
    assert (tmp_path / "decode.png").stat().st_size > 10_000
    assert files("attnlab").joinpath("data", "decode_h200.png").is_file()  # what CPU runs of 08 show


# ------------------------------- the notebook's test cells and model solution (each mistake: test_mistakes.py)
GIVEN = ("setup", "flash_decode")



def test_model_solution_passes_every_test_cell_hidden_included():
    assert run_cells(code_cells(NOTEBOOK), GIVEN)[0] == {}


@pytest.mark.parametrize("mistake_id, reason", [
    ("08-per-head-kv-reload", "loaded once for the whole GQA group"),
    ("08-unmasked-k-load", "Never load a key or value at or past SEQLENS[b]"),
])
def test_load_accounting_names_the_rule_a_right_answer_broke(mistake_id, reason):
    """Both kernels give the right numbers; only the load count of the split kernel's checker fails them."""
    mistake = {m.id: m for m in load_mistakes(Course(ROOT))[0]}[mistake_id]
    failed, _ = run_cells(code_cells(NOTEBOOK), GIVEN, mistake.cell, mistake.edits, only={"test_decode_partial_cache"})
    assert reason in failed["test_decode_partial_cache"]


def test_a_row_left_without_keys_is_told_apart_from_a_nan():
    """-inf where a finite LSE is due (a causal bound that excludes the row's own key) names the bound,
    not the NaN guesses."""
    from attnlab.verify_decode import assert_close_or_empty

    want = torch.tensor([[0.5, float("-inf")]], dtype=torch.float64)
    with pytest.raises(AssertionError, match="causal bound inclusive") as no_key:
        assert_close_or_empty(torch.tensor([[float("-inf"), float("-inf")]]), want, name="lse_part", case="c", tol=1e-6)
    assert "NaN usually" not in str(no_key.value)
    with pytest.raises(AssertionError, match="NaN usually means"):
        assert_close_or_empty(torch.tensor([[float("nan"), float("-inf")]]), want, name="lse_part", case="c", tol=1e-6)


def test_too_little_shared_memory_is_named_with_the_head_dim_and_the_limit():
    """Triton's OutOfResources for shared memory (a large D on a GPU) becomes a ValueError naming D, the
    tiles, the bytes needed, the device's limit and what is smaller; other failures pass through."""
    from triton.runtime.errors import OutOfResources

    error = launch_decode.shared_memory_error
    cfg = launch_decode.DecodeConfig(block_m=16, block_n=64, num_splits=4, keys_per_split=256, row_blocks=1)
    msg = str(error(OutOfResources(280576, 232448, "shared memory"), D=512, cfg=cfg, num_stages=3))
    assert re.search(r"D=512 with block_n=64.*num_stages=3 needs 280,576 bytes.*allows 232,448"
                     r".*pass block_n=32 or num_stages=2$", msg), msg
    small = launch_decode.DecodeConfig(block_m=16, block_n=16, num_splits=4, keys_per_split=256, row_blocks=1)
    assert str(error(OutOfResources(1, 0, "shared memory"), D=4096, cfg=small, num_stages=1)).endswith("grow with D")
    assert error(OutOfResources(300, 255, "registers"), D=512, cfg=cfg, num_stages=3) is None
    assert error(RuntimeError("shared memory"), D=512, cfg=cfg, num_stages=3) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("D", [256, 512])
def test_large_head_dims_run_or_say_why_not(D):
    """Head dims up to 256 run with the launcher's defaults (issue 34 item 2); a larger one either runs
    right or stops before launch with the ValueError naming D and the shared memory."""
    from .test_launcher_strides import _dec

    partial, merge = _dec()
    q = torch.randn(1, 8, 1, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 4096, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([3000], dtype=torch.int32, device="cuda")
    try:
        o, _ = launch_decode.launch_flash_decode(partial, merge, q, k, v, lens, causal=True)
    except ValueError as exc:
        assert D > 256 and f"D={D}" in str(exc) and "shared memory" in str(exc), exc
        return
    ref = decode_attention_reference(q.double(), k.double(), v.double(), lens, causal=True)[0]
    assert float((o.double() - ref).abs().max()) < 2e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("D", [64, 128, 256])
def test_the_default_split_count_counts_the_programs_an_sm_runs_at_once(D, monkeypatch):
    """The occupancy the launcher asks the driver for is what the compiled kernel's registers, shared
    memory and threads allow by CUDA's rules (registers allocated 8 a thread and 256 a warp, 1 KiB of
    shared memory reserved per program), and flash_decode's default split count is chosen with it."""
    from attnlab import gpu_compile

    from .test_launcher_strides import _dec

    import inspect

    from attnlab import contracts

    partial, merge = _dec()
    q = torch.randn(1, 32, 1, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, 8192, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([8000], dtype=torch.int32, device="cuda")
    asked = []
    real = gpu_compile.programs_per_sm
    monkeypatch.setattr(gpu_compile, "programs_per_sm", lambda compiled: asked.append(1) or real(compiled))
    per_sm = launch_decode.partial_programs_per_sm(partial, q, k, v, lens, causal=True)
    assert launch_decode.partial_programs_per_sm(partial, q, k, v, lens, causal=True) == per_sm
    assert len(asked) <= 1       # remembered (asked here, or already by an earlier test with this kernel)
    cfg = launch_decode.decode_config(q, k, per_sm=per_sm)
    with gpu_compile.captured() as launches:
        launch_decode.launch_flash_decode(partial, merge, q, k, v, lens, causal=True)
    partial_launch = launches[0]
    num_splits_at = list(inspect.signature(contracts.decode_partial_kernel).parameters).index("num_splits")
    assert partial_launch.args[num_splits_at] == cfg.num_splits   # the launcher used the count chosen with per_sm
    res = gpu_compile.resources(partial_launch.kernel, partial_launch.args, partial_launch.constexprs,
                                num_warps=partial_launch.num_warps, num_stages=partial_launch.num_stages)
    props = torch.cuda.get_device_properties(0)
    warps = partial_launch.num_warps
    per_warp = -(-(-(-res.registers // 8) * 8 * 32) // 256) * 256
    expected = min((65536 // per_warp) // warps, props.shared_memory_per_multiprocessor // (res.shared_bytes + 1024),
                   props.max_threads_per_multi_processor // (32 * warps), 32)
    assert per_sm == expected, (res, per_sm, expected)
    o, _ = launch_decode.launch_flash_decode(partial, merge, q, k, v, lens, causal=True)
    ref = decode_attention_reference(q.double(), k.double(), v.double(), lens, causal=True)[0]
    assert float((o.double() - ref).abs().max()) < 2e-2


def test_checkers_launch_the_split_kernel_with_the_launchers_num_stages():
    """A learner's kernel is checked with the pipelining flash_decode launches it with (one shared value)."""
    import inspect

    from attnlab import verify_decode
    stages = {f.__name__: inspect.signature(f).parameters["num_stages"].default
              for f in (launch_decode.run_decode_partial, launch_decode.launch_flash_decode,
                        verify_decode.check_decode_partial_kernel, verify_decode.check_flash_decode)}
    assert set(stages.values()) == {launch_decode.NUM_STAGES}, stages

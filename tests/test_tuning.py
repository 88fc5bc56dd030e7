"""Notebook 09 (tuning, Hopper features, FP8): the given launcher's errors, the checkers against
hand-made cases, the recorded H200 measurement, and the notebook's test cells run in-process against
the model solution and each sample mistake (nbgrader grades them too, in test_grading.py's one batch;
this runs in seconds)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from attnlab import init, launch_tuning

from .notebook_runner import code_cells, run_cells

init(verbose=False)  # interpreter mode before anything imports triton

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "09_tuning_and_fp8.py"
RECORDED = ROOT / "notes" / "gpu" / "2026-11-30" / "09"
RECORDED_SWEEP = ROOT / "notes" / "gpu" / "2026-12-01" / "09"  # the full per-T sweep
GIVEN = ("setup", "tuned-kernel", "autotuned")


@pytest.fixture(scope="module")
def model():
    failed, ns = run_cells(code_cells(NOTEBOOK), GIVEN)
    return failed, ns


def test_model_solution_passes_every_test_cell_hidden_included(model):
    assert model[0] == {}


# ------------------------------------------------------------------------------ the given kernel
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("flags", [dict(), dict(use_tma=True), dict(use_tma=True, persistent=True)])
def test_given_kernel_matches_float64_attention_under_the_interpreter(model, causal, flags):
    from attnlab.reference import naive_attention

    ns = model[1]
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 256, 16, generator=g) for _ in range(3))
    o, lse = launch_tuning.launch_tuned_forward(ns["_attn_fwd_tuned"], q, k, v, causal,
                                                config=dict(BLOCK_M=64, BLOCK_N=32), **flags)
    o_ref, lse_ref = naive_attention(q.double(), k.double(), v.double(), causal=causal)
    assert (o.double() - o_ref).abs().max() < 1e-5 and (lse.double() - lse_ref).abs().max() < 1e-5


@pytest.mark.parametrize("change, exc, match", [
    (dict(T=200), ValueError, "multiple of 128"),
    (dict(D=24), ValueError, "power of two"),
    (dict(k_dtype=torch.float64), TypeError, "one dtype"),
    (dict(fp8_without_scales=True), TypeError, "FP8 needs"),
    (dict(bad_scale_shape=True), TypeError, r"shape \(B, H\)"),
    (dict(non_contiguous=True), ValueError, "contiguous"),
    (dict(config=dict(BLOCK_M=32, BLOCK_N=64)), ValueError, "BLOCK_N must divide BLOCK_M"),
    (dict(bf16=True), TypeError, "interpreter"),
])
def test_bad_input_gets_a_clear_error(model, change, exc, match):
    ns = model[1]
    T, D = change.get("T", 128), change.get("D", 16)
    q, k, v = (torch.randn(1, 2, T, D) for _ in range(3))
    kw = dict(config=change.get("config", dict(BLOCK_M=64, BLOCK_N=32)))
    if "k_dtype" in change:
        k = k.to(change["k_dtype"])
    if change.get("fp8_without_scales"):
        q, k = q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn)
    if change.get("bad_scale_shape"):
        q, k = q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn)
        kw.update(q_scale=torch.ones(2), k_scale=torch.ones(2))
    if change.get("non_contiguous"):
        q = torch.randn(1, T, 2, D).transpose(1, 2)
    if change.get("bf16"):
        q, k, v = (t.bfloat16() for t in (q, k, v))
    with pytest.raises(exc, match=match):
        launch_tuning.launch_tuned_forward(ns["_attn_fwd_tuned"], q, k, v, True, **kw)


def test_launcher_refuses_a_plain_function():
    q = torch.randn(1, 1, 128, 16)
    with pytest.raises(TypeError, match="@triton.jit"):
        launch_tuning.launch_tuned_forward(lambda *a: None, q, q, q)


@pytest.mark.parametrize("answer, passes", [("1 / 17", True), ("2 ** -4", True), ("2 ** -3", False)])
def test_e4m3_error_is_right_relative_to_the_number_or_to_its_power_of_two(answer, passes):
    """Half a step is 2^-4 of the power of two below; of the number itself, at worst 2^-4 / (1 + 2^-4)."""
    failed, _ = run_cells(code_cells(NOTEBOOK), GIVEN, "predict-fp8",
                          (("e4m3_rel_err = 2.0 ** -4", f"e4m3_rel_err = {answer}"),),
                          only={"test-predict-smem", "test-predict-fp8"})  # the first imports the checks
    assert set(failed) == (set() if passes else {"test-predict-fp8"}), failed


# ------------------------------------------------------------------------------ the checkers
def test_scale_checker_accepts_any_positive_scale_for_a_zero_head_and_names_per_tensor_scales():
    from attnlab.verify_tuning import check_fp8_scales, expected_scales

    def per_tensor(x, block_rows=None):
        return (x.abs().amax() / 448).float().expand(x.shape[0], x.shape[1]).clone()

    with pytest.raises(AssertionError, match="per head, not per tensor"):
        check_fp8_scales(per_tensor)
    x = torch.zeros(1, 2, 5, 4)
    x[0, 0, 2, 1] = -896.0
    assert expected_scales(x).tolist() == [[2.0, 0.0]]
    assert expected_scales(x, block_rows=2)[0, 0].tolist() == [0.0, 2.0, 0.0]  # rows 2-3; the last block has one row


def test_quantize_checker_allows_half_an_e4m3_step_and_no_more():
    from attnlab.verify_tuning import check_quantize_fp8

    def rounded_down(x, scale, block_rows=None):  # truncation: up to a whole step off
        y = (x.float() / scale[:, :, None, None]).clamp(-448, 448)
        f = y.to(torch.float8_e4m3fn)
        too_big = f.float().abs() > y.abs()
        down = (y * (1 - 2 ** -4)).to(torch.float8_e4m3fn).float()
        return torch.where(too_big, down, f.float()).to(torch.float8_e4m3fn)

    with pytest.raises(AssertionError, match="values are wrong"):
        check_quantize_fp8(rounded_down)


def _head_scales(x, divisor=448.0, reduce=lambda a: a.abs().amax(dim=(-2, -1))):
    return reduce(x).float() / divisor


@pytest.mark.parametrize("fn, says", [
    (lambda x, block_rows=None: _head_scales(x, reduce=lambda a: a.amax(dim=(-2, -1))), r"max\(x\) / 448"),
    (lambda x, block_rows=None: _head_scales(x, 240.0), "max [|]x[|] / 240"),
    (lambda x, block_rows=None: 1 / _head_scales(x), "448 / max [|]x[|]"),
    (lambda x, block_rows=None: _head_scales(x) + 1e-4, "an epsilon added"),
], ids=["max-not-amax", "wrong-fp8-max", "quantising-factor", "epsilon"])
def test_scale_checker_names_the_mistake(fn, says):
    from attnlab.verify_tuning import check_fp8_scales

    with pytest.raises(AssertionError, match=says):
        check_fp8_scales(fn)


def _quantize_with(transform):
    def quantize(x, scale, block_rows=None):
        return transform(x.float(), scale[:, :, None, None].float())
    return quantize


@pytest.mark.parametrize("fn, says, kw", [
    (_quantize_with(lambda x, s: (x / s).to(torch.float8_e4m3fn)), "beyond ±448", dict(scale_factor=0.5)),
    (_quantize_with(lambda x, s: ((x / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s)
                    .to(torch.float8_e4m3fn)), "x itself", {}),
    (_quantize_with(lambda x, s: (x * s).clamp(-448, 448).to(torch.float8_e4m3fn)), "These are x · scale", {}),
    (_quantize_with(lambda x, s: (x / s).clamp(-240, 240).to(torch.float8_e4m3fn)), "±240", {}),
    (_quantize_with(lambda x, s: (x / s).clamp(-448, 448).half().to(torch.float8_e4m3fn)), "rounds twice", {}),
], ids=["no-clamp", "dequantised", "multiplied", "saturates-at-240", "double-rounding"])
def test_quantize_checker_names_the_mistake(fn, says, kw):
    from attnlab.verify_tuning import check_quantize_fp8

    with pytest.raises(AssertionError, match=says):
        check_quantize_fp8(fn, **kw)


# ------------------------------------------------------------------------------ the measurement
def test_recorded_measurement_reads_back_plots_and_ships(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from importlib.resources import files

    from attnlab import bench_tuning

    rows = bench_tuning.read_csv(RECORDED_SWEEP / "tuning_results.csv")
    assert {(r.D, r.T) for r in rows} == {(d, t) for d in (64, 128) for t in (1024, 2048, 4096, 8192, 16384)}
    assert all(r.status == "ok" for r in rows) and all(r.tflops > 0 for r in rows)
    bench_tuning.write_csv(rows, tmp_path / "again.csv")
    assert bench_tuning.read_csv(tmp_path / "again.csv") == rows
    fig = bench_tuning.plot_tuning(rows, path=tmp_path / "t.png")
    plotted = sum(len(line.get_xdata()) for ax in fig.axes for line in ax.lines)
    assert (tmp_path / "t.png").stat().st_size > 10_000 and plotted == len(rows) and len(fig.axes) == 2
    shipped = files("attnlab").joinpath("data", "tuning_h200.csv").read_text()
    assert shipped == (RECORDED_SWEEP / "tuning_results.csv").read_text()  # what CPU runs of 09 plot
    env = json.loads((RECORDED_SWEEP / "tuning_env.json").read_text())
    assert env["device"] == "NVIDIA H200" and env["triton"] == "3.6.0"


def test_the_shared_memory_model_matches_every_compiled_config():
    from attnlab.verify_tuning import expected_smem

    with open(RECORDED / "smem_check.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(launch_tuning.CONFIG_SPACE)
    for r in rows:
        est = expected_smem(*(int(r[k]) for k in ("BLOCK_M", "BLOCK_N", "num_stages", "D")), 2)
        assert est == int(r["estimate"]) == int(r["compiled_smem"])


def test_prune_checker_refuses_configs_edited_to_fit():
    from attnlab.verify_tuning import check_prune_configs

    def shrink(configs, named_args, smem_limit=None, **kwargs):
        for c in configs:
            c.num_stages = 2  # every config "fits" once its pipeline is made shallow
        return [c for c in configs if 4096 % c.kwargs["BLOCK_M"] == 0]

    with pytest.raises(AssertionError, match="changed the block sizes, warps or stages"):
        check_prune_configs(shrink)

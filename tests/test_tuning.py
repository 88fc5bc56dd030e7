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
from .interpreter import interpreter_only

pytestmark = interpreter_only

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


@pytest.mark.parametrize("scale_rows, block_n, causal, T", [(16, 32, True, 256), (32, 32, True, 256),
                                                           (64, 128, False, 256), (64, 32, True, 256),
                                                           (128, 64, True, 256), (256, 64, True, 384)])
def test_block_scales_multiply_each_score_by_its_rows_and_its_keys_scales(model, scale_rows, block_n, causal, T):
    """SCALE_ROWS: score (i, j) of head bh is multiplied by QS[bh, i // SCALE_ROWS] * KS[bh, j // SCALE_ROWS].
    FP8 does not run under the interpreter, but this path does not depend on the dtype, so float32
    Q and K with block scales check its indexing here, 4 heads, BLOCK_M = 64: a scale per row and per key
    (16, 32), per row and per key tile (32, 32), per query tile and per key (64, 128), per tile (64, 32 and
    128, 64), and a last block shorter than the others (256 rows of T = 384)."""
    import triton

    from attnlab.reference import naive_attention

    ns = model[1]
    B, H, D = 2, 2, 16
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    n_blocks = triton.cdiv(T, scale_rows)
    qs, ks = (torch.rand(B, H, n_blocks, generator=g) * 3 + 0.25 for _ in range(2))
    o, lse = torch.full_like(v, float("nan")), torch.full((B, H, T), float("nan"))
    ns["_attn_fwd_tuned"][(T // 64, B * H)](q, k, v, o, lse, qs, ks, T, B * H, 1, D ** -0.5, CAUSAL=causal, HEAD_DIM=D,
                                            BLOCK_M=64, BLOCK_N=block_n, USE_TMA=False, WARP_SPEC=False,
                                            PERSISTENT=False, SCALE_ROWS=scale_rows)
    spread = lambda s: s.double().repeat_interleave(scale_rows, dim=2)[:, :, :T, None]  # noqa: E731
    o_ref, lse_ref = naive_attention(q.double() * spread(qs), k.double() * spread(ks), v.double(), causal=causal)
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
    (dict(fp8_blocks=48), ValueError, "block_rows=48 must be a power of two"),
    (dict(fp8_blocks=2 ** 31), ValueError, r"block_rows=2147483648 must be a power of two, at most T=128"),
    (dict(block_rows_without_fp8=True), ValueError, "block_rows=64 is for FP8 q and k"),
    (dict(block_rows_float=True), TypeError, "block_rows must be an int"),
    (dict(fp8_blocks=32, per_head_scales=True), TypeError, r"shape \(B, H, ceil\(T / block_rows\)\)"),
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
    if change.get("fp8_blocks"):
        q, k = q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn)
        n = 1 if change.get("per_head_scales") else -(-T // change["fp8_blocks"])
        kw.update(q_scale=torch.ones(1, 2, n).squeeze(-1) if n == 1 else torch.ones(1, 2, n),
                  k_scale=torch.ones(1, 2) if n == 1 else torch.ones(1, 2, n), block_rows=change["fp8_blocks"])
    if change.get("block_rows_without_fp8"):
        kw.update(block_rows=64)
    if change.get("block_rows_float"):
        q, k = q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn)
        kw.update(q_scale=torch.ones(1, 2, 2), k_scale=torch.ones(1, 2, 2), block_rows=64.0)
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


# ------------------------------------------------------------------------------ cases drawn at grading time
def _smem(block_m, block_n, num_stages, head_dim, elem_bytes):
    return (block_m + 2 * num_stages * block_n) * head_dim * elem_bytes


def _spread(x, scale, block_rows):
    if block_rows is None:
        return scale[:, :, None, None]
    return scale.repeat_interleave(block_rows, dim=2)[:, :, :x.shape[2], None]


def _quantize(x, scale, block_rows=None):
    return (x.float() / _spread(x, scale, block_rows)).clamp(-448, 448).to(torch.float8_e4m3fn)


def _prune(configs, named_args, smem_limit=None, **kwargs):
    a = {**named_args, **kwargs}
    limit = launch_tuning.smem_limit_bytes() if smem_limit is None else smem_limit
    return [c for c in configs if a["T"] % c.kwargs["BLOCK_M"] == 0 and a["T"] % c.kwargs["BLOCK_N"] == 0
            and not (a["CAUSAL"] and c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"])
            and _smem(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages, a["HEAD_DIM"],
                      a["Q"].element_size()) <= limit]


def test_a_table_of_the_fixed_cases_passes_them_and_fails_the_drawn_ones():
    from attnlab.verify_tuning import check_smem_estimate

    table = {args: _smem(*args) for args in ((64, 64, 2, 64, 2), (128, 64, 3, 128, 2), (128, 128, 4, 128, 2),
                                             (64, 32, 3, 128, 1), (128, 32, 2, 64, 4))}

    def lookup(*args):
        return table.get(args, 0)

    check_smem_estimate(lookup)  # what the hidden test asked before this issue
    with pytest.raises(AssertionError, match=r"drawn at grading time .* replay=0x"):
        check_smem_estimate(lookup, draw=40, seed=9)


def test_drawn_cases_differ_between_calls_and_come_back_with_replay(monkeypatch):
    from attnlab import verify_tuning

    def seen_by(replay=None):
        calls = []

        def spy(*args):
            calls.append(args)
            return _smem(*args)

        verify_tuning.check_smem_estimate(spy, cases=(), draw=20, seed=3, replay=replay)
        return calls

    assert seen_by() != seen_by()  # 20 draws from 6 x 6 x 8 x 64 x 3 values: equal by chance ~never
    assert seen_by(replay=0x1234) == seen_by(replay=0x1234) != seen_by(replay=0x1235)
    monkeypatch.setattr(verify_tuning, "REPLAY", 0x1234)  # ATTNLAB_CHECK_SEED, read at import
    assert seen_by() == seen_by(replay=0x1234)
    for text, value in (("0x1234", 0x1234), ("4660", 0x1234), ("", None), ("not a number", None)):
        monkeypatch.setenv(verify_tuning.SEED_ENV, text)
        assert verify_tuning.replay_from_env() == value


def test_a_drawn_failure_names_its_draw_and_the_replay_repeats_it():
    import re

    from attnlab.verify_tuning import check_fp8_scales

    def per_tensor(x, block_rows=None):  # right only where a tensor has one group
        s = (x.abs().amax().float() / 448).clamp_min(1e-30)
        return s.expand(*x.shape[:2], *(() if block_rows is None else (-(-x.shape[2] // block_rows),))).clone()

    with pytest.raises(AssertionError) as first:
        check_fp8_scales(per_tensor, draw=12, seed=4)
    draw = int(re.search(r"replay=(0x[0-9a-f]+)", str(first.value)).group(1), 16)
    with pytest.raises(AssertionError) as again:
        check_fp8_scales(per_tensor, draw=12, seed=4, replay=draw)
    assert str(again.value) == str(first.value)


def test_drawn_cases_cover_the_regimes_the_helpers_must_handle():
    from attnlab import verify_tuning as vt

    d = vt.Draw("test", 200, 0, 7)
    fp8 = [vt.drawn_fp8_case(d) for _ in range(200)]
    assert {c["dtype"] for c in fp8} == set(vt.FLOATS)
    assert any(c["block_rows"] is None for c in fp8) and any(c["zero_blocks"] for c in fp8)
    assert any(c["block_rows"] and c["T"] % c["block_rows"] for c in fp8)  # a ragged last block
    assert any(c["block_rows"] and c["block_rows"] > c["T"] for c in fp8)  # one short block
    assert all(c["negative_heads"] for c in fp8) and sum(bool(c["zero_heads"]) for c in fp8) > 100
    smem = [vt.drawn_smem_case(d) for _ in range(200)]
    assert {s[4] for s in smem} == {1, 2, 4} and {s[2] for s in smem} == set(range(1, 9))
    assert any(s[3] & (s[3] - 1) for s in smem)  # head dims that are not powers of two
    prune = [vt.drawn_prune_case(d) for _ in range(60)]
    assert {p["causal"] for p in prune} == {False, True} and any(p["smem_limit"] is None for p in prune)
    assert {p["where"]["HEAD_DIM"] for p in prune} == {"named", "kwargs"}
    assert len({len(p["settings"]) for p in prune}) > 10


@pytest.mark.parametrize("wrong, says", [
    (lambda configs, named_args, smem_limit=None, **kw: _prune(configs, {**named_args, "HEAD_DIM": 64},
                                                                smem_limit, **{**kw, "HEAD_DIM": 64}), "Kept|Dropped"),
    (lambda configs, named_args, smem_limit=None, **kw: _prune(configs, named_args, smem_limit, **kw)[::-1],
     "order|kept"),
    (lambda configs, named_args, smem_limit=None, **kw: _prune(list(configs), dict(named_args, **kw), smem_limit),
     None),  # honest: merges the two mappings itself
], ids=["fixed-head-dim", "reversed", "honest-merge"])
def test_drawn_prune_cases_need_the_rule_in_the_given_order(wrong, says):
    from attnlab.verify_tuning import check_prune_configs

    if says is None:
        check_prune_configs(wrong, draw=12, seed=1)
        return
    with pytest.raises(AssertionError, match=says):
        check_prune_configs(wrong, draw=12, seed=1)


def test_prune_reads_names_wherever_the_launch_put_them():
    from attnlab.verify_tuning import check_prune_configs

    def named_only(configs, named_args, smem_limit=None, **kwargs):
        return _prune(configs, named_args, smem_limit, **{k: named_args[k] for k in () if k in named_args})

    with pytest.raises(AssertionError, match="look each name up in both"):
        check_prune_configs(named_only, draw=12, seed=2)
    check_prune_configs(_prune, draw=12, seed=2)


# ------------------------------------------------------------------------------ saturation, whatever converts
def test_the_e4m3_table_decodes_every_bit_pattern_as_torch_does():
    from attnlab.verify_tuning import E4M3_VALUES

    torch_values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    same = (torch_values == E4M3_VALUES) | (torch_values.isnan() & E4M3_VALUES.isnan())
    assert bool(same.all()) and E4M3_VALUES.nan_to_num().abs().max() == 448


@pytest.mark.parametrize("convert", [
    lambda y: torch.div(y, 1.0, out=torch.empty(y.shape, dtype=torch.float8_e4m3fn)),
    lambda y: torch.mul(y, 1.0, out=torch.empty(y.shape, dtype=torch.float8_e4m3fn)),
    lambda y: y.to(torch.complex64).to(torch.float8_e4m3fn),
    lambda y: y.to(torch.float8_e5m2).to(torch.float8_e4m3fn),
    lambda y: y.round().int().to(torch.float8_e4m3fn),
    lambda y: torch.empty(y.shape, dtype=torch.float8_e4m3fn).copy_(y),
    lambda y: y.type(torch.float8_e4m3fn),
    lambda y: torch.tensor(y.tolist(), dtype=torch.float8_e4m3fn),
    lambda y: torch.from_numpy(y.numpy()).to(torch.float8_e4m3fn),
], ids=["div-out", "mul-out", "complex", "e5m2", "int", "copy-into", "type", "from-list", "numpy"])
def test_no_conversion_skips_saturation(convert):
    from attnlab.verify_tuning import check_quantize_fp8

    def quantize(x, scale, block_rows=None):
        return convert(x.float() / _spread(x, scale, block_rows))

    with pytest.raises(AssertionError, match="beyond ±448|cannot see what was converted"):
        check_quantize_fp8(quantize, draw=4, seed=3)


@pytest.mark.parametrize("saturate", [
    lambda y: y.clamp(-448, 448).to(torch.float8_e4m3fn),
    lambda y: torch.empty(y.shape, dtype=torch.float8_e4m3fn).copy_(torch.clamp(y, -448, 448)),
    lambda y: torch.where(y.abs() > 448, y.sign() * 448, y).to(torch.float8_e4m3fn),
    lambda y: torch.minimum(torch.maximum(y, torch.tensor(-448.0)), torch.tensor(448.0)).double()
    .to(torch.float8_e4m3fn),
], ids=["clamp", "copy-into", "where", "min-max-float64"])
def test_any_saturation_before_the_conversion_keeps_full_marks(saturate):
    from attnlab.verify_tuning import check_quantize_fp8

    def quantize(x, scale, block_rows=None):
        return saturate(x.float() / _spread(x, scale, block_rows))

    check_quantize_fp8(quantize, draw=12, seed=3)
    check_quantize_fp8(quantize, scale_factor=0.5)


# ------------------------------------------------------------------------------ the references are refused
_REFERENCE_CALLS = {
    "expected_smem": lambda vt, *a: vt.expected_smem(*a),
    "expected_kept": lambda vt, *a: vt.expected_kept([a[:3]], 1 << 20, a[3], a[4], False, 1 << 60)[0] and _smem(*a),
    "expected_scales": lambda vt, *a: _smem(*a) + 0 * int(vt.expected_scales(torch.ones(1, 1, 1, 1)).sum()),
    "group_max": lambda vt, *a: _smem(*a) + 0 * int(vt.group_max(torch.ones(1, 1, 1, 1), None).sum()),
    "saturated": lambda vt, *a: _smem(*a) + 0 * int(vt.saturated(torch.ones(1), torch.ones(1)).sum()),
}


@pytest.mark.parametrize("name", sorted(_REFERENCE_CALLS))
def test_a_reference_called_from_learner_code_fails_the_check_and_is_flagged(name, capsys):
    from attnlab import verify_tuning as vt

    def learner(*args):
        return _REFERENCE_CALLS[name](vt, *args)

    with pytest.raises(AssertionError, match=f"called attnlab.verify_tuning.{name}.*refused"):
        vt.check_smem_estimate(learner, cases=((64, 64, 2, 64, 2),))
    assert f"needs review: smem_estimate: learner code called the checkers' reference attnlab.verify_tuning.{name}" \
        in capsys.readouterr().out
    assert vt.expected_smem(64, 64, 2, 64, 2) == 40960  # the tests themselves may still call it


def test_every_model_the_checks_compare_with_is_wired():
    from attnlab import verify_tuning as vt

    wired = {name for name, f in vars(vt).items()
             if "_refuse_learner_callers" in getattr(getattr(f, "__code__", None), "co_names", ())}
    assert wired == set(_REFERENCE_CALLS)


def _unwrapped(fn):
    """Every callable learner code can reach from ``fn``'s attributes: closure cells, ``__wrapped__``,
    defaults, its ``__dict__`` (the red team's ``__closure__[0].cell_contents``)."""
    found = [c.cell_contents for c in fn.__closure__ or ()]
    found += [getattr(fn, "__wrapped__", None), *(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values(),
              *vars(fn).values()]
    return [f for f in found if callable(f)]


@pytest.mark.parametrize("name", sorted(_REFERENCE_CALLS))
@pytest.mark.parametrize("how", ["attributes", "code-copy"])
def test_a_reference_unwrapped_from_its_function_object_is_refused_too(name, how):
    """The refusal is a mechanism, not a scan of the cell's text: nothing reachable from a reference's
    function object computes the model without refusing (before, the guarded wrapper held the model in
    its closure, and ``expected_smem.__closure__[0].cell_contents(...)`` kept 9/9), and a function
    rebuilt from its code object refuses as the original does."""
    import types

    from attnlab import verify_tuning as vt

    def unwrapped():
        fn = getattr(vt, name)
        if how == "code-copy":
            return [types.FunctionType(fn.__code__, fn.__globals__)]
        return _unwrapped(fn)

    def learner(*args):
        for f in unwrapped():
            try:
                return _REFERENCE_CALLS[name](types.SimpleNamespace(**{name: f}), *args)
            except (TypeError, AttributeError):
                continue
        return 0  # nothing to call: the learner has to compute it

    assert how == "code-copy" or not unwrapped(), unwrapped()
    with pytest.raises(AssertionError):
        vt.check_smem_estimate(learner, cases=((64, 64, 2, 64, 2),))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the refusal, in the thread
@pytest.mark.parametrize("how", ["caught", "thread", "disarmed"])
def test_hiding_the_call_does_not_help(how):
    import threading

    from attnlab import verify_tuning as vt

    def learner(*args):
        if how == "thread":
            out = []
            t = threading.Thread(target=lambda: out.append(vt.expected_smem(*args)))
            t.start()
            t.join()
            return out[0] if out else 0
        if how == "disarmed":
            vt.WIRE.armed = 0
        try:
            return vt.expected_smem(*args)
        except Exception:  # noqa: BLE001
            return 0

    with pytest.raises(AssertionError, match="refused"):
        vt.check_smem_estimate(learner, cases=((64, 64, 2, 64, 2),))
    assert vt.WIRE.armed == 0
    vt.check_smem_estimate(_smem, draw=5)  # the wire is as before


def test_while_autograding_code_outside_the_package_cannot_call_a_reference(monkeypatch):
    from attnlab import verify_tuning as vt
    from attnlab.grading.kernel import guard

    monkeypatch.setattr(guard, "active", lambda: True)
    with pytest.raises(vt.ReferenceRefused):
        vt.expected_smem(64, 64, 2, 64, 2)  # a table built from the model before any check runs
    vt.check_smem_estimate(_smem, draw=5)
    vt.check_quantize_fp8(_quantize, draw=2)  # the checkers, in the package, still use their models


def test_while_autograding_another_module_of_the_package_cannot_call_a_reference_for_a_cell(monkeypatch):
    """A cell had hints.diagnosed call a reference through functools.partial, read the value off the
    error's text and built a table of every drawable case (red team, 2026-12-02)."""
    import functools

    from attnlab.checking import hints
    from attnlab import verify_tuning as vt
    from attnlab.grading.kernel import guard

    def fail():
        raise AssertionError("x")

    monkeypatch.setattr(guard, "active", lambda: True)
    with pytest.raises(vt.ReferenceRefused):
        hints.diagnosed(fail, functools.partial(vt.expected_smem, 64, 64, 2, 64, 2))


def test_the_guard_puts_back_the_models_and_the_replay_number_a_cell_rebound():
    """While autograding, a solution cell that rebinds the models (to grade against its own values), the
    replay number or the random source (to draw cases it knows) has it undone before the next test cell,
    and the draw is fresh again; run in a fresh interpreter (the guard is process-wide)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import json
        from attnlab.grading.kernel import guard
        guard.install()
        from attnlab import verify_tuning as vt
        real = (vt.expected_smem, vt.REPLAY, vt._urandom, vt.expected_smem.__code__)
        vt.expected_smem = lambda *a: 0
        vt.REPLAY, vt._urandom = 7, lambda n: bytes(n)
        vt._spread.__code__ = (lambda *a, **k: 0).__code__  # a helper of the checks (the models are closures)
        notes = json.loads(guard.before_locked({}))["notes"]
        assert (vt.expected_smem, vt.REPLAY, vt._urandom, vt.expected_smem.__code__) == real
        assert vt.Draw("c", 1, 0, None).draw != vt.Draw("c", 1, 0, None).draw
        print(json.dumps(notes))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = " | ".join(json.loads(proc.stdout.strip().splitlines()[-1]))
    for name in ("expected_smem had been replaced", "REPLAY had been replaced", "_urandom had been replaced",
                 "the code of attnlab.verify_tuning._spread"):
        assert name in notes, notes


def test_a_cpu_tensor_on_a_gpu_host_asks_no_gpu(monkeypatch):
    # the interpreter on a GPU host (seen on the H200): sm_count(q.device) of a CPU tensor asked CUDA for "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: asked.append(d) or _Props())
    assert launch_tuning.sm_count(torch.device("cpu")) == 4
    assert launch_tuning.smem_limit_bytes("cpu") == launch_tuning.H200_SMEM_BYTES
    assert not asked
    assert launch_tuning.sm_count(torch.device("cuda", 1)) == 132 and asked == [torch.device("cuda", 1)]
    assert launch_tuning.sm_count() == 132 and asked[-1] == 0


class _Props:
    multi_processor_count = 132
    shared_memory_per_block_optin = 232448

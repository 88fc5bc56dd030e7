# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · The scale-up sweep
#
# *Attention Kernels Lab, notebook 6 of 6.* You have a FlashAttention kernel (notebook 05). Now
# measure it the way a performance engineer would: against PyTorch's own attention
# (`scaled_dot_product_attention`, SDPA) and against naive attention, for sequence lengths from
# 512 to 8192 and beyond, and see the whole argument of this lab in one plot.
#
# **You need a GPU for the real sweep.** Without one, this notebook says so, runs a tiny dry sweep
# through Triton's interpreter (so every measuring and plotting cell is exercised), and skips the
# real one. In Colab: *Runtime → Change runtime type → GPU*.
#
# Graded here: the predictions (numbers autograded, explanations by hand) and your written
# explanations. The measurements themselves are yours to interpret.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode and loads the course's support package.
from attnlab import init

RUNTIME = init()

from pathlib import Path

import torch

from attnlab import bench, sweep
from attnlab.nbload import NotebookLoadError, load_notebook_module

# %% [markdown]
# ## 1. Predict before you measure
#
# Work these out by hand (a calculator is fine) before running anything. Use $B = 8$, $H = 16$,
# $T = 2048$, $D = 64$, bf16 (2 bytes per element), causal attention.
#
# 1. `score_matrix_bytes`: the bytes of the full score matrix $S$ for the whole batch and all heads.
# 2. `causal_forward_flops`: the forward FLOPs of causal attention, counted the standard way:
#    $4 \cdot B \cdot H \cdot T^2 \cdot D$ for two matrix products, halved for causal.
# 3. `microseconds_at_700_tflops`: how long that many FLOPs take at 700 TFLOP/s (about a
#    Hopper GPU's measured bf16 matmul rate), in microseconds.

# %% nbgrader={"grade_id": "predictions", "solution": true}
score_matrix_bytes = None
causal_forward_flops = None
microseconds_at_700_tflops = None
### BEGIN SOLUTION
score_matrix_bytes = 8 * 16 * 2048**2 * 2          # 2**30 bytes = 1 GiB
causal_forward_flops = 4 * 8 * 16 * 2048**2 * 64 / 2  # about 6.9e10
microseconds_at_700_tflops = causal_forward_flops / 700e12 * 1e6  # about 98 us
### END SOLUTION

# %% nbgrader={"grade_id": "test_predictions", "grade": true, "locked": true, "points": 3}
from attnlab.checks import assert_number, require_number

for _name in ("score_matrix_bytes", "causal_forward_flops", "microseconds_at_700_tflops"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
assert_number(score_matrix_bytes, 2**30, name="score_matrix_bytes", rel=0.01)
assert_number(causal_forward_flops, 4 * 8 * 16 * 2048**2 * 64 / 2, name="causal_forward_flops", rel=0.01)
assert_number(microseconds_at_700_tflops, 4 * 8 * 16 * 2048**2 * 64 / 2 / 700e12 * 1e6,
              name="microseconds_at_700_tflops", rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# **P4.** At $T = 512$, which do you expect to matter more for your kernel: the time saved by fusion
# (no $T^2$ matrices in memory) or the fixed cost of launching kernels? And why should
# FlashAttention's advantage over naive attention *grow* with $T$?

# %% [markdown] nbgrader={"grade_id": "answer-predict-small-T", "solution": true, "grade": true, "points": 2}
# At $T = 512$ the score matrix of one head is only $512^2 \cdot 2 = 0.5$ MiB and the whole batch
# moves a few hundred MB: naive attention's extra traffic costs tens of microseconds, the same order
# as a few kernel launches (about 5 to 10 µs each) and as the ramp-up of a small grid. So fusion helps
# but launch overhead and too little parallel work per head are comparable costs. As $T$ grows, the
# naive extra traffic grows like $T^2$ while the fused kernel's traffic grows like $T \cdot d$ per
# pass over K and V and its work like $T^2 d$: the fused kernel becomes compute-bound and approaches
# the matmul ceiling, while naive attention stays bound by the $T^2$ bytes (and eventually runs out
# of memory), so the gap widens.

# %% [markdown]
# ## 2. Measuring right
#
# - **Asynchrony.** A CUDA launch returns before the GPU finishes. Timing with `time.time()` around
#   a call measures the launch, not the work. `triton.testing.do_bench` records CUDA events around
#   many repetitions and synchronises before reading them.
# - **Warm-up.** The first call compiles Triton kernels, loads cuDNN plans and allocates memory.
#   `do_bench` runs the function for a warm-up period first (its `warmup` and `rep` arguments are
#   milliseconds, not counts) and clears the L2 cache between runs.
# - **Medians.** Report the median of many runs; a mean is dragged by the odd slow run.
# - **FLOPs.** Forward attention is $4 B H T^2 D$ FLOPs ($2 T^2 D$ per head for $QK^\top$ and the
#   same for $PV$), halved when causal. TFLOP/s = FLOPs / seconds / $10^{12}$.
# - **Which kernel is SDPA?** `scaled_dot_product_attention` dispatches to one of several backends.
#   On recent PyTorch on Hopper (H100/H200) the default for bf16 is **cuDNN**, not
#   FlashAttention-2. To compare against a specific one, pin it:
#   `with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION): ...`.
# - **Never time zeros.** Random inputs only: some hardware is measurably faster on zeros.
# - **Time the kernel, not the harness.** `do_bench` reads CUDA events on the GPU, so it measures
#   the GPU work between them, and that includes every GPU idle moment while the host is still
#   preparing the launch. Your launcher `triton_flash_attention` checks its inputs, allocates two
#   NaN-filled outputs (a testing aid: two fill kernels) and goes through Triton's Python launch
#   path on every call. The sweep therefore times your kernel alone (`sweep.kernel_only`: the raw
#   launch into outputs allocated once, as SDPA writes into a fresh output without a fill), and
#   section 5 measures the host's share as an experiment of its own.

# %% [markdown]
# ## 3. Load your kernel from notebook 05
#
# The cell below imports four cells of `05_triton_flash.ipynb` from this folder (its set-up, your
# kernel and the given launcher; no tests, timings or predictions) and takes
# `triton_flash_attention` from them. If your notebook 05 is missing
# or its code fails, the sweep runs without "yours" and says why.

# %% nbgrader={"grade_id": "load-yours", "locked": true}
def load_yours(path="05_triton_flash.ipynb"):
    """Your kernel from notebook 05: (fn(q, k, v, causal) -> o through your launcher, the launcher,
    the @triton.jit kernel itself); (None, None, None) if it cannot be loaded."""
    try:
        nb05 = load_notebook_module(path, required=("triton_flash_attention", "_flash_fwd_kernel"),
                                    cells=("bootstrap", "setup", "_flash_fwd_kernel", "triton_flash_attention"))
    except NotebookLoadError as exc:
        print(f"Your kernel is not available, so the sweep runs without it: {exc}")
        return None, None, None
    fwd = nb05.triton_flash_attention

    def yours(q, k, v, causal, **config):
        return fwd(q, k, v, causal=causal, **config)[0]

    return yours, fwd, nb05._flash_fwd_kernel


yours, triton_flash_attention, flash_kernel = load_yours()
print("your kernel:", "loaded" if yours else "not loaded")

# %% [markdown]
# Before timing anything, check that the kernel is right at the sizes you are about to time:
# a fast wrong kernel is worth nothing.

# %%
if yours is not None:
    T_check = 1024 if not RUNTIME.interpret else 32
    D_check = 64 if not RUNTIME.interpret else 16
    dtype_check = torch.bfloat16 if not RUNTIME.interpret else torch.float32
    q, k, v = (torch.randn(2, 4, T_check, D_check, device=RUNTIME.device, dtype=dtype_check) for _ in range(3))
    o = yours(q, k, v, True)
    o_ref = sweep.sdpa(q.float(), k.float(), v.float(), True)
    rel = ((o.float() - o_ref).norm() / o_ref.norm()).item()
    print(f"relative error vs SDPA in float32: {rel:.2e}", "(ok)" if rel < 2e-2 else "(TOO LARGE: fix notebook 05 first)")
    if not rel < 2e-2:
        yours = None

# %% [markdown]
# ## 4. The sweep
#
# Three implementations, bf16, $B = 8$, $H = 16$, $D = 64$, causal: your kernel alone (launched as
# your launcher launches it, with its default tiles, into outputs allocated once), SDPA, and naive
# attention as three library calls (matmul, softmax, matmul; see `attnlab.sweep.naive_unfused`).
# Each point is a `do_bench` median. Out-of-memory is recorded, not fatal: that implementation
# is then skipped at larger $T$. Set `HEAD_DIM = 128` to repeat with larger heads.

# %%
HEAD_DIM = 64
if RUNTIME.interpret:
    print("No GPU: running a tiny dry sweep through the interpreter. Its timings mean nothing; "
          "it only exercises the measuring and plotting code.")
    SHAPE = dict(B=1, H=1, D=16, dtype=torch.float32, device="cpu")
    T_VALUES = [16, 32]
else:
    SHAPE = dict(B=8, H=16, D=HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    T_VALUES = [512, 1024, 2048, 4096, 8192, 16384]

impls = {"sdpa": sweep.sdpa, "naive": sweep.naive_unfused}
if yours is not None:
    impls = {"yours": sweep.kernel_only(flash_kernel), **impls}
points = sweep.run_sweep(impls, T_VALUES, causal=True, **SHAPE)
results_csv = sweep.write_csv(points, "sweep_results.csv")
for p in points:
    print(f"{p.impl:>6}  T={p.T:>6}  {p.ms:9.3f} ms  {p.tflops:7.1f} TFLOP/s  "
          f"{p.peak_mem_gib:6.2f} GiB  {p.status}")
print("table written to", results_csv)

# %% [markdown]
# ## 5. What one call costs the host
#
# The same kernel, three ways of calling it, at a small and a large $T$. `GPU µs` is the
# `do_bench` median (the GPU's time between its events); `host µs` is the time the host needs to
# issue one call (100 calls in a row without waiting for the GPU, `bench.per_call_us`); `wall µs`
# is the time per call of those 100 calls until the GPU has finished them all. When the host
# needs longer to issue a call than the GPU needs to run it, the GPU waits between kernels and the
# wall time follows the host, whatever the kernel's speed.

# %%
if yours is None:
    print("Skipped: your kernel is not available.")
else:
    if RUNTIME.interpret:
        print("No GPU: a tiny dry run through the interpreter; its timings mean nothing.")
        overhead_shape, overhead_Ts, n_calls = dict(B=1, H=1, D=16, dtype=torch.float32), [16], 2
    else:
        overhead_shape, overhead_Ts, n_calls = dict(B=8, H=16, D=HEAD_DIM, dtype=torch.bfloat16), [512, 4096], 100
    kernel_alone = sweep.kernel_only(flash_kernel)
    print(f"{'T':>6} {'call':<37} {'GPU µs':>8} {'host µs':>8} {'wall µs':>8}")
    for T in overhead_Ts:
        B_, H_, D_, dt = overhead_shape["B"], overhead_shape["H"], overhead_shape["D"], overhead_shape["dtype"]
        q, k, v = (torch.randn(B_, H_, T, D_, device=RUNTIME.device, dtype=dt) for _ in range(3))
        calls = {"your kernel alone (raw launch)": lambda: kernel_alone(q, k, v, True),
                 "your launcher triton_flash_attention": lambda: triton_flash_attention(q, k, v, causal=True),
                 "SDPA": lambda: sweep.sdpa(q, k, v, True)}
        for label, call in calls.items():
            gpu_us = bench.median_ms(call) * 1e3
            per = bench.per_call_us(call, n_calls=n_calls, repeats=7 if n_calls > 2 else 1)
            print(f"{T:>6} {label:<37} {gpu_us:>8.1f} {per.host_us:>8.1f} {per.wall_us:>8.1f}")
    del q, k, v

# %% [markdown]
# ## 6. The plot
#
# The dashed line is the device's dense bf16 matmul rate, measured here: the most any attention
# kernel can hope for, since attention is two matmuls plus a softmax.

# %%
ceiling = None if RUNTIME.interpret else bench.matmul_tflops(8192)
title = f"{RUNTIME.name}, torch {torch.__version__}, causal, B={SHAPE['B']} H={SHAPE['H']} D={SHAPE['D']}"
fig = sweep.plot_sweep(points, ceiling_tflops=ceiling, title=title, path="sweep.png")
if not RUNTIME.interpret:
    _q = torch.randn(8, 16, 2048, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    print("SDPA dispatched to:", bench.sdpa_backend(_q, _q, _q, causal=True))

# %% [markdown]
# ## 7. Tuning
#
# Time your kernel over a small grid of tile sizes, warps and pipeline stages at one $T$. Larger
# tiles reuse each loaded $K/V$ tile for more queries but need more registers (and may spill);
# more stages overlap the next tile's loads with the current tile's math but need more shared
# memory.

# %%
if yours is None:
    print("Tuning skipped: your kernel is not available.")
    tuned = []
else:
    if RUNTIME.interpret:
        grid = dict(block_m=[16], block_n=[16, 32], num_warps=[4], num_stages=[2])
        tune_shape = dict(T=32, B=1, H=1, D=16, dtype=torch.float32, device="cpu")
    else:
        grid = dict(block_m=[64, 128], block_n=[32, 64, 128], num_warps=[4, 8], num_stages=[2, 3, 4])
        tune_shape = dict(T=4096, B=8, H=16, D=HEAD_DIM, dtype=torch.bfloat16, device="cuda")

    def make_fn(**config):
        return sweep.kernel_only(flash_kernel, **config)

    tuned = sweep.tune(make_fn, grid, causal=True, **tune_shape)
    sweep.write_csv(tuned, "tuning_results.csv")
    for p in tuned[:8]:
        print(f"{p.config:<55} {p.ms:8.3f} ms  {p.tflops:7.1f} TFLOP/s  {p.status}")

# %% [markdown]
# **Q1.** Which configuration won, by how much over the launcher's default
# (`block_m=64, block_n=64, num_warps=4, num_stages=2`), and why? Argue from register use, reuse of
# K/V tiles, and pipelining. (If you have no GPU, say what you would expect and why.)

# %% [markdown] nbgrader={"grade_id": "answer-tuning", "solution": true, "grade": true, "points": 2}
# On an H200 with D = 64, a larger query tile (block_m = 128) usually wins: each K/V tile loaded from
# HBM serves twice as many queries, halving K/V traffic per FLOP, and eight warps give the larger
# tile enough threads to keep the tensor cores busy. Key tiles of 64 balance the size of the score
# tile held in registers against loop overhead; 128 often spills or lowers occupancy. Three stages
# let the loads of the next K/V tile overlap the current tile's matmuls; more stages cost shared
# memory without further gain. The exact winner depends on the device: the point is to measure, then
# explain the ranking with reuse, registers and overlap.

# %% [markdown]
# ## 8. Check yourself
#
# **Q2.** Decoding one token against a 32k-token KV cache ($B = 1$, 32 heads, $T_q = 1$): why does
# your kernel underuse the GPU, and what does FlashDecoding (split-K) change?

# %% [markdown] nbgrader={"grade_id": "answer-split-k", "solution": true, "grade": true, "points": 1}
# With one query row the grid has cdiv(1, BLOCK_M) × B·H = 32 programs, far fewer than an H200's
# 132 multiprocessors, and each program walks all 32k keys one tile after another: most of the chip
# idles and the run is a long serial loop. Split-K divides the keys among many programs per head;
# each computes a partial (m, l, acc) over its slice, and a small second kernel merges the partials
# with the same rescaling rule as the online softmax ($\text{acc}$ and $\ell$ multiplied by
# $e^{m_i - m}$ for the global max $m$). Now enough programs run to saturate memory bandwidth,
# which is what decoding is bound by.

# %% [markdown]
# **Q3.** With grouped-query attention (8 K/V heads shared by 32 query heads), how would you change
# the kernel so that a K/V tile loaded once serves several query heads, and what does that buy?

# %% [markdown] nbgrader={"grade_id": "answer-gqa", "solution": true, "grade": true, "points": 1}
# Map each program to a K/V head (and a query tile), and let it process all 4 query heads of that
# group: either loop over them or stack their query rows into one taller tile. Each K/V tile then
# comes from HBM once and feeds 4 query heads, raising arithmetic intensity by the group size. At
# decode time, where reading K and V dominates, that cuts the bytes per generated token by about 4×.

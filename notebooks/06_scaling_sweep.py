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
# Notebook 05 had you cost one point, $T = 2048$. The sweep runs from $T = 512$ to $16384$; work
# out what to expect at its ends by hand (a calculator is fine) before running anything. Use
# $B = 8$, $H = 16$, $D = 64$, bf16 (2 bytes per element), causal attention, FLOPs counted the
# standard way ($4 \cdot B \cdot H \cdot T^2 \cdot D$, halved for causal).
#
# 1. `kernel_us_at_512`: the time in **microseconds** the causal forward's FLOPs take at
#    $T = 512$ at 700 TFLOP/s (about an H200's measured bf16 matmul rate): the shortest a call can be.
# 2. `flops_ratio_16384_to_512`: how many times more FLOPs the forward does at $T = 16384$ than at
#    $T = 512$.
# 3. `naive_min_ms_at_8192`: a lower bound, in **milliseconds**, for naive attention at $T = 8192$:
#    the time to write the score matrix $S$, read it, write $P$ and read it ($4 B H T^2$ elements
#    of 2 bytes, notebook 02, section 4) at 4.27 TB/s, the copy bandwidth measured on an H200.

# %% nbgrader={"grade_id": "predictions", "solution": true}
kernel_us_at_512 = None
flops_ratio_16384_to_512 = None
naive_min_ms_at_8192 = None
### BEGIN SOLUTION
kernel_us_at_512 = 4 * 8 * 16 * 512**2 * 64 / 2 / 700e12 * 1e6  # about 6.1 us
flops_ratio_16384_to_512 = (16384 / 512) ** 2                      # 1024: FLOPs grow like T^2
naive_min_ms_at_8192 = 4 * 8 * 16 * 8192**2 * 2 / 4.27e12 * 1e3   # 64 GiB moved: about 16 ms
### END SOLUTION

# %% nbgrader={"grade_id": "test_predictions", "grade": true, "locked": true, "points": 3}
from attnlab.checks import assert_number, require_number

for _name in ("kernel_us_at_512", "flops_ratio_16384_to_512", "naive_min_ms_at_8192"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
assert_number(kernel_us_at_512, 4 * 8 * 16 * 512**2 * 64 / 2 / 700e12 * 1e6, name="kernel_us_at_512", rel=0.02)
assert_number(flops_ratio_16384_to_512, 1024, name="flops_ratio_16384_to_512", rel=0.01)
assert_number(naive_min_ms_at_8192, 4 * 8 * 16 * 8192**2 * 2 / 4.27e12 * 1e3, name="naive_min_ms_at_8192",
              rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# **P4.** At $T = 512$ your kernel's FLOPs take about `kernel_us_at_512` microseconds. Which do you
# expect to set the time of one call there: the kernel's work on the GPU, or the host's work to
# issue the call (section 2: your launcher's checks and NaN-filled outputs, Triton's Python launch
# path)? Where does naive attention stand next to both? And why should FlashAttention's advantage
# over naive attention *grow* with $T$? Section 5 measures the first question, the sweep the others.

# %% [markdown] nbgrader={"grade_id": "answer-predict-small-T", "solution": true, "grade": true, "points": 2}
# (Figures: one H200, 2026-11-30.) At $T = 512$ the kernel alone took 32 µs on the GPU (141 TFLOP/s,
# five times the 6 µs of pure FLOPs: 1024 programs are too few to amortise the start of the grid,
# its ragged end and the half-masked diagonal tiles). Issuing one call cost the host 21 µs for the
# raw launch and 64 µs through the launcher, with its checks and two NaN-filled allocations: through
# the launcher, back-to-back calls ran at 64 µs each, set by the host, not the GPU. Naive attention,
# at 298 µs (14 TFLOP/s), is still far slower than either, because it moves its $T^2$ matrices
# through HBM several times. As $T$ grows the kernel's work grows like $T^2$ (1024 times more FLOPs
# at 16384) while the host's cost per call stays at tens of microseconds, so overhead vanishes: at
# $T = 4096$ the kernel took 805 µs against 20 to 74 µs of host time. Naive attention stays
# memory-bound (about 32 FLOP/B on the roofline, 12.7 to 16 TFLOP/s measured, 87 ms at $T = 8192$
# against a 16 ms lower bound) and runs out of memory at $T = 16384$, while the fused kernel climbs
# from 141 to 380 TFLOP/s: the advantage grows from 10 times at $T = 512$ to 29 times at 8192. The
# fused kernel is then limited on chip, not by HBM: without any cache its re-reads of $K$ and $V$
# would cap it near 270 TFLOP/s at `block_m = 64` (the "no cache" point of notebook 02's roofline
# calculator with `block_q = 64`, about 64 FLOP/B), and it measured 370, so most re-reads come from
# L2; with each input read once ("ideal") it sits far right of the ridge. What keeps it at 54 % of
# the matmul ceiling is most likely the work between the two matrix products (exponentials, row max
# and sum, the rescale of acc) and the masked diagonal tiles, not memory.

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
#   the GPU's time between them, including any moment the GPU sits idle because the host is still
#   preparing the launch (the L2 flush before each call gives the host a head start, so only host
#   work longer than the flush shows). Your launcher `triton_flash_attention` checks its inputs,
#   allocates two NaN-filled outputs (a testing aid: two fill kernels) and goes through Triton's
#   Python launch path on every call. The sweep therefore times your kernel alone
#   (`sweep.kernel_only`: the raw launch into outputs allocated once, as SDPA writes into a fresh
#   output without a fill), and section 5 measures the host's share as an experiment of its own.

# %% [markdown]
# ## 3. Load your kernel from notebook 05
#
# The cell below imports four cells of `05_triton_flash.ipynb` from this folder (its set-up, your
# kernel and the given launcher; no tests, timings or predictions) and takes
# `triton_flash_attention` and your `_flash_fwd_kernel` from them. If your notebook 05 is missing
# or its code fails, the sweep runs without "yours" and says why. The autograder grades your
# predictions and answers, not your timings, so when it runs this notebook it skips sections 3 to 7
# (a shrunken sweep on a grading machine would only replace your figures with meaningless ones).

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


if bench.autograding():  # only the predictions and the written answers are graded
    print("Autograding: sections 3 to 7 measure, and measurements are not graded, so nothing is loaded, "
          "timed or plotted here. Your own figures stay in your copy of this notebook (graders: the "
          "submitted notebook).")
    yours = triton_flash_attention = flash_kernel = None
else:
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
SHAPE = dict(B=8, H=16, D=HEAD_DIM, dtype=torch.bfloat16, device="cuda")
T_VALUES = [512, 1024, 2048, 4096, 8192, 16384]
if bench.autograding():
    print("Autograding: no sweep (section 3 says why).")
    T_VALUES = []
elif RUNTIME.interpret:
    print("No GPU: running a tiny dry sweep through the interpreter. Its timings mean nothing; "
          "it only exercises the measuring and plotting code.")
    SHAPE = dict(B=1, H=1, D=16, dtype=torch.float32, device="cpu")
    T_VALUES = [16, 32]

points = []
if T_VALUES:
    impls = {"sdpa": sweep.sdpa, "naive": sweep.naive_unfused}
    if yours is not None:
        impls = {"yours": sweep.kernel_only(flash_kernel), **impls}
    points = sweep.run_sweep(impls, T_VALUES, causal=True, **SHAPE)
    results_csv = sweep.write_csv(points, "sweep_results.csv")
    for p in points:
        print(f"{p.impl:>6}  T={p.T:>6}  {p.ms:9.3f} ms  {p.tflops:7.1f} TFLOP/s  "
              f"{p.peak_mem_text()}  {p.status}")
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
    print("Skipped: your kernel is not in use here (section 3 says why).")
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
if not points:
    print("Nothing to plot: the sweep did not run.")
else:
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
    print("Tuning skipped: your kernel is not in use here (section 3 says why).")
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
    sweep.print_tuning(tuned)
if RUNTIME.interpret and not bench.autograding():
    print("\nThe interpreter's timings say nothing about tiles, warps or stages on a GPU. For Q1 instead: "
          "this cell's GPU grid\ntimed on an H200 (bf16, causal, B=8, H=16, T=4096, D=64; the course's "
          "reference kernel, launched directly, 2026-11-30):")
    sweep.print_tuning(sweep.recorded_tuning(), n=36, mark="block_m=64 block_n=64 num_warps=4 num_stages=2")

# %% [markdown]
# **Q1.** Which configuration won, by how much over the launcher's default
# (`block_m=64, block_n=64, num_warps=4, num_stages=2`), and how far apart are the top five? Which
# choices lose clearly, and why? Argue from register use, reuse of K/V tiles, and pipelining. (Without
# a GPU, answer from the H200 table the cell above prints.)

# %% [markdown] nbgrader={"grade_id": "answer-tuning", "solution": true, "grade": true, "points": 2}
# (H200, T = 4096, D = 64, the kernel alone.) The winner was block_m=128, block_n=64, 8 warps, 3
# stages at 379 TFLOP/s, 8 % over the default's 350; but the top five lie within 8 % of each other
# (379 to 351), and an earlier run through the launcher ranked 64/64/4 warps/3 stages first (367)
# with 128/64/8/3 third: block_m = 128 does not reliably beat 64, and differences of a few percent
# are noise at this size. What holds in both runs: every top configuration has 64-wide key tiles,
# and 3 stages beat 2 (the next K/V tile loads while the current one is multiplied). Clear losers:
# 8 warps on a 64-row tile (150 to 200 TFLOP/s), which leaves each warp too few rows for the
# tensor-core instructions; 32-wide key tiles (more loop iterations and rescales per FLOP); and 128
# x 128 tiles (342 at best, down to 227), whose 128 x 128 float32 score tile plus the accumulator
# strain the registers, so fewer programs fit on a multiprocessor. Larger query tiles do halve the
# K/V loads per FLOP, but at D = 64 those loads mostly hit L2, so that reuse buys little here.

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

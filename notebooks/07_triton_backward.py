# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · FlashAttention backward in Triton
#
# *Attention Kernels Lab, second assignment, notebook 7.* Every real use of FlashAttention trains,
# and training needs the backward pass. In notebook 03 you derived it and wrote it as a Python loop
# over tiles; in notebook 05 you wrote the forward as one Triton kernel. Here you write the backward
# as **three Triton kernels**: a small preprocess that computes one number per query row, a kernel
# in which each program owns a tile of keys and accumulates $dK$ and $dV$ for it, and a kernel in
# which each program owns a tile of queries and accumulates $dQ$. The result is a complete,
# differentiable attention: a given FlashAttention forward paired with your Triton backward.
#
# Without a GPU the kernels run through Triton's interpreter (set up by the first cell) and the
# tests use small float32 inputs. With a GPU, section 5 times your backward against PyTorch's
# `scaled_dot_product_attention` (cuDNN and FlashAttention-2).
#
# **How this notebook works.** Run the cells from the top. Cells marked *given* are read-only.
# Write code where it says `YOUR CODE HERE` and answers where it says `YOUR ANSWER HERE`. Hidden
# tests run when your notebook is graded, so pass the visible ones *and* think about the cases
# they leave out. Nothing graded here depends on your notebook 05: the forward is given
# (section 3), and only the ungraded section 6 runs your own 05 kernel.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode (and switches Triton to its interpreter on a CPU) before any kernel
# is defined, then loads the course's support package.
from attnlab import init

RUNTIME = init()

import torch
import triton
import triton.language as tl

from attnlab import bench, launch_backward
from attnlab.checks import time_limit
from attnlab.reference import naive_attention, reference_gradients
from attnlab.verify import call_limit_s
from attnlab.verify_backward import (check_bwd_dkdv_large_offsets, check_bwd_dq_large_offsets,
                                      check_bwd_preprocess, check_bwd_preprocess_large_offsets,
                                      check_flash_backward_kernels, check_triton_attention)

DEVICE = RUNTIME.device  # "cuda" on a GPU, "cpu" under the interpreter

# %% [markdown]
# ## 1. The backward of notebook 03, in kernel terms
#
# For one head, with $S = Q K^\top \cdot \text{scale}$, $P = \operatorname{softmax}(S)$ row by row
# and $O = P V$, notebook 03 derived, for the upstream gradient $dO$,
#
# $$dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad dS = P \circ (dP - \Delta), \qquad
#   dQ = dS\, K \cdot \text{scale}, \qquad dK = dS^\top Q \cdot \text{scale},$$
#
# where $\Delta_i = \sum_j P_{ij}\, dP_{ij} = \sum_d dO_{id}\, O_{id}$, that is
# $\Delta = \operatorname{rowsum}(dO \circ O)$: one number per query row, computed from two
# $(T, D)$ matrices instead of the $(T, T)$ matrices $P$ and $dP$. Two facts make a tiled kernel
# possible:
#
# 1. **P is rebuilt, not stored.** The forward saved the natural-log
#    $\text{LSE}_i = \log \sum_j e^{S_{ij}}$, so any tile of $P$ is $P_{ij} = e^{S_{ij} - \text{LSE}_i}$,
#    final and normalised, from a tile of $Q$, a tile of $K$ and the LSE of those rows. No running
#    max and no rescaling: unlike the forward, the backward knows each row's normaliser before it
#    starts. (In base 2, as in 05: $P = 2^{S \log_2 e - \text{LSE} \log_2 e}$.)
# 2. **Each gradient is a sum over tiles.** $dV_j$ and $dK_j$ (the rows of key tile $j$) sum
#    contributions over query tiles $i$; $dQ_i$ sums contributions over key tiles $j$. Whoever
#    owns a row of the result can accumulate it in registers and store it once.
#
# ### Three kernels
#
# | kernel | one program owns | it loops over | it accumulates in registers | grid |
# |---|---|---|---|---|
# | `_bwd_preprocess_kernel` | `BLOCK_M` query rows | (nothing) | $\Delta = \operatorname{rowsum}(dO \circ O)$ | $(\lceil T/\text{BLOCK\_M} \rceil, BH)$ |
# | `_bwd_dkdv_kernel` | `BLOCK_N` keys: $K_j, V_j$ loaded once | query tiles $i$ | $dK_j \mathrel{+}= dS_{ij}^\top Q_i$, $dV_j \mathrel{+}= P_{ij}^\top dO_i$ | $(\lceil T/\text{BLOCK\_N} \rceil, BH)$ |
# | `_bwd_dq_kernel` | `BLOCK_M` queries: $Q_i, dO_i$ loaded once | key tiles $j$ | $dQ_i \mathrel{+}= dS_{ij} K_j$ | $(\lceil T/\text{BLOCK\_M} \rceil, BH)$ |
#
# Both big kernels rebuild $P_{ij}$ and $dS_{ij}$ for every tile pair they meet, so $QK^\top$ and
# $dO V^\top$ are computed twice: once per direction. That is the price of never sharing a row of
# a result between programs. Inside the dK/dV kernel it is convenient to work with transposed
# tiles, $S^\top_{ji} = K_j Q_i^\top$ (shape `BLOCK_N x BLOCK_M`), so that $P^\top$ and $dS^\top$
# come out in the orientation the products with $dO_i$ and $Q_i$ need.
#
# **Tile shapes.** In every kernel `BLOCK_M` counts query rows and `BLOCK_N` keys. What matters
# for speed is the tile a program *owns*: every $Q_i, dO_i$ tile the dK/dV kernel loads serves
# its `BLOCK_N` keys, every $K_j, V_j$ tile the dQ kernel loads serves its `BLOCK_M` queries. So
# the given launcher's `block_n` is the owned tile and `block_m` the step of the inner loop, in
# both kernels: the dK/dV kernel runs with `BLOCK_N = block_n`, `BLOCK_M = block_m`, the dQ kernel
# with the transposed shape, `BLOCK_M = block_n`, `BLOCK_N = block_m` (FlashAttention-2's backward
# does the same, e.g. 128 owned rows stepping 32 or 64). Your kernels must work for any powers
# of two $\ge 16$.
#
# **Scale.** $dS$ is the gradient with respect to the *scaled* scores, so both $dQ$ and $dK$ carry
# one factor of scale, applied once to the accumulator before the store. $dV$ has none.
#
# ### Causal: skipping tiles in both directions
#
# With a causal mask (query $i$ sees keys $j \le i$), $P_{ij} = 0$ above the diagonal, so every
# gradient term there is 0 and those tiles are skipped, in both kernels:
#
# ```
#                key tiles →     0        1        2        3
#   query tile 0             [ diag ] [  --  ] [  --  ] [  --  ]      dQ kernel: query tile i walks
#   query tile 1             [ full ] [ diag ] [  --  ] [  --  ]      key tiles 0 .. i (left to right
#   query tile 2             [ full ] [ full ] [ diag ] [  --  ]      along its row)
#   query tile 3             [ full ] [ full ] [ full ] [ diag ]
#                                                                      dK/dV kernel: key tile j walks
#                                                                      query tiles j .. last (down its column)
# ```
#
# The **diagonal tile** is needed in both directions and needs the element-wise mask: row $i$ of the
# tile sees only the keys $\le i$. Off the diagonal no mask is needed. For the dK/dV kernel with
# key tile $[s_n, s_n + \text{BLOCK\_N})$, the query tiles to visit start at the tile holding query
# $s_n$, `lo = (start_n // BLOCK_M) * BLOCK_M`; the masked ones are those that start before
# $s_n + \text{BLOCK\_N}$; from there on every key of the tile is visible to every query.
#
# ### Ragged T
#
# As in 05: loads take `mask=` and `other=0.0`; stores are masked to rows $< T$. In the backward a
# padded query row (`offs_m >= T`) is harmless once $dO$ and $\Delta$ are loaded as 0 there: its
# $dP$ and $dS$ are then 0. A padded key row gives $P_{ij} \ne 0$ but is never stored ($dK$, $dV$)
# and its $K$ and $V$ rows are 0 ($dQ$). Make those zeros explicit with the mask anyway: it costs
# nothing in the masked tiles and makes the argument local.
#
# **No $-\infty$ anywhere.** The forward needed a guard against $e^{-\infty - (-\infty)}$. The
# backward subtracts the *saved* LSE, a finite number for every row that sees at least one key,
# so masked entries are simply set to $P = 0$ with `tl.where` after the exponential.
#
# ### An alternative: dQ by atomics
#
# The dK/dV kernel meets every $(i, j)$ tile pair that the dQ kernel meets. It could add
# $dS_{ij} K_j$ into the rows $dQ_i$ right there and save the dQ kernel's recomputation. But then
# **several programs add into the same rows of dQ at the same time** (every key tile contributes to
# every query row below it). A plain `tl.load` + `tl.store` loses updates when two programs
# interleave; `tl.atomic_add` on a float32 buffer does not. The launcher passes such a buffer,
# `DQ_ACC` (zeros, float32), to both kernels: a design that adds into it with atomics writes
# $dQ = \text{DQ\_ACC} \cdot \text{scale}$ from the dQ kernel. It is correct and earns every point.
# It is usually slower on a GPU: atomics on float32 rows are costly, and the sum is not
# deterministic (the order of additions changes between runs). Under the interpreter, programs run
# one after the other, so a race cannot show up there; the tests also read your dK/dV kernel's code
# and fail a plain store into `DQ_ACC`.

# %% [markdown]
# ## 2. Predict before you write
#
# For the $B$, $H$, $T$, $D$ the cell below prints (in a graded course each student gets their own;
# the release's are $B = 8$, $H = 16$, $T = 4096$, $D = 64$, and the answers are checked for yours),
# causal, bf16. Count FLOPs the standard way: a matrix
# product of $(m \times k)$ by $(k \times n)$ is $2mkn$ FLOPs; the forward is $4 B H T^2 D$ (two
# products), halved for causal. Store plain numbers.
#
# 1. `bwd_matmuls`: how many $T \times T \times D$-sized matrix products the **standard accounting**
#    of the backward counts: the five products $S$ (recomputed), $dV$, $dP$, $dQ$, $dK$, each
#    $2 T^2 D$ FLOPs per head. (Your kernels compute $S$ and $dP$ twice, once per direction; the
#    standard count does not charge for that.)
# 2. `bwd_to_fwd`: the ratio of the backward's standard FLOP count to the forward's.
# 3. `causal_bwd_tflop`: the standard backward FLOPs of the causal case in **TFLOP** ($10^{12}$).
# 4. `delta_bytes`: the bytes the preprocess kernel moves: it reads $O$ and $dO$ in bf16 and
#    writes $\Delta$ in float32.

# %% nbgrader={"grade_id": "shapes-predict-backward-cost", "locked": true}
from attnlab.variants import show_shapes

show_shapes("predict-backward-cost")

# %% nbgrader={"grade_id": "predict-backward-cost", "solution": true}
bwd_matmuls = None
bwd_to_fwd = None
causal_bwd_tflop = None
delta_bytes = None
### BEGIN SOLUTION
from attnlab.variants import shapes

_s = shapes("predict-backward-cost")  # the B, H, T, D printed above
bwd_matmuls = 5
bwd_to_fwd = 5 / 2
causal_bwd_tflop = 5 * 2 * _s["B"] * _s["H"] * _s["T"] ** 2 * _s["D"] / 2 / 1e12
delta_bytes = 2 * _s["B"] * _s["H"] * _s["T"] * _s["D"] * 2 + _s["B"] * _s["H"] * _s["T"] * 4
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-backward-cost", "grade": true, "locked": true, "points": 1}
from attnlab.checks import assert_number, require_number

for _name in ("bwd_matmuls", "bwd_to_fwd", "causal_bwd_tflop", "delta_bytes"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
assert_number(bwd_matmuls, 5, name="bwd_matmuls", rel=0.001)
assert_number(bwd_to_fwd, 2.5, name="bwd_to_fwd", rel=0.001)
from attnlab.variants import check_predictions

check_predictions("predict-backward-cost", {"causal_bwd_tflop": causal_bwd_tflop, "delta_bytes": delta_bytes},
                  lambda B, H, T, D: {"causal_bwd_tflop": 5 * 2 * B * H * T**2 * D / 2 / 1e12,
                                      "delta_bytes": 2 * B * H * T * D * 2 + B * H * T * 4}, rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# **Predict in words.** Which of the three kernels is limited by memory bandwidth rather than by
# the tensor cores, and roughly what fraction of the backward's time would you expect it to take?
# Why does the backward reach a lower TFLOP/s than the forward on the same GPU?

# %% [markdown] nbgrader={"grade_id": "answer-predict-backward", "solution": true, "grade": true, "points": 1}
# The preprocess: it reads $O$ and $dO$ and does two FLOPs per element (a multiply and an add), far
# below the ~150 FLOP/byte an H200's tensor cores need to stay busy; at the release's sizes it moves
# about 136 MB, some 35 µs at 4 TB/s, against about 2 ms for the two big kernels: one to two percent
# of the backward. The backward is slower per FLOP than the forward because it does more work per
# useful FLOP: $S$ and $dP$ are
# computed twice (the standard count charges 5 products, the kernels run 7), it keeps more tiles
# live ($dK$ and $dV$ accumulators, $K$, $V$, plus $Q$, $dO$ tiles per step) so tiles are smaller or
# registers spill, and the element-wise work between the products ($P$, $dS$) is larger.

# %% [markdown]
# ## 3. Given: the forward
#
# Your backward consumes the $O$ and the float32 LSE a FlashAttention forward saves. The autograd
# function of section 4 takes them from `launch_backward.reference_forward(q, k, v, causal)`:
# PyTorch's own FlashAttention kernel in float16 and bfloat16 (it returns the LSE alongside $O$),
# the plain reference of notebook 01 in float32. So a mistake in your own notebook 05 never costs
# points here; section 6 runs your own 05 kernel with your backward, ungraded.

# %% [markdown]
# ## 4. Your kernels
#
# All three take contiguous $(B, H, T, D)$ tensors (`stride_bh = T * D`, `stride_t = D`), and
# per-row vectors LSE and $\Delta$ of shape $(B, H, T)$, float32 (the row of head `bh` at `bh * T`).
# Widen `bh = tl.program_id(1)` to 64 bits before multiplying, as in 05. `BLOCK_M`, `BLOCK_N` and
# `HEAD_DIM` are powers of two $\ge 16$; $T \ge 1$ is any length.
#
# ### 4a. The preprocess: $\Delta = \operatorname{rowsum}(dO \circ O)$
#
# `_bwd_preprocess_kernel(O, DO, DELTA, stride_bh, stride_t, T, BLOCK_M, HEAD_DIM)`, grid
# `(cdiv(T, BLOCK_M), B * H)`: program `(m, bh)` writes `DELTA[bh, m*BLOCK_M : (m+1)*BLOCK_M]`
# (the rows below $T$), in float32, whatever the dtype of $O$ and $dO$.
#
# The whole contract of `_bwd_preprocess_kernel` in one place: `attnlab.contracts.bwd_preprocess_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.bwd_preprocess_kernel)`).

# %% nbgrader={"grade_id": "_bwd_preprocess_kernel", "solution": true}
@triton.jit
def _bwd_preprocess_kernel(O, DO, DELTA, stride_bh, stride_t, T,
                           BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Δ = rowsum(dO ∘ O) for BLOCK_M query rows of one (batch, head).

    Args:
        O, DO: contiguous (B, H, T, HEAD_DIM): the forward's output and dL/dO.
        DELTA: (B, H, T) float32, written here.
        stride_bh, stride_t: T * HEAD_DIM and HEAD_DIM.
        T: sequence length.
    """
    ### BEGIN SOLUTION
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < T
    offs = bh * stride_bh + offs_m[:, None] * stride_t + offs_d[None, :]
    o = tl.load(O + offs, mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + offs, mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(DELTA + bh * T + offs_m, tl.sum(o * do, axis=1), mask=row_ok)
    ### END SOLUTION

# %% [markdown]
# ### Test: the preprocess alone

# %% nbgrader={"grade_id": "test_bwd_preprocess", "grade": true, "locked": true, "points": 1}
check_bwd_preprocess(_bwd_preprocess_kernel, T=16, D=32)
check_bwd_preprocess(_bwd_preprocess_kernel, T=37, D=32, B=2, H=3, seed=1)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_bwd_preprocess(_bwd_preprocess_kernel, T=5, D=16, block_m=16, seed=2)
check_bwd_preprocess(_bwd_preprocess_kernel, T=64, D=64, block_m=32, seed=3)
# three heads of 2^26 rows: bh * stride_bh passes 2^31 at the third (only the rows read exist; every machine)
check_bwd_preprocess_large_offsets(_bwd_preprocess_kernel, seed=5)
if not RUNTIME.interpret:
    for dtype in (torch.float16, torch.bfloat16):
        check_bwd_preprocess(_bwd_preprocess_kernel, B=4, H=8, T=1023, D=128, block_m=64, dtype=dtype, seed=4)
### END HIDDEN TESTS

# %% [markdown]
# ### 4b. dK and dV: key tiles outer
#
# `_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC, stride_bh, stride_t, T, scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)`,
# grid `(cdiv(T, BLOCK_N), B * H)`: program `(n, bh)` loads keys `n*BLOCK_N ...` of $K$ and $V$
# once, walks the query tiles that see them (all of them; causal: from the diagonal down), and
# stores its rows of $dK$ and $dV$ once, in their dtype. `DQ_ACC` is for the atomic alternative of
# section 1; the standard design ignores it.
#
# The cell starts you with a helper, `_dkdv_tile`, for one query tile's contribution; the kernel
# calls it from its loops (a `@triton.jit` function called from a kernel is inlined, and a
# `tl.constexpr` argument such as `MASK` removes the masking code from the tiles that need none).
# You may change its arguments, or write everything in the kernel and leave the helper unused.
#
# On a GPU, cast the operands of each `tl.dot` to the input dtype (`p_t.to(do.dtype)`, as in 05)
# and keep the accumulators in float32.
#
# The whole contract of `_bwd_dkdv_kernel` in one place: `attnlab.contracts.bwd_dkdv_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.bwd_dkdv_kernel)`).

# %% nbgrader={"grade_id": "_bwd_dkdv_kernel", "solution": true}
@triton.jit
def _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m, offs_n, stride_t, T, qk_scale,
               MASK: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Add one query tile's contribution to the dK and dV of the calling program's key tile.

    Args:
        dk, dv: (BLOCK_N, HEAD_DIM) float32 accumulators; returned updated.
        k, v: (BLOCK_N, HEAD_DIM), the key tile (rows >= T loaded as 0).
        Q, DO, LSE, DELTA: pointers already moved to this (batch, head).
        start_m: the tile's first query row; offs_n: (BLOCK_N,) the key positions.
        stride_t, T: row stride and length; qk_scale: scale * log2(e) (base-2 scores).
        MASK: mask rows >= T and, if CAUSAL, keys after the query (the diagonal and ragged tiles).
    """
    ### BEGIN SOLUTION
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < T
    q_offs = offs_m[:, None] * stride_t + offs_d[None, :]
    if MASK:  # the ragged last tile may hold rows >= T
        q = tl.load(Q + q_offs, mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + q_offs, mask=row_ok[:, None], other=0.0)
        lse2 = tl.load(LSE + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634  # base 2
        delta = tl.load(DELTA + offs_m, mask=row_ok, other=0.0)
    else:     # a full tile: plain loads
        q = tl.load(Q + q_offs)
        do = tl.load(DO + q_offs)
        lse2 = tl.load(LSE + offs_m) * 1.4426950408889634
        delta = tl.load(DELTA + offs_m)
    s_t = tl.dot(k, tl.trans(q)) * qk_scale                 # (BLOCK_N, BLOCK_M): S transposed, base 2
    p_t = tl.exp2(s_t - lse2[None, :])                       # P rebuilt from the saved LSE
    if MASK:
        keep = row_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_m[None, :] >= offs_n[:, None])
        p_t = tl.where(keep, p_t, 0.0)
    dv = tl.dot(p_t.to(do.dtype), do, dv)                     # dV += Pᵀ dO
    dp_t = tl.dot(v, tl.trans(do))                            # dPᵀ = V dOᵀ
    ds_t = p_t * (dp_t - delta[None, :])                      # dSᵀ = Pᵀ ∘ (dPᵀ − Δ)
    dk = tl.dot(ds_t.to(q.dtype), q, dk)                      # dK += dSᵀ Q   (scale applied at the end)
    return dk, dv
    ### END SOLUTION


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC, stride_bh, stride_t, T, scale,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     HEAD_DIM: tl.constexpr):
    """dK and dV for BLOCK_N keys of one (batch, head): key tile outer, query tiles inner.

    Args:
        Q, K, V, DO: contiguous (B, H, T, HEAD_DIM); LSE, DELTA: (B, H, T) float32.
        DK, DV: (B, H, T, HEAD_DIM), written here, in their own dtype.
        DQ_ACC: (B, H, T, HEAD_DIM) float32 zeros, for designs that add dQ here (unused by this one).
        stride_bh, stride_t: T * HEAD_DIM and HEAD_DIM; T: sequence length; scale: HEAD_DIM ** -0.5.
        CAUSAL: query i sees keys j <= i only.
    """
    ### BEGIN SOLUTION
    bh = tl.program_id(1).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    key_ok = offs_n < T
    Q += bh * stride_bh
    K += bh * stride_bh
    V += bh * stride_bh
    DO += bh * stride_bh
    DK += bh * stride_bh
    DV += bh * stride_bh
    LSE += bh * T
    DELTA += bh * T
    kv_offs = offs_n[:, None] * stride_t + offs_d[None, :]
    k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)   # loaded once, used by every query tile
    v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634

    # Query tiles [lo, mid) need a mask (the causal diagonal), [mid, full) none, [full, T) the ragged last tile.
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M                  # the first query tile that sees any key here
        mid = lo + tl.cdiv(start_n + BLOCK_N - lo, BLOCK_M) * BLOCK_M  # from here on: every key visible
    else:
        lo = 0
        mid = 0
    full = tl.maximum((T // BLOCK_M) * BLOCK_M, mid)
    for start_m in range(lo, tl.minimum(mid, T), BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m, offs_n, stride_t, T, qk_scale,
                            True, CAUSAL, BLOCK_M, HEAD_DIM)
    for start_m in range(mid, full, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m, offs_n, stride_t, T, qk_scale,
                            False, CAUSAL, BLOCK_M, HEAD_DIM)
    for start_m in range(full, T, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, Q, DO, LSE, DELTA, start_m, offs_n, stride_t, T, qk_scale,
                            True, CAUSAL, BLOCK_M, HEAD_DIM)
    dk = dk * scale                                          # dK = dSᵀ Q · scale
    tl.store(DK + kv_offs, dk.to(DK.dtype.element_ty), mask=key_ok[:, None])
    tl.store(DV + kv_offs, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])
    ### END SOLUTION

# %% [markdown]
# ### 4c. dQ: query tiles outer
#
# `_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, DQ_ACC, stride_bh, stride_t, T, scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)`,
# grid `(cdiv(T, BLOCK_M), B * H)`, launched after the dK/dV kernel: program `(m, bh)` loads
# $Q$ and $dO$ of its rows, their LSE and $\Delta$, once; walks the key tiles they see (causal:
# up to and including the diagonal); stores its rows of $dQ$ once.
#
# The whole contract of `_bwd_dq_kernel` in one place: `attnlab.contracts.bwd_dq_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.bwd_dq_kernel)`).

# %% nbgrader={"grade_id": "_bwd_dq_kernel", "solution": true}
@triton.jit
def _dq_tile(dq, q, do, lse2, delta, K, V, start_n, offs_m, stride_t, T, qk_scale,
             MASK: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Add one key tile's contribution to the dQ of the calling program's query tile; return dq.

    Args:
        dq: (BLOCK_M, HEAD_DIM) float32 accumulator.
        q, do: (BLOCK_M, HEAD_DIM) tiles; lse2: (BLOCK_M,) LSE * log2(e); delta: (BLOCK_M,) Δ.
        K, V: pointers already moved to this (batch, head); start_n: the key tile's first key.
        offs_m: (BLOCK_M,) the query positions; stride_t, T, qk_scale as in ``_dkdv_tile``.
        MASK: mask keys >= T and, if CAUSAL, keys after the query (the diagonal and ragged tiles).
    """
    ### BEGIN SOLUTION
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    key_ok = offs_n < T
    kv_offs = offs_n[:, None] * stride_t + offs_d[None, :]
    if MASK:  # the ragged last tile may hold keys >= T
        k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)
        v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)
    else:
        k = tl.load(K + kv_offs)
        v = tl.load(V + kv_offs)
    s = tl.dot(q, tl.trans(k)) * qk_scale                   # base-2 scores
    p = tl.exp2(s - lse2[:, None])                           # P from the saved LSE
    if MASK:
        keep = key_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
    dp = tl.dot(do, tl.trans(v))                             # dP = dO Vᵀ
    ds = p * (dp - delta[:, None])                           # dS = P ∘ (dP − Δ)
    return tl.dot(ds.to(k.dtype), k, dq)                     # dQ += dS K   (scale applied at the end)
    ### END SOLUTION


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, DQ_ACC, stride_bh, stride_t, T, scale,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   HEAD_DIM: tl.constexpr):
    """dQ for BLOCK_M query rows of one (batch, head): query tile outer, key tiles inner.

    Args:
        as ``_bwd_dkdv_kernel``; DQ: (B, H, T, HEAD_DIM), written here in its own dtype;
        DQ_ACC: what the dK/dV kernel added (zeros in this design, which ignores it).
    """
    ### BEGIN SOLUTION
    bh = tl.program_id(1).to(tl.int64)
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < T
    Q += bh * stride_bh
    K += bh * stride_bh
    V += bh * stride_bh
    DO += bh * stride_bh
    DQ += bh * stride_bh
    q_offs = offs_m[:, None] * stride_t + offs_d[None, :]
    q = tl.load(Q + q_offs, mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + q_offs, mask=row_ok[:, None], other=0.0)
    lse2 = tl.load(LSE + bh * T + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * T + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634

    # Key tiles [0, lo) are visible to every row: no mask; [lo, hi) are the diagonal or the ragged tile.
    if CAUSAL:
        lo = (start_m // BLOCK_N) * BLOCK_N
        hi = tl.minimum(start_m + BLOCK_M, T)
    else:
        lo = (T // BLOCK_N) * BLOCK_N
        hi = T
    for start_n in range(0, lo, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse2, delta, K, V, start_n, offs_m, stride_t, T, qk_scale,
                      False, CAUSAL, BLOCK_N, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse2, delta, K, V, start_n, offs_m, stride_t, T, qk_scale,
                      True, CAUSAL, BLOCK_N, HEAD_DIM)
    dq = dq * scale                                          # dQ = dS K · scale
    tl.store(DQ + q_offs, dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])
    ### END SOLUTION

# %% nbgrader={"grade_id": "triton_flash_attention_backward", "locked": true}
# Given: the launchers. triton_flash_attention_backward checks its inputs (q, k, v, o, do: one
# (B, H, T, D) shape, dtype and device; lse float32 (B, H, T); D and the blocks powers of two >= 16),
# makes them contiguous, allocates DELTA, DQ, DK and DV full of NaN (an element no kernel writes
# stays NaN) and DQ_ACC full of zeros, then launches the preprocess, the dK/dV and the dQ kernels.
# block_n is the tile a program owns, block_m the step of its loop (section 1, "Tile shapes"):
# dK/dV runs with BLOCK_N=block_n, BLOCK_M=block_m; dQ and the preprocess with BLOCK_M=block_n.
def triton_flash_attention_backward(q, k, v, o, lse, do, causal=False, block_m=64, block_n=64,
                                    num_warps=4, num_stages=2):
    """FlashAttention backward by your three kernels: returns (dq, dk, dv) in q's dtype."""
    return launch_backward.launch_flash_backward(
        (_bwd_preprocess_kernel, _bwd_dkdv_kernel, _bwd_dq_kernel), q, k, v, o, lse, do, causal=causal,
        block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages)


# triton_attention(q, k, v, causal=False) -> o, differentiable: the given forward (section 3) saves
# (q, k, v, o, lse); o.backward(do) runs triton_flash_attention_backward.
triton_attention = launch_backward.attention_function(
    lambda: (_bwd_preprocess_kernel, _bwd_dkdv_kernel, _bwd_dq_kernel))

# %% [markdown]
# Try it before the tests, on a ragged causal case. All three differences should be around 1e-6
# in float32 on a CPU (around 1e-3 on a GPU, where float32 products use TF32).

# %% nbgrader={"grade_id": "try-backward", "locked": true}
g = torch.Generator().manual_seed(0)
q_try, k_try, v_try, do_try = (torch.randn(1, 2, 37, 32, generator=g) for _ in range(4))
o_try, lse_try = naive_attention(q_try, k_try, v_try, causal=True)
with time_limit(call_limit_s(), "triton_flash_attention_backward"):  # a hang fails after 20 s on a CPU
    grads = triton_flash_attention_backward(*(t.to(DEVICE) for t in (q_try, k_try, v_try, o_try, lse_try, do_try)),
                                            causal=True, block_m=16, block_n=16)
for name, mine, ref in zip(("dq", "dk", "dv"), grads, reference_gradients(q_try, k_try, v_try, do_try, causal=True)):
    print(f"{name} max abs difference: {(mine.cpu().double() - ref).abs().max().item():.2e}")

# %% [markdown]
# ### Test: dq, dk, dv match the reference
#
# The check draws $Q, K, V, dO$, computes $O$ and LSE with the float64 reference and rounds them
# as a forward kernel would save them, runs your kernels through the launcher, and compares with
# the float64 gradients of notebook 03's reference. Inputs are followed in memory by NaN (a load
# past the last row poisons the result); outputs start as NaN and are followed by guard values.

# %% nbgrader={"grade_id": "test_flash_backward_matches_reference", "grade": true, "locked": true, "points": 3}
KERNELS = (_bwd_preprocess_kernel, _bwd_dkdv_kernel, _bwd_dq_kernel)
for causal in (False, True):
    check_flash_backward_kernels(KERNELS, T=16, D=32, causal=causal)
check_flash_backward_kernels(KERNELS, B=2, H=3, T=32, D=16, causal=True, seed=1)  # six heads, two tiles
# BLOCK_M != BLOCK_N: key tile 16..31 must start its causal loop at the query tile holding row 16
check_flash_backward_kernels(KERNELS, T=32, D=16, causal=True, block_m=32, block_n=16, seed=8)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for causal in (False, True):
    check_flash_backward_kernels(KERNELS, T=64, D=32, causal=causal, seed=2)
    check_flash_backward_kernels(KERNELS, T=64, D=16, causal=causal, block_m=32, block_n=16, seed=3)
    check_flash_backward_kernels(KERNELS, T=64, D=64, causal=causal, block_m=16, block_n=32, seed=4)
# the dQ kernel on three heads of 2^26 rows, where bh * stride_bh passes 2^31; the dK/dV kernel's key tiles
# walk every later query, so its case keeps the heads short and only spaces them 2^30 elements apart
check_bwd_dq_large_offsets(_bwd_dq_kernel, seed=9)
check_bwd_dkdv_large_offsets(_bwd_dkdv_kernel, seed=10)
check_bwd_dkdv_large_offsets(_bwd_dkdv_kernel, block_m=32, block_n=16, seed=11)
if not RUNTIME.interpret:  # sizes that fill a GPU, half precision, the launcher's defaults and larger tiles
    # each (D, dtype, causal, tiles) compiles the dK/dV and dQ kernels again: each 16-bit type at one
    # head size (bf16 at 64, fp16 at 128) rather than every (D, dtype) pair
    for D, dtype in ((64, torch.bfloat16), (128, torch.float16)):
        for causal in (False, True):
            check_flash_backward_kernels(KERNELS, B=4, H=8, T=1024, D=D, causal=causal, dtype=dtype,
                                         block_m=64, block_n=64, seed=5)
            check_flash_backward_kernels(KERNELS, B=4, H=8, T=1024, D=D, causal=causal, dtype=dtype,
                                         block_m=32, block_n=128, num_warps=8, seed=6)
    check_flash_backward_kernels(KERNELS, B=2, H=4, T=512, D=64, causal=True, dtype=torch.float32,
                                 block_m=64, block_n=32, seed=7)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: lengths that are not a multiple of the blocks
#
# $T = 37$ and $T = 33$ with blocks of 16: padded query rows, a ragged last key tile, and (33) a
# last key alone in its tile, which a causal loop bound that is off by one never visits.

# %% nbgrader={"grade_id": "test_flash_backward_ragged", "grade": true, "locked": true, "points": 3}
for T in (37, 33):
    for causal in (False, True):
        check_flash_backward_kernels(KERNELS, T=T, D=32, causal=causal, block_m=16, block_n=16)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for causal in (False, True):
    check_flash_backward_kernels(KERNELS, T=37, D=32, causal=causal, block_m=16, block_n=32, seed=11)
    check_flash_backward_kernels(KERNELS, T=37, D=32, causal=causal, block_m=32, block_n=16, seed=12)
    check_flash_backward_kernels(KERNELS, T=5, D=16, causal=causal, seed=13)
check_flash_backward_kernels(KERNELS, B=2, H=1, T=49, D=32, causal=True, block_m=32, block_n=16, seed=14)
if not RUNTIME.interpret:
    for T in (1000, 1023, 1025):
        for causal in (False, True):
            check_flash_backward_kernels(KERNELS, B=2, H=8, T=T, D=64, causal=causal, dtype=torch.bfloat16,
                                         block_m=64, block_n=128, num_warps=8, seed=T)
            check_flash_backward_kernels(KERNELS, B=2, H=8, T=T, D=128, causal=causal, dtype=torch.float16,
                                         block_m=32, block_n=64, seed=T + 1)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: the autograd function end to end
#
# `triton_attention(q, k, v, causal)` runs the given forward (section 3), then `o.backward(do)` runs
# your kernels; the check compares $O$ and the three `.grad` with float64 references.

# %% nbgrader={"grade_id": "test_triton_attention_end_to_end", "grade": true, "locked": true, "points": 2}
for causal in (False, True):
    check_triton_attention(triton_attention, T=37, D=16, causal=causal)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_triton_attention(triton_attention, B=2, H=3, T=50, D=32, causal=True, seed=21)
if not RUNTIME.interpret:
    # both 16-bit types end to end, each with the head size and regime of its kernel cases above
    check_triton_attention(triton_attention, B=4, H=8, T=1024, D=64, causal=True, dtype=torch.bfloat16, seed=22)
    check_triton_attention(triton_attention, B=2, H=8, T=777, D=128, causal=False, dtype=torch.float16, seed=23)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. How fast is it? (GPU)
#
# On a GPU the cell below checks your backward against SDPA's in bf16, then times, at
# $B = 8$, $H = 16$, $T = 4096$, $D = 64$, causal: your backward alone (the three kernels into
# buffers allocated once), against SDPA's default
# backend (cuDNN on an H100/H200) and its FlashAttention-2 backend. TFLOP/s use the standard count:
# forward $4BHT^2D$, backward $2.5\times$ that, halved for causal. Try other tile sizes: the dK/dV
# kernel keeps two `BLOCK_N x D` float32 accumulators live, and a larger owned tile (`block_n`)
# means fewer reloads of the stepped tiles. On a CPU this cell only prints a note.

# %% nbgrader={"grade_id": "bench-backward", "locked": true}
if RUNTIME.interpret:
    print("Skipped: no GPU. Run this cell on a GPU (for example Colab) to time your kernels against SDPA.")
elif bench.autograding():
    print("Autograding: the timings are not graded, so this cell measures nothing.")
else:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    B_, H_, T_, D_ = 8, 16, 4096, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q_b, k_b, v_b, do_b = (torch.randn(B_, H_, T_, D_, device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(4))
    fwd_flops = bench.attention_flops(B_, H_, T_, D_, causal=True)
    o_b, lse_b = launch_backward.reference_forward(q_b, k_b, v_b, causal=True)
    q_r, k_r, v_r = (t.detach().clone().requires_grad_(True) for t in (q_b, k_b, v_b))
    sdpa(q_r, k_r, v_r, is_causal=True).backward(do_b)
    mine = triton_flash_attention_backward(q_b, k_b, v_b, o_b, lse_b, do_b, causal=True)
    for name, a, b in zip(("dq", "dk", "dv"), mine, (q_r.grad, k_r.grad, v_r.grad)):
        print(f"max |yours - SDPA| {name} in bf16: {(a - b).abs().max().item():.3g}")
    print(f"\nB={B_} H={H_} T={T_} D={D_} causal bf16; backward {2.5 * fwd_flops / 1e12:.2f} TFLOP")
    kernels = launch_backward.BackwardKernels(_bwd_preprocess_kernel, _bwd_dkdv_kernel, _bwd_dq_kernel)
    for bm, bn, warps, stages in ((64, 64, 4, 2), (32, 128, 4, 3), (64, 128, 8, 3)):
        bufs = launch_backward.backward_buffers(q_b, bm, bn)
        ms = bench.median_ms(lambda: launch_backward.run_backward_kernels(
            kernels, q_b, k_b, v_b, o_b, lse_b, do_b, *bufs, causal=True, block_m=bm, block_n=bn,
            num_warps=warps, num_stages=stages))
        print(f"yours backward  block_m={bm:<3} block_n={bn:<3} warps={warps} stages={stages}: "
              f"{ms:.3f} ms  {bench.tflops(2.5 * fwd_flops, ms):6.1f} TFLOP/s")

    def sdpa_bwd_ms():
        o = sdpa(q_r, k_r, v_r, is_causal=True)
        return bench.median_ms(lambda: torch.autograd.grad(o, (q_r, k_r, v_r), do_b, retain_graph=True))

    for label, backend in (("SDPA default", None), ("SDPA FlashAttention-2", SDPBackend.FLASH_ATTENTION)):
        if backend is None:
            ms = sdpa_bwd_ms()
        else:
            with sdpa_kernel(backend):
                ms = sdpa_bwd_ms()
        print(f"{label + ' backward':<33}: {ms:.3f} ms  {bench.tflops(2.5 * fwd_flops, ms):6.1f} TFLOP/s")
    del q_b, k_b, v_b, do_b, q_r, k_r, v_r, o_b, lse_b

# %% [markdown]
# ### Measured on an H200
#
# The course's reference kernels (the solution of this notebook), bf16, $B \cdot H \cdot T = 2^{20}$
# tokens so that every point is far past launch overhead; SDPA's default is cuDNN there (torch 2.11,
# triton 3.6, cuDNN 9.19). TFLOP/s with the standard count; command, versions and every figure:
# `notes/gpu-measurements.md` in the course repository. The forward of "forward + backward:
# reference" was notebook 05's reference kernel (128/64 tiles), not the given forward of section 3.
#
# | $D$ = 64, causal | T = 1024 | 4096 | 16384 |
# |---|---|---|---|
# | backward: reference kernels / cuDNN / FlashAttention-2 | 236 / 257 / 157 | 320 / 386 / 236 | 354 / 429 / 273 |
# | forward + backward: reference / cuDNN / FlashAttention-2 | 225 / 276 / 171 | 322 / 387 / 250 | 360 / 433 / 284 |
#
# Plain `tl.dot` kernels reach about 0.8x the vendor's backward and beat FlashAttention-2's by
# 1.3x; the rest of the gap is Hopper-specific machinery (TMA loads, warp-specialised pipelines).

# %% nbgrader={"grade_id": "plot-measured", "locked": true}
bench.show_recorded_plot("backward_h200.png", "backward and forward + backward TFLOP/s against T, D = 64 and 128")

# %% [markdown]
# ## 6. Your own forward with your backward (ungraded)
#
# The cell below loads your forward kernel from `05_triton_flash.ipynb` (in this folder, or in
# `../attention_kernels/` as the releases are laid out) and runs your forward with your backward,
# end to end, against the reference. It is not graded; if notebook 05 is missing it says so.

# %% nbgrader={"grade_id": "yours-end-to-end", "locked": true}
from attnlab.nbload import load_earlier_kernel

your_forward = load_earlier_kernel("05_triton_flash.ipynb", "_flash_fwd_kernel")  # None if not found
if your_forward is not None:
    yours_end_to_end = launch_backward.attention_function(
        lambda: (_bwd_preprocess_kernel, _bwd_dkdv_kernel, _bwd_dq_kernel), fwd_kernel=lambda: your_forward)
    try:  # the check limits each call to 20 s on a CPU
        check_triton_attention(yours_end_to_end, T=37, D=16, causal=True, name="your 05 + your 07")
        print("your forward kernel and your backward kernels agree with the reference, end to end")
    except Exception as exc:  # ungraded: report, never fail the notebook
        print(f"your forward + backward: {type(exc).__name__}: {exc}")

# %% [markdown]
# ## 7. Check yourself
#
# Answer in two to four sentences each, in your own words. These are graded by hand.
#
# **Q1.** Why does the backward need $\Delta = \operatorname{rowsum}(dO \circ O)$ from a separate
# kernel, instead of each dK/dV program computing $\operatorname{rowsum}(P \circ dP)$ itself?

# %% [markdown] nbgrader={"grade_id": "answer-why-preprocess", "solution": true, "grade": true, "points": 1}
# $\Delta_i = \sum_j P_{ij} dP_{ij}$ sums over *all* keys of row $i$, but a dK/dV program sees only
# its own key tile, so it would get a partial sum; every program needs the full value before it
# can form $dS = P \circ (dP - \Delta)$. The identity $\sum_j P_{ij} dP_{ij} = dO_i \cdot O_i$ gives
# the full sum from two $D$-vectors per row, so one cheap pass over $O$ and $dO$ computes it once
# for everyone, instead of an extra sweep over all key tiles for every row.

# %% [markdown]
# **Q2.** Your dK/dV kernel stores each row of $dK$ and $dV$ exactly once, without atomics. What
# property of the loop order guarantees that, and what would change if you made the query tiles
# the outer loop for all three gradients?

# %% [markdown] nbgrader={"grade_id": "answer-loop-order-triton", "solution": true, "grade": true, "points": 1}
# One program owns one key tile and visits every query tile that contributes to it, so the whole
# sum for those rows of $dK$ and $dV$ is formed in that program's registers and nothing else writes
# them. With query tiles outer, every program would hold partial sums for *all* key rows: $dK$ and
# $dV$ would have to be added into memory from many programs at once (atomics, or a reduction
# afterwards), which is slower and non-deterministic; that is exactly the situation dQ is in when
# it is computed inside the dK/dV kernel.

# %% [markdown]
# **Q3.** Your kernels pass every test in float32 on a CPU, but on a GPU with bf16 inputs $dK$ is
# off by a few percent while $dQ$ and $dV$ are fine. Name two likely causes.

# %% [markdown] nbgrader={"grade_id": "answer-bf16-dk", "solution": true, "grade": true, "points": 1}
# (1) Precision of an operand: casting $dS$ to bf16 before $dS^\top Q$ is standard, but computing
# $dS$ itself from bf16-rounded $P$ or $dP$ (a cast before the subtraction $dP - \Delta$, where
# the two terms nearly cancel) loses most of its bits; keep $P$, $dP$ and $\Delta$ in float32 until
# the product. (2) An accumulator in bf16 instead of float32, or the scale applied per tile to a
# low-precision value. A race would also show up here if $dK$ were accumulated by several programs
# (query tiles outer) without atomics: a store that loses updates only on the GPU.

# %% [markdown]
# **Q4.** The measured backward reaches fewer TFLOP/s than the forward. Where does the time go,
# and which change would you try first to close the gap?

# %% [markdown] nbgrader={"grade_id": "answer-backward-gap", "solution": true, "grade": true, "points": 1}
# The two kernels compute seven $T^2 D$ products for the five the standard count credits ($S$ and
# $dP$ twice), so even at the forward's speed per product the backward would show about 5/7 of its
# TFLOP/s. On top, the dK/dV kernel keeps $K$, $V$, $dK$, $dV$ and a $Q$, $dO$ tile live and does
# more element-wise work per product, so it runs smaller tiles or fewer stages. First try larger
# `block_n` with more warps for dK/dV (more reuse of each loaded $Q$, $dO$ tile), and on Hopper
# warp-specialised pipelines (TMA loads, `wgmma`); then fusing dQ into dK/dV with atomics, which
# removes the recomputation at the cost of atomic traffic.

# %% [markdown] nbgrader={"grade_id": "speed", "task": true, "locked": true, "points": 0}
# ## Speed, as the grader measures it
#
# Nothing to write here. On a GPU grader, once every test above passes, your three backward kernels are timed against
# the course's own kernels on one fixed problem (B=8, H=16, T=4096, D=64, causal, bfloat16, through `triton_flash_attention_backward` with its default tiles). The timing runs in a separate process that
# loads only the `@triton.jit` definitions of your solution cells (no other code of this notebook),
# with fresh random inputs and a cold L2 cache for every repetition, and every repetition's result is
# checked. You see your ratio to the course's kernel and your TFLOP/s (2.5 times the forward's FLOPs) here after grading, and your place
# on the class leaderboard. If your instructor gives this cell points, a ratio of 0.5 or less earns none
# and 0.9 or more earns all of them, linearly in between (the instructor may change both marks).
# A grader without a GPU leaves this cell for later, marked "needs GPU timing".

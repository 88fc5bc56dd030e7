# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · FlashAttention forward in Triton
#
# *Attention Kernels Lab, notebook 5 of 6.* In notebook 02 you wrote the FlashAttention forward
# pass as a Python loop over tiles; in notebook 04 you wrote your first Triton kernel. Here the two
# meet: one Triton program computes the attention output of a tile of queries, keeping the running
# max, the running sum and the output accumulator in registers while it streams key and value
# tiles past them. The $T \times T$ score matrix never reaches GPU memory.
#
# Without a GPU, the kernel runs through Triton's interpreter (set up by the first cell), and the
# tests use small float32 inputs. With a GPU, those small cases still run through the interpreter
# (there the tests can count your kernel's loads), the hidden tests add large half-precision cases
# compiled for the GPU, and the last section times your kernel against PyTorch's
# `scaled_dot_product_attention`.
#
# **How this notebook works.** Run the cells from the top. Cells marked *given* are read-only.
# Write code where it says `YOUR CODE HERE` and answers where it says `YOUR ANSWER HERE`. Hidden
# tests run when your notebook is graded, so pass the visible ones *and* think about the cases
# they leave out.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode (and switches Triton to its interpreter on a CPU) before any kernel
# is defined, then loads the course's support package.
from attnlab import init

RUNTIME = init()

import torch
import triton
import triton.language as tl

from attnlab import bench, launch
from attnlab.checks import time_limit
from attnlab.reference import naive_attention
from attnlab.verify import call_limit_s, check_flash_kernel, check_flash_kernel_large_offsets

DEVICE = RUNTIME.device  # "cuda" on a GPU, "cpu" under the interpreter

# %% [markdown]
# ## 1. The layout: who computes what
#
# Inputs are $Q, K, V$ of shape $(B, H, T, D)$ (batch, heads, sequence length, head dimension),
# self-attention, so all three have the same $T$. Outputs are $O$, shape $(B, H, T, D)$, and the
# log-sum-exp of every score row, $\text{LSE}$, shape $(B, H, T)$, float32, natural log: exactly
# what the backward pass of notebook 03 needs.
#
# **The grid.** The launcher starts a 2-D grid of $\lceil T / \text{BLOCK\_M} \rceil \times (B \cdot H)$
# programs. Program $(m, bh)$, with `m = tl.program_id(0)` and `bh = tl.program_id(1)`, owns query
# rows $[m \cdot \text{BLOCK\_M}, (m+1) \cdot \text{BLOCK\_M})$ of head $bh$. It
#
# 1. loads its $\text{BLOCK\_M} \times D$ tile of $Q$ **once**;
# 2. loops over the $\text{BLOCK\_N} \times D$ tiles of $K$ and $V$ that those rows need, updating
#    its running statistics after each;
# 3. writes its $\text{BLOCK\_M}$ rows of $O$ and of LSE **once**.
#
# Every program is independent, and there are enough of them to fill a GPU:
# $B \cdot H \cdot T / \text{BLOCK\_M} = 8 \cdot 16 \cdot 2048 / 64 = 4096$ at the sizes we time.
#
# **Addresses.** The launcher makes the inputs contiguous, so element $(b, h, t, d)$ sits at
# offset $((b H + h) T + t) D + d$. With $bh = bH + h$ this is
#
# $$\text{offset} = bh \cdot \underbrace{T D}_{\texttt{stride\_bh}} + t \cdot \underbrace{D}_{\texttt{stride\_t}} + d .$$
#
# So a tile of rows `offs_m` (a vector) and all columns `offs_d = tl.arange(0, HEAD_DIM)` is the
# 2-D block of pointers `Q + bh * stride_bh + offs_m[:, None] * stride_t + offs_d[None, :]`.
# LSE has one value per row: `LSE + bh * T + offs_m`. (If you ever pass a transposed view to a
# launcher that does not make it contiguous, `stride_t` is no longer $D$ and this breaks.)
# `bh * stride_bh` can exceed $2^{31}$ for large inputs, so widen `bh` to 64 bits first.

# %% [markdown]
# ## 2. The loop over key tiles
#
# For its query tile, the program keeps per row a running max $m$, a running sum $\ell$ and an
# accumulator $\text{acc}$ (a $\text{BLOCK\_M} \times D$ float32 block), starting from
# $(-\infty, 0, 0)$. For each key tile $j$ it computes, exactly as in notebook 02,
#
# $$S = Q K_j^\top \cdot \text{scale}, \quad m' = \max\big(m, \operatorname{rowmax} S\big), \quad
#   \tilde P = e^{S - m'}, \quad
#   \ell \leftarrow \ell\, e^{m - m'} + \operatorname{rowsum} \tilde P, \quad
#   \text{acc} \leftarrow \text{acc}\, e^{m - m'} + \tilde P V_j ,$$
#
# then $m \leftarrow m'$. At the end $O = \text{acc} / \ell$ and $\text{LSE} = m + \log \ell$.
#
# **In Triton.** `tl.dot(q, tl.trans(k))` gives $S$ on the tensor cores with float32 results.
# The product $\tilde P V_j$ adds into the accumulator in the same instruction:
# `acc = tl.dot(p.to(v.dtype), v, acc)`. The cast matters on a GPU: the tensor cores want both
# operands in the input's 16-bit type, while `acc` stays float32.
#
# **`exp2` instead of `exp`.** GPUs evaluate $2^x$ in one fast instruction; $e^x$ costs an extra
# multiply by $\log_2 e$. Since $e^{x} = 2^{x \log_2 e}$, fold that constant into the score scale once,
# `qk_scale = scale * 1.4426950408889634`, and work with base-2 scores $s = (q \cdot k)\,\text{qk\_scale}$
# throughout: $m$ becomes a base-2 max, every `tl.exp` becomes `tl.exp2`, and nothing else changes
# (the rescale identity holds in any base). Only the LSE must be converted back to the natural log:
# $\text{LSE} = (m + \log_2 \ell) \cdot \ln 2$.
#
# ### Two phases: tiles that need a mask and tiles that do not
#
# Masks cost instructions in the innermost loop, and most tiles need none. With a causal mask
# (query $i$ sees keys $j \le i$) and equal tile sizes, query tiles meet key tiles like this:
#
# ```
#               key tiles  →    0        1        2        3
#   query tile 0             [ diag ] [  --  ] [  --  ] [  --  ]
#   query tile 1             [ full ] [ diag ] [  --  ] [  --  ]
#   query tile 2             [ full ] [ full ] [ diag ] [  --  ]
#   query tile 3             [ full ] [ full ] [ full ] [ diag ]
#
#   full: every key visible to every row, no mask     diag: mask element by element
#   --  : every key hidden from every row, so the tile is never even loaded
# ```
#
# Skipping the `--` tiles halves the work of causal attention. The program therefore walks
#
# - **phase 1**, key tiles `[0, lo)`: no mask at all. Causal: `lo = (start_m // BLOCK_N) * BLOCK_N`,
#   the tiles that end at or before the first query row `start_m`. Not causal:
#   `lo = (T // BLOCK_N) * BLOCK_N`, every complete tile.
# - **phase 2**, key tiles `[lo, hi)`: the diagonal tiles, and the ragged tile holding the last
#   keys when $T$ is not a multiple of `BLOCK_N`. Causal: `hi = min(start_m + BLOCK_M, T)`, one
#   past the last key the last row of the tile may see. Not causal: `hi = T`.
#
# An off-by-one here hides well. Set `hi` to the *index* of the last key instead of one past it,
# and the loop still reaches that key whenever its tile holds other keys too; only when the last
# key is alone in its tile is the tile skipped. With blocks of 16, $T = 16$ and $T = 37$ pass and
# $T = 33$ fails: row 32 never sees key 32.
#
# ### Ragged edges: padded rows and masked columns
#
# When $T$ is not a multiple of the block sizes, the last tiles hang over the end.
#
# - **Padded query rows** (`offs_m >= T`). Load $Q$ with `mask=offs_m[:, None] < T, other=0.0`: the
#   padded rows are all zeros, their scores are finite (0), and they compute harmless values that
#   are **never stored**: both stores take `mask=offs_m < T`. An unmasked store writes into the next
#   head's rows, or past the end of the tensor.
# - **Masked key columns** (`offs_n >= T` and, causal, `offs_n > offs_m`). Two separate steps:
#   the loads of $K$ and $V$ take `mask=offs_n[:, None] < T, other=0.0`, so no memory outside the
#   tensor is touched and $V$'s padded rows are zeros (not garbage that could be NaN); then the
#   scores of hidden keys are set to $-\infty$ with `tl.where(visible, s, float("-inf"))`. The
#   second step is essential: `other=0.0` alone makes their scores 0, a perfectly real score that
#   takes probability mass.
#
# ### Where NaNs come from, and the guard
#
# $e^{-\infty - (-\infty)}$ is NaN. It appears when a row's running max is still $-\infty$ after a
# tile, that is, when **every score the row has seen so far is masked**: then $m' = -\infty$, and
# both the rescale $2^{m - m'}$ and $2^{s - m'}$ evaluate $-\infty - (-\infty)$. One NaN in
# $\ell$ or acc spreads to the whole row of the output, and $e^{\text{NaN}}$ never recovers.
#
# In this kernel it cannot happen for a row that is stored: the tiles are visited from key 0
# upwards, and the first tile any row visits contains a key it may see (phase 1 tiles are fully
# visible; otherwise the first phase-2 tile starts at `lo` $\le$ `start_m` $\le$ the row). After
# that $m$ is finite, and a fully masked tile later only adds $2^{-\infty - m} = 0$. Rows beyond $T$
# see all real keys, so they are finite too, and they are never stored anyway.
#
# That argument depends on the **order** of the tiles. Visit the diagonal first, or split the keys
# across programs as a split-K kernel (FlashDecoding) does, and a row can meet an entirely masked
# tile, or own an entirely masked slice of keys, before anything visible: NaN. The guard costs one
# comparison per row and tile: when $m' = -\infty$, use 0 as the offset instead (the row's $\ell$
# and acc are 0 and every masked term is $2^{-\infty} = 0$, so the result is exact),
#
# ```python
# m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
# alpha = tl.exp2(m_i - m_use); p = tl.exp2(s - m_use[:, None])
# ```
#
# and, when merging split-K partial results, treat a part with $\ell = 0$ as empty. The guard is
# cheap enough to keep in the masked phase even where, as here, it never fires.
#
# **Why "on a GPU"?** The interpreter computes the same arithmetic as the GPU, NaNs included. What
# differs is what you run: GPU tests and benchmarks use longer sequences and other tile shapes
# (`block_m=128, block_n=64`), which create tile/row combinations the small CPU tests never
# produce; and a load without a mask returns whatever happens to lie past the tensor on the
# device, which can be NaN or inf bit patterns, where on the CPU it often happened to be finite.

# %% [markdown]
# ### Your task: `_flash_fwd_kernel`
#
# `_flash_fwd_kernel(Q, K, V, O, LSE, stride_bh, stride_t, T, scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)`
#
# - launched by the given `triton_flash_attention` on grid `(cdiv(T, BLOCK_M), B * H)` with contiguous
#   $(B, H, T, D)$ tensors: `stride_bh = T * D`, `stride_t = D`, `HEAD_DIM = D`;
# - program `(m, bh)` writes rows `m * BLOCK_M ...` (those below `T`) of head `bh`:
#   $O = \operatorname{softmax}(Q K^\top \cdot \text{scale}) V$ in O's dtype, and the natural-log
#   LSE of every score row in float32;
# - `CAUSAL`: query $i$ attends keys $j \le i$ only; skip the key tiles no row of the tile can see;
# - keep $m$, $\ell$ and acc in float32; `BLOCK_M`, `BLOCK_N` and `HEAD_DIM` are powers of two $\ge 16$,
#   and $T$ is any length $\ge 1$.
#
# The two-phase loop and `exp2` make it fast on a GPU; a single masked loop with `tl.exp` is also
# correct and passes every test. You may write `@triton.jit` helper functions in this cell, above
# the kernel, and call them from it like ordinary functions (they are inlined).
#
# Useful: `tl.program_id`, `tl.arange`, `tl.load(..., mask=, other=)`, `tl.dot(a, b, acc)`,
# `tl.trans`, `tl.where`, `tl.maximum`, `tl.minimum`, `tl.max(x, axis=1)`, `tl.sum(x, axis=1)`,
# `tl.exp2`, `tl.log2`, `tl.full`, `tl.zeros`, `range(lo, hi, step)` with run-time bounds.
#
# The whole contract of `_flash_fwd_kernel` in one place: `attnlab.contracts.flash_fwd_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.flash_fwd_kernel)`).

# %% nbgrader={"grade_id": "_flash_fwd_kernel", "solution": true}
@triton.jit
def _flash_fwd_kernel(Q, K, V, O, LSE, stride_bh, stride_t, T, scale,
                      CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      HEAD_DIM: tl.constexpr):
    """FlashAttention forward for BLOCK_M query rows of one (batch, head).

    Args:
        Q, K, V: contiguous (B, H, T, HEAD_DIM) inputs; O: the output, same layout.
        LSE: (B, H, T) float32, the natural-log logsumexp of every score row.
        stride_bh, stride_t: T * HEAD_DIM and HEAD_DIM (elements between heads and between rows).
        T: sequence length; scale: multiplies the scores (HEAD_DIM ** -0.5).
        CAUSAL: query i sees keys j <= i only.
        BLOCK_M, BLOCK_N: query and key tile sizes.
    """
    ### BEGIN SOLUTION
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # 64-bit: bh * stride_bh overflows int32 on big inputs
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)  # this program's query rows
    offs_j = tl.arange(0, BLOCK_N)            # key positions inside one tile
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < T                       # rows >= T are padding: computed, never stored
    Q += bh * stride_bh                       # every pointer now starts at this (batch, head)
    K += bh * stride_bh
    V += bh * stride_bh
    O += bh * stride_bh
    LSE += bh * T

    q = tl.load(Q + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    qk_scale = scale * 1.4426950408889634    # scale * log2(e): base-2 scores, so exp2 replaces exp
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base 2)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)                # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)      # running sum of exp2(s - m_i) * v

    # Key tiles [0, lo) are visible to every row of this tile: no mask.
    # Key tiles [lo, hi) need a mask: the causal diagonal, or the ragged tile of keys >= T.
    if CAUSAL:
        lo = (start_m // BLOCK_N) * BLOCK_N       # tiles ending at or before the first row
        hi = tl.minimum(start_m + BLOCK_M, T)     # keys after the last row are never needed
    else:
        lo = (T // BLOCK_N) * BLOCK_N             # every complete tile
        hi = T

    # Phase 1: full tiles, no masks.
    for start_n in range(0, lo, BLOCK_N):
        kv_offs = (start_n + offs_j)[:, None] * stride_t + offs_d[None, :]
        k = tl.load(K + kv_offs)
        v = tl.load(V + kv_offs)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)              # re-measures the old state against the new max
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new

    # Phase 2: diagonal and ragged tiles, masked.
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_j
        key_ok = offs_n < T
        kv_offs = offs_n[:, None] * stride_t + offs_d[None, :]
        k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)
        v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))   # hidden keys get probability exactly 0
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # guard: nothing visible yet
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new

    o = acc / l_i[:, None]
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # back to the natural log: times ln(2)
    tl.store(O + offs_m[:, None] * stride_t + offs_d[None, :], o.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + offs_m, lse, mask=row_ok)
    ### END SOLUTION


# %% nbgrader={"grade_id": "triton_flash_attention", "locked": true}
# Given: the launcher. It checks q, k, v (same (B, H, T, D), D a power of two >= 16, one device and
# dtype: float32 or float16, and bfloat16 on a GPU only, as Triton's CPU interpreter gets bfloat16
# tl.dot wrong; block sizes powers of two >= 16), makes them contiguous, allocates O and LSE full
# of NaN (a row your kernel forgets stays NaN) and launches the grid (cdiv(T, block_m), B * H).
# In the small float32 cases, which run through the interpreter on every machine, the tests also
# count your kernel's loads: K and V in tiles of at most BLOCK_N keys, each key once per program,
# and no causal tile that lies entirely past the diagonal.
def triton_flash_attention(q, k, v, causal=False, block_m=64, block_n=64, num_warps=4, num_stages=2):
    """FlashAttention forward by your `_flash_fwd_kernel`: returns (o, lse), lse float32 (B, H, T)."""
    return launch.launch_flash_forward(_flash_fwd_kernel, q, k, v, causal=causal, block_m=block_m,
                                       block_n=block_n, num_warps=num_warps, num_stages=num_stages)


# %% [markdown]
# Try it before the tests, on a ragged causal case. Both differences should be around 1e-6 in
# float32 on a CPU (around 1e-3 on a GPU, where float32 products use TF32).

# %% nbgrader={"grade_id": "try-flash", "locked": true}
g = torch.Generator().manual_seed(0)
q_try, k_try, v_try = (torch.randn(1, 2, 37, 32, generator=g).to(DEVICE) for _ in range(3))
with time_limit(call_limit_s(), "triton_flash_attention"):  # a kernel that never returns fails after 20 s on a CPU
    o_try, lse_try = triton_flash_attention(q_try, k_try, v_try, causal=True, block_m=16, block_n=16)
o_ref, lse_ref = naive_attention(q_try, k_try, v_try, causal=True)
print("O   max abs difference:", (o_try - o_ref).abs().max().item())
print("LSE max abs difference:", (lse_try - lse_ref).abs().max().item(), " LSE shape:", tuple(lse_try.shape))

# %% [markdown]
# ### Test: output and LSE match the reference
#
# The check compares O and LSE (shape $(B, H, T)$, natural log) with `naive_attention` computed in
# float64 from the same inputs, causal and not. The outputs start as NaN and are followed in memory
# by guard values, so a row never written or a store past the end fails with its index.

# %% nbgrader={"grade_id": "test_flash_kernel_matches_reference", "grade": true, "locked": true, "points": 3}
for causal in (False, True):
    check_flash_kernel(_flash_fwd_kernel, T=16, D=32, causal=causal)
check_flash_kernel(_flash_fwd_kernel, B=2, H=3, T=16, D=32, seed=1)  # six heads: the bh offsets
print("visible checks passed")
### BEGIN HIDDEN TESTS
for causal in (False, True):
    check_flash_kernel(_flash_fwd_kernel, T=64, D=32, causal=causal, seed=1)
    check_flash_kernel(_flash_fwd_kernel, T=64, D=16, causal=causal, block_m=32, block_n=16, seed=2)
    check_flash_kernel(_flash_fwd_kernel, T=64, D=64, causal=causal, block_m=16, block_n=32, seed=3)
    check_flash_kernel(_flash_fwd_kernel, T=32, B=2, H=3, D=32, causal=causal, seed=4)
    check_flash_kernel(_flash_fwd_kernel, T=16, B=3, H=1, D=32, causal=causal, block_m=16, block_n=16, seed=8)
    # longer than any fixed block of keys a kernel might get away with on the short cases
    check_flash_kernel(_flash_fwd_kernel, T=203, H=1, D=16, causal=causal, block_m=64, block_n=32, seed=9)
# three heads of 2^26 rows: bh * stride_bh passes 2^31 at the third (only the rows read exist; every machine)
check_flash_kernel_large_offsets(_flash_fwd_kernel, seed=10)
if not RUNTIME.interpret:  # sizes that fill a GPU, half precision, the launcher's defaults and more
    # each (D, dtype, causal, tiles) is a compile of its own (~1.5 s on an H200): each 16-bit type at one
    # head size (bf16 at 64, fp16 at 128) rather than every (D, dtype) pair
    for D, dtype in ((64, torch.bfloat16), (128, torch.float16)):
        for causal in (False, True):
            check_flash_kernel(_flash_fwd_kernel, B=4, H=8, T=1024, D=D, causal=causal, dtype=dtype,
                               block_m=64, block_n=64, seed=5)
            check_flash_kernel(_flash_fwd_kernel, B=4, H=8, T=1024, D=D, causal=causal, dtype=dtype,
                               block_m=128, block_n=64, num_warps=8, num_stages=3, seed=6)
    check_flash_kernel(_flash_fwd_kernel, B=2, H=4, T=512, D=64, causal=True, dtype=torch.float32,
                       block_m=64, block_n=32, seed=7)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: lengths that are not a multiple of the blocks
#
# $T = 37$ leaves padded query rows and a ragged last key tile; block sizes differ between queries
# and keys. Padded rows must not be stored, hidden keys must get probability 0, and a causal row
# must still see its own key.

# %% nbgrader={"grade_id": "test_flash_kernel_ragged", "grade": true, "locked": true, "points": 3}
for causal in (False, True):
    check_flash_kernel(_flash_fwd_kernel, T=37, D=32, causal=causal, block_m=16, block_n=16)
check_flash_kernel(_flash_fwd_kernel, T=33, D=32, causal=True, block_m=16, block_n=16)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for causal in (False, True):
    check_flash_kernel(_flash_fwd_kernel, T=37, D=32, causal=causal, block_m=16, block_n=32, seed=11)
    check_flash_kernel(_flash_fwd_kernel, T=37, D=32, causal=causal, block_m=32, block_n=16, seed=12)
    check_flash_kernel(_flash_fwd_kernel, T=33, D=16, causal=causal, block_m=16, block_n=16, seed=13)
    check_flash_kernel(_flash_fwd_kernel, T=5, D=16, causal=causal, block_m=16, block_n=16, seed=14)
check_flash_kernel(_flash_fwd_kernel, T=49, B=2, H=1, D=32, causal=True, block_m=32, block_n=16, seed=15)
# T a multiple of neither block; causal with block_m > block_n: key tiles fully hidden from some rows
check_flash_kernel(_flash_fwd_kernel, T=83, H=1, D=16, causal=True, block_m=64, block_n=16, seed=16)
check_flash_kernel(_flash_fwd_kernel, T=83, H=1, D=16, causal=False, block_m=16, block_n=64, seed=17)
if not RUNTIME.interpret:
    for T in (1000, 1023, 1025):
        for causal in (False, True):
            check_flash_kernel(_flash_fwd_kernel, B=2, H=8, T=T, D=64, causal=causal, dtype=torch.bfloat16,
                               block_m=128, block_n=64, num_warps=8, num_stages=3, seed=T)
            check_flash_kernel(_flash_fwd_kernel, B=2, H=8, T=T, D=128, causal=causal, dtype=torch.float16,
                               block_m=64, block_n=32, seed=T + 1)
    for causal in (False, True):  # fewer rows and keys than one tile, compiled (T = 1000's launch: no new compile)
        check_flash_kernel(_flash_fwd_kernel, B=2, H=8, T=5, D=64, causal=causal, dtype=torch.bfloat16,
                           block_m=128, block_n=64, num_warps=8, num_stages=3, seed=5)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: scores that grow along the keys
#
# Here every score row grows by at least 0.5 per key, so each new key tile raises the running
# max. A kernel that forgets to rescale `acc` or $\ell$ is right only when the first tile holds
# the max, which is never the case here.

# %% nbgrader={"grade_id": "test_flash_kernel_growing_scores", "grade": true, "locked": true, "points": 2}
check_flash_kernel(_flash_fwd_kernel, T=64, D=16, causal=False, block_m=16, block_n=16, growing=True)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_flash_kernel(_flash_fwd_kernel, T=64, D=16, causal=True, block_m=32, block_n=16, growing=True, seed=21)
check_flash_kernel(_flash_fwd_kernel, T=48, D=32, causal=False, block_m=16, block_n=32, growing=True, seed=22)
for causal in (False, True):
    # every score near -1000: exp underflows to 0 unless the running max starts at -inf
    check_flash_kernel(_flash_fwd_kernel, T=37, H=1, D=16, causal=causal, offset=-1000.0, seed=24)
# the row max in the first, a middle and the last (ragged) key tile
for seed, (peak, causal) in enumerate((("first", True), ("middle", False), ("last", False))):
    check_flash_kernel(_flash_fwd_kernel, T=50, H=1, D=16, causal=causal, block_m=32, block_n=16, peak=peak,
                       seed=25 + seed)
if not RUNTIME.interpret:
    check_flash_kernel(_flash_fwd_kernel, B=2, H=4, T=512, D=64, causal=True, dtype=torch.float32,
                       block_m=64, block_n=32, growing=True, seed=23)  # the first test's TF32 launch: no new compile
    # the regimes above, compiled (the launch configuration of the ragged GPU cases: no new compile)
    for regime in (dict(offset=-1000.0), dict(peak="last")):
        check_flash_kernel(_flash_fwd_kernel, B=2, H=8, T=1025, D=64, causal=False, dtype=torch.bfloat16,
                           block_m=128, block_n=64, num_warps=8, num_stages=3, seed=30, **regime)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. How fast is it? (GPU)
#
# ### Predict before you measure
#
# For $B = 8$, $H = 16$, $T = 2048$, $D = 64$, causal, in bf16 (2 bytes per element). Store plain numbers.
#
# 1. `score_matrix_bytes`: the bytes of the full score matrix $S$ of all heads and batch elements,
#    if it were stored (it never is in your kernel).
# 2. `causal_fwd_flops`: the forward FLOPs, counted the usual way: two matrix products of
#    $2 T^2 D$ FLOPs per head, $4 B H T^2 D$ in all, halved for causal attention.
# 3. `ideal_us`: the time in **microseconds** those FLOPs take at 700 TFLOP/s, about what a dense
#    bf16 matrix product reaches on an H200.

# %% nbgrader={"grade_id": "predict-attention-cost", "solution": true}
score_matrix_bytes = None
causal_fwd_flops = None
ideal_us = None
### BEGIN SOLUTION
score_matrix_bytes = 8 * 16 * 2048**2 * 2
causal_fwd_flops = 4 * 8 * 16 * 2048**2 * 64 / 2
ideal_us = causal_fwd_flops / 700e12 * 1e6
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-attention-cost", "grade": true, "locked": true, "points": 1}
from attnlab.checks import assert_number, require_number

for _name in ("score_matrix_bytes", "causal_fwd_flops", "ideal_us"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
assert_number(score_matrix_bytes, 8 * 16 * 2048**2 * 2, name="score_matrix_bytes", rel=0.01)
assert_number(causal_fwd_flops, 4 * 8 * 16 * 2048**2 * 64 / 2, name="causal_fwd_flops", rel=0.01)
assert_number(ideal_us, 4 * 8 * 16 * 2048**2 * 64 / 2 / 700e12 * 1e6, name="ideal_us", rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# **Predict in words.** The cell below times your kernel at exactly this size, with four tile
# configurations, against SDPA's default (cuDNN on an H100 or H200) and SDPA's FlashAttention-2
# backend. Before running it: what fraction of `ideal_us` (the 700 TFLOP/s of pure matrix products)
# do you expect your kernel to reach, and will it be faster or slower than each SDPA backend? Reason
# from what your inner loop does besides the two `tl.dot`s.

# %% [markdown] nbgrader={"grade_id": "answer-predict-peak-fraction", "solution": true, "grade": true, "points": 1}
# Well below 700 TFLOP/s, around half. Besides the two products, every key tile costs an `exp2` per
# score (on the much slower special-function units, not the tensor cores), a row max and a row sum,
# and the rescale of acc, and the diagonal tiles do half their work for masked scores; with 4096
# programs the start and the end of the grid also cost a little. So perhaps 300 TFLOP/s, about
# 0.22 ms against `ideal_us` of 98 µs. cuDNN's kernel is written for Hopper and should be faster;
# SDPA's FlashAttention-2 backend implements the same algorithm but was written for the previous
# generation (Ampere), so a Triton kernel compiled for the H200 can beat it. (Measured on an H200,
# 2026-11-30: 312 to 318 TFLOP/s, 0.216 ms at best, 45 % of 700; cuDNN 374; FlashAttention-2 246.)

# %% [markdown]
# The measurement (GPU only): first a correctness check against SDPA in bf16, then medians of
# `triton.testing.do_bench` for your kernel at a few tile configurations and for SDPA (its default
# choice, and its FlashAttention-2 backend). Try your own configurations: larger tiles reuse each
# loaded K/V tile for more queries but need more registers; `num_stages` sets how many K/V tiles
# are prefetched while the current one is being used. Your kernel is timed alone, into outputs
# allocated once: the launcher's NaN fill of fresh outputs is a testing aid that SDPA does not pay.
#
# Each configuration also shows what the compiled kernel uses per thread and per program:
# registers (a streaming multiprocessor has 65,536 to share among the threads it keeps resident),
# bytes **spilled** to local memory when registers run out (slow; you want none), and shared
# memory (where the pipelined K/V tiles wait; more stages, more of it). On a CPU the cell compiles
# your kernel for an H100/H200 (sm_90) without running it and prints only these figures.

# %% nbgrader={"grade_id": "bench-flash", "locked": true}
CONFIGS = ((64, 64, 4, 2), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3))  # block_m, block_n, warps, stages
if RUNTIME.interpret:
    print("No GPU, so no timings: run this cell on a GPU (for example Colab) to time your kernel against SDPA.")
    print("What your kernel would use on an H100/H200 (compiled here for sm_90), fp16, causal, D=64:")
    # float16: the launchers refuse bfloat16 under the interpreter; both 16-bit types compile alike
    q_b = torch.randn(1, 1, 128, 64, dtype=torch.float16)  # dtypes and strides matter here, not sizes
    o_b, lse_b = torch.empty_like(q_b), torch.empty(1, 1, 128)
    for bm, bn, warps, stages in CONFIGS:
        print(f"  block_m={bm:<4} block_n={bn:<4} warps={warps} stages={stages}: "
              + bench.kernel_resources(launch.run_flash_kernel, _flash_fwd_kernel, q_b, q_b, q_b, o_b, lse_b,
                                       causal=True, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages))
    del q_b, o_b, lse_b
    # notes/gpu-measurements.md, "05, bench cell": what this cell printed on an H200
    RECORDED_H200 = [(f"reference block_m={bm:<4} block_n={bn:<4} warps={warps} stages={stages}", tf)
                     for (bm, bn, warps, stages), tf in zip(CONFIGS, (312, 300, 318, 254))]
    RECORDED_H200 += [("SDPA default (cuDNN)", 374), ("SDPA FlashAttention-2 backend", 246)]
    print("\nRecorded on an NVIDIA H200 (2026-11-30; torch 2.11, triton 3.6, cuDNN 9.19) at this cell's size,")
    print("B=8 H=16 T=2048 D=64 causal bf16, with the course's reference kernel in place of yours:")
    for label, tf in RECORDED_H200:
        print(f"  {label:<55} {tf:4d} TFLOP/s")
    print("Without a GPU, answer Q1 of section 4 from these figures.")
elif bench.autograding():
    print("Autograding: the timings are not graded, so this cell does not compile and time four configs.")
else:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    B_, H_, T_, D_ = 8, 16, 2048, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q_b, k_b, v_b = (torch.randn(B_, H_, T_, D_, device="cuda", dtype=torch.bfloat16, generator=g)
                     for _ in range(3))
    flops = bench.attention_flops(B_, H_, T_, D_, causal=True)
    o_b, _ = triton_flash_attention(q_b, k_b, v_b, causal=True)
    print("max |yours - SDPA| in bf16:", (o_b - sdpa(q_b, k_b, v_b, is_causal=True)).abs().max().item())
    print(f"\nB={B_} H={H_} T={T_} D={D_} causal bf16, {flops / 1e9:.1f} GFLOP")
    o_b, lse_b = torch.empty_like(q_b), torch.empty(B_, H_, T_, device="cuda", dtype=torch.float32)
    for bm, bn, warps, stages in CONFIGS:
        # the kernel alone, launched as triton_flash_attention launches it, into outputs allocated once
        ms = bench.median_ms(lambda: launch.run_flash_kernel(_flash_fwd_kernel, q_b, k_b, v_b, o_b, lse_b,
                                                             causal=True, block_m=bm, block_n=bn,
                                                             num_warps=warps, num_stages=stages))
        res = bench.kernel_resources(launch.run_flash_kernel, _flash_fwd_kernel, q_b, k_b, v_b, o_b, lse_b,
                                     causal=True, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
        print(f"yours  block_m={bm:<4} block_n={bn:<4} warps={warps} stages={stages}: "
              f"{ms:.3f} ms  {bench.tflops(flops, ms):6.1f} TFLOP/s  [{res}]")
    ms = bench.median_ms(lambda: sdpa(q_b, k_b, v_b, is_causal=True))
    print(f"SDPA default ({bench.sdpa_backend(q_b, k_b, v_b, True)}): {ms:.3f} ms  "
          f"{bench.tflops(flops, ms):6.1f} TFLOP/s")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ms = bench.median_ms(lambda: sdpa(q_b, k_b, v_b, is_causal=True))
    print(f"SDPA FlashAttention-2 backend: {ms:.3f} ms  {bench.tflops(flops, ms):6.1f} TFLOP/s")
    del q_b, k_b, v_b, o_b, lse_b

# %% [markdown]
# ## 4. Check yourself
#
# Answer in two to four sentences each, in your own words. These are graded by hand.
#
# **Q1.** Your kernel, SDPA's FlashAttention-2 backend and cuDNN's kernel compute the same thing
# with the same algorithm (tiles, online softmax, causal tiles skipped), the same FLOPs and about the
# same bytes, yet the measurement put them far apart. Report your three figures and give two reasons
# why implementations of one algorithm can differ by 1.5 times on the same GPU. (Without a GPU,
# report the H200 figures that the measurement cell prints, the reference kernel's in place of yours.)

# %% [markdown] nbgrader={"grade_id": "answer-same-algorithm", "solution": true, "grade": true, "points": 1}
# On an H200 (2026-11-30, T = 2048, D = 64, causal bf16): mine 318 TFLOP/s at best (128/64 tiles,
# 8 warps, 3 stages; 312 with the launcher's default), cuDNN 374, the FlashAttention-2 backend 246:
# 1.5 times between the fastest and the slowest. Reasons: (1) the instructions each one is compiled
# to: FlashAttention-2's kernels were written for Ampere's synchronous tensor-core instructions,
# while Triton and cuDNN use Hopper's asynchronous warpgroup matrix instructions (wgmma; cuDNN also
# its tensor memory accelerator, TMA, for loads); (2) how well the softmax work hides behind the
# matrix products: the best Hopper kernels give loading, matmuls and exponentials to different warps
# so that they overlap, where a simple kernel does them one after the other; (3) tile shapes,
# pipelining depth and the order in which causal tiles are scheduled: my four configurations alone
# spread from 254 to 318 TFLOP/s.

# %% [markdown]
# **Q2.** The first line of the measurement compares your bf16 output with SDPA's: on an H200 it
# printed `max |yours - SDPA| in bf16: 0.00390625`. Is that a bug? Relate the number to the bf16
# format, and say which step of your kernel rounds the most.

# %% [markdown] nbgrader={"grade_id": "answer-bf16-difference", "solution": true, "grade": true, "points": 1}
# Not a bug. bf16 keeps 8 significant bits, so neighbouring values in $[0.5, 1)$ are
# $2^{-8} = 0.0039$ apart: 0.00390625 is exactly one rounding step of an output element between 0.5
# and 1 (half a step between 1 and 2), where the two kernels rounded nearly equal float32 results to
# different neighbours, or where their
# float32 sums, accumulated in a different order, straddled a rounding boundary. The biggest rounding
# inside my kernel is casting $\tilde P$ to bf16 before $\tilde P V$ (relative error up to $2^{-8}$ per
# probability); $m$, $\ell$ and acc stay in float32. A real bug (a missing rescale or mask) gives errors
# of order 0.1 to 1; the float32 comparison in notebook 06 shows a relative error of about 2e-3,
# the size that bf16 probabilities explain.

# %% [markdown]
# **Q3.** Your Triton kernel passes every test on a CPU, but on a GPU it returns NaNs for causal
# attention when $T$ is not a multiple of the block size. Where do you look first?

# %% [markdown] nbgrader={"grade_id": "answer-gpu-nans", "solution": true, "grade": true, "points": 1}
# NaN means some row computed $e^{-\infty - (-\infty)}$: its running max was still $-\infty$ when
# every score of a tile was masked. I would check (1) the loop bounds of causal skipping, whether a
# row can meet a fully masked tile before any visible key (tiles visited out of order, or an extra
# tile past the diagonal with `block_n` ≠ `block_m`); (2) the masked loads: without `mask=`/`other=`,
# K and V rows past $T$ are whatever sits in GPU memory, possibly NaN or inf, where the CPU happened to
# give finite values; (3) padded rows beyond $T$, whether they are computed with every score masked
# and then stored. The fix is masks on every load and store plus the $m = -\infty$ guard.

# %% [markdown]
# **Q4.** In your kernel the guard `m_use = where(m_new == -inf, 0, m_new)` never changes a stored
# result. Describe a way of ordering or splitting the key tiles in which it would, and what goes
# wrong without it.

# %% [markdown] nbgrader={"grade_id": "answer-split-k-guard", "solution": true, "grade": true, "points": 1}
# Split-K (FlashDecoding) gives each program a slice of the keys and merges the partial $(m, \ell,
# \text{acc})$ afterwards. With a causal mask, the program owning keys 64 to 127 computes nothing
# visible for query rows below 64, so their running max stays $-\infty$ and, without the guard, both
# $2^{m - m'}$ and $2^{s - m'}$ are NaN and poison the merge. The same happens if tiles are visited
# from the diagonal backwards with `block_n` < `block_m`: the first row of the query tile meets a
# fully masked key tile first. With the guard such a part ends with $\ell = 0$, acc $= 0$, and the
# merge can treat it as empty.

# %% [markdown] nbgrader={"grade_id": "speed", "task": true, "locked": true, "points": 0}
# ## Speed, as the grader measures it
#
# Nothing to write here. On a GPU grader, once every test above passes, your `_flash_fwd_kernel` is timed against
# the course's own kernels on one fixed problem (B=8, H=16, T=4096, D=64, causal, bfloat16, through `triton_flash_attention` with its default tiles). The timing runs in a separate process that
# loads only the `@triton.jit` definitions of your solution cells (no other code of this notebook),
# with fresh random inputs and a cold L2 cache for every repetition, and every repetition's result is
# checked. You see your ratio to the course's kernel and your TFLOP/s here after grading, and your place
# on the class leaderboard. If your instructor gives this cell points, a ratio of 0.5 or less earns none
# and 0.9 or more earns all of them, linearly in between (the instructor may change both marks).
# A grader without a GPU leaves this cell for later, marked "needs GPU timing".

# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · FlashAttention forward, tile by tile
#
# *Attention Kernels Lab, notebook 2 of 6.* In notebook 01 you kept a running $(m, \ell)$ per row.
# Here you add a third running quantity, the **unnormalised output** $\text{acc}$, and obtain the
# whole attention output without ever holding a $T \times T$ matrix. You write it in plain PyTorch
# with explicit loops over tiles: the same algorithm a GPU kernel runs (notebook 05), but readable
# and exact in float64.
#
# Run the cells from the top. *Given* cells are read-only; write code where it says
# `YOUR CODE HERE` and answers where it says `YOUR ANSWER HERE`. Hidden tests run at grading.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode and loads the course's support package.
from attnlab import init

RUNTIME = init()

import math

import torch

from attnlab.reference import naive_attention
from attnlab.verify import check_flash_forward

# %% [markdown]
# ## 1. The reference you must match
#
# `naive_attention(q, k, v, causal=False, scale=None) -> (o, lse)` (given, from `attnlab`) builds
# the full score matrix. Layout is `(B, H, T, D)`: batch, heads, sequence, head dimension. Queries
# may be a different length $T_q$ from keys and values $T_k$ (cross-attention, or decoding a few new
# tokens against a long cache). With `causal=True`, query $i$ sees keys $j \le i$ only, counted from
# the top-left corner, as `torch.nn.functional.scaled_dot_product_attention(is_causal=True)` does
# (the next subsection says why that is not the only choice).
# `lse` is the natural-log log-sum-exp of each score row, in float32 or wider.

# %%
q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64) for _ in range(3))
o_ref, lse_ref = naive_attention(q, k, v, causal=True)
print(o_ref.shape, lse_ref.shape, lse_ref.dtype)
sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print("matches SDPA:", torch.allclose(o_ref, sdpa))

# %% [markdown]
# ### Causal with $T_q \ne T_k$: two alignments
#
# "Query $i$ sees keys $j \le i$" is unambiguous only when $T_q = T_k$. With different lengths the
# mask has to be anchored at a corner of the $T_q \times T_k$ score matrix, and two conventions exist:
#
# | alignment | query $i$ sees | used by |
# |---|---|---|
# | **top-left** | keys $j \le i$ | `scaled_dot_product_attention(is_causal=True)`; **this course's `causal=True`** in notebooks 01 to 06 |
# | **bottom-right** | keys $j \le i + T_k - T_q$ | decoding with a KV cache; flash-attn since 2.1; `torch.nn.attention.bias.causal_lower_right`; notebook 08 of the second assignment |
#
# Bottom-right is the one decoding needs. The $T_q$ new tokens are the *last* $T_q$ positions of a
# sequence whose first $T_k - T_q$ positions already sit in the cache, so new token $i$ must see the
# whole cache and the new tokens up to itself: $j \le (T_k - T_q) + i$. Top-left would let the
# first new token see key 0 alone and hide almost the whole cache from it. With $T_q > T_k$,
# bottom-right leaves the first $T_q - T_k$ rows with no key at all (their output is undefined;
# kernels usually write 0), while top-left gives every row key 0.
#
# This course uses **top-left** for `causal=True` because it is what PyTorch's `is_causal` does, so
# every reference and every test here is one call to SDPA away, and because for self-attention
# ($T_q = T_k$), the only case the Triton kernel of notebooks 05 and 06 handles, the two are the
# same mask. The tests include
# causal cases with $T_q \ne T_k$; a check that receives the bottom-right output says so.

# %%
T_q_demo, T_k_demo = 3, 6
rows, cols = torch.arange(T_q_demo)[:, None], torch.arange(T_k_demo)[None, :]
print("top-left (this course, SDPA's is_causal): query i sees j <= i\n", (cols <= rows).int())
print("bottom-right (KV-cache decoding): query i sees j <= i + T_k - T_q\n",
      (cols <= rows + T_k_demo - T_q_demo).int())

# %% [markdown]
# ## 2. From the online softmax to the output
#
# Fix one query row $q$ and let $s_j = q \cdot k_j \cdot \text{scale}$. Its output is
#
# $$o = \sum_j p_j v_j = \frac{\sum_j e^{s_j - m}\, v_j}{\sum_j e^{s_j - m}} = \frac{\text{acc}}{\ell},$$
#
# for any offset $m$, in particular the running max. The numerator is a sum over keys exactly like
# $\ell$, only with vectors instead of scalars, so it obeys the same update. Processing the keys in
# tiles $K_j, V_j$ and holding $(m, \ell, \text{acc})$ for a *tile of queries* $Q_i$:
#
# $$
# \begin{aligned}
# S &= Q_i K_j^\top \cdot \text{scale} && \text{(a } b_q \times b_k \text{ tile, never stored)}\\
# m' &= \max\big(m, \operatorname{rowmax} S\big)\\
# \tilde P &= e^{\,S - m'} && \text{(row-wise offset)}\\
# \text{acc} &\leftarrow \text{acc} \cdot e^{\,m - m'} + \tilde P\, V_j\\
# \ell &\leftarrow \ell \cdot e^{\,m - m'} + \operatorname{rowsum} \tilde P\\
# m &\leftarrow m'
# \end{aligned}
# $$
#
# Start from $m = -\infty$, $\ell = 0$, $\text{acc} = 0$. After the last key tile,
# $O_i = \text{acc} / \ell$ and $\text{LSE}_i = m + \log \ell$. The rescale of $\text{acc}$ is exact
# for the same reason as in notebook 01: every vector already summed into $\text{acc}$ carries a
# factor $e^{s - m}$, and multiplying by $e^{m - m'}$ converts it to $e^{s - m'}$.
#
# **Ragged tiles.** Block sizes need not divide $T$: the last query tile and the last key tile are
# simply shorter. Slicing (`q[:, :, i0:i1]` with `i1 = min(i0 + block_q, T_q)`) handles it.
#
# > **FlashAttention-1 → FlashAttention-2.** The loop above (query tiles outside, key tiles
# > inside, one division by $\ell$ at the end, the LSE saved) is FlashAttention-2's (Dao 2023,
# > Algorithm 1). The first paper (Dao et al. 2022, Algorithms 1 and 2) computes the same result
# > with a different schedule:
# >
# > | | FlashAttention (2022) | FlashAttention-2 (2023) |
# > |---|---|---|
# > | loop order | key/value tiles outside, query tiles inside: each query tile's $O$, $m$, $\ell$ go back to HBM after every key tile | query tiles outside: $\text{acc}$, $m$, $\ell$ stay on chip for the whole inner loop; $O$ is written once |
# > | normalising | rescales $O$ to a normalised output at every step | keeps the unnormalised $\text{acc}$ and divides by $\ell$ once, at the end (fewer non-matmul FLOPs) |
# > | saved for the backward | $m$ and $\ell$, two numbers per row | $\text{LSE} = m + \log \ell$, one number per row (notebook 03) |
# > | parallelism | one program per (batch, head) | also one program per query tile, along the sequence: grid $(\lceil T_q / b_q \rceil, B \cdot H)$ fills the GPU even when $B \cdot H$ is small (notebook 05); inside a program, warps split the queries, not the keys |

# %% [markdown]
# ## 3. Causal attention: which tiles to visit
#
# Take a query tile covering rows $[i_0, i_1)$ and a key tile covering columns $[j_0, j_1)$.
# Row $i$ may see column $j$ only when $j \le i$. Three cases:
#
# | tile class | condition | what to do |
# |---|---|---|
# | **full** | $j_1 - 1 \le i_0$: the tile's last key is at or left of its first query | no mask needed |
# | **diagonal** | neither full nor skipped | mask entries with $j > i$ to $-\infty$ before the max and the exp |
# | **skip** | $j_0 > i_1 - 1$: the tile's first key is right of its last query | never load it |
#
# So the last key tile a query tile needs is the one that contains column $i_1 - 1$: the tiles
# covering key columns $[0, \min(i_1, T_k))$ are visited, everything after is skipped. With equal block sizes about half
# of all tiles are skipped at large $T$.
#
# ```
#             keys →   tile 0   tile 1   tile 2   tile 3
# queries  tile 0   [ diag  ][  skip  ][  skip  ][  skip  ]
#    ↓     tile 1   [ full  ][ diag   ][  skip  ][  skip  ]
#          tile 2   [ full  ][ full   ][ diag   ][  skip  ]
#          tile 3   [ full  ][ full   ][ full   ][ diag   ]
# ```
#
# With different block sizes ($b_q \ne b_k$) a query tile can touch two diagonal key tiles, or a key
# tile can be diagonal for several query tiles; the conditions above still decide every case.
#
# **Why $-\infty$ never turns into NaN here.** If you visit key tiles from 0 upward, every query row
# sees key 0 in its first tile (row $i \ge 0$ sees column $0$), so its running max is finite before
# any later tile can mask the row completely; a fully masked row then contributes
# $e^{-\infty - m} = 0$. Visit tiles in another order (as split-K kernels do) and a row can meet a
# fully masked tile first: $m' = -\infty$ and $e^{-\infty - (-\infty)}$ is NaN. Your code must be
# correct whichever order you choose.

# %% [markdown]
# ## 4. How much memory traffic does this save?
#
# Count **elements** per head (multiply by 2 for bytes in bf16), with $T_q = T_k = T$.
#
# - **Naive** writes $S$, reads it for the softmax, writes $P$ and reads it for $PV$: $4T^2$
#   elements, plus $4Td$ for reading $Q, K, V$ and writing $O$.
# - **Tiled** reads $Q$ and writes $O$ once ($2Td$) and streams all of $K$ and $V$ ($2Td$) once per
#   query tile: $\lceil T / b_q \rceil \cdot 2Td$. How tall can a query tile be? With $M$ elements
#   of on-chip memory per multiprocessor holding a $Q$ tile, the accumulator and a $K$ and a $V$
#   tile, about $b_q \approx M / (4d)$ rows (the first paper sizes its tiles the same way,
#   $\lceil M / 4d \rceil$; Dao et al. 2022, Algorithm 1).
#   Then $K$ and $V$ cost $\frac{T}{M/(4d)} \cdot 2Td = 8 T^2 d^2 / M$ elements: the
#   $\Theta(T^2 d^2 / M)$ of the paper's Theorem 2, where $M$ is in elements, not bytes.
#
# The tiled traffic is below naive's $4T^2$ when $8 d^2 / M < 4$, that is when $d^2 < M / 2$.
# An H100 or H200 multiprocessor has up to 228 KiB of shared memory, $M \approx 117{,}000$ bf16
# elements, so $M/2 \approx 58{,}000$: at $d = 64$ ($d^2 = 4096$) the tiled version moves about
# $M / (2d^2) \approx 14$ times fewer bytes for $K$, $V$, $S$ and $P$; at $d = 128$ about 3.6 times
# (a pessimistic count: on a GPU most re-reads of $K$ and $V$ come from the L2 cache, not HBM).
#
# **FLOPs.** Both do the same matrix products, $2T^2d$ FLOPs for $QK^\top$ and $2T^2d$ for $PV$:
# $4T^2d$ per head, plus $O(T^2)$ exponentials and sums. Causal attention changes that: naive
# attention computes every score and masks afterwards, still $4T^2d$, while the tiled loop skips
# the tiles above the diagonal and does about half, $2T^2d$ plus the diagonal tiles (section 3).
# Benchmarks, including this course's, count exactly $2T^2d$ per causal head. So apart from causal
# skipping the FLOPs do not shrink; the bytes do.

# %% [markdown]
# ### Predict before you measure
#
# The cell below prints your $T$ and block size $b$: in a graded course each student gets their own
# (the release's are $T = 1024$, $b = 64$), and the answers are checked for yours.
#
# 1. `causal_tiles_visited`: with $T_q = T_k = T$ and $b_q = b_k = b$, how many (query tile, key
#    tile) pairs does a causal forward visit? (A non-causal one visits $(T/b)^2$: 256 at the
#    release's sizes.)
# 2. `causal_fraction_large_T`: as $T \to \infty$ with fixed equal blocks, what fraction of the
#    non-causal tile count does the causal forward visit?

# %% nbgrader={"grade_id": "shapes-predict-tiles", "locked": true}
from attnlab.variants import show_shapes

show_shapes("predict-tiles")

# %% nbgrader={"grade_id": "predict-tiles", "solution": true}
causal_tiles_visited = None
causal_fraction_large_T = None
### BEGIN SOLUTION
from attnlab.variants import shapes

_shapes = shapes("predict-tiles")  # the T and block printed above
n_tiles = _shapes["T"] // _shapes["block"]
causal_tiles_visited = n_tiles * (n_tiles + 1) // 2
causal_fraction_large_T = 0.5
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-tiles", "grade": true, "locked": true, "points": 1}
from attnlab.checks import assert_number, require_number

require_number(causal_tiles_visited, "causal_tiles_visited")
require_number(causal_fraction_large_T, "causal_fraction_large_T")
### BEGIN HIDDEN TESTS
from attnlab.variants import check_predictions

check_predictions("predict-tiles", {"causal_tiles_visited": causal_tiles_visited},
                  lambda T, block: {"causal_tiles_visited": (T // block) * (T // block + 1) // 2}, rel=1e-9)
assert_number(causal_fraction_large_T, 0.5, name="causal_fraction_large_T", rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# ### Check your predictions
#
# Once your numbers are in, explore. The tile map shows which (query tile, key tile) pairs a causal
# forward visits in full, masks on the diagonal, or skips, for any $T$, $b_q$ and $b_k$ (set your
# $T$ and blocks to check `causal_tiles_visited`). The calculator below it counts the
# HBM bytes and FLOPs of naive and fused attention and places both on a GPU's roofline: the memory
# argument of section 4 in numbers. (Interactive in JupyterLab and Colab; elsewhere static figures.)

# %%
from attnlab.widgets import causal_tile_map, roofline_calculator

causal_tile_map(T=256, block_q=32, block_k=32)

# %%
roofline_calculator(T=4096, D=64, B=8, H=16, causal=True)

# %% [markdown]
# ## 5. Your task: `flash_attention_forward`
#
# `flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None) -> (o, lse)`
#
# - `q`: `(B, H, T_q, D)`; `k`, `v`: `(B, H, T_k, D)`; $T_q$ may differ from $T_k$.
# - Loop over query tiles of `block_q` rows; for each, loop over key tiles of `block_k` columns and
#   apply the update of section 2. Operate on all batches and heads at once (the tiles are
#   `(B, H, rows, ...)` slices), but never form a `(T_q, T_k)` matrix, and never reduce over more
#   than one key tile at once: a query row's softmax over all its keys gets the numbers right
#   without the online softmax, and the checks refuse it.
# - `causal=True`: skip the key tiles that section 3 says to skip, and mask the diagonal ones.
# - `scale` defaults to `D ** -0.5`.
# - Return `o` in `q`'s dtype and `lse` (natural log) of shape `(B, H, T_q)` in
#   `torch.promote_types(q.dtype, torch.float32)`; keep $m$, $\ell$ and $\text{acc}$ in that dtype too.
#
# The whole contract of `flash_attention_forward` in one place: `attnlab.contracts.flash_attention_forward`
# (`import attnlab.contracts; help(attnlab.contracts.flash_attention_forward)`).

# %% nbgrader={"grade_id": "flash_attention_forward", "solution": true}
def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """FlashAttention-2 forward (Dao 2023, Algorithm 1), one query tile and one key tile at a time.

    Args:
        q: (B, H, T_q, D); k, v: (B, H, T_k, D); floating point.
        causal: query i attends keys j <= i (top-left aligned).
        block_q, block_k: tile sizes along queries and keys; need not divide T_q, T_k.
        scale: score multiplier, default D ** -0.5.

    Returns:
        o: (B, H, T_q, D) in q's dtype; lse: (B, H, T_q), natural log, at least float32.
    """
    ### BEGIN SOLUTION
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    if scale is None:
        scale = D ** -0.5
    work = torch.promote_types(q.dtype, torch.float32)
    o = torch.empty(B, H, T_q, D, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H, T_q, dtype=work, device=q.device)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_tile = q[:, :, i0:i1].to(work)
        m = torch.full((B, H, i1 - i0), float("-inf"), dtype=work, device=q.device)
        l = torch.zeros(B, H, i1 - i0, dtype=work, device=q.device)
        acc = torch.zeros(B, H, i1 - i0, D, dtype=work, device=q.device)
        # Causal: the last key this query tile needs is i1 - 1; later key tiles are skipped.
        k_end = min(i1, T_k) if causal else T_k
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, T_k)
            s = q_tile @ k[:, :, j0:j1].to(work).transpose(-1, -2) * scale
            if causal and j1 - 1 > i0:  # diagonal tile: some keys lie right of some queries
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            alpha = torch.exp(m - m_new)  # m_new is finite: key 0 was in the first tile visited
            p = torch.exp(s - m_new[..., None])
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ v[:, :, j0:j1].to(work)
            m = m_new
        o[:, :, i0:i1] = (acc / l[..., None]).to(q.dtype)
        lse[:, :, i0:i1] = m + torch.log(l)
    return o, lse
    ### END SOLUTION


# %% [markdown]
# ### Tests
#
# Each check draws seeded random float64 inputs, calls your function on copies, and compares `o`
# and `lse` with `naive_attention` (relative error within 1e-10). Failure messages name the case
# and the first wrong index. Each call also runs under a watcher that sees every PyTorch operator
# your code executes and refuses the shortcuts: a fused attention call, an intermediate as large as
# a whole score matrix, and any max, sum, softmax or product over more than `max(block_k, D)`
# elements per result (one number from a whole tile, as in a test that skips a masked tile or a
# debugging `print(s.max())`, is allowed a few times per tile pair). The third check puts every other query row's scores near -1000: far
# below 0, where `exp` underflows to 0 unless the row's own maximum is subtracted.

# %% nbgrader={"grade_id": "test_flash_forward_matches_naive", "grade": true, "locked": true, "points": 3}
check_flash_forward(flash_attention_forward, T_q=40, block_q=16, block_k=16)
check_flash_forward(flash_attention_forward, T_q=40, block_q=16, block_k=16, causal=True)
check_flash_forward(flash_attention_forward, T_q=32, block_q=16, block_k=16, regime="far_negative", seed=5)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for seed, (T, bq, bk) in enumerate([(50, 7, 11), (50, 11, 7), (33, 16, 32), (64, 32, 16), (20, 32, 32)]):
    check_flash_forward(flash_attention_forward, T_q=T, block_q=bq, block_k=bk, seed=seed, B=2, D=16)
check_flash_forward(flash_attention_forward, T_q=45, block_q=16, block_k=16, scale=0.3, seed=9)
check_flash_forward(flash_attention_forward, T_q=48, block_q=16, block_k=16, growing=True, seed=10)
check_flash_forward(flash_attention_forward, T_q=45, block_q=8, block_k=7, growing=True, seed=11)
# value regimes: rows of scores near -1000, the largest scores in the first, a middle or the ragged last key tile
check_flash_forward(flash_attention_forward, T_q=48, block_q=16, block_k=16, regime="far_negative", seed=12)
for seed, regime in enumerate(("peak_first", "peak_middle", "peak_last")):
    check_flash_forward(flash_attention_forward, T_q=54, block_q=16, block_k=16, regime=regime, seed=13 + seed)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_flash_forward_causal_tiles", "grade": true, "locked": true, "points": 3}
check_flash_forward(flash_attention_forward, T_q=32, block_q=8, block_k=8, causal=True)
check_flash_forward(flash_attention_forward, T_q=33, block_q=7, block_k=11, causal=True)  # unequal tiles
print("visible checks passed")
### BEGIN HIDDEN TESTS
for seed, (T, bq, bk) in enumerate([(33, 7, 11), (33, 11, 7), (50, 16, 16), (37, 16, 32), (37, 32, 16),
                                    (50, 7, 7), (20, 32, 32)]):
    check_flash_forward(flash_attention_forward, T_q=T, block_q=bq, block_k=bk, causal=True, seed=20 + seed)
check_flash_forward(flash_attention_forward, T_q=48, block_q=16, block_k=8, causal=True, growing=True, seed=30)
check_flash_forward(flash_attention_forward, T_q=40, block_q=8, block_k=16, causal=True, scale=0.2, B=2,
                    seed=31)
check_flash_forward(flash_attention_forward, T_q=48, block_q=16, block_k=16, causal=True, regime="far_negative",
                    seed=32)
check_flash_forward(flash_attention_forward, T_q=48, block_q=8, block_k=16, causal=True, regime="peak_first",
                    seed=33)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_flash_forward_cross_attention_lengths", "grade": true, "locked": true, "points": 2}
check_flash_forward(flash_attention_forward, T_q=20, T_k=45, block_q=16, block_k=16)
check_flash_forward(flash_attention_forward, T_q=12, T_k=30, block_q=8, block_k=8, causal=True)  # top-left
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_flash_forward(flash_attention_forward, T_q=45, T_k=20, block_q=16, block_k=16, seed=40)
check_flash_forward(flash_attention_forward, T_q=1, T_k=50, block_q=16, block_k=7, seed=41)  # decoding
check_flash_forward(flash_attention_forward, T_q=13, T_k=37, block_q=7, block_k=11, causal=True, seed=42)
check_flash_forward(flash_attention_forward, T_q=37, T_k=13, block_q=7, block_k=11, causal=True, seed=43)
check_flash_forward(flash_attention_forward, T_q=40, T_k=64, block_q=16, block_k=16, causal=True,
                    regime="far_negative", seed=44)
check_flash_forward(flash_attention_forward, T_q=64, T_k=40, block_q=16, block_k=16, regime="peak_first", seed=45)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_flash_forward_lse_dtype", "grade": true, "locked": true, "points": 1}
check_flash_forward(flash_attention_forward, T_q=24, block_q=8, block_k=8, dtype=torch.float32)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_flash_forward(flash_attention_forward, T_q=9, H=1, D=16, dtype=torch.float16, seed=49)
check_flash_forward(flash_attention_forward, T_q=30, block_q=16, block_k=8, causal=True, dtype=torch.float32,
                    seed=50)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Check yourself
#
# Answer in two to four sentences each, in your own words; graded by hand.
#
# **Q1.** Open the roofline calculator of section 4 at its defaults (H200, $T = 4096$, $D = 64$, bf16,
# causal, $B = 8$, $H = 16$). How many HBM bytes does it count for naive attention and for the fused
# kernel (no cache), what lower bound on the time does each give, and which ceiling sets it? Why is
# the fused kernel faster although it performs the same matrix products (fewer, when causal)?

# %% [markdown] nbgrader={"grade_id": "answer-why-faster", "solution": true, "grade": true, "points": 1}
# Naive: $1.74 \cdot 10^{10}$ bytes (16 GiB, almost all of it $S$ and $P$ written and read) for
# $5.5 \cdot 10^{11}$ FLOPs, 32 FLOP/B, left of the ridge (about 165 FLOP/B): memory-bound, at least
# $1.74 \cdot 10^{10} / 4.27 \cdot 10^{12} \approx 4.1$ ms. Fused without cache: $2.4 \cdot 10^{9}$ bytes
# for $2.7 \cdot 10^{11}$ FLOPs (causal tiles skipped), 117 FLOP/B, at least 0.55 ms, still set by
# bandwidth; with every input read once it would be compute-bound at 0.39 ms. The fused kernel is
# faster because it never sends the $\Theta(T^2)$ scores and probabilities through HBM: the matrix
# products were not what limited naive attention, the bytes were.

# %% [markdown]
# **Q2.** Would FlashAttention help much with a head dimension of $d = 1024$? Use the traffic count
# of section 4, with its units.

# %% [markdown] nbgrader={"grade_id": "answer-large-head-dim", "solution": true, "grade": true, "points": 1}
# Much less. The tiled traffic for $K$ and $V$ is about $8T^2d^2/M$ elements against naive's $4T^2$,
# so it wins only when $d^2 < M/2$ with $M$ in elements. At $d = 1024$, $d^2 \approx 10^6$, far
# above $M/2 \approx 58{,}000$ bf16 elements of an H100/H200 multiprocessor: a row of $Q$ is 2 KiB in
# bf16, only $M/(4d) \approx 28$ query rows fit next to the accumulator and a $K$ and $V$ tile, each
# $K, V$ tile is reused by very few queries, and the passes over $K$ and $V$ move more bytes than
# naive attention's $S$ and $P$.

# %% [markdown]
# **Q3.** Your loop visits key tiles from 0 upward. Explain why a causal row can never produce NaN in
# your code, and what you would have to add if the key tiles were processed last-to-first.

# %% [markdown] nbgrader={"grade_id": "answer-nan-order", "solution": true, "grade": true, "points": 1}
# Every query row $i \ge 0$ may see key 0, which lies in the first key tile visited, so after that
# tile the row's running max is finite; a later tile that masks the whole row gives
# $e^{-\infty - m} = 0$ and the rescale factor is 1. Processing tiles last-to-first, a row can meet a
# fully masked tile first, leaving $m' = -\infty$ and computing $e^{-\infty - (-\infty)} = $ NaN. The
# guard is to use a finite offset (e.g. 0) wherever $m' = -\infty$, or to skip fully masked tiles
# explicitly.

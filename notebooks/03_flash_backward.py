# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · FlashAttention backward
#
# *Attention Kernels Lab, notebook 3 of 6.* Notebook 02 computed the output of attention without
# ever holding the $T \times T$ score matrix. Training also needs the gradients with respect to
# $Q$, $K$ and $V$, and the textbook backward reads the probability matrix $P$, which is exactly
# what the forward refused to keep. In this notebook you derive a backward pass that needs nothing
# quadratic in memory either: it rebuilds each tile of $P$ from **one saved number per query row**
# and accumulates the gradients tile by tile.
#
# **How this notebook works.** Run the cells from the top. Cells marked *given* are read-only.
# Write your code where it says `YOUR CODE HERE` and answers where it says `YOUR ANSWER HERE`.
# Test cells compare your work with a reference from the course's support package (`attnlab`);
# more tests, hidden here, run when your notebook is graded, so pass the visible ones *and* think
# about the cases they do not show. Nothing here depends on your notebook 02: the forward used
# below is the package's reference.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode and loads the course's support package.
from attnlab import init

RUNTIME = init()

import math

import torch

from attnlab.reference import naive_attention
from attnlab.verify import check_attention_gradcheck, check_autograd_attention, check_flash_backward

# %% [markdown]
# ## 1. The gradients of one attention head
#
# Fix one (batch, head) pair and write $\sigma$ for the scale. With $Q \in \mathbb{R}^{T_q \times d}$
# and $K, V \in \mathbb{R}^{T_k \times d}$ the forward is
#
# $$S = \sigma\, Q K^\top, \qquad P = \operatorname{softmax}_{\text{rows}}(S), \qquad O = P V .$$
#
# The backward is handed $dO = \partial L / \partial O$, shaped like $O$, and must return $dQ$,
# $dK$ and $dV$. Undo the three steps from the last to the first.
#
# **Through $O = PV$.** A matrix product is linear in each factor, so each factor's gradient is
# the upstream gradient multiplied by the other factor, transposed:
#
# $$dV = P^\top dO \quad (T_k \times d), \qquad dP = dO\, V^\top \quad (T_q \times T_k).$$
#
# **Through the softmax.** Row $i$ of $P$ depends on row $i$ of $S$ alone, and
# $\partial P_{ij} / \partial S_{il} = P_{ij}\,(\delta_{jl} - P_{il})$. The chain rule sums over $j$:
#
# $$dS_{il} = \sum_j dP_{ij}\, P_{ij}\,(\delta_{jl} - P_{il})
#           = P_{il}\Big(dP_{il} - \underbrace{\textstyle\sum_j P_{ij}\, dP_{ij}}_{D_i}\Big),
# \qquad\text{that is}\qquad dS = P \circ (dP - D),$$
#
# where $\circ$ multiplies element by element and $D$ holds one number per query row, subtracted
# from every entry of that row.
#
# **Through $S = \sigma\, Q K^\top$.** Another product, with the constant $\sigma$ carried along:
#
# $$dQ = \sigma\, dS\, K \quad (T_q \times d), \qquad dK = \sigma\, dS^\top Q \quad (T_k \times d).$$
#
# **Masked scores** need no rule of their own. A masked entry has $P_{ij} = 0$, hence
# $dS_{ij} = 0$: it adds nothing to $dQ$ or $dK$, and nothing to $dV$ either. That argument holds
# only if the $P$ you use really is zero there, which is where a forgotten mask does its damage.

# %% [markdown]
# ## 2. The row term $D$ without the matrix $P$
#
# Read literally, $D_i = \sum_j P_{ij}\, dP_{ij}$ is a reduction over an entire row of a
# $T_q \times T_k$ matrix, and it is needed *before* the first entry of row $i$ of $dS$ can be
# formed. A tiled backward that computed it that way would sweep every key tile once just to get
# $D$, and then sweep them all again for the gradients.
#
# Write $dP_{ij} = dO_i \cdot V_j$ (row $i$ of $dO$ dotted with row $j$ of $V$) and move the sum
# inside the dot product:
#
# $$D_i = \sum_j P_{ij}\,(dO_i \cdot V_j) = dO_i \cdot \Big(\sum_j P_{ij}\, V_j\Big) = dO_i \cdot O_i .$$
#
# So $D = \operatorname{rowsum}(dO \circ O)$. Both tensors are at hand ($O$ was saved by the
# forward, $dO$ is the input of the backward), and the cost is $T_q \cdot d$ multiply-adds, done
# once before any tile is touched. A reduction over $T_q \times T_k$ entries has become $O(T_q\, d)$
# work, and no row of $P$ ever has to exist in full.
#
# A tempting shortcut is to sum $P_{ij}\, dP_{ij}$ over the key tile at hand. That is a partial sum:
# it equals $D_i$ only when a single key tile holds every key.

# %% [markdown]
# ## 3. Rebuild $P$, keep one number per row
#
# The backward needs $P$ one tile at a time, and the forward did not store it. What the forward
# did keep is the log-sum-exp of every score row, $\text{LSE}_i = \ln \sum_j e^{S_{ij}}$, and that
# suffices:
#
# $$P_{ij} = \frac{e^{S_{ij}}}{\sum_l e^{S_{il}}} = \exp\big(S_{ij} - \text{LSE}_i\big).$$
#
# For every tile pair the backward recomputes the scores from $Q_i$ and $K_j$, masks them, and
# exponentiates against the saved LSE. Three details:
#
# - **Not $m$ and $\ell$.** The forward's running max $m$ and normaliser $\ell$ give
#   $P = e^{S - m} / \ell$, but they only ever act together, as $m + \ln \ell$, which is the LSE.
#   Storing their combination halves the statistics kept per row and replaces a subtraction plus
#   a division per entry by a single subtraction.
#   And $e^{S - m}$ on its own is *not* $P$: its rows do not sum to one.
# - **Natural log.** The course's LSE is a natural log. GPU kernels often use `exp2`, which is
#   cheaper; they then multiply both the scores and the LSE by $\log_2 e$. A base-2 exponential
#   applied to natural-log quantities gives a wrong $P$.
# - **Precision.** Keep the LSE in float32 or wider. An error $\delta$ in $\text{LSE}_i$ multiplies
#   every $P_{ij}$ of the row by $e^{-\delta} \approx 1 - \delta$; in bf16 an LSE near 10 is off by
#   up to about 0.03, a few percent in every probability of the row.
#
# **FLOPs for bytes.** Storing $P$ costs $T_q T_k$ numbers per head, written by the forward and read
# back by the backward, and held in memory in between. Recomputing costs one more
# $T_q \times d$ by $d \times T_k$ product per head (plus the exponentials). On the roofline, buying
# bytes with FLOPs pays when the extra FLOPs per byte saved lie *below* the machine's ridge point
# (peak FLOP/s divided by memory bandwidth): then the arithmetic is over before the transfer it
# replaces would have been.

# %% [markdown]
# ### Predict before you measure
#
# One head, no mask, $T_q = T_k = T$ and head dimension $d$ as the cell below prints them (in a graded
# course each student gets their own; the release's are $T = 8192$, $d = 64$, and the answers are
# checked for yours), and $P$ stored in bf16 (2 bytes an entry).
# Count a product of an $a \times b$ and a $b \times c$ matrix as $2abc$ FLOPs, and ignore the
# exponentials. Store plain numbers.
#
# 1. `extra_flops_recompute`: the FLOPs the backward spends on recomputing $S = \sigma\, Q K^\top$.
# 2. `p_traffic_bytes`: the HBM bytes that a backward *reading a stored* $P$ would move for it
#    instead: written once by the forward, read once by the backward.
# 3. `flops_per_byte_saved`: the first number divided by the second.
#
# For comparison, an H200 sustains about 706 TFLOP/s on a large bf16 matrix product and about
# 4.27 TB/s of HBM traffic: its ridge point lies near 165 FLOP per byte.

# %% nbgrader={"grade_id": "shapes-predict-recompute", "locked": true}
from attnlab.variants import show_shapes

show_shapes("predict-recompute")

# %% nbgrader={"grade_id": "predict-recompute", "solution": true}
extra_flops_recompute = None
p_traffic_bytes = None
flops_per_byte_saved = None
### BEGIN SOLUTION
from attnlab.variants import shapes

_shapes = shapes("predict-recompute")  # the T and D printed above
extra_flops_recompute = 2 * _shapes["T"] ** 2 * _shapes["D"]
p_traffic_bytes = 2 * (_shapes["T"] ** 2 * 2)
flops_per_byte_saved = extra_flops_recompute / p_traffic_bytes
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-recompute", "grade": true, "locked": true, "points": 2}
from attnlab.checks import assert_number, require_number

for _name in ("extra_flops_recompute", "p_traffic_bytes", "flops_per_byte_saved"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
from attnlab.variants import check_predictions

check_predictions("predict-recompute", {"extra_flops_recompute": extra_flops_recompute,
                                        "p_traffic_bytes": p_traffic_bytes, "flops_per_byte_saved": flops_per_byte_saved},
                  lambda T, D: {"extra_flops_recompute": 2 * T**2 * D, "p_traffic_bytes": 2 * T**2 * 2,
                                "flops_per_byte_saved": D / 2}, rel=0.01)
### END HIDDEN TESTS

# %% [markdown]
# **Explain.** On that GPU, which takes less time: the extra FLOPs, or the bytes they replace? By
# roughly what factor? Does the answer change with $T$? With $d$? And what does storing $P$ cost
# apart from time?

# %% [markdown] nbgrader={"grade_id": "answer-recompute-trade", "solution": true, "grade": true, "points": 1}
# (At the release's $T = 8192$, $d = 64$; a variant's figures scale as below.) The recomputation
# is $2 \cdot 8192^2 \cdot 64 \approx 8.6$ GFLOP, about 12 µs at 706 TFLOP/s; moving
# $P$ would be $2 \cdot 8192^2 \cdot 2 \text{ B} \approx 268$ MB, about 63 µs at 4.27 TB/s. Recomputing
# is roughly five times cheaper. The ratio is $2T^2 d / 4T^2 = d/2$ FLOP per byte: it does not depend
# on $T$ at all and grows with $d$; at $d = 64$ it is 32, far below the ridge of about 165, and it
# would take $d$ above about 330 before the bytes became the cheaper side (the exponentials we
# ignored make the recomputation somewhat dearer, not enough to change the verdict). Apart from
# time, a stored $P$ must live in memory from the forward to the backward: at $B = 8$, $H = 16$,
# $T = 8192$ in bf16 that is 16 GiB per layer, against 4 MiB for a float32 LSE.

# %% [markdown]
# ## 4. The tile loops
#
# Cut the queries into tiles of `block_q` rows and the keys into tiles of `block_k` rows. Each pair
# (query tile $i$, key tile $j$) adds to three gradients:
#
# | gradient | the pair $(i, j)$ adds | summed over |
# |---|---|---|
# | $dV_j$ | $P_{ij}^\top\, dO_i$ | every query tile $i$ |
# | $dK_j$ | $\sigma\, dS_{ij}^\top\, Q_i$ | every query tile $i$ |
# | $dQ_i$ | $\sigma\, dS_{ij}\, K_j$ | every key tile $j$ |
#
# Whichever loop is outside, one side of the table accumulates over the *inner* loop, in one place
# that can stay in fast on-chip memory, and the other side accumulates over the *outer* loop, so
# its partial sums keep going back to memory. FlashAttention-2 puts **key tiles outside and query
# tiles inside**. Then $K_j$, $V_j$ and the accumulators $dK_j$, $dV_j$ stay put for the whole
# inner loop and are written once, while every key tile adds its share to each $dQ_i$ it reaches
# (on a GPU through atomic additions, or in a separate pass). In outline:
#
# ```
# D = rowsum(dO ∘ O)                       once, T_q·d work
# for each key tile j:
#     dK_j = 0;  dV_j = 0
#     for each query tile i that sees at least one key of tile j:
#         S = σ · Q_i K_jᵀ,   then mask it if causal
#         P = exp(S − LSE_i)
#         dV_j += Pᵀ dO_i
#         dP = dO_i V_jᵀ
#         dS = P ∘ (dP − D_i)
#         dQ_i += σ · dS K_j
#         dK_j += σ · dSᵀ Q_i
#     store dK_j and dV_j
# ```
#
# **Causal mask.** Query $i$ may see key $j$ only when $j \le i$ (top-left aligned: row 0 sees key 0
# alone, whatever $T_q$ and $T_k$ are; notebook 02, section 1, compares it with the bottom-right
# alignment that decoding with a KV cache uses).
# Inside a tile, set the scores with $j > i$ to $-\infty$
# *before* the exponential, so that $\exp(-\infty - \text{LSE}_i) = 0$ exactly. Every query row
# sees key 0, so every LSE is finite and the backward never meets $-\infty - (-\infty)$. A backward
# without the mask rebuilds positive probabilities where the forward had zeros: the forward is
# right and the gradients are not.
#
# **Which tile pairs a causal backward may skip.** Take a query tile of rows $[i_0, i_1)$ and a key
# tile of keys $[j_0, j_1)$. The pair
#
# - adds nothing when even its last query cannot see its first key, $i_1 - 1 < j_0$: skip it;
# - needs no mask when its first query already sees its last key, $j_1 - 1 \le i_0$;
# - otherwise straddles the diagonal and needs the element-wise mask.
#
# With key tiles outside, the first query tile to visit for keys $[j_0, j_1)$ is the one that
# *contains* row $j_0$, which is not always a tile that *starts* at or after $j_0$. When
# `block_q == block_k` the tile edges line up and the two coincide, so tests with equal tile sizes
# cannot tell them apart; with unequal sizes a query tile can straddle $j_0$.
#
# **Different lengths.** Nothing changes when $T_q \ne T_k$. If $T_q > T_k$, the rows from $T_k$ on
# see every key. If $T_q < T_k$ and the attention is causal, no query sees the keys $j \ge T_q$:
# their rows of $dK$ and $dV$ are zero, and your function still returns them.

# %% [markdown]
# ### Predict: the tile pairs of a causal backward
#
# $T_q = T_k = 33$ with `block_q = 7` and `block_k = 11` gives 5 query tiles, 3 key tiles, 15 pairs.
#
# 1. `causal_pairs_visited`: how many of the 15 pairs a causal backward must visit.
# 2. `causal_pairs_masked`: how many of the visited pairs straddle the diagonal and need the mask.

# %% nbgrader={"grade_id": "predict-causal-tiles", "solution": true}
causal_pairs_visited = None
causal_pairs_masked = None
### BEGIN SOLUTION
# key tiles [0, 11), [11, 22), [22, 33); query tiles [0, 7), [7, 14), [14, 21), [21, 28), [28, 33)
causal_pairs_visited = 5 + 4 + 2
causal_pairs_masked = 2 + 2 + 2
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-causal-tiles", "grade": true, "locked": true, "points": 1}
for _name in ("causal_pairs_visited", "causal_pairs_masked"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
assert_number(causal_pairs_visited, 11, name="causal_pairs_visited", rel=0.01)
assert_number(causal_pairs_masked, 6, name="causal_pairs_masked", rel=0.01)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Your task: `flash_attention_backward`
#
# `flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None) -> (dq, dk, dv)`
#
# - `q`, `o`, `do` have shape `(B, H, T_q, D)`; `k`, `v` have shape `(B, H, T_k, D)`; `lse` has shape
#   `(B, H, T_q)` and is the natural-log log-sum-exp of each score row, as the forward saved it.
#   $T_q$ and $T_k$ may differ.
# - `scale` defaults to `D ** -0.5`; `causal=True` means query `i` sees keys `j <= i`.
# - Walk the keys in tiles of `block_k` and the queries in tiles of `block_q` (the last tile of each
#   may be shorter), one tile pair at a time: never build a $T_q \times T_k$ matrix, and never sum
#   over more than one tile's keys or queries at once (one query row against all keys builds no
#   matrix, but it is not the tiled method, and the checks refuse it). Treat the batch and head
#   dimensions all at once: `@` multiplies the last two dimensions of 4-D tensors.
# - Any loop order that gives the right sums is accepted. Skipping the pairs a causal mask hides
#   is how the real kernel halves its work; here it is optional, but if you skip, skip correctly.
# - Work in a wider dtype inside if you like; return `dq`, `dk`, `dv` shaped like `q`, `k`, `v`,
#   in `q`'s dtype.
#
# Useful: `torch.zeros_like`, `x[:, :, a:b]`, `@`, `.transpose(-1, -2)`, `torch.arange`,
# `Tensor.masked_fill`, `torch.exp`, `Tensor.sum(dim=-1)`.
#
# The whole contract of `flash_attention_backward` in one place: `attnlab.contracts.flash_attention_backward`
# (`import attnlab.contracts; help(attnlab.contracts.flash_attention_backward)`).

# %% nbgrader={"grade_id": "flash_attention_backward", "solution": true}
def flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    """Gradients of attention with respect to q, k, v, tile by tile, from the saved o and LSE.

    Args:
        q, o, do: (B, H, T_q, D); k, v: (B, H, T_k, D).
        lse: (B, H, T_q), natural-log logsumexp of each row of the scaled scores.
        causal: query i sees keys j <= i only.
        block_q, block_k: rows per query tile and per key tile (the last tile may be shorter).
        scale: multiplies the scores q kᵀ; defaults to D ** -0.5.

    Returns:
        (dq, dk, dv) shaped like q, k, v, in q's dtype.
    """
    ### BEGIN SOLUTION
    T_q, D = q.shape[2], q.shape[3]
    T_k = k.shape[2]
    if scale is None:
        scale = D ** -0.5
    work = torch.promote_types(q.dtype, torch.float32)
    q_, k_, v_, o_, do_ = (t.to(work) for t in (q, k, v, o, do))
    lse_ = lse.to(work)
    # D_i = sum_j P_ij dP_ij = dO_i . O_i: one number per query row, no P needed
    delta = (do_ * o_).sum(dim=-1)
    dq = torch.zeros_like(q_)
    dk = torch.zeros_like(k_)
    dv = torch.zeros_like(v_)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        k_j, v_j = k_[:, :, j0:j1], v_[:, :, j0:j1]
        dk_j = torch.zeros_like(k_j)
        dv_j = torch.zeros_like(v_j)
        # causal: rows before j0 see none of these keys; start at the query tile that holds row j0
        i_start = (j0 // block_q) * block_q if causal else 0
        for i0 in range(i_start, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            q_i, do_i = q_[:, :, i0:i1], do_[:, :, i0:i1]
            s = (q_i @ k_j.transpose(-1, -2)) * scale
            if causal:
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            p = torch.exp(s - lse_[:, :, i0:i1, None])
            dv_j += p.transpose(-1, -2) @ do_i
            dp = do_i @ v_j.transpose(-1, -2)
            ds = p * (dp - delta[:, :, i0:i1, None])
            dq[:, :, i0:i1] += (ds @ k_j) * scale
            dk_j += (ds.transpose(-1, -2) @ q_i) * scale
        dk[:, :, j0:j1] = dk_j
        dv[:, :, j0:j1] = dv_j
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)
    ### END SOLUTION


# %% [markdown]
# ### Test: the gradients match autograd
#
# Each check draws seeded float64 inputs, takes $O$ and the LSE from the package's
# `naive_attention`, calls your function on copies, and compares `dq`, `dk`, `dv` with what
# PyTorch's autograd gets by differentiating `naive_attention` (relative error within 1e-10). A
# failure names the case, the gradient, and the first index that is off. The hidden part tries
# tile sizes that do not divide $T$, an explicit `scale`, and float32 inputs (tolerance 1e-5,
# gradients expected back in float32).

# %% nbgrader={"grade_id": "test_flash_backward_matches_autograd", "grade": true, "locked": true, "points": 3}
check_flash_backward(flash_attention_backward, T_q=32, block_q=16, block_k=16)
check_flash_backward(flash_attention_backward, T_q=32, block_q=16, block_k=16, causal=True)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for _causal in (False, True):
    for _block in (7, 11, 16, 32):  # none of them divides T = 37
        check_flash_backward(flash_attention_backward, T_q=37, B=2, H=2, causal=_causal,
                             block_q=_block, block_k=_block, seed=10 * _block + _causal)
check_flash_backward(flash_attention_backward, T_q=40, D=16, causal=True, block_q=64, block_k=64, seed=5)
check_flash_backward(flash_attention_backward, T_q=29, scale=0.3, block_q=8, block_k=8, seed=6)
check_flash_backward(flash_attention_backward, T_q=29, scale=1.7, causal=True, block_q=8, block_k=8, seed=7)
check_flash_backward(flash_attention_backward, T_q=30, causal=True, block_q=8, block_k=8,
                     dtype=torch.float32, seed=8)
# value regimes: rows of scores near -1000; the largest scores in the first or the ragged last key tile
check_flash_backward(flash_attention_backward, T_q=48, block_q=16, block_k=16, regime="far_negative", seed=9)
check_flash_backward(flash_attention_backward, T_q=40, causal=True, block_q=8, block_k=16, regime="peak_first",
                     seed=10)
check_flash_backward(flash_attention_backward, T_q=40, block_q=16, block_k=16, regime="peak_last", seed=11)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: causal tiles of unequal sizes
#
# With `block_q != block_k` the tile edges of queries and keys no longer line up, and a query tile
# can straddle the first row of a key tile. $T = 33$, `block_q = 7`, `block_k = 11` is the case
# you counted above.

# %% nbgrader={"grade_id": "test_flash_backward_unequal_causal_tiles", "grade": true, "locked": true, "points": 2}
check_flash_backward(flash_attention_backward, T_q=33, causal=True, block_q=7, block_k=11)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for _i, (_bq, _bk) in enumerate(((11, 7), (5, 16), (16, 5), (3, 32), (13, 6))):
    check_flash_backward(flash_attention_backward, T_q=45, B=2, causal=True, block_q=_bq, block_k=_bk, seed=20 + _i)
check_flash_backward(flash_attention_backward, T_q=64, causal=True, block_q=16, block_k=32, seed=30)
check_flash_backward(flash_attention_backward, T_q=64, causal=True, block_q=32, block_k=16, seed=31)
check_flash_backward(flash_attention_backward, T_q=33, causal=False, block_q=7, block_k=11, seed=32)
check_flash_backward(flash_attention_backward, T_q=45, causal=True, block_q=11, block_k=16, regime="far_negative",
                     seed=33)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: queries and keys of different lengths
#
# Cross-attention, or a chunk of queries against a longer sequence: $T_q \ne T_k$, both ways round.
# With the causal mask (top-left aligned, as in SDPA), keys that no query can see get zero gradients.
# (A chunk of new queries against a KV cache would use the bottom-right alignment of notebook 02,
# under which the last query sees every key; the course's `causal=True` is top-left throughout.)

# %% nbgrader={"grade_id": "test_flash_backward_cross_attention_lengths", "grade": true, "locked": true, "points": 2}
check_flash_backward(flash_attention_backward, T_q=20, T_k=45, block_q=16, block_k=16)
check_flash_backward(flash_attention_backward, T_q=45, T_k=20, block_q=16, block_k=16, causal=True)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_flash_backward(flash_attention_backward, T_q=20, T_k=45, causal=True, block_q=16, block_k=16, seed=40)
check_flash_backward(flash_attention_backward, T_q=45, T_k=20, block_q=16, block_k=16, seed=41)
check_flash_backward(flash_attention_backward, T_q=13, T_k=50, B=2, causal=True, block_q=8, block_k=8, seed=42)
check_flash_backward(flash_attention_backward, T_q=50, T_k=13, B=2, causal=True, block_q=8, block_k=8, seed=43)
check_flash_backward(flash_attention_backward, T_q=1, T_k=37, block_q=16, block_k=16, seed=44)  # one query
check_flash_backward(flash_attention_backward, T_q=1, T_k=37, causal=True, block_q=16, block_k=16, seed=45)
check_flash_backward(flash_attention_backward, T_q=37, T_k=1, causal=True, block_q=16, block_k=16, seed=46)
check_flash_backward(flash_attention_backward, T_q=32, T_k=56, causal=True, block_q=16, block_k=16,
                     regime="far_negative", seed=47)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Plugging the backward into autograd
#
# *Given.* A `torch.autograd.Function` pairs a forward with a backward. The forward below is the
# package's `naive_attention` (so this notebook does not depend on your notebook 02); it hands the
# backward only what FlashAttention keeps, namely `q`, `k`, `v`, `o` and the LSE, never $S$ or $P$.
# Its backward is your `flash_attention_backward`. The LSE is returned as a second output marked
# as non-differentiable: it is a by-product, not something a loss should depend on.
# `flash_attention(q, k, v, causal)` is the function a model would call.

# %% nbgrader={"grade_id": "autograd_function", "locked": true}
# Given: attention whose backward is your flash_attention_backward.
class FlashAttentionFunction(torch.autograd.Function):
    """Forward by the package's naive_attention; backward by flash_attention_backward from o and LSE."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        o, lse = naive_attention(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, o, lse)  # what FlashAttention keeps: no S, no P
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, causal=ctx.causal,
                                              block_q=ctx.block_q, block_k=ctx.block_k)
        return dq, dk, dv, None, None, None  # no gradients for causal, block_q, block_k


def flash_attention(q, k, v, causal=False, block_q=16, block_k=16):
    """Attention output o (B, H, T_q, D), differentiable through flash_attention_backward."""
    o, _lse = FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k)
    return o


# %% [markdown]
# ### Test: end to end through autograd
#
# Inputs with `requires_grad=True` go through `flash_attention`, then `o.backward(do)` runs your
# backward; `q.grad`, `k.grad` and `v.grad` must match the reference.

# %% nbgrader={"grade_id": "test_autograd_function_end_to_end", "grade": true, "locked": true, "points": 2}
check_autograd_attention(flash_attention, T_q=37)
check_autograd_attention(flash_attention, T_q=37, causal=True)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_autograd_attention(flash_attention, T_q=20, T_k=45, B=2, causal=True, seed=50)
check_autograd_attention(flash_attention, T_q=45, T_k=20, B=2, seed=51)
check_autograd_attention(flash_attention, T_q=64, H=1, D=16, causal=True, seed=52)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: `torch.autograd.gradcheck`
#
# `gradcheck` knows nothing about attention: it nudges every input entry by a tiny amount, watches
# how the forward's output moves, and compares that finite-difference Jacobian with the one your
# backward implies. It needs float64 and tiny sizes (one backward call per output entry). Small
# tiles (`block_q=2`, `block_k=3`) make even a 5-by-7 problem span several tiles.

# %% nbgrader={"grade_id": "test_autograd_gradcheck", "grade": true, "locked": true, "points": 1}
check_attention_gradcheck(flash_attention, T_q=5, T_k=7, block_q=2, block_k=3)
check_attention_gradcheck(flash_attention, T_q=5, T_k=7, causal=True, block_q=2, block_k=3)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_attention_gradcheck(flash_attention, T_q=7, T_k=4, B=2, causal=True, block_q=3, block_k=2, seed=60)
check_attention_gradcheck(flash_attention, T_q=6, H=2, D=2, causal=True, block_q=4, block_k=3, seed=61)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Check yourself
#
# Answer in two to four sentences each, in your own words. These are graded by hand.
#
# **Q1.** The forward could hand the backward its final running max $m$ and normaliser $\ell$.
# Why does it save the LSE instead, and is anything lost by doing so?

# %% [markdown] nbgrader={"grade_id": "answer-save-lse", "solution": true, "grade": true, "points": 1}
# The backward only needs $P = \exp(S - \text{LSE})$, and $m$ and $\ell$ enter $P$ solely through
# $m + \ln \ell$, which is the LSE. Saving that one number per row halves the saved statistics and
# turns the rebuild of $P$ into a single subtraction and exponential, with no division. Nothing is
# lost: the LSE is finite (every row sees at least one key) and well scaled, so
# $\exp(S - \text{LSE}) \le 1$ cannot overflow, as long as it is kept in float32 or wider.

# %% [markdown]
# **Q2.** Where does $D = \operatorname{rowsum}(dO \circ O)$ come from, and why does it matter for
# memory?

# %% [markdown] nbgrader={"grade_id": "answer-d-from-o", "solution": true, "grade": true, "points": 1}
# The softmax backward needs $D_i = \sum_j P_{ij}\, dP_{ij}$. Since $dP_{ij} = dO_i \cdot V_j$, the
# sum is $dO_i \cdot \sum_j P_{ij} V_j = dO_i \cdot O_i$. So a reduction over a full $T_q \times T_k$
# row of $P \circ dP$ becomes $O(T_q d)$ work on $O$ and $dO$, which the backward has anyway. Without
# it, $P$ (or a whole extra sweep over all key tiles) would be needed before any $dS$ could be formed;
# with it, the backward keeps only $O(T d)$ memory and never stores $P$.

# %% [markdown]
# **Q3.** The outline in section 4 keeps key tiles in the outer loop. What does that order buy in
# a GPU kernel where each program owns one key tile, and what would putting query tiles outside
# cost instead?

# %% [markdown] nbgrader={"grade_id": "answer-loop-order", "solution": true, "grade": true, "points": 1}
# A program that owns key tile $j$ loads $K_j$ and $V_j$ once, keeps $dK_j$ and $dV_j$ in registers
# while it runs over the query tiles, and stores them once with no other program writing there.
# Only $dQ$ is shared: every key tile adds to every $dQ_i$ it sees, which needs atomic additions (or
# a second kernel that loops the other way). With query tiles outside, $dQ_i$ would be private but
# $dK$ and $dV$, two tensors instead of one, would be the ones every program adds into, doubling
# the contended read-modify-write traffic.

# %% [markdown]
# **Q4.** A causal backward passes every test with `block_q = block_k = 16` but fails at $T = 33$,
# `block_q = 7`, `block_k = 11`. What is the most likely bug, and why do equal tile sizes hide it?

# %% [markdown] nbgrader={"grade_id": "answer-causal-skip", "solution": true, "grade": true, "points": 1}
# The skip is off by one tile: for key tile $[j_0, j_1)$ it starts at the first query tile that
# begins at or after $j_0$, and so drops the query tile that contains row $j_0$ but begins before it
# (the tile straddling the diagonal), losing the contributions of the rows $\ge j_0$ in it. With
# equal tile sizes, every key tile starts exactly where a query tile starts, so no query tile ever
# straddles $j_0$ and the wrong bound visits exactly the right tiles. Unequal sizes such as 7 and 11
# misalign the edges and expose it.

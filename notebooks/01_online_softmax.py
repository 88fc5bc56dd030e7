# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Online softmax
#
# *Attention Kernels Lab, notebook 1 of 6.* You will compute the two statistics a softmax needs,
# the row maximum $m$ and the normaliser $\ell$, in **one pass over blocks**, with a constant amount
# of state per row. Everything in FlashAttention (notebooks 02 to 05) is this idea applied to a
# bigger accumulator.
#
# **How this notebook works.** Run the cells from the top. Cells marked *given* are read-only.
# Write your code where it says `YOUR CODE HERE` and answers where it says `YOUR ANSWER HERE`.
# Test cells check your work against a reference from the course's support package (`attnlab`);
# more tests, hidden here, run when your notebook is graded, so pass the visible ones *and* think
# about the cases they do not show.

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode and loads the course's support package.
from attnlab import init

RUNTIME = init()

import math

import torch

from attnlab.verify import check_online_softmax

# %% [markdown]
# ## 1. Why naive attention is slow: count the bytes
#
# For one (batch, head) pair, attention computes
#
# $$S = Q K^\top \cdot \text{scale}, \qquad P = \operatorname{softmax}_{\text{rows}}(S), \qquad O = P V,$$
#
# with $Q \in \mathbb{R}^{T_q \times d}$, $K, V \in \mathbb{R}^{T_k \times d}$. Written as three
# library calls, each step is a separate kernel: the first **writes** the $T_q \times T_k$ matrix
# $S$ to GPU memory (HBM), the softmax **reads** it and **writes** $P$, and the last product
# **reads** $P$ again. Four trips of a $T^2$ matrix through HBM.
#
# How big is that? In bf16 every entry is 2 bytes. At $T = 8192$ a single score matrix is
# $8192^2 \cdot 2\,\text{B} = 128$ MiB, for *one* head of *one* sequence. The inputs $Q, K, V$
# are only $3 \cdot 8192 \cdot 64 \cdot 2\,\text{B} = 3$ MiB at $d = 64$.
#
# The softmax does a handful of operations per entry (subtract, exponentiate, add, divide) and moves
# at least 4 bytes per entry (read 2, write 2): about one FLOP per byte. A modern GPU does
# hundreds of FLOPs in the time it moves one byte from HBM, so on the roofline the softmax sits
# far to the left of the ridge: **memory-bound**. The matrix products are not the problem; the
# $T^2$ bytes in between are.
#
# FlashAttention never stores $S$ or $P$. To do that it must compute a softmax *without seeing a
# whole row at once*. That is the online softmax.

# %% [markdown]
# ### Predict before you measure
#
# Store each answer as a plain number (not a string). Units matter. The cell below prints your
# sequence length $T$: in a graded course each student gets their own (the release's is 8192), and
# the answers are checked for yours.
#
# 1. `bytes_scores_one_head`: bytes of one $T \times T$ score matrix at your $T$ in bf16.
# 2. `hbm_bytes_naive_one_head`: bytes the naive pipeline moves for $S$ and $P$ alone (write $S$,
#    read $S$, write $P$, read $P$), same size and dtype.

# %% nbgrader={"grade_id": "shapes-predict-bytes", "locked": true}
from attnlab.variants import show_shapes

show_shapes("predict-bytes")

# %% nbgrader={"grade_id": "predict-bytes", "solution": true}
bytes_scores_one_head = None
hbm_bytes_naive_one_head = None
### BEGIN SOLUTION
from attnlab.variants import shapes

T = shapes("predict-bytes")["T"]  # the T printed above
bytes_scores_one_head = T * T * 2
hbm_bytes_naive_one_head = 4 * bytes_scores_one_head
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-bytes", "grade": true, "locked": true, "points": 1}
from attnlab.checks import assert_number, require_number

require_number(bytes_scores_one_head, "bytes_scores_one_head")
require_number(hbm_bytes_naive_one_head, "hbm_bytes_naive_one_head")
### BEGIN HIDDEN TESTS
from attnlab.variants import check_predictions

check_predictions("predict-bytes", {"bytes_scores_one_head": bytes_scores_one_head,
                                    "hbm_bytes_naive_one_head": hbm_bytes_naive_one_head},
                  lambda T: {"bytes_scores_one_head": T**2 * 2, "hbm_bytes_naive_one_head": 4 * T**2 * 2}, rel=0.01)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The online softmax (Milakov & Gimelshein, 2018)
#
# For a row $x_1, \dots, x_N$ the softmax is $p_i = e^{x_i - c} / \sum_j e^{x_j - c}$ for *any*
# constant $c$: the factor $e^{-c}$ cancels. We pick $c = m = \max_j x_j$ so every exponent is
# $\le 0$ and nothing overflows. The two numbers that define the softmax of a row are therefore
#
# $$m = \max_j x_j, \qquad \ell = \sum_j e^{x_j - m}, \qquad \log \sum_j e^{x_j} = m + \log \ell .$$
#
# The last quantity is the **log-sum-exp** (LSE). It is all a later pass needs to rebuild any
# probability: $p_i = e^{x_i - \text{LSE}}$.
#
# **One pass over blocks.** Split the row into blocks $B_1, B_2, \dots$ and keep a running pair
# $(m, \ell)$, starting from $(-\infty, 0)$. When block $B$ arrives:
#
# $$m' = \max\big(m, \max_{j \in B} x_j\big), \qquad
#   \ell' = \ell \cdot e^{\,m - m'} + \sum_{j \in B} e^{\,x_j - m'} .$$
#
# **Why the rescale is exact.** The old $\ell$ was a sum of terms $e^{x_j - m}$ taken with the old
# offset $m$. Multiplying by $e^{m - m'}$ turns each of them into $e^{x_j - m'}$, exactly the term
# it would have been had we known $m'$ from the start:
#
# $$\ell \cdot e^{m - m'} = \sum_{j\ \text{seen}} e^{x_j - m}\, e^{m - m'} = \sum_{j\ \text{seen}} e^{x_j - m'} .$$
#
# No approximation is involved; the factor is $\le 1$, so it never overflows either. When the
# maximum does not change, $m' = m$ and the factor is 1.
#
# **Masked entries.** Attention masks scores by setting them to $-\infty$ (they get probability 0).
# A block can be *entirely* $-\infty$. If that happens before any finite value, then $m = m' = -\infty$
# and a literal implementation computes $e^{-\infty - (-\infty)} = e^{\text{NaN}}$. Decide what the
# offset should be for a row that has seen nothing finite yet (any finite value works, since
# $\ell$ is still 0 and every term is $e^{-\infty} = 0$).

# %% [markdown]
# ### See it run
#
# Step through the online softmax of one row, block by block: the bars you have already fed in are
# blue, the current block orange. Watch $m$ jump when a block holds a new maximum and the old $\ell$
# shrink by the rescale factor $e^{m - m'}$ at that moment. Try `block_size` 1 and 40: the path
# changes, the final $m + \log \ell$ does not. (Interactive in JupyterLab and Colab; elsewhere a
# static figure of the last step.)

# %%
from attnlab.widgets import online_softmax_explorer

online_softmax_explorer(block_size=8)

# %% [markdown]
# ### Your task: `online_softmax_stats`
#
# `online_softmax_stats(x, block_size) -> (m, l)`
#
# - `x`: a tensor of shape `(..., N)`, any float dtype; the softmax is over the last dimension.
# - Walk the last dimension in blocks of `block_size` (the last block may be shorter) and update
#   `(m, l)` with the rule above. Do **not** compute the max of the whole row first: that would
#   be two passes.
# - Return `m` and `l` of shape `x.shape[:-1]`, in at least float32
#   (`torch.promote_types(x.dtype, torch.float32)`).
# - A row that is $-\infty$ everywhere (fully masked) returns `m = -inf` and `l = 0`: the finite
#   offset above is only used inside the update, never stored as `m`.
#
# Useful: `torch.full`, `torch.maximum`, `Tensor.amax(dim=-1)`, `torch.exp`, `torch.where`,
# `x[..., start:stop]`.
#
# The whole contract of `online_softmax_stats` in one place: `attnlab.contracts.online_softmax_stats`
# (`import attnlab.contracts; help(attnlab.contracts.online_softmax_stats)`).

# %% nbgrader={"grade_id": "online_softmax_stats", "solution": true}
def online_softmax_stats(x: torch.Tensor, block_size: int):
    """Running max and normaliser of a softmax over the last dim, in one pass over blocks.

    Args:
        x: (..., N) floating tensor.
        block_size: number of elements per block along the last dim (the last may be shorter).

    Returns:
        m: (...) the row maximum; l: (...) sum of exp(x - m); both in at least float32,
        so that m + log(l) is the row's logsumexp.
    """
    ### BEGIN SOLUTION
    stat_dtype = torch.promote_types(x.dtype, torch.float32)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=stat_dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=stat_dtype, device=x.device)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size].to(stat_dtype)
        m_new = torch.maximum(m, block.amax(dim=-1))
        # A row that has seen only -inf keeps m_new = -inf; offset it by 0 instead (l is 0 there).
        offset = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - offset) + torch.exp(block - offset[..., None]).sum(dim=-1)
        m = m_new
    return m, l
    ### END SOLUTION


# %% [markdown]
# ### Test: the statistics match `logsumexp`
#
# The check draws random inputs from a fixed seed, calls your function on a copy, and compares
# `m` with the row max and `m + log(l)` with `torch.logsumexp` (float64: within 1e-10). A failure
# message names the case, the quantity, and the first index that is off. The call also runs under
# a watcher that sees every PyTorch operation your code performs: a max or sum over more than a
# block of each row, and a second loop over the blocks (the max first, then the sum), fail the
# check even when the numbers are right, since they are not the one pass this notebook is about.

# %% nbgrader={"grade_id": "test_online_softmax_matches_logsumexp", "grade": true, "locked": true, "points": 3}
check_online_softmax(online_softmax_stats, shape=(4, 50), block_size=16)
check_online_softmax(online_softmax_stats, shape=(3, 64), block_size=64)
check_online_softmax(online_softmax_stats, shape=(2, 96), block_size=8)  # rows much longer than a block
print("visible checks passed")
### BEGIN HIDDEN TESTS
for block_size in (1, 7, 11, 32, 100):  # 100 > N: a single, partial block
    check_online_softmax(online_softmax_stats, shape=(5, 37), block_size=block_size, seed=block_size)
check_online_softmax(online_softmax_stats, shape=(97,), block_size=10, seed=3)  # 1-D input
check_online_softmax(online_softmax_stats, shape=(2, 3, 45), block_size=8, seed=4)  # batch dims
check_online_softmax(online_softmax_stats, x=torch.randn(6, 70, generator=torch.Generator().manual_seed(5)),
                     block_size=9)  # float32 input: statistics in float32 or wider
_g = torch.Generator().manual_seed(6)
_negative = -torch.rand(3, 45, dtype=torch.float64, generator=_g) * 5 - 0.5  # every entry below zero
check_online_softmax(online_softmax_stats, x=_negative, block_size=8)
_far = torch.randn(2, 50, dtype=torch.float64, generator=_g) - 1000.0  # exp(x) underflows to 0
check_online_softmax(online_softmax_stats, x=_far, block_size=16)
check_online_softmax(online_softmax_stats, x=_far.float(), block_size=7)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: the rescale survives a growing maximum
#
# Here each row starts near $-40$ and later jumps to $1000$. An implementation that forgets the
# factor $e^{m - m'}$ keeps old terms measured against the wrong offset; one that exponentiates
# without subtracting the max overflows ($e^{1000} = \infty$ even in float64).

# %% nbgrader={"grade_id": "test_online_softmax_handles_growing_max", "grade": true, "locked": true, "points": 2}
jump = torch.cat([torch.full((2, 24), -40.0, dtype=torch.float64),
                  torch.tensor([[1000.0] * 4, [999.0, 1000.0, 998.0, 997.0]], dtype=torch.float64)], dim=1)
check_online_softmax(online_softmax_stats, x=jump, block_size=8)
print("visible checks passed")
### BEGIN HIDDEN TESTS
ramp = torch.linspace(-40.0, 1000.0, 60, dtype=torch.float64).repeat(3, 1)
ramp[1] = ramp[1].flip(0)  # the max first: no rescale ever needed on this row
check_online_softmax(online_softmax_stats, x=ramp, block_size=7)
check_online_softmax(online_softmax_stats, x=jump.float(), block_size=5)
# masked (-inf) entries, including a leading block that is entirely masked
masked = torch.randn(3, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(7)) * 4
masked[:, :10] = float("-inf")
masked[1, 15:18] = float("-inf")
check_online_softmax(online_softmax_stats, x=masked, block_size=5)
# fully masked rows (m = -inf, l = 0), and a masked block in the middle of a row
_g = torch.Generator().manual_seed(8)
_rows = torch.randn(4, 40, dtype=torch.float64, generator=_g) * 3 - 20
_rows[0] = float("-inf")
_rows[2, 16:24] = float("-inf")
check_online_softmax(online_softmax_stats, x=_rows, block_size=8)
check_online_softmax(online_softmax_stats, x=torch.full((2, 3, 9), float("-inf")), block_size=4)
# the row max 1000 above the rest, in the first, a middle and the ragged last block (43 = 5 * 8 + 3)
_peak = torch.randn(3, 43, dtype=torch.float64, generator=_g) * 2
for _row, _col in enumerate((2, 21, 41)):
    _peak[_row, _col] = 1000.0
check_online_softmax(online_softmax_stats, x=_peak, block_size=8)
check_online_softmax(online_softmax_stats, x=-_peak, block_size=8)  # ... and 1000 below, all else negative
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Check yourself
#
# Answer in two to four sentences each, in your own words. These are graded by hand.
#
# **Q1.** Subtracting the running max changes every exponent. Why does the final $m + \log \ell$
# not depend on which maxima were used along the way?

# %% [markdown] nbgrader={"grade_id": "answer-rescale-exact", "solution": true, "grade": true, "points": 1}
# Each term stored in $\ell$ is $e^{x_j - m}$ for the offset $m$ in use when it was added. Every
# time the offset moves from $m$ to $m'$, the whole sum is multiplied by $e^{m - m'}$, which turns
# each stored term into $e^{x_j - m'}$. So at the end $\ell = \sum_j e^{x_j - m_{\text{final}}}$ exactly,
# and $m_{\text{final}} + \log \ell = \log \sum_j e^{x_j}$ whatever path the running max took.
# The offsets only keep the exponents non-positive so nothing overflows.

# %% [markdown]
# **Q2.** Your function receives a row whose first block is entirely $-\infty$ (masked). What goes
# wrong in a literal implementation of the update rule, and how did you prevent it?

# %% [markdown] nbgrader={"grade_id": "answer-masked-block", "solution": true, "grade": true, "points": 1}
# After that block the running max is still $-\infty$, so the rescale factor $e^{m - m'}$ and the
# block's terms $e^{x - m'}$ both evaluate $-\infty - (-\infty) = \text{NaN}$, and the NaN then
# poisons $\ell$ forever. The fix is to use a finite offset (0) whenever the running max is
# $-\infty$: $\ell$ is 0 there and every masked term is $e^{-\infty} = 0$, so the result is exact.

# %% [markdown]
# **Q3.** The online softmax reads each element once instead of twice (max pass, then sum pass).
# For a single softmax over rows that fit in on-chip memory, would you expect that to matter? When
# does it matter a lot?

# %% [markdown] nbgrader={"grade_id": "answer-one-pass", "solution": true, "grade": true, "points": 1}
# If a whole row fits in registers or shared memory, a kernel loads it once and can take the max and
# the sum from on-chip copies, so a second pass costs no HBM traffic and the online form gains
# little. It matters when the row does not fit or is never materialised at all: in attention the
# "row" is a row of $QK^\top$ that is produced tile by tile, and the one-pass rule is what lets us
# consume each tile immediately and throw it away instead of storing $T^2$ scores.

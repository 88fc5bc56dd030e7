# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Decoding against a KV cache: split-K (FlashDecoding)
#
# *Attention Kernels Lab, second assignment, notebook 8.* A language model spends most of its attention
# time **decoding**: each step adds one new token per sequence, whose query attends to every key
# and value cached so far. The kernel of notebook 05 parallelises over tiles of queries; with one
# query per head it launches a few dozen programs on a GPU with 132 multiprocessors, and each walks
# the whole cache alone. Here you write the kernel that inference engines use instead: the keys of
# every head are **split** across many programs, each computes a partial result, and a second small
# kernel **merges** the partials with their log-sum-exps. Along the way the kernel learns to read a
# real cache: sequences of different lengths in one batch, grouped-query attention (several query
# heads sharing one K/V head) and chunks of new queries with bottom-right causal alignment.
#
# Without a GPU, the kernels run through Triton's interpreter and the tests use small float32
# inputs. With a GPU, the split kernel's small cases still run through the interpreter (where the
# tests count its loads), the other checks and the half-precision cases at GPU sizes run compiled,
# and the last section measures decoding throughput against the memory system.
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

from attnlab import bench, bench_decode, launch_decode
from attnlab.checks import time_limit
from attnlab.reference_decode import decode_attention_reference, kv_bytes
from attnlab.verify import call_limit_s
from attnlab.verify_decode import (check_decode_merge_kernel, check_decode_partial_kernel,
                                    check_decode_partial_large_offsets, check_flash_decode)

DEVICE = RUNTIME.device  # "cuda" on a GPU, "cpu" under the interpreter

# %% [markdown]
# ## 1. Decoding is a memory problem
#
# One decoding step of one layer: $B$ sequences, $H_q$ query heads, one new query per head, a cache
# of $T_k$ keys and values per sequence in $H_{kv}$ heads of dimension $D$. The kernel must read
#
# $$\text{bytes} = \underbrace{2}_{K,\,V} \cdot B \cdot H_{kv} \cdot T_k \cdot D \cdot (\text{bytes per element})$$
#
# and computes $QK^\top$ and $PV$: $4 \cdot B \cdot H_q \cdot T_k \cdot D$ FLOPs. In bf16 that is
# $H_q / H_{kv}$ FLOPs per byte, between 1 and 8 for real models. An H200 does about 700 TFLOP/s of
# bf16 matrix products and moves about 4.2 TB/s: it needs some 170 FLOPs per byte to be
# compute-bound. Decoding is nowhere near, so **its speed is the speed at which K and V stream from
# memory**, and the measure of a decoding kernel is
#
# $$\text{effective bandwidth} = \frac{\text{bytes of } K \text{ and } V}{\text{time}} \quad\text{against the copy bandwidth of the device.}$$
#
# **Why notebook 05's kernel is slow here.** Its grid is $\lceil T_q / \text{BLOCK\_M} \rceil \times B \cdot H$.
# At $T_q = 1$ that is one program per head: for $B = 1$, $H = 32$, 32 programs. An H200 has 132
# streaming multiprocessors (SMs); 100 of them get nothing to do. Worse, a single program loads its
# K/V tiles one after another, and one SM alone can keep only a small fraction of the memory
# system busy: the bandwidth of a GPU comes from *many* SMs each having loads in flight. The fix is
# to give each head many programs, each owning a slice of the keys. That is split-K.

# %% [markdown]
# ### Predict before you measure
#
# For one decoding step with $B = 1$, $H_q = H_{kv} = 32$ (no sharing), $T_k = 32768$, $D = 128$,
# bf16 (2 bytes per element), store plain numbers:
#
# 1. `programs_05`: the number of programs notebook 05's launcher starts at $T_q = 1$ with `block_m = 64`.
# 2. `busy_sm_fraction`: the fraction of the H200's 132 SMs that receive any program (a number in [0, 1]).
# 3. `kv_bytes_32k`: the bytes of K and V this step reads.
# 4. `ideal_decode_us`: the time in **microseconds** to read them at 4.2 TB/s ($4.2 \cdot 10^{12}$ bytes/s).

# %% nbgrader={"grade_id": "predict-decode", "solution": true}
programs_05 = None
busy_sm_fraction = None
kv_bytes_32k = None
ideal_decode_us = None
### BEGIN SOLUTION
programs_05 = 1 * 32                      # cdiv(1, 64) query tiles x B*H heads
busy_sm_fraction = programs_05 / 132      # about 0.24
kv_bytes_32k = 2 * 1 * 32 * 32768 * 128 * 2  # 2**29 bytes = 512 MiB
ideal_decode_us = kv_bytes_32k / 4.2e12 * 1e6  # about 128 us
### END SOLUTION

# %% nbgrader={"grade_id": "test-predict-decode", "grade": true, "locked": true, "points": 1}
from attnlab.checks import assert_number, require_number

for _name in ("programs_05", "busy_sm_fraction", "kv_bytes_32k", "ideal_decode_us"):
    require_number(globals()[_name], _name)
### BEGIN HIDDEN TESTS
assert_number(programs_05, 32, name="programs_05", rel=0.001)
assert_number(busy_sm_fraction, 32 / 132, name="busy_sm_fraction", rel=0.02)
assert_number(kv_bytes_32k, 2**29, name="kv_bytes_32k", rel=0.01)
assert_number(ideal_decode_us, 2**29 / 4.2e12 * 1e6, name="ideal_decode_us", rel=0.02)
### END HIDDEN TESTS

# %% [markdown]
# **Predict in words.** Notebook 05's kernel at $T_q = 1$: roughly what fraction of the copy
# bandwidth do you expect it to reach at $B = 1$, $H = 32$, and would $B = 8$ help it? Why?

# %% [markdown] nbgrader={"grade_id": "answer-predict-05-decode", "solution": true, "grade": true, "points": 1}
# Far below the copy bandwidth, a small fraction (10 to 20 % at most): only 32 of 132 SMs work, and
# each program issues its K/V loads tile after tile, so the bytes in flight per SM are few and the
# memory latency is exposed. With $B = 8$ there are 256 programs, about two per SM, so every SM is
# busy and the fraction rises several-fold, but each program is still one serial walk over $T_k$ keys
# with little in flight; and for a GQA model it also reads K and V once per query head instead of
# once per KV head. Split-K attacks the first problem at any batch size.

# %% [markdown]
# ## 2. Split-K: partial results and their merge
#
# Fix one query row $q$ and cut its keys into slices $\mathcal{S}_1, \dots, \mathcal{S}_S$. For each
# slice a program computes, exactly as notebook 05 does for all keys,
#
# $$\text{LSE}_s = \log \sum_{j \in \mathcal{S}_s} e^{s_j}, \qquad
#   O_s = \sum_{j \in \mathcal{S}_s} e^{s_j - \text{LSE}_s}\, v_j, \qquad s_j = q \cdot k_j \cdot \text{scale}.$$
#
# $O_s$ is the attention output *as if the slice were the whole cache*, and $\text{LSE}_s$ says how
# much probability mass the slice holds. The full result follows without touching a key again:
#
# $$\text{LSE} = \log \sum_s e^{\text{LSE}_s}, \qquad O = \sum_s e^{\text{LSE}_s - \text{LSE}}\, O_s .$$
#
# *Proof:* $\sum_s e^{\text{LSE}_s} = \sum_s \sum_{j \in \mathcal{S}_s} e^{s_j}$, the full softmax
# denominator; and $e^{\text{LSE}_s - \text{LSE}} O_s = \sum_{j \in \mathcal{S}_s} e^{s_j - \text{LSE}} v_j$,
# whose sum over the slices is $\sum_j \operatorname{softmax}(s)_j v_j$. The weights
# $e^{\text{LSE}_s - \text{LSE}}$ are the slices' shares of the probability, and they add up to 1.
# This is the rescaling rule of notebook 01 once more, applied to whole slices instead of one block
# at a time. Computed as written, $e^{\text{LSE}_s}$ overflows float32 once scores pass about 88, so
# the merge subtracts the largest partial first: with $m = \max_s \text{LSE}_s$,
#
# $$w_s = e^{\text{LSE}_s - m}, \qquad \text{LSE} = m + \log \textstyle\sum_s w_s, \qquad O = \dfrac{\sum_s w_s O_s}{\sum_s w_s}.$$
#
# **Empty slices.** A slice can hold no key the row may see: it lies past the end of a short
# sequence in the batch, or after the row's causal limit. Its partial is $\text{LSE}_s = -\infty$
# (the log of an empty sum) and, by convention here, $O_s = 0$; its weight $e^{-\infty - m} = 0$
# removes it from the merge. Two places turn this into NaN if you are not careful:
#
# - in the slice's program: with nothing visible, $\ell = 0$ and $O_s = \text{acc} / \ell = 0/0$;
#   and a tile whose scores are all masked makes the running max $-\infty$, so
#   $e^{m - m'} = e^{-\infty - (-\infty)}$: the guard of notebook 05's Q4 (use 0 as the offset when
#   $m' = -\infty$);
# - in the merge, for a row whose slices are *all* empty (a sequence of length 0): $m = -\infty$ and
#   $w_s = e^{-\infty - (-\infty)}$. The same guard applies; such a row's output is $O = 0$,
#   $\text{LSE} = -\infty$.
#
# **How many slices?** Enough that every SM has its fill of programs, but not so many that
# slices become a tile or two each (every slice pays for loading $q$, writing a partial, and a
# share of the merge). An SM runs several programs at once, as many as its registers, shared memory
# and threads can hold: its **occupancy**. The course's split kernel at $D = 128$ uses 114 registers
# per thread on an H200, so a program of 4 warps needs $4 \cdot 32 \cdot 114 = 14{,}592$ registers
# (a little more after rounding), and an SM's 65,536 registers hold 4 such programs
# (at $D = 64$ it holds 8, at $D = 256$ 3: `notes/gpu/2026-12-04/session12/`). Programs therefore run in
# *waves* of SMs × occupancy, 132 × 4 = 528 on an H200 at $D = 128$. If the last wave is only partly
# full, most SMs sit idle while it finishes (the **tail effect**). An example: at $B = 8$,
# $H_{kv} = 32$, 3 slices make 768 programs, 5.8 per SM, which looks like plenty; but an SM runs only 4 at
# once, so 240 programs run as a second wave less than half full, and the step ran at 0.91 of SDPA's
# speed. 2 slices (512 programs, one wave) ran at 0.98-0.99. The given launcher therefore asks the CUDA
# driver for the compiled kernel's occupancy (`cuOccupancyMaxActiveBlocksPerMultiprocessor`), aims at
# one full wave (the smallest count that fills one, rounded up) and, among the counts from 2/3 to 3/2
# of that, takes the one whose last wave is fullest; ties go to the count nearer the aim, then to the
# smaller. At $B = 8$, $H_{kv} = 32$ the aim is 3 slices, and 2 and 4 fill their last waves equally (512
# of 528, 1024 of 1056): 2 it is. The count is capped at 128, and at $T_k / 128$ so that each slice keeps
# at least 128 keys; with few (sequence, head) pairs and a short cache that cap can leave the GPU half
# full (the last line the cell prints). The cell below assumes an occupancy of 4:

# %% nbgrader={"grade_id": "show-num-splits", "locked": true}
# Given: the launcher's choice of split count (attnlab.launch_decode.choose_num_splits).
for B_, H_kv_, T_k_ in ((1, 32, 32768), (1, 8, 32768), (8, 32, 32768), (1, 8, 4096)):
    n = launch_decode.choose_num_splits(B_ * H_kv_, T_k_, n_sm=132, per_sm=4)
    programs = B_ * H_kv_ * n
    print(f"B={B_} H_kv={H_kv_:<3} T_k={T_k_:<6} -> {n:3d} splits, {programs:5d} programs "
          f"({programs / (132 * 4):.2f} waves of 132 SMs x 4), about {T_k_ // n} keys each")

# %% [markdown]
# ## 3. A real cache
#
# **Lengths.** The sequences of a batch have different lengths. The cache is allocated for the
# longest, $(B, H_{kv}, T_{max}, D)$, and `cache_seqlens[b]` says how many keys of sequence $b$ are
# valid. What lies beyond is stale data from an earlier request, or never written: it may be NaN.
# So keys at positions $\ge$ `cache_seqlens[b]` must never be loaded, not just masked after
# loading (a NaN value times a probability of 0 is still NaN).
#
# **Grouped-query attention (GQA).** Models such as Llama 3 keep fewer K/V heads than query heads:
# $H_q = g \cdot H_{kv}$, and query head $h$ reads KV head $h \,/\!/\, g$. So query heads
# $0 \dots g-1$ share KV head 0, heads $g \dots 2g-1$ share KV head 1, and so on (not $h \bmod H_{kv}$).
# The cache shrinks by $g$, and so does the traffic, *if* the kernel loads each K/V tile once for
# all $g$ heads of its group. Hence the grid below: one program per **KV head**, whose query rows
# are all $g \cdot T_q$ (query head of the group, new query) pairs. Because the $g$ heads of a
# group are adjacent in $q$'s layout $(B, H_q, T_q, D)$, those rows are consecutive in memory:
# row $r$ of the program for KV head $h_{kv}$ of sequence $b$ is query $i = r \bmod T_q$ of head
# $h = h_{kv} \cdot g + \lfloor r / T_q \rfloor$, stored at row $(b \cdot H_q + h) \cdot T_q + i$ of $q$ seen as a
# $(B H_q T_q) \times D$ matrix.
#
# **A chunk of new queries, bottom-right causal.** Speculative decoding, or a prompt processed in
# chunks, appends $T_q > 1$ tokens at once. They are the *last* $T_q$ tokens of the sequence (their
# keys are already in the cache, included in `cache_seqlens`), so with $L$ = `cache_seqlens[b]`,
# query $i$ sits at position $L - T_q + i$ and sees keys $j \le L - T_q + i$. The mask is aligned
# to the **bottom-right** corner of the $T_q \times L$ score matrix, unlike notebook 02's (and SDPA's
# `is_causal`) top-left alignment, $j \le i$, which is right only when queries and keys start together:
#
# ```
#   T_q = 3 new queries, L = 6 keys        x: visible   .: hidden
#
#   top-left (02, SDPA is_causal)          bottom-right (decoding a chunk)
#            key 0 1 2 3 4 5                        key 0 1 2 3 4 5
#   query 0      x . . . . .               query 0      x x x x . .     (position 3)
#   query 1      x x . . . .               query 1      x x x x x .     (position 4)
#   query 2      x x x . . .               query 2      x x x x x x     (position 5)
# ```
#
# With $T_q = 1$ both alignments differ completely: top-left lets the one new token see key 0
# only. If $L < T_q$ (a test case, not a real model), the first rows see no key at all: O = 0,
# LSE = $-\infty$.

# %% [markdown]
# ## 4. The split kernel
#
# ### Your task: `_decode_partial_kernel`
#
# `_decode_partial_kernel(Q, K, V, SEQLENS, O_PART, LSE_PART, stride_kb, stride_kh, stride_kt, H_kv, group, T_q, keys_per_split, num_splits, scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)`
#
# - launched on grid `(B * H_kv, num_splits, row_blocks)`. Program `(bkv, split, rb)` serves
#   sequence `b = bkv // H_kv`, KV head `kvh = bkv % H_kv`, keys
#   `[split * keys_per_split, (split + 1) * keys_per_split)` (cut at `SEQLENS[b]`), and rows
#   `rb * BLOCK_M + tl.arange(0, BLOCK_M)` of its `group * T_q` rows (rows past `group * T_q` are padding:
#   load zeros, never store). In decoding `BLOCK_M >= group * T_q`, so `row_blocks = 1`.
# - `Q`: contiguous $(B, H_q, T_q, D)$, `group` $= H_q / H_{kv}$. Row $r$ is head `kvh * group + r // T_q`, query `r % T_q` (section 3).
# - `K`, `V`: the caches $(B, H_{kv}, T_{max}, D)$, element `(b, h, t, d)` at
#   `b * stride_kb + h * stride_kh + t * stride_kt + d` (the launcher does not copy a large cache to make it contiguous).
# - `SEQLENS`: int32 $(B,)$. Never load a key or value at a position $\ge$ `SEQLENS[b]`.
# - `CAUSAL`: query $i$ sees keys $j \le$ `SEQLENS[b] - T_q + i` (bottom-right).
# - `keys_per_split` is a multiple of `BLOCK_N`; slices past a sequence's end are empty.
# - Writes, for every stored row (flat query row `R` $= (b H_q + h) T_q + i$) and this split, float32
#   `O_PART[R * num_splits + split, :]` (the slice's softmax-weighted mean of V, 0 when the row sees no key in
#   the slice) and `LSE_PART[R * num_splits + split]` (natural log, $-\infty$ when it sees none). That is,
#   `O_PART` is $(B, H_q, T_q, S, D)$ and `LSE_PART` is $(B, H_q, T_q, S)$, contiguous.
#
# The loop body is notebook 05's masked phase: `exp2` with `scale * log2(e)`, the $m = -\infty$ guard,
# `tl.dot(p.to(v.dtype), v, acc)`. `b * stride_kb` can exceed $2^{31}$ on a large cache: widen to
# 64 bits first. `BLOCK_M`, `BLOCK_N` and `HEAD_DIM` are powers of two $\ge 16$.
#
# **How the method is checked.** In the small float32 cases, which run through the interpreter on every
# machine, the tests of this kernel count its loads, as notebooks 04 and 05 did: a program may read only its own (sequence, KV head), only its slice, nothing at or
# past `SEQLENS[b]` (K included, even if you mask the scores afterwards), and **each K/V element
# once**. A kernel that walks its slice once per query head of the group gets the right numbers but
# reads the cache $g$ times; it fails with a message saying so. Load `q` as one `(BLOCK_M, HEAD_DIM)`
# tile of all the group's rows, and one load of each K/V tile serves them all.
#
# The whole contract of `_decode_partial_kernel` in one place: `attnlab.contracts.decode_partial_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.decode_partial_kernel)`).

# %% nbgrader={"grade_id": "_decode_partial_kernel", "solution": true}
@triton.jit
def _decode_partial_kernel(Q, K, V, SEQLENS, O_PART, LSE_PART, stride_kb, stride_kh, stride_kt,
                           H_kv, group, T_q, keys_per_split, num_splits, scale,
                           CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           HEAD_DIM: tl.constexpr):
    """Attention of BLOCK_M query rows of one KV head's group over one slice of the keys: a partial O and LSE.

    Args:
        Q: contiguous (B, H_q, T_q, HEAD_DIM); K, V: caches (B, H_kv, T_max, HEAD_DIM) with strides
            stride_kb, stride_kh, stride_kt (last dim contiguous); SEQLENS: int32 (B,).
        O_PART: float32 (B, H_q, T_q, num_splits, HEAD_DIM); LSE_PART: float32 (B, H_q, T_q, num_splits).
        H_kv: KV heads; group: query heads per KV head; T_q: new queries per sequence.
        keys_per_split: keys per slice, a multiple of BLOCK_N; scale: multiplies the scores.
        CAUSAL: query i of sequence b sees keys j <= SEQLENS[b] - T_q + i (bottom-right).
    """
    ### BEGIN SOLUTION
    bkv = tl.program_id(0)
    split = tl.program_id(1)
    b = bkv // H_kv
    kvh = bkv % H_kv
    seqlen = tl.load(SEQLENS + b)
    offs_r = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)  # (query head of the group, query) pairs
    row_ok = offs_r < group * T_q                                 # the rest is padding: never stored
    head = kvh * group + offs_r // T_q                            # heads kvh*g ... kvh*g + g-1 share K/V
    qi = offs_r % T_q
    rows = (b * H_kv * group + head).to(tl.int64) * T_q + qi      # flat row of q, O and LSE
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    kv_base = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh  # 64-bit: large caches
    K += kv_base
    V += kv_base

    start = split * keys_per_split
    end = tl.minimum(start + keys_per_split, seqlen)  # keys past the sequence's end are never loaded
    last = seqlen - T_q + qi                          # causal: the last key each row sees
    qk_scale = scale * 1.4426950408889634             # base-2 scores: exp2 replaces exp
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    offs_j = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + offs_j
        key_ok = offs_n < end
        kv_offs = offs_n[:, None] * stride_kt + offs_d[None, :]
        k = tl.load(K + kv_offs, mask=key_ok[:, None], other=0.0)
        v = tl.load(V + kv_offs, mask=key_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= last[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # guard: nothing visible to this row yet
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new

    has_keys = l_i > 0.0  # an empty slice: O = 0, LSE = -inf (not 0/0)
    o = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    lse = tl.where(has_keys, (m_i + tl.log2(tl.where(has_keys, l_i, 1.0))) * 0.6931471805599453,
                   float("-inf"))
    part = rows * num_splits + split
    tl.store(O_PART + part[:, None] * HEAD_DIM + offs_d[None, :], o, mask=row_ok[:, None])
    tl.store(LSE_PART + part, lse, mask=row_ok)
    ### END SOLUTION


# %% [markdown]
# ### Test: one head per group, slices that do not divide the cache
#
# The check draws a cache with NaN after every sequence's end, runs your kernel on the launcher's
# grid and compares every `(row, split)` partial with the float64 reference
# (`attnlab.reference_decode.decode_partials_reference`). Partials start as NaN and are followed by
# guard values. The cases: 40 keys in 3 and 4 slices of 16 (the fourth slice is empty), and a
# cache of one key.

# %% nbgrader={"grade_id": "test_decode_partial_splits", "grade": true, "locked": true, "points": 3}
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[40], num_splits=3, causal=False)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[40], num_splits=4, causal=False, seed=1)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[1], num_splits=2, seed=2)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[40], num_splits=4, causal=True, seed=3)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[70], H_q=1, H_kv=1, num_splits=3, D=32, seed=4)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[33], T_max=48, num_splits=5, seed=5)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[1], T_max=1, num_splits=1, seed=6)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[50], num_splits=2, block_n=32, D=32, seed=7)
if not RUNTIME.interpret:
    for dtype in (torch.bfloat16, torch.float16):
        check_decode_partial_kernel(_decode_partial_kernel, seqlens=[4000], H_q=8, H_kv=8, D=128,
                                    num_splits=7, dtype=dtype, seed=8)
        check_decode_partial_kernel(_decode_partial_kernel, seqlens=[1000], H_q=4, H_kv=4, D=64,
                                    num_splits=3, block_n=32, dtype=dtype, seed=9)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: a real cache (lengths, GQA, a causal chunk)
#
# Ragged lengths in one batch (one sequence empty), $g = H_q / H_{kv}$ of 1, 4 and 8, and chunks of
# $T_q > 1$ new queries with bottom-right alignment, some shorter than the chunk. With $g > 1$ the load
# count shows whether each K/V tile is loaded once for the whole group. One cache is stored
# $(B, T_{max}, H_{kv}, D)$ and handed over transposed (`kv_layout="bthd"`: `stride_kt` $= H_{kv} D$,
# `stride_kh` $= D$), as many inference engines keep it: only the three strides reach each element.

# %% nbgrader={"grade_id": "test_decode_partial_cache", "grade": true, "locked": true, "points": 3}
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[37, 5, 1, 0], H_q=8, H_kv=2, num_splits=3)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[37, 20], H_q=4, H_kv=2, T_q=4, num_splits=3,
                            seed=1)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[21, 9], H_q=4, H_kv=2, num_splits=2, seed=2,
                            kv_layout="bthd")
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[30, 17], H_q=16, H_kv=2, num_splits=2, seed=11)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[45, 9, 3], H_q=4, H_kv=4, T_q=1, num_splits=3,
                            seed=12)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[40, 2, 0], H_q=6, H_kv=2, T_q=5, num_splits=3,
                            seed=13)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[40, 12], H_q=8, H_kv=2, T_q=8, num_splits=2,
                            causal=False, seed=14)
check_decode_partial_kernel(_decode_partial_kernel, seqlens=[33, 3, 18], H_q=6, H_kv=3, T_q=3, num_splits=3,
                            seed=17, kv_layout="bthd")
# a cache whose batch stride is just under 2^31 elements: b * stride_kb passes 2^31 (only the
# pages that hold data exist; the kernel runs through the interpreter on every machine)
check_decode_partial_large_offsets(_decode_partial_kernel, seed=18)
if not RUNTIME.interpret:
    for dtype in (torch.bfloat16, torch.float16):
        check_decode_partial_kernel(_decode_partial_kernel, seqlens=[3000, 1, 777, 0], H_q=32, H_kv=8, D=128,
                                    T_max=4096, dtype=dtype, seed=15)
        check_decode_partial_kernel(_decode_partial_kernel, seqlens=[1500, 40], H_q=32, H_kv=4, D=128, T_q=16,
                                    T_max=2048, num_splits=5, dtype=dtype, seed=16)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The merge kernel
#
# ### Your task: `_decode_merge_kernel`
#
# `_decode_merge_kernel(O_PART, LSE_PART, O, LSE, num_splits, BLOCK_S, HEAD_DIM)`
#
# - launched on grid `(B * H_q * T_q,)`: program `R` merges the `num_splits` partials of flat query row `R`,
#   `LSE_PART[R * num_splits + s]` and `O_PART[R * num_splits + s, :]` (the layout the split kernel writes);
# - `BLOCK_S` is a power of two $\ge$ `num_splits` (mask the rest: they are not partials);
# - writes `O[R, :]` (in O's dtype: `.to(O.dtype.element_ty)`) and `LSE[R]` (float32, natural log), with the
#   formulas of section 2: subtract the largest partial LSE, weight each partial by $e^{\text{LSE}_s - m}$;
#   a row whose partials are all $-\infty$ gets $O = 0$ and $\text{LSE} = -\infty$.
#
# Load all of a row's partials at once, a `(BLOCK_S,)` vector of LSEs and a `(BLOCK_S, HEAD_DIM)` block
# of outputs, and reduce with `tl.max(x, axis=0)` and `tl.sum(x, axis=0)`: no loop needed.
#
# The whole contract of `_decode_merge_kernel` in one place: `attnlab.contracts.decode_merge_kernel`
# (`import attnlab.contracts; help(attnlab.contracts.decode_merge_kernel)`).

# %% nbgrader={"grade_id": "_decode_merge_kernel", "solution": true}
@triton.jit
def _decode_merge_kernel(O_PART, LSE_PART, O, LSE, num_splits, BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Merge the split-K partials of one query row with LSE weights.

    Args:
        O_PART: float32 (rows, num_splits, HEAD_DIM); LSE_PART: float32 (rows, num_splits), -inf for
            empty splits; O: (rows, HEAD_DIM) output; LSE: float32 (rows,) output, natural log.
        num_splits: partials per row; BLOCK_S: a power of two >= num_splits.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    split_ok = offs_s < num_splits
    lse_s = tl.load(LSE_PART + row * num_splits + offs_s, mask=split_ok, other=float("-inf"))
    o_s = tl.load(O_PART + (row * num_splits + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=split_ok[:, None], other=0.0)
    m = tl.max(lse_s, axis=0)
    m_use = tl.where(m == float("-inf"), 0.0, m)  # guard: every split empty
    w = tl.exp(lse_s - m_use)                      # each split's share, up to the common factor e^m
    l = tl.sum(w, axis=0)
    o = tl.sum(w[:, None] * o_s, axis=0) / tl.where(l > 0.0, l, 1.0)
    lse = tl.where(l > 0.0, m_use + tl.log(tl.where(l > 0.0, l, 1.0)), float("-inf"))
    tl.store(O + row * HEAD_DIM + offs_d, o.to(O.dtype.element_ty))
    tl.store(LSE + row, lse)
    ### END SOLUTION


# %% [markdown]
# ### Test: merging partials
#
# Random partials (spread 3) for a few rows, about a third of them empty, and one row whose every
# split is empty; hidden cases add partial LSEs around 100, where $e^{\text{LSE}_s}$ overflows float32.

# %% nbgrader={"grade_id": "test_decode_merge", "grade": true, "locked": true, "points": 2}
check_decode_merge_kernel(_decode_merge_kernel, num_splits=5, B=2, H=3)
check_decode_merge_kernel(_decode_merge_kernel, num_splits=3, T_q=4, D=32, seed=1)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_decode_merge_kernel(_decode_merge_kernel, num_splits=7, offset=100.0, spread=5.0, seed=2)
check_decode_merge_kernel(_decode_merge_kernel, num_splits=1, B=2, H=2, empty=0.5, seed=3)
check_decode_merge_kernel(_decode_merge_kernel, num_splits=16, H=4, empty=0.8, D=64, seed=4)
check_decode_merge_kernel(_decode_merge_kernel, num_splits=9, spread=30.0, offset=-50.0, seed=5)
if not RUNTIME.interpret:
    for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
        check_decode_merge_kernel(_decode_merge_kernel, num_splits=67, B=8, H=32, D=128, out_dtype=out_dtype,
                                  offset=20.0, seed=6)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Both kernels together: `flash_decode`
#
# The given launcher validates the inputs, picks `num_splits` (section 2), `BLOCK_M`
# $= \max(16, \text{next\_pow2}(g \cdot T_q))$ (at most 64) and `BLOCK_N` (64 on a GPU, 16 under the
# interpreter), allocates the partials, and runs your two kernels one after the other.

# %% nbgrader={"grade_id": "flash_decode", "locked": true}
# Given: the launcher (attnlab.launch_decode). It checks the inputs (shapes, dtypes, int32 lengths,
# H_q a multiple of H_kv, D a power of two >= 16), allocates O, LSE and the partials, and launches the
# split kernel on (B * H_kv, num_splits, row_blocks), then the merge kernel on (B * H_q * T_q,). It never
# reads a GPU tensor's values (so it can be captured in a CUDA graph); the tests run it in checking mode,
# where the lengths are checked to lie in [0, T_max] and the outputs start full of NaN.
def flash_decode(q, k_cache, v_cache, cache_seqlens, causal=True, num_splits=None):
    """Split-K decoding by your two kernels: returns (o, lse), o in q's dtype, lse float32 (B, H_q, T_q)."""
    return launch_decode.launch_flash_decode(_decode_partial_kernel, _decode_merge_kernel, q, k_cache, v_cache,
                                             cache_seqlens, causal=causal, num_splits=num_splits)


# %% [markdown]
# Try it before the tests: three sequences of 37, 9 and 0 keys, 8 query heads sharing 2 KV heads,
# two new queries each. The differences should be around 1e-6 on a CPU (1e-3 on a GPU, where
# float32 products use TF32); the last sequence's rows must be exactly 0 and $-\infty$.

# %% nbgrader={"grade_id": "try-decode", "locked": true}
g = torch.Generator().manual_seed(0)
q_try = torch.randn(3, 8, 2, 16, generator=g).to(DEVICE)
k_try, v_try = (torch.randn(3, 2, 40, 16, generator=g).to(DEVICE) for _ in range(2))
lens_try = torch.tensor([37, 9, 0], dtype=torch.int32, device=DEVICE)
with time_limit(call_limit_s(), "flash_decode"):  # a kernel that never returns fails after 20 s on a CPU
    o_try, lse_try = flash_decode(q_try, k_try, v_try, lens_try, causal=True, num_splits=3)
o_ref, lse_ref = decode_attention_reference(q_try.double(), k_try.double(), v_try.double(), lens_try)
print("O   max abs difference:", (o_try.double() - o_ref).abs().max().item())
print("LSE max abs difference (rows with keys):", (lse_try[:2].double() - lse_ref[:2]).abs().max().item())
print("empty sequence: O all zero:", bool((o_try[2] == 0).all()), " LSE:", lse_try[2, 0].tolist())

# %% [markdown]
# ### Test: ragged lengths and GQA, end to end
#
# Both kernels, launched as `flash_decode` launches them, against
# `attnlab.reference_decode.decode_attention_reference` in float64; NaN fills every cache past its
# sequence's length; groups of 1, 4 and 8 query heads per KV head; the launcher's own split count too.

# %% nbgrader={"grade_id": "test_flash_decode_ragged_gqa", "grade": true, "locked": true, "points": 2}
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[37, 5, 1, 0], H_q=8, H_kv=2,
                   num_splits=3)
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[70, 33], H_q=16, H_kv=2, D=32)
print("visible checks passed")
### BEGIN HIDDEN TESTS
for group, seed in ((1, 21), (4, 22), (8, 23)):
    check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[50, 17, 64, 2], H_q=2 * group,
                       H_kv=2, num_splits=4, seed=seed)
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[0, 0], H_q=4, H_kv=1, num_splits=2,
                   seed=24)
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[100], H_q=2, H_kv=1, seed=25)
if not RUNTIME.interpret:
    for dtype in (torch.bfloat16, torch.float16):
        check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[4096, 3001, 1, 0, 2048],
                           H_q=32, H_kv=8, D=128, dtype=dtype, seed=26)
        check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[8192], H_q=32, H_kv=32, D=128,
                           dtype=dtype, seed=27)
    check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[1000, 777], H_q=16, H_kv=2, D=64,
                       dtype=torch.float32, seed=28)
### END HIDDEN TESTS

# %% [markdown]
# ### Test: a causal chunk, bottom-right
#
# $T_q > 1$ new queries per sequence, causal, bottom-right aligned; one sequence shorter than the
# chunk (its first rows see no key), and the same inputs without the mask.

# %% nbgrader={"grade_id": "test_flash_decode_causal_chunk", "grade": true, "locked": true, "points": 2}
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[50, 20, 3], H_q=4, H_kv=1, T_q=5,
                   num_splits=4)
print("visible checks passed")
### BEGIN HIDDEN TESTS
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[50, 20, 3], H_q=4, H_kv=1, T_q=5,
                   num_splits=4, causal=False, seed=31)
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[64, 31], H_q=4, H_kv=2, T_q=16,
                   num_splits=2, seed=32)
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[40, 8], H_q=8, H_kv=2, T_q=3,
                   num_splits=3, seed=33)
check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[30, 12], H_q=8, H_kv=1, T_q=9,
                   num_splits=2, seed=35)  # 72 rows per KV head: two blocks of rows
if not RUNTIME.interpret:
    for dtype in (torch.bfloat16, torch.float16):
        check_flash_decode(_decode_partial_kernel, _decode_merge_kernel, seqlens=[2048, 700, 5], H_q=32, H_kv=8,
                           D=128, T_q=16, dtype=dtype, seed=34)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. How fast is it? (GPU)
#
# The measurement times one decoding step, $T_q = 1$, bf16, $H_q = 32$, $D = 128$, for $B = 1$ and 8,
# $H_{kv} = 8$ (GQA, $g = 4$) and 32, and caches of 4k to 128k keys, three ways:
#
# - **split-K**: your two kernels, launched as `flash_decode` launches them, into buffers allocated once;
# - **the 05 kernel at $T_q = 1$**: a FlashAttention forward kernel, one query tile per head (grid
#   $(1, B \cdot H_q)$). It knows no GQA, so it reads K and V expanded to 32 heads. The table below
#   timed notebook 05's reference kernel; the cell times *your* `_flash_fwd_kernel`, loaded from your
#   `05_triton_flash.ipynb` (this folder, or `../attention_kernels/`), and leaves it out if it is missing;
# - **SDPA at $T_q = 1$**: `scaled_dot_product_attention(..., enable_gqa=True)`.
#
# Each is scored by the bytes of the cache, $2 B H_{kv} T_k D \cdot 2$, per second, against the
# device's copy bandwidth (bytes read plus written, per second; a stream of reads alone can beat it
# slightly), and each step is timed twice:
#
# - **launched from Python** (`triton.testing.do_bench`): what a loop calling `flash_decode` gets. The GPU
#   cannot start a kernel before the host has issued it, so the host's work per launch is in the time;
# - **replayed from a CUDA graph** (`triton.testing.do_bench_cudagraph`): the launches are recorded
#   once and the GPU replays them with no Python in between: the kernels' own time. Inference servers
#   (vLLM, SGLang, TensorRT-LLM) capture their decode step in CUDA graphs for exactly this reason. The
#   replay cycles through several copies of the cache, so that a small cache is not served from the
#   L2 cache (tens of MB).
#
# The course's reference kernels on one H200 (2026-12-04, torch 2.11, triton 3.6, medians; copy
# bandwidth 4248 GB/s; `notes/gpu/2026-12-04/session12/`), $B = 1$:
#
# | B | $H_{kv}$ | $T_k$ | split-K, from Python | split-K, CUDA graph | × copy (graph) | SDPA (graph) | 05 kernel (graph) |
# |---|---|---|---|---|---|---|---|
# | 1 | 8 | 32k | 83.1 µs, 1616 GB/s | 38.3 µs, 3508 GB/s | 0.83 | 36.9 µs, 3636 GB/s | 188 GB/s |
# | 1 | 8 | 128k | 139.7 µs, 3842 GB/s | 126.9 µs, 4231 GB/s | 1.00 | 124.3 µs, 4319 GB/s | 190 GB/s |
# | 1 | 32 | 32k | 136.7 µs, 3928 GB/s | 123.1 µs, 4363 GB/s | 1.03 | 122.7 µs, 4376 GB/s | 758 GB/s |
# | 1 | 32 | 128k | 483.2 µs, 4444 GB/s | 469.8 µs, 4571 GB/s | 1.08 | 466.0 µs, 4609 GB/s | 760 GB/s |
#
# Three things stand out. **Launched from Python, a step costs at least about 80 µs**, whatever its
# size: 134 MB of K and V ($H_{kv} = 8$, 32k keys) stream in 38 µs, and the GPU waits the rest of the
# time for the host (SDPA from Python takes about 50 µs at this size, 18 µs at 4k keys). Through
# `flash_decode` itself, which also checks its inputs and that each kernel compiles for the course's GPUs,
# one step took 255 µs from Python and
# 49.5 µs replayed from a graph, against SDPA's 63.3 and 49.6 µs ($H_{kv} = 8$, 32k, $H_q = 32$).
# **Replayed from a CUDA graph, that floor is gone**: split-K reads the cache at the copy bandwidth
# from 32k keys on ($H_{kv} = 32$) and reaches 0.83 of it with GQA at 32k (a 134 MB cache is read in
# 38 µs, where the two kernels' start-up and tail are no longer negligible; SDPA reaches 0.86). Over
# the 24 shapes of that run's sweep (the cell below measures 12 of them again), split-K runs at 0.96 to
# 1.01 of SDPA's speed (median 0.99).
# **Notebook 05's kernel** is stuck near 760 GB/s with 32 programs, at 190 GB/s with GQA (it reads the
# cache four times); at $B = 8$, $H_{kv} = 32$ it has 256 programs and catches up (4319 GB/s against
# split-K's 4599 at 32k keys). Without a GPU the next cell shows that run's whole
# measurement as a plot; with a GPU it measures again with your kernels (about a minute).

# %% nbgrader={"grade_id": "fwd-kernel-05", "locked": true}
# Your notebook 05 kernel for the comparison (ungraded), or None: the sweep then leaves it out.
from attnlab.nbload import load_earlier_kernel

your_fwd_kernel = None if RUNTIME.interpret else load_earlier_kernel("05_triton_flash.ipynb", "_flash_fwd_kernel")

# %% nbgrader={"grade_id": "bench-decode", "locked": true}
if RUNTIME.interpret or bench.autograding():  # timings are not graded
    bench_decode.show_recorded()
else:
    copy_gbs = bench.copy_bandwidth_gbs()
    print(f"copy bandwidth (read + write): {copy_gbs:.0f} GB/s")
    decode_points = bench_decode.decode_sweep(_decode_partial_kernel, _decode_merge_kernel, your_fwd_kernel,
                                              lengths=(4096, 32768, 131072))
    print(bench_decode.format_table(decode_points, copy_gbs))
    bench_decode.plot_decode(decode_points, copy_gbs, title=f"one decoding step on {RUNTIME.name}, bf16")

# %% [markdown]
# ### The launcher itself, from Python and from a CUDA graph
#
# The sweep above timed your kernels into buffers allocated once. The next cell times what a decoding
# loop actually calls, `flash_decode` (checks, split count, four allocations, two launches), at
# $B = 1$, $H_q = 32$, $H_{kv} = 8$, 32k keys, $D = 128$, bf16, and SDPA beside it, each way: called
# from Python, and captured once in a CUDA graph (`torch.cuda.graph`) then replayed. Every figure is the
# median of 100 steps, each started on an idle GPU after the L2 cache is flushed, so the host's work
# before the GPU can begin is part of the time, as it is in a real decoding loop.
#
# Why they differ: the K and V of this step are 134 MB, which the H200 streams in about 40 µs. Called
# from Python, the host has to run the launcher and Triton's launch code for two kernels (validating
# arguments, building the kernels' specialisation keys, talking to the driver) before the GPU receives
# any work, and that costs tens of µs or more each step, as long as the kernels themselves or longer;
# the GPU sits idle meanwhile. A CUDA graph records the two launches once, with their arguments, and a replay hands
# the whole step to the GPU in one call, so what remains is the kernels' own time plus about 10 µs
# for the graph to start on an idle GPU (49.5 µs here, against 38.3 µs for the kernels replayed back to
# back in the sweep). The price is that
# a graph replays the same addresses and shapes: a server writes each new token into the same cache
# and length tensors and replays, which is why a launcher that wants to be captured must never read a
# GPU value on the host (such a read waits for the GPU, and is refused while capturing). An earlier
# version of this launcher read `cache_seqlens.min()` every step to check it: it could not be
# captured and made the host wait for the previous step to finish.

# %% nbgrader={"grade_id": "decode-both-ways", "locked": true}
if RUNTIME.interpret or bench.autograding():  # timings are not graded
    print("This measurement needs a GPU: it times flash_decode from Python and replayed from a CUDA graph.")
else:
    print(bench_decode.format_both_ways(bench_decode.step_both_ways(flash_decode)))

# %% [markdown]
# **Q1.** From the measurement: how close does split-K come to the copy bandwidth at $B = 1$,
# $H_q = 32$, $T_k = 32$k, launched from Python and replayed from a CUDA graph, and why do the two
# differ? How many times faster is it than the 05 kernel there, and why does the gap shrink at
# $B = 8$, $H_{kv} = 32$?

# %% [markdown] nbgrader={"grade_id": "answer-measured", "solution": true, "grade": true, "points": 1}
# Replayed from a CUDA graph, the reference split-K kernels read K and V at 1.03 of the copy
# bandwidth at $B = 1$, $H_{kv} = 32$, $T_k = 32$k (4363 GB/s, 123.1 µs), and at 0.83 with GQA
# ($H_{kv} = 8$, 38.3 µs). Launched from Python the same steps take 137 and 83 µs: the GPU waits
# for the host to issue each launch, a floor of about 80 µs that a CUDA graph removes (through
# `flash_decode`, which also checks its inputs, 255 µs against 49.5 µs), which is why inference
# servers capture their decode step. Split-K reads the cache 5.8× faster than the 05 kernel at
# $H_{kv} = 32$ (758 GB/s: it starts only 32 programs), and 18.6× with GQA, where
# the 05 kernel also reads K and V once per query head. At $B = 8$, $H_{kv} = 32$ the 05 kernel has
# 256 programs, about two per SM, so every SM streams and it came within 6 % of split-K: splitting
# helps only when (sequence, head) pairs are too few to fill the GPU.

# %% [markdown]
# ## 8. Check yourself
#
# Answer in two to four sentences each, in your own words. These are graded by hand.
#
# **Q2.** Why must each slice hand the merge its LSE, and not only its partial output? What goes
# wrong if the merge averages the partial outputs with equal weights?

# %% [markdown] nbgrader={"grade_id": "answer-why-lse", "solution": true, "grade": true, "points": 1}
# A partial output is normalised within its slice only: it says *where* the slice's probability
# points, not *how much* probability the slice holds. The LSE is the log of the slice's unnormalised
# softmax mass, so $e^{\text{LSE}_s - \text{LSE}}$ is exactly the slice's share of the full softmax.
# Equal weights would give a slice of irrelevant keys (scores far below the max) as much say as the
# slice holding the attended token, and an empty slice would pull the output towards 0.

# %% [markdown]
# **Q3.** You process a prompt of 1000 tokens in chunks of 128 against the cache, with a causal
# mask. What does top-left alignment (as in notebook 02) compute for the second chunk, and why does
# no test of self-attention ($T_q = T_k$) notice the difference?

# %% [markdown] nbgrader={"grade_id": "answer-alignment", "solution": true, "grade": true, "points": 1}
# The second chunk holds tokens 128 to 255, with 256 keys in the cache. Top-left alignment lets its
# query $i$ see keys $0 \dots i$ only: token 128 sees just key 0 instead of keys 0 to 128, so the
# chunk attends to the wrong, much shorter prefix. Bottom-right alignment lets it see keys up to
# $256 - 128 + i = 128 + i$, its own position. When $T_q = T_k$ the two alignments coincide
# ($L - T_q + i = i$), so self-attention tests cannot tell them apart.

# %% [markdown]
# **Q4.** Why does the grid have one program per **KV** head rather than one per query head? Give
# the bytes read per decoding step at $B = 1$, $H_q = 32$, $H_{kv} = 8$, $T_k = 32$k, $D = 128$, bf16,
# for both choices.

# %% [markdown] nbgrader={"grade_id": "answer-gqa-grid", "solution": true, "grade": true, "points": 1}
# Decoding time is the time to read K and V. With a program per query head, the four heads of a
# group each load the same K/V tiles: $2 \cdot 32 \cdot 32768 \cdot 128 \cdot 2 = 512$ MiB per step
# (L2 may catch some repeats, but not reliably across a 128 MiB-per-head cache). With one program per
# KV head serving all four query heads as rows of one tile, each tile is loaded once:
# $2 \cdot 8 \cdot 32768 \cdot 128 \cdot 2 = 128$ MiB, four times less, and the extra rows only fill
# tensor-core rows that would otherwise be padding (a tile of one query still occupies 16 rows).

# %% [markdown]
# **Q5.** At $B = 8$, $H_{kv} = 32$, $T_k = 4096$ the launcher picks only a few splits. Why is
# splitting further not free, and what would you measure to choose the count?

# %% [markdown] nbgrader={"grade_id": "answer-split-count", "solution": true, "grade": true, "points": 1}
# With 256 (sequence, KV head) pairs the grid already gives every SM work, so more slices add
# programs that each load $q$, write a float32 partial of $D$ values and an LSE per row, and make the
# merge read $S$ partials per row: bytes and launches that do nothing for the cache traffic. Short
# slices also leave too few tiles to pipeline loads within a program. I would time the step for
# split counts 1, 2, 4, ... at that shape and pick the fastest, then check it against the rule
# "one full wave of resident programs, at least 128 keys per slice".

# %% [markdown] nbgrader={"grade_id": "speed", "task": true, "locked": true, "points": 0}
# ## Speed, as the grader measures it
#
# Nothing to write here. On a GPU grader, once every test above passes, your two decoding kernels are timed against
# the course's own kernels on one fixed problem (one sequence, 32 query heads over 8 KV heads, 32,768 cached keys, D=128, bfloat16, through `flash_decode`). The timing runs in a separate process that
# loads only the `@triton.jit` definitions of your solution cells (no other code of this notebook),
# with fresh random inputs and a cold L2 cache for every repetition, and every repetition's result is
# checked. You see your ratio to the course's kernel and your GB/s of K and V read here after grading, and your place
# on the class leaderboard. If your instructor gives this cell points, a ratio of 0.5 or less earns none
# and 0.9 or more earns all of them, linearly in between (the instructor may change both marks).
# A grader without a GPU leaves this cell for later, marked "needs GPU timing".

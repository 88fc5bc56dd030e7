# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · Tuning on the real machine: autotuning, Hopper features and FP8
#
# INTRO

# %% nbgrader={"grade_id": "setup", "locked": true}
# Given: picks GPU or CPU mode (and switches Triton to its interpreter on a CPU) before any kernel
# is defined, then loads the course's support package.
from attnlab import init

RUNTIME = init()

import torch
import triton
import triton.language as tl

from attnlab import bench, bench_tuning, launch_tuning
from attnlab.checks import time_limit
from attnlab.verify import call_limit_s

DEVICE = RUNTIME.device  # "cuda" on a GPU, "cpu" under the interpreter
E4M3_MAX = 448.0  # the largest finite float8_e4m3fn

# %% nbgrader={"grade_id": "fp8_scales", "solution": true}
def fp8_scales(x, block_rows=None):
    """Dequantisation scales for FP8 E4M3: one per head, or one per block of rows of each head."""
    ### BEGIN SOLUTION
    B, H, T, D = x.shape
    if block_rows is None:
        amax = x.abs().amax(dim=(-2, -1)).float()                       # (B, H)
    else:
        n_blocks = -(-T // block_rows)
        pad = n_blocks * block_rows - T                                 # zero rows never raise a max of |x|
        xp = torch.nn.functional.pad(x.abs().float(), (0, 0, 0, pad))
        amax = xp.view(B, H, n_blocks, block_rows * D).amax(dim=-1)      # (B, H, n_blocks)
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    ### END SOLUTION


# %% nbgrader={"grade_id": "quantize_fp8", "solution": true}
def quantize_fp8(x, scale, block_rows=None):
    """x / scale, saturated to the E4M3 range, as float8_e4m3fn (same shape as x)."""
    ### BEGIN SOLUTION
    if block_rows is None:
        s = scale[:, :, None, None]
    else:
        s = scale.repeat_interleave(block_rows, dim=2)[:, :, :x.shape[2], None]
    return (x.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    ### END SOLUTION


# %% nbgrader={"grade_id": "smem_estimate", "solution": true}
def smem_estimate(block_m, block_n, num_stages, head_dim, elem_bytes):
    ### BEGIN SOLUTION
    return (block_m + 2 * num_stages * block_n) * head_dim * elem_bytes
    ### END SOLUTION


# %% nbgrader={"grade_id": "prune_configs", "solution": true}
def prune_configs(configs, named_args, smem_limit=None, **kwargs):
    ### BEGIN SOLUTION
    args = {**named_args, **kwargs}
    T, head_dim, causal = args["T"], args["HEAD_DIM"], args["CAUSAL"]
    elem_bytes = args["Q"].element_size()
    limit = launch_tuning.smem_limit_bytes() if smem_limit is None else smem_limit
    kept = []
    for c in configs:
        bm, bn = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
        if T % bm or T % bn or (causal and bm % bn):
            continue
        if smem_estimate(bm, bn, c.num_stages, head_dim, elem_bytes) > limit:
            continue
        kept.append(c)
    return kept
    ### END SOLUTION


# %% nbgrader={"grade_id": "tuned-kernel", "locked": true}
@triton.jit
def _load_rows(src, row0, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr):
    """BLOCK consecutive rows of a (rows, HEAD_DIM) matrix from row0: by the TMA engine through a
    tensor descriptor, or by every thread computing its own addresses (a pointer)."""
    if USE_TMA:
        tile = src.load([row0, 0])
    else:
        rows = row0 + tl.arange(0, BLOCK)
        tile = tl.load(src + rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :])
    return tile


@triton.jit
def _kv_sweep(acc, l_i, m_i, q, k_src, v_src, kv_row0, lo, hi, offs_m, qk_scale,
              MASKED: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
              USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Online softmax over the keys [lo, hi) of one head, BLOCK_N at a time (scores in base 2)."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        k = _load_rows(k_src, kv_row0 + start_n, BLOCK_N, HEAD_DIM, USE_TMA)
        s = tl.dot(q, tl.trans(k)) * qk_scale            # FP8 or 16-bit operands, float32 scores
        if MASKED:                                       # only the diagonal band pays for the mask
            s = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_rows(v_src, kv_row0 + start_n, BLOCK_N, HEAD_DIM, USE_TMA)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # P·V always in V's 16-bit type
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attend_tile(q_src, k_src, v_src, o_dst, LSE, QS, KS, bh, tile_m, T, sm_scale,
                 FP8_QK: tl.constexpr, OUT_DTYPE: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """One BLOCK_M x HEAD_DIM tile of O and its LSE, for head bh (rows bh*T ... of the flat matrices)."""
    row0 = bh * T
    start_m = tile_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    if FP8_QK:  # Q K^T computes (Q/s_q)(K/s_k)^T: the per-head scales go back in with the softmax scale
        qk_scale = sm_scale * 1.4426950408889634 * tl.load(QS + bh) * tl.load(KS + bh)
    else:
        qk_scale = sm_scale * 1.4426950408889634
    q = _load_rows(q_src, row0 + start_m, BLOCK_M, HEAD_DIM, USE_TMA)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        # keys left of the diagonal block need no mask; the band [start_m, start_m + BLOCK_M) does
        acc, l_i, m_i = _kv_sweep(acc, l_i, m_i, q, k_src, v_src, row0, 0, start_m, offs_m, qk_scale,
                                  False, BLOCK_N, HEAD_DIM, USE_TMA, WARP_SPEC)
        acc, l_i, m_i = _kv_sweep(acc, l_i, m_i, q, k_src, v_src, row0, start_m, start_m + BLOCK_M, offs_m,
                                  qk_scale, True, BLOCK_N, HEAD_DIM, USE_TMA, WARP_SPEC)
    else:
        acc, l_i, m_i = _kv_sweep(acc, l_i, m_i, q, k_src, v_src, row0, 0, T, offs_m, qk_scale,
                                  False, BLOCK_N, HEAD_DIM, USE_TMA, WARP_SPEC)
    out = (acc / l_i[:, None]).to(OUT_DTYPE)
    if USE_TMA:
        o_dst.store([row0 + start_m, 0], out)
    else:
        tl.store(o_dst + (row0 + offs_m)[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :], out)
    tl.store(LSE + row0 + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)  # base 2 -> natural log


@triton.jit
def _attn_fwd_tuned(Q, K, V, O, LSE, QS, KS, T, BH, n_programs, sm_scale,
                    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr, PERSISTENT: tl.constexpr):
    """Attention forward for contiguous (B, H, T, D) tensors seen as (B*H*T, D) matrices."""
    FP8_QK: tl.constexpr = Q.dtype.element_ty == tl.float8e4nv
    OUT_DTYPE: tl.constexpr = O.dtype.element_ty
    if USE_TMA:
        # descriptors: the shape and strides of the whole matrix and the box one load brings, so the
        # copy engine fetches a tile into shared memory while the threads compute
        rows = BH * T
        q_src = tl.make_tensor_descriptor(Q, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
        k_src = tl.make_tensor_descriptor(K, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
        v_src = tl.make_tensor_descriptor(V, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
        o_dst = tl.make_tensor_descriptor(O, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    else:
        q_src, k_src, v_src, o_dst = Q, K, V, O
    if PERSISTENT:
        # one program per SM walks the tiles; the longest causal rows (last query tiles) go first
        tiles_m = T // BLOCK_M
        for tile in tl.range(tl.program_id(0), tiles_m * BH, n_programs):
            tile_m = tiles_m - 1 - tile // BH
            _attend_tile(q_src, k_src, v_src, o_dst, LSE, QS, KS, tile % BH, tile_m, T, sm_scale,
                         FP8_QK, OUT_DTYPE, CAUSAL, HEAD_DIM, BLOCK_M, BLOCK_N, USE_TMA, WARP_SPEC)
    else:
        _attend_tile(q_src, k_src, v_src, o_dst, LSE, QS, KS, tl.program_id(1), tl.program_id(0), T, sm_scale,
                     FP8_QK, OUT_DTYPE, CAUSAL, HEAD_DIM, BLOCK_M, BLOCK_N, USE_TMA, WARP_SPEC)


# %% nbgrader={"grade_id": "autotuned", "locked": true}
# Given: the kernel wrapped by Triton's autotuner, pruned by your prune_configs. Every key the autotuner
# has not seen yet (T, HEAD_DIM, CAUSAL, the Hopper switches, the dtypes) is tuned on its first call.
_KEY = ["T", "HEAD_DIM", "CAUSAL", "USE_TMA", "WARP_SPEC", "PERSISTENT"]
attn_fwd_autotuned = triton.autotune(configs=launch_tuning.autotune_configs(), key=_KEY,
                                     prune_configs_by={"early_config_prune": prune_configs},
                                     warmup=5, rep=25)(_attn_fwd_tuned)
attn_fwd_hopper = triton.autotune(configs=launch_tuning.autotune_configs(launch_tuning.HOPPER_SPACE), key=_KEY,
                                  prune_configs_by={"early_config_prune": prune_configs},
                                  warmup=5, rep=25)(_attn_fwd_tuned)

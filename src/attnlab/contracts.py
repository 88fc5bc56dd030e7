"""Each graded function's contract, stated once (notebooks 01-05 and 07-09).

One stub per function or kernel a learner writes, as CS336's ``tests/adapters.py`` keeps each deliverable's
contract in one docstring: the signature (the same parameters, order and defaults as the model solution in
``notebooks/NN_*.py``; ``tests/test_contracts.py`` compares them), the shapes, dtypes and units of what goes
in and comes out, what the grader's checker holds it to, and the source. The notebook's task text, the
course's launcher and the checker point here ("contract: ``attnlab.contracts.<name>``") instead of saying it
again. The stubs are documentation: calling one raises NotImplementedError. Kernel stubs drop the leading
underscore of the kernel's name (``_flash_fwd_kernel`` -> :func:`flash_fwd_kernel`).

:data:`GRADED` maps each stub to its notebook, the name graded there, and the checkers that grade it.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["GRADED", "online_softmax_stats", "flash_attention_forward", "flash_attention_backward", "softmax_kernel",
           "flash_fwd_kernel", "bwd_preprocess_kernel", "bwd_dkdv_kernel", "bwd_dq_kernel", "decode_partial_kernel",
           "decode_merge_kernel", "smem_estimate", "prune_configs", "fp8_scales", "quantize_fp8"]

#: stub name -> (notebook file stem, the graded name in it, the checkers of it (module.function),
#: the launcher that runs it or None).
GRADED = MappingProxyType({
    "online_softmax_stats": ("01_online_softmax", "online_softmax_stats",
                             ("verify_pytorch.check_online_softmax",), None),
    "flash_attention_forward": ("02_flash_forward", "flash_attention_forward",
                                ("verify_pytorch.check_flash_forward",), None),
    "flash_attention_backward": ("03_flash_backward", "flash_attention_backward",
                                 ("verify_pytorch.check_flash_backward",), None),
    "softmax_kernel": ("04_triton_softmax", "_softmax_kernel", ("verify.check_softmax_kernel",),
                       "launch.run_softmax_kernel"),
    "flash_fwd_kernel": ("05_triton_flash", "_flash_fwd_kernel", ("verify.check_flash_kernel",),
                         "launch.run_flash_kernel"),
    "bwd_preprocess_kernel": ("07_triton_backward", "_bwd_preprocess_kernel", ("verify_backward.check_bwd_preprocess",),
                              "launch_backward.run_backward_kernels"),
    "bwd_dkdv_kernel": ("07_triton_backward", "_bwd_dkdv_kernel", ("verify_backward.check_flash_backward_kernels",),
                        "launch_backward.run_backward_kernels"),
    "bwd_dq_kernel": ("07_triton_backward", "_bwd_dq_kernel", ("verify_backward.check_flash_backward_kernels",),
                      "launch_backward.run_backward_kernels"),
    "decode_partial_kernel": ("08_flash_decoding", "_decode_partial_kernel",
                              ("verify_decode.check_decode_partial_kernel",), "launch_decode.run_decode_partial"),
    "decode_merge_kernel": ("08_flash_decoding", "_decode_merge_kernel", ("verify_decode.check_decode_merge_kernel",),
                            "launch_decode.run_decode_merge"),
    "smem_estimate": ("09_tuning_and_fp8", "smem_estimate", ("verify_tuning.check_smem_estimate",), None),
    "prune_configs": ("09_tuning_and_fp8", "prune_configs", ("verify_tuning.check_prune_configs",), None),
    "fp8_scales": ("09_tuning_and_fp8", "fp8_scales", ("verify_tuning.check_fp8_scales",), None),
    "quantize_fp8": ("09_tuning_and_fp8", "quantize_fp8", ("verify_tuning.check_quantize_fp8",), None),
})


def _stub(name: str):
    raise NotImplementedError(f"attnlab.contracts.{name} states a contract; the notebook implements it")


# ---------------------------------------------------------------------------------------------- 01
def online_softmax_stats(x, block_size):
    """Running max ``m`` and normaliser ``l`` of a softmax over the last dim, in one pass over blocks.

    Args:
        x: (..., N) floating tensor; rows may hold -inf (a row of only -inf is fully masked).
        block_size: elements per block along the last dim; the last block may be shorter.

    Returns:
        (m, l), each of shape x.shape[:-1], at least float32: m the row maximum, l = Σ exp(x - m), so that
        m + log(l) is the row's natural-log logsumexp. A row with no finite entry gives m = -inf, l = 0.

    Raises:
        Nothing of its own. The checker (:func:`attnlab.verify.check_online_softmax`) fails a whole-row max,
        sum or logsumexp, or a second pass over the blocks, however right the numbers (one pass over blocks
        of ``block_size``; tolerance 1e-10 in float64, 1e-5 in float32).

    Source: Milakov and Gimelshein, "Online normalizer calculation for softmax" (2018).
    """
    _stub("online_softmax_stats")


# ---------------------------------------------------------------------------------------------- 02
def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16, scale=None):
    """FlashAttention-2 forward in PyTorch, one query tile and one key tile at a time.

    Args:
        q: (B, H, T_q, D); k, v: (B, H, T_k, D); floating point (float64 in the checks).
        causal: query i attends keys j <= i (top-left aligned).
        block_q, block_k: tile sizes along queries and keys; need not divide T_q, T_k.
        scale: score multiplier; None means D ** -0.5.

    Returns:
        (o, lse): o (B, H, T_q, D) in q's dtype; lse (B, H, T_q), the natural-log logsumexp of each scaled
        score row, at least float32.

    Raises:
        Nothing of its own. The checker (:func:`attnlab.verify.check_flash_forward`) refuses a fused attention
        operator and any intermediate as large as one head's T_q x T_k score matrix.

    Source: Dao, "FlashAttention-2" (2023), Algorithm 1.
    """
    _stub("flash_attention_forward")


# ---------------------------------------------------------------------------------------------- 03
def flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16, scale=None):
    """Gradients of attention with respect to q, k, v, tile by tile, from the saved o and LSE.

    Args:
        q, o, do: (B, H, T_q, D); k, v: (B, H, T_k, D).
        lse: (B, H, T_q), natural-log logsumexp of each row of the scaled scores (float32 or wider).
        causal: query i sees keys j <= i only.
        block_q, block_k: rows per query tile and per key tile (the last tile may be shorter).
        scale: multiplies the scores q kᵀ; None means D ** -0.5.

    Returns:
        (dq, dk, dv) shaped like q, k, v, in q's dtype.

    Raises:
        Nothing of its own. The checker (:func:`attnlab.verify.check_flash_backward`) refuses autograd's
        backward, a fused attention operator, and a score-sized intermediate.

    Source: Dao, "FlashAttention-2" (2023), Algorithm 2 (Δ = rowsum(dO ∘ O)).
    """
    _stub("flash_attention_backward")


# ---------------------------------------------------------------------------------------------- 04
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: "tl.constexpr"):
    """``_softmax_kernel``: the softmax of one row per program, a ``@triton.jit`` function.

    Launch (:func:`attnlab.launch.run_softmax_kernel`): grid (n_rows,); program i reads input row i and
    writes output row i.

    Args:
        output_ptr, input_ptr: the first elements of the output and input matrices (float32; float16 and
            bfloat16 on a GPU).
        input_row_stride, output_row_stride: elements from the start of one row to the next (may exceed
            n_cols, and differ from each other).
        n_cols: the length of each row (not a power of two in general).
        BLOCK_SIZE: constexpr, the next power of two >= n_cols; lanes >= n_cols are padding (masked).

    Checked (:func:`attnlab.verify.check_softmax_kernel`): against torch.softmax in float64 (1e-5 in
    float32); nothing stored outside the row's n_cols columns; under the interpreter each element of the row
    read once, by its own program, nothing past it.

    Source: the Triton tutorial "Fused Softmax".
    """
    _stub("softmax_kernel")


# ---------------------------------------------------------------------------------------------- 05
def flash_fwd_kernel(Q, K, V, O, LSE, stride_bh, stride_t, T, scale, CAUSAL: "tl.constexpr",
                     BLOCK_M: "tl.constexpr", BLOCK_N: "tl.constexpr", HEAD_DIM: "tl.constexpr"):
    """``_flash_fwd_kernel``: FlashAttention forward for BLOCK_M query rows of one (batch, head).

    Launch (:func:`attnlab.launch.run_flash_kernel`): grid (cdiv(T, BLOCK_M), B * H); program (m, bh)
    owns query rows m * BLOCK_M ... of head bh.

    Args:
        Q, K, V: contiguous (B, H, T, HEAD_DIM) inputs (float32; float16, bfloat16 on a GPU); O: the output,
            same layout and dtype.
        LSE: (B, H, T) float32, written: the natural-log logsumexp of every scaled score row.
        stride_bh, stride_t: T * HEAD_DIM and HEAD_DIM (elements between heads and between rows).
        T: sequence length (need not be a multiple of the blocks); scale: multiplies the scores
            (HEAD_DIM ** -0.5).
        CAUSAL: query i sees keys j <= i only. BLOCK_M, BLOCK_N: query and key tile sizes (powers of two,
            at least 16); HEAD_DIM: D.

    Checked (:func:`attnlab.verify.check_flash_kernel`): O and LSE against float64 attention (1e-5 on the
    CPU, 2e-3 tf32 on a GPU, 5e-3 float16, 2e-2 bfloat16); no store past the last row, none into the inputs;
    under the interpreter K and V read in tiles of at most BLOCK_N keys, each once per program, no causal
    tile past the diagonal, the products through tl.dot.

    Source: Dao, "FlashAttention-2" (2023), Algorithm 1; the Triton tutorial "Fused Attention".
    """
    _stub("flash_fwd_kernel")


# ---------------------------------------------------------------------------------------------- 07
def bwd_preprocess_kernel(O, DO, DELTA, stride_bh, stride_t, T, BLOCK_M: "tl.constexpr", HEAD_DIM: "tl.constexpr"):
    """``_bwd_preprocess_kernel``: Δ = rowsum(dO ∘ O) for BLOCK_M query rows of one (batch, head).

    Launch: grid (cdiv(T, BLOCK_M), B * H), alone or first of the three
    (:func:`attnlab.launch_backward.run_backward_kernels`, which sets BLOCK_M to its key block).

    Args:
        O, DO: contiguous (B, H, T, HEAD_DIM): the forward's output and dL/dO.
        DELTA: (B, H, T) float32, written here.
        stride_bh, stride_t: T * HEAD_DIM and HEAD_DIM; T: sequence length.

    Checked (:func:`attnlab.verify_backward.check_bwd_preprocess`): Δ against float64 (1e-5 at least); no
    store past the last row; and (:func:`attnlab.verify_backward.check_bwd_preprocess_large_offsets`)
    ``bh * stride_bh`` past 2³¹ in 64 bits.

    Source: Dao, "FlashAttention-2" (2023), Algorithm 2, line 4.
    """
    _stub("bwd_preprocess_kernel")


def bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC, stride_bh, stride_t, T, scale,
                    CAUSAL: "tl.constexpr", BLOCK_M: "tl.constexpr", BLOCK_N: "tl.constexpr",
                    HEAD_DIM: "tl.constexpr"):
    """``_bwd_dkdv_kernel``: dK and dV for BLOCK_N keys of one (batch, head): key tile outer, query tiles inner.

    Launch (:func:`attnlab.launch_backward.run_backward_kernels`): grid (cdiv(T, BLOCK_N), B * H), one program
    per key tile.

    Args:
        Q, K, V, DO: contiguous (B, H, T, HEAD_DIM); LSE, DELTA: (B, H, T) float32.
        DK, DV: (B, H, T, HEAD_DIM), written here, in their own dtype.
        DQ_ACC: (B, H, T, HEAD_DIM) float32 zeros, for designs that add dQ here with ``tl.atomic_add``
            (several programs add into the same rows: a plain load and store races).
        stride_bh, stride_t: T * HEAD_DIM and HEAD_DIM; T: sequence length; scale: HEAD_DIM ** -0.5.
        CAUSAL: query i sees keys j <= i only.

    Checked (:func:`attnlab.verify_backward.check_flash_backward_kernels`, with the other two kernels): dq,
    dk, dv against autograd of float64 attention (1e-5 on the CPU, 1e-2 float32 on a GPU); no store past
    the last row, none into the inputs; no race; the work model of notebook 07.

    Source: Dao, "FlashAttention-2" (2023), Algorithm 2.
    """
    _stub("bwd_dkdv_kernel")


def bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, DQ_ACC, stride_bh, stride_t, T, scale,
                  CAUSAL: "tl.constexpr", BLOCK_M: "tl.constexpr", BLOCK_N: "tl.constexpr",
                  HEAD_DIM: "tl.constexpr"):
    """``_bwd_dq_kernel``: dQ for BLOCK_M query rows of one (batch, head): query tile outer, key tiles inner.

    Launch (:func:`attnlab.launch_backward.run_backward_kernels`, after the dK/dV kernel): one program per
    query tile, with the block sizes the launcher sets.

    Args:
        as :func:`bwd_dkdv_kernel`; DQ: (B, H, T, HEAD_DIM), written here in its own dtype;
        DQ_ACC: what the dK/dV kernel added (zeros in a design that computes dQ here, which ignores it).

    Checked: as :func:`bwd_dkdv_kernel` (:func:`attnlab.verify_backward.check_flash_backward_kernels`), and
    ``bh * stride_bh`` past 2³¹ in 64 bits (:func:`attnlab.verify_backward.check_bwd_dq_large_offsets`).

    Source: Dao, "FlashAttention-2" (2023), Algorithm 2.
    """
    _stub("bwd_dq_kernel")


# ---------------------------------------------------------------------------------------------- 08
def decode_partial_kernel(Q, K, V, SEQLENS, O_PART, LSE_PART, stride_kb, stride_kh, stride_kt,
                          H_kv, group, T_q, keys_per_split, num_splits, scale,
                          CAUSAL: "tl.constexpr", BLOCK_M: "tl.constexpr", BLOCK_N: "tl.constexpr",
                          HEAD_DIM: "tl.constexpr"):
    """``_decode_partial_kernel``: attention of BLOCK_M query rows of one KV head's group over one slice of
    the keys: a partial O and LSE.

    Launch (:func:`attnlab.launch_decode.run_decode_partial`): grid ``cfg.partial_grid(B, H_kv)``
    (:class:`attnlab.launch_decode.DecodeConfig`).

    Args:
        Q: contiguous (B, H_q, T_q, HEAD_DIM); K, V: caches (B, H_kv, T_max, HEAD_DIM) with strides
            stride_kb, stride_kh, stride_kt (last dim contiguous; a transposed cache is passed as is);
            SEQLENS: int32 (B,), valid keys per sequence (NaN may follow them).
        O_PART: float32 (B, H_q, T_q, num_splits, HEAD_DIM); LSE_PART: float32 (B, H_q, T_q, num_splits),
            natural log; a split with no visible key gives O = 0 and LSE = -inf.
        H_kv: KV heads; group: query heads per KV head; T_q: new queries per sequence.
        keys_per_split: keys per slice, a multiple of BLOCK_N; num_splits: slices; scale: multiplies the
            scores. CAUSAL: query i of sequence b sees keys j <= SEQLENS[b] - T_q + i (bottom-right).

    Checked (:func:`attnlab.verify_decode.check_decode_partial_kernel`): against float64 partials; no store
    past the end, none into the inputs; under the interpreter each K/V element read once per GQA group,
    nothing at or past a sequence's length; offsets past 2³¹ in 64 bits.

    Source: Dao, Haziza, Massa, Sizov, "Flash-Decoding for long-context inference" (2023).
    """
    _stub("decode_partial_kernel")


def decode_merge_kernel(O_PART, LSE_PART, O, LSE, num_splits, BLOCK_S: "tl.constexpr", HEAD_DIM: "tl.constexpr"):
    """``_decode_merge_kernel``: merge the split-K partials of one query row with LSE weights.

    Launch (:func:`attnlab.launch_decode.run_decode_merge`): grid (B·H_q·T_q,), one program per query row.

    Args:
        O_PART: float32 (rows, num_splits, HEAD_DIM); LSE_PART: float32 (rows, num_splits), -inf for
            empty splits; O: (rows, HEAD_DIM) output in its own dtype; LSE: float32 (rows,) output,
            natural log: m + log(Σ_s exp(LSE_s - m)), m = max_s LSE_s; a row with only empty splits
            gives O = 0 and LSE = -inf.
        num_splits: partials per row; BLOCK_S: a power of two >= num_splits.

    Checked (:func:`attnlab.verify_decode.check_decode_merge_kernel`): against float64 (1e-5 in float32), with
    LSEs offset by 100 (no overflow of exp(LSE_s)); no store past the end, none into the partials.

    Source: Dao et al., "Flash-Decoding for long-context inference" (2023).
    """
    _stub("decode_merge_kernel")


# ---------------------------------------------------------------------------------------------- 09
def smem_estimate(block_m, block_n, num_stages, head_dim, elem_bytes):
    """Shared memory in bytes of one program of the pointer-load forward kernel: an int,
    (block_m + 2 · num_stages · block_n) · head_dim · elem_bytes (its Q tile once, and num_stages buffers
    each of a K tile and a V tile).

    Checked (:func:`attnlab.verify_tuning.check_smem_estimate`): exact, on given and drawn cases.

    Source: what triton 3.6 compiled for every config on the H200 (notes/gpu/2026-11-30/09/smem_check.csv).
    """
    _stub("smem_estimate")


def prune_configs(configs, named_args, smem_limit=None, **kwargs):
    """Drop the autotune configs that cannot run (or cannot run correctly) for this launch.

    Args:
        configs: list of triton.Config (``c.kwargs["BLOCK_M"]``, ``c.kwargs["BLOCK_N"]``, ``c.num_stages``).
        named_args: the launch's positional arguments by name (Q, K, V, O, LSE, QS, KS, T, ...).
        smem_limit: bytes; None: :func:`attnlab.launch_tuning.smem_limit_bytes`, the device's limit.
        kwargs: the launch's keyword arguments (CAUSAL, HEAD_DIM, USE_TMA, ...). T, HEAD_DIM, CAUSAL and Q
            are looked up in named_args or kwargs.

    Returns:
        A new list of the kept Config objects (the same objects), in the given order: those whose BLOCK_M and
        BLOCK_N divide T, whose BLOCK_N divides BLOCK_M when CAUSAL, and whose :func:`smem_estimate` with Q's
        bytes per element is at most smem_limit.

    Checked (:func:`attnlab.verify_tuning.check_prune_configs`): exactly the kept configs, as the same objects.

    Source: ``triton.autotune(prune_configs_by={"early_config_prune": f})``, ``f(configs, named_args,
    **kwargs) -> configs`` (triton/runtime/autotuner.py).
    """
    _stub("prune_configs")


def fp8_scales(x, block_rows=None):
    """Dequantisation scales for FP8 E4M3, so that x ≈ quantize_fp8(x, scale).float() * scale.

    Args:
        x: (B, H, T, D), any float dtype.
        block_rows: None: one scale per head, shape (B, H); else one per block of block_rows rows (tokens)
            of each head, shape (B, H, ceil(T / block_rows)), the last block holding the T % block_rows
            remaining rows when block_rows does not divide T.

    Returns:
        float32 scales, each max |x| / 448 over its group (448 = E4M3's largest value); a group of zeros
        gets any positive finite scale (1.0 in the model solution).

    Checked (:func:`attnlab.verify_tuning.check_fp8_scales`): on given and drawn cases.

    Source: the OCP 8-bit floating point specification (E4M3); FlashAttention-3 (Shah et al., 2024), 3.3.
    """
    _stub("fp8_scales")


def quantize_fp8(x, scale, block_rows=None):
    """x / scale as torch.float8_e4m3fn, same shape as x (B, H, T, D).

    Args:
        x: (B, H, T, D), any float dtype.
        scale: float32 (B, H) per head, or (B, H, ceil(T / block_rows)) per block of block_rows rows, as
            :func:`fp8_scales` returns (or a scale calibrated earlier, so some |x / scale| may exceed 448).
        block_rows: as :func:`fp8_scales`.

    Returns:
        torch.float8_e4m3fn: each value within half an E4M3 step of x / scale, saturated to ±448 (as the
        hardware's satfinite conversion does), never NaN from an overflow.

    Checked (:func:`attnlab.verify_tuning.check_quantize_fp8`): values read back from their bits; no value
    beyond ±448 reaches a conversion to float8_e4m3fn.

    Source: the OCP 8-bit floating point specification (E4M3); FlashAttention-3 (Shah et al., 2024), 3.3.
    """
    _stub("quantize_fp8")

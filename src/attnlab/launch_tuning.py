"""The given launcher of notebook 09: the tuned forward kernels, autotuned or with one fixed config.

The kernels themselves are given in notebook 09's read-only cells, not here (notes/authoring.md,
the second assignment's conventions: no kernel in the package; notes/decisions.md says why the notebook may show them). Their contract:

``kernel(Q, K, V, O, LSE, QS, KS, T, BH, n_programs, sm_scale, CAUSAL, HEAD_DIM, BLOCK_M, BLOCK_N,
USE_TMA, WARP_SPEC, PERSISTENT, SCALE_ROWS=0)``

- Q, K, V, O contiguous (B, H, T, D), seen as (B·H·T, D) row-major matrices, so head ``bh``'s rows
  start at row ``bh * T``; LSE float32 (B, H, T), natural log; QS, KS float32 dequantisation scales
  of FP8 Q and K: (B·H,) per head, or with ``SCALE_ROWS`` > 0 (B·H, cdiv(T, SCALE_ROWS)), one per block
  of SCALE_ROWS rows (ignored, pass any float32 tensor, when Q is 16-bit);
- grid ``(T // BLOCK_M, B·H)``, or with ``PERSISTENT`` ``(n_programs,)`` programs that walk the
  ``(T // BLOCK_M) · B·H`` tiles;
- T a multiple of :data:`T_MULTIPLE` (no masking of ragged tails: the autotuner's configs must
  divide T), ``HEAD_DIM`` a power of two in [16, 256].

Source: Triton's tutorial 06-fused-attention (autotune keys, TMA descriptors, warp specialization:
https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html) and FlashAttention-3
(Shah et al., 2024, arXiv:2407.08608) for FP8 and warp specialization on Hopper.
"""

from __future__ import annotations

import torch

from .core.device import is_kernel, runtime
from .launch import output

__all__ = ["T_MULTIPLE", "CONFIG_SPACE", "HOPPER_SPACE", "smem_limit_bytes", "sm_count", "autotune_configs",
           "launch_tuned_forward"]

#: T must be a multiple of this (the largest BLOCK_M/BLOCK_N of :data:`CONFIG_SPACE`), so every config
#: the pruning keeps tiles T exactly.
T_MULTIPLE = 128

#: The search space of notebook 09, as data: (BLOCK_M, BLOCK_N, num_warps, num_stages). 8 warps only with
#: 128-row tiles (two warpgroups of 64 rows each; a 64-row tile has no work for them).
CONFIG_SPACE = tuple((bm, bn, w, s) for bm, bn in ((64, 32), (64, 64), (128, 32), (128, 64), (128, 128))
                     for w in ((4,) if bm == 64 else (4, 8)) for s in (2, 3, 4))

#: The smaller space the Hopper steps (TMA, warp specialization, persistent grid, FP8) are tuned over:
#: 128-row tiles, which won the full space on the H200 at D = 128, T = 8192 and D = 64, T = 16384
#: (notes/gpu/2026-11-30/09/), to keep the compile time of four more autotuned variants within a cell.
HOPPER_SPACE = tuple((128, bn, w, s) for bn in (64, 128) for w in (4, 8) for s in (2, 3))

#: H100/H200 (sm_90): 227 KiB of shared memory per block once the kernel opts in (what Triton allows).
H200_SMEM_BYTES = 232448

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def smem_limit_bytes(device=None) -> int:
    """Shared memory one program may use, in bytes: the device's opt-in limit per block
    (``torch.cuda.get_device_properties(...).shared_memory_per_block_optin``), or the H200's 232448
    without a GPU (so CPU runs prune as the course's GPU would)."""
    gpu = _gpu_to_ask(device)
    if gpu is not None:
        return int(torch.cuda.get_device_properties(gpu).shared_memory_per_block_optin)
    return H200_SMEM_BYTES


def sm_count(device=None) -> int:
    """Streaming multiprocessors (132 on an H200); 4 under the interpreter (no GPU to ask)."""
    gpu = _gpu_to_ask(device)
    if gpu is not None:
        return torch.cuda.get_device_properties(gpu).multi_processor_count
    return 4


def _gpu_to_ask(device):
    """The CUDA device whose properties apply to ``device`` (None, an index, a name or a torch.device), or
    None where there is none: no GPU, or a CPU tensor's device (the interpreter on a GPU host)."""
    if not torch.cuda.is_available():
        return None
    if device is None or isinstance(device, int):
        return device or 0
    device = torch.device(device)
    return device if device.type == "cuda" else None


def autotune_configs(space=CONFIG_SPACE):
    """``triton.Config`` objects for ``space`` ((BLOCK_M, BLOCK_N, num_warps, num_stages) tuples)."""
    import triton

    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in space]


def autotune_bench(kernel_call, quantiles):
    """How ``triton.autotune(do_bench=...)`` times each config here: ``triton.testing.do_bench`` with
    5 ms of warm-up and 25 ms of repetitions (Triton's defaults, 25 and 100 ms, make a full search of
    ~50 configs take minutes). Returns what do_bench returns for ``quantiles``."""
    import triton.testing

    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


def _tma_allocator(device) -> None:
    # tl.make_tensor_descriptor inside a kernel needs a small global scratch buffer per program
    # (128 bytes per descriptor); Triton asks for it through this hook.
    import triton

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)


def _validate(kernel, q, k, v, q_scale, k_scale, block_rows):
    where = "launch_tuned_forward"
    if not (is_kernel(kernel) or type(kernel).__name__ == "Autotuner"):
        raise TypeError(f"{where}: kernel must be a @triton.jit function or its triton.autotune wrapper, "
                        f"got {type(kernel).__qualname__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{where}: {name} must be a 4-D tensor (B, H, T, D), got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
        if not t.is_contiguous():
            raise ValueError(f"{where}: {name} is not contiguous (strides {tuple(t.stride())}, shape "
                             f"{tuple(t.shape)}): the kernel reads Q, K, V and O as (B·H·T, D) row-major matrices; "
                             f"pass {name}.contiguous()")
        if t.device != q.device:
            raise ValueError(f"{where}: {name} is on {t.device}, q on {q.device}: use one device")
    if q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"{where}: q, k, v must have one shape (self-attention), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, H, T, D = q.shape
    if T % T_MULTIPLE:
        raise ValueError(f"{where}: T={T} must be a multiple of {T_MULTIPLE}: the tuned kernels do not mask a "
                         f"ragged last tile (notebook 05's kernel does)")
    if D < 16 or D > 256 or D & (D - 1):
        raise ValueError(f"{where}: head dim D={D} must be a power of two in [16, 256]")
    if v.dtype not in _DTYPES:
        raise TypeError(f"{where}: v has dtype {v.dtype}; use float16, bfloat16 or float32")
    fp8 = q.dtype == torch.float8_e4m3fn
    if fp8 != (k.dtype == torch.float8_e4m3fn) or fp8 != (q_scale is not None) or fp8 != (k_scale is not None):
        raise TypeError(f"{where}: FP8 needs q and k both float8_e4m3fn and both q_scale and k_scale; got "
                        f"q {q.dtype}, k {k.dtype}, q_scale {'given' if q_scale is not None else 'None'}, "
                        f"k_scale {'given' if k_scale is not None else 'None'}")
    if block_rows is not None:
        if isinstance(block_rows, bool) or not isinstance(block_rows, int):
            raise TypeError(f"{where}: block_rows must be an int (the rows that share one scale) or None, got "
                            f"{type(block_rows).__name__}")
        if block_rows < 1 or block_rows & (block_rows - 1) or block_rows > T:
            raise ValueError(f"{where}: block_rows={block_rows} must be a power of two, at most T={T} (for one "
                             f"scale per head pass block_rows=None)")
        if not fp8:
            raise ValueError(f"{where}: block_rows={block_rows} is for FP8 q and k (scales per block of rows); "
                             f"got q {q.dtype}")
    if fp8:
        shape, what = ((B, H), "(B, H), a scale per head") if block_rows is None else \
            ((B, H, -(-T // block_rows)), f"(B, H, ceil(T / block_rows)), a scale per block of {block_rows} rows")
        for name, s in (("q_scale", q_scale), ("k_scale", k_scale)):
            if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or tuple(s.shape) != shape:
                raise TypeError(f"{where}: {name} must be a float32 tensor of shape {what} = {shape}, got "
                                f"{getattr(s, 'dtype', type(s).__name__)} {tuple(getattr(s, 'shape', ()))}")
            if s.device != q.device:
                raise ValueError(f"{where}: {name} is on {s.device}, q on {q.device}: use one device")
    elif not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{where}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if runtime().interpret:
        if v.dtype == torch.bfloat16 or fp8:
            raise TypeError(f"{where}: {v.dtype if not fp8 else 'FP8'} is wrong under Triton's CPU interpreter; "
                            f"use float32 on the CPU")
    elif q.device.type != "cuda":
        raise ValueError(f"{where}: tensors are on {q.device}; the kernel runs on 'cuda'")
    return fp8


def launch_tuned_forward(kernel, q, k, v, causal=False, *, q_scale=None, k_scale=None, block_rows=None,
                         use_tma=False, warp_specialize=False, persistent=False, config=None, sm_scale=None):
    """Run notebook 09's forward kernel: softmax(Q Kᵀ · sm_scale) V, FlashAttention-2 style.

    Args:
        kernel: the ``@triton.jit`` kernel, or its ``triton.autotune`` wrapper (then ``config`` is None
            and the autotuner picks BLOCK_M, BLOCK_N, warps and stages per key).
        q, k, v: contiguous (B, H, T, D) on one device, T a multiple of :data:`T_MULTIPLE`; float16,
            bfloat16 or float32 (float32 only under the interpreter); or q and k float8_e4m3fn with
            ``q_scale``, ``k_scale`` float32 (B, H): Q ≈ q.float() · q_scale per head (FP8 Q Kᵀ, P·V in
            v's dtype); with ``block_rows``, (B, H, ceil(T / block_rows)): a scale per block of
            block_rows rows (FlashAttention-3's block quantisation; notebook 09's ``fp8_scales``).
        block_rows: None (scales per head) or a power of two up to T, the rows sharing one scale (FP8 only).
        causal: top-left causal mask (query i sees keys j <= i).
        use_tma, warp_specialize, persistent: the Hopper steps of notebook 09 (constexprs of the kernel).
        config: for a plain ``@triton.jit`` kernel, dict with BLOCK_M, BLOCK_N, num_warps, num_stages.
        sm_scale: softmax scale, default D ** -0.5.

    Returns:
        (o, lse): o (B, H, T, D) in v's dtype, lse float32 (B, H, T), natural log (both start as NaN
        inside :func:`attnlab.launch.checking` and on the CPU, as ``torch.empty`` otherwise).

    Reads no tensor value on the host: a call on GPU tensors with a fixed ``config`` (or an autotuner
    that has already tuned this key) can be captured in a CUDA graph and replayed, once a call outside
    the capture has compiled the kernel.

    Raises:
        TypeError: not a kernel, unsupported dtypes, FP8 without scales (or scales of the wrong shape), a
            block_rows that is not an int.
        ValueError: shapes, strides, T not a multiple of 128, D not a power of two, wrong device, a
            config whose blocks do not divide T, or block_rows not a power of two up to T, or given without
            FP8.
    """
    fp8 = _validate(kernel, q, k, v, q_scale, k_scale, block_rows)
    B, H, T, D = q.shape
    BH = B * H
    sm_scale = D ** -0.5 if sm_scale is None else float(sm_scale)
    o = output(v.shape, 0, v.dtype, v.device)
    lse = output((B, H, T), 0, torch.float32, q.device)
    if fp8:
        qs, ks = q_scale.reshape(BH, -1).contiguous(), k_scale.reshape(BH, -1).contiguous()
    else:
        qs = ks = torch.ones(1, dtype=torch.float32, device=q.device)
    if use_tma:
        _tma_allocator(q.device)
    n_programs = sm_count(q.device)

    def grid(meta):
        tiles = T // meta["BLOCK_M"]
        return (min(n_programs, tiles * BH),) if persistent else (tiles, BH)

    flags = dict(CAUSAL=bool(causal), HEAD_DIM=D, USE_TMA=bool(use_tma), WARP_SPEC=bool(warp_specialize),
                 PERSISTENT=bool(persistent))
    if block_rows is not None:  # only then: a kernel written before block scales still launches per head
        flags["SCALE_ROWS"] = block_rows
    args = (q, k, v, o, lse, qs, ks, T, BH, n_programs, sm_scale)
    if config is None:
        if not type(kernel).__name__ == "Autotuner":
            raise TypeError("launch_tuned_forward: config=None needs a triton.autotune kernel")
        compiled = kernel[grid](*args, **flags)
    else:
        bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
        if T % bm != 0 or T % bn != 0 or (causal and bm % bn != 0):
            raise ValueError(f"launch_tuned_forward: BLOCK_M={bm}, BLOCK_N={bn} must divide T={T}"
                             f"{' and BLOCK_N must divide BLOCK_M (causal)' if causal else ''}")
        compiled = kernel[grid](*args, **flags, BLOCK_M=bm, BLOCK_N=bn, num_warps=int(config.get("num_warps", 4)),
                                num_stages=int(config.get("num_stages", 2)))
    launch_tuned_forward.last_compiled = compiled  # the CompiledKernel (registers, spills, shared memory)
    return o, lse

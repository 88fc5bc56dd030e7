"""The given Triton launchers: validate input, allocate NaN-poisoned outputs, pick the grid, launch.

The notebooks wrap these around the learner's kernels (``triton_softmax`` and
``triton_flash_attention``), so a kernel is always launched the way the course's contract says:

- softmax: grid (n_rows,), one program per row, ``BLOCK_SIZE = next_power_of_2(n_cols)``;
- flash forward: grid (cdiv(T, BLOCK_M), B*H), contiguous (B, H, T, D) inputs, so
  ``stride_bh = T*D`` and ``stride_t = D``; LSE is float32 of shape (B, H, T).
"""

from __future__ import annotations

import torch

from . import gpu_compile

__all__ = ["launch_softmax", "run_softmax_kernel", "launch_flash_forward", "run_flash_kernel"]

_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _is_pow2(n) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def _poisoned_with_tail(shape, extra: int, dtype, device) -> torch.Tensor:
    """A NaN-filled contiguous tensor of ``shape`` followed in memory by ``extra`` spare elements.

    An output a kernel forgets to write stays NaN; a store that runs past the end (a missing mask)
    lands in the spare elements instead of corrupting other memory, which on the CPU interpreter
    could crash the whole Python process.
    """
    n = 1
    for size in shape:
        n *= size
    return torch.full((n + extra,), float("nan"), dtype=dtype, device=device)[:n].view(shape)


def _softmax_warps(block_size: int) -> int:
    # One row per program: wide rows need more threads to keep enough loads in flight.
    return 4 if block_size < 2048 else 8 if block_size < 8192 else 16


def _require_jit(kernel, what: str) -> None:
    """Only a ``@triton.jit`` function is a kernel: anything else (a Python function calling torch)
    would pass the checks without being the kernel the notebook asks for."""
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface):
        raise TypeError(f"{what} must be a @triton.jit function, got {type(kernel).__name__}")


def run_softmax_kernel(kernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Launch ``kernel`` on 2-D ``x`` into ``y`` as given (their row strides may exceed n_cols).

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function.
    """
    import triton

    _require_jit(kernel, "_softmax_kernel")
    kernel = gpu_compile.gated(kernel, "_softmax_kernel")  # compiles for GPU targets first, even on a CPU
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=block,
                      num_warps=_softmax_warps(block))
    return y


def launch_softmax(kernel, x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor by ``kernel`` (the course's ``_softmax_kernel`` contract).

    Args:
        kernel: a ``@triton.jit`` function with signature
            ``(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE)``.
        x: (n_rows, n_cols) float16, bfloat16 or float32; made contiguous first.

    Returns:
        y: like ``x``; allocated full of NaN, so any element the kernel does not write stays NaN
        (with one spare block after it, so an unmasked store cannot corrupt other memory).

    Raises:
        TypeError: ``x`` is not a floating tensor of a supported dtype.
        ValueError: ``x`` is not 2-D or has no columns.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"triton_softmax: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"triton_softmax: x must be 2-D (n_rows, n_cols), got shape {tuple(x.shape)}")
    if x.dtype not in _KERNEL_DTYPES:
        raise TypeError(f"triton_softmax: dtype {x.dtype} not supported; use float16, bfloat16 or float32")
    if x.shape[1] == 0:
        raise ValueError("triton_softmax: x has no columns")
    import triton

    x = x.contiguous()
    y = _poisoned_with_tail(x.shape, triton.next_power_of_2(x.shape[1]), x.dtype, x.device)
    return run_softmax_kernel(kernel, x, y)


def _validate_flash(q, k, v, block_m, block_n):
    from .reference import validate_qkv

    validate_qkv(q, k, v, where="triton_flash_attention")
    if q.shape != k.shape:
        raise ValueError(f"triton_flash_attention: this kernel does self-attention; q, k, v must all be "
                         f"(B, H, T, D), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.dtype not in _KERNEL_DTYPES:
        raise TypeError(f"triton_flash_attention: dtype {q.dtype} not supported; "
                        f"use float16, bfloat16 or float32")
    d = q.shape[-1]
    if not _is_pow2(d) or d < 16:
        raise ValueError(f"triton_flash_attention: head dim D={d} must be a power of two >= 16 "
                         f"(tl.arange and tl.dot need it)")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if not _is_pow2(b) or b < 16:
            raise ValueError(f"triton_flash_attention: {name}={b!r} must be a power of two >= 16 "
                             f"(tl.arange needs a power of two; tl.dot needs at least 16)")


def run_flash_kernel(kernel, q, k, v, o, lse, *, causal, block_m, block_n, num_warps=4, num_stages=2):
    """Launch ``kernel`` on contiguous q, k, v into the given o (B, H, T, D) and lse (B, H, T).

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function.
    """
    import triton

    _require_jit(kernel, "_flash_fwd_kernel")
    kernel = gpu_compile.gated(kernel, "_flash_fwd_kernel")  # compiles for GPU targets first, even on a CPU
    B, H, T, D = q.shape
    grid = (triton.cdiv(T, block_m), B * H)
    kernel[grid](q, k, v, o, lse, q.stride(1), q.stride(2), T, D ** -0.5,
                 CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=D,
                 num_warps=num_warps, num_stages=num_stages)
    return o, lse


def launch_flash_forward(kernel, q, k, v, causal=False, block_m=64, block_n=64, num_warps=4, num_stages=2):
    """FlashAttention forward by ``kernel`` (the course's ``_flash_fwd_kernel`` contract).

    Args:
        kernel: a ``@triton.jit`` function with signature ``(Q, K, V, O, LSE, stride_bh, stride_t, T,
            scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)``.
        q, k, v: (B, H, T, D), one dtype among float16, bfloat16, float32, on one device; D a power
            of two >= 16. Made contiguous, so ``stride_bh = T*D`` and ``stride_t = D``.
        causal: top-left aligned causal mask (query i sees keys j <= i).
        block_m, block_n: query and key tile sizes, powers of two >= 16.
        num_warps, num_stages: passed to Triton (ignored by the interpreter).

    Returns:
        o: (B, H, T, D) in q's dtype; lse: (B, H, T) float32, natural log. Both start as NaN and are
        followed by room for one padded tile of rows, so an unmasked store cannot corrupt other memory.

    Raises:
        TypeError, ValueError: naming the argument that is wrong (see ``validate_qkv`` too).
    """
    _validate_flash(q, k, v, block_m, block_n)
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = _poisoned_with_tail(q.shape, block_m * q.shape[-1], q.dtype, q.device)
    lse = _poisoned_with_tail(q.shape[:3], block_m, torch.float32, q.device)
    return run_flash_kernel(kernel, q, k, v, o, lse, causal=causal, block_m=block_m, block_n=block_n,
                            num_warps=num_warps, num_stages=num_stages)

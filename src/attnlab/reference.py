"""Reference attention: the plain three-step computation the course's kernels must reproduce.

Layout everywhere: (B, H, T, D) = (batch, heads, sequence length, head dimension).
"""

from __future__ import annotations

import torch

__all__ = ["validate_qkv", "lse_dtype", "naive_attention", "reference_gradients"]


def validate_qkv(q, k, v, *, where: str = "attention") -> None:
    """Raise a clear error unless q, k, v form a valid attention input.

    Args:
        q: (B, H, T_q, D) floating tensor.
        k, v: (B, H, T_k, D) floating tensors on q's device, with q's dtype (same D as q).
        where: the caller's name, used in the message.

    Raises:
        TypeError: an argument is not a tensor, or not floating point, or the dtypes differ.
        ValueError: a wrong rank, mismatched batch/head/length/head-dim sizes, or different devices.
    """
    names = ("q", "k", "v")
    for name, t in zip(names, (q, k, v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{where}: {name} must have 4 dims (B, H, T, D), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{where}: {name} must be a floating-point tensor, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{where}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{where}: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(f"{where}: batch and head sizes differ: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"{where}: k and v must have the same shape (B, H, T_k, D), got {tuple(k.shape)} "
                         f"and {tuple(v.shape)}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"{where}: q and k need the same head dim D, got {q.shape[3]} and {k.shape[3]}")
    if k.shape[2] == 0 or q.shape[2] == 0:
        raise ValueError(f"{where}: empty sequence: q {tuple(q.shape)}, k {tuple(k.shape)}")


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the course's LSE has for inputs of ``dtype``: float32 at least, float64 for float64."""
    return torch.promote_types(dtype, torch.float32)


def causal_mask(t_q: int, t_k: int, device=None) -> torch.Tensor:
    """(T_q, T_k) bool, True where query i may attend key j: j <= i (top-left aligned, as SDPA's is_causal)."""
    i = torch.arange(t_q, device=device)[:, None]
    j = torch.arange(t_k, device=device)[None, :]
    return j <= i


def naive_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """Attention by materialising the full score matrix: S = q kᵀ·scale, P = softmax(S), O = P v.

    Args:
        q: (B, H, T_q, D); k, v: (B, H, T_k, D); any floating dtype (float64 for exact references).
        causal: query i attends keys j <= i only (top-left aligned, like SDPA's ``is_causal``).
        scale: multiplies the scores; defaults to D ** -0.5.

    Returns:
        o: (B, H, T_q, D) in q's dtype.
        lse: (B, H, T_q), natural-log logsumexp of each score row, in ``lse_dtype(q.dtype)``.

    Raises:
        TypeError, ValueError: as :func:`validate_qkv`.

    Source: Vaswani et al. 2017, eq. (1); the LSE is what FlashAttention-2 saves for the backward
    (Dao 2023, Algorithms 1 and 2). FlashAttention-1 saved the running max m and sum l instead
    (Dao et al. 2022, Algorithms 2 and 4); LSE = m + log l.
    """
    validate_qkv(q, k, v, where="naive_attention")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    work = lse_dtype(q.dtype)
    s = (q.to(work) @ k.to(work).transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    o = p @ v.to(work)
    return o.to(q.dtype), lse


def reference_gradients(q, k, v, do, causal: bool = False, scale: float | None = None):
    """dq, dk, dv of ``naive_attention``'s output against the upstream gradient ``do``, by autograd.

    Computed in float64 from copies of the inputs, so the caller's tensors are never touched.

    Args:
        q: (B, H, T_q, D); k, v: (B, H, T_k, D); do: (B, H, T_q, D).

    Returns:
        (dq, dk, dv), float64, shaped like q, k, v.
    """
    validate_qkv(q, k, v, where="reference_gradients")
    if do.shape != q.shape:
        raise ValueError(f"reference_gradients: do must have q's shape {tuple(q.shape)}, got {tuple(do.shape)}")
    q64, k64, v64 = (t.detach().to(torch.float64).requires_grad_(True) for t in (q, k, v))
    o, _ = naive_attention(q64, k64, v64, causal=causal, scale=scale)
    return torch.autograd.grad(o, (q64, k64, v64), do.detach().to(torch.float64))

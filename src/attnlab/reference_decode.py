"""Decoding against a KV cache (notebook 08): the reference attention, the split-K partials and their merge.

The contract (stated for the kernels in ``attnlab.contracts.decode_partial_kernel``; after flash-attn's ``flash_attn_with_kvcache`` but in the course's
(B, H, T, D) layout):

- q (B, H_q, T_q, D): the T_q newest tokens of each sequence; k_cache, v_cache (B, H_kv, T_max, D)
  with H_q a multiple of H_kv: query head h reads KV head h // (H_q // H_kv) (grouped-query attention);
- ``cache_seqlens`` int32 (B,): the valid keys of sequence b, the T_q new ones included; keys at
  positions >= cache_seqlens[b] are never read (they may hold anything, NaN included);
- causal is **bottom-right** aligned: query i sees keys j <= cache_seqlens[b] - T_q + i;
- a query row that sees no key gives O = 0 and LSE = -inf.

Split-K (FlashDecoding, Dao, Haziza, Massa and Sizov, 2023): the keys of each (sequence, KV head)
are cut into ``num_splits`` slices of ``keys_per_split`` keys; each slice gives a partial output and
its LSE (:func:`decode_partials_reference`), merged with LSE weights (:func:`merge_partials_reference`).
The launcher is :mod:`attnlab.launch_decode`.
"""

from __future__ import annotations

import torch

from .reference import lse_dtype

__all__ = [
    "validate_decode_inputs", "decode_visible", "decode_attention_reference", "decode_partials_reference",
    "merge_partials_reference", "kv_bytes",
]


def validate_decode_inputs(q, k_cache, v_cache, cache_seqlens, *, where: str = "flash_decode",
                           values: bool = True) -> None:
    """Raise a clear error unless the arguments form a valid decoding input (see the module docstring).

    ``values=False`` leaves out the one check that reads a tensor's values (the lengths' range): on a
    GPU it makes the host wait for the GPU, and it cannot run while a CUDA graph is being captured.

    Raises:
        TypeError: not tensors, not floating point, dtypes that differ, or ``cache_seqlens`` not int32.
        ValueError: wrong ranks, mismatched sizes, H_q not a multiple of H_kv, devices that differ,
            or (with ``values``) a length outside [0, T_max].
    """
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(f"{where}: {name} must have 4 dims (B, H, T, D), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{where}: {name} must be a floating-point tensor, got {t.dtype}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise TypeError(f"{where}: q, k_cache, v_cache must share one dtype, got {q.dtype}, "
                        f"{k_cache.dtype}, {v_cache.dtype}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"{where}: k_cache and v_cache must have the same shape (B, H_kv, T_max, D), got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    B, H_q, T_q, D = q.shape
    Bk, H_kv, T_max, Dk = k_cache.shape
    if Bk != B or Dk != D:
        raise ValueError(f"{where}: q {tuple(q.shape)} and k_cache {tuple(k_cache.shape)} must agree on the "
                         f"batch size B and the head dim D")
    if H_kv == 0 or H_q % H_kv:
        raise ValueError(f"{where}: H_q={H_q} query heads must be a multiple of H_kv={H_kv} KV heads "
                         f"(grouped-query attention)")
    if T_q == 0 or T_max == 0 or B == 0:
        raise ValueError(f"{where}: empty input: q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}")
    if cache_seqlens.dtype != torch.int32 or tuple(cache_seqlens.shape) != (B,):
        raise TypeError(f"{where}: cache_seqlens must be an int32 tensor of shape (B,)=({B},), got "
                        f"{cache_seqlens.dtype} of shape {tuple(cache_seqlens.shape)}")
    if not (q.device == k_cache.device == v_cache.device == cache_seqlens.device):
        raise ValueError(f"{where}: all inputs must be on one device, got q {q.device}, k_cache "
                         f"{k_cache.device}, v_cache {v_cache.device}, cache_seqlens {cache_seqlens.device}")
    if not values:
        return
    lo, hi = int(cache_seqlens.min()), int(cache_seqlens.max())
    if lo < 0 or hi > T_max:
        raise ValueError(f"{where}: cache_seqlens must lie in [0, T_max={T_max}], got values from {lo} to {hi}")


def decode_visible(T_q: int, T_max: int, cache_seqlens: torch.Tensor, causal: bool,
                   align: str = "bottom-right") -> torch.Tensor:
    """(B, 1, T_q, T_max) bool: True where query i of sequence b may attend key j.

    Key j is visible when j < cache_seqlens[b] and, if causal, j <= cache_seqlens[b] - T_q + i
    (bottom-right alignment: the last query is the newest token and sees the whole cache). With
    ``align="top-left"`` (a mistake the checkers recognise) causal means j <= i instead.
    """
    L = cache_seqlens.to(torch.int64)[:, None, None]
    i = torch.arange(T_q, device=L.device)[None, :, None]
    j = torch.arange(T_max, device=L.device)[None, None, :]
    visible = j < L
    if causal:
        visible = visible & (j <= (L - T_q + i if align == "bottom-right" else i))
    return visible[:, None]


def keys_in_cache(T_max: int, cache_seqlens: torch.Tensor) -> torch.Tensor:
    """(B, 1, T_max, 1) bool: True for the keys inside each sequence's cache (j < cache_seqlens[b])."""
    return decode_visible(1, T_max, cache_seqlens, False).transpose(-1, -2)


def masked_scores(q, k, v, visible, valid_keys, scale):
    """Scores of q against k (KV heads expanded to query heads), -inf where ``visible`` is False, and
    v expanded the same way; in ``lse_dtype(q.dtype)``. Keys outside ``valid_keys`` are zeroed first,
    so whatever they hold (NaN included) cannot leak through 0 * NaN."""
    work = lse_dtype(q.dtype)
    group = q.shape[1] // k.shape[1]
    k, v = (t.to(work).masked_fill(~valid_keys, 0.0).repeat_interleave(group, dim=1) for t in (k, v))
    s = (q.to(work) @ k.transpose(-1, -2)) * scale
    return s.masked_fill(~visible, float("-inf")), v


def _masked_attention(q, k, v, visible, valid_keys, scale):
    """Attention of q over k, v (KV heads expanded to query heads) where ``visible`` allows.

    Rows with no visible key give O = 0 and LSE = -inf (see :func:`masked_scores`).
    """
    s, v = masked_scores(q, k, v, visible, valid_keys, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(visible, torch.exp(s - lse[..., None]), 0.0)  # exp(-inf + inf) is never selected
    return p @ v, lse


def decode_attention_reference(q, k_cache, v_cache, cache_seqlens, causal: bool = True,
                               scale: float | None = None, *, align: str = "bottom-right"):
    """Attention of new queries against a KV cache, by materialising every score (the course's reference).

    Args:
        q: (B, H_q, T_q, D); k_cache, v_cache: (B, H_kv, T_max, D), H_q a multiple of H_kv;
            one floating dtype (pass float64 for an exact reference).
        cache_seqlens: int32 (B,), valid keys per sequence (the T_q new tokens included).
        causal: bottom-right aligned: query i sees keys j <= cache_seqlens[b] - T_q + i.
        scale: multiplies the scores; defaults to D ** -0.5.
        align: ``"bottom-right"`` (the contract) or ``"top-left"`` (query i sees keys j <= i: what a
            kernel with notebook 02's mask computes, for diagnosing it).

    Returns:
        o: (B, H_q, T_q, D) in ``lse_dtype(q.dtype)`` (float64 for float64 inputs), 0 for rows with no
        visible key; lse: (B, H_q, T_q), natural log, -inf for those rows.

    Raises:
        TypeError, ValueError: as :func:`validate_decode_inputs`.

    Source: Vaswani et al. 2017, eq. (1); KV heads shared as in grouped-query attention (Ainslie et al.
    2023); lengths and bottom-right causal alignment as flash-attn's ``flash_attn_with_kvcache``.
    """
    validate_decode_inputs(q, k_cache, v_cache, cache_seqlens, where="decode_attention_reference")
    T_q, T_max = q.shape[2], k_cache.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    visible = decode_visible(T_q, T_max, cache_seqlens, causal, align)
    valid = keys_in_cache(T_max, cache_seqlens)  # (B, 1, T_max, 1)
    return _masked_attention(q, k_cache, v_cache, visible, valid, scale)


def decode_partials_reference(q, k_cache, v_cache, cache_seqlens, *, causal: bool, num_splits: int,
                              keys_per_split: int, scale: float | None = None, align: str = "bottom-right"):
    """What each split-K program must write: attention over keys [s·keys_per_split, (s+1)·keys_per_split) only.

    Args: as :func:`decode_attention_reference` (``align`` included), plus the split layout.

    Returns:
        o_part: (B, H_q, T_q, num_splits, D), the softmax-weighted mean of V over the split's visible
        keys (0 when it has none); lse_part: (B, H_q, T_q, num_splits), natural-log logsumexp of those
        scores (-inf when none). Both in ``lse_dtype(q.dtype)``.
    """
    validate_decode_inputs(q, k_cache, v_cache, cache_seqlens, where="decode_partials_reference")
    T_q, T_max = q.shape[2], k_cache.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    visible = decode_visible(T_q, T_max, cache_seqlens, causal, align)
    valid = keys_in_cache(T_max, cache_seqlens)
    j = torch.arange(T_max, device=q.device)
    outs, lses = [], []
    for s in range(num_splits):
        in_split = (j >= s * keys_per_split) & (j < (s + 1) * keys_per_split)
        o, lse = _masked_attention(q, k_cache, v_cache, visible & in_split, valid, scale)
        outs.append(o)
        lses.append(lse)
    return torch.stack(outs, dim=3), torch.stack(lses, dim=3)


def merge_partials_reference(o_part: torch.Tensor, lse_part: torch.Tensor):
    """Merge split-K partials with LSE weights: LSE = log Σ_s e^{LSE_s}, O = Σ_s e^{LSE_s − LSE} O_s.

    Args:
        o_part: (..., S, D); lse_part: (..., S), natural log, -inf for empty splits.

    Returns:
        o: (..., D), 0 for rows whose splits are all empty; lse: (...,), -inf for those rows. Computed
        in ``o_part``'s dtype (pass float64 for an exact reference).
    """
    lse = torch.logsumexp(lse_part, dim=-1)
    has = torch.isfinite(lse)
    w = torch.where(has[..., None], torch.exp(lse_part - torch.where(has, lse, 0.0)[..., None]), 0.0)
    o = (w[..., None] * o_part.masked_fill(~torch.isfinite(lse_part)[..., None], 0.0)).sum(dim=-2)
    return o, lse


def kv_bytes(B: int, H_kv: int, T_k: int, D: int, element_size: int = 2) -> int:
    """Bytes of K and V that one decoding step must read: 2 · B · H_kv · T_k · D · element_size."""
    return 2 * B * H_kv * T_k * D * element_size



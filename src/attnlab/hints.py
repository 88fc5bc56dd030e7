"""Diagnoses for wrong results: recognise the output of a known mistake and say which one it is.

A relative error alone ("0.9") says that an output is wrong, not why. When a wrong output is
exactly what a common, well-defined mistake would produce, the checkers append a sentence naming
that mistake.
"""

from __future__ import annotations

import torch

from .reference import naive_attention

__all__ = ["ALIGNMENTS", "causal_attention_aligned", "causal_alignment_hint"]

#: The two ways a causal mask is placed when T_q != T_k, and who uses each.
ALIGNMENTS = {
    "top-left": "query i sees keys j <= i, as torch's scaled_dot_product_attention(is_causal=True)",
    "bottom-right": "query i sees keys j <= i + T_k - T_q, as decoding against a KV cache, flash-attn >= 2.1 "
                    "and torch.nn.attention.bias.causal_lower_right",
}


def causal_attention_aligned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, align: str,
                             scale: float | None = None):
    """Causal attention with the mask aligned at the ``"top-left"`` or ``"bottom-right"`` corner.

    Args:
        q: (B, H, T_q, D); k, v: (B, H, T_k, D), floating point.
        align: ``"top-left"`` (query i sees keys j <= i) or ``"bottom-right"`` (query i sees keys
            j <= i + T_k - T_q). The two agree when T_q == T_k.
        scale: score multiplier, default D ** -0.5.

    Returns:
        (o, lse, defined): o (B, H, T_q, D) and lse (B, H, T_q) as ``naive_attention`` returns them,
        and ``defined``, a (T_q,) bool tensor, False for the rows that see no key at all (bottom-right
        with T_q > T_k: the first T_q - T_k rows); those rows of o and lse are NaN.

    Raises:
        ValueError: ``align`` is neither alignment.

    Bottom-right is top-left with every query moved T_k - T_q places down, so it reuses
    ``naive_attention``: pad q with T_k - T_q rows in front (or drop its first T_q - T_k rows).

    Source: the two conventions of ``torch.nn.attention.bias`` (``causal_upper_left``, SDPA's
    ``is_causal``; ``causal_lower_right``) and flash-attn 2.1's change to bottom-right (pytorch#108108).
    """
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {sorted(ALIGNMENTS)}, got {align!r}")
    t_q, t_k = q.shape[2], k.shape[2]
    shift = t_k - t_q if align == "bottom-right" else 0
    defined = torch.ones(t_q, dtype=torch.bool)
    if shift >= 0:
        padded = torch.cat([q.new_zeros(*q.shape[:2], shift, q.shape[3]), q], dim=2)
        o, lse = naive_attention(padded, k, v, causal=True, scale=scale)
        return o[:, :, shift:], lse[:, :, shift:], defined
    # more queries than keys: the first -shift rows see nothing
    o_tail, lse_tail = naive_attention(q[:, :, -shift:], k, v, causal=True, scale=scale)
    o = torch.full(q.shape, float("nan"), dtype=o_tail.dtype, device=q.device)
    lse = torch.full(q.shape[:3], float("nan"), dtype=lse_tail.dtype, device=q.device)
    o[:, :, -shift:], lse[:, :, -shift:] = o_tail, lse_tail
    defined[:-shift] = False
    return o, lse, defined


def causal_alignment_hint(o, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None,
                          tol: float, expected: str = "top-left") -> str:
    """A sentence to append when a causal ``o`` is the other alignment's output; "" otherwise.

    Args:
        o: the learner's output, a plain (B, H, T_q, D) tensor; anything else gives "".
        q, k, v: the inputs the learner was given (unchanged copies).
        scale: as passed to the learner (None for D ** -0.5).
        tol: relative-error tolerance; ``o`` must match the other alignment within it on every row
            that sees at least one key there (rows that see none may hold anything, NaN included).
        expected: the alignment the check asked for.

    Only T_q != T_k can tell the alignments apart; for T_q == T_k this returns "".
    """
    # a plain tensor only: methods of a subclass would run learner code here
    if type(o) is not torch.Tensor or o.shape != q.shape or q.shape[2] == k.shape[2]:
        return ""
    other = "bottom-right" if expected == "top-left" else "top-left"
    ref, _, defined = causal_attention_aligned(q, k, v, other, scale)
    got = o.detach().to(device=ref.device, dtype=torch.float64)[:, :, defined]
    want = ref.to(torch.float64)[:, :, defined]
    if want.numel() == 0 or not torch.isfinite(got).all():
        return ""
    if (got - want).norm().item() > tol * max(want.norm().item(), 1e-300):
        return ""
    return (f"Your output is causal attention aligned at the {other} corner ({ALIGNMENTS[other]}). "
            f"This check asks for the {expected} alignment: {ALIGNMENTS[expected]}. "
            f"The two differ only when T_q != T_k.")

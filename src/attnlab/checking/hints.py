"""Diagnoses for wrong results: recognise the output of a known mistake and say which one it is.

A relative error alone ("0.9") says that an output is wrong, not why. When a wrong output is
exactly what a common, well-defined mistake would produce, the checkers append a sentence naming
that mistake.
"""
# Length: A catalogue: one small diagnosis per known mistake; splitting it would only scatter the
# list.

from __future__ import annotations

import functools
from types import MappingProxyType

import torch

from ..reference import naive_attention

__all__ = ["ALIGNMENTS", "alignment_sentence", "causal_attention_aligned", "causal_alignment_hint", "delta_hint",
           "diagnosed", "head_offset_hint", "int32_offset_hint", "later_heads_hint", "log2e_hint", "lse_base_hint", "scale_factor_hint", "matches_with_empty", "merge_overflow_hint", "merge_weights_hint", "padding_zero_hint", "past_length_hint", "rescale_hint",
           "row_stride_hint", "sum_not_rescaled_hint", "unmasked_keys_hint", "zero_max_hint", "tiled_partials"]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def diagnosed(check, *hints) -> None:
    """Run ``check()`` (an assertion); when it fails, append the first sentence one of ``hints``
    (callables returning a hint or "", tried in order, only on failure) gives.

    A hint that explains non-finite values replaces ``assert_finite``'s general guesses (never written,
    exp(-inf - (-inf)), overflow) with the cause.
    """
    try:
        check()
    except AssertionError as exc:
        for hint in hints:
            sentence = hint()
            if sentence:
                raise AssertionError(f"{str(exc).split(' NaN usually means')[0]} {sentence}") from None
        raise


def quiet(hint):
    """A diagnosis must never replace the failure it explains: any error inside it gives ""."""
    @functools.wraps(hint)
    def wrapper(*args, **kwargs) -> str:
        try:
            return hint(*args, **kwargs)
        except Exception:  # noqa: BLE001 (odd dtypes or devices of a learner's output: no hint)
            return ""
    return wrapper

#: The two ways a causal mask is placed when T_q != T_k, and who uses each.
ALIGNMENTS = MappingProxyType({
    "top-left": "query i sees keys j <= i, as torch's scaled_dot_product_attention(is_causal=True)",
    "bottom-right": "query i sees keys j <= i + T_k - T_q, as decoding against a KV cache, flash-attn >= 2.1 "
                    "and torch.nn.attention.bias.causal_lower_right",
})


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


@quiet
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
    return alignment_sentence(other, expected)


def alignment_sentence(got: str, expected: str, what: str = "Your output") -> str:
    """The sentence naming a causal mask aligned at the ``got`` corner where ``expected`` was asked."""
    return (f"{what} is causal attention aligned at the {got} corner ({ALIGNMENTS[got]}). "
            f"This check asks for the {expected} alignment: {ALIGNMENTS[expected]}. "
            f"The two differ only when T_q != T_k.")


def matches_with_empty(got, want: torch.Tensor, tol: float) -> bool:
    """``got`` (a plain tensor) is -inf exactly where ``want`` is, finite elsewhere and within relative
    error ``tol`` there: an output or LSE with rows (or splits) that see no key."""
    if type(got) is not torch.Tensor or got.shape != want.shape:
        return False
    got = got.detach().to(device="cpu", dtype=torch.float64)
    want = want.to(torch.float64)
    empty = torch.isneginf(want)
    if not torch.equal(torch.isneginf(got), empty) or not torch.isfinite(got[~empty]).all():
        return False
    got, want = got.masked_fill(empty, 0.0), want.masked_fill(empty, 0.0)
    return (got - want).norm().item() <= tol * max(want.norm().item(), 1e-300)


@quiet
def merge_overflow_hint(o, lse_part: torch.Tensor) -> str:
    """A sentence to append when a split-K merge's non-finite rows of ``o`` are exactly those whose
    Σ_s exp(LSE_s) overflows float32; "" otherwise.

    Args:
        o: the learner's merged (..., D) output; lse_part: the (..., S) float32 partial LSEs it was given.

    exp(LSE_s) passes float32's largest value once LSE_s > 88.7: inf / inf = NaN. The merge weights
    exp(LSE_s − max_s LSE_s) ≤ 1 cannot overflow (FlashDecoding's reduction, as log-sum-exp).
    """
    if type(o) is not torch.Tensor or not o.is_floating_point():
        return ""
    lse_part = lse_part.detach().to(device="cpu", dtype=torch.float32)
    want_bad = torch.isinf(torch.exp(lse_part).sum(-1))
    got_bad = ~torch.isfinite(o.detach().cpu()).all(-1)
    if not want_bad.any() or not torch.equal(got_bad, want_bad):
        return ""
    top = lse_part.masked_fill(~want_bad[..., None], float("-inf")).max().item()
    return (f"These rows are the ones with a partial LSE above 88.7 (up to {top:.4g} here): exp(LSE_s) overflows "
            f"float32 to inf there, and inf / inf = NaN. Subtract the max LSE before exponentiating: weight "
            f"split s by exp(LSE_s − max_s LSE_s) (at most 1) and add the max back to the merged LSE.")


@quiet
def merge_weights_hint(o, o_part: torch.Tensor, lse_part: torch.Tensor, tol: float) -> str:
    """A sentence to append when a split-K merge's ``o`` is the partials weighted wrongly in a known way;
    "" otherwise.

    Args:
        o: the learner's merged (..., D) output; o_part (..., S, D), lse_part (..., S): the partials it was
            given (natural-log LSE, -inf for an empty split); tol: relative error of a match.

    Right: O = Σ_s w_s O_s / Σ_s w_s with w_s = exp(LSE_s − max LSE) (each split's share of the row's
    softmax mass). Recognised: base-2 weights 2^(LSE_s − max) for a natural-log LSE, weights never divided
    by their sum, and equal weights for every split with keys.
    """
    o_part, lse_part = (t.detach().to(device="cpu", dtype=torch.float64) for t in (o_part, lse_part))
    top = lse_part.amax(-1, keepdim=True)
    shifted = (lse_part - top.masked_fill(torch.isneginf(top), 0.0))
    w = shifted.exp()
    candidates = (
        (shifted.exp2(), True, "weights 2^(LSE_s − max): the partial LSEs are natural logs, so the weights are "
                               "exp(LSE_s − max), not exp2 (or scale by log2(e) first)"),
        (w, False, "weights exp(LSE_s − max) that are never divided by their sum Σ_s exp(LSE_s − max)"),
        (torch.isfinite(lse_part).double(), True, "every split with keys weighted equally: a split's weight is "
                                                  "its share of the row's softmax mass, exp(LSE_s − max)"),
    )
    for weights, normalised, cause in candidates:
        total = weights.sum(-1, keepdim=True)
        if normalised:
            weights = weights / total.masked_fill(total == 0, 1.0)
        want = (weights[..., None] * o_part).sum(-2)
        if _matches(o, want, tol):
            return f"Your merged O is the partials merged with {cause}."
    return ""


def tiled_partials(q, k, v, visible, valid, *, num_splits: int, keys_per_split: int, block_n: int,
                   rescale_l: bool, rescale_acc: bool):
    """Split-K partial O and LSE of an online softmax over ``block_n``-key tiles from each split's start,
    with or without the rescale of l and acc by exp(m_old − m_new) when a tile raises the running max.
    float64, (B, H_q, T_q, num_splits, D) and (B, H_q, T_q, num_splits); rows of a split with no
    visible key give 0 and -inf."""
    from ..reference_decode import masked_scores

    q, k, v = (t.detach().to(device="cpu", dtype=torch.float64) for t in (q, k, v))
    s_all, v = masked_scores(q, k, v, visible.cpu(), valid.cpu(), q.shape[-1] ** -0.5)
    outs, lses = [], []
    for split in range(num_splits):
        m = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float64)
        l, acc = torch.zeros_like(m), torch.zeros(q.shape, dtype=torch.float64)
        lo = split * keys_per_split
        for j0 in range(lo, min(lo + keys_per_split, k.shape[2]), block_n):
            s = s_all[..., j0:j0 + block_n]
            m_new = torch.maximum(m, s.amax(-1))
            base = m_new.masked_fill(torch.isneginf(m_new), 0.0)  # nothing visible yet: keep 0s
            alpha = torch.exp(m - base)
            p = torch.exp(s - base[..., None])
            l = (l * alpha if rescale_l else l) + p.sum(-1)
            acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., j0:j0 + block_n, :]
            m = m_new
        outs.append(acc / l.masked_fill(l == 0, 1.0)[..., None])
        lses.append(torch.where(l > 0, m + torch.log(l.masked_fill(l == 0, 1.0)), float("-inf")))
    return torch.stack(outs, dim=3), torch.stack(lses, dim=3)


@quiet
def rescale_hint(got, which: str, q, k, v, visible, valid, *, num_splits: int, keys_per_split: int,
                 block_n: int, tol: float) -> str:
    """A sentence to append when a split-K partial kernel's output ``got`` is the online softmax with l,
    acc or both left unrescaled when a key tile raises the running max; "" otherwise.

    Args:
        got: the learner's (B, H_q, T_q, S, D) partial O (``which="o"``) or (B, H_q, T_q, S) partial LSE
            (``which="lse"``); q (B, H_q, T_q, D), k and v (B, H_kv, T_max, D):
            the inputs as the kernel saw them; visible (B or 1, 1, T_q, T_max) and valid (B, 1, T_max, 1):
            the keys each row may see and the keys inside the cache (:func:`reference_decode.decode_visible`);
            the split layout and tile as launched; tol: relative error of a match.

    Right (FlashAttention-2, Algorithm 1, lines 9-10): with m_new = max(m, rowmax(S_tile)),
    l ← l·exp(m − m_new) + Σ exp(S_tile − m_new) and acc ← acc·exp(m − m_new) + exp(S_tile − m_new)·V_tile.
    """
    if keys_per_split <= block_n:  # one tile per split: nothing to rescale, every variant is right
        return ""
    def partials(rescale_l: bool, rescale_acc: bool) -> torch.Tensor:
        o, lse = tiled_partials(q, k, v, visible, valid, num_splits=num_splits, keys_per_split=keys_per_split,
                                 block_n=block_n, rescale_l=rescale_l, rescale_acc=rescale_acc)
        return o if which == "o" else lse

    right = partials(True, True)
    causes = ((False, True, "l"), (True, False, "acc"), (False, False, "l and acc"))
    for rescale_l, rescale_acc, what in causes:
        wrong = partials(rescale_l, rescale_acc)
        # where no tile raised any row's max the mistake changes nothing: it cannot be what was seen
        if matches_with_empty(got, wrong, tol) and not matches_with_empty(wrong, right, 1e-12):
            return (f"Your partials are what the online softmax gives when {what} {'is' if what != 'l and acc' else 'are'} "
                    f"not rescaled by exp(m_old − m_new) when a later key tile raises the running max m: "
                    f"multiply {what} by alpha before adding the new tile.")
    return ""


def _matches(got, want: torch.Tensor, tol: float) -> bool:
    """``got`` (a plain tensor: methods of a subclass would run learner code) equals ``want`` within
    relative error ``tol`` on every element, both finite; False when the reference is all zeros."""
    if type(got) is not torch.Tensor or got.shape != want.shape:
        return False
    got = got.detach().to(device="cpu", dtype=torch.float64)
    want = want.to(torch.float64)
    if not torch.isfinite(got).all() or not torch.isfinite(want).all() or want.norm().item() == 0:
        return False
    return (got - want).norm().item() <= tol * want.norm().item()


@quiet
def scale_factor_hint(name: str, got, want: torch.Tensor, scale: float, tol: float) -> str:
    """A sentence to append when a gradient of the scaled scores, ``dq`` or ``dk`` (and their ``.grad``),
    is ``want`` times 1/scale (the factor left out) or times scale (applied twice); "" otherwise.

    S = scale · Q Kᵀ, so dQ = scale · dS K and dK = scale · dSᵀ Q: one factor each, none for dV.
    """
    if name.split(".")[0] not in ("dq", "dk", "q", "k"):
        return ""
    for factor, cause in ((1 / scale, "without the factor scale"), (scale, "with scale applied twice")):
        if _matches(got, want * factor, tol):
            return (f"Your {name} is the gradient {cause}: S = scale · Q Kᵀ, so dQ = scale · dS K and "
                    f"dK = scale · dSᵀ Q carry it once (apply it to the accumulator before the store); dV has none.")
    return ""


@quiet
def log2e_hint(o, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, tol: float) -> str:
    """A sentence to append when a kernel's ``o`` is attention with its scores off by a factor log2(e); "" otherwise.

    A base-2 kernel multiplies the scores by log2(e) and takes ``exp2``. Forgetting the factor
    (``exp2`` of natural-log scores) computes softmax(S · ln 2); taking ``exp`` of scores that already
    carry it computes softmax(S · log2(e)) (exactly so when one key tile holds the whole row).

    Args:
        o: the learner's (B, H, T, D) output; q, k, v: the inputs (copies), default scale D ** -0.5.
    """
    scale = q.shape[-1] ** -0.5
    q, k, v = (t.detach().to(device="cpu", dtype=torch.float64) for t in (q, k, v))
    for factor, text in (
            (1 / LOG2E, "Your O is softmax of the scores times ln 2 = 0.693: exp2 taken of scores that were not "
                        "multiplied by log2(e). Multiply the scale by log2(e) = 1.4427 (qk_scale) before exp2, "
                        "and turn the base-2 LSE back into a natural log with a factor ln 2."),
            (LOG2E, "Your O is softmax of the scores times log2(e) = 1.443: exp taken of scores that were "
                    "already multiplied by log2(e). With qk_scale = scale * log2(e), every exponential in the "
                    "loop must be tl.exp2.")):
        want, _ = naive_attention(q, k, v, causal=causal, scale=scale * factor)
        if _matches(o, want, tol):
            return text
    return ""


def _scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float):
    """float64 scaled scores (-inf above a top-left causal diagonal) and the natural-log LSE of their rows."""
    _, lse = naive_attention(q, k, v, causal=causal, scale=scale)
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        t_q, t_k = s.shape[-2:]
        s = s.masked_fill(torch.ones(t_q, t_k, dtype=torch.bool).triu(1), float("-inf"))
    return s, lse


@quiet
def lse_base_hint(name: str, got, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, *,
                  causal: bool, tol: float) -> str:
    """A sentence to append when a backward gradient (``dq``, ``dk`` or ``dv``) is what P rebuilt as
    exp2(S · log2(e) − LSE) gives, the natural-log LSE left unconverted; "" otherwise.

    With base-2 scores, P = 2^(S log2 e − LSE log2 e) (the forward saved LSE as a natural log); without
    the second factor, P = e^(S − LSE ln 2). Δ = rowsum(dO ∘ O) is taken as right (it needs no LSE).
    """
    if name not in ("dq", "dk", "dv"):
        return ""
    q, k, v, do = (t.detach().to(device="cpu", dtype=torch.float64) for t in (q, k, v, do))
    scale = q.shape[-1] ** -0.5
    s, lse = _scores(q, k, v, causal, scale)
    p_right = torch.exp(s - lse[..., None])
    delta = (do * (p_right @ v)).sum(-1, keepdim=True)
    p = torch.exp(s - LN2 * lse[..., None])
    ds = p * (do @ v.transpose(-1, -2) - delta)
    want = {"dq": scale * ds @ k, "dk": scale * ds.transpose(-1, -2) @ q, "dv": p.transpose(-1, -2) @ do}[name]
    if _matches(got, want, tol):
        return (f"Your {name} is what P = exp2(S · log2(e) − LSE) gives: the saved LSE is a natural log, so in "
                f"base 2 subtract LSE · log2(e) (P = 2^(S log2 e − LSE log2 e)).")
    return ""


@quiet
def delta_hint(name: str, got, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, *,
               causal: bool, scale: float | None, block_k: int, tol: float, symbol: str = "D") -> str:
    """A sentence to append when ``dq`` or ``dk`` is the backward without the row term D_i; "" otherwise.

    dS = P ∘ (dP − D) with D_i = Σ_j P_ij dP_ij = rowsum(dO ∘ O)_i (FlashAttention-2, Dao 2023, Alg. 2).
    Two mistakes are recognised: D left at 0, and D summed over the current key tile only
    (Σ over the block_k keys of the tile instead of the whole row).

    Args:
        name: ``"dq"`` or ``"dk"`` (dv does not involve D: anything else gives "").
        got: the learner's gradient; q (B, H, T_q, D), k, v (B, H, T_k, D), do like q: the inputs.
        block_k: key tile size of the learner's loop; symbol: how the notebook writes D ("D" or "Δ").
    """
    if name not in ("dq", "dk"):
        return ""
    q, k, v, do = (t.detach().to(device="cpu", dtype=torch.float64) for t in (q, k, v, do))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s, lse = _scores(q, k, v, causal, scale)
    p = torch.exp(s - lse[..., None])
    dp = do @ v.transpose(-1, -2)
    pdp = p * dp
    tile_sums = torch.cat([pdp[..., j:j + block_k].sum(-1, keepdim=True).expand_as(pdp[..., j:j + block_k])
                           for j in range(0, pdp.shape[-1], block_k)], dim=-1)
    for d_wrong, cause in ((torch.zeros_like(lse)[..., None], f"{symbol}_i left out (taken as 0)"),
                           (tile_sums, f"{symbol}_i summed over the current key tile only")):
        ds = p * (dp - d_wrong)
        want = scale * (ds @ k if name == "dq" else ds.transpose(-1, -2) @ q)
        if _matches(got, want, tol):
            where = ("the preprocess kernel computes it once, as rowsum(dO ∘ O)_i, and both kernels load it"
                     if symbol == "Δ" else "compute it once, before the tile loops, as rowsum(dO ∘ O)_i")
            return (f"Your {name} is what dS = P ∘ (dP − {symbol}) gives with {cause}. {symbol}_i is a sum over "
                    f"every key of row i: {where}.")
    return ""


@quiet
def padding_zero_hint(y, x: torch.Tensor, block: int, tol: float) -> str:
    """A sentence to append when a softmax ``y`` counts the padded columns as 0; "" otherwise.

    A row of n_cols < ``block`` values loaded with ``other=0.0`` takes part in the max and the sum
    with block − n_cols extra zeros: y = exp(x − m') / (Σ exp(x − m') + (block − n_cols) exp(−m')).

    Args:
        y: the learner's (n_rows, n_cols) output; x: the input; block: the kernel's BLOCK_SIZE.
    """
    n_rows, n_cols = x.shape
    if block <= n_cols:
        return ""
    x = x.detach().to(device="cpu", dtype=torch.float64)
    padded = torch.cat([x, x.new_zeros(n_rows, block - n_cols)], dim=1)
    if not _matches(y, torch.softmax(padded, dim=-1)[:, :n_cols], tol):
        return ""
    return (f"Your output is the softmax of each row padded with {block - n_cols} zeros up to BLOCK_SIZE = {block}: "
            f"the masked-off columns were loaded as 0 and took part in the max and the sum. Load them "
            f"as -inf (other=-float(\"inf\")), so that exp gives them 0.")


@quiet
def row_stride_hint(positions, *, n_rows: int, n_cols: int, strides: dict[str, int]) -> str:
    """A sentence naming the row stride that explains stray stores, or "" when none does.

    Args:
        positions: element offsets (from the output's start) the kernel wrote but should not have;
            a stride is named only when they are exactly the stray stores it would make.
        strides: the correct ``{"output_row_stride": s}`` first, then the wrong strides a kernel may
            have used instead (``{"n_cols": n_cols, "input_row_stride": ...}``).
    """
    (right_name, right), *wrong = strides.items()
    got = set(torch.as_tensor(positions).flatten().tolist())
    for name, stride in wrong:
        if stride == right:
            continue
        # exactly the stores of rows stepped by `stride` that fall outside the rows stepped by `right`
        stray = {r * stride + c for r in range(n_rows) for c in range(n_cols)}
        stray = {p for p in stray if not (p < n_rows * right and p % right < n_cols)}
        if stray and stray == got:
            return (f"Every stray store lands where row r starts at r * {name} = r * {stride}: the output's "
                    f"rows are {right} elements apart, so step rows by {right_name}.")
    return ""


@quiet
def zero_max_hint(o, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                  scale: float | None) -> str:
    """A sentence to append when ``o``'s non-finite rows are those where a running max started at 0
    makes every exp underflow; "" otherwise.

    With m starting at 0 instead of -inf, m ends as max(0, row max): for a row whose scores all lie
    below about -745, every exp(s − m) underflows to 0 in float64 (about -103 in float32), so l = 0 and
    O = 0 / 0. Rows with a score near or above 0 come out right, so only such rows show it.
    """
    if type(o) is not torch.Tensor or o.shape != q.shape or not o.is_floating_point():
        return ""
    # the precision the learner's statistics live in (kernels keep half-precision inputs' in float32)
    work = torch.promote_types(o.dtype, torch.float32)
    q, k, v = (t.detach().to(device="cpu", dtype=work) for t in (q, k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True).clamp(min=0))
    want_bad = (p.sum(-1) == 0)
    got_bad = ~torch.isfinite(o.detach().cpu()).all(-1)
    if not want_bad.any() or not torch.equal(got_bad, want_bad):
        return ""
    return ("These rows are the ones whose scores all lie far below 0: with the running max m started at 0 "
            "instead of -inf, every exp(s − m) there underflows to 0, so l = 0 and O = 0 / 0. Start m at "
            "-inf, so that the first tile's own max is subtracted.")


@quiet
def int32_offset_hint(got, want: torch.Tensor, tol: float, *, far: list[bool], what: str, fix: str) -> str:
    """The output of a kernel whose offsets wrap around at 2³¹: right for every group of rows whose
    memory lies below element offset 2³¹ of its tensor, wrong for at least one that lies past it.

    Args:
        got, want: outputs whose first dim indexes the groups (sequences b, or heads bh).
        far: per group, whether its data lies past element offset 2³¹.
        what: the offset as the notebook writes it (``"b * stride_kb + kvh * stride_kh"``).
        fix: the 64-bit form to suggest.
    """
    if type(got) is not torch.Tensor or got.shape != want.shape or not any(far) or all(far):
        return ""
    right = [matches_with_empty(got[i], want[i], tol) for i in range(len(far))]
    near_ok = all(ok for ok, f in zip(right, far) if not f)
    if not near_ok or all(ok for ok, f in zip(right, far) if f):
        return ""
    return (f"Every row whose data lies below element offset 2^31 is right and rows past it are wrong: {what} "
            f"is computed in 32 bits and wraps around past 2^31 (a GPU then faults or reads other memory). "
            f"Widen to 64 bits before multiplying, e.g. {fix}.")


@quiet
def sum_not_rescaled_hint(l, x: torch.Tensor, block_size: int) -> str:
    """``l`` is the running sum of notebook 01 computed without rescaling it by exp(m_old − m_new) when
    a block raises the running max (Σ over blocks of Σ exp(x − m at that block), each block's terms kept
    relative to the max as it was then)."""
    if type(l) is not torch.Tensor or l.shape != x.shape[:-1]:
        return ""
    x = x.to(torch.float64)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
    stale = torch.zeros(x.shape[:-1], dtype=torch.float64)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m = torch.maximum(m, block.amax(dim=-1))
        offset = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        stale = stale + torch.exp(block - offset[..., None]).sum(dim=-1)
    got = l.detach().to(torch.float64)
    finite = torch.isfinite(stale) & ~torch.isneginf(m)
    right = torch.exp(torch.logsumexp(x, dim=-1) - m)
    differs = finite & ((stale - right).abs() > 1e-6 * right)  # rows where the max grew after block 1
    if not differs.any() or not torch.allclose(got[finite], stale[finite], rtol=1e-5, atol=0.0):
        return ""
    return ("l is the sum of every block's exp(x - m) with m as it was at that block: when a later block raises "
            "the running max, the sum so far must be rescaled first, l = l * exp(m_old - m_new) + "
            "sum(exp(block - m_new)).")


@quiet
def unmasked_keys_hint(o, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, block_n: int,
                       tol: float) -> str:
    """``o`` is non-causal attention over the keys padded with zeros to a whole number of ``block_n``
    tiles: a kernel whose last tile loads keys >= T as 0 (a masked load) and never masks their scores,
    so each of them scores 0 and takes probability. (Under a causal mask they stay hidden anyway.)"""
    pad = -k.shape[-2] % block_n
    if causal or not pad or type(o) is not torch.Tensor or o.shape != q.shape:
        return ""
    zeros = torch.zeros(*k.shape[:-2], pad, k.shape[-1], dtype=torch.float64)
    k_pad, v_pad = (torch.cat((t.detach().to(device="cpu", dtype=torch.float64), zeros), -2) for t in (k, v))
    want, _ = naive_attention(q.detach().to(device="cpu", dtype=torch.float64), k_pad, v_pad)
    got = o.detach().to(device="cpu", dtype=torch.float64)
    # a row of scores far below 0 gives exactly O = 0 here (the padded keys take all the weight)
    if not torch.isfinite(got).all() or (got - want).abs().max().item() > tol * max(want.abs().max().item(), 1.0):
        return ""
    return (f"Your output is attention over the keys padded to a whole tile of BLOCK_N = {block_n}: the keys "
            f"at or past T in the last tile (loaded as 0) kept a score of 0 and took probability. Mask them out "
            f"of the scores, s = tl.where(offs_n[None, :] < T, s, float(\"-inf\")), in every tile that reaches "
            f"past T.")


@quiet
def past_length_hint(o, rerun) -> str:
    """``o`` has NaN, and ``rerun()`` (the same kernels on the same inputs, the cache holding 0 instead
    of NaN past every sequence's length) gives a finite output: the NaN was read past a length."""
    if type(o) is not torch.Tensor or torch.isfinite(o.detach().cpu()).all():
        return ""
    again = rerun()
    if type(again) is not torch.Tensor or not torch.isfinite(again.detach().cpu()).all():
        return ""
    return ("The NaN was read from the cache past a sequence's length: it holds NaN there in this check, and "
            "with 0 there instead your output is finite. Never load a key or value at or past "
            "cache_seqlens[b] (a score mask does not help: 0 * NaN is NaN): end each slice's loop at the length "
            "and mask the K and V loads with offs_n < seqlen.")


@quiet
def head_offset_hint(n_heads: int, one_head_stays_inside) -> str:
    """Stores landed past the last row with ``n_heads`` heads: when ``one_head_stays_inside()`` (the same
    kernel on the first head alone stores nothing past its rows) says so, the stores are masked and the
    head offset is what runs past the end (e.g. ``bh`` times a length padded to the tile)."""
    if n_heads < 2 or not one_head_stays_inside():
        return ""
    return (f"with one head nothing lands past the last row, with {n_heads} heads it does, so the stores are "
            f"masked and the per-head offset is wrong: a head starts bh * stride_bh elements in (stride_bh = "
            f"T * HEAD_DIM, as the launcher passes it), not bh times a length padded to the tile such as "
            f"tl.cdiv(T, BLOCK_M) * BLOCK_M * HEAD_DIM")


@quiet
def later_heads_hint(got, want: torch.Tensor, tol: float) -> str:
    """``got`` (B, H, T, D) is right for the first (batch, head) and wrong for a later one: what a
    per-head offset other than ``bh * stride_bh`` gives (the first head's offset is 0 either way)."""
    if type(got) is not torch.Tensor or got.dim() != 4 or got.shape != want.shape or got.shape[0] * got.shape[1] < 2:
        return ""
    heads, wanted = got.detach().cpu().flatten(0, 1), want.flatten(0, 1)
    if not _matches(heads[0], wanted[0], tol) or all(_matches(g, w, tol) for g, w in zip(heads[1:], wanted[1:])):
        return ""
    return ("The first (batch, head) is right and a later one is wrong, so the per-head offset is off: head bh starts "
            "bh * stride_bh elements in (stride_bh = T * HEAD_DIM) and its LSE and Δ rows at bh * T, not at a "
            "length padded to the tile.")

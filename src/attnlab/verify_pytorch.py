"""The checkers of notebooks 01-03 (PyTorch-level functions): seeded inputs, the learner's function called
under :func:`attnlab.checking.harness.call_learner` and a :class:`attnlab.checking.probe.MethodProbe`, the float64
references of :mod:`attnlab.reference`; and the score patterns the kernel checkers of 05 share.

Notebooks and tests import these names from :mod:`attnlab.verify`, which re-exports them; the contracts
of the functions they check are in :mod:`attnlab.contracts`.
"""

from __future__ import annotations

from types import MappingProxyType

import torch
from torch.autograd.gradcheck import GradcheckError

from .checks import Case, assert_close, assert_dtype_at_least, assert_shape, randn, tolerance
from .checking.harness import call_learner
from .checking.hints import causal_alignment_hint, delta_hint, diagnosed, zero_max_hint
from .checking.probe import MethodProbe, reduce_rule, row_rule, tile_rule
from .reference import lse_dtype, naive_attention, reference_gradients

__all__ = [
    "check_online_softmax", "check_flash_forward", "check_flash_backward", "check_autograd_attention",
    "check_attention_gradcheck", "growing_scores", "REGIMES", "shape_scores", "seeded_qkv",
]


def _pair(out, what: str, names: tuple[str, ...]):
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        raise AssertionError(f"{what} must return a tuple ({', '.join(names)}), got {got}")
    return out


def growing_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> None:
    """Make every score row grow along the keys (in place), so each new key tile raises the max.

    q[..., 0] is set into [1, 2] and k[..., j, 0] grows by ``slope / scale`` per key, with
    slope = min(0.5, 24 / T_k): score (i, j) grows by at least ``slope`` per key (0.5 for short
    rows), so an implementation that forgets to rescale acc or l is wrong on every row, while the
    scores stay below about 50 whatever T_k (large scores magnify tf32 rounding on a GPU).
    """
    q[..., 0] = q[..., 0].abs().clamp(max=1.0) + 1.0
    slope = min(0.5, 24.0 / k.shape[2])
    k[..., 0] += torch.arange(k.shape[2], dtype=k.dtype, device=k.device) * (slope / scale)


#: Score patterns a checker can impose (``regime=``), and the typical bug each one exposes.
REGIMES = MappingProxyType({
    "far_negative": "every other query row's scores lie near -1000 (a running max started at 0 "
                    "underflows exp to 0 and divides 0 by 0; exp(S) / exp(LSE) is 0 / 0)",
    "peak_first": "the largest scores (500 to 1000 above the rest) sit in the first key tile (a max "
                  "taken from the current tile alone, not the running one, overflows the rescale)",
    "peak_middle": "the largest scores sit in the middle key tile",
    "peak_last": "the largest scores sit in the last key tile (ragged when block_k does not divide T_k)",
})


def shape_scores(q: torch.Tensor, k: torch.Tensor, scale: float, regime: str, block_k: int) -> None:
    """Impose a :data:`REGIMES` pattern on the scores ``q kᵀ · scale`` (in place, through feature 1).

    far_negative: k[..., 1] = 1, so subtracting 1000 / scale from q[..., i, 1] lowers row i's scores
    by exactly 1000. peak_*: q[..., 1] is put into [1, 2] and k[..., j, 1] raised by 500 / scale
    for the keys j of one key tile, so those scores rise by 500 to 1000.
    """
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {sorted(REGIMES)}, got {regime!r}")
    if q.shape[-1] < 2:
        raise ValueError(f"regime {regime!r} needs D >= 2, got D = {q.shape[-1]}")
    if regime == "far_negative":
        k[..., 1] = 1.0
        q[..., ::2, 1] -= 1000.0 / scale
        return
    T_k = k.shape[2]
    starts = list(range(0, T_k, block_k))
    start = {"peak_first": starts[0], "peak_middle": starts[len(starts) // 2], "peak_last": starts[-1]}[regime]
    q[..., 1] = q[..., 1].abs().clamp(max=1.0) + 1.0
    k[..., start:start + block_k, 1] += 500.0 / scale


# ---------------------------------------------------------------------------------------------- 01
def check_online_softmax(fn, *, block_size: int, shape=(4, 50), seed: int = 0, x: torch.Tensor | None = None,
                         name: str = "online_softmax_stats"):
    """Check ``fn(x, block_size) -> (m, l)``: m is the row max and m + log(l) the logsumexp.

    A row with no finite entry (all -inf) must give m = -inf and l = 0. The call runs under a
    :class:`~attnlab.checking.probe.MethodProbe`: when the rows are longer than one block of every row
    (N > rows * block_size), no operation may combine more than that many elements per result,
    so a whole-row max, sum or logsumexp fails the check even when its numbers are right.

    Args:
        fn: the learner's ``online_softmax_stats``.
        block_size: block length along the last dim.
        shape: shape of the random float64 input (values of spread 5) when ``x`` is not given.
        x: a specific input (e.g. with -inf entries or a max that jumps); compared in its own dtype.

    Raises:
        AssertionError: with the case, the quantity and the first wrong index, or the method rule broken.

    Contract: ``attnlab.contracts.online_softmax_stats``.
    """
    if x is None:
        x = randn(*shape, seed=seed) * 5.0
    case = Case(shape=tuple(x.shape), block_size=block_size, dtype=str(x.dtype).replace("torch.", ""))
    x_in = x.clone()
    n_rows = x[..., 0].numel() if x.dim() > 1 else 1
    probe = MethodProbe(
        where=f"{name} [{case}]", rule="notebook 01 asks for one pass over blocks",
        reduce_limit=reduce_rule(n_rows=n_rows, block_size=block_size, n=x.shape[-1]), inputs=(x_in,),
        one_pass=x.shape[-1] > block_size,
        hint=f"Read x one block of block_size = {block_size} elements at a time "
             f"(x[..., start:start + block_size]) and update m and l from that block only; a max, sum or "
             f"logsumexp over the whole row at once ignores block_size, and a second loop over the blocks (the "
             f"max first, then the sum) is two passes.")
    m, l = _pair(call_learner(fn, name, x_in, block_size, _probe=probe), name, ("m", "l"))
    assert_shape(m, x.shape[:-1], name="m", case=case)
    assert_shape(l, x.shape[:-1], name="l", case=case)
    m_ref = x.amax(dim=-1)
    lse_ref = torch.logsumexp(x.to(torch.float64), dim=-1)
    empty = torch.isneginf(m_ref)
    if empty.any():
        # a fully masked row: the max of nothing finite is -inf, and nothing adds to l
        ok = torch.isneginf(m) & (l == 0)
        bad = empty & ~ok
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise AssertionError(f"m, l [{case}]: row {idx} is entirely -inf (fully masked): expected m = -inf "
                                 f"and l = 0, got m = {m[idx].item():.6g}, l = {l[idx].item():.6g}. A row that "
                                 f"has seen nothing finite keeps m = -inf; use a finite offset only inside exp.")
        keep = ~empty
        m, l, m_ref, lse_ref = m[keep], l[keep], m_ref[keep], lse_ref[keep]
    assert_close(m, m_ref, name="m (the running max)", case=case)
    from .checking.hints import sum_not_rescaled_hint

    diagnosed(lambda: assert_close(m + torch.log(l.to(torch.float64)), lse_ref, name="m + log(l) (the logsumexp)",
                                   case=case, tol=1e-10 if x.dtype == torch.float64 else 1e-5),
              lambda: sum_not_rescaled_hint(l, x[keep] if empty.any() else x, block_size))


# ---------------------------------------------------------------------------------------------- 02
def seeded_qkv(B, H, T_q, T_k, D, *, seed, dtype=torch.float64, device="cpu"):
    """Seeded q (B, H, T_q, D), k and v (B, H, T_k, D): seeds ``seed``, ``seed + 1``, ``seed + 2``."""
    q = randn(B, H, T_q, D, seed=seed, dtype=dtype, device=device)
    k = randn(B, H, T_k, D, seed=seed + 1, dtype=dtype, device=device)
    v = randn(B, H, T_k, D, seed=seed + 2, dtype=dtype, device=device)
    return q, k, v


def _tile_probe(*, where: str, notebook: str, B, H, T_q, T_k, D, block_q, block_k, inputs, autograd=None):
    """The :class:`MethodProbe` of notebooks 02 and 03: no score-sized intermediate, no fused attention."""
    forward = notebook == "02"
    hint = ("Compute S and P one block_q x block_k tile at a time and keep only m, l and acc between tiles "
            "(naive_attention and scaled_dot_product_attention build or hide the whole matrix; a softmax, max, "
            "sum or product over all keys of a row at once skips the online softmax)." if forward else
            "Recompute P one block_q x block_k tile at a time from q, k and the LSE, and accumulate dq, dk, "
            "dv tile by tile (autograd or formulas on the whole P build the whole matrix; a product over all "
            "keys of a row, or all queries of a column, at once skips the tiles).")
    return MethodProbe(
        where=where, rule=f"notebook {notebook} asks for tiles", hint=hint, autograd=autograd, inputs=inputs,
        size_limit=tile_rule(B=B, H=H, T_q=T_q, T_k=T_k, block_q=block_q, block_k=block_k,
                             largest_io=B * H * max(T_q, T_k) * D),
        size_what=f"a whole score matrix (T_q x T_k = {T_q} x {T_k})",
        # a few reductions to one number per tile pair: a tile skipped when `s.max() == -inf`, a print
        reduce_scalars=4 * B * H * -(-T_q // block_q) * -(-T_k // block_k),
        reduce_limit=row_rule(T_k=T_k, block_k=block_k, D=D) if forward else
        row_rule(T_k=T_k, block_k=block_k, D=D, T_q=T_q, block_q=block_q))


def check_flash_forward(fn, *, T_q: int, T_k: int | None = None, B: int = 1, H: int = 2, D: int = 8,
                        causal: bool = False, block_q: int = 16, block_k: int = 16, scale: float | None = None,
                        dtype=torch.float64, seed: int = 0, growing: bool = False, regime: str | None = None,
                        name: str = "flash_attention_forward"):
    """Check ``fn(q, k, v, causal, block_q, block_k[, scale]) -> (o, lse)`` against ``naive_attention``.

    Inputs are float64 by default (tolerance 1e-10). ``growing=True`` makes every score row grow
    along the keys (see :func:`growing_scores`); ``regime`` imposes one of :data:`REGIMES`
    (see :func:`shift_scores`). ``scale`` is passed only when given, so the default ``D ** -0.5``
    is exercised too. The call runs under a :class:`~attnlab.checking.probe.MethodProbe`: no fused attention
    operator, and no intermediate as large as one head's T_q x T_k score matrix (when this case's
    tiles, inputs and outputs are all smaller than that).

    Contract: ``attnlab.contracts.flash_attention_forward``.
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = seeded_qkv(B, H, T_q, T_k, D, seed=seed, dtype=dtype)
    eff_scale = D ** -0.5 if scale is None else scale
    if growing:
        growing_scores(q, k, eff_scale)
    if regime:
        shape_scores(q, k, eff_scale, regime, block_k)
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        case["scale"] = scale
    if growing:
        case["growing_scores"] = True
    if regime:
        case["scores"] = regime
    kwargs = dict(causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        kwargs["scale"] = scale
    args = (q.clone(), k.clone(), v.clone())
    probe = _tile_probe(where=f"{name} [{case}]", notebook="02", B=B, H=H, T_q=T_q, T_k=T_k, D=D,
                        block_q=block_q, block_k=block_k, inputs=args)
    o, lse = _pair(call_learner(fn, name, *args, _probe=probe, **kwargs), name, ("o", "lse"))
    o_ref, lse_ref = naive_attention(q, k, v, causal=causal, scale=scale)
    diagnosed(lambda: assert_close(o, o_ref, name="o", case=case),
              lambda: causal and causal_alignment_hint(o, q, k, v, scale=scale, tol=tolerance(dtype)),
              lambda: zero_max_hint(o, q, k, v, causal=causal, scale=scale))
    if o.dtype != dtype:
        raise AssertionError(f"o [{case}]: dtype {o.dtype}, expected q's dtype {dtype}. Accumulate in a wider "
                             f"dtype if you like, but cast o back.")
    assert_shape(lse, lse_ref.shape, name="lse", case=case)
    assert_dtype_at_least(lse, lse_dtype(dtype), name="lse", case=case)
    assert_close(lse, lse_ref, name="lse (natural-log logsumexp of each score row)", case=case)


# ---------------------------------------------------------------------------------------------- 03
def check_flash_backward(fn, *, T_q: int, T_k: int | None = None, B: int = 1, H: int = 2, D: int = 8,
                         causal: bool = False, block_q: int = 16, block_k: int = 16,
                         scale: float | None = None, dtype=torch.float64, seed: int = 0, regime: str | None = None,
                         name: str = "flash_attention_backward"):
    """Check ``fn(q, k, v, o, lse, do, causal, block_q, block_k[, scale]) -> (dq, dk, dv)``.

    o and lse come from the package's ``naive_attention`` (not from the learner's forward); the
    expected gradients from autograd through it in float64 (:func:`attnlab.reference.reference_gradients`).
    Inputs are float64 by default (tolerance 1e-10); with ``dtype=torch.float32`` the inputs, o and
    do are float32, the LSE float32, and the tolerance 1e-5. The gradients must come back in q's dtype.
    ``scale`` is passed only when given, so the default ``D ** -0.5`` is exercised too; ``regime``
    imposes one of :data:`REGIMES` on the scores. The call runs under a
    :class:`~attnlab.checking.probe.MethodProbe`: no autograd backward, no fused attention operator, no
    intermediate as large as one head's score matrix (when the case can tell).

    Contract: ``attnlab.contracts.flash_attention_backward``.
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = seeded_qkv(B, H, T_q, T_k, D, seed=seed, dtype=dtype)
    if regime:
        shape_scores(q, k, D ** -0.5 if scale is None else scale, regime, block_k)
    do = randn(B, H, T_q, D, seed=seed + 3, dtype=dtype)
    o, lse = naive_attention(q, k, v, causal=causal, scale=scale)
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        case["scale"] = scale
    if dtype != torch.float64:
        case["dtype"] = str(dtype).replace("torch.", "")
    if regime:
        case["scores"] = regime
    kwargs = dict(causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        kwargs["scale"] = scale
    args = tuple(t.clone() for t in (q, k, v, o, lse, do))
    probe = _tile_probe(where=f"{name} [{case}]", notebook="03", B=B, H=H, T_q=T_q, T_k=T_k, D=D,
                        block_q=block_q, block_k=block_k, inputs=args, autograd="forbid")
    grads = _pair(call_learner(fn, name, *args, _probe=probe, **kwargs), name, ("dq", "dk", "dv"))
    for gname, got, ref in zip(("dq", "dk", "dv"), grads, reference_gradients(q, k, v, do, causal, scale)):
        diagnosed(lambda: assert_close(got, ref, name=gname, case=case, tol=tolerance(dtype)),
                  lambda: delta_hint(gname, got, q, k, v, do, causal=causal, scale=scale, block_k=block_k,
                                     tol=tolerance(dtype)))
        if got.dtype != dtype:
            raise AssertionError(f"{gname} [{case}]: dtype {got.dtype}, expected q's dtype {dtype}. "
                                 f"Compute in a wider dtype if you like, but cast the result back.")


def check_autograd_attention(attn, *, T_q: int, T_k: int | None = None, B: int = 1, H: int = 2, D: int = 8,
                             causal: bool = False, seed: int = 0, block: int = 16, name: str = "attention"):
    """Check ``attn(q, k, v, causal) -> o`` end to end: o, and q/k/v .grad after ``o.backward(do)``.

    The backward runs under a :class:`~attnlab.checking.probe.MethodProbe` (autograd's own nodes refused,
    no score-sized intermediate for tiles of ``block``, the default block size of ``attn``). The
    references are computed after the calls, from copies taken before, so nothing the learner's
    code does (to the inputs, or by reading this function's frame) can reach them.
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = (t.requires_grad_(True) for t in seeded_qkv(B, H, T_q, T_k, D, seed=seed))
    do = randn(B, H, T_q, D, seed=seed + 3)
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal)
    copies = tuple(t.detach().clone() for t in (q, k, v, do))
    o = call_learner(attn, name, q, k, v, causal)
    probe = _tile_probe(where=f"{name} backward [{case}]", notebook="03", B=B, H=H, T_q=T_q, T_k=T_k, D=D,
                        block_q=block, block_k=block, inputs=(q, k, v, do), autograd="own_node")
    call_learner(o.backward, f"{name} backward", do, _probe=probe)
    o_ref, _ = naive_attention(*copies[:3], causal=causal)
    assert_close(o, o_ref, name="o", case=case)
    for gname, t, ref in zip(("q.grad", "k.grad", "v.grad"), (q, k, v), reference_gradients(*copies, causal)):
        if t.grad is None:
            raise AssertionError(f"{gname} [{case}]: no gradient reached this input")
        diagnosed(lambda: assert_close(t.grad, ref, name=gname, case=case),
                  lambda: delta_hint("d" + gname[0], t.grad, *copies,
                                     causal=causal, scale=None, block_k=block, tol=tolerance(torch.float64)))


def check_attention_gradcheck(attn, *, T_q: int = 5, T_k: int | None = None, B: int = 1, H: int = 1, D: int = 3,
                              causal: bool = False, block_q: int | None = None, block_k: int | None = None,
                              seed: int = 0, name: str = "attention"):
    """``torch.autograd.gradcheck`` of ``attn(q, k, v, causal[, block_q=, block_k=]) -> o`` on a tiny float64 case.

    gradcheck compares the Jacobian the backward implies (one backward call per output element)
    with central finite differences of the forward, so keep the sizes tiny. Block sizes are passed
    only when given, so that small tiles can be exercised on a tiny input.
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = (t.requires_grad_(True) for t in seeded_qkv(B, H, T_q, T_k, D, seed=seed))
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal)
    kwargs = {}
    for key, val in (("block_q", block_q), ("block_k", block_k)):
        if val is not None:
            kwargs[key] = case[key] = val

    probe = _tile_probe(where=f"gradcheck of {name} [{case}]", notebook="03", B=B, H=H, T_q=T_q, T_k=T_k, D=D,
                        block_q=block_q or 16, block_k=block_k or 16, inputs=(q, k, v), autograd="own_node")

    runs = []

    def watch_first(grads):
        # only the first backward: gradcheck runs the (given) forward and the same backward dozens
        # of times, and a dispatch mode costs ~25 us per operator wherever it is active
        if not runs:
            runs.append(True)
            probe.attach()

    def fn(q_, k_, v_):
        o = attn(q_, k_, v_, causal, **kwargs)
        node = o.grad_fn if isinstance(o, torch.Tensor) else None
        if node is not None:
            node.register_prehook(watch_first)
            node.register_hook(lambda grads_in, grads_out: probe.detach())
        return o

    try:
        call_learner(torch.autograd.gradcheck, f"gradcheck of {name}", fn, (q, k, v), _hooked=probe)
    except GradcheckError as exc:
        first = str(exc).strip().splitlines()[0].rstrip(",. ") if str(exc).strip() else "gradcheck failed"
        for i, input_name in enumerate(("q", "k", "v")):
            first = first.replace(f"with respect to input {i}", f"with respect to {input_name}")
        raise AssertionError(f"gradcheck of {name} [{case}]: {first}. The gradient your backward returns "
                             f"disagrees with finite differences of the forward.") from None

"""One checker per graded function: build seeded inputs, call the learner's code, compare with the reference.

Test cells choose the cases (sizes, block sizes, causal or not); these functions do the rest, the
same way for the visible and the hidden tests. Every reference comes from this package
(:mod:`attnlab.reference`), never from a notebook cell a learner can edit.
"""
# Length: Long because it holds notebooks 01-05's checkers; the kernel-check steps shared with
# verify_backward and verify_decode are to become one skeleton in checking/ (issue 32).

from __future__ import annotations

import contextlib
from types import MappingProxyType

import torch
from torch.autograd.gradcheck import GradcheckError

from .checking import integrity
from . import kernel_source, launch
from .core import review
from .checks import (Case, assert_close, assert_dtype_at_least, assert_shape, call_limit_s, randn, time_limit,
                     tolerance)
from .core.device import require_interpreter, runtime
from .grading.kernel import guard as _guard
from .checking.hints import causal_alignment_hint, delta_hint, diagnosed, log2e_hint, padding_zero_hint, row_stride_hint, head_offset_hint, unmasked_keys_hint, zero_max_hint
from .checking.loads import available as loads_available
from .checking.loads import check_flash_reads, check_races, check_softmax_reads, interpreter_internals, record
from .core.review import flag as _flag
from .checking.poisoned import GUARD, guarded, with_tail
from .checking.probe import MethodProbe, reduce_rule, row_rule, tile_rule
from .reference import lse_dtype, naive_attention, reference_gradients
from .checking.work_models import check_work, flash_forward_model, softmax_model

__all__ = [
    "check_online_softmax", "check_flash_forward", "check_flash_backward", "check_autograd_attention",
    "check_attention_gradcheck",
    "check_softmax_kernel", "check_flash_kernel", "call_limit_s", "shape_scores", "shift_scores",
    "check_flash_kernel_large_offsets",
]

#: Learner functions that already ran out of time: later checks fail at once instead of waiting again.
_HUNG: dict[int, object] = {}


def call_learner(fn, what: str, *args, _key=None, _probe: MethodProbe | None = None, _hooked: MethodProbe | None = None,
          **kwargs):
    """Call learner code under :func:`call_limit_s`, then undo global changes it made.

    ``_key`` is the learner's object when ``fn`` is a course launcher around it (a kernel): a
    timeout marks that object as hung, so later checks of it fail at once, and checks of another
    kernel still run. Gradient mode and the default dtype are put back as they were; while
    autograding, the grader's guard (:mod:`attnlab.grading.kernel.guard`) also restores the references and
    helpers the checks use, so the comparison that follows uses the course's code, not a replacement.

    Before and after the call, :func:`attnlab.checking.integrity.check` refuses to go on while torch's
    operators are altered (a ``torch.library`` kernel, an active mode), and before it :func:`_triton_intact`
    refuses to go on while Triton's own code holds a notebook's (kernels themselves are launched rebuilt
    from their source: :mod:`attnlab.kernel_source`). With ``_probe`` (a
    :class:`attnlab.checking.probe.MethodProbe`) the call runs under it, and a broken method rule fails the
    check after the call; a result the probe never saw being computed is flagged for review.
    ``_hooked`` is a probe that ``fn`` attaches and detaches itself (around one autograd node):
    it is detached here if the call left it attached, then judged like ``_probe``.
    """
    key = fn if _key is None else _key
    if id(key) in _HUNG:
        raise TimeoutError(f"{what} is not run again: it already timed out in an earlier check")
    integrity.check(what)
    _triton_intact(what)
    if _probe is not None and not _probe.decides:
        _probe = None
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    tampered: list[str] = []
    try:
        # launch.checking(): launchers poison outputs and check values, as a comparison needs
        with time_limit(call_limit_s(), what), kernel_source.checking(), launch.checking():
            if _probe is None:
                result = fn(*args, **kwargs)
            else:
                depth = torch._C._len_torch_dispatch_stack()
                with _probe:
                    result = fn(*args, **kwargs)
                    if torch._C._len_torch_dispatch_stack() != depth + 1:
                        tampered.append("the dispatch mode stack was changed during the call")
    except TimeoutError:
        _HUNG[id(key)] = key
        raise
    finally:
        if _hooked is not None:
            _hooked.detach()  # the learner's backward raised before the node's post-hook ran
        tampered += integrity.problems()  # before the guard, which silently pops modes left active
        _guard.after_call()  # first of the repairs: it reports what the call changed
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
    if tampered:
        integrity.check(what)  # flags and raises with its own message while the change persists
        review.flag(f"torch was tampered with while checking {what}: {'; '.join(tampered)}")
        raise AssertionError(f"{what}: {'; '.join(tampered)}. The checks cannot trust a result computed "
                             f"while torch's dispatch is altered.")
    _probe = _probe or _hooked
    if _probe is None:
        return result
    _probe.verdict()
    if _probe.unseen(result):
        review.flag(f"{what}: returned tensors of shapes {_probe.unseen(result)} that no torch operation "
                    f"made while it ran, or made from or overwritten with data from elsewhere (NumPy, another "
                    f"thread, dispatch switched off?): the method could not be checked")
    return result


def _triton_intact(what: str) -> None:
    """Refuse to launch anything while Triton's own code is altered: a function a notebook put into Triton's
    language, runtime or compiler runs while the kernel is launched, compiled or interpreted
    (:func:`attnlab.kernel_source.triton_patches`); reported for review too."""
    patched = kernel_source.triton_patches()
    if patched:
        more = f" and {len(patched) - 1} more" if len(patched) > 1 else ""
        review.flag(f"{what}: Triton's code had been replaced ({patched[0]}{more})")
        raise AssertionError(f"{what}: Triton's own code was replaced by code from the notebook ({patched[0]}{more}). "
                             f"Triton runs it while a kernel is launched, so nothing can be graded while it is there: "
                             f"remove the assignment to Triton's attributes and run the notebook again.")


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
def _qkv(B, H, T_q, T_k, D, *, seed, dtype=torch.float64, device="cpu"):
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
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = _qkv(B, H, T_q, T_k, D, seed=seed, dtype=dtype)
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
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = _qkv(B, H, T_q, T_k, D, seed=seed, dtype=dtype)
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
    q, k, v = (t.requires_grad_(True) for t in _qkv(B, H, T_q, T_k, D, seed=seed))
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
    q, k, v = (t.requires_grad_(True) for t in _qkv(B, H, T_q, T_k, D, seed=seed))
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


# ---------------------------------------------------------------------------------------------- 04
_PEAKS = ("first", "middle", "last")


#: Score (or, for 04, input) elements of the largest CPU-sized case. A float32 case up to this size is
#: a CPU-sized case: it runs through Triton's interpreter on the CPU on every machine, a GPU machine
#: included, so its loads are accounted and its result is the one a laptop gets. Larger cases and
#: 16-bit ones are the GPU cases (run on a GPU only). Every CPU-sized case of the notebooks is below
#: 2**16; the smallest float32 GPU case is above 2**20.
CPU_CASE_ELEMENTS = 2 ** 18


def kernel_device(device: str | None, *, dtype, elements: int) -> tuple[str, bool]:
    """The device for a Triton check and whether its loads are accounted (under the interpreter).

    ``device=None`` picks the CPU for a CPU-sized case (float32, at most :data:`CPU_CASE_ELEMENTS`
    ``elements``) and on a machine without a GPU, the GPU otherwise. A case on the CPU runs through
    Triton's interpreter, on a GPU machine too (:func:`attnlab.core.device.interpreted_twin`).

    Raises:
        RuntimeError: interpreter mode is needed but cannot work in this process (see
            :func:`attnlab.core.device.require_interpreter`).
        ValueError: a CUDA device under the interpreter, where the checks account loads on the CPU.
    """
    rt = runtime()
    if device is None:
        small = dtype == torch.float32 and elements <= CPU_CASE_ELEMENTS
        device = "cpu" if rt.interpret or small else rt.device
    if torch.device(device).type != "cpu":
        if rt.interpret:
            raise ValueError(f"device={device!r}: under Triton's interpreter the kernel checks run on the CPU "
                             f"(device='cpu'); GPU cases run on a GPU")
        return device, False
    if rt.interpret:
        require_interpreter()
    if not loads_available():
        _flag("this Triton's interpreter cannot be instrumented, so the loads of the kernel (the method of "
              "notebooks 04, 05 and 08) are not checked; only its results are")
        return device, False
    return device, True


#: Kernels already scanned (and reported if need be): once per kernel, not once per check.
_SCANNED: dict[int, object] = {}


def flag_internals(kernel, what: str, notebook: str) -> None:
    """Report a kernel that mentions Triton's interpreter internals: its loads may bypass the accounting."""
    if _SCANNED.get(id(kernel)) is kernel or not hasattr(kernel, "fn"):
        return
    _SCANNED[id(kernel)] = kernel
    hits = interpreter_internals(kernel)
    if hits:
        _flag(f"{what} refers to Triton's interpreter internals ({', '.join(hits)}): the load accounting of "
              f"notebook {notebook} cannot vouch for how it reads memory")


def _peak_index(peak: str | None, n: int) -> int | None:
    if peak is None:
        return None
    if peak not in _PEAKS:
        raise ValueError(f"peak must be one of {_PEAKS} or None, got {peak!r}")
    return {"first": 0, "middle": n // 2, "last": n - 1}[peak]


def check_softmax_kernel(kernel, *, n_rows: int, n_cols: int, dtype=torch.float32, offset: float = 0.0,
                         padded: bool = False, peak: str | None = None, seed: int = 0, device: str | None = None):
    """Check a ``_softmax_kernel`` through the course launcher against ``torch.softmax`` in float64.

    The kernel is launched as ``triton_softmax`` launches it (grid (n_rows,), BLOCK_SIZE the next
    power of two of n_cols), on views into larger buffers: after the last row there is room for
    one whole block, so an unmasked load or store stays inside memory the check owns. Every output
    element the kernel must not write holds a guard value; changing one fails the check.

    Under Triton's interpreter the check also records every access in the work ledger, atomics as
    reads (:func:`attnlab.checking.loads.check_softmax_reads`, then the cost model
    :func:`attnlab.checking.work_models.softmax_model`): program i must read row i only, each column once,
    nothing past it, and write only the output (notebook 04's method: one program per row, one read
    of the row).

    Args:
        n_rows, n_cols: input shape; n_cols need not be a power of two.
        dtype: float32, float16, or bfloat16 (GPU only: the launcher refuses it under the interpreter).
        offset: added to every input (+1000 overflows exp unless the max is subtracted; a negative
            offset makes every value of the row negative, so a padding of 0 would win the max).
        padded: give input and output rows a stride larger than n_cols; the input's padding holds
            large values a kernel must not read, the output's a guard value it must not overwrite.
        peak: ``"first"``, ``"middle"`` or ``"last"``: put each row's maximum in that column.
        device: by default the CPU (through the interpreter, loads accounted) for a CPU-sized case on
            every machine, the GPU for a larger or 16-bit one (:func:`kernel_device`).

    Raises:
        AssertionError: a wrong value, a write outside the output, or a load the method forbids;
            the message names the case, the program and the rule.
    """
    import triton

    device, accounted = kernel_device(device, dtype=dtype, elements=n_rows * n_cols)
    case = Case(n_rows=n_rows, n_cols=n_cols, dtype=str(dtype).replace("torch.", ""), offset=offset,
                padded=padded)
    x64 = randn(n_rows, n_cols, seed=seed) * 3.0
    col = _peak_index(peak, n_cols)
    if col is not None:
        x64[:, col] = x64.max() + 4.0
        case["peak"] = peak
    x64 += offset
    x = x64.to(device=device, dtype=dtype)
    expected = torch.softmax(x.to(torch.float64), dim=-1).cpu()
    # padded: rows of input and output are further apart than n_cols, by different amounts, so a
    # kernel must use each row stride where it belongs
    block = triton.next_power_of_2(n_cols)
    x_width, width = (n_cols + 7, n_cols + 3) if padded else (n_cols, n_cols)
    size = n_rows * width + block
    x_buf = torch.full((n_rows * x_width + block,), 1e4, dtype=dtype, device=device)
    x_in = x_buf[:n_rows * x_width].view(n_rows, x_width)[:, :n_cols]
    x_in.copy_(x)
    y_buf = torch.full((size,), GUARD, dtype=dtype, device=device)
    y = y_buf[:n_rows * width].view(n_rows, width)[:, :n_cols]
    y.fill_(float("nan"))
    with record({"input": x_buf, "output": y_buf}) if accounted else contextlib.nullcontext() as ledger:
        call_learner(launch.run_softmax_kernel, "_softmax_kernel", kernel, x_in, y, _key=kernel)
    if device == "cuda":
        torch.cuda.synchronize()
    outside = torch.ones(size, dtype=torch.bool, device=device)
    outside[:n_rows * width].view(n_rows, width)[:, :n_cols] = False
    touched = (y_buf != GUARD) & outside
    if touched.any():
        pos = int(touched.nonzero()[0])
        row, col = divmod(pos, width)
        where = (f"past the last row (element {pos - n_rows * width} after it)" if row >= n_rows
                 else f"in row {row}, column {col} >= n_cols")
        advice = (row_stride_hint(touched.nonzero().flatten().cpu(), n_rows=n_rows, n_cols=n_cols,
                                  strides={"output_row_stride": width, "n_cols": n_cols,
                                           "input_row_stride": x_width})
                  or "Mask the store with the columns < n_cols, and step rows by output_row_stride.")
        raise AssertionError(f"_softmax_kernel [{case}]: wrote outside the output, {where}. {advice}")
    if ledger is not None:
        flag_internals(kernel, "_softmax_kernel", "04")
        where = f"_softmax_kernel [{case}]"
        check_softmax_reads(ledger, n_rows=n_rows, n_cols=n_cols, x_width=x_width, y_width=width,
                            block_size=block, where=where)
        check_races(ledger, where=where, dims=1)
    # no dot product here, so no tf32: float32 is held to 1e-5 on a GPU too
    tol = 1e-5 if dtype == torch.float32 else tolerance(dtype, device)
    diagnosed(lambda: assert_close(y.cpu(), expected, name="softmax", case=case, tol=tol),
              lambda: padding_zero_hint(y.cpu(), x, block, tol))
    if ledger is not None:  # after the numbers: see check_flash_kernel
        check_work(ledger, softmax_model(n_rows=n_rows, n_cols=n_cols, x_width=x_width, block=block,
                                         x_len=x_buf.numel()), where=f"_softmax_kernel [{case}]")


# ---------------------------------------------------------------------------------------------- 05
def shift_scores(q: torch.Tensor, k: torch.Tensor, scale: float, *, offset: float = 0.0,
                 peak_key: int | None = None, bump: float = 8.0) -> None:
    """Shift every score by ``offset`` and raise the scores of key ``peak_key`` by ``bump`` (in place).

    q[..., 0] is set to 1 and k[..., 0] to ``offset / scale`` (plus ``bump / scale`` at the peak
    key), so score (i, j) = offset (+ bump) + the rest of the dot product. A constant shift leaves
    O unchanged and moves the LSE by ``offset``: at offset -1000 every exp underflows unless the
    running max starts at -inf and is subtracted (a max started at 0 gives 0/0).
    """
    q[..., 0] = 1.0
    k[..., 0] = offset / scale
    if peak_key is not None:
        k[..., peak_key, 0] += bump / scale


def _one_head_stays_inside(kernel, inputs, *, causal, block_m, block_n) -> bool:
    """``kernel`` on the first head of ``inputs`` (q, k, v) alone stores nothing past its last row of O
    and LSE (for :func:`attnlab.checking.hints.head_offset_hint`)."""
    D, T = inputs[0].shape[-1], inputs[0].shape[2]
    q, k, v = (with_tail(t[:1, :1], max(block_m, block_n) * D)[0] for t in inputs)
    o, o_buf = guarded(q.shape, block_m * D, q.dtype, q.device)
    lse, lse_buf = guarded(q.shape[:3], block_m, torch.float32, q.device)
    call_learner(launch.run_flash_kernel, "_flash_fwd_kernel", kernel, q, k, v, o, lse, causal=causal, block_m=block_m,
          block_n=block_n, _key=kernel)
    return bool((o_buf[T * D:] == GUARD).all()) and bool((lse_buf[T:] == GUARD).all())


def check_flash_kernel(kernel, *, T: int, B: int = 1, H: int = 2, D: int = 32, causal: bool = False,
                       block_m: int = 16, block_n: int = 16, dtype=torch.float32, seed: int = 0,
                       growing: bool = False, offset: float = 0.0, peak: str | None = None,
                       num_warps: int = 4, num_stages: int = 2, device: str | None = None):
    """Check a ``_flash_fwd_kernel`` through the course launcher against ``naive_attention`` in float64.

    The outputs are NaN-poisoned and followed in memory by guard values: a row the kernel forgets
    to write stays NaN, and a store past the last row (padded rows beyond T) changes a guard.
    The inputs too are followed by one tile of NaN: a kernel that reads K or V past the last key
    without a mask gets NaN in its output (0 * NaN is NaN), as it may get garbage on a GPU.
    Under Triton's interpreter every access is recorded in the work ledger, atomics as reads
    (:func:`attnlab.checking.loads.check_flash_reads`, then :func:`attnlab.checking.work_models.flash_forward_model`):
    K and V in tiles of at most ``block_n`` keys, each key once per program, no causal tile past
    the diagonal, QKᵀ and PV through ``tl.dot``, no race.

    Args:
        growing: every score row grows along the keys (:func:`growing_scores`).
        offset: every score shifted by this (:func:`shift_scores`; -1000: all scores very negative).
        peak: ``"first"``, ``"middle"`` or ``"last"``: one key of that part of the sequence scores 8
            above the others in every row that sees it (the row max sits in that key tile).
        dtype: float32, float16, or bfloat16 (GPU only: the launcher refuses it under the interpreter).

    Tolerance: 1e-5 for float32 on the CPU, 2e-3 on a GPU (tf32), 5e-3 float16, 2e-2 bfloat16;
    with an offset, 1e-4 at least (float32 scores near 1000 carry absolute rounding near 1e-4).
    """
    device, accounted = kernel_device(device, dtype=dtype, elements=B * H * T * T)
    case = Case(B=B, H=H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n,
                dtype=str(dtype).replace("torch.", ""))
    q, k, v = _qkv(B, H, T, T, D, seed=seed)
    if growing:
        growing_scores(q, k, D ** -0.5)
        case["growing_scores"] = True
    peak_key = _peak_index(peak, T)
    if offset or peak_key is not None:
        shift_scores(q, k, D ** -0.5, offset=offset, peak_key=peak_key)
        case.update({key: val for key, val in (("score_offset", offset), ("peak", peak)) if val})
    (q, q_buf), (k, k_buf), (v, v_buf) = (with_tail(t.to(device=device, dtype=dtype), max(block_m, block_n) * D)
                                          for t in (q, k, v))
    # the reference comes from copies taken before the launch, so a kernel that writes into its
    # inputs cannot move the target it is compared with
    inputs = tuple(t.clone() for t in (q, k, v))
    # float64 on the kernel's device: at GPU sizes a one-thread CPU reference took longer than the kernel's
    # compiles (notes/gpu/2026-12-01/grading-3); the results come back to the CPU for the comparisons
    o_ref, lse_ref = (t.cpu() for t in naive_attention(*(t.to(torch.float64) for t in inputs), causal=causal))
    launch.validate_flash(q, k, v, block_m, block_n)
    guard = block_m * D  # room for every row of one padded tile
    n = B * H * T * D
    o_buf = torch.full((n + guard,), GUARD, dtype=dtype, device=device)
    o_buf[:n] = float("nan")
    lse_buf = torch.full((B * H * T + block_m,), GUARD, dtype=torch.float32, device=device)
    lse_buf[:B * H * T] = float("nan")
    o, lse = o_buf[:n].view(B, H, T, D), lse_buf[:B * H * T].view(B, H, T)
    buffers = {"Q": q_buf, "K": k_buf, "V": v_buf, "O": o_buf, "LSE": lse_buf}
    with record(buffers) if accounted else contextlib.nullcontext() as ledger:
        call_learner(launch.run_flash_kernel, "_flash_fwd_kernel", kernel, q, k, v, o, lse, causal=causal,
              block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages, _key=kernel)
    if device == "cuda":
        torch.cuda.synchronize()
    if (o_buf[n:] != GUARD).any() or (lse_buf[B * H * T:] != GUARD).any():
        why = head_offset_hint(B * H, lambda: _one_head_stays_inside(kernel, inputs, causal=causal, block_m=block_m,
                                                                    block_n=block_n))
        raise AssertionError(f"_flash_fwd_kernel [{case}]: wrote past the last row of O or LSE: "
                             f"{why or 'padded rows (offs_m >= T) must be masked out of the stores'}")
    for name_, before, after in zip("qkv", inputs, (q, k, v)):
        if not torch.equal(before.nan_to_num(), after.nan_to_num()):
            raise AssertionError(f"_flash_fwd_kernel [{case}]: wrote into its input {name_.upper()}: "
                                 f"a kernel may only store to O and LSE")
    if ledger is not None:
        flag_internals(kernel, "_flash_fwd_kernel", "05")
        where = f"_flash_fwd_kernel [{case}]"
        check_flash_reads(ledger, BH=B * H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n,
                          where=where)
        check_races(ledger, where=where)
    tol = tolerance(dtype, device)
    if growing and dtype == torch.float32 and device == "cuda":
        # tf32 rounds the scores to ~2^-11 relative; at scores near 50 that is a few percent of
        # each probability. A missing rescale is off by O(1), so this still catches it.
        tol = 5e-2
    if offset:
        tol = max(tol, 1e-4)
    diagnosed(lambda: assert_close(o.cpu(), o_ref.cpu(), name="O", case=case, tol=tol),
              lambda: log2e_hint(o.cpu(), *inputs, causal=causal, tol=tol),
              lambda: unmasked_keys_hint(o.cpu(), *inputs, causal=causal, block_n=block_n, tol=max(tol, 1e-5)),
              lambda: zero_max_hint(o.cpu(), *inputs, causal=causal, scale=None))
    assert_close(lse.cpu(), lse_ref.cpu(), name="LSE (natural log)", case=case, tol=max(tol, 1e-5))
    if ledger is not None:
        # after the numbers: a wrong result's diagnosis (e.g. m started at 0, where every exp underflows and
        # the products change nothing) names the bug better than "products never stored" would
        check_work(ledger, flash_forward_model(B=B, H=H, T=T, D=D, causal=causal, block_m=block_m,
                                               block_n=block_n, buffer_len=k_buf.numel()),
                   where=f"_flash_fwd_kernel [{case}]")


def check_flash_kernel_large_offsets(kernel, *, D: int = 16, block_m: int = 16, block_n: int = 16, seed: int = 0):
    """Check a ``_flash_fwd_kernel`` where ``bh * stride_bh`` passes 2³¹ elements.

    Three heads of T = 2³⁰ / D rows each, so stride_bh = T·D = 2³⁰ and head 2 starts at 2³¹: computed in
    32 bits its offset wraps around. Causal, and only the first query tile of every head is launched
    (grid (1, 3)): it needs the keys of that tile only, so only those rows exist (:mod:`attnlab.checking.sparse`).
    Runs on the CPU through Triton's interpreter on every machine, under the load accounting, which
    switches off every lane outside those rows (a wrapped offset reads nothing instead of crashing).
    Where the memory cannot be placed (not Linux) it prints why and checks nothing.

    Raises:
        AssertionError: O or LSE of the launched rows wrong; when the heads below 2³¹ are right and the
            one past it is wrong, saying to widen ``bh`` to 64 bits.
    """
    from .checking import sparse
    from .checking.hints import int32_offset_hint

    heads, T, rows = 3, 2**30 // D, max(block_m, block_n)
    try:
        t, mem = sparse.far_heads(("Q", "K", "V", "O"), heads=heads, T=T, D=D, rows=rows, spare=rows * D)
        (lse,), lse_mem = (lambda d, m: (tuple(d.values()), m))(
            *sparse.far_heads(("LSE",), heads=heads, T=T, D=None, rows=rows, spare=rows))
    except OSError as exc:
        print(f"(the large-offset case of _flash_fwd_kernel is skipped here: {exc})")
        return
    small = [randn(heads, 1, rows, D, seed=seed + i).to(torch.float32) for i in range(3)]
    for name, x in zip("QKV", small):  # only the pieces are written
        t[name][:, :, :rows] = x
    o_ref, lse_ref = naive_attention(*(x.double() for x in small), causal=True)
    case = Case(B=heads, H=1, T=T, D=D, causal=True, block_m=block_m, block_n=block_n, stride_bh=T * D,
                launched="the first query tile of each head")
    buffers = {f"rows of head {h}": p for h, p in enumerate(mem.pieces)}
    buffers.update({f"LSE of head {h}": p for h, p in enumerate(lse_mem.pieces)})

    def run():
        runnable = launch.prepare_kernel(kernel, "_flash_fwd_kernel", {"q": t["Q"], "k": t["K"], "v": t["V"],
                                                                       "o": t["O"]}, "_flash_fwd_kernel")
        runnable[(1, heads)](t["Q"], t["K"], t["V"], t["O"], lse, T * D, D, T, D ** -0.5, CAUSAL=True,
                             BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=D)

    with record(buffers):
        call_learner(run, "_flash_fwd_kernel", _key=kernel)
    o, got_lse = t["O"][:, :, :block_m].clone(), lse[:, :, :block_m].clone()
    far = [(h + 1) * T * D > 2**31 for h in range(heads)]

    def wraps(got, want):
        return lambda: int32_offset_hint(got, want, 1e-5, far=far, what="bh * stride_bh",
                                         fix="bh = tl.program_id(1).to(tl.int64)")

    diagnosed(lambda: assert_close(o, o_ref[:, :, :block_m], name="O", case=case, tol=1e-5),
              wraps(o, o_ref[:, :, :block_m]))
    diagnosed(lambda: assert_close(got_lse, lse_ref[:, :, :block_m], name="LSE (natural log)", case=case, tol=1e-5),
              wraps(got_lse, lse_ref[:, :, :block_m]))

"""One checker per graded function: build seeded inputs, call the learner's code, compare with the reference.

Test cells choose the cases (sizes, block sizes, causal or not); these functions do the rest, the
same way for the visible and the hidden tests. Every reference comes from this package
(:mod:`attnlab.reference`), never from a notebook cell a learner can edit.
"""

from __future__ import annotations

import torch

import os

from . import launch
from .checks import (Case, assert_close, assert_dtype_at_least, assert_shape, randn, time_limit,
                     tolerance)
from .device import runtime
from .grading import guard as _guard
from .reference import lse_dtype, naive_attention, reference_gradients

__all__ = [
    "check_online_softmax", "check_flash_forward", "check_flash_backward", "check_autograd_attention",
    "check_softmax_kernel", "check_flash_kernel", "call_limit_s",
]

#: Learner functions that already ran out of time: later checks fail at once instead of waiting again.
_HUNG: dict[int, object] = {}


#: Overrides :func:`call_limit_s` (seconds); the course's tests set it low to grade hangs quickly.
CALL_LIMIT_ENV = "ATTNLAB_CALL_LIMIT_S"


def call_limit_s() -> float:
    """Seconds one call of learner code may take: 20 on the CPU; 120 on a GPU, where Triton compiles
    (``ATTNLAB_CALL_LIMIT_S`` overrides both)."""
    override = os.environ.get(CALL_LIMIT_ENV)
    if override:
        return float(override)
    return 20.0 if runtime().interpret else 120.0


def _call(fn, what: str, *args, _key=None, **kwargs):
    """Call learner code under :func:`call_limit_s`, then undo global changes it made.

    ``_key`` is the learner's object when ``fn`` is a course launcher around it (a kernel): a
    timeout marks that object as hung, so later checks of it fail at once, and checks of another
    kernel still run. Gradient mode and the default dtype are put back as they were; while
    autograding, the grader's guard (:mod:`attnlab.grading.guard`) also restores the references and
    helpers the checks use, so the comparison that follows uses the course's code, not a replacement.
    """
    key = fn if _key is None else _key
    if id(key) in _HUNG:
        raise TimeoutError(f"{what} is not run again: it already timed out in an earlier check")
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        with time_limit(call_limit_s(), what):
            return fn(*args, **kwargs)
    except TimeoutError:
        _HUNG[id(key)] = key
        raise
    finally:
        _guard.after_call()  # first: it reports what the call changed
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)


def _pair(out, what: str, names: tuple[str, ...]):
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        raise AssertionError(f"{what} must return a tuple ({', '.join(names)}), got {got}")
    return out


def growing_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> None:
    """Make every score row grow along the keys (in place), so each new key tile raises the max.

    With q[..., 0] >= 1 and k[..., j, 0] += j / (2 * scale), score (i, j) grows by at least 0.5 per
    key: an implementation that forgets to rescale acc or l is wrong on every row.
    """
    q[..., 0] = q[..., 0].abs() + 1.0
    ramp = torch.arange(k.shape[2], dtype=k.dtype, device=k.device) / (2.0 * scale)
    k[..., 0] += ramp


# ---------------------------------------------------------------------------------------------- 01
def check_online_softmax(fn, *, block_size: int, shape=(4, 50), seed: int = 0, x: torch.Tensor | None = None,
                         name: str = "online_softmax_stats"):
    """Check ``fn(x, block_size) -> (m, l)``: m is the row max and m + log(l) the logsumexp.

    Args:
        fn: the learner's ``online_softmax_stats``.
        block_size: block length along the last dim.
        shape: shape of the random float64 input (values of spread 5) when ``x`` is not given.
        x: a specific input (e.g. with -inf entries or a max that jumps); compared in its own dtype.

    Raises:
        AssertionError: with the case, the quantity and the first wrong index.
    """
    if x is None:
        x = randn(*shape, seed=seed) * 5.0
    case = Case(shape=tuple(x.shape), block_size=block_size, dtype=str(x.dtype).replace("torch.", ""))
    m, l = _pair(_call(fn, name, x.clone(), block_size), name, ("m", "l"))
    assert_shape(m, x.shape[:-1], name="m", case=case)
    assert_shape(l, x.shape[:-1], name="l", case=case)
    assert_close(m, x.amax(dim=-1), name="m (the running max)", case=case)
    assert_close(m + torch.log(l.to(torch.float64)), torch.logsumexp(x.to(torch.float64), dim=-1),
                 name="m + log(l) (the logsumexp)", case=case, tol=1e-10 if x.dtype == torch.float64 else 1e-5)


# ---------------------------------------------------------------------------------------------- 02
def _qkv(B, H, T_q, T_k, D, *, seed, dtype=torch.float64, device="cpu"):
    q = randn(B, H, T_q, D, seed=seed, dtype=dtype, device=device)
    k = randn(B, H, T_k, D, seed=seed + 1, dtype=dtype, device=device)
    v = randn(B, H, T_k, D, seed=seed + 2, dtype=dtype, device=device)
    return q, k, v


def check_flash_forward(fn, *, T_q: int, T_k: int | None = None, B: int = 1, H: int = 2, D: int = 8,
                        causal: bool = False, block_q: int = 16, block_k: int = 16, scale: float | None = None,
                        dtype=torch.float64, seed: int = 0, growing: bool = False,
                        name: str = "flash_attention_forward"):
    """Check ``fn(q, k, v, causal, block_q, block_k[, scale]) -> (o, lse)`` against ``naive_attention``.

    Inputs are float64 by default (tolerance 1e-10). ``growing=True`` makes every score row grow
    along the keys (see :func:`growing_scores`). ``scale`` is passed only when given, so the default
    ``D ** -0.5`` is exercised too.
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = _qkv(B, H, T_q, T_k, D, seed=seed, dtype=dtype)
    if growing:
        growing_scores(q, k, D ** -0.5 if scale is None else scale)
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        case["scale"] = scale
    if growing:
        case["growing_scores"] = True
    kwargs = dict(causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        kwargs["scale"] = scale
    o, lse = _pair(_call(fn, name, q.clone(), k.clone(), v.clone(), **kwargs), name, ("o", "lse"))
    o_ref, lse_ref = naive_attention(q, k, v, causal=causal, scale=scale)
    assert_close(o, o_ref, name="o", case=case)
    assert_shape(lse, lse_ref.shape, name="lse", case=case)
    assert_dtype_at_least(lse, lse_dtype(dtype), name="lse", case=case)
    assert_close(lse, lse_ref, name="lse (natural-log logsumexp of each score row)", case=case)


# ---------------------------------------------------------------------------------------------- 03
def check_flash_backward(fn, *, T_q: int, T_k: int | None = None, B: int = 1, H: int = 2, D: int = 8,
                         causal: bool = False, block_q: int = 16, block_k: int = 16,
                         scale: float | None = None, seed: int = 0, name: str = "flash_attention_backward"):
    """Check ``fn(q, k, v, o, lse, do, causal, block_q, block_k[, scale]) -> (dq, dk, dv)`` in float64.

    o and lse come from the package's ``naive_attention`` (not from the learner's forward); the
    expected gradients from autograd through it (:func:`attnlab.reference.reference_gradients`).
    """
    T_k = T_q if T_k is None else T_k
    q, k, v = _qkv(B, H, T_q, T_k, D, seed=seed)
    do = randn(B, H, T_q, D, seed=seed + 3)
    o, lse = naive_attention(q, k, v, causal=causal, scale=scale)
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        case["scale"] = scale
    kwargs = dict(causal=causal, block_q=block_q, block_k=block_k)
    if scale is not None:
        kwargs["scale"] = scale
    args = (t.clone() for t in (q, k, v, o, lse, do))
    grads = _pair(_call(fn, name, *args, **kwargs), name, ("dq", "dk", "dv"))
    for gname, got, ref in zip(("dq", "dk", "dv"), grads, reference_gradients(q, k, v, do, causal, scale)):
        assert_close(got, ref, name=gname, case=case)


def check_autograd_attention(attn, *, T_q: int, T_k: int | None = None, B: int = 1, H: int = 2, D: int = 8,
                             causal: bool = False, seed: int = 0, name: str = "attention"):
    """Check ``attn(q, k, v, causal) -> o`` end to end: o, and q/k/v .grad after ``o.backward(do)``."""
    T_k = T_q if T_k is None else T_k
    q, k, v = (t.requires_grad_(True) for t in _qkv(B, H, T_q, T_k, D, seed=seed))
    do = randn(B, H, T_q, D, seed=seed + 3)
    case = Case(B=B, H=H, T_q=T_q, T_k=T_k, D=D, causal=causal)
    o = _call(attn, name, q, k, v, causal)
    o_ref, _ = naive_attention(q.detach(), k.detach(), v.detach(), causal=causal)
    assert_close(o, o_ref, name="o", case=case)
    _call(o.backward, f"{name} backward", do)
    for gname, t, ref in zip(("q.grad", "k.grad", "v.grad"), (q, k, v),
                             reference_gradients(q, k, v, do, causal)):
        if t.grad is None:
            raise AssertionError(f"{gname} [{case}]: no gradient reached this input")
        assert_close(t.grad, ref, name=gname, case=case)


# ---------------------------------------------------------------------------------------------- 04
_GUARD = -4096.0  # exactly representable in every float dtype; written where a kernel must not write


def check_softmax_kernel(kernel, *, n_rows: int, n_cols: int, dtype=torch.float32, offset: float = 0.0,
                         padded: bool = False, seed: int = 0, device: str | None = None):
    """Check a ``_softmax_kernel`` through the course launcher against ``torch.softmax`` in float64.

    Args:
        n_rows, n_cols: input shape; n_cols need not be a power of two.
        offset: added to every input (a large offset overflows exp unless the max is subtracted).
        padded: give input and output rows a stride larger than n_cols; the input's padding holds
            large values a kernel must not read, the output's a guard value it must not overwrite.
        device: defaults to the runtime's (``cuda`` on a GPU, ``cpu`` under the interpreter).
    """
    device = device or runtime().device
    case = Case(n_rows=n_rows, n_cols=n_cols, dtype=str(dtype).replace("torch.", ""), offset=offset,
                padded=padded)
    x64 = randn(n_rows, n_cols, seed=seed) * 3.0 + offset
    x = x64.to(device=device, dtype=dtype)
    expected = torch.softmax(x.to(torch.float64), dim=-1).cpu()
    if padded:
        pad = 7
        x_buf = torch.full((n_rows, n_cols + pad), 1e4, dtype=dtype, device=device)
        x_buf[:, :n_cols] = x
        y_buf = torch.full((n_rows, n_cols + pad), _GUARD, dtype=dtype, device=device)
        y_buf[:, :n_cols] = float("nan")
        _call(launch.run_softmax_kernel, "_softmax_kernel", kernel, x_buf[:, :n_cols], y_buf[:, :n_cols],
              _key=kernel)
        y = y_buf[:, :n_cols]
        touched = (y_buf[:, n_cols:] != _GUARD).any(dim=1)
        if touched.any():
            raise AssertionError(f"_softmax_kernel [{case}]: wrote past the end of row "
                                 f"{int(touched.nonzero()[0])} (columns >= n_cols). Mask the store.")
    else:
        y = _call(launch.launch_softmax, "_softmax_kernel", kernel, x, _key=kernel)
    assert_close(y.cpu(), expected, name="softmax", case=case,
                 tol=max(1e-5, tolerance(dtype, device)))


# ---------------------------------------------------------------------------------------------- 05
def check_flash_kernel(kernel, *, T: int, B: int = 1, H: int = 2, D: int = 32, causal: bool = False,
                       block_m: int = 16, block_n: int = 16, dtype=torch.float32, seed: int = 0,
                       growing: bool = False, num_warps: int = 4, num_stages: int = 2,
                       device: str | None = None):
    """Check a ``_flash_fwd_kernel`` through the course launcher against ``naive_attention`` in float64.

    The outputs are NaN-poisoned and followed in memory by guard values: a row the kernel forgets
    to write stays NaN, and a store past the last row (padded rows beyond T) changes a guard.
    Tolerance: 1e-5 for float32 on the CPU, 2e-3 on a GPU (tf32), 5e-3 float16, 2e-2 bfloat16.
    """
    device = device or runtime().device
    case = Case(B=B, H=H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n,
                dtype=str(dtype).replace("torch.", ""))
    q, k, v = _qkv(B, H, T, T, D, seed=seed)
    if growing:
        growing_scores(q, k, D ** -0.5)
        case["growing_scores"] = True
    q, k, v = (t.to(device=device, dtype=dtype) for t in (q, k, v))
    launch._validate_flash(q, k, v, block_m, block_n)
    guard = block_m * D  # room for every row of one padded tile
    n = B * H * T * D
    o_buf = torch.full((n + guard,), _GUARD, dtype=dtype, device=device)
    o_buf[:n] = float("nan")
    lse_buf = torch.full((B * H * T + block_m,), _GUARD, dtype=torch.float32, device=device)
    lse_buf[:B * H * T] = float("nan")
    o, lse = o_buf[:n].view(B, H, T, D), lse_buf[:B * H * T].view(B, H, T)
    _call(launch.run_flash_kernel, "_flash_fwd_kernel", kernel, q, k, v, o, lse, causal=causal,
          block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages, _key=kernel)
    if device == "cuda":
        torch.cuda.synchronize()
    if (o_buf[n:] != _GUARD).any() or (lse_buf[B * H * T:] != _GUARD).any():
        raise AssertionError(f"_flash_fwd_kernel [{case}]: wrote past the last row of O or LSE: padded "
                             f"rows (offs_m >= T) must be masked out of the stores")
    o_ref, lse_ref = naive_attention(*(t.to(torch.float64) for t in (q, k, v)), causal=causal)
    tol = tolerance(dtype, device)
    assert_close(o.cpu(), o_ref.cpu(), name="O", case=case, tol=tol)
    assert_close(lse.cpu(), lse_ref.cpu(), name="LSE (natural log)", case=case, tol=max(tol, 1e-5))

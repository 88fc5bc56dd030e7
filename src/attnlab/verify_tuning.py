"""Checkers of notebook 09: FP8 (E4M3) scales and quantisation, the shared-memory estimate, and the
config pruning that ``triton.autotune`` calls. All run on plain tensors and lists, on a CPU.

Each draws seeded inputs (never all zeros, but with the regimes a helper must handle: heads whose
largest magnitude is negative, all-zero heads, a ragged last block), calls the learner's function
on copies through :func:`attnlab.verify._call` (time limit, the grader's guard), and compares with
values computed here:

- scale of a group (one head, or ``block_rows`` rows of one head) = max |x| / 448, float32; an
  all-zero group needs any positive finite scale (its values quantise to 0 either way);
- FP8 values = x / scale saturated to ±448, rounded to the nearest E4M3 value: within half a step of
  E4M3 (a relative 2⁻⁴ for normal numbers, 2⁻¹⁰ below 2⁻⁶), so ``x * (1 / scale)`` passes too;
- shared memory of a pointer-load forward program = (BLOCK_M + 2·num_stages·BLOCK_N)·HEAD_DIM·bytes:
  Q once, and ``num_stages`` buffers of K and of V (what triton 3.6 compiled for every config on the
  H200: notes/gpu/2026-11-30/09/smem_check.csv);
- pruning keeps, in order and as the same objects, the configs whose blocks divide T (and BLOCK_N
  divides BLOCK_M when causal) and whose estimate fits the limit; it reads T, HEAD_DIM, CAUSAL and Q
  from ``named_args`` or ``kwargs`` (Triton puts positional launch arguments in the first, keyword
  ones in the second).

Sources: the OCP 8-bit floating point specification (E4M3: 4 exponent bits, 3 mantissa bits, max 448,
no infinities), FlashAttention-3 (Shah et al., 2024, section 3.3: per-block scaling), and
``triton.autotune``'s ``prune_configs_by={"early_config_prune": f}`` contract,
``f(configs, named_args, **kwargs) -> configs`` (triton/runtime/autotuner.py).
"""

from __future__ import annotations

import math

import torch

from .checks import Case, assert_shape, randn
from .probe import MethodProbe
from .verify import _call

__all__ = ["E4M3_MAX", "check_fp8_scales", "check_quantize_fp8", "check_smem_estimate", "check_prune_configs",
           "expected_smem", "expected_scales"]

E4M3_MAX = 448.0
_FP8 = torch.float8_e4m3fn


def expected_scales(x: torch.Tensor, block_rows=None) -> torch.Tensor:
    """max |x| / 448 per head (B, H), or per block of ``block_rows`` rows (B, H, ceil(T / block_rows)),
    in float64; 0 for an all-zero group (the checks accept any positive scale there)."""
    return _group_max(x.detach().abs().double(), block_rows) / E4M3_MAX


def _group_max(a: torch.Tensor, block_rows) -> torch.Tensor:
    """The largest entry of ``a`` (B, H, T, D) per head, or per block of ``block_rows`` rows (padding
    with the smallest value, so a short last block keeps its own maximum)."""
    B, H, T, D = a.shape
    if block_rows is None:
        return a.amax(dim=(-2, -1))
    n = -(-T // block_rows)
    a = torch.nn.functional.pad(a, (0, 0, 0, n * block_rows - T), value=a.min().item())
    return a.reshape(B, H, n, block_rows * D).amax(dim=-1)


def _scale_hint(got: torch.Tensor, x: torch.Tensor, want: torch.Tensor, block_rows) -> str:
    """A sentence naming the mistake whose scales ``got`` (float64, like ``want``) are, or ""."""
    ok = want > 0
    g, w = got[ok], want[ok]
    if not bool(torch.isfinite(g).all()) or g.numel() == 0:
        return ""
    if torch.allclose(g, _group_max(x.detach().double(), block_rows)[ok] / E4M3_MAX, rtol=1e-5, atol=0):
        return (" These are max(x) / 448: take the largest magnitude, x.abs().amax(), or a group whose largest "
                "entries are negative overflows E4M3.")
    if torch.allclose(g * w, torch.ones_like(w), rtol=1e-5):
        return (" These are 448 / max |x|, the factor that quantises; fp8_scales returns the scale that "
                "dequantises (x ≈ x_fp8 · scale), max |x| / 448.")
    shift = (g - w).median()
    if shift > 0 and torch.allclose(g, w + shift, rtol=3e-7, atol=0):  # float32 rounds to a relative 6e-8
        return (f" Every scale is larger by about {shift.item():.3g}: an epsilon added to the maximum? Keep "
                f"max |x| / 448 exact and give only an all-zero group a positive scale (torch.where, or a tiny "
                f"clamp_min).")
    ratio = g / w
    if (ratio.max() - ratio.min()).abs() <= 1e-5 * ratio.abs().max() and abs(ratio.mean().item() - 1) > 1e-4:
        return (f" Every scale is max |x| / {E4M3_MAX / ratio.mean().item():.6g}: divide by E4M3's largest "
                f"finite value, 448 (torch.finfo(torch.float8_e4m3fn).max).")
    return ""


def expected_smem(block_m: int, block_n: int, num_stages: int, head_dim: int, elem_bytes: int) -> int:
    """Bytes of shared memory: Q once, ``num_stages`` tiles each of K and V."""
    return head_dim * elem_bytes * (block_m + 2 * num_stages * block_n)


def _inputs(B, H, T, D, *, seed, dtype, negative_heads=(), zero_heads=()):
    x = randn(B, H, T, D, seed=seed, dtype=torch.float64) * torch.linspace(0.5, 8.0, B * H,
                                                                             dtype=torch.float64).view(B, H, 1, 1)
    for b, h in negative_heads:  # the largest magnitude is negative: max(x) is far from max |x|
        x[b, h] = -x[b, h].abs()
        x[b, h, 0, 0] = 0.25 * x[b, h].abs().max()
    for b, h in zero_heads:
        x[b, h] = 0.0
    return x.to(dtype)


def check_fp8_scales(fn, *, B=2, H=3, T=40, D=16, block_rows=None, dtype=torch.float32, negative_heads=((0, 1),),
                     zero_heads=(), seed=0) -> None:
    """``fn(x, block_rows)`` must return float32 scales: (B, H) for ``block_rows=None``, else
    (B, H, ceil(T / block_rows)), each max |x| / 448 of its group (relative 1e-6), positive and
    finite for an all-zero group; ``x`` left unchanged.

    Raises:
        AssertionError: naming the case, the group and the expected scale.
    """
    case = Case(B=B, H=H, T=T, D=D, block_rows=block_rows, dtype=str(dtype).replace("torch.", ""), seed=seed)
    x = _inputs(B, H, T, D, seed=seed, dtype=dtype, negative_heads=negative_heads, zero_heads=zero_heads)
    x_in = x.clone()
    got = _call(fn, "fp8_scales", x_in, block_rows)
    want = expected_scales(x, block_rows)
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"fp8_scales [{case}]: expected a torch.Tensor, got {type(got).__name__}")
    assert_shape(got, want.shape, name="scale", case=case)
    if got.dtype != torch.float32:
        raise AssertionError(f"fp8_scales [{case}]: scales must be float32, got {got.dtype}")
    if not torch.equal(x_in, x):
        raise AssertionError(f"fp8_scales [{case}]: changed its input x")
    got = got.detach().double()
    zero = want == 0
    bad_zero = zero & ~(torch.isfinite(got) & (got > 0))
    if bad_zero.any():
        idx = tuple(int(i) for i in bad_zero.nonzero()[0])
        raise AssertionError(f"fp8_scales [{case}]: group {idx} is all zeros and got scale {got[idx].item()}: "
                             f"x / scale is then 0/0 = NaN. Give such a group a positive scale (1 is usual).")
    off = ~zero & ~((got - want).abs() <= 1e-6 * want)
    if off.any():
        idx = tuple(int(i) for i in off.nonzero()[0])
        hint = _scale_hint(got, x, want, block_rows)
        if block_rows is None and math.isclose(got[idx].item(), want.max().item(), rel_tol=1e-5):
            hint = " It equals the largest scale of the whole tensor: one scale per head, not per tensor."
        hint = hint or " (Is it the largest magnitude, |x|, of exactly that group, ragged last block included?)"
        raise AssertionError(f"fp8_scales [{case}]: {int(off.sum())} of {want.numel()} scales are wrong; "
                             f"first at {idx}: got {got[idx].item():.9g}, expected max |x| / 448 = "
                             f"{want[idx].item():.9g} (relative difference "
                             f"{abs(got[idx].item() / want[idx].item() - 1):.2g}, allowed 1e-6).{hint}")


def _e4m3_half_step(y: torch.Tensor) -> torch.Tensor:
    """Half the spacing of E4M3 values around |y| (float64): 2^(e - 3) / 2 for normal numbers
    (|y| >= 2^-6), 2^-9 / 2 below."""
    e = torch.floor(torch.log2(y.abs().clamp_min(2.0 ** -6)))
    return 0.5 * torch.exp2(e - 3)


class _SaturationProbe(MethodProbe):
    """Sees every cast to float8_e4m3fn inside the learner's call and records the first one whose
    input holds finite values beyond ±448: PyTorch's cast (and Hopper's ``cvt.rn.satfinite``) happens to
    saturate them, but other converters give NaN (ml_dtypes, for NumPy and JAX: jax-ml/ml_dtypes#400), so
    the notebook asks for an explicit clamp."""

    decides = True

    def _judge(self, func, info, args, kwargs, out) -> None:
        if not (isinstance(out, torch.Tensor) and out.dtype == _FP8):
            return
        for t in args:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != _FP8 and t.numel():
                big = torch.isfinite(t) & (t.abs() > E4M3_MAX)
                if bool(big.any()):
                    self._violate(f"{self.where}: cast {int(big.sum())} values beyond ±448 (the largest "
                                  f"{t.abs()[big].max().item():.4g}) to float8_e4m3fn ({func}). {self.hint}")
                    return


def _quantize_hint(got: torch.Tensor, x: torch.Tensor, full: torch.Tensor, T: int, s: torch.Tensor,
                   block_rows) -> str:
    """A sentence naming the mistake whose E4M3 values ``got`` (float64) are, or ""."""
    def fp8(y):
        return y.clamp(-E4M3_MAX, E4M3_MAX).to(_FP8).double()

    xd = x.double()
    candidates = [(xd, "These are x itself, rounded to E4M3: return x_fp8, not x_fp8 · scale (the dequantised "
                       "values)."),
                  (xd * full, "These are x · scale: divide by the scale (fp8_scales returns the dequantisation "
                              "scale, max |x| / 448).")]
    if block_rows is not None:
        tiled = s.double().repeat(1, 1, block_rows)[:, :, :T, None]
        candidates.append((xd / tiled, "The scales are spread over the rows with repeat, which tiles the whole "
                                       "list of scales; each block of block_rows rows needs its own scale "
                                       "(repeat_interleave)."))
    for y, sentence in candidates:  # within one E4M3 step of the candidate: it may be rounded twice
        if bool(((got - fp8(y)).abs() <= 2 * _e4m3_half_step(y) * (1 + 1e-3)).float().mean() > 0.99):
            return " " + sentence
    want = fp8(xd / full)
    wrong = got != want
    cut = got[wrong].abs()
    if cut.numel() and bool((cut == cut.max()).all()) and cut.max() < E4M3_MAX and bool(
            ((xd / full)[wrong].abs() > cut.max()).all()):
        return (f" Every wrong value is ±{cut.max().item():.6g}: saturate at ±448, E4M3's (float8_e4m3fn) "
                f"largest finite value.")
    step = 2 * _e4m3_half_step(want)
    if bool(((got - want).abs()[wrong] <= step[wrong] * (1 + 1e-3)).all()):
        return (" Each wrong value is one E4M3 step from the nearest: round once, from float32 (rounding "
                "first to bf16 or fp16 and then to E4M3 rounds twice).")
    return ""


def check_quantize_fp8(fn, *, B=2, H=3, T=40, D=16, block_rows=None, dtype=torch.float32, scale_factor=1.0,
                       zero_heads=(), seed=0) -> None:
    """``fn(x, scale, block_rows)`` must return float8_e4m3fn of x's shape: x / scale (scale broadcast
    over its head, or over its block of rows), saturated to ±448, rounded to the nearest E4M3 value
    (within half a step). ``scale_factor < 1`` shrinks the scales so that some values must saturate.

    Raises:
        AssertionError: wrong dtype or shape, NaN, or a value off by more than half an E4M3 step.
    """
    case = Case(B=B, H=H, T=T, D=D, block_rows=block_rows, scale_factor=scale_factor, seed=seed)
    x = _inputs(B, H, T, D, seed=seed, dtype=dtype, zero_heads=zero_heads)
    s = expected_scales(x, block_rows)
    s = torch.where(s > 0, s * scale_factor, torch.ones_like(s)).float()
    x_in, s_in = x.clone(), s.clone()
    probe = _SaturationProbe(rule="", where=f"quantize_fp8 [{case}]", inputs=(x_in, s_in),
                             hint="PyTorch's cast happens to saturate, other converters give NaN (ml_dtypes, for "
                                  "NumPy and JAX): clamp x / scale to ±448 yourself before the cast.")
    got = _call(fn, "quantize_fp8", x_in, s_in, block_rows, _probe=probe)
    if not isinstance(got, torch.Tensor) or got.dtype != _FP8:
        raise AssertionError(f"quantize_fp8 [{case}]: expected a torch.float8_e4m3fn tensor, got "
                             f"{getattr(got, 'dtype', type(got).__name__)}")
    assert_shape(got, x.shape, name="x_fp8", case=case)
    if not (torch.equal(x_in, x) and torch.equal(s_in, s)):
        raise AssertionError(f"quantize_fp8 [{case}]: changed its input x or scale")
    if block_rows is None:
        full = s.double()[:, :, None, None]
    else:
        full = s.double().repeat_interleave(block_rows, dim=2)[:, :, :T, None]
    y = (x.double() / full).clamp(-E4M3_MAX, E4M3_MAX)
    g = got.double()
    if torch.isnan(g).any():
        idx = tuple(int(i) for i in torch.isnan(g).nonzero()[0])
        raise AssertionError(f"quantize_fp8 [{case}]: NaN at {idx} (x = {x[idx].item():.4g}): a division by a zero "
                             f"scale, or a value outside ±448 cast without saturating")
    off = (g - y).abs() > _e4m3_half_step(y) * (1 + 1e-3)
    if off.any():
        idx = tuple(int(i) for i in off.nonzero()[0])
        hint = _quantize_hint(g, x, full, T, s, block_rows) or " Does each row use the scale of its own head (block)?"
        raise AssertionError(f"quantize_fp8 [{case}]: {int(off.sum())} of {g.numel()} values are wrong; first at "
                             f"{idx}: got {g[idx].item():.6g}, expected x / scale = {y[idx].item():.6g} "
                             f"(x = {x[idx].item():.6g}), rounded to E4M3 and saturated to ±448.{hint}")


def check_smem_estimate(fn, *, cases=((64, 64, 2, 64, 2), (128, 64, 3, 128, 2), (128, 128, 4, 128, 2),
                                      (64, 32, 3, 128, 1), (128, 32, 2, 64, 4))) -> None:
    """``fn(block_m, block_n, num_stages, head_dim, elem_bytes)`` must return the bytes of
    :func:`expected_smem` for each of ``cases``."""
    for args in cases:
        got = _call(fn, "smem_estimate", *args)
        want = expected_smem(*args)
        if type(got) is not int and not (isinstance(got, float) and got == int(got)):
            raise AssertionError(f"smem_estimate{args}: expected a whole number of bytes, got {got!r:.40}")
        if got != want:
            raise AssertionError(f"smem_estimate(block_m, block_n, num_stages, head_dim, elem_bytes)={args}: got "
                                 f"{got}, expected {want} bytes. Which tiles are loaded once, and which are "
                                 f"multi-buffered by the software pipeline?")


def _space():
    import triton

    from .launch_tuning import CONFIG_SPACE

    extra = ((64, 128, 4, 2), (32, 64, 4, 2), (256, 64, 8, 2))  # BLOCK_N > BLOCK_M; a 256-row tile
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in CONFIG_SPACE + extra]


def check_prune_configs(fn, *, T=4096, head_dim=128, dtype=torch.bfloat16, causal=True, smem_limit=232448,
                        where="kwargs") -> None:
    """``fn(configs, named_args, smem_limit=..., **kwargs)`` as ``triton.autotune`` calls it must keep
    exactly the configs that fit (see the module docstring), in order. ``where`` puts HEAD_DIM and
    CAUSAL among the keyword arguments ("kwargs", as the notebook's launcher passes them) or the named
    ones ("named"); ``smem_limit=None`` is not passed at all (the device's limit applies).

    Raises:
        AssertionError: the configs kept wrongly and dropped wrongly, with the estimate of each.
    """
    configs = _space()
    before = list(configs)
    settings = [(dict(c.kwargs), c.num_warps, c.num_stages) for c in configs]
    q = torch.empty(1, 1, 16, head_dim, dtype=dtype)
    named = {"Q": q, "K": q, "V": q, "T": T}
    kw = {"HEAD_DIM": head_dim, "CAUSAL": causal, "USE_TMA": False}
    if where == "named":
        named.update(kw)
        kw = {}
    limit_kw = {} if smem_limit is None else {"smem_limit": smem_limit}
    if smem_limit is None:
        from .launch_tuning import smem_limit_bytes

        smem_limit = smem_limit_bytes()
    case = Case(T=T, head_dim=head_dim, dtype=str(dtype).replace("torch.", ""), causal=causal, smem_limit=smem_limit,
                where=where)
    try:
        got = _call(fn, "prune_configs", configs, dict(named), **kw, **limit_kw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise AssertionError(f"prune_configs [{case}]: {type(exc).__name__}: {exc}. This launch passes "
                             f"{', '.join(named)} by position (named_args) and {', '.join(kw) or 'nothing'} by "
                             f"keyword (kwargs): look each name up in both.") from exc
    if configs != before:
        raise AssertionError(f"prune_configs [{case}]: changed the list it was given; return a new list")
    if [(dict(c.kwargs), c.num_warps, c.num_stages) for c in configs] != settings:
        raise AssertionError(f"prune_configs [{case}]: changed the block sizes, warps or stages of a config; "
                             f"drop the configs that cannot run instead of editing them")
    if not isinstance(got, list):
        raise AssertionError(f"prune_configs [{case}]: must return a list of the given configs, got "
                             f"{type(got).__name__}")

    def fits(c):
        bm, bn = (c.kwargs[name] for name in ("BLOCK_M", "BLOCK_N"))
        if T % bm != 0 or T % bn != 0 or (causal and bm % bn != 0):
            return False
        return expected_smem(bm, bn, c.num_stages, head_dim, q.element_size()) <= smem_limit

    want = [c for c in configs if fits(c)]
    if [id(c) for c in got] == [id(c) for c in want]:
        return

    def _smem(c):
        return expected_smem(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages, head_dim, q.element_size())

    def show(c):
        bm, bn = (c.kwargs[name] for name in ("BLOCK_M", "BLOCK_N"))
        reason = "" if T % bm == 0 and T % bn == 0 else f", does not tile T={T}"
        return f"{bm}x{bn} w{c.num_warps} s{c.num_stages} ({_smem(c)} B{reason})"

    got_ids = {id(c) for c in got}
    want_ids = {id(c) for c in want}
    wrongly_kept = [show(c) for c in configs if id(c) in got_ids - want_ids]
    wrongly_dropped = [show(c) for c in want if id(c) not in got_ids]
    foreign = [c for c in got if id(c) not in {id(k) for k in configs}]
    from .launch_tuning import CONFIG_SPACE

    msg = (f"prune_configs [{case}]: of {len(configs)} configs (the {len(CONFIG_SPACE)} of CONFIG_SPACE and "
           f"{len(configs) - len(CONFIG_SPACE)} more), kept {len(got)}, expected {len(want)}.")
    if wrongly_kept:
        msg += f" Kept but cannot run: {', '.join(wrongly_kept[:4])}."
    if wrongly_dropped:
        msg += f" Dropped but fit: {', '.join(wrongly_dropped[:4])}."
        if any(_smem(c) == smem_limit for c in want if id(c) not in got_ids):
            msg += f" A config that needs exactly smem_limit ({smem_limit} B) fits: keep estimates <= the limit."
    if foreign:
        msg += " Return the Config objects you were given, not copies."
    elif not wrongly_kept and not wrongly_dropped:
        msg += " Keep the configs in the order given."
    raise AssertionError(msg + f" (bytes per element: {q.element_size()})")

"""Checkers of notebook 09: FP8 (E4M3) scales and quantisation, the shared-memory estimate, and the
config pruning that ``triton.autotune`` calls. All run on plain tensors and lists, on a CPU.

Each checker calls the learner's function on copies through :func:`attnlab.checking.harness.call_learner` (time
limit, the grader's guard) and checks properties of what came back, whatever code made it:

- scale of a group (one head, or ``block_rows`` rows of one head, the last block possibly short) =
  max |x| / 448, float32; an all-zero group needs any positive finite scale (its values quantise to
  0 either way);
- FP8 values: read back from their bits, each is an E4M3 value within half a step of x / scale
  saturated to ±448 (a relative 2⁻⁴ for normal numbers, 2⁻¹⁰ absolute below 2⁻⁶), so
  ``x * (1 / scale)`` passes too; and no value beyond ±448 reaches a conversion to float8_e4m3fn,
  by whatever operator converts (:class:`_SaturationProbe`);
- shared memory of a pointer-load forward program = (BLOCK_M + 2·num_stages·BLOCK_N)·HEAD_DIM·bytes:
  Q once, and ``num_stages`` buffers of K and of V (what triton 3.6 compiled for every config on the
  H200: notes/gpu/2026-11-30/09/smem_check.csv);
- pruning keeps, in order and as the same objects, exactly the configs whose blocks divide T (and
  BLOCK_N divides BLOCK_M when causal) and whose estimate fits the limit; it reads T, HEAD_DIM, CAUSAL
  and Q from ``named_args`` or ``kwargs`` (Triton puts positional launch arguments in the first,
  keyword ones in the second).

**Cases drawn at grading time.** With ``draw=N`` a checker runs N cases drawn over wide ranges
(block sizes, stages, head dims, dtypes, causal or not, how many configs and which, shapes, ragged
blocks, negative and all-zero heads, scales that force saturation) from the test cell's fixed
``seed`` mixed with a number drawn from ``os.urandom`` at the call: the package holds no list of
them, so no table of tested cases can pass. A failure names the drawn number; ``replay=`` (or
``ATTNLAB_CHECK_SEED`` in the environment of the process that imports this module, read once at
import) draws the same cases again, for self-check or a learner reproducing a failure.

**The checkers' own references are off limits to learner code.** The models the expected values
come from (:func:`expected_smem`, :func:`expected_scales` and the private ones behind the other
checks) refuse to run, with :class:`ReferenceRefused`, while a learner function is being checked
(any thread) or when code outside this package calls them during autograding; the check then fails
and the call is flagged for review (:func:`attnlab.core.review.flag`), even if the learner code caught
the error.

Sources: the OCP 8-bit floating point specification (E4M3: 4 exponent bits, 3 mantissa bits, max 448,
no infinities), FlashAttention-3 (Shah et al., 2024, section 3.3: per-block scaling), and
``triton.autotune``'s ``prune_configs_by={"early_config_prune": f}`` contract,
``f(configs, named_args, **kwargs) -> configs`` (triton/runtime/autotuner.py).
"""
# Length: above 400 lines on purpose: the tripwire that keeps the references from learner code tells the
# checkers' own frames by this file (``_ours``), so the four checkers, their references and the tripwire
# stay one module; the steps shared with the other checkers (call_learner) are in checking/harness.py.

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import random
import sys
import threading
import warnings
from os import urandom as _urandom  # bound at import: the guard restores it if a cell rebinds it

import torch

from .core import review
from .checks import Case, assert_shape, randn
from .checking.probe import MethodProbe, tensors_in
from .checking.harness import call_learner

__all__ = ["E4M3_MAX", "SEED_ENV", "ReferenceRefused", "check_fp8_scales", "check_quantize_fp8",
           "check_smem_estimate", "check_prune_configs", "expected_smem", "expected_scales",
           "expected_kept", "group_max", "saturated", "E4M3_VALUES", "FLOATS", "Draw", "drawn_fp8_case",
           "drawn_smem_case", "drawn_prune_case", "replay_from_env", "WIRE"]

E4M3_MAX = 448.0
_FP8 = torch.float8_e4m3fn

# ------------------------------------------------------------------------------ cases drawn at grading time
#: Environment variable holding a draw to replay (hex or decimal), read once when this module is imported.
SEED_ENV = "ATTNLAB_CHECK_SEED"


def replay_from_env() -> int | None:
    """The draw to replay named by :data:`SEED_ENV` (hex or decimal), or None when unset or unreadable."""
    text = os.environ.get(SEED_ENV, "").strip()
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


REPLAY = replay_from_env()


class Draw:
    """The random source of one drawn check: the test cell's ``seed`` mixed with ``draw`` (fresh from
    os.urandom unless replayed), and the sentence a failure ends with."""

    def __init__(self, what: str, n: int, seed: int, replay: int | None) -> None:
        replay = REPLAY if replay is None else replay
        self.draw = int.from_bytes(_urandom(8), "little") if replay is None else int(replay)
        digest = hashlib.blake2b(f"attnlab-09:{what}:{int(seed)}:{self.draw}".encode(), digest_size=16).digest()
        self.rng = random.Random(int.from_bytes(digest, "little"))
        self.note = (f"{n} cases drawn at grading time from seed={seed} and draw {self.draw:#x}; "
                     f"replay them with {what}(..., draw={n}, seed={seed}, replay={self.draw:#x}), or "
                     f"{SEED_ENV}={self.draw:#x} in the environment")

    def tensor_seed(self) -> int:
        return self.rng.getrandbits(62)


@contextlib.contextmanager
def _drawn(what: str, n: int, seed: int, replay: int | None):
    """Yield a :class:`Draw`; an ``AssertionError`` raised inside gets the draw's note appended."""
    d = Draw(what, n, seed, replay)
    try:
        yield d
    except AssertionError as exc:
        raise AssertionError(f"{exc} ({d.note})") from None


# ------------------------------------------------------------------------------ references, refused to learner code
class ReferenceRefused(RuntimeError):
    """Raised by a checker's reference model when learner code calls it while it is being graded."""


class _Wire:
    """Whether a learner function is being checked now (a depth, for any thread; ``what``: which
    check) and the references called meanwhile. One object for the module's life: the guard keeps
    the module's binding to it."""

    __slots__ = ("armed", "what", "trips", "lock")

    def __init__(self) -> None:
        self.armed, self.what = 0, ""
        self.trips: list[str] = []
        self.lock = threading.Lock()


#: The tripwire the references check: armed while a check runs learner code, with the calls it caught.
WIRE = _Wire()


def _ours(frame) -> bool:
    """Whether ``frame`` runs this module's own code (its globals are this module's): the checkers are the
    only callers of their references. Any other module of the package would do learner code's bidding
    (a red team had ``hints.diagnosed`` call one through a ``functools.partial``, 2026-12-02)."""
    return frame.f_globals is globals() and frame.f_code.co_filename == __file__


def _inside_learner_call(frame) -> bool:
    while frame is not None:
        if frame.f_code is _LEARNER_CALL_CODE:
            return True
        frame = frame.f_back
    return False


def _refuse_learner_callers() -> None:
    """The first statement of each of the checkers' references: raise :class:`ReferenceRefused` (and
    flag the call for review) while a learner function is being checked (the wire is armed, or
    :func:`_learner_call` is on this thread's stack) or, during autograding, when the reference's
    caller is not this module's code.

    The refusal is part of the reference's own code, not a wrapper around it: a wrapper holds the
    unguarded function in its closure, where learner code found it (``__closure__[0].cell_contents``,
    red team, 2026-12-02). Now no object reachable from the package holds a reference that skips
    the check; a copy of its code object (``types.FunctionType(f.__code__, ...)``) runs the check too."""
    frame = sys._getframe(1)  # the reference's own frame
    name, caller = f"attnlab.verify_tuning.{frame.f_code.co_name}", frame.f_back
    del frame
    from .grading.kernel import guard

    armed = WIRE.armed
    if armed or _inside_learner_call(caller) or (guard.active() and not _ours(caller)):
        with WIRE.lock:
            WIRE.trips.append(name)
        # reported now: the learner code may catch the refusal, or empty the list of trips
        review.flag(f"{WIRE.what + ': ' if armed else ''}learner code called the checkers' reference {name}"
                    f"{' while it was being checked' if armed else ''}")
        raise ReferenceRefused(f"{name} is the checkers' own reference: graded code may not call it. "
                               f"Compute the value from its definition in the notebook.")


def _learner_call(fn, what: str, *args, _probe=None, **kwargs):
    """:func:`attnlab.verify.call_learner` with the checkers' references refused while ``fn`` runs: a call of
    one fails this check and is flagged for review, whatever the learner code did with the refusal."""
    with WIRE.lock:
        depth, what_before = WIRE.armed, WIRE.what
        WIRE.armed, WIRE.what = (depth if type(depth) is int and depth > 0 else 0) + 1, what
        before = len(WIRE.trips)
    try:
        return call_learner(fn, what, *args, _probe=_probe, **kwargs)
    finally:
        with WIRE.lock:  # put back what this call found, whatever the learner code set meanwhile
            WIRE.armed, WIRE.what = depth if type(depth) is int and depth > 0 else 0, what_before
            called = sorted(set(WIRE.trips[before:]))
        if called:
            raise AssertionError(f"{what}: your code called {', '.join(called)}, the reference this check compares "
                                 f"with, and was refused (flagged for review). Compute the result from the "
                                 f"definition in the notebook.") from None


_LEARNER_CALL_CODE = _learner_call.__code__


# ------------------------------------------------------------------------------ the models
def expected_scales(x: torch.Tensor, block_rows=None) -> torch.Tensor:
    """max |x| / 448 per head (B, H), or per block of ``block_rows`` rows (B, H, ceil(T / block_rows)),
    in float64; 0 for an all-zero group (the checks accept any positive scale there).

    Raises:
        ReferenceRefused: called by learner code while it is checked (see the module docstring).
    """
    _refuse_learner_callers()
    return group_max(x.detach().abs().double(), block_rows) / E4M3_MAX


def group_max(a: torch.Tensor, block_rows) -> torch.Tensor:
    """The largest entry of ``a`` (B, H, T, D) per head, or per block of ``block_rows`` rows (padding
    with the smallest value, so a short last block keeps its own maximum)."""
    _refuse_learner_callers()
    B, H, T, D = a.shape
    if block_rows is None:
        return a.amax(dim=(-2, -1))
    n = -(-T // block_rows)
    a = torch.nn.functional.pad(a, (0, 0, 0, n * block_rows - T), value=a.min().item())
    return a.reshape(B, H, n, block_rows * D).amax(dim=-1)


def expected_smem(block_m: int, block_n: int, num_stages: int, head_dim: int, elem_bytes: int) -> int:
    """Bytes of shared memory: Q once, ``num_stages`` tiles each of K and V.

    Raises:
        ReferenceRefused: called by learner code while it is checked (see the module docstring).
    """
    _refuse_learner_callers()
    return head_dim * elem_bytes * (block_m + 2 * num_stages * block_n)


def expected_kept(settings, T: int, head_dim: int, elem_bytes: int, causal: bool, limit: int) -> list[bool]:
    """For each (BLOCK_M, BLOCK_N, num_stages) of ``settings``: whether pruning keeps it."""
    _refuse_learner_callers()

    def fits(bm, bn, stages):
        tiles_t = T % bm == 0 and T % bn == 0
        band_whole = not causal or bm % bn == 0
        return tiles_t and band_whole and expected_smem(bm, bn, stages, head_dim, elem_bytes) <= limit
    return [fits(*s) for s in settings]


def saturated(x: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """x / scale in float64, saturated to ±448: what rounding to E4M3 must come within half a step of."""
    _refuse_learner_callers()
    return (x.double() / full).clamp(-E4M3_MAX, E4M3_MAX)


def _spread(scale: torch.Tensor, block_rows, T: int) -> torch.Tensor:
    """Scales (B, H) or (B, H, n_blocks) as float64 (B, H, T, 1): each row's own scale."""
    if block_rows is None:
        return scale.double()[:, :, None, None]
    return scale.double().repeat_interleave(block_rows, dim=2)[:, :, :T, None]


# ------------------------------------------------------------------------------ E4M3
def _e4m3_table() -> torch.Tensor:
    """The value of each of the 256 bit patterns of float8_e4m3fn (float64; NaN for 0x7F and 0xFF),
    from the format's definition, not from torch's conversion."""
    values = []
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        exp, man = (bits >> 3) & 0xF, bits & 0x7
        if exp == 0xF and man == 0x7:
            values.append(math.nan)
        elif exp == 0:
            values.append(sign * man * 2.0 ** -9)          # subnormal: steps of 2^-9
        else:
            values.append(sign * (1 + man / 8) * 2.0 ** (exp - 7))
    return torch.tensor(values, dtype=torch.float64)


#: The value each of the 256 E4M3 bit patterns holds (NaN for the NaN patterns), indexed by the byte.
E4M3_VALUES = _e4m3_table()


def _e4m3_half_step(y: torch.Tensor) -> torch.Tensor:
    """Half the spacing of E4M3 values around |y| (float64): 2^(e - 3) / 2 for normal numbers
    (|y| >= 2^-6), 2^-9 / 2 below."""
    e = torch.floor(torch.log2(y.abs().clamp_min(2.0 ** -6)))
    return 0.5 * torch.exp2(e - 3)


class _SaturationProbe(MethodProbe):
    """Sees every operator that writes float8_e4m3fn values inside the learner's call and records the
    first one that converts finite values beyond ±448 into E4M3. PyTorch's conversion (and Hopper's
    ``cvt.rn.satfinite``) happens to saturate them, but other converters give NaN (ml_dtypes, for NumPy
    and JAX: jax-ml/ml_dtypes#400), so the notebook asks for an explicit clamp.

    Which values an operator converts is measured, not listed per operator: the operator runs again
    with every E4M3 tensor and dtype widened to float64 and its ``out=`` arguments dropped (``.to``,
    ``copy_`` into a float8 tensor, ``torch.div(..., out=<float8>)``, a cast from a complex, integer or
    float8_e5m2 tensor). An operator whose values cannot be recomputed that way is remembered
    (:attr:`blind`) and reported for review."""

    decides = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.blind: list[str] = []

    def _judge(self, func, info, args, kwargs, out) -> None:
        if not any(t.dtype == _FP8 for t in tensors_in(out if isinstance(out, (tuple, list)) else (out,))):
            return
        inputs = list(tensors_in((args, *(v for k, v in kwargs.items() if not self._is_out(func, k)))))
        if all(t.dtype == _FP8 for t in inputs):
            return  # E4M3 values moved or selected, nothing converted
        try:
            before = self._before_cast(func, args, kwargs)
        except Exception as exc:  # noqa: BLE001 (an operator with no float64 twin: say so, do not guess)
            self.blind.append(f"{func} ({type(exc).__name__})")
            return
        for t in tensors_in(before if isinstance(before, (tuple, list)) else (before,)):
            v = t.real if t.is_complex() else t  # a cast from complex keeps the real part
            if not (v.is_floating_point() or v.dtype in (torch.int8, torch.int16, torch.int32, torch.int64,
                                                         torch.uint8)):
                continue
            v = v.double()
            big = torch.isfinite(v) & (v.abs() > E4M3_MAX)
            if bool(big.any()):
                self._violate(f"{self.where}: converted {int(big.sum())} values beyond ±448 (the largest "
                              f"{v.abs()[big].max().item():.4g}) to float8_e4m3fn ({func}). {self.hint}")
                return

    @staticmethod
    def _is_out(func, name: str) -> bool:
        return any(a.name == name and a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
                   for a in func._schema.arguments)

    def _before_cast(self, func, args, kwargs):
        """The operator's result computed in float64 instead of E4M3: the values it converted."""
        def wide(v):
            if isinstance(v, torch.Tensor):
                return v.double() if v.dtype == _FP8 else v
            if v is _FP8:
                return torch.float64
            if isinstance(v, (list, tuple)):
                return type(v)(wide(i) for i in v)
            return v

        kept = {k: wide(v) for k, v in kwargs.items() if not self._is_out(func, k)}
        op = func.overloadpacket if len(kept) < len(kwargs) else func  # without out=: the functional form
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "casting complex values to real discards the imaginary part"
            return op(*wide(tuple(args)), **kept)


def _scale_hint(got: torch.Tensor, x: torch.Tensor, want: torch.Tensor, block_rows) -> str:
    """A sentence naming the mistake whose scales ``got`` (float64, like ``want``) are, or ""."""
    ok = want > 0
    g, w = got[ok], want[ok]
    if not bool(torch.isfinite(g).all()) or g.numel() == 0:
        return ""
    if torch.allclose(g, group_max(x.detach().double(), block_rows)[ok] / E4M3_MAX, rtol=1e-5, atol=0):
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


# ------------------------------------------------------------------------------ inputs
#: The dtypes the drawn FP8 cases give their inputs.
FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _inputs(B, H, T, D, *, seed, dtype, negative_heads=(), zero_heads=(), magnitudes=None, zero_blocks=()):
    """x (B, H, T, D) in ``dtype``: normal values times a magnitude per head (default 0.5 to 8),
    ``negative_heads`` whose largest magnitude is negative, ``zero_heads`` of zeros and ``zero_blocks``
    ((b, h, first row, last row) ranges of zeros)."""
    if magnitudes is None:
        magnitudes = torch.linspace(0.5, 8.0, B * H, dtype=torch.float64)
    x = randn(B, H, T, D, seed=seed, dtype=torch.float64) * torch.as_tensor(
        magnitudes, dtype=torch.float64).view(B, H, 1, 1)
    for b, h in negative_heads:  # the largest magnitude is negative: max(x) is far from max |x|
        x[b, h] = -x[b, h].abs()
        if x[b, h].numel() > 1:
            x[b, h, 0, 0] = 0.25 * x[b, h].abs().max()
    for b, h in zero_heads:
        x[b, h] = 0.0
    for b, h, lo, hi in zero_blocks:
        x[b, h, lo:hi] = 0.0
    return x.to(dtype)


def drawn_fp8_case(d: Draw) -> dict:
    """One case for the FP8 helpers: shapes, a ragged block size or none, a dtype, per-head magnitudes
    over six decades, negative-dominated heads, an all-zero head and an all-zero block."""
    rng = d.rng
    B, H, T, D = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 80), rng.randint(1, 40)
    block_rows = None if rng.random() < 0.35 else rng.randint(1, T + 8)
    groups = [(b, h) for b in range(B) for h in range(H)]
    rng.shuffle(groups)
    zero = groups[:1] if len(groups) > 1 and rng.random() < 0.7 else []
    negative = groups[len(zero):len(zero) + max(1, len(groups) // 3)]
    zero_blocks = []
    if block_rows is not None and T > block_rows and len(groups) > len(zero):
        b, h = groups[-1]
        first = block_rows * rng.randint(0, (T - 1) // block_rows)
        zero_blocks.append((b, h, first, first + block_rows))
    return dict(B=B, H=H, T=T, D=D, block_rows=block_rows, dtype=rng.choice(FLOATS), negative_heads=tuple(negative),
                zero_heads=tuple(zero), zero_blocks=tuple(zero_blocks), seed=d.tensor_seed(),
                magnitudes=[10 ** rng.uniform(-3, 3) for _ in groups])


# ------------------------------------------------------------------------------ fp8_scales
def check_fp8_scales(fn, *, B=2, H=3, T=40, D=16, block_rows=None, dtype=torch.float32, negative_heads=((0, 1),),
                     zero_heads=(), seed=0, draw: int = 0, replay: int | None = None) -> None:
    """``fn(x, block_rows)`` must return float32 scales: (B, H) for ``block_rows=None``, else
    (B, H, ceil(T / block_rows)), each max |x| / 448 of its group (relative 1e-6), positive and
    finite for an all-zero group; ``x`` left unchanged.

    With ``draw=N``, N cases drawn at grading time replace the one the other arguments describe
    (module docstring); ``seed`` is then the test cell's fixed seed, ``replay`` a draw to repeat.

    Raises:
        AssertionError: naming the case, the group and the expected scale (and the draw).

    Contract: ``attnlab.contracts.fp8_scales``.
    """
    if draw:
        with _drawn("check_fp8_scales", draw, seed, replay) as d:
            for _ in range(draw):
                _fp8_scales_once(fn, **drawn_fp8_case(d))
        return
    _fp8_scales_once(fn, B=B, H=H, T=T, D=D, block_rows=block_rows, dtype=dtype, negative_heads=negative_heads,
                     zero_heads=zero_heads, seed=seed)


def _fp8_scales_once(fn, *, B, H, T, D, block_rows, dtype, negative_heads, zero_heads, seed, magnitudes=None,
                     zero_blocks=()) -> None:
    case = Case(B=B, H=H, T=T, D=D, block_rows=block_rows, dtype=str(dtype).replace("torch.", ""), seed=seed)
    x = _inputs(B, H, T, D, seed=seed, dtype=dtype, negative_heads=negative_heads, zero_heads=zero_heads,
                magnitudes=magnitudes, zero_blocks=zero_blocks)
    x_in = x.clone()
    got = _learner_call(fn, "fp8_scales", x_in, block_rows)
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


# ------------------------------------------------------------------------------ quantize_fp8
def check_quantize_fp8(fn, *, B=2, H=3, T=40, D=16, block_rows=None, dtype=torch.float32, scale_factor=1.0,
                       zero_heads=(), seed=0, draw: int = 0, replay: int | None = None) -> None:
    """``fn(x, scale, block_rows)`` must return a plain float8_e4m3fn tensor of x's shape: x / scale
    (scale broadcast over its head, or over its block of rows), saturated to ±448, rounded to the
    nearest E4M3 value (within half a step), with no value beyond ±448 reaching a conversion to
    E4M3. ``scale_factor < 1`` shrinks the scales so that some values must saturate.

    With ``draw=N``, N cases drawn at grading time replace the one the other arguments describe
    (shapes, dtypes, ragged blocks, all-zero heads and blocks, a random factor per group between 0.02
    and 2); ``seed`` is then the test cell's fixed seed, ``replay`` a draw to repeat.

    Raises:
        AssertionError: wrong dtype or shape, NaN, a value off by more than half an E4M3 step, a
            value beyond ±448 converted, or FP8 values made where the checks cannot see them.

    Contract: ``attnlab.contracts.quantize_fp8``.
    """
    if draw:
        with _drawn("check_quantize_fp8", draw, seed, replay) as d:
            for _ in range(draw):
                case = drawn_fp8_case(d)
                n_groups = case["B"] * case["H"] * (1 if case["block_rows"] is None
                                                    else -(-case["T"] // case["block_rows"]))
                factors = [10 ** d.rng.uniform(-1.7, 0.3) for _ in range(n_groups)]
                case.pop("negative_heads")
                _quantize_once(fn, **case, factors=factors, free_scale=10 ** d.rng.uniform(-3, 1))
        return
    _quantize_once(fn, B=B, H=H, T=T, D=D, block_rows=block_rows, dtype=dtype, zero_heads=zero_heads, seed=seed,
                   factors=float(scale_factor))


def _quantize_once(fn, *, B, H, T, D, block_rows, dtype, zero_heads, seed, factors, free_scale=1.0, magnitudes=None,
                   zero_blocks=()) -> None:
    """One case: the scales are max |x| / 448 times ``factors`` (one number, or one per group);
    an all-zero group gets ``free_scale``."""
    case = Case(B=B, H=H, T=T, D=D, block_rows=block_rows, dtype=str(dtype).replace("torch.", ""),
                scale_factor=factors if isinstance(factors, float) else "drawn", seed=seed)
    x = _inputs(B, H, T, D, seed=seed, dtype=dtype, zero_heads=zero_heads, magnitudes=magnitudes,
                zero_blocks=zero_blocks)
    s = expected_scales(x, block_rows)
    factor = torch.as_tensor(factors, dtype=torch.float64).reshape(s.shape if not isinstance(factors, float) else ())
    if factor.dim() and bool((s > 0).any()):  # drawn factors: the first group that is not all zeros saturates
        first = int((s.flatten() > 0).nonzero()[0])
        factor.view(-1)[first] = min(factor.view(-1)[first].item(), 0.05)
    s = torch.where(s > 0, s * factor, torch.full_like(s, free_scale)).float()
    x_in, s_in = x.clone(), s.clone()
    probe = _SaturationProbe(rule="", where=f"quantize_fp8 [{case}]", inputs=(x_in, s_in),
                             hint="PyTorch's cast happens to saturate, other converters give NaN (ml_dtypes, for "
                                  "NumPy and JAX): clamp x / scale to ±448 yourself before the cast.")
    got = _learner_call(fn, "quantize_fp8", x_in, s_in, block_rows, _probe=probe)
    if not isinstance(got, torch.Tensor) or got.dtype != _FP8:
        raise AssertionError(f"quantize_fp8 [{case}]: expected a torch.float8_e4m3fn tensor, got "
                             f"{getattr(got, 'dtype', type(got).__name__)}")
    assert_shape(got, x.shape, name="x_fp8", case=case)
    if probe.unseen(got):
        raise AssertionError(f"quantize_fp8 [{case}]: the float8 values were made where the checks cannot see "
                             f"what was converted (from a Python list or NumPy, in another thread, or written "
                             f"after the fact). Compute x / scale with torch, clamp it to ±448, then "
                             f".to(torch.float8_e4m3fn).")
    if probe.blind:
        review.flag(f"quantize_fp8 [{case}]: made float8 values with {probe.blind[0]}, whose values before the "
                    f"conversion the checks could not compute: saturation unchecked")
    if not (torch.equal(x_in, x) and torch.equal(s_in, s)):
        raise AssertionError(f"quantize_fp8 [{case}]: changed its input x or scale")
    full = _spread(s, block_rows, T)
    y = saturated(x, full)
    g = E4M3_VALUES[got.detach().contiguous().view(torch.uint8).long()]  # the values its bits hold
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


# ------------------------------------------------------------------------------ smem_estimate
_DEFAULT_SMEM_CASES = ((64, 64, 2, 64, 2), (128, 64, 3, 128, 2), (128, 128, 4, 128, 2), (64, 32, 3, 128, 1),
                       (128, 32, 2, 64, 4))


def drawn_smem_case(d: Draw) -> tuple[int, ...]:
    """(block_m, block_n, num_stages, head_dim, elem_bytes): powers of two from 16 to 512, 1 to 8 stages,
    any multiple of 8 up to 512 (head dims 80, 96... exist), 1, 2 or 4 bytes."""
    rng = d.rng
    return (2 ** rng.randint(4, 9), 2 ** rng.randint(4, 9), rng.randint(1, 8), 8 * rng.randint(1, 64),
            rng.choice((1, 2, 4)))


def check_smem_estimate(fn, *, cases=_DEFAULT_SMEM_CASES, draw: int = 0, seed: int = 0,
                        replay: int | None = None) -> None:
    """``fn(block_m, block_n, num_stages, head_dim, elem_bytes)`` must return the bytes of
    :func:`expected_smem` (an int, or a float holding a whole number) for each of ``cases`` and, with
    ``draw=N``, for N configurations drawn at grading time (module docstring).

    Raises:
        AssertionError: the arguments, what came back and what was expected (and the draw).

    Contract: ``attnlab.contracts.smem_estimate``.
    """
    for args in cases:
        _smem_once(fn, args)
    if draw:
        with _drawn("check_smem_estimate", draw, seed, replay) as d:
            for _ in range(draw):
                _smem_once(fn, drawn_smem_case(d))


def _smem_once(fn, args) -> None:
    got = _learner_call(fn, "smem_estimate", *args)
    want = expected_smem(*args)
    if type(got) is not int and not (type(got) is float and got == int(got)):
        raise AssertionError(f"smem_estimate{args}: expected a whole number of bytes, got {got!r:.40}")
    if got != want:
        raise AssertionError(f"smem_estimate(block_m, block_n, num_stages, head_dim, elem_bytes)={args}: got "
                             f"{got}, expected {want} bytes. Which tiles are loaded once, and which are "
                             f"multi-buffered by the software pipeline?")


# ------------------------------------------------------------------------------ prune_configs
_BLOCKS = (16, 32, 64, 128, 256)
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2)
_LOOKED_UP = ("Q", "T", "HEAD_DIM", "CAUSAL")


def _space():
    from .launch_tuning import CONFIG_SPACE

    extra = ((64, 128, 4, 2), (32, 64, 4, 2), (256, 64, 8, 2))  # BLOCK_N > BLOCK_M; a 256-row tile
    return [(bm, bn, w, s) for bm, bn, w, s in CONFIG_SPACE + extra]


def drawn_prune_case(d: Draw) -> dict:
    """One launch for the pruning: T a multiple of 16 up to 8192, a head dim, a dtype (1 to 4 bytes),
    causal or not, 4 to 40 distinct configs from block sizes 16-256, 2-8 warps, 1-5 stages in a random
    order, a limit (the device's, one config's exact need, or anything between the smallest and the
    largest need), and each of Q, T, HEAD_DIM, CAUSAL passed by position or by keyword. Redrawn until
    some config is dropped for shared memory alone and some config is kept."""
    from .launch_tuning import smem_limit_bytes

    rng = d.rng
    space = [(bm, bn, w, s) for bm in _BLOCKS for bn in _BLOCKS for w in (2, 4, 8) for s in range(1, 6)]
    for _ in range(100):
        T = 16 * rng.randint(1, 64) * rng.choice((1, 2, 4, 8))
        head_dim = rng.choice((16, 32, 64, 80, 96, 128, 192, 256))
        dtype, causal = rng.choice(_DTYPES), rng.random() < 0.5
        settings = rng.sample(space, rng.randint(4, 40))
        eb = torch.empty(0, dtype=dtype).element_size()
        needs = [expected_smem(bm, bn, s, head_dim, eb) for bm, bn, _, s in settings]
        r = rng.random()
        limit = None if r < 0.15 else rng.choice(needs) if r < 0.55 else rng.randint(min(needs), max(needs))
        resolved = smem_limit_bytes() if limit is None else limit
        kept = expected_kept([(bm, bn, s) for bm, bn, _, s in settings], T, head_dim, eb, causal, resolved)
        tiled = expected_kept([(bm, bn, s) for bm, bn, _, s in settings], T, head_dim, eb, causal, 1 << 62)
        if any(kept) and any(t and not k for t, k in zip(tiled, kept)):
            break
    return dict(settings=settings, T=T, head_dim=head_dim, dtype=dtype, causal=causal, smem_limit=limit,
                where={name: rng.choice(("named", "kwargs")) for name in _LOOKED_UP})


def check_prune_configs(fn, *, T=4096, head_dim=128, dtype=torch.bfloat16, causal=True, smem_limit=232448,
                        where="kwargs", draw: int = 0, seed: int = 0, replay: int | None = None) -> None:
    """``fn(configs, named_args, smem_limit=..., **kwargs)`` as ``triton.autotune`` calls it must keep
    exactly the configs that fit (see the module docstring), in order. ``where`` puts HEAD_DIM and
    CAUSAL among the keyword arguments ("kwargs", as the notebook's launcher passes them) or the named
    ones ("named"); ``smem_limit=None`` is not passed at all (the device's limit applies).

    With ``draw=N``, N launches drawn at grading time (configs, T, head dim, dtype, causal, limit and
    where each name is passed) replace the one the other arguments describe; ``seed`` is then the
    test cell's fixed seed, ``replay`` a draw to repeat.

    Raises:
        AssertionError: the configs kept wrongly and dropped wrongly, with the estimate of each.

    Contract: ``attnlab.contracts.prune_configs``.
    """
    if draw:
        with _drawn("check_prune_configs", draw, seed, replay) as d:
            for _ in range(draw):
                _prune_once(fn, **drawn_prune_case(d))
        return
    placed = {"Q": "named", "T": "named", "HEAD_DIM": where, "CAUSAL": where}
    _prune_once(fn, settings=_space(), T=T, head_dim=head_dim, dtype=dtype, causal=causal, smem_limit=smem_limit,
                where=placed)


def _prune_once(fn, *, settings, T, head_dim, dtype, causal, smem_limit, where) -> None:
    import triton

    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in settings]
    before = list(configs)
    snapshot = [(dict(c.kwargs), c.num_warps, c.num_stages) for c in configs]
    # Q as the launcher passes it, (B, H, T, D), with no memory behind it
    q = torch.empty(1, 1, 1, head_dim, dtype=dtype).expand(1, 2, T, head_dim)
    values = {"Q": q, "T": T, "HEAD_DIM": head_dim, "CAUSAL": causal}
    named = {"K": q, "V": q, "BH": 2, "sm_scale": head_dim ** -0.5}
    kw = {"USE_TMA": False, "WARP_SPEC": False, "PERSISTENT": False}
    for name in _LOOKED_UP:
        (named if where[name] == "named" else kw)[name] = values[name]
    limit_kw = {} if smem_limit is None else {"smem_limit": smem_limit}
    if smem_limit is None:
        from .launch_tuning import smem_limit_bytes

        smem_limit = smem_limit_bytes()
    case = Case(T=T, head_dim=head_dim, dtype=str(dtype).replace("torch.", ""), causal=causal, smem_limit=smem_limit,
                by_keyword="+".join(n for n in _LOOKED_UP if where[n] == "kwargs") or "none")
    try:
        got = _learner_call(fn, "prune_configs", configs, dict(named), **kw, **limit_kw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise AssertionError(f"prune_configs [{case}]: {type(exc).__name__}: {exc}. This launch passes "
                             f"{', '.join(named)} by position (named_args) and {', '.join(kw) or 'nothing'} by "
                             f"keyword (kwargs): look each name up in both.") from exc
    if configs != before:
        raise AssertionError(f"prune_configs [{case}]: changed the list it was given; return a new list")
    if [(dict(c.kwargs), c.num_warps, c.num_stages) for c in configs] != snapshot:
        raise AssertionError(f"prune_configs [{case}]: changed the block sizes, warps or stages of a config; "
                             f"drop the configs that cannot run instead of editing them")
    if type(got) is not list:
        raise AssertionError(f"prune_configs [{case}]: must return a list of the given configs, got "
                             f"{type(got).__name__}")
    eb = q.element_size()
    fit = expected_kept([(bm, bn, s) for bm, bn, _, s in settings], T, head_dim, eb, causal, smem_limit)
    want = [c for c, ok in zip(configs, fit) if ok]
    if [id(c) for c in got] == [id(c) for c in want]:
        return

    def need(c):
        return expected_smem(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages, head_dim, eb)

    def show(c):
        bm, bn = (c.kwargs[name] for name in ("BLOCK_M", "BLOCK_N"))
        reason = "" if T % bm == 0 and T % bn == 0 else f", does not tile T={T}"
        return f"{bm}x{bn} w{c.num_warps} s{c.num_stages} ({need(c)} B{reason})"

    got_ids, want_ids = {id(c) for c in got}, {id(c) for c in want}
    wrongly_kept = [show(c) for c in configs if id(c) in got_ids - want_ids]
    wrongly_dropped = [show(c) for c in want if id(c) not in got_ids]
    foreign = [c for c in got if id(c) not in {id(k) for k in configs}]
    msg = f"prune_configs [{case}]: of {len(configs)} configs, kept {len(got)}, expected {len(want)}."
    if wrongly_kept:
        msg += f" Kept but cannot run: {', '.join(wrongly_kept[:4])}."
    if wrongly_dropped:
        msg += f" Dropped but fit: {', '.join(wrongly_dropped[:4])}."
        if any(need(c) == smem_limit for c in want if id(c) not in got_ids):
            msg += f" A config that needs exactly smem_limit ({smem_limit} B) fits: keep estimates <= the limit."
    if foreign:
        msg += " Return the Config objects you were given, not copies."
    elif not wrongly_kept and not wrongly_dropped:
        msg += " Keep the configs in the order given."
    raise AssertionError(msg + f" (bytes per element: {eb})")

"""Checks that test cells call: comparisons with actionable messages, seeded inputs, poisoned outputs.

Every comparison raises ``AssertionError`` whose message says which case failed, the shapes and
dtypes, how far off the result is, and the first index that is wrong, so a learner can act on it
and an instructor can read it in the grading report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import MappingProxyType

import torch

from . import reference
from .checking import integrity
from .checking.answers import assert_number, require_number
from .core.device import runtime
from .core.outcome import RAN_ALL_ALONG, CallTimeoutError, CPUBoundTimeoutError  # noqa: F401 (RAN_ALL_ALONG: public here too)
from .variants import mix_seed

__all__ = [
    "generator", "randn", "poisoned", "tolerance", "assert_close", "assert_finite",
    "assert_shape", "assert_dtype_at_least", "time_limit", "call_limit_s", "assert_number", "require_number", "Case",
]


#: Overrides :func:`call_limit_s` (seconds); the course's tests set it low to grade hangs quickly.
CALL_LIMIT_ENV = "ATTNLAB_CALL_LIMIT_S"


def call_limit_s() -> float:
    """Seconds one call of learner code may take: 20 on the CPU; 60 on a GPU, where Triton compiles
    (below the 90 s cell timeout, so a hang is reported by the check, not by nbgrader)
    (``ATTNLAB_CALL_LIMIT_S`` overrides both)."""
    override = os.environ.get(CALL_LIMIT_ENV)
    if override:
        return float(override)
    return 20.0 if runtime().interpret else 60.0


def generator(seed: int, device="cpu") -> torch.Generator:
    """A private random generator, so a learner re-seeding torch's global one changes nothing here.

    While grading, ``seed`` is mixed with the student's seed key (:func:`attnlab.variants.mix_seed`):
    each student's tests draw their own inputs."""
    g = torch.Generator(device=device)
    g.manual_seed(mix_seed(seed))
    return g


def randn(*shape, seed: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """Standard-normal tensor from ``seed`` (drawn on the CPU in float64, then moved and cast).

    Drawing on the CPU makes the values identical on every machine, so a failure seen on a GPU can
    be replayed on a laptop.
    """
    t = torch.randn(*shape, generator=generator(seed), dtype=torch.float64)
    return t.to(device=device, dtype=dtype)


def poisoned(shape, dtype, device="cpu") -> torch.Tensor:
    """A tensor filled with NaN: any element a kernel forgets to write fails the comparison."""
    return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)


#: Relative-error tolerances by dtype; float32 is looser on a GPU, where ``tl.dot`` uses tf32.
# read-only: a solution cell that loosened a shared table would pass every check after it
_TOL = MappingProxyType({torch.float64: 1e-10, torch.float16: 5e-3, torch.bfloat16: 2e-2})


def tolerance(dtype: torch.dtype, device="cpu") -> float:
    """Relative-error tolerance for results computed in ``dtype`` on ``device``.

    float64: 1e-10; float32: 1e-5 on the CPU, 2e-3 on a GPU (tf32 dot products); float16: 5e-3;
    bfloat16: 2e-2.

    Raises:
        TypeError: ``dtype`` is none of these (the message names it and the supported ones).
    """
    if dtype == torch.float32:
        return 2e-3 if torch.device(device).type == "cuda" else 1e-5
    if dtype not in _TOL:
        known = ", ".join(str(d).replace("torch.", "") for d in (torch.float32, *_TOL))
        raise TypeError(f"tolerance: no tolerance for dtype {dtype}; supported: {known}")
    return _TOL[dtype]


class Case(dict):
    """The parameters of one check, printed compactly in failure messages."""

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.items())


def _prefix(name: str, case) -> str:
    return f"{name} [{case}]" if case else name


def assert_shape(actual, shape, *, name: str, case=None) -> None:
    """Fail unless ``actual`` is a tensor of exactly ``shape``."""
    where = _prefix(name, case)
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{where}: expected a torch.Tensor of shape {tuple(shape)}, "
                             f"got {type(actual).__name__}")
    if type(actual) not in (torch.Tensor, torch.nn.Parameter):
        # a subclass can redefine every operation the comparison uses
        raise AssertionError(f"{where}: expected a plain torch.Tensor, got the subclass "
                             f"{type(actual).__name__}")
    if tuple(actual.shape) != tuple(shape):
        raise AssertionError(f"{where}: wrong shape {tuple(actual.shape)}, expected {tuple(shape)}")


def assert_dtype_at_least(actual: torch.Tensor, dtype: torch.dtype, *, name: str, case=None) -> None:
    """Fail unless ``actual`` has ``dtype`` or float64 (float64 statistics are always fine)."""
    if actual.dtype not in (dtype, torch.float64):
        raise AssertionError(f"{_prefix(name, case)}: dtype {actual.dtype}, expected {dtype} (or float64). "
                             f"Keep softmax statistics such as the LSE in float32 or wider.")


def assert_finite(actual: torch.Tensor, *, name: str, case=None) -> None:
    """Fail on NaN or ±inf, naming the first such index (NaN often means an unwritten output)."""
    bad = ~torch.isfinite(actual)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{_prefix(name, case)}: {int(bad.sum())} of {actual.numel()} elements are not finite; "
            f"first at index {idx} = {actual[idx].item()}. NaN usually means an element was never "
            f"written or exp(-inf - (-inf)) was computed; inf means an overflow (is the max subtracted?)")


def assert_close(actual, expected: torch.Tensor, *, name: str, case=None, tol: float | None = None,
                 finite: bool = True) -> float:
    """Compare by relative error ‖actual − expected‖ / ‖expected‖ ≤ tol (Frobenius norms, float64).

    Args:
        actual: the learner's tensor; moved to ``expected``'s device for the comparison.
        expected: the reference.
        name: what is compared (``"o"``, ``"lse"``, ``"dq"``...), for the message.
        case: the parameters of the check, for the message.
        tol: defaults to :func:`tolerance` of ``expected``'s dtype and ``actual``'s device.
        finite: also require every element of ``actual`` to be finite.

    Returns:
        The relative error.

    Raises:
        AssertionError: wrong type or shape, non-finite values, or error above ``tol``; the message
        gives the first element whose error is largest relative to the tolerance.
    """
    assert_shape(actual, expected.shape, name=name, case=case)
    if tol is None:
        tol = tolerance(expected.dtype, actual.device)
    if finite:
        assert_finite(actual, name=name, case=case)
    a = actual.detach().to(device=expected.device, dtype=torch.float64)
    e = expected.detach().to(torch.float64)
    diff = (a - e).abs()
    denom = e.norm().item()
    rel = diff.norm().item() / denom if denom > 0 else diff.norm().item()
    if not (rel <= tol):  # also catches NaN
        # point at the first element that is off by much more than the overall tolerance allows
        scale_ = e.abs().max().item() or 1.0
        off = diff > tol * scale_
        idx = tuple(int(i) for i in (off.nonzero()[0] if off.any() else (diff == diff.max()).nonzero()[0]))
        raise AssertionError(
            f"{_prefix(name, case)}: relative error {rel:.3g} exceeds {tol:.0e}. "
            f"{int(off.sum())} of {e.numel()} elements are off; first at index {idx}: "
            f"got {a[idx].item():.6g}, expected {e[idx].item():.6g}. "
            f"(shape {tuple(e.shape)}, your dtype {actual.dtype})")
    return rel


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so a learner's ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str):
    """Raise a ``TimeoutError`` if the block runs longer than ``seconds`` (Unix main thread only):
    :class:`~attnlab.core.outcome.CPUBoundTimeoutError` when the block was on the CPU all along,
    :class:`~attnlab.core.outcome.CallTimeoutError` (another worker may have slowed it) otherwise.

    Test cells wrap each call of learner code in it, so an endless loop fails that check with a
    clear message instead of consuming the whole cell's execution timeout. Elsewhere (Windows,
    worker threads) it does nothing and the notebook's cell timeout remains the backstop. It cannot
    interrupt a compiled GPU kernel that never returns.
    """
    usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable or not seconds or seconds <= 0:
        yield
        return
    fired, done = [], []

    def _raise(signum, frame):
        if done:
            return
        fired.append(True)
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, _raise)
    # Fires again every 0.25 s past the limit: code that swallows the first alarm
    # (``except BaseException: pass`` in a loop) is stopped by a later one.
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    start, cpu = time.perf_counter(), time.thread_time()  # this thread's: where the learner's code runs
    try:
        yield
    except BaseException as exc:
        done.append(True)
        signal.setitimer(signal.ITIMER_REAL, 0)
        # Triton's interpreter may wrap the alarm in its own exception type: trust the flag.
        if fired or isinstance(exc, _Timeout):
            wall, used = time.perf_counter() - start, time.thread_time() - cpu
            # on the CPU all along: other work on the machine did not slow it, and the grader need not
            # grade the notebook again alone (a GPU wait can spin the CPU, so only without CUDA)
            busy = used >= 0.9 * wall and not torch.cuda.is_initialized()
            kind = CPUBoundTimeoutError if busy else CallTimeoutError
            raise kind(f"{what} did not finish within {seconds:g} s (stopped after {wall:.1f} s, {used:.1f} s of "
                       f"CPU{RAN_ALL_ALONG if busy else ''}): an endless loop, or far too slow for these small "
                       f"test sizes?") from None
        raise
    finally:
        done.append(True)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _own_operations() -> None:
    """One small run of the checks' and references' own computations: the operators the integrity check
    watches (:func:`attnlab.checking.integrity.take_baseline`)."""
    g = generator(0)
    q, k, v, do = (torch.randn(1, 1, 3, 2, generator=g, dtype=torch.float64) for _ in range(4))
    for causal in (False, True):
        o, lse = reference.naive_attention(q, k, v, causal=causal)
        assert_close(o, o.clone(), name="o")
    x = torch.randn(2, 5, generator=g, dtype=torch.float64)
    torch.logsumexp(x, dim=-1), x.amax(dim=-1), torch.log(x.abs()), x.float(), x.to(torch.float32)
    assert_close(x.float(), x, name="x", tol=1e-3)
    torch.softmax(x, dim=-1), x.cpu(), x.tolist(), x[0, 0].item(), float(x.sum())


# the integrity check sits below the checks (they call it), so they hand it their computations
integrity.take_baseline(_own_operations)

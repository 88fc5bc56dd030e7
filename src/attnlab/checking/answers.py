"""The numeric answers of "predict before you measure" cells: plain numbers, within a relative tolerance.

Below the checks (:mod:`attnlab.checks` re-exports :func:`assert_number` and :func:`require_number`, the
names notebooks import) and the variants (:func:`attnlab.variants.check_predictions` reads a student's
answers with :func:`real_number`), so neither imports the other for them.
"""

from __future__ import annotations

import math

import torch

from . import integrity

__all__ = ["real_number", "require_number", "assert_number", "factor_hint"]


def real_number(value, name: str) -> float:
    """``value`` as a float, when it is a plain real number: exactly ``int`` or ``float``, a NumPy
    integer or floating scalar, or a one-element ``torch.Tensor`` of such a dtype.

    Exact types only, converted by the library's own code: a subclass could define ``__float__``
    (or ``item``) to return whatever the check expects, e.g. by reading it from the caller's frame.

    Args:
        value: the learner's answer.
        name: the answer's variable name, for the message.

    Raises:
        AssertionError: anything else (a string, a bool, None, a subclass, a tensor of more than one
            element), with a message saying to write the number itself; or a one-element tensor while
            torch's operators are altered (:func:`attnlab.checking.integrity.check`).
    """
    kind = type(value)
    if kind in (int, float):
        return float(value)
    if kind.__module__ == "numpy" and kind.__name__ in _NUMPY_REALS:
        import numpy as np

        if isinstance(value, (np.integer, np.floating)):
            return float(np.ndarray.item(np.asarray(value)))
    if kind is torch.Tensor and value.numel() == 1 and (value.is_floating_point() or
                                                         value.dtype in _TORCH_INTS):
        integrity.check(name)  # .tolist() of a CPU tensor reads memory, but .cpu() dispatches
        item = value.detach().cpu().reshape(()).tolist()
        if type(item) in (int, float):
            return float(item)
    # repr only of builtin types: a learner's class could run code in __repr__
    shown = f"{value!r:.60} " if kind in (str, bool, type(None)) else ""
    raise AssertionError(f"{name}: expected a plain number (int or float), got {shown}({kind.__name__}). "
                         f"Write the number itself, e.g. {name} = 2 * 1024**2")


_NUMPY_REALS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "longlong",
                          "ulonglong", "intc", "uintc", "float16", "float32", "float64", "longdouble", "int_", "intp"})
_TORCH_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def require_number(value, name: str) -> None:
    """Fail unless ``value`` is a real number (the visible half of a prediction's test)."""
    real_number(value, name)


def assert_number(value, expected: float, *, name: str, rel: float = 0.02) -> None:
    """Fail unless ``value`` is a real number within ``rel`` (relative) of ``expected``.

    Used for the numeric answers of "predict before you measure" cells.
    """
    got = real_number(value, name)
    if not math.isfinite(got) or abs(got - expected) > rel * abs(expected):
        raise AssertionError(f"{name}: {got:.6g} is not within {rel:.2g} (relative, {100 * rel:g} %) of the "
                             f"expected value. " + (factor_hint(got / expected) if expected and got else "")
                             + "Recheck the formula, and the units where it has any (bytes vs GiB, FLOPs vs "
                             "TFLOPs, s vs ms).")


#: What a power of 2 off points at (by its exponent's size); a power of 1000 is a unit prefix, and
#: 1.024 per prefix is binary against decimal units.
_FACTORS_OF_2 = {
    1: "a factor of 2 (causal attention visits about half the score matrix; a multiply-add is 2 FLOPs; a "
       "16-bit element is 2 bytes)",
    2: "a factor of 4 (the forward's 4·T²·D FLOPs are two matmuls of 2 FLOPs per multiply-add; a float32 "
       "element is 4 bytes)",
    3: "a factor of 8 (bits against bytes)",
}


def factor_hint(ratio: float) -> str:
    """What a prediction that is ``ratio`` times the expected value probably got wrong, "" when the ratio
    is no telling factor: 2^a · 1000^k · 1.024^j for small a, k, j (either way), within 1 % (a
    learner's rounding), or 0.2 % when binary units (j) are involved (a 2.4 % step)."""
    if not math.isfinite(ratio) or ratio <= 0:
        return ""
    best = None
    for a in range(-3, 4):
        for k in range(-4, 5):
            for j in range(-3, 4):
                if not (a or k or j):
                    continue
                off = abs(math.log(ratio / (2.0 ** a * 1000.0 ** k * 1.024 ** j)))
                if off < (0.002 if j else 0.01) and (best is None or abs(a) + abs(k) + abs(j) < sum(map(abs, best))):
                    best = (a, k, j)
    if best is None:
        return ""
    a, k, j = best
    parts = ([_FACTORS_OF_2[abs(a)]] if a else []) + (
        ["a power of 1000 (a unit prefix: s, ms, us; B, KB, MB, GB; FLOP, GFLOP, TFLOP)"] if k else []) + (
        ["a factor of 1.024 per unit prefix: binary against decimal units (KiB/MiB/GiB are powers of 1024, "
         "KB/MB/GB of 1000)"] if j else [])
    return f"Off by {' and by '.join(parts)}. "

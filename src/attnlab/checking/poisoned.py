"""Buffers for the kernel checkers (:mod:`attnlab.verify` for 01-05, :mod:`attnlab.verify_backward`,
:mod:`attnlab.verify_decode`): inputs followed by NaN, outputs of NaN followed by guard values."""

from __future__ import annotations

import torch

__all__ = ["GUARD", "guarded", "tail_room", "with_tail"]

#: Written where a kernel must not write: exactly representable in every float dtype.
GUARD = -4096.0


def with_tail(t: torch.Tensor, extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A contiguous copy of ``t`` followed in memory by ``extra`` NaN elements (reads past the end
    stay in bounds), and the whole buffer holding both."""
    buf = torch.full((t.numel() + extra,), float("nan"), dtype=t.dtype, device=t.device)
    out = buf[:t.numel()].view(t.shape)
    out.copy_(t)
    return out, buf


def guarded(shape, spare: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(view, buffer): a NaN-filled contiguous view of ``shape`` followed in ``buffer`` by ``spare``
    guard values (:data:`GUARD`).

    An element the kernel forgets to write stays NaN and fails the comparison; a store past the end
    (a missing mask) changes a guard value, which the checker reports, instead of other memory.
    """
    n = 1
    for size in shape:
        n *= size
    buf = torch.full((n + spare,), GUARD, dtype=dtype, device=device)
    buf[:n] = float("nan")
    return buf[:n].view(shape), buf


def tail_room(t: torch.Tensor, extra: int) -> torch.Tensor:
    """A contiguous copy of ``t`` followed in memory by ``extra`` NaN elements (:func:`with_tail`
    without its buffer): a load past the last row reads NaN, which poisons the result, and stays in
    bounds."""
    return with_tail(t, extra)[0]

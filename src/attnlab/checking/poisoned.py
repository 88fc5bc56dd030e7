"""Buffers for the kernel checkers of the second assignment (:mod:`attnlab.verify_backward`,
:mod:`attnlab.verify_decode`): inputs followed by NaN, outputs of NaN followed by guard values."""

from __future__ import annotations

import torch

from ..verify import _GUARD, _tail_room

__all__ = ["guarded", "tail_room"]


def guarded(shape, spare: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(view, buffer): a NaN-filled contiguous view of ``shape`` followed in ``buffer`` by ``spare``
    guard values (``verify._GUARD``).

    An element the kernel forgets to write stays NaN and fails the comparison; a store past the end
    (a missing mask) changes a guard value, which the checker reports, instead of other memory.
    """
    n = 1
    for size in shape:
        n *= size
    buf = torch.full((n + spare,), _GUARD, dtype=dtype, device=device)
    buf[:n] = float("nan")
    return buf[:n].view(shape), buf


def tail_room(t: torch.Tensor, extra: int) -> torch.Tensor:
    """A contiguous copy of ``t`` followed in memory by ``extra`` NaN elements (``verify._tail_room``
    without its buffer): a load past the last row reads NaN, which poisons the result, and stays in
    bounds."""
    return _tail_room(t, extra)[0]

"""CPU tensors that span more than 2³¹ elements while only a few small pieces of them exist.

A kernel that computes an offset such as ``b * stride_kb`` in 32 bits is right on every input whose
offsets stay below 2³¹ and wraps around past it (on a GPU it then faults, or reads another tensor).
Showing that needs an input whose offsets pass 2³¹: a tensor that large costs 8 GiB of float32 and,
under the grading kernel's address-space limit, cannot even be reserved. Here the memory is mapped only
where a check puts data (a few pages, each at its exact distance from the first), and one tensor of the
whole span is built over it, so its views have the real, large strides and offsets. Reading the gaps
between the pieces would crash the process: only a kernel run under the load accounting
(:func:`attnlab.checking.loads.record`, which switches off every lane outside the pieces registered with it)
may touch such a tensor, and torch code may read only its pieces (:attr:`Spread.pieces`).

Linux only (``mmap`` with an address hint); :func:`spread` raises OSError where the pieces cannot be
placed, and the checks then skip the case.
"""

from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass

import torch

__all__ = ["Spread", "spread", "far_heads"]

_PAGE = mmap.PAGESIZE
_PROT = mmap.PROT_READ | mmap.PROT_WRITE
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
_NOREPLACE = 0x100000  # MAP_FIXED_NOREPLACE (Linux >= 4.17; older kernels take the address as a hint)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    return libc


@dataclass
class Spread:
    """``whole``: a 1-D tensor of ``span`` elements of which only ``pieces`` exist (contiguous 1-D
    tensors, piece i starting at element ``starts[i]`` of ``whole``). The mappings are never
    unmapped: a view of ``whole`` that outlives a check must not point at freed memory."""

    whole: torch.Tensor
    pieces: list[torch.Tensor]
    starts: list[int]


#: Spreads already placed, by layout: a check run again (or another check with the same layout) reuses
#: its pieces, so a process maps each layout once (its pieces are never unmapped).
_PLACED: dict[tuple, Spread] = {}


def spread(starts, length: int, dtype=torch.float32, *, span: int | None = None, attempts: int = 64) -> Spread:
    """Memory for ``length`` elements of ``dtype`` at each element offset of ``starts`` (ascending,
    the first 0) from one base address, nothing mapped in between; ``whole`` covers ``span`` elements
    (at least the last piece's end, the default), so views reaching past the last piece fit in it.

    Raises:
        ValueError: ``starts`` not ascending from 0, or pieces that overlap.
        OSError: the pieces could not be placed (not Linux, or no free address range found).
    """
    starts = [int(s) for s in starts]
    if not starts or starts[0] != 0 or any(b - a < length for a, b in zip(starts, starts[1:])):
        raise ValueError(f"starts must ascend from 0, at least length={length} apart, got {starts}")
    key = (tuple(starts), length, dtype, span)
    if key in _PLACED:
        return _PLACED[key]
    size = torch.empty((), dtype=dtype).element_size()
    span_bytes = max(span or 0, starts[-1] + length) * size
    libc = _libc()
    # a fresh mapping lands just below the others (Linux hands out addresses top-down), so the range
    # below it is free: the pieces go there, a layout that collides with earlier pieces further down.
    # Pieces must lie pages apart (each is mapped whole pages at a time).
    probe = libc.mmap(None, _PAGE, _PROT, _FLAGS, -1, 0)
    if probe in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    libc.munmap(probe, _PAGE)
    base = (probe - span_bytes - (1 << 30)) & ~((1 << 21) - 1)
    for _ in range(attempts):
        mapped = []
        for start in starts:
            first = (base + start * size) & ~(_PAGE - 1)
            end = base + (start + length) * size
            n = (end - first + _PAGE - 1) // _PAGE * _PAGE
            got = libc.mmap(first, n, _PROT, _FLAGS | _NOREPLACE, -1, 0)
            if got != first:
                if got not in (None, ctypes.c_void_p(-1).value):
                    libc.munmap(got, n)
                break
            mapped.append((first, n))
        else:
            whole = torch.frombuffer((ctypes.c_byte * span_bytes).from_address(base), dtype=dtype)
            _PLACED[key] = Spread(whole, [whole[s:s + length] for s in starts], starts)
            return _PLACED[key]
        for first, n in mapped:
            libc.munmap(first, n)
        base -= span_bytes + (1 << 32)
        if base <= 0:
            break
    raise OSError("no free address range for the spread tensor's pieces")


def far_heads(names, *, heads: int, T: int, D: int | None, rows: int, spare: int = 0,
              dtype=torch.float32) -> tuple[dict[str, torch.Tensor], Spread]:
    """Contiguous (heads, 1, T, D) tensors (or (heads, 1, T) with ``D=None``), one per name, of which
    only the first ``rows`` rows of each head exist: head h's rows of every tensor share one piece,
    at element offset h·T·D of the first tensor (so ``bh * stride_bh`` reaches it with stride_bh = T·D).

    Returns:
        (name -> tensor, the :class:`Spread`); the pieces are NaN. Raises OSError as :func:`spread`.
    """
    row = D or 1
    per = rows * row
    shape, strides = ((heads, 1, T, D), (T * D, T * D, D, 1)) if D else ((heads, 1, T), (T, T, 1))
    mem = spread([h * T * row for h in range(heads)], len(names) * per + spare, dtype,
                 span=(heads - 1) * T * row + len(names) * per + T * row)
    for p in mem.pieces:
        p.fill_(float("nan"))
    return {name: mem.whole.as_strided(shape, strides, i * per) for i, name in enumerate(names)}, mem

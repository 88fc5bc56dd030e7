"""Load accounting: which tensor elements each program of an interpreted Triton launch reads and writes.

Notebooks 04, 05 and 08 teach a *method* (one program per softmax row reading it once; FlashAttention
streaming K and V in tiles of at most ``BLOCK_N`` keys, each key once, skipping causal tiles past
the diagonal; split-K decoding loading each K/V tile once for a whole GQA group), and a kernel can
produce the right numbers without it. Under ``TRITON_INTERPRET=1``
every ``tl.load`` and ``tl.store`` of a kernel goes through one object, Triton's
``interpreter_builder`` (``create_masked_load`` / ``create_masked_store``; unmasked and descriptor
accesses are routed through them too). :func:`record` wraps those for the duration of one launch and
notes, per program (``tl.program_id``), the element offsets of every active lane in the tensors the
check owns. The rule functions then turn the ledger into a message that names the rule.

A lane whose address lies in none of those tensors is recorded and switched off before the access,
so a wild load cannot crash the grader's Python process. A compiled launch records nothing: the
accounted checks (04's and 05's kernels, 08's split kernel) run their CPU-sized cases through the
interpreter on every machine, a GPU machine included (:func:`attnlab.verify._kernel_device`), and
check only the numbers of their GPU-sized cases.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["Access", "Ledger", "available", "record", "check_softmax_reads", "check_flash_reads", "check_decode_reads",
           "interpreter_internals"]

#: Builder methods that touch memory; atomics count as stores (they write).
_WRAPPED = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")


@dataclass
class Access:
    """The active lanes of one ``tl.load``/``tl.store`` of one program in one tensor."""

    program: tuple[int, int, int]
    tensor: str
    kind: str            # "load" or "store"
    index: np.ndarray    # int64 element offsets into the tensor's buffer, one per active lane


@dataclass
class Ledger:
    """Every access of one launch. ``strays`` lists (program, kind, lanes) outside every known tensor."""

    regions: list[tuple[str, int, int, int]]   # (name, first byte address, bytes, element size)
    accesses: list[Access] = field(default_factory=list)
    strays: list[tuple[tuple[int, int, int], str, int]] = field(default_factory=list)

    def of(self, tensor: str, kind: str = "load"):
        """Accesses of ``kind`` to ``tensor``, in the order they ran."""
        return [a for a in self.accesses if a.tensor == tensor and a.kind == kind]

    def _note(self, program, kind: str, ptrs, mask):
        """Record the active lanes of one access; return the mask with stray lanes switched off."""
        addr = np.asarray(ptrs.data)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape) if mask is not None \
            else np.ones(addr.shape, dtype=bool)
        lanes = addr[active].astype(np.int64)
        known = np.zeros(lanes.shape, dtype=bool)
        for name, base, nbytes, size in self.regions:
            inside = (lanes >= base) & (lanes < base + nbytes)
            if inside.any():
                self.accesses.append(Access(program, name, kind, (lanes[inside] - base) // size))
                known |= inside
        if known.all():
            return mask
        self.strays.append((program, kind, int((~known).sum())))
        keep = active.copy()
        keep[active] = known
        return type(mask)(keep, mask.dtype) if mask is not None else keep


def available() -> bool:
    """True when this Triton's interpreter has the entry points :func:`record` wraps (Triton 3.x)."""
    try:
        from triton.runtime import interpreter as ti
    except ImportError:
        return False
    builder = getattr(ti, "interpreter_builder", None)
    return builder is not None and all(callable(getattr(builder, name, None)) for name in _WRAPPED)


@contextlib.contextmanager
def record(buffers: dict[str, torch.Tensor]):
    """Record the loads and stores of the interpreted launches inside the ``with`` block.

    Args:
        buffers: name -> a contiguous CPU tensor holding the whole memory the check owns for that
            argument (a view's base buffer, spare room after it included). Offsets in the ledger are
            element offsets into these.

    Yields:
        The :class:`Ledger`, filled as the kernel runs.
    """
    from triton.runtime import interpreter as ti

    regions = []
    for name, t in buffers.items():
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"load accounting needs contiguous CPU buffers; {name} is on {t.device}")
        regions.append((name, t.data_ptr(), t.numel() * t.element_size(), t.element_size()))
    ledger = Ledger(regions)
    builder = ti.interpreter_builder
    # Triton keeps only data on the builder instance (arch, options, the grid): a function there is
    # someone's patch, e.g. create_load rerouted past these wrappers (a red team read a row three times
    # unaccounted that way). It goes, and the review hears of it.
    patched = sorted(name for name, value in vars(builder).items() if callable(value))
    for name in patched:
        del builder.__dict__[name]
    if patched:
        from . import review

        review.flag(f"Triton's interpreter_builder had been patched ({', '.join(patched)}): the patch was removed "
                    f"before the load accounting")
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    # the trailing arguments (cache and eviction policies, memory semantics) differ between Triton
    # versions; only the pointers and the mask matter here, and their positions have not changed
    def masked_load(ptrs, mask, *rest, **kw):
        return load(ptrs, ledger._note(builder.grid_idx, "load", ptrs, mask), *rest, **kw)

    def masked_store(ptrs, value, mask, *rest, **kw):
        return store(ptrs, value, ledger._note(builder.grid_idx, "store", ptrs, mask), *rest, **kw)

    def atomic_rmw(op, ptr, val, mask, *rest, **kw):
        return rmw(op, ptr, val, ledger._note(builder.grid_idx, "store", ptr, mask), *rest, **kw)

    def atomic_cas(ptr, *rest, **kw):
        before = len(ledger.strays)
        ledger._note(builder.grid_idx, "store", ptr, None)
        if len(ledger.strays) > before:  # no mask to switch lanes off: refuse the access itself
            raise MemoryError("tl.atomic_cas on memory outside the kernel's tensors")
        return cas(ptr, *rest, **kw)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    try:
        yield ledger
    finally:  # the class's own methods again (no function was left on the instance before)
        for name in _WRAPPED:
            builder.__dict__.pop(name, None)


#: Names through which kernel code could touch memory behind the accounting's back (only possible
#: under the interpreter, where a kernel body is Python; on a GPU such a kernel does not compile).
_INTERNALS = re.compile(r"\b(?:interpreter_builder|interpreter_semantic|_interpreter|TensorHandle|GridExecutor|"
                        r"create_masked_load|create_masked_store|data_ptr|ctypes)\b|triton\.runtime\.interpreter")


def interpreter_internals(kernel) -> list[str]:
    """The names of Triton's interpreter internals (or raw memory access) that ``kernel`` or a
    ``@triton.jit`` function of its module mentions: code the load accounting cannot vouch for."""
    from .device import is_kernel

    fns = [kernel.fn] + [v.fn for v in list(kernel.fn.__globals__.values()) if is_kernel(v) and v is not kernel]
    hits: set[str] = set()
    for fn in fns:
        try:
            hits.update(_INTERNALS.findall(inspect.getsource(fn)))
        except (OSError, TypeError):
            continue
    return sorted(hits)


def _span(values) -> str:
    lo, hi = int(np.min(values)), int(np.max(values))
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _program(p, dims: int) -> str:
    return f"program {p[0]}" if dims == 1 else f"program ({', '.join(str(i) for i in p[:dims])})"


def _strays(ledger: Ledger, dims: int, names: str) -> str | None:
    for program, kind, n in ledger.strays:
        verb = "read" if kind == "load" else "wrote"
        return (f"{_program(program, dims)} {verb} {n} element(s) outside {names}: an address that is "
                f"off, or a {kind} without a mask. On a GPU that touches memory the kernel does not own "
                f"(wrong values, or a crash).")
    return None


# ---------------------------------------------------------------------------------------------- 04
def check_softmax_reads(ledger: Ledger, *, n_rows: int, n_cols: int, x_width: int, y_width: int,
                        block_size: int, where: str) -> None:
    """Notebook 04's rule: program i reads row i of the input, every column once, nothing else,
    and writes row i of the output only.

    Args:
        ledger: from :func:`record` with buffers ``input`` and ``output``.
        x_width, y_width: the row strides (elements) of input and output in those buffers.
        block_size: the BLOCK_SIZE the launcher passed (next power of two of n_cols).
        where: the message prefix (kernel name and case).

    Raises:
        AssertionError: naming the program, the rule and what it did instead.
    """
    problem = _strays(ledger, 1, "the input and output rows")
    if problem:
        raise AssertionError(f"{where}: {problem}")
    by_program: dict[int, list[np.ndarray]] = {}
    for a in ledger.of("input"):
        by_program.setdefault(a.program[0], []).append(a.index)
    for a in ledger.of("output", "store"):
        rows = a.index // y_width
        other = rows[rows != a.program[0]]
        if other.size:
            raise AssertionError(
                f"{where}: program {a.program[0]} wrote row {int(other[0])} of the output. Notebook 04 "
                f"asks for one program per row: program i writes row i only.")
    for a in ledger.of("output"):
        raise AssertionError(
            f"{where}: program {a.program[0]} read from the output. Notebook 04 asks for one read of the "
            f"input and one write of the output; keep everything in between in registers.")
    for a in ledger.of("input", "store"):
        raise AssertionError(f"{where}: program {a.program[0]} wrote into the input; a kernel may only "
                             f"store to the output.")
    for p in range(n_rows):
        idx = np.concatenate(by_program.get(p, [np.zeros(0, np.int64)]))
        c = idx - p * x_width                       # offset from the start of the program's own row
        own = (c >= 0) & (c < n_cols)
        past = (c >= n_cols) & (c < max(block_size, n_cols + 1))
        other = ~own & ~past
        if other.any():
            rows = np.unique(idx[other] // x_width)
            rows = rows[rows != p]
            what = (f"row(s) {_span(rows)} of the input" if rows.size and rows.max() < n_rows
                    else "memory past the last row of the input")
            raise AssertionError(
                f"{where}: program {p} read {what}. Notebook 04 asks for one program per row: program "
                f"i reads row i only (grid (n_rows,)), so the rows are spread over the GPU's cores "
                f"instead of one program looping over them.")
        if past.any():
            raise AssertionError(
                f"{where}: program {p} read {int(past.sum())} element(s) past the end of its row (columns "
                f"{_span(c[past])}, but n_cols = {n_cols}). Mask the load with cols < n_cols and "
                f"other=-inf: an unmasked load followed by tl.where still reads memory that is not the "
                f"row's (on a GPU, another row, or past the end of the tensor).")
        counts = np.bincount(c[own], minlength=n_cols)
        if counts.max(initial=0) > 1:
            col = int(np.argmax(counts))
            raise AssertionError(
                f"{where}: program {p} read column {col} of its row {int(counts[col])} times. Notebook 04 "
                f"asks for one read of the row: load it once as one block, then take the max, the "
                f"exponentials, the sum and the quotient in registers (each extra pass over memory "
                f"costs as much as the whole kernel should).")
        if (counts == 0).any():
            raise AssertionError(
                f"{where}: program {p} read {int((counts > 0).sum())} of the {n_cols} columns of its row "
                f"(never columns {_span(np.nonzero(counts == 0)[0])}). Notebook 04 asks for the whole "
                f"row as one block of BLOCK_SIZE = next_power_of_2(n_cols) = {block_size} columns; a "
                f"fixed block size is right only up to that width.")


# ---------------------------------------------------------------------------------------------- 05
def check_flash_reads(ledger: Ledger, *, BH: int, T: int, D: int, causal: bool, block_m: int,
                      block_n: int, where: str) -> None:
    """Notebook 05's rules for K and V (contiguous (B, H, T, D) buffers named ``K`` and ``V``):
    program (m, bh) reads keys of head bh only, below T; at most ``block_n`` keys per load; each
    element at most once (one pass, with the online rescale); and, causal, no tile whose keys all
    lie past the program's last query row (those tiles are skipped, not loaded and masked).

    Raises:
        AssertionError: naming the program, the rule and what it did instead.
    """
    problem = _strays(ledger, 2, "Q, K, V, O and LSE")
    if problem:
        raise AssertionError(f"{where}: {problem}")
    seen: dict[tuple, list[np.ndarray]] = {}
    for name in ("K", "V"):
        for a in ledger.of(name):
            m, bh = a.program[0], a.program[1]
            who = _program(a.program, 2)
            key = a.index // D - bh * T               # key index inside this program's head
            if (key >= T).any():
                raise AssertionError(
                    f"{where}: {who} loaded {name} rows {_span(key[key >= T])}, past the last key "
                    f"(T = {T}). Mask the K and V loads with offs_n < T: rows past T belong to the next "
                    f"head or to no tensor at all, and masking only the scores does not stop the read.")
            if (key < 0).any():
                raise AssertionError(f"{where}: {who} loaded {name} rows of another (batch, head): add "
                                     f"bh * stride_bh to the K and V pointers.")
            keys = np.unique(key)
            if keys.size > block_n:
                raise AssertionError(
                    f"{where}: notebook 05 asks for key tiles of at most BLOCK_N = {block_n} keys: {who} "
                    f"loaded {keys.size} keys of {name} at once. Loop over the keys in tiles of BLOCK_N "
                    f"(a whole row of keys in one block is right only while it fits).")
            last_row = min((m + 1) * block_m, T) - 1
            if causal and keys.min() > last_row:
                raise AssertionError(
                    f"{where}: notebook 05 asks to skip the key tiles that no query of a tile can see: "
                    f"{who} (query rows {m * block_m}..{last_row}) loaded keys {_span(keys)} of {name}, "
                    f"all after its last row. End the causal loop at min(start_m + BLOCK_M, T) instead "
                    f"of loading these tiles and masking them (they are half the work).")
            seen.setdefault((name, a.program), []).append(a.index)
    for (name, program), parts in seen.items():
        counts = np.bincount(np.concatenate(parts) - program[1] * T * D)
        if counts.max(initial=0) > 1:
            key = int(np.argmax(counts)) // D
            raise AssertionError(
                f"{where}: notebook 05 asks for one pass over the keys: {_program(program, 2)} loaded key "
                f"{key} of {name} {int(counts.max())} times. Keep a running max and rescale l and acc "
                f"by exp(m_old - m_new) as it grows (the online softmax), instead of a first pass for "
                f"the max and a second for the sum.")


# ---------------------------------------------------------------------------------------------- 08
def _cache_position(index: np.ndarray, base: int, stride_kt: int, D: int):
    """Position t of flat element offsets in the (sequence, KV head) that starts at ``base``, and
    whether each offset lies in one of its rows (element d < D of a row ``stride_kt`` apart)."""
    rel = index - base
    return rel // stride_kt, rel % stride_kt < D


def check_decode_reads(ledger: Ledger, *, seqlens, H_kv: int, T_max: int, D: int, group: int,
                       keys_per_split: int, where: str, strides: tuple[int, int, int] | None = None) -> None:
    """Notebook 08's rules for the K and V caches ((B, H_kv, T_max, D) buffers named ``K`` and ``V``,
    at (batch, head, position) ``strides``, contiguous by default), for a split kernel launched on
    (B·H_kv, num_splits, row_blocks): program
    (bkv, split, rb) reads keys of sequence ``bkv // H_kv``, KV head ``bkv % H_kv`` only, inside its
    slice ``[split·keys_per_split, (split+1)·keys_per_split)`` and below that sequence's length
    (``seqlens[b]``); and it loads each K/V element **at most once**, so that one load serves all
    ``group`` query heads of the KV head (FlashDecoding's GQA packing: the group's g·T_q query rows
    are the BLOCK_M rows of the tile). Hence each element is read at most ``row_blocks`` times per
    launch, once in decoding (T_q = 1).

    Raises:
        AssertionError: naming the program, the rule and what it did instead.
    """
    problem = _strays(ledger, 3, "Q, K, V, SEQLENS, O_PART and LSE_PART")
    if problem:
        raise AssertionError(f"{where}: {problem}")
    strides = (H_kv * T_max * D, T_max * D, D) if strides is None else tuple(strides)
    seen: dict[tuple, list[np.ndarray]] = {}
    for name in ("K", "V"):
        for a in ledger.of(name):
            (bkv, split, _), who = a.program, _program(a.program, 3)
            base = (bkv // H_kv) * strides[0] + (bkv % H_kv) * strides[1]
            key, in_row = _cache_position(a.index, base, strides[2], D)  # key: position in the sequence
            if (key < 0).any() or not in_row.all():
                raise AssertionError(
                    f"{where}: {who} loaded {name} of another (sequence, KV head): program (bkv, split, rb) "
                    f"reads sequence bkv // H_kv, KV head bkv % H_kv, element (b, h, t, d) at b * stride_kb + "
                    f"h * stride_kh + t * stride_kt + d. Use the three strides the launcher passes: the "
                    f"cache need not be contiguous (here its (stride_kb, stride_kh, stride_kt) are {strides}).")
            b, lo = bkv // H_kv, split * keys_per_split
            past = key >= int(seqlens[b])
            if past.any():
                raise AssertionError(
                    f"{where}: {who} loaded {name} at positions {_span(key[past])} of sequence {b}, whose "
                    f"length is {int(seqlens[b])} (the cache holds {T_max}). Never load a key or value at "
                    f"or past SEQLENS[b]: mask the K and V loads (masking the scores does not stop the "
                    f"read; there the cache holds stale data, NaN, or nothing at all).")
            outside = (key < lo) | (key >= lo + keys_per_split)
            if outside.any():
                raise AssertionError(
                    f"{where}: {who} loaded keys {_span(key[outside])} of {name}, outside its slice "
                    f"{lo}..{lo + keys_per_split - 1}: each split's program reads its own slice of the "
                    f"keys only (split-K), so every key is read by one program.")
            seen.setdefault((name, a.program), []).append(a.index)
    for (name, program), parts in seen.items():
        index, counts = np.unique(np.concatenate(parts), return_counts=True)
        n = int(counts.max(initial=0))
        if n > 1:
            base = (program[0] // H_kv) * strides[0] + (program[0] % H_kv) * strides[1]
            key = int(_cache_position(index[np.argmax(counts)], base, strides[2], D)[0])
            why = (f"one pass over the slice per query head of the group (g = {group})" if n == group > 1
                   else "more than one pass over the slice")
            raise AssertionError(
                f"{where}: notebook 08 asks for each K/V tile to be loaded once for the whole GQA group: "
                f"{_program(program, 3)} loaded key {key} of {name} {n} times, as {why} does. Make the "
                f"g·T_q (query head, query) rows of the group the BLOCK_M rows of one Q tile, so that one "
                f"tl.load of each K/V tile and one tl.dot serve every head of the group: decoding time is "
                f"the time to read the cache, and each extra pass reads it again.")

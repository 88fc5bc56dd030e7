"""The checkers of notebooks 04-05 (Triton kernels), and the names notebooks import from ``attnlab.verify``.

Test cells choose the cases (sizes, block sizes, causal or not); these functions do the rest, the
same way for the visible and the hidden tests. Every reference comes from this package
(:mod:`attnlab.reference`), never from a notebook cell a learner can edit. Each kernel check runs the
one skeleton of :func:`attnlab.checking.harness.check_kernel`; the checkers of 01-03 live in
:mod:`attnlab.verify_pytorch` and are re-exported here, as are the harness's :func:`call_learner`,
:func:`kernel_device` and :func:`flag_internals`. Contracts: :mod:`attnlab.contracts`.
"""

from __future__ import annotations

import torch

from . import launch
from .checks import Case, assert_close, call_limit_s, randn, tolerance
from .checking.harness import (CPU_CASE_ELEMENTS, KernelCheck, Tail, call_learner, check_kernel, flag_internals,
                               kernel_device)
from .checking.hints import (diagnosed, head_offset_hint, log2e_hint, padding_zero_hint, row_stride_hint,
                             unmasked_keys_hint, zero_max_hint)
from .checking.loads import check_flash_reads, check_races, check_softmax_reads
from .checking.poisoned import GUARD, guarded, with_tail
from .checking.work_models import check_work, flash_forward_model, softmax_model
from .reference import naive_attention
from .verify_pytorch import (REGIMES, check_attention_gradcheck, check_autograd_attention, check_flash_backward,
                             check_flash_forward, check_online_softmax, growing_scores, seeded_qkv, shape_scores)

__all__ = [
    "check_online_softmax", "check_flash_forward", "check_flash_backward", "check_autograd_attention",
    "check_attention_gradcheck",
    "check_softmax_kernel", "check_flash_kernel", "call_limit_s", "shape_scores", "shift_scores",
    "check_flash_kernel_large_offsets", "check_softmax_kernel_large_offsets", "call_learner", "kernel_device",
    "flag_internals", "REGIMES",
    "growing_scores", "CPU_CASE_ELEMENTS", "flash_tolerance",
]


# ---------------------------------------------------------------------------------------------- 04
_PEAKS = ("first", "middle", "last")


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

    Contract: ``attnlab.contracts.softmax_kernel``.
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

    def written_outside() -> None:
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

    def reads(ledger, where: str) -> None:
        check_softmax_reads(ledger, n_rows=n_rows, n_cols=n_cols, x_width=x_width, y_width=width,
                            block_size=block, where=where)
        check_races(ledger, where=where, dims=1)

    # no dot product here, so no tf32: float32 is held to 1e-5 on a GPU too
    tol = 1e-5 if dtype == torch.float32 else tolerance(dtype, device)
    check_kernel(KernelCheck(
        what="_softmax_kernel", case=case, launch=launch.run_softmax_kernel, args=(kernel, x_in, y), key=kernel,
        device=device, accounted=accounted, buffers={"input": x_buf, "output": y_buf},
        written_outside=written_outside, internals=((kernel, "_softmax_kernel", "04"),), reads=reads,
        compare=lambda: diagnosed(lambda: assert_close(y.cpu(), expected, name="softmax", case=case, tol=tol),
                                  lambda: padding_zero_hint(y.cpu(), x, block, tol)),
        work=lambda ledger, where: check_work(ledger, softmax_model(n_rows=n_rows, n_cols=n_cols, x_width=x_width,
                                                                    block=block, x_len=x_buf.numel()), where=where)))


_FAR_ROWS = 3  # row 2 of three rows 2^30 elements apart starts at element 2^31


def check_softmax_kernel_large_offsets(kernel, *, n_cols: int = 37, seed: int = 0):
    """Check a ``_softmax_kernel`` where ``row * input_row_stride`` passes 2³¹ elements.

    Three float32 rows of ``n_cols`` columns, 2³⁰ elements apart in both input and output (row strides
    2³⁰), so row 2 starts at element 2³¹: an offset computed in 32 bits (``tl.program_id(0)`` times an
    int32 stride) wraps around there. Only the rows exist (:mod:`attnlab.checking.sparse`: each row's
    input, then its output ``BLOCK_SIZE`` elements later, in one piece). Launched as the course launcher
    does (grid (3,), BLOCK_SIZE the next power of two of ``n_cols``), on the CPU through Triton's
    interpreter on every machine, under the load accounting, which switches off every lane outside
    those pieces (a wrapped offset reads and writes nothing instead of crashing). Where the memory
    cannot be placed (not Linux) it prints why and checks nothing.

    Raises:
        AssertionError: a row of the output wrong (or unwritten); when the rows below 2³¹ are right and
            the one past it is wrong, saying to widen the row index to 64 bits.
    """
    import triton

    from .checking import sparse
    from .checking.hints import int32_offset_hint

    block = triton.next_power_of_2(n_cols)
    stride = 2**30
    try:
        mem = sparse.spread([r * stride for r in range(_FAR_ROWS)], 2 * block, torch.float32,
                            span=(_FAR_ROWS - 1) * stride + 2 * block)
    except OSError as exc:
        print(f"(the large-offset case of _softmax_kernel is skipped here: {exc})")
        return
    for p in mem.pieces:
        p.fill_(float("nan"))
    x = mem.whole.as_strided((_FAR_ROWS, n_cols), (stride, 1), 0)
    y = mem.whole.as_strided((_FAR_ROWS, n_cols), (stride, 1), block)
    x64 = randn(_FAR_ROWS, n_cols, seed=seed) * 3.0
    for r, p in enumerate(mem.pieces):  # only the pieces are written
        p[:n_cols] = x64[r].to(torch.float32)
    expected = torch.softmax(x64.to(torch.float32).double(), dim=-1)
    case = Case(n_rows=_FAR_ROWS, n_cols=n_cols, dtype="float32", row_stride=stride,
                launched="three rows, the last starting at element 2^31")
    buffers = {f"row {r}": p for r, p in enumerate(mem.pieces)}

    def run():
        runnable = launch.prepare_kernel(kernel, "_softmax_kernel", {"x": x, "y": y}, "_softmax_kernel")
        runnable[(_FAR_ROWS,)](y, x, stride, stride, n_cols, BLOCK_SIZE=block)

    check_kernel(KernelCheck(what="_softmax_kernel", case=case, launch=run, key=kernel, accounted=True,
                             buffers=buffers))
    got = torch.stack([p[block:block + n_cols].clone() for p in mem.pieces]).double()
    far = [r * stride >= 2**31 for r in range(_FAR_ROWS)]
    diagnosed(lambda: assert_close(got, expected, name="softmax", case=case, tol=1e-5),
              lambda: int32_offset_hint(got, expected, 1e-5, far=far, what="row * input_row_stride",
                                        fix="row = tl.program_id(0).to(tl.int64)"))


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


def flash_tolerance(dtype, device, *, growing: bool = False, offset: float = 0.0) -> float:
    """The relative tolerance :func:`check_flash_kernel` compares with (see its docstring).

    ``device`` is a string (``"cuda"``, ``"cuda:1"``, ``"cpu"``) or a ``torch.device``; only its type counts.
    """
    tol = tolerance(dtype, device)
    if growing and dtype == torch.float32 and torch.device(device).type == "cuda":
        # tf32 rounds the scores to ~2^-11 relative; at scores near 50 that is a few percent of
        # each probability. A missing rescale is off by O(1), so this still catches it.
        tol = 5e-2
    if offset:
        tol = max(tol, 1e-4)
    return tol


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

    Contract: ``attnlab.contracts.flash_fwd_kernel``.
    """
    device, accounted = kernel_device(device, dtype=dtype, elements=B * H * T * T)
    case = Case(B=B, H=H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n,
                dtype=str(dtype).replace("torch.", ""))
    q, k, v = seeded_qkv(B, H, T, T, D, seed=seed)
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
    o, o_buf = guarded((B, H, T, D), block_m * D, dtype, device)  # room for every row of one padded tile
    lse, lse_buf = guarded((B, H, T), block_m, torch.float32, device)

    def past_the_end() -> str:
        why = head_offset_hint(B * H, lambda: _one_head_stays_inside(kernel, inputs, causal=causal, block_m=block_m,
                                                                    block_n=block_n))
        return (f"_flash_fwd_kernel [{case}]: wrote past the last row of O or LSE: "
                f"{why or 'padded rows (offs_m >= T) must be masked out of the stores'}")

    def reads(ledger, where: str) -> None:
        check_flash_reads(ledger, BH=B * H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n,
                          where=where)
        check_races(ledger, where=where)

    tol = flash_tolerance(dtype, device, growing=growing, offset=offset)

    def compare() -> None:
        diagnosed(lambda: assert_close(o.cpu(), o_ref.cpu(), name="O", case=case, tol=tol),
                  lambda: log2e_hint(o.cpu(), *inputs, causal=causal, tol=tol),
                  lambda: unmasked_keys_hint(o.cpu(), *inputs, causal=causal, block_n=block_n, tol=max(tol, 1e-5)),
                  lambda: zero_max_hint(o.cpu(), *inputs, causal=causal, scale=None))
        assert_close(lse.cpu(), lse_ref.cpu(), name="LSE (natural log)", case=case, tol=max(tol, 1e-5))

    check_kernel(KernelCheck(
        what="_flash_fwd_kernel", case=case, launch=launch.run_flash_kernel, args=(kernel, q, k, v, o, lse),
        kwargs=dict(causal=causal, block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages),
        key=kernel, device=device, accounted=accounted,
        buffers={"Q": q_buf, "K": k_buf, "V": v_buf, "O": o_buf, "LSE": lse_buf},
        tails=(Tail(o_buf, o.numel(), past_the_end), Tail(lse_buf, lse.numel(), past_the_end)),
        inputs={"Q": q, "K": k, "V": v},
        input_written="{what} [{case}]: wrote into its input {name}: a kernel may only store to O and LSE",
        internals=((kernel, "_flash_fwd_kernel", "05"),), reads=reads, compare=compare,
        # after the numbers: a wrong result's diagnosis (e.g. m started at 0, where every exp underflows and
        # the products change nothing) names the bug better than "products never stored" would
        work=lambda ledger, where: check_work(ledger, flash_forward_model(
            B=B, H=H, T=T, D=D, causal=causal, block_m=block_m, block_n=block_n, buffer_len=k_buf.numel()),
            where=where)))


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

    # the ledger switches off every lane outside the rows that exist: accounted, whatever the machine
    check_kernel(KernelCheck(what="_flash_fwd_kernel", case=case, launch=run, key=kernel, accounted=True,
                             buffers=buffers))
    o, got_lse = t["O"][:, :, :block_m].clone(), lse[:, :, :block_m].clone()
    far = [(h + 1) * T * D > 2**31 for h in range(heads)]

    def wraps(got, want):
        return lambda: int32_offset_hint(got, want, 1e-5, far=far, what="bh * stride_bh",
                                         fix="bh = tl.program_id(1).to(tl.int64)")

    diagnosed(lambda: assert_close(o, o_ref[:, :, :block_m], name="O", case=case, tol=1e-5),
              wraps(o, o_ref[:, :, :block_m]))
    diagnosed(lambda: assert_close(got_lse, lse_ref[:, :, :block_m], name="LSE (natural log)", case=case, tol=1e-5),
              wraps(got_lse, lse_ref[:, :, :block_m]))
